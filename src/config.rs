//! Typed settings: layering, LibreChat's variable names, validation, redaction.
//!
//! Layers, lowest first: built-in defaults (`config/default.toml`, compiled in)
//! < `config/default.toml` in the working directory < `--config FILE` <
//! LibreChat's variables (`MONGO_URI`, …) < `RECONCILER__SECTION__KEY`.
//! The merged layers deserialize (serde) straight into [`Settings`], whose
//! parts are the types the code uses ([`LeaseOptions`], [`FollowOptions`],
//! …), each value read by `crate::setting`; unknown keys are refused
//! (`deny_unknown_fields`). The rules that tie settings together run after
//! that ([`Settings::complete`]). Everything is checked here, before
//! anything connects: a bad value yields one [`ConfigError`] naming the key,
//! the value and what is allowed. That includes what the clients would
//! refuse later: the MongoDB URI is parsed by the driver's own parser (only a
//! `mongodb+srv://` DNS lookup is left to connecting), the master key must
//! fit an HTTP header. Secrets (the master key, credentials and
//! secret-bearing options in the MongoDB URI) are held in [`Secret`] /
//! [`MongoUri`], whose `Debug` and `Display` never show them, and are kept out
//! of every error ([`shown`]). LibreChat's own sync settings that change one
//! of this service's ([`LIBRECHAT_TUNING_VARS`]) are recorded in
//! [`Settings::librechat_overrides`], for the CLI to say so once at start.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use config::{Config, Environment, File, FileFormat, Value, ValueKind};
use serde::{de::Error as _, Deserialize, Deserializer};

use crate::lease::LeaseOptions;
use crate::librechat::{self, Rules};
use crate::setting::{self, STRING};

mod error;
mod mongo_uri;

pub use crate::setting::DEFAULTS_TOML;
pub use error::ConfigError;
pub(crate) use mongo_uri::{redact_uri, MongoUri};

/// Most `sync.ack_writers`: each holds a connection of the driver's pool.
const MAX_ACK_WRITERS: u64 = 16;

/// Prefix of the environment form of every key.
pub const ENV_PREFIX: &str = "RECONCILER";

/// LibreChat's variable names and the keys they set.
///
/// `MEILI_NO_SYNC` is deliberately not here: it is LibreChat's switch for its
/// own in-process sync, which operators turn off beside this service. It must
/// not change what this service does (see [`LIBRECHAT_NO_SYNC`]).
pub const LIBRECHAT_VARS: &[(&str, &str)] = &[
    ("MONGO_URI", "mongo.uri"),
    ("MEILI_HOST", "meili.host"),
    ("MEILI_MASTER_KEY", "meili.master_key"),
    ("MEILI_SYNC_THRESHOLD", "sync.threshold"),
    ("MEILI_SYNC_BATCH_SIZE", "sync.batch_docs"),
    ("MEILI_SYNC_DELAY_MS", "sync.delay"),
    ("SEARCH", "sync.enabled"),
];

/// LibreChat's variables that tune LibreChat's own sync and, read here,
/// this service's too, with other defaults: LibreChat's are 100 documents a
/// batch (`MEILI_SYNC_BATCH_SIZE`), 100 ms between batches
/// (`MEILI_SYNC_DELAY_MS`) and 1000 (`MEILI_SYNC_THRESHOLD`). A value meant
/// for LibreChat in the shared `.env` would change this service silently:
/// each one that sets a value other than the one it replaces is reported
/// ([`Settings::librechat_overrides`], logged once at start). The other
/// variables of [`LIBRECHAT_VARS`] mean the same thing to both (the servers,
/// the key, `SEARCH`, whose `false` is logged on its own).
pub const LIBRECHAT_TUNING_VARS: &[&str] = &[
    "MEILI_SYNC_THRESHOLD",
    "MEILI_SYNC_BATCH_SIZE",
    "MEILI_SYNC_DELAY_MS",
];

/// LibreChat's switch for its own start-up sync. Read only to log, once, that
/// LibreChat's in-process sync is off ([`Settings::librechat_sync_off`]); plan
/// only is `sync.plan_only` (`RECONCILER__SYNC__PLAN_ONLY`) or `plan`.
pub const LIBRECHAT_NO_SYNC: &str = "MEILI_NO_SYNC";

/// A secret string: `Debug`/`Display` print `***`, never the value.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The secret itself, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { "\"\"" } else { "***" })
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Auto,
    Pretty,
    Json,
}

impl<'de> Deserialize<'de> for LogFormat {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        setting::variant(d, "auto, pretty or json")
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MongoSettings {
    /// Unset (`""`) only where search is off ([`Settings::complete`]).
    pub uri: MongoUri,
    /// After loading, never empty: `""` is the URI's database, else `LibreChat`.
    #[serde(deserialize_with = "setting::text")]
    pub database: String,
    #[serde(deserialize_with = "setting::positive_duration")]
    pub connect_timeout: Duration,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeiliSettings {
    /// Without a trailing `/`; empty only where search is off.
    #[serde(deserialize_with = "meili_host")]
    pub host: String,
    #[serde(deserialize_with = "master_key")]
    pub master_key: Secret,
    #[serde(deserialize_with = "index_prefix")]
    pub index_prefix: String,
    #[serde(deserialize_with = "filterable_attributes")]
    pub filterable_attributes: Vec<String>,
    #[serde(deserialize_with = "setting::positive_duration")]
    pub request_timeout: Duration,
}

fn meili_host<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let allowed = "an http:// or https:// URL such as http://127.0.0.1:7700";
    setting::parse(d, STRING, allowed, |host| {
        let url = url::Url::parse(host).ok();
        let valid = url.is_some_and(|u| {
            matches!(u.scheme(), "http" | "https") && u.host_str().is_some_and(|h| !h.is_empty())
        });
        (valid || host.is_empty()).then(|| host.trim_end_matches('/').to_string())
    })
}

/// Sent as `Authorization: Bearer <key>`: a character no HTTP header may
/// hold would fail every request (the SDK panics on it).
fn master_key<'de, D: Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
    let key = setting::text(d)?;
    if let Some(c) = key.chars().find(|c| !(' '..='~').contains(c)) {
        let what = if c.is_control() {
            "a control character"
        } else {
            "a non-ASCII character"
        };
        return Err(D::Error::custom(format!(
            "printable ASCII characters only (letters, digits, punctuation; it is sent in the HTTP header \
             `Authorization: Bearer <key>`), but the key holds {what}: check MEILI_MASTER_KEY \
             (or RECONCILER__MEILI__MASTER_KEY)"
        )));
    }
    Ok(Secret(key))
}

fn index_prefix<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let allowed =
        "empty, or up to 200 characters of A-Z a-z 0-9 _ - (it starts Meilisearch index uids)";
    setting::parse(d, STRING, allowed, |prefix| {
        let valid = prefix.len() <= 200
            && (prefix.chars()).all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        valid.then(|| prefix.to_string())
    })
}

fn filterable_attributes<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let allowed =
        "a list of attribute names that includes \"user\" (LibreChat filters every search by user)";
    let with_user = Some(setting::list(d)?).filter(|names| names.iter().any(|n| n == "user"));
    with_user.ok_or_else(|| D::Error::custom(allowed))
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncSettings {
    #[serde(deserialize_with = "setting::whole::<1, { u64::MAX }, _, _>")]
    pub batch_docs: usize,
    #[serde(deserialize_with = "setting::size")]
    pub batch_bytes: usize,
    #[serde(deserialize_with = "setting::whole::<1, { u64::MAX }, _, _>")]
    pub in_flight: usize,
    /// At least `batch_bytes` ([`Settings::complete`]).
    #[serde(deserialize_with = "setting::size")]
    pub max_bytes_in_flight: usize,
    #[serde(deserialize_with = "setting::size")]
    pub compare_memory: usize,
    #[serde(deserialize_with = "setting::whole::<1, MAX_ACK_WRITERS, _, _>")]
    pub ack_writers: usize,
    #[serde(deserialize_with = "setting::whole::<0, { u64::MAX }, _, _>")]
    pub threshold: u64,
    #[serde(deserialize_with = "setting::duration")]
    pub delay: Duration,
    #[serde(deserialize_with = "setting::boolean")]
    pub enabled: bool,
    #[serde(deserialize_with = "setting::boolean")]
    pub plan_only: bool,
    /// `""`: none.
    #[serde(deserialize_with = "exclusion_path")]
    messages_exclusion_path: Option<String>,
    #[serde(deserialize_with = "exclusion_path")]
    conversations_exclusion_path: Option<String>,
    #[serde(deserialize_with = "schema_version")]
    pub schema_version: i32,
}

impl SyncSettings {
    /// LibreChat's configurable rules: exclusion paths, schema version.
    pub fn rules(&self) -> Rules {
        Rules {
            messages_exclusion_path: self.messages_exclusion_path.clone(),
            conversations_exclusion_path: self.conversations_exclusion_path.clone(),
            schema_version: self.schema_version,
        }
    }
}

/// A field whose presence keeps a document out of search; `""`: none.
fn exclusion_path<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let path = setting::text(d)?;
    if path.is_empty() {
        return Ok(None);
    }
    librechat::check_exclusion_path(&path).map_err(|why| {
        D::Error::custom(format!(
            "a top-level field name such as subagentTask, or \"\" for none (it {why})"
        ))
    })?;
    Ok(Some(path))
}

/// The projection's schema version LibreChat's markers carry.
fn schema_version<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    let allowed = format!(
        "a whole number from 1 to {} (LibreChat's is 1; raising it re-sends every document)",
        i32::MAX
    );
    setting::parse(d, setting::NUMBER, allowed, |t| {
        t.parse().ok().filter(|n| *n >= 1)
    })
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeSettings {
    #[serde(deserialize_with = "listen")]
    pub listen: SocketAddr,
    #[serde(deserialize_with = "setting::positive_duration")]
    pub interval: Duration,
    #[serde(deserialize_with = "setting::positive_duration")]
    pub grace: Duration,
    /// Follow change streams between reconciliations (`run` only).
    #[serde(deserialize_with = "setting::boolean")]
    pub follow: bool,
}

fn listen<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    let allowed = "an IP address and port such as 127.0.0.1:9464 or 0.0.0.0:9464";
    setting::parse(d, STRING, allowed, |t| t.parse().ok())
}

/// `follow.pre_images`: whether change events carry the document as it was
/// before the change (`changeStreamPreAndPostImages`, MongoDB 6.0+), which
/// is how a delete names the Meilisearch document it removes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PreImages {
    /// Use them on collections that have them enabled.
    Auto,
    /// Enable them at start (`collMod`, needs that privilege), then use them.
    Enable,
    /// Never ask for them.
    Off,
}

impl<'de> Deserialize<'de> for PreImages {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let allowed = "auto (use them where the collections have them), enable (turn them on with collMod) or off";
        setting::variant(d, allowed)
    }
}

/// The knobs of follow mode (`[follow]`, docs/design.md §4.12), and the two
/// of other sections it keeps to.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FollowOptions {
    /// A micro-batch is applied once it holds this many documents...
    #[serde(deserialize_with = "setting::whole::<1, { u64::MAX }, _, _>")]
    pub max_docs: usize,
    /// ...or once its first change is this old.
    #[serde(deserialize_with = "setting::positive_duration")]
    pub max_wait: Duration,
    pub pre_images: PreImages,
    /// The id-set comparison for deletes without a pre-image runs at most
    /// this often.
    #[serde(deserialize_with = "setting::duration")]
    pub orphan_check_every: Duration,
    /// `serve.interval` (set by [`Settings::complete`]): the periodic
    /// reconciliation, and how fresh the last one must be to resume from a
    /// saved token without reconciling.
    #[serde(skip)]
    pub(crate) interval: Duration,
    /// `lease.poll_every` (set by [`Settings::complete`]): how often the
    /// owner looks for a handover request.
    #[serde(skip)]
    pub(crate) poll_every: Duration,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    pub format: LogFormat,
}

/// Every setting, validated.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub mongo: MongoSettings,
    pub meili: MeiliSettings,
    /// `[lease]`, with this replica's owner id.
    pub lease: LeaseOptions,
    pub sync: SyncSettings,
    pub serve: ServeSettings,
    pub follow: FollowOptions,
    pub log: LogSettings,
    /// LibreChat's `MEILI_NO_SYNC` is `true` (as LibreChat reads it: the text
    /// `true`, any case): its in-process sync is off, the recommended set-up
    /// beside this service. Changes nothing here; the CLI logs it at start.
    #[serde(skip)]
    pub librechat_sync_off: bool,
    /// Each of [`LIBRECHAT_TUNING_VARS`] that set a setting to another value
    /// than the one it replaced (the CLI logs each once, at start).
    #[serde(skip)]
    pub librechat_overrides: Vec<LibreChatOverride>,
}

/// A LibreChat variable that set one of this service's settings to a value
/// other than the one below it (the default, or a configuration file's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LibreChatOverride {
    /// The variable, e.g. `MEILI_SYNC_BATCH_SIZE`.
    pub var: &'static str,
    /// Its value as given.
    pub value: String,
    /// The setting it set, e.g. `sync.batch_docs`.
    pub key: &'static str,
    /// The setting's value now, e.g. `100ms` for `MEILI_SYNC_DELAY_MS=100`.
    pub set_to: String,
    /// The value it replaced.
    pub replaced: String,
    /// Whether that was the built-in default (else a configuration file's).
    replaced_default: bool,
}

impl fmt::Display for LibreChatOverride {
    /// One line: the variable, its value, what it replaced, what to do.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let replaced = if self.replaced_default {
            format!("the default {}", self.replaced)
        } else {
            format!("{} from the configuration file", self.replaced)
        };
        write!(
            f,
            "{var}={value}, LibreChat's setting for its own sync, sets this service's {key} to {set_to} \
             in place of {replaced}; to choose this service's value set {own} (it wins over {var}), \
             or unset {var} where this service runs",
            var = self.var,
            value = self.value,
            key = self.key,
            set_to = self.set_to,
            own = env_var_of(self.key),
        )
    }
}

/// The environment variable of a `section.key` setting:
/// `RECONCILER__SECTION__KEY`.
pub fn env_var_of(key: &str) -> String {
    let key = key.replace('.', "__").to_ascii_uppercase();
    format!("{ENV_PREFIX}__{key}")
}

/// Where settings come from besides the built-in defaults.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    /// Directory searched for `config/default.toml` (the working directory
    /// in production; `None` skips that layer).
    pub base_dir: Option<PathBuf>,
    /// `--config FILE`.
    pub config_file: Option<PathBuf>,
    /// The process environment (passed in so tests need not mutate it).
    pub env: HashMap<String, String>,
}

impl Sources {
    /// The production sources: working directory, an optional file, the real environment.
    pub fn from_process(config_file: Option<PathBuf>) -> Self {
        Sources {
            base_dir: std::env::current_dir().ok(),
            config_file,
            env: std::env::vars().collect(),
        }
    }
}

/// Loads, layers and validates the settings.
pub fn load(sources: &Sources) -> Result<Settings, ConfigError> {
    let path = sources.config_file.as_deref().map(Path::display);
    let path = path.map_or("config/default.toml".into(), |p| p.to_string());
    let file_error = |e: config::ConfigError| ConfigError::File {
        path: path.clone(),
        reason: e.to_string(),
    };
    let mut builder = Config::builder().add_source(File::from_str(DEFAULTS_TOML, FileFormat::Toml));
    if let Some(path) = sources.config_file.as_ref().filter(|path| !path.is_file()) {
        return Err(ConfigError::File {
            path: path.display().to_string(),
            reason: "no such file".into(),
        });
    }
    let local = (sources.base_dir.as_ref()).map(|dir| dir.join("config/default.toml"));
    let local = local.filter(|path| path.is_file());
    for path in local.iter().chain(&sources.config_file) {
        builder = builder.add_source(File::from(path.clone()).format(FileFormat::Toml));
    }
    // The files alone: what a LibreChat variable replaces.
    let files = builder.clone().build().map_err(file_error)?;
    let librechat = librechat_layer(&sources.env)?;
    builder = builder.add_source(librechat.clone());
    let mut env_map = sources.env.clone();
    env_map.retain(|var, _| var.starts_with(&format!("{ENV_PREFIX}__")));
    let own_env = Environment::with_prefix(ENV_PREFIX)
        .prefix_separator("__")
        .separator("__")
        .source(Some(env_map));
    let own_env_map = config::Source::collect(&own_env).unwrap_or_default();
    let own_keys: Vec<String> = own_env_map.into_keys().collect();
    builder = builder.add_source(own_env);
    let merged = builder.build().map_err(file_error)?;
    let settings: Settings =
        (merged.clone().try_deserialize()).map_err(|error| refused(error, &merged, sources))?;
    let mut settings = settings.complete(&merged)?;
    let no_sync = sources.env.get(LIBRECHAT_NO_SYNC);
    settings.librechat_sync_off = no_sync.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    settings.librechat_overrides = librechat_overrides(&sources.env, &files, &librechat, &own_keys);
    Ok(settings)
}

/// The settings of the compiled-in defaults alone, as deserialized (no
/// server is set, and [`Settings::complete`] has not run): the defaults of
/// options built without a configuration.
pub(crate) fn built_in() -> Settings {
    let defaults = setting::defaults().try_deserialize();
    defaults.expect("the compiled-in defaults deserialize")
}

impl Settings {
    /// The rules that tie settings together, checked once each has been
    /// read, and the values taken from other settings.
    fn complete(mut self, raw: &Config) -> Result<Self, ConfigError> {
        // With search off (`SEARCH=false`) no server is reached: a replica
        // whose `.env` names none must still start and say so.
        let missing = |key: &str, var: &str, example: &str| ConfigError::Missing {
            key: key.into(),
            hint: format!("set {var} (or {}), e.g. {example}", env_var_of(key)),
        };
        if self.sync.enabled && !self.mongo.uri.is_set() {
            let example = "mongodb://127.0.0.1:27017/LibreChat";
            return Err(missing("mongo.uri", "MONGO_URI", example));
        }
        if self.sync.enabled && self.meili.host.is_empty() {
            return Err(missing("meili.host", "MEILI_HOST", "http://127.0.0.1:7700"));
        }
        let mongo = &mut self.mongo;
        if mongo.database.is_empty() {
            let named = mongo.uri.database.clone();
            mongo.database = named.unwrap_or_else(|| "LibreChat".into());
        }
        if mongo.database.contains(['/', '\\', '.', ' ', '"', '$']) || mongo.database.len() > 63 {
            return Err(ConfigError::invalid(
                "mongo.database",
                mongo.database.clone(),
                "a MongoDB database name: at most 63 characters, none of / \\ . \" $ or space",
            ));
        }
        (self.lease.check_timings())
            .map_err(|e| ConfigError::invalid(e.key, shown(raw, e.key), e.allowed))?;
        if self.sync.max_bytes_in_flight < self.sync.batch_bytes {
            let batch_bytes = shown(raw, "sync.batch_bytes");
            let allowed = format!("a size ≥ sync.batch_bytes ({batch_bytes}) such as \"256MiB\"");
            let key = "sync.max_bytes_in_flight";
            return Err(ConfigError::invalid(key, shown(raw, key), allowed));
        }
        self.follow.interval = self.serve.interval;
        self.follow.poll_every = self.lease.poll_every;
        Ok(self)
    }
}

/// The error of deserializing the merged layers, said as [`ConfigError`]:
/// the key, the value as given ([`shown`]) and what is allowed (the
/// message of `crate::setting`), or the unknown key and the variable that
/// set it.
fn refused(error: config::ConfigError, raw: &Config, sources: &Sources) -> ConfigError {
    let (at, message) = match error {
        config::ConfigError::At {
            error,
            key: Some(key),
            ..
        } => (key, error.to_string()),
        // A section given one value (its serde message would show the
        // value), or a key missing because a layer did so.
        config::ConfigError::Type { key: Some(key), .. } => (key, String::new()),
        config::ConfigError::NotFound(key) => (
            key.split('.').next().unwrap_or_default().into(),
            String::new(),
        ),
        other => (String::new(), other.to_string()),
    };
    let unknown = message.strip_prefix("unknown field `");
    let unknown = unknown.and_then(|rest| Some(rest.split_once('`')?.0));
    if unknown.is_none() && at.contains('.') {
        return ConfigError::invalid(&at, shown(raw, &at), message);
    }
    // An unknown key (the first it holds, when a table), or a section that
    // is not a table of settings.
    let key = match unknown {
        None => at,
        Some(field) => {
            let key = [at.as_str(), field].join(".");
            let key = key.trim_start_matches('.');
            let first = raw.get_table(key).ok().and_then(|t| t.into_keys().min());
            first.map_or(key.to_string(), |first| format!("{key}.{first}"))
        }
    };
    let var = env_var_of(&key);
    ConfigError::Unknown {
        var: (sources.env.keys())
            .find(|v| v.eq_ignore_ascii_case(&var))
            .cloned(),
        known: known_keys().join(", "),
        key,
    }
}

/// The value of `key` as given, for an error: a table or list as TOML
/// writes it, the master key never, a URI without its credentials.
fn shown(raw: &Config, key: &str) -> String {
    let Ok(value) = raw.get::<Value>(key) else {
        return String::new();
    };
    match (&value.kind, key) {
        (_, "meili.master_key") => "***".into(),
        (ValueKind::String(uri), "mongo.uri" | "meili.host") => redact_uri(uri),
        (_, "mongo.uri") => "***".into(),
        (ValueKind::String(text), _) => text.clone(),
        _ => render(&value),
    }
}

/// Each of [`LIBRECHAT_TUNING_VARS`] that is what sets its setting (no
/// `RECONCILER__` variable sets it too) to another value than the files'.
fn librechat_overrides(
    env: &HashMap<String, String>,
    files: &Config,
    librechat: &Config,
    own_keys: &[String],
) -> Vec<LibreChatOverride> {
    let defaults = setting::defaults();
    LIBRECHAT_VARS
        .iter()
        .filter(|(var, _)| LIBRECHAT_TUNING_VARS.contains(var))
        .filter(|(_, key)| !own_keys.iter().any(|own| own == key))
        .filter_map(|(var, key)| {
            let value = env.get(*var)?.trim();
            let set_to = librechat.get_string(key).ok()?;
            let replaced = files.get_string(key).ok()?;
            if same_setting(&set_to, &replaced) {
                return None;
            }
            let replaced_default =
                (defaults.get_string(key)).is_ok_and(|default| same_setting(&default, &replaced));
            Some(LibreChatOverride {
                var,
                value: value.to_string(),
                key,
                set_to,
                replaced,
                replaced_default,
            })
        })
        .collect()
}

/// Whether two written values of one setting are the same value: as whole
/// numbers, as durations, or else as text.
fn same_setting(a: &str, b: &str) -> bool {
    let (a, b) = (a.trim(), b.trim());
    if let (Ok(a), Ok(b)) = (a.parse::<u64>(), b.parse::<u64>()) {
        return a == b;
    }
    if let (Ok(a), Ok(b)) = (humantime::parse_duration(a), humantime::parse_duration(b)) {
        return a == b;
    }
    a.eq_ignore_ascii_case(b)
}

/// LibreChat's variables, as a layer between the files and `RECONCILER__…`.
fn librechat_layer(env: &HashMap<String, String>) -> Result<Config, ConfigError> {
    let mut layer = Config::builder();
    for (var, key) in LIBRECHAT_VARS {
        let Some(value) = env.get(*var).filter(|v| !v.trim().is_empty()) else {
            continue;
        };
        let value = if *var == "MEILI_SYNC_DELAY_MS" {
            let allowed = "MEILI_SYNC_DELAY_MS takes a whole number of milliseconds, e.g. 250";
            let refused = |_| ConfigError::invalid("sync.delay", value, allowed);
            let ms: u64 = value.trim().parse().map_err(refused)?;
            format!("{ms}ms")
        } else {
            value.clone()
        };
        let layered = layer.set_override(*key, value);
        layer = layered.expect("static keys are valid paths");
    }
    let built = layer.build();
    Ok(built.expect("string overrides of static keys build"))
}

/// A value as TOML would write it: `{ a = 1 }`, `["a", "b"]`, `"text"`.
fn render(value: &Value) -> String {
    match &value.kind {
        ValueKind::String(s) => format!("{s:?}"),
        ValueKind::Array(items) => format!(
            "[{}]",
            items.iter().map(render).collect::<Vec<_>>().join(", ")
        ),
        ValueKind::Table(entries) => {
            let entries = entries.iter().map(|(k, v)| format!("{k} = {}", render(v)));
            let mut entries: Vec<String> = entries.collect();
            entries.sort();
            format!("{{ {} }}", entries.join(", "))
        }
        _ => value.to_string(),
    }
}

/// Every `section.key` of the built-in defaults: the only keys accepted.
pub fn known_keys() -> Vec<String> {
    let defaults = setting::defaults().cache.into_table();
    let sections = defaults.expect("the built-in defaults are a table");
    let mut keys: Vec<String> = (sections.into_iter())
        .flat_map(|(section, value)| {
            let keys = value.into_table().unwrap_or_default().into_keys();
            keys.map(move |key| format!("{section}.{key}"))
        })
        .collect();
    keys.sort();
    keys
}

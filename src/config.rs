//! Typed settings: layering, LibreChat's variable names, validation, redaction.
//!
//! Layers, lowest first: built-in defaults (`config/default.toml`, compiled in)
//! < `config/default.toml` in the working directory < `--config FILE` <
//! LibreChat's variables (`MONGO_URI`, …) < `RECONCILER__SECTION__KEY`.
//! Everything is parsed and validated here, before anything connects: a bad
//! value yields one [`ConfigError`] naming the key, the value and what is
//! allowed. That includes what the clients would refuse later: the MongoDB
//! URI is parsed by the driver's own parser (only a `mongodb+srv://` DNS
//! lookup is left to connecting), the master key must fit an HTTP header, and
//! a table or list given where one value belongs is refused (a number or
//! boolean given for a string setting is taken as its text, as from an
//! environment variable). Secrets (the master key, credentials and
//! secret-bearing options in the MongoDB URI) are held in [`Secret`] /
//! [`MongoUri`], whose `Debug` and `Display` never show them, and are kept out
//! of every error. LibreChat's own sync settings that change one of this
//! service's ([`LIBRECHAT_TUNING_VARS`]) are recorded in
//! [`Settings::librechat_overrides`], for the CLI to say so once at start.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use config::{Config, Environment, File, FileFormat, Value, ValueKind};

use crate::librechat::{self, Rules};

mod error;
mod mongo_uri;

pub use error::ConfigError;
use mongo_uri::parse_mongo_uri;

/// Most `sync.ack_writers`: each holds a connection of the driver's pool.
const MAX_ACK_WRITERS: u64 = 16;
pub use mongo_uri::{redact_uri, MongoUri, SECRET_URI_OPTIONS};

/// The defaults, compiled in so the binary works without the file.
pub const DEFAULTS_TOML: &str = include_str!("../config/default.toml");

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
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }
    /// The secret itself, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("\"\"")
        } else {
            f.write_str("***")
        }
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Auto,
    Pretty,
    Json,
}

#[derive(Clone, Debug)]
pub struct MongoSettings {
    pub uri: MongoUri,
    pub database: String,
    pub connect_timeout: Duration,
}

#[derive(Clone, Debug)]
pub struct MeiliSettings {
    pub host: String,
    pub master_key: Secret,
    pub index_prefix: String,
    pub filterable_attributes: Vec<String>,
    pub request_timeout: Duration,
}

#[derive(Clone, Debug)]
pub struct LeaseSettings {
    pub collection: String,
    pub job: String,
    pub ttl: Duration,
    pub renew_every: Duration,
    pub poll_every: Duration,
    pub safety_margin: Duration,
    pub reuse_completion_for: Duration,
    /// Empty: derived from the host name, the pid and a random suffix.
    pub owner: String,
    pub failure_backoff: Duration,
    pub failure_backoff_max: Duration,
    pub unreachable_timeout: Duration,
    pub librechat_clock_skew: Duration,
    pub write_concern: crate::lease::LeaseWriteConcern,
}

#[derive(Clone, Debug)]
pub struct SyncSettings {
    pub batch_docs: usize,
    pub batch_bytes: usize,
    pub in_flight: usize,
    pub max_bytes_in_flight: usize,
    pub compare_memory: usize,
    pub ack_writers: usize,
    pub threshold: u64,
    pub delay: Duration,
    pub enabled: bool,
    pub plan_only: bool,
    /// LibreChat's configurable rules: exclusion paths, schema version.
    pub rules: Rules,
}

#[derive(Clone, Debug)]
pub struct ServeSettings {
    pub listen: SocketAddr,
    pub interval: Duration,
    pub grace: Duration,
    /// Follow change streams between reconciliations (`run` only).
    pub follow: bool,
}

/// `follow.pre_images`: whether change events carry the document as it was
/// before the change (`changeStreamPreAndPostImages`, MongoDB 6.0+), which
/// is how a delete names the Meilisearch document it removes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreImages {
    /// Use them on collections that have them enabled.
    Auto,
    /// Enable them at start (`collMod`, needs that privilege), then use them.
    Enable,
    /// Never ask for them.
    Off,
}

/// Follow mode (`[follow]`, docs/design.md §4.12).
#[derive(Clone, Debug)]
pub struct FollowSettings {
    /// A micro-batch is applied once it holds this many documents...
    pub max_docs: usize,
    /// ...or once its first change is this old.
    pub max_wait: Duration,
    pub pre_images: PreImages,
    /// Deletes without a pre-image: the id-set comparison runs at most this often.
    pub orphan_check_every: Duration,
}

#[derive(Clone, Debug)]
pub struct LogSettings {
    pub format: LogFormat,
}

/// Every setting, validated.
#[derive(Clone, Debug)]
pub struct Settings {
    pub mongo: MongoSettings,
    pub meili: MeiliSettings,
    pub lease: LeaseSettings,
    pub sync: SyncSettings,
    pub serve: ServeSettings,
    pub follow: FollowSettings,
    pub log: LogSettings,
    /// LibreChat's `MEILI_NO_SYNC` is `true` (as LibreChat reads it: the text
    /// `true`, any case): its in-process sync is off, the recommended set-up
    /// beside this service. Changes nothing here; the CLI logs it at start.
    pub librechat_sync_off: bool,
    /// Each of [`LIBRECHAT_TUNING_VARS`] that set a setting to another value
    /// than the one it replaced (the CLI logs each once, at start).
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
    pub replaced_default: bool,
}

impl LibreChatOverride {
    /// The setting's own variable, which wins over the LibreChat one.
    pub fn own_var(&self) -> String {
        env_var_of(self.key)
    }
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
            own = self.own_var(),
        )
    }
}

/// The environment variable of a `section.key` setting:
/// `RECONCILER__SECTION__KEY`.
pub fn env_var_of(key: &str) -> String {
    format!(
        "{ENV_PREFIX}__{}",
        key.replace('.', "__").to_ascii_uppercase()
    )
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
    let file_error = |e: config::ConfigError| ConfigError::File {
        path: sources
            .config_file
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "config/default.toml".into()),
        reason: e.to_string(),
    };
    let mut builder = Config::builder().add_source(File::from_str(DEFAULTS_TOML, FileFormat::Toml));
    if let Some(dir) = &sources.base_dir {
        let path = dir.join("config/default.toml");
        if path.is_file() {
            builder = builder.add_source(File::from(path).format(FileFormat::Toml));
        }
    }
    if let Some(path) = &sources.config_file {
        if !path.is_file() {
            return Err(ConfigError::File {
                path: path.display().to_string(),
                reason: "no such file".into(),
            });
        }
        builder = builder.add_source(File::from(path.clone()).format(FileFormat::Toml));
    }
    // The files alone: what a LibreChat variable replaces.
    let files = builder.clone().build().map_err(file_error)?;
    let librechat = librechat_layer(&sources.env)?;
    builder = builder.add_source(librechat.clone());
    let env_map: config::Map<String, String> = sources
        .env
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("{ENV_PREFIX}__")))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let own_env = Environment::with_prefix(ENV_PREFIX)
        .prefix_separator("__")
        .separator("__")
        .source(Some(env_map));
    let own_keys: Vec<String> = config::Source::collect(&own_env)
        .map(|m| m.into_keys().collect())
        .unwrap_or_default();
    builder = builder.add_source(own_env);
    let merged = builder.build().map_err(file_error)?;
    let mut settings = Raw::from_config(merged)?.validate()?;
    settings.librechat_sync_off = sources
        .env
        .get(LIBRECHAT_NO_SYNC)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    settings.librechat_overrides = librechat_overrides(&sources.env, &files, &librechat, &own_keys);
    Ok(settings)
}

/// Each of [`LIBRECHAT_TUNING_VARS`] that is what sets its setting (no
/// `RECONCILER__` variable sets it too) to another value than the files'.
fn librechat_overrides(
    env: &HashMap<String, String>,
    files: &Config,
    librechat: &Config,
    own_keys: &[String],
) -> Vec<LibreChatOverride> {
    let defaults: HashMap<String, Value> = defaults().into_iter().collect();
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
            let replaced_default = defaults
                .get(*key)
                .is_some_and(|d| same_setting(&d.to_string(), &replaced));
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
            let ms: u64 = value.trim().parse().map_err(|_| {
                ConfigError::invalid(
                    "sync.delay",
                    value,
                    "MEILI_SYNC_DELAY_MS takes a whole number of milliseconds, e.g. 250",
                )
            })?;
            format!("{ms}ms")
        } else {
            value.clone()
        };
        layer = layer
            .set_override(*key, value)
            .expect("static keys are valid paths");
    }
    layer.build().map_err(|e| ConfigError::File {
        path: "environment".into(),
        reason: e.to_string(),
    })
}

/// The merged layers as flat `section.key` → value, before validation.
struct Raw {
    values: HashMap<String, Value>,
}

const SECRET_KEYS: &[&str] = &["meili.master_key", "mongo.uri"];

impl Raw {
    fn from_config(config: Config) -> Result<Self, ConfigError> {
        let defaults: HashMap<String, Value> = defaults().into_iter().collect();
        let known = || {
            let mut keys: Vec<&str> = defaults.keys().map(String::as_str).collect();
            keys.sort();
            keys.join(", ")
        };
        let table = config.cache.into_table().map_err(|e| ConfigError::File {
            path: "configuration".into(),
            reason: e.to_string(),
        })?;
        let mut values = HashMap::new();
        for (section, value) in table {
            let entries = match value.kind {
                ValueKind::Table(entries) => entries,
                _ => {
                    return Err(ConfigError::Unknown {
                        key: section,
                        known: known(),
                    })
                }
            };
            for (key, value) in entries {
                let full = format!("{section}.{key}");
                let Some(default) = defaults.get(&full) else {
                    return Err(ConfigError::Unknown {
                        key: full,
                        known: known(),
                    });
                };
                check_kind(&full, &value, default)?;
                values.insert(full, value);
            }
        }
        Ok(Raw { values })
    }

    /// The value as text (lists are joined by commas; [`check_kind`] let in
    /// no table, and a list only where the default is one).
    fn text(&self, key: &str) -> String {
        match self.values.get(key).map(|v| &v.kind) {
            None | Some(ValueKind::Nil) => String::new(),
            Some(ValueKind::Array(items)) => items
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(","),
            Some(_) => self.values[key].to_string(),
        }
    }

    fn shown(&self, key: &str) -> String {
        if SECRET_KEYS.contains(&key) {
            if key == "mongo.uri" {
                redact_uri(&self.text(key))
            } else {
                "***".into()
            }
        } else {
            self.text(key)
        }
    }

    fn string(&self, key: &str) -> String {
        self.text(key).trim().to_string()
    }

    fn duration(&self, key: &str) -> Result<Duration, ConfigError> {
        let text = self.string(key);
        humantime::parse_duration(&text).map_err(|_| {
            ConfigError::invalid(
                key,
                self.shown(key),
                "a duration such as \"250ms\", \"3s\", \"5m\" (a number with a unit)",
            )
        })
    }

    fn positive_duration(&self, key: &str) -> Result<Duration, ConfigError> {
        let d = self.duration(key)?;
        if d.is_zero() {
            return Err(ConfigError::invalid(
                key,
                self.shown(key),
                "a duration greater than zero",
            ));
        }
        Ok(d)
    }

    fn count(&self, key: &str, min: u64) -> Result<u64, ConfigError> {
        let text = self.string(key);
        match text.parse::<u64>() {
            Ok(n) if n >= min => Ok(n),
            _ => Err(ConfigError::invalid(
                key,
                self.shown(key),
                format!("a whole number ≥ {min}"),
            )),
        }
    }

    fn count_within(&self, key: &str, min: u64, max: u64) -> Result<u64, ConfigError> {
        let text = self.string(key);
        match text.parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(ConfigError::invalid(
                key,
                self.shown(key),
                format!("a whole number from {min} to {max}"),
            )),
        }
    }

    fn size(&self, key: &str) -> Result<usize, ConfigError> {
        let text = self.string(key);
        let allowed = "a size ≥ 1KiB such as \"8MiB\", \"512KiB\" or a number of bytes";
        let bytes = text
            .parse::<u64>()
            .ok()
            .or_else(|| text.parse::<bytesize::ByteSize>().ok().map(|b| b.as_u64()))
            .ok_or_else(|| ConfigError::invalid(key, self.shown(key), allowed))?;
        if bytes < 1024 {
            return Err(ConfigError::invalid(key, self.shown(key), allowed));
        }
        usize::try_from(bytes).map_err(|_| ConfigError::invalid(key, self.shown(key), allowed))
    }

    fn boolean(&self, key: &str) -> Result<bool, ConfigError> {
        match self.string(key).to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(true),
            "false" | "0" | "no" | "off" => Ok(false),
            _ => Err(ConfigError::invalid(
                key,
                self.shown(key),
                "true or false (also 1/0, yes/no, on/off)",
            )),
        }
    }

    fn list(&self, key: &str) -> Vec<String> {
        self.text(key)
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    }

    fn validate(self) -> Result<Settings, ConfigError> {
        let sync = self.sync()?;
        // With search off (`SEARCH=false`) no server is reached: a replica
        // whose `.env` names none must still start and say so.
        let servers_needed = sync.enabled;
        let mongo = self.mongo(servers_needed)?;
        let meili = self.meili(servers_needed)?;
        let lease = self.lease()?;
        let serve = self.serve()?;
        let follow = self.follow()?;
        let format = match self.string("log.format").to_ascii_lowercase().as_str() {
            "auto" => LogFormat::Auto,
            "pretty" => LogFormat::Pretty,
            "json" => LogFormat::Json,
            _ => {
                return Err(ConfigError::invalid(
                    "log.format",
                    self.shown("log.format"),
                    "auto, pretty or json",
                ))
            }
        };
        Ok(Settings {
            mongo,
            meili,
            lease,
            sync,
            serve,
            follow,
            log: LogSettings { format },
            librechat_sync_off: false,
            librechat_overrides: Vec::new(),
        })
    }

    /// `required`: unset is an error; otherwise an unset URI stands for a
    /// local server that nothing will reach.
    fn mongo(&self, required: bool) -> Result<MongoSettings, ConfigError> {
        let mut uri = self.string("mongo.uri");
        if uri.is_empty() && !required {
            uri = "mongodb://127.0.0.1:27017".into();
        }
        if uri.is_empty() {
            return Err(ConfigError::Missing {
                key: "mongo.uri".into(),
                hint: "set MONGO_URI (or RECONCILER__MONGO__URI), e.g. mongodb://127.0.0.1:27017/LibreChat".into(),
            });
        }
        let uri = parse_mongo_uri(&uri)?;
        let configured = self.string("mongo.database");
        let database = if configured.is_empty() {
            uri.database().unwrap_or_else(|| "LibreChat".into())
        } else {
            configured
        };
        if database.contains(['/', '\\', '.', ' ', '"', '$']) || database.len() > 63 {
            return Err(ConfigError::invalid(
                "mongo.database",
                database,
                "a MongoDB database name: at most 63 characters, none of / \\ . \" $ or space",
            ));
        }
        Ok(MongoSettings {
            uri,
            database,
            connect_timeout: self.positive_duration("mongo.connect_timeout")?,
        })
    }

    /// `required`: unset is an error; otherwise an unset host stands for a
    /// local server that nothing will reach.
    fn meili(&self, required: bool) -> Result<MeiliSettings, ConfigError> {
        let mut host = self.string("meili.host");
        if host.is_empty() && !required {
            host = "http://127.0.0.1:7700".into();
        }
        if host.is_empty() {
            return Err(ConfigError::Missing {
                key: "meili.host".into(),
                hint: "set MEILI_HOST (or RECONCILER__MEILI__HOST), e.g. http://127.0.0.1:7700"
                    .into(),
            });
        }
        let parsed = url::Url::parse(&host).ok().filter(|u| {
            matches!(u.scheme(), "http" | "https") && u.host_str().is_some_and(|h| !h.is_empty())
        });
        if parsed.is_none() {
            return Err(ConfigError::invalid(
                "meili.host",
                redact_uri(&host),
                "an http:// or https:// URL such as http://127.0.0.1:7700",
            ));
        }
        let index_prefix = self.string("meili.index_prefix");
        if !index_prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            || index_prefix.len() > 200
        {
            return Err(ConfigError::invalid(
                "meili.index_prefix",
                index_prefix,
                "empty, or up to 200 characters of A-Z a-z 0-9 _ - (it starts Meilisearch index uids)",
            ));
        }
        let filterable_attributes = self.list("meili.filterable_attributes");
        if !filterable_attributes.iter().any(|a| a == "user") {
            return Err(ConfigError::invalid(
                "meili.filterable_attributes",
                self.shown("meili.filterable_attributes"),
                "a list of attribute names that includes \"user\" (LibreChat filters every search by user)",
            ));
        }
        // Sent as `Authorization: Bearer <key>`: a character no HTTP header
        // may hold would fail every request (the SDK panics on it).
        let master_key = self.string("meili.master_key");
        let unsendable = master_key.chars().find(|c| !(' '..='~').contains(c));
        if let Some(c) = unsendable {
            let what = if c.is_control() {
                "a control character"
            } else {
                "a non-ASCII character"
            };
            return Err(ConfigError::invalid(
                "meili.master_key",
                "***",
                format!(
                    "printable ASCII characters only (letters, digits, punctuation; it is sent in the HTTP header \
                     `Authorization: Bearer <key>`), but the key holds {what}: check MEILI_MASTER_KEY \
                     (or RECONCILER__MEILI__MASTER_KEY)"
                ),
            ));
        }
        Ok(MeiliSettings {
            host: host.trim_end_matches('/').to_string(),
            master_key: Secret(master_key),
            index_prefix,
            filterable_attributes,
            request_timeout: self.positive_duration("meili.request_timeout")?,
        })
    }

    fn lease(&self) -> Result<LeaseSettings, ConfigError> {
        let ttl = self.positive_duration("lease.ttl")?;
        let renew_every = self.positive_duration("lease.renew_every")?;
        let safety_margin = self.duration("lease.safety_margin")?;
        crate::lease::check_timings(ttl, renew_every, safety_margin)
            .map_err(|e| ConfigError::invalid(e.key(), self.shown(e.key()), e.allowed()))?;
        let failure_backoff = self.positive_duration("lease.failure_backoff")?;
        let failure_backoff_max = self.positive_duration("lease.failure_backoff_max")?;
        if failure_backoff_max < failure_backoff {
            return Err(ConfigError::invalid(
                "lease.failure_backoff_max",
                self.shown("lease.failure_backoff_max"),
                format!(
                    "a duration at least lease.failure_backoff ({})",
                    humantime::format_duration(failure_backoff)
                ),
            ));
        }
        let collection = self.string("lease.collection");
        let job = self.string("lease.job");
        for (key, value) in [("lease.collection", &collection), ("lease.job", &job)] {
            if value.is_empty() || value.contains('$') || value.contains('\0') {
                return Err(ConfigError::invalid(
                    key,
                    value.clone(),
                    "a non-empty name without '$'",
                ));
            }
        }
        Ok(LeaseSettings {
            collection,
            job,
            ttl,
            renew_every,
            poll_every: self.positive_duration("lease.poll_every")?,
            safety_margin,
            reuse_completion_for: self.duration("lease.reuse_completion_for")?,
            owner: self.string("lease.owner"),
            failure_backoff,
            failure_backoff_max,
            unreachable_timeout: self.positive_duration("lease.unreachable_timeout")?,
            librechat_clock_skew: self.duration("lease.librechat_clock_skew")?,
            write_concern: self.write_concern("lease.write_concern")?,
        })
    }

    fn write_concern(&self, key: &str) -> Result<crate::lease::LeaseWriteConcern, ConfigError> {
        use crate::lease::LeaseWriteConcern;
        let text = self.string(key);
        if text.eq_ignore_ascii_case("majority") {
            return Ok(LeaseWriteConcern::Majority);
        }
        match text.parse::<u32>() {
            Ok(n) if n >= 1 => Ok(LeaseWriteConcern::Nodes(n)),
            _ => Err(ConfigError::invalid(
                key,
                self.shown(key),
                "\"majority\" (the default) or a number of nodes ≥ 1",
            )),
        }
    }

    fn sync(&self) -> Result<SyncSettings, ConfigError> {
        let batch_bytes = self.size("sync.batch_bytes")?;
        let max_bytes_in_flight = self.size("sync.max_bytes_in_flight")?;
        if max_bytes_in_flight < batch_bytes {
            return Err(ConfigError::invalid(
                "sync.max_bytes_in_flight",
                self.shown("sync.max_bytes_in_flight"),
                format!(
                    "a size ≥ sync.batch_bytes ({}) such as \"256MiB\"",
                    self.shown("sync.batch_bytes")
                ),
            ));
        }
        Ok(SyncSettings {
            batch_docs: self.count("sync.batch_docs", 1)? as usize,
            batch_bytes,
            in_flight: self.count("sync.in_flight", 1)? as usize,
            max_bytes_in_flight,
            compare_memory: self.size("sync.compare_memory")?,
            ack_writers: self.count_within("sync.ack_writers", 1, MAX_ACK_WRITERS)? as usize,
            threshold: self.count("sync.threshold", 0)?,
            delay: self.duration("sync.delay")?,
            enabled: self.boolean("sync.enabled")?,
            plan_only: self.boolean("sync.plan_only")?,
            rules: Rules {
                messages_exclusion_path: self.exclusion_path("sync.messages_exclusion_path")?,
                conversations_exclusion_path: self
                    .exclusion_path("sync.conversations_exclusion_path")?,
                schema_version: self.schema_version("sync.schema_version")?,
            },
        })
    }

    /// A field whose presence keeps a document out of search; `""`: none.
    fn exclusion_path(&self, key: &str) -> Result<Option<String>, ConfigError> {
        let path = self.string(key);
        if path.is_empty() {
            return Ok(None);
        }
        librechat::check_exclusion_path(&path).map_err(|why| {
            ConfigError::invalid(
                key,
                self.shown(key),
                format!("a top-level field name such as subagentTask, or \"\" for none (it {why})"),
            )
        })?;
        Ok(Some(path))
    }

    /// The projection's schema version LibreChat's markers carry.
    fn schema_version(&self, key: &str) -> Result<i32, ConfigError> {
        let text = self.string(key);
        match text.parse::<i32>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(ConfigError::invalid(
                key,
                self.shown(key),
                format!(
                    "a whole number from 1 to {} (LibreChat's is 1; raising it re-sends every document)",
                    i32::MAX
                ),
            )),
        }
    }

    fn serve(&self) -> Result<ServeSettings, ConfigError> {
        let listen = self.string("serve.listen");
        let listen = listen.parse::<SocketAddr>().map_err(|_| {
            ConfigError::invalid(
                "serve.listen",
                listen,
                "an IP address and port such as 127.0.0.1:9464 or 0.0.0.0:9464",
            )
        })?;
        Ok(ServeSettings {
            listen,
            interval: self.positive_duration("serve.interval")?,
            grace: self.positive_duration("serve.grace")?,
            follow: self.boolean("serve.follow")?,
        })
    }

    fn follow(&self) -> Result<FollowSettings, ConfigError> {
        let pre_images = match self.string("follow.pre_images").to_ascii_lowercase().as_str() {
            "auto" => PreImages::Auto,
            "enable" => PreImages::Enable,
            "off" => PreImages::Off,
            _ => {
                return Err(ConfigError::invalid(
                    "follow.pre_images",
                    self.shown("follow.pre_images"),
                    "auto (use them where the collections have them), enable (turn them on with collMod) or off",
                ))
            }
        };
        Ok(FollowSettings {
            max_docs: self.count("follow.max_docs", 1)? as usize,
            max_wait: self.positive_duration("follow.max_wait")?,
            pre_images,
            orphan_check_every: self.duration("follow.orphan_check_every")?,
        })
    }
}

/// Refuses a value of a kind its key cannot take: a table anywhere, a list
/// where the default is a single value, a list holding tables or lists.
///
/// A number or a boolean given for a string setting (`job = 5`) is taken as
/// its text, as the same value arrives from an environment variable; and a
/// number setting takes a string (`threshold = "1000"`) the same way.
fn check_kind(key: &str, value: &Value, default: &Value) -> Result<(), ConfigError> {
    let list_expected = matches!(default.kind, ValueKind::Array(_));
    let expected = match default.kind {
        ValueKind::Array(_) => "a list of strings (or one comma-separated string)",
        ValueKind::Boolean(_) => "a single value (true or false)",
        ValueKind::I64(_) | ValueKind::I128(_) | ValueKind::U64(_) | ValueKind::U128(_) => {
            "a single value (a whole number)"
        }
        _ => "a single value (a string)",
    };
    let given = match &value.kind {
        ValueKind::Table(_) => Some("a table"),
        ValueKind::Array(_) if !list_expected => Some("a list"),
        ValueKind::Array(items)
            if items
                .iter()
                .any(|i| matches!(i.kind, ValueKind::Table(_) | ValueKind::Array(_))) =>
        {
            Some("a list holding a table or a list")
        }
        _ => None,
    };
    match given {
        None => Ok(()),
        Some(given) => Err(ConfigError::invalid(
            key,
            if SECRET_KEYS.contains(&key) {
                "***".to_string()
            } else {
                render(value)
            },
            format!("{expected} is expected, not {given}"),
        )),
    }
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
            let mut entries: Vec<String> = entries
                .iter()
                .map(|(k, v)| format!("{k} = {}", render(v)))
                .collect();
            entries.sort();
            format!("{{ {} }}", entries.join(", "))
        }
        _ => value.to_string(),
    }
}

/// Every `section.key` of the built-in defaults, with its default value.
fn defaults() -> Vec<(String, Value)> {
    let defaults = Config::builder()
        .add_source(File::from_str(DEFAULTS_TOML, FileFormat::Toml))
        .build()
        .expect("the built-in defaults parse");
    defaults
        .cache
        .into_table()
        .expect("the built-in defaults are a table")
        .into_iter()
        .flat_map(|(section, value)| {
            let entries = value.into_table().unwrap_or_default();
            entries
                .into_iter()
                .map(move |(key, value)| (format!("{section}.{key}"), value))
        })
        .collect()
}

/// Every `section.key` of the built-in defaults: the only keys accepted.
pub fn known_keys() -> Vec<String> {
    let mut keys: Vec<String> = defaults().into_iter().map(|(key, _)| key).collect();
    keys.sort();
    keys
}

impl Settings {
    /// Uid of the index `collection` feeds, with the configured prefix.
    pub fn index_uid(&self, collection: librechat::Collection) -> String {
        format!("{}{}", self.meili.index_prefix, collection.index_name())
    }
}

//! Configuration: each layer overrides the one below, LibreChat's names work,
//! every validation error names its key, and secrets never print.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use meili_reconciler::config::{self, ConfigError, LogFormat, PreImages, Settings, Sources};

const URI: &str = "mongodb://127.0.0.1:27017/LibreChat";
const HOST: &str = "http://127.0.0.1:7700";

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    let mut env: HashMap<String, String> = [("MONGO_URI", URI), ("MEILI_HOST", HOST)]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for (k, v) in pairs {
        env.insert(k.to_string(), v.to_string());
    }
    env
}

fn load(pairs: &[(&str, &str)]) -> Result<Settings, ConfigError> {
    config::load(&Sources {
        base_dir: None,
        config_file: None,
        env: env(pairs),
    })
}

fn error_of(pairs: &[(&str, &str)]) -> String {
    match load(pairs) {
        Ok(_) => panic!("expected a configuration error for {pairs:?}"),
        Err(e) => e.to_string(),
    }
}

/// A directory with `config/default.toml` and a separate `--config` file.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new(base_toml: &str, file_toml: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("config")).unwrap();
        std::fs::write(dir.path().join("config/default.toml"), base_toml).unwrap();
        std::fs::write(dir.path().join("extra.toml"), file_toml).unwrap();
        Files { dir }
    }
    fn sources(&self, pairs: &[(&str, &str)]) -> Sources {
        Sources {
            base_dir: Some(self.dir.path().to_path_buf()),
            config_file: Some(self.dir.path().join("extra.toml")),
            env: env(pairs),
        }
    }
}

#[test]
fn built_in_defaults_match_the_design() {
    let s = load(&[]).unwrap();
    assert_eq!(s.lease.collection, "distributedJobs");
    assert_eq!(s.lease.job, "meili-index-sync");
    assert_eq!(s.lease.ttl, Duration::from_secs(180));
    assert_eq!(s.lease.renew_every, Duration::from_secs(60));
    assert_eq!(s.lease.poll_every, Duration::from_secs(2));
    assert_eq!(s.lease.safety_margin, Duration::from_secs(15));
    assert_eq!(s.lease.reuse_completion_for, Duration::from_secs(60));
    assert_eq!(s.sync.batch_docs, 10_000);
    assert_eq!(s.sync.batch_bytes, 8 * 1024 * 1024);
    assert_eq!(s.sync.in_flight, 64);
    assert_eq!(s.sync.max_bytes_in_flight, 64 * 1024 * 1024);
    assert_eq!(s.sync.compare_memory, 64 * 1024 * 1024);
    assert_eq!(s.sync.ack_writers, 2);
    assert_eq!(s.sync.threshold, 1000);
    // LibreChat's own values (its data layer, 0.0.71).
    assert_eq!(
        s.sync.rules(),
        meili_reconciler::librechat::Rules::default()
    );
    assert_eq!(
        s.sync
            .rules()
            .exclusion_path(meili_reconciler::mongo::Collection::Messages),
        Some("subagentTask")
    );
    assert_eq!(s.sync.schema_version, 1);
    assert_eq!(s.sync.delay, Duration::ZERO);
    assert!(s.sync.enabled);
    assert!(!s.sync.plan_only);
    assert_eq!(s.serve.listen.to_string(), "127.0.0.1:9464");
    assert_eq!(s.serve.interval, Duration::from_secs(300));
    assert!(s.serve.follow);
    assert_eq!(s.follow.max_docs, 500);
    assert_eq!(s.follow.max_wait, Duration::from_millis(500));
    assert_eq!(s.follow.pre_images, PreImages::Auto);
    assert_eq!(s.follow.orphan_check_every, Duration::from_secs(60));
    assert_eq!(s.log.format, LogFormat::Auto);
    assert_eq!(s.meili.index_prefix, "");
    assert_eq!(s.meili.filterable_attributes, vec!["user".to_string()]);
    assert_eq!(s.mongo.database, "LibreChat");
    let uid = |c: meili_reconciler::mongo::Collection| c.index_uid(&s.meili.index_prefix);
    assert_eq!(
        uid(meili_reconciler::mongo::Collection::Messages),
        "messages"
    );
    assert_eq!(
        uid(meili_reconciler::mongo::Collection::Conversations),
        "convos"
    );
}

#[test]
fn each_layer_overrides_the_one_below() {
    let files = Files::new(
        "[lease]\nttl = \"100s\"\nrenew_every = \"10s\"\npoll_every = \"5s\"\n[sync]\nin_flight = 3\nthreshold = 7\n",
        "[lease]\nrenew_every = \"20s\"\npoll_every = \"6s\"\n[sync]\nthreshold = 8\n",
    );
    // default.toml over built-ins; --config over default.toml; env over --config.
    let s = config::load(&files.sources(&[("RECONCILER__LEASE__POLL_EVERY", "250ms")])).unwrap();
    assert_eq!(
        s.lease.ttl,
        Duration::from_secs(100),
        "config/default.toml over built-ins"
    );
    assert_eq!(s.sync.in_flight, 3, "config/default.toml over built-ins");
    assert_eq!(
        s.lease.renew_every,
        Duration::from_secs(20),
        "--config over default.toml"
    );
    assert_eq!(s.sync.threshold, 8, "--config over default.toml");
    assert_eq!(
        s.lease.poll_every,
        Duration::from_millis(250),
        "environment over --config"
    );
    // Built-ins still fill what no layer sets.
    assert_eq!(s.lease.safety_margin, Duration::from_secs(15));
}

#[test]
fn reconciler_variables_win_over_librechat_names() {
    let s = load(&[
        ("MEILI_SYNC_THRESHOLD", "5"),
        ("RECONCILER__SYNC__THRESHOLD", "6"),
    ])
    .unwrap();
    assert_eq!(s.sync.threshold, 6);
}

#[test]
fn librechat_names_are_honoured() {
    let s = load(&[
        (
            "MONGO_URI",
            "mongodb://db.example:27017/chats?retryWrites=true",
        ),
        ("MEILI_HOST", "https://search.example:7700/"),
        ("MEILI_MASTER_KEY", "masterKey123"),
        ("MEILI_SYNC_THRESHOLD", "42"),
        ("MEILI_SYNC_BATCH_SIZE", "500"),
        ("MEILI_SYNC_DELAY_MS", "250"),
    ])
    .unwrap();
    assert_eq!(s.mongo.database, "chats", "database from the URI's path");
    assert_eq!(s.meili.host, "https://search.example:7700");
    assert_eq!(s.meili.master_key.expose(), "masterKey123");
    assert_eq!(s.sync.threshold, 42);
    assert_eq!(s.sync.batch_docs, 500);
    assert_eq!(s.sync.delay, Duration::from_millis(250));
    assert!(s.sync.enabled);
    let s = load(&[("SEARCH", "false")]).unwrap();
    assert!(!s.sync.enabled);
    let s = load(&[("RECONCILER__MONGO__DATABASE", "other")]).unwrap();
    assert_eq!(
        s.mongo.database, "other",
        "mongo.database wins over the URI path"
    );
}

/// `MEILI_NO_SYNC` is LibreChat's switch for its own start-up sync; operators
/// set it beside this service, so it must not switch this service to plan only.
#[test]
fn meili_no_sync_is_librechat_s_switch_not_plan_only() {
    for value in ["true", "TRUE", " True "] {
        let s = load(&[("MEILI_NO_SYNC", value)]).unwrap();
        assert!(
            !s.sync.plan_only,
            "MEILI_NO_SYNC={value:?} must not mean plan only"
        );
        assert!(s.librechat_sync_off, "MEILI_NO_SYNC={value:?} is seen");
    }
    // As LibreChat reads it (`isEnabled`): only the text "true" turns its sync off,
    // and any other value is LibreChat's business, never a configuration error.
    for value in ["false", "1", "yes", "nonsense"] {
        let s = load(&[("MEILI_NO_SYNC", value)]).unwrap();
        assert!(!s.librechat_sync_off, "MEILI_NO_SYNC={value:?}");
        assert!(!s.sync.plan_only);
    }
    // Plan only stays available under its own name.
    let s = load(&[
        ("MEILI_NO_SYNC", "true"),
        ("RECONCILER__SYNC__PLAN_ONLY", "true"),
    ])
    .unwrap();
    assert!(s.sync.plan_only);
}

#[test]
fn every_key_has_an_environment_form() {
    let pairs = [
        ("RECONCILER__MONGO__URI", "mongodb://h1:1/a"),
        ("RECONCILER__MONGO__DATABASE", "b"),
        ("RECONCILER__MONGO__CONNECT_TIMEOUT", "3s"),
        ("RECONCILER__MEILI__HOST", "http://h2:2"),
        ("RECONCILER__MEILI__MASTER_KEY", "k2"),
        ("RECONCILER__MEILI__INDEX_PREFIX", "t1_"),
        (
            "RECONCILER__MEILI__FILTERABLE_ATTRIBUTES",
            "user,conversationId",
        ),
        ("RECONCILER__MEILI__REQUEST_TIMEOUT", "4s"),
        ("RECONCILER__LEASE__COLLECTION", "jobs"),
        ("RECONCILER__LEASE__JOB", "j"),
        ("RECONCILER__LEASE__TTL", "3s"),
        ("RECONCILER__LEASE__RENEW_EVERY", "1s"),
        ("RECONCILER__LEASE__POLL_EVERY", "100ms"),
        ("RECONCILER__LEASE__SAFETY_MARGIN", "500ms"),
        ("RECONCILER__LEASE__REUSE_COMPLETION_FOR", "0s"),
        ("RECONCILER__LEASE__OWNER", "me"),
        ("RECONCILER__LEASE__FAILURE_BACKOFF", "7s"),
        ("RECONCILER__LEASE__FAILURE_BACKOFF_MAX", "70s"),
        ("RECONCILER__LEASE__UNREACHABLE_TIMEOUT", "9s"),
        ("RECONCILER__LEASE__LIBRECHAT_CLOCK_SKEW", "45s"),
        ("RECONCILER__LEASE__WRITE_CONCERN", "1"),
        ("RECONCILER__SYNC__BATCH_DOCS", "10"),
        ("RECONCILER__SYNC__BATCH_BYTES", "64KiB"),
        ("RECONCILER__SYNC__IN_FLIGHT", "4"),
        ("RECONCILER__SYNC__MAX_BYTES_IN_FLIGHT", "256KiB"),
        ("RECONCILER__SYNC__COMPARE_MEMORY", "3MiB"),
        ("RECONCILER__SYNC__ACK_WRITERS", "5"),
        ("RECONCILER__SYNC__THRESHOLD", "0"),
        ("RECONCILER__SYNC__DELAY", "5ms"),
        ("RECONCILER__SYNC__ENABLED", "true"),
        ("RECONCILER__SYNC__PLAN_ONLY", "1"),
        ("RECONCILER__SYNC__MESSAGES_EXCLUSION_PATH", "subagentRun"),
        ("RECONCILER__SYNC__CONVERSATIONS_EXCLUSION_PATH", ""),
        ("RECONCILER__SYNC__SCHEMA_VERSION", "3"),
        ("RECONCILER__SERVE__LISTEN", "0.0.0.0:1234"),
        ("RECONCILER__SERVE__INTERVAL", "1m"),
        ("RECONCILER__SERVE__GRACE", "2s"),
        ("RECONCILER__SERVE__FOLLOW", "off"),
        ("RECONCILER__FOLLOW__MAX_DOCS", "50"),
        ("RECONCILER__FOLLOW__MAX_WAIT", "100ms"),
        ("RECONCILER__FOLLOW__PRE_IMAGES", "ENABLE"),
        ("RECONCILER__FOLLOW__ORPHAN_CHECK_EVERY", "5s"),
        ("RECONCILER__LOG__FORMAT", "json"),
    ];
    // Every known key appears once above: adding a key without its test fails here.
    let mut tested: Vec<String> = pairs
        .iter()
        .map(|(k, _)| {
            let mut parts = k.split("__").skip(1);
            format!(
                "{}.{}",
                parts.next().unwrap().to_lowercase(),
                parts.next().unwrap().to_lowercase()
            )
        })
        .collect();
    tested.sort();
    assert_eq!(tested, config::known_keys());

    let s = load(&pairs).unwrap();
    assert_eq!(s.mongo.uri.expose(), "mongodb://h1:1/a");
    assert_eq!(s.mongo.database, "b");
    assert_eq!(s.mongo.connect_timeout, Duration::from_secs(3));
    assert_eq!(s.meili.host, "http://h2:2");
    assert_eq!(s.meili.master_key.expose(), "k2");
    assert_eq!(s.meili.index_prefix, "t1_");
    assert_eq!(
        s.meili.filterable_attributes,
        vec!["user", "conversationId"]
    );
    assert_eq!(s.meili.request_timeout, Duration::from_secs(4));
    assert_eq!(s.lease.collection, "jobs");
    assert_eq!(s.lease.job, "j");
    assert_eq!(s.lease.ttl, Duration::from_secs(3));
    assert_eq!(s.lease.renew_every, Duration::from_secs(1));
    assert_eq!(s.lease.poll_every, Duration::from_millis(100));
    assert_eq!(s.lease.safety_margin, Duration::from_millis(500));
    assert_eq!(s.lease.reuse_completion_for, Duration::ZERO);
    // The label starts this replica's id, unique per process.
    assert!(s.lease.owner.starts_with("me:"), "{}", s.lease.owner);
    assert_eq!(s.lease.failure_backoff, Duration::from_secs(7));
    assert_eq!(s.lease.failure_backoff_max, Duration::from_secs(70));
    assert_eq!(s.lease.unreachable_timeout, Duration::from_secs(9));
    assert_eq!(s.lease.librechat_clock_skew, Duration::from_secs(45));
    assert_eq!(
        s.lease.write_concern,
        meili_reconciler::lease::LeaseWriteConcern::Nodes(1)
    );
    assert_eq!(s.sync.batch_docs, 10);
    assert_eq!(s.sync.batch_bytes, 64 * 1024);
    assert_eq!(s.sync.in_flight, 4);
    assert_eq!(s.sync.max_bytes_in_flight, 256 * 1024);
    assert_eq!(s.sync.compare_memory, 3 * 1024 * 1024);
    assert_eq!(s.sync.ack_writers, 5);
    assert_eq!(s.sync.threshold, 0);
    assert_eq!(s.sync.delay, Duration::from_millis(5));
    assert!(s.sync.plan_only);
    assert_eq!(
        s.sync.rules(),
        meili_reconciler::librechat::Rules {
            messages_exclusion_path: Some("subagentRun".into()),
            conversations_exclusion_path: None,
            schema_version: 3,
        }
    );
    assert_eq!(s.serve.listen.to_string(), "0.0.0.0:1234");
    assert_eq!(s.serve.interval, Duration::from_secs(60));
    assert_eq!(s.serve.grace, Duration::from_secs(2));
    assert!(!s.serve.follow);
    assert_eq!(s.follow.max_docs, 50);
    assert_eq!(s.follow.max_wait, Duration::from_millis(100));
    assert_eq!(s.follow.pre_images, PreImages::Enable);
    assert_eq!(s.follow.orphan_check_every, Duration::from_secs(5));
    assert_eq!(s.log.format, LogFormat::Json);
}

#[test]
fn missing_servers_name_their_variables() {
    let mut env = env(&[]);
    env.remove("MEILI_HOST");
    let err = config::load(&Sources {
        env,
        ..Sources::default()
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("meili.host") && err.contains("MEILI_HOST"),
        "{err}"
    );

    let mut env = self::env(&[]);
    env.remove("MONGO_URI");
    let err = config::load(&Sources {
        env,
        ..Sources::default()
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("mongo.uri") && err.contains("MONGO_URI"),
        "{err}"
    );
}

#[test]
fn each_bad_value_names_key_value_and_what_is_allowed() {
    /// (environment, key named, value shown, words of what is allowed)
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str, &'a str);
    let cases: &[Case] = &[
        (
            &[("MONGO_URI", "postgres://x/y")],
            "mongo.uri",
            "postgres://x/y",
            "mongodb://",
        ),
        (
            &[("MONGO_URI", "mongodb:///nohost")],
            "mongo.uri",
            "mongodb:///nohost",
            "mongodb://",
        ),
        (
            &[("MEILI_HOST", "localhost:7700")],
            "meili.host",
            "localhost:7700",
            "http://",
        ),
        (
            &[("RECONCILER__LEASE__TTL", "3")],
            "lease.ttl",
            "3",
            "duration",
        ),
        (
            &[("RECONCILER__LEASE__TTL", "0s")],
            "lease.ttl",
            "0s",
            "greater than zero",
        ),
        (
            &[("RECONCILER__SYNC__SCHEMA_VERSION", "0")],
            "sync.schema_version",
            "0",
            "whole number from 1",
        ),
        (
            &[("RECONCILER__SYNC__SCHEMA_VERSION", "one")],
            "sync.schema_version",
            "one",
            "re-sends every document",
        ),
        (
            &[(
                "RECONCILER__SYNC__MESSAGES_EXCLUSION_PATH",
                "subagentTask.status",
            )],
            "sync.messages_exclusion_path",
            "subagentTask.status",
            "top-level field name",
        ),
        (
            &[("RECONCILER__SYNC__CONVERSATIONS_EXCLUSION_PATH", "$where")],
            "sync.conversations_exclusion_path",
            "$where",
            "must not start with `$`",
        ),
        (
            &[("RECONCILER__LEASE__WRITE_CONCERN", "all")],
            "lease.write_concern",
            "all",
            "\"majority\"",
        ),
        (
            &[("RECONCILER__LEASE__WRITE_CONCERN", "0")],
            "lease.write_concern",
            "0",
            "number of nodes ≥ 1",
        ),
        (
            &[("RECONCILER__LEASE__RENEW_EVERY", "180s")],
            "lease.renew_every",
            "180s",
            "shorter than lease.ttl",
        ),
        (
            &[("RECONCILER__LEASE__RENEW_EVERY", "170s")],
            "lease.renew_every",
            "170s",
            "safety_margin",
        ),
        (
            &[("RECONCILER__LEASE__SAFETY_MARGIN", "200s")],
            "lease.safety_margin",
            "200s",
            "shorter than lease.ttl",
        ),
        (
            &[("MEILI_SYNC_BATCH_SIZE", "0")],
            "sync.batch_docs",
            "0",
            "≥ 1",
        ),
        (
            &[("RECONCILER__SYNC__IN_FLIGHT", "0")],
            "sync.in_flight",
            "0",
            "≥ 1",
        ),
        (
            &[("RECONCILER__SYNC__ACK_WRITERS", "0")],
            "sync.ack_writers",
            "0",
            "from 1 to 16",
        ),
        (
            &[("RECONCILER__SYNC__ACK_WRITERS", "17")],
            "sync.ack_writers",
            "17",
            "from 1 to 16",
        ),
        (
            &[("MEILI_SYNC_THRESHOLD", "-5")],
            "sync.threshold",
            "-5",
            "whole number",
        ),
        (
            &[("RECONCILER__SYNC__BATCH_BYTES", "lots")],
            "sync.batch_bytes",
            "lots",
            "MiB",
        ),
        (
            &[("RECONCILER__SYNC__MAX_BYTES_IN_FLIGHT", "1MiB")],
            "sync.max_bytes_in_flight",
            "1MiB",
            "≥ sync.batch_bytes",
        ),
        (
            &[("RECONCILER__SYNC__MAX_BYTES_IN_FLIGHT", "plenty")],
            "sync.max_bytes_in_flight",
            "plenty",
            "MiB",
        ),
        (
            &[("RECONCILER__SYNC__COMPARE_MEMORY", "12")],
            "sync.compare_memory",
            "12",
            "≥ 1KiB",
        ),
        (
            &[("MEILI_SYNC_DELAY_MS", "soon")],
            "sync.delay",
            "soon",
            "milliseconds",
        ),
        (
            &[("SEARCH", "maybe")],
            "sync.enabled",
            "maybe",
            "true or false",
        ),
        (
            &[("RECONCILER__SERVE__LISTEN", "9464")],
            "serve.listen",
            "9464",
            "IP address and port",
        ),
        (
            &[("RECONCILER__SERVE__FOLLOW", "sometimes")],
            "serve.follow",
            "sometimes",
            "true or false",
        ),
        (
            &[("RECONCILER__FOLLOW__MAX_DOCS", "0")],
            "follow.max_docs",
            "0",
            "≥ 1",
        ),
        (
            &[("RECONCILER__FOLLOW__MAX_WAIT", "0s")],
            "follow.max_wait",
            "0s",
            "greater than zero",
        ),
        (
            &[("RECONCILER__FOLLOW__PRE_IMAGES", "always")],
            "follow.pre_images",
            "always",
            "auto",
        ),
        (
            &[("RECONCILER__FOLLOW__ORPHAN_CHECK_EVERY", "hourly")],
            "follow.orphan_check_every",
            "hourly",
            "duration",
        ),
        (
            &[("RECONCILER__LOG__FORMAT", "xml")],
            "log.format",
            "xml",
            "auto, pretty or json",
        ),
        (
            &[("RECONCILER__MEILI__INDEX_PREFIX", "a b")],
            "meili.index_prefix",
            "a b",
            "A-Z",
        ),
        (
            &[("RECONCILER__MEILI__FILTERABLE_ATTRIBUTES", "title")],
            "meili.filterable_attributes",
            "title",
            "\"user\"",
        ),
        (
            &[("RECONCILER__MONGO__DATABASE", "a.b")],
            "mongo.database",
            "a.b",
            "database name",
        ),
    ];
    for (pairs, key, value, allowed) in cases {
        let err = error_of(pairs);
        assert!(
            err.contains(&format!("`{key}`")),
            "key {key} not named in: {err}"
        );
        assert!(err.contains(value), "value {value} not shown in: {err}");
        assert!(err.contains(allowed), "allowed {allowed:?} not in: {err}");
    }
}

#[test]
fn unknown_keys_are_rejected_with_the_known_ones() {
    let err = error_of(&[("RECONCILER__LEASE__TLL", "3s")]);
    assert!(
        err.contains("`lease.tll`") && err.contains("lease.ttl"),
        "{err}"
    );
    assert!(
        err.contains("RECONCILER__LEASE__TLL"),
        "the variable: {err}"
    );
    let err = error_of(&[("RECONCILER__TUNING__TTL", "3s")]);
    assert!(
        err.contains("`tuning.ttl`") && err.contains("RECONCILER__TUNING__TTL"),
        "{err}"
    );
    let files = Files::new("", "[sync]\nbatch_size = 5\n");
    let err = config::load(&files.sources(&[])).unwrap_err().to_string();
    assert!(err.contains("`sync.batch_size`"), "{err}");
    assert!(!err.contains("RECONCILER__"), "set by no variable: {err}");
}

#[test]
fn missing_config_file_is_an_error() {
    let err = config::load(&Sources {
        config_file: Some(PathBuf::from("/nonexistent/reconciler.toml")),
        env: env(&[]),
        ..Sources::default()
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("/nonexistent/reconciler.toml"), "{err}");
}

#[test]
fn secrets_are_redacted_in_debug_display_and_errors() {
    let s = load(&[
        ("MONGO_URI", "mongodb://admin:hunter2pw@db:27017/LibreChat"),
        ("MEILI_MASTER_KEY", "topSecretMasterKey"),
    ])
    .unwrap();
    let debug = format!("{s:?}");
    for secret in ["hunter2pw", "topSecretMasterKey"] {
        assert!(!debug.contains(secret), "{secret} leaked in Debug: {debug}");
    }
    assert!(
        debug.contains("mongodb://***@db:27017/LibreChat"),
        "{debug}"
    );
    assert_eq!(s.mongo.uri.to_string(), "mongodb://***@db:27017/LibreChat");
    assert_eq!(format!("{}", s.meili.master_key), "***");
    assert_eq!(
        s.mongo.uri.expose(),
        "mongodb://admin:hunter2pw@db:27017/LibreChat"
    );

    // A bad URI with credentials is reported without them.
    let err = error_of(&[("MONGO_URI", "mongodb+xyz://admin:hunter2pw@db/x")]);
    assert!(!err.contains("hunter2pw"), "{err}");
    assert!(err.contains("mongo.uri"), "{err}");
}

/// The master key is sent as `Authorization: Bearer <key>`: a key no HTTP
/// header can hold (a control or non-ASCII character) is bad configuration,
/// named by its setting and variable, and never shown.
#[test]
fn a_master_key_no_http_header_can_hold_is_refused_without_showing_it() {
    for key in [
        "s3cr3tKEY\u{1}tail",
        "s3cr3tKEY\ntail",
        "s3cr3tKEY\u{7f}tail",
        "s3cr3tKEYétail",
    ] {
        let err = error_of(&[("MEILI_MASTER_KEY", key)]);
        assert!(err.contains("`meili.master_key`"), "{key:?}: {err}");
        assert!(err.contains("MEILI_MASTER_KEY"), "{key:?}: {err}");
        assert!(err.contains("printable ASCII"), "{key:?}: {err}");
        assert!(
            !err.contains("s3cr3tKEY") && !err.contains("tail"),
            "{key:?} shown: {err}"
        );
    }
    // Any printable ASCII is sendable, punctuation and inner spaces included.
    let s = load(&[("MEILI_MASTER_KEY", "a-Z_0.9~!@#$%^&*() key")]).unwrap();
    assert_eq!(s.meili.master_key.expose(), "a-Z_0.9~!@#$%^&*() key");
}

/// A URI the MongoDB driver refuses is bad configuration (exit 2 in the CLI),
/// not an unreachable server: named by its setting and variable, with the
/// driver's reason, and without any part of the password — also when the
/// password holds `/` or `?`, which move the driver's idea of where the
/// userinfo ends (the database used to be read from the unredacted path).
#[test]
fn a_uri_the_driver_refuses_is_bad_configuration_without_its_password() {
    // (URI, a word of the reason, fragments of secrets that must not show)
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "mongodb://u:pwS3CRET@127.0.0.1:1/x?badopt=1",
            "badopt",
            &["pwS3CRET"],
        ),
        (
            "mongodb://u:pwS3CRET@127.0.0.1:99999/x",
            "65535",
            &["pwS3CRET"],
        ),
        (
            "mongodb://u:pwS3CRET@127.0.0.1:1/x?authMechanism=FOO",
            "FOO",
            &["pwS3CRET"],
        ),
        (
            "mongodb://u:pw%S3CRET@127.0.0.1:1/x",
            "unescaped %",
            &["S3CRET"],
        ),
        (
            "mongodb://u:pw:S3CRET@127.0.0.1:1/x",
            "URL encoded",
            &["S3CRET"],
        ),
        (
            "mongodb://user:s3cr3/pwTAIL@127.0.0.1:1/x",
            "URL encoded",
            &["s3cr3", "pwTAIL"],
        ),
        (
            "mongodb://user:s3cr3?pwTAIL@127.0.0.1:1/x",
            "percent-encode",
            &["s3cr3", "pwTAIL"],
        ),
        (
            "mongodb://127.0.0.1:1/x?socketTimeoutMS=5",
            "socketTimeoutMS",
            &[],
        ),
        (
            "mongodb://a:1,b:2/x?directConnection=true",
            "directConnection",
            &[],
        ),
    ];
    for (uri, reason, secrets) in cases {
        let err = error_of(&[("MONGO_URI", uri)]);
        assert!(err.contains("`mongo.uri`"), "{uri}: {err}");
        assert!(err.contains("MONGO_URI"), "{uri}: {err}");
        assert!(
            err.contains(reason),
            "{uri}: reason {reason:?} not in {err}"
        );
        for secret in *secrets {
            assert!(!err.contains(secret), "{uri}: {secret} shown in {err}");
        }
    }
    // Percent-encoded, the same password is fine, and the database is read
    // from the path the driver finds.
    let s = load(&[("MONGO_URI", "mongodb://user:s3cr3%2FpwTAIL@127.0.0.1:1/x")]).unwrap();
    assert_eq!(s.mongo.database, "x");
    assert_eq!(s.mongo.uri.to_string(), "mongodb://***@127.0.0.1:1/x");
}

/// Secret-bearing options (`authMechanismProperties`, which holds e.g. an AWS
/// session token) are redacted like the password: in the settings' `Debug`
/// and `Display` and in errors, where the driver would echo them.
#[test]
fn secret_uri_options_are_redacted_everywhere() {
    let s = load(&[(
        "MONGO_URI",
        "mongodb://u:pwS3CRET@db:27017/x?appName=ops@site&authMechanismProperties=AWS_SESSION_TOKEN:tok3nS3CRET",
    )])
    .unwrap();
    assert_eq!(
        s.mongo.uri.to_string(),
        "mongodb://***@db:27017/x?appName=ops@site&authMechanismProperties=***"
    );
    let debug = format!("{s:?}");
    assert!(
        !debug.contains("tok3nS3CRET") && !debug.contains("pwS3CRET"),
        "{debug}"
    );

    for uri in [
        // Refused by this build (no MONGODB-AWS): the URI is shown redacted.
        "mongodb://127.0.0.1:1/x?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:tok3nS3CRET",
        // A malformed entry the driver echoes in its reason.
        "mongodb://127.0.0.1:1/x?authMechanismProperties=AWS_SESSION_TOKENtok3nS3CRET",
    ] {
        let err = error_of(&[("MONGO_URI", uri)]);
        assert!(err.contains("`mongo.uri`"), "{err}");
        assert!(err.contains("authMechanismProperties=***"), "{err}");
        assert!(!err.contains("tok3nS3CRET"), "{err}");
    }
}

/// A table or a list given for a single-valued setting is refused, naming the
/// key, the value and what is expected; a number or boolean given for a
/// string setting is taken as its text, as from an environment variable.
#[test]
fn settings_refuse_tables_and_lists_where_one_value_is_expected() {
    let cases = [
        (
            "[lease]\njob = {a=1}\n",
            "lease.job",
            "{ a = 1 }",
            "not a table",
        ),
        (
            "[lease]\nowner = [\"a\", \"b\"]\n",
            "lease.owner",
            "[\\\"a\\\", \\\"b\\\"]",
            "not a list",
        ),
        (
            "[sync]\nthreshold = [1]\n",
            "sync.threshold",
            "[1]",
            "not a list",
        ),
        (
            "[meili]\nfilterable_attributes = [\"user\", [\"x\"]]\n",
            "meili.filterable_attributes",
            "[\\\"user\\\", [\\\"x\\\"]]",
            "a list of strings",
        ),
    ];
    for (toml, key, value, expected) in cases {
        let files = Files::new("", toml);
        let err = config::load(&files.sources(&[])).unwrap_err().to_string();
        assert!(err.contains(&format!("`{key}`")), "{toml}: {err}");
        assert!(err.contains(value), "{toml}: value not shown: {err}");
        assert!(err.contains(expected), "{toml}: {err}");
    }
    let files = Files::new("", "[lease]\njob = {a=1}\n");
    let err = config::load(&files.sources(&[])).unwrap_err().to_string();
    assert!(err.contains("a string"), "{err}");

    // A secret of the wrong kind is refused without being shown.
    let files = Files::new("", "[meili]\nmaster_key = { key = \"topS3CRETkey\" }\n");
    let err = config::load(&files.sources(&[])).unwrap_err().to_string();
    assert!(err.contains("`meili.master_key`"), "{err}");
    assert!(!err.contains("topS3CRETkey"), "{err}");

    // Scalars stand for their text; lists where lists belong.
    let files = Files::new(
        "",
        "[lease]\njob = 5\nowner = true\n[meili]\nfilterable_attributes = [\"user\", \"conversationId\"]\n",
    );
    let s = config::load(&files.sources(&[])).unwrap();
    assert_eq!(s.lease.job, "5");
    assert!(s.lease.owner.starts_with("true:"), "{}", s.lease.owner);
    assert_eq!(
        s.meili.filterable_attributes,
        vec!["user", "conversationId"]
    );
}

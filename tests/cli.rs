//! The command line as operators meet it: help texts, the version, and the exit codes of
//! docs/design.md §1 for bad configuration, disabled search and unreachable servers.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn reconciler(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_meili-reconciler"));
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run meili-reconciler")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn help_prints_for_the_tool_and_every_subcommand() {
    let top = reconciler(&["--help"], &[]);
    assert!(top.status.success());
    let top = text(&top);
    for sub in ["run", "once", "reindex", "plan", "status"] {
        assert!(top.contains(sub), "{sub} missing from --help:\n{top}");
        let out = reconciler(&[sub, "--help"], &[]);
        assert!(out.status.success(), "{sub} --help failed");
        assert!(text(&out).contains(&format!("meili-reconciler {sub}")));
    }
    assert!(top.contains("Exit codes"), "{top}");
    let once = text(&reconciler(&["once", "--help"], &[]));
    for flag in ["--force", "--deep", "--wait-timeout"] {
        assert!(once.contains(flag), "{flag} missing:\n{once}");
    }
    let reindex = text(&reconciler(&["reindex", "--help"], &[]));
    for flag in ["--index", "--in-place", "messages", "convos"] {
        assert!(reindex.contains(flag), "{flag} missing:\n{reindex}");
    }
}

/// `--version` prints the name and `Cargo.toml`'s version, and nothing is
/// needed for it (no settings, no servers).
#[test]
fn version_prints_the_package_version() {
    let out = reconciler(&["--version"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("meili-reconciler {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn bad_configuration_exits_2_naming_the_key() {
    let out = reconciler(
        &["plan"],
        &[
            ("MONGO_URI", "mongodb://127.0.0.1:1/x"),
            ("MEILI_HOST", "http://127.0.0.1:2"),
            ("RECONCILER__LEASE__RENEW_EVERY", "10m"),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("lease.renew_every"), "{}", text(&out));

    let out = reconciler(&["once"], &[("MEILI_HOST", "http://127.0.0.1:2")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("MONGO_URI"), "{}", text(&out));

    let out = reconciler(&["reindex", "--index", "users"], &[]);
    assert_eq!(out.status.code(), Some(2), "unknown index name");
    assert!(text(&out).contains("messages"), "{}", text(&out));
}

#[test]
fn search_disabled_exits_0_without_touching_servers() {
    let out = reconciler(
        &["once"],
        &[
            ("MONGO_URI", "mongodb://127.0.0.1:1/x"),
            ("MEILI_HOST", "http://127.0.0.1:2"),
            ("SEARCH", "false"),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("disabled"), "{}", text(&out));

    // A replica whose `.env` names no server at all, search being off.
    for command in ["once", "status"] {
        let out = reconciler(&[command], &[("SEARCH", "false")]);
        assert_eq!(out.status.code(), Some(0), "{command}: {}", text(&out));
        assert!(text(&out).contains("disabled"), "{}", text(&out));
    }
}

/// `plan` and `status` are run by an operator at a terminal: against an
/// unreachable MongoDB they give up within `mongo.connect_timeout` (one
/// attempt, not the start-up retries of `once`/`run`, which took 5 × the
/// timeout plus backoff), with one line on stderr naming the server and the
/// cause — not the driver's topology dump, and never the URI's password.
#[test]
fn interactive_commands_fail_fast_with_one_line_against_an_unreachable_mongo() {
    let connect_timeout = Duration::from_secs(2);
    for command in ["plan", "status"] {
        let started = Instant::now();
        let out = reconciler(
            &[command],
            &[
                ("MONGO_URI", "mongodb://admin:pw-do-not-print@127.0.0.1:1/x"),
                ("MEILI_HOST", "http://127.0.0.1:2"),
                ("MEILI_MASTER_KEY", "key-do-not-print"),
                ("RECONCILER__MONGO__CONNECT_TIMEOUT", "2s"),
            ],
        );
        let elapsed = started.elapsed();
        let all = text(&out);
        assert_eq!(out.status.code(), Some(4), "{command}: {all}");
        // One attempt takes one connect timeout; the start-up retries took at
        // least five.
        assert!(
            elapsed < connect_timeout * 3,
            "{command} took {elapsed:?} with mongo.connect_timeout = {connect_timeout:?}"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{command}: one line on stderr:\n{stderr}");
        let line = lines[0];
        assert!(
            line.contains("MongoDB at mongodb://***@127.0.0.1:1/x")
                && line.contains("connection refused"),
            "{command}: names the server and the cause: {line}"
        );
        assert!(!line.contains("Topology"), "{command}: {line}");
        assert!(!all.contains("do-not-print"), "{command}: {all}");
    }
}

/// `once` (like `run`) keeps waiting for a server that may still be starting
/// beside it: it retries, saying so, before exit 4.
#[test]
fn once_retries_an_unreachable_mongo_before_exit_4() {
    let out = reconciler(
        &["once"],
        &[
            ("MONGO_URI", "mongodb://admin:pw-do-not-print@127.0.0.1:1/x"),
            ("MEILI_HOST", "http://127.0.0.1:2"),
            ("RECONCILER__MONGO__CONNECT_TIMEOUT", "100ms"),
            ("RECONCILER__LOG__FORMAT", "json"),
        ],
    );
    let all = text(&out);
    assert_eq!(out.status.code(), Some(4), "{all}");
    assert!(all.contains("MongoDB not reachable yet"), "{all}");
    assert!(all.contains("connection refused"), "{all}");
    assert!(!all.contains("do-not-print"), "{all}");
}

/// Values that used to get past the configuration and fail later — a master
/// key no HTTP header can hold (a panic, exit 101, after connecting to
/// MongoDB), a URI the MongoDB driver refuses (reported as unreachable, exit
/// 4) — are bad configuration: exit 2 naming the setting and its variable,
/// without the secret.
#[test]
fn values_the_clients_would_refuse_exit_2_without_the_secret() {
    let out = reconciler(
        &["plan"],
        &[
            ("MONGO_URI", "mongodb://127.0.0.1:1/x"),
            ("MEILI_HOST", "http://127.0.0.1:2"),
            ("MEILI_MASTER_KEY", "key-do-not-print\u{1}KEY"),
            ("RECONCILER__MONGO__CONNECT_TIMEOUT", "200ms"),
        ],
    );
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(
        all.contains("meili.master_key") && all.contains("MEILI_MASTER_KEY"),
        "{all}"
    );
    assert!(!all.contains("do-not-print"), "{all}");

    for uri in [
        "mongodb://u:pw-do-not-print@127.0.0.1:1/x?badopt=1",
        "mongodb://u:pw-do-not-print@127.0.0.1:99999/x",
        "mongodb://u:pw-do-not-print@127.0.0.1:1/x?authMechanism=FOO",
        "mongodb://u:pw%do-not-print@127.0.0.1:1/x",
        "mongodb://u:pw:do-not-print@127.0.0.1:1/x",
        "mongodb://u:pw/do-not-print@127.0.0.1:1/x",
    ] {
        let out = reconciler(
            &["plan"],
            &[
                ("MONGO_URI", uri),
                ("MEILI_HOST", "http://127.0.0.1:2"),
                ("RECONCILER__MONGO__CONNECT_TIMEOUT", "200ms"),
            ],
        );
        let all = text(&out);
        assert_eq!(out.status.code(), Some(2), "{uri}: {all}");
        assert!(
            all.contains("mongo.uri") && all.contains("MONGO_URI"),
            "{uri}: {all}"
        );
        assert!(!all.contains("do-not-print"), "{uri}: {all}");
        assert!(!all.contains("unreachable"), "{uri}: {all}");
    }
}

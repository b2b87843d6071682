//! What `run` says once, at start, that an operator would not assume: its
//! version; each of LibreChat's sync variables in the shared environment
//! that sets one of its own settings (the variable, its value, the value it
//! replaced, what to do); and its mode — follow or interval — with the
//! reason, in the log, in `/status` and in `status`. Real processes; every
//! wait is on a log line or an HTTP answer, with a deadline.

use crate::support;

use std::time::Duration;

use serde_json::Value;
use support::cli::{eventually, free_port, output_of, terminate, wait_exit, Replica, Target};

const SOON: Duration = Duration::from_secs(60);

/// The replica's JSON log lines.
fn log_lines(log: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .collect()
}

/// The log lines whose message contains `needle`.
fn lines_with(log: &str, needle: &str) -> Vec<Value> {
    log_lines(log)
        .into_iter()
        .filter(|line| line["message"].as_str().is_some_and(|m| m.contains(needle)))
        .collect()
}

/// The log lines whose message starts with `prefix`.
fn lines_starting(log: &str, prefix: &str) -> Vec<Value> {
    log_lines(log)
        .into_iter()
        .filter(|line| {
            line["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(prefix))
        })
        .collect()
}

fn message(line: &Value) -> &str {
    line["message"].as_str().unwrap_or_default()
}

/// `target` listening on a free port, and the base URL of its endpoints.
fn listening(target: Target) -> (Target, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    (
        target.set("RECONCILER__SERVE__LISTEN", &listen),
        format!("http://{listen}"),
    )
}

async fn status(base: &str) -> Option<Value> {
    reqwest::get(format!("{base}/status"))
        .await
        .ok()?
        .json()
        .await
        .ok()
}

/// `/status` once `mode` is decided (`follow` or `interval`).
async fn await_mode(base: &str, mode: &str) -> Value {
    eventually(SOON, &format!("/status with mode {mode}"), || async {
        let status = status(base).await?;
        (status["mode"] == mode).then_some(status)
    })
    .await
}

/// SIGTERM, a clean exit, and everything it logged.
fn stop(replica: Replica) -> String {
    let mut replica = replica;
    terminate(&replica);
    assert!(wait_exit(&mut replica, Duration::from_secs(30)).success());
    output_of(replica).1
}

/// `status --json` and `status` of `target`, as an operator runs them.
fn status_cli(target: &Target) -> (Value, String) {
    let out = target.run("operator", &["status", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let json: Value = serde_json::from_slice(&out.stdout).expect("status --json is JSON");
    let out = target.run("operator", &["status"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    (json, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// LibreChat's `.env.example` values of its own sync settings, read by a
/// `run` that reconciles several times: each is logged once, as a warning,
/// with the variable, its value, the setting, the default it replaced and
/// the service's own variable; a LibreChat variable the service's own
/// variable overrides is not. The version is logged once and in `/status`;
/// interval mode chosen by `serve.follow = false` is an INFO, once.
#[tokio::test(flavor = "multi_thread")]
async fn librechat_sync_variables_are_logged_once_each_with_the_default_they_replaced() {
    let (target, base) = listening(
        Target::new("notices_librechat")
            .set("MEILI_SYNC_BATCH_SIZE", "100")
            .set("MEILI_SYNC_DELAY_MS", "100")
            // The suite sets RECONCILER__SYNC__THRESHOLD=0: the service's own wins.
            .set("MEILI_SYNC_THRESHOLD", "5")
            .set("RECONCILER__SERVE__FOLLOW", "false")
            .set("RECONCILER__SERVE__INTERVAL", "1s"),
    );
    let replica = target.spawn("replica-notices", &["run"]);
    let status = await_mode(&base, "interval").await;
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"), "{status}");
    assert!(
        status["modeReason"]
            .as_str()
            .unwrap()
            .contains("serve.follow is false"),
        "{status}"
    );
    // Start-up notices are not repeated per run: wait for a few runs.
    eventually(SOON, "three scheduled runs", || async {
        (replica
            .stderr_so_far()
            .matches("waiting for the next run")
            .count()
            >= 3)
            .then_some(())
    })
    .await;
    let log = stop(replica);

    let batch = lines_with(&log, "MEILI_SYNC_BATCH_SIZE");
    assert_eq!(batch.len(), 1, "said once:\n{log}");
    let batch = &batch[0];
    assert_eq!(batch["level"], "WARN", "{batch}");
    assert_eq!(
        (&batch["variable"], &batch["value"], &batch["replaced"]),
        (
            &Value::from("MEILI_SYNC_BATCH_SIZE"),
            &Value::from("100"),
            &Value::from("10000")
        ),
        "{batch}"
    );
    for part in [
        "MEILI_SYNC_BATCH_SIZE=100",
        "sync.batch_docs to 100",
        "in place of the default 10000",
        "set RECONCILER__SYNC__BATCH_DOCS",
        "unset MEILI_SYNC_BATCH_SIZE",
    ] {
        assert!(message(batch).contains(part), "{part}: {batch}");
    }

    let delay = lines_with(&log, "MEILI_SYNC_DELAY_MS");
    assert_eq!(delay.len(), 1, "said once:\n{log}");
    let delay = &delay[0];
    assert_eq!(delay["level"], "WARN", "{delay}");
    assert_eq!(
        (&delay["variable"], &delay["value"], &delay["replaced"]),
        (
            &Value::from("MEILI_SYNC_DELAY_MS"),
            &Value::from("100"),
            &Value::from("0ms")
        ),
        "{delay}"
    );
    for part in [
        "MEILI_SYNC_DELAY_MS=100",
        "sync.delay to 100ms",
        "in place of the default 0ms",
        "set RECONCILER__SYNC__DELAY",
        "unset MEILI_SYNC_DELAY_MS",
    ] {
        assert!(message(delay).contains(part), "{part}: {delay}");
    }

    assert!(
        lines_with(&log, "MEILI_SYNC_THRESHOLD").is_empty(),
        "RECONCILER__SYNC__THRESHOLD wins, nothing to say:\n{log}"
    );
    let started = lines_with(&log, "starting `run`");
    assert_eq!(started.len(), 1, "{log}");
    assert_eq!(started[0]["version"], env!("CARGO_PKG_VERSION"));
    assert!(
        message(&started[0]).contains(&format!("meili-reconciler {}", env!("CARGO_PKG_VERSION"))),
        "{}",
        started[0]
    );
    let mode = lines_starting(&log, "interval mode: ");
    assert_eq!(mode.len(), 1, "{log}");
    assert_eq!(mode[0]["level"], "INFO", "chosen, not imposed: {}", mode[0]);
    target.cleanup().await;
}

/// On a server without change streams — the test MongoDB when it has none
/// (DocumentDB), else a private standalone secantusdb — `run` logs one
/// WARN saying why (the server's answer) and what would give follow mode,
/// and `/status`, `status --json` and `status` show the same.
#[tokio::test(flavor = "multi_thread")]
async fn interval_mode_says_why_in_the_log_and_in_status() {
    let shared_lacks_them = support::server::no_change_streams().await;
    let private;
    let target = match &shared_lacks_them {
        Some(_) => Target::new("notices_interval"),
        None => {
            let Some(mongo) = support::private_mongo::private_mongo(&["--standalone"]).await else {
                return;
            };
            private = mongo;
            Target::new("notices_interval").with_mongo(&private.uri)
        }
    };
    let (target, base) = listening(target.set("RECONCILER__SERVE__INTERVAL", "1h"));
    let replica = target.spawn("replica-interval", &["run"]);
    let status = await_mode(&base, "interval").await;
    assert_eq!(status["follow"]["state"], "unsupported", "{status}");
    let reason = status["modeReason"].as_str().unwrap().to_string();
    let needs = status["followNeeds"].as_str().unwrap().to_string();
    assert!(
        reason.starts_with("MongoDB does not serve change streams here: ")
            && reason.contains("the server answered: ")
            && reason.contains("(code "),
        "{reason}"
    );
    match &shared_lacks_them {
        // A DocumentDB-based server refuses with CommandNotSupported.
        Some(why) if why.contains("code 115") => {
            assert!(reason.contains("does not implement them"), "{reason}");
            assert!(needs.contains("a MongoDB replica set"), "{needs}");
        }
        Some(_) => {}
        None => {
            assert!(
                reason.contains("it is a standalone server, and change streams need a replica set"),
                "{reason}"
            );
            assert!(
                needs.contains("--replSet rs0")
                    && needs.contains("rs.initiate()")
                    && needs.contains("docs/install.md#follow-mode"),
                "{needs}"
            );
        }
    }

    // `status` asks the server the same question and gives the same answer.
    let (json, text) = status_cli(&target);
    assert_eq!(json["mode"], "interval", "{json}");
    assert_eq!(json["modeReason"], reason.as_str(), "{json}");
    assert_eq!(json["followNeeds"], needs.as_str(), "{json}");
    assert!(
        text.contains(&format!("mode:       interval — {reason}")),
        "{text}"
    );
    assert!(
        text.contains(&format!("for follow mode: {needs}")),
        "{text}"
    );

    let log = stop(replica);
    let warned = lines_starting(&log, "interval mode: ");
    assert_eq!(warned.len(), 1, "said once:\n{log}");
    let line = &warned[0];
    assert_eq!(line["level"], "WARN", "imposed by the server: {line}");
    assert_eq!(line["mode"], "interval", "{line}");
    for part in [
        reason.as_str(),
        needs.as_str(),
        "serve.follow = false (RECONCILER__SERVE__FOLLOW=false)",
    ] {
        assert!(message(line).contains(part), "{part}: {line}");
    }
    assert!(lines_starting(&log, "follow mode: ").is_empty(), "{log}");
    target.cleanup().await;
}

/// Where change streams are served, `run` says it follows them, once, and
/// `/status` and `status` say so too.
#[tokio::test(flavor = "multi_thread")]
async fn follow_mode_says_so_in_the_log_and_in_status() {
    if support::server::skip_without_change_streams().await {
        return;
    }
    let (target, base) =
        listening(Target::new("notices_follow").set("RECONCILER__SERVE__INTERVAL", "1h"));
    let replica = target.spawn("replica-follow", &["run"]);
    let status = await_mode(&base, "follow").await;
    let reason = status["modeReason"].as_str().unwrap().to_string();
    assert!(
        reason.starts_with("MongoDB serves change streams"),
        "{status}"
    );
    assert!(status["followNeeds"].is_null(), "{status}");

    let (json, text) = status_cli(&target);
    assert_eq!(json["mode"], "follow", "{json}");
    assert_eq!(json["modeReason"], reason.as_str(), "{json}");
    assert!(json["followNeeds"].is_null(), "{json}");
    assert!(
        text.contains(&format!("mode:       follow — {reason}")),
        "{text}"
    );
    assert!(!text.contains("for follow mode:"), "{text}");

    let log = stop(replica);
    let said = lines_starting(&log, "follow mode: ");
    assert_eq!(said.len(), 1, "said once:\n{log}");
    assert_eq!(said[0]["level"], "INFO", "{}", said[0]);
    assert!(lines_starting(&log, "interval mode: ").is_empty(), "{log}");
    target.cleanup().await;
}

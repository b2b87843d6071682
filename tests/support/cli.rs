//! Runs the real `meili-reconciler` binary as a subprocess against the test
//! servers, in the test's own database and index prefix, with the suite's
//! lease timings (`support::timing`: short, with a loaded machine's headroom).

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use mongodb::bson::{doc, Document};
use serde_json::Value;

/// Where one test's replicas point.
#[derive(Clone, Debug)]
pub struct Target {
    /// The MongoDB (the shared one unless [`Target::with_mongo`]).
    pub mongo_uri: String,
    pub database: String,
    pub prefix: String,
    pub meili_host: String,
    pub meili_key: String,
    /// Extra `RECONCILER__…` settings for every replica.
    pub env: Vec<(String, String)>,
}

impl Target {
    /// The shared servers, a fresh database and index prefix.
    pub fn new(tag: &str) -> Self {
        let meili = super::meili();
        let name = super::unique_name(tag);
        Target {
            mongo_uri: super::mongo_uri().to_string(),
            database: name.clone(),
            prefix: format!("{name}_"),
            meili_host: meili.host.clone(),
            meili_key: meili.key.clone(),
            env: super::timing::lease()
                .env()
                .into_iter()
                // The suite's lease timings (support::timing): a crashed
                // owner is replaced within one ttl.
                .chain([("RECONCILER__SYNC__THRESHOLD".into(), "0".into())])
                .collect(),
        }
    }

    /// Points the replicas at another Meilisearch (a private stand-in).
    pub fn with_meili(mut self, host: &str, key: &str) -> Self {
        self.meili_host = host.to_string();
        self.meili_key = key.to_string();
        self
    }

    /// Points the replicas at another MongoDB (a private server).
    pub fn with_mongo(mut self, uri: &str) -> Self {
        self.mongo_uri = uri.to_string();
        self
    }

    pub fn set(mut self, key: &str, value: &str) -> Self {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// The binary with this target's environment (and nothing inherited
    /// but PATH, so a developer's own settings cannot leak in).
    pub fn command(&self, owner: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_meili-reconciler"));
        cmd.args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("MONGO_URI", &self.mongo_uri)
            .env("RECONCILER__MONGO__DATABASE", &self.database)
            .env("MEILI_HOST", &self.meili_host)
            .env("MEILI_MASTER_KEY", &self.meili_key)
            .env("RECONCILER__MEILI__INDEX_PREFIX", &self.prefix)
            .env("RECONCILER__LEASE__OWNER", owner)
            .env("RECONCILER__LOG__FORMAT", "json")
            .env("RUST_LOG", "info");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Runs to completion and returns its output.
    pub fn run(&self, owner: &str, args: &[&str]) -> Output {
        self.command(owner, args)
            .output()
            .expect("run meili-reconciler")
    }

    /// Starts it in the background. Its output goes to files, not pipes: a
    /// long-running replica would block once a pipe nobody reads is full.
    pub fn spawn(&self, owner: &str, args: &[&str]) -> Replica {
        self.spawn_with(owner, args, &[])
    }

    /// [`Target::spawn`] with variables for this one process (e.g. servers
    /// reached through a proxy).
    pub fn spawn_with(&self, owner: &str, args: &[&str], env: &[(&str, &str)]) -> Replica {
        let dir = tempfile::tempdir().expect("temp dir for the replica's output");
        let out = dir.path().join("stdout");
        let err = dir.path().join("stderr");
        let mut command = self.command(owner, args);
        for (key, value) in env {
            command.env(key, value);
        }
        let child = command
            .stdout(Stdio::from(std::fs::File::create(&out).unwrap()))
            .stderr(Stdio::from(std::fs::File::create(&err).unwrap()))
            .spawn()
            .expect("spawn meili-reconciler");
        Replica {
            child,
            out,
            err,
            _dir: dir,
        }
    }

    pub async fn db(&self) -> mongodb::Database {
        let client = mongodb::Client::with_uri_str(&self.mongo_uri)
            .await
            .expect("mongo client");
        client.database(&self.database)
    }

    /// The lease document, if any.
    pub async fn lease(&self) -> Option<Document> {
        self.db()
            .await
            .collection::<Document>("distributedJobs")
            .find_one(doc! { "_id": "meili-index-sync" })
            .await
            .expect("read the lease")
    }

    /// `GET` on Meilisearch, as JSON.
    pub async fn meili_get(&self, path: &str) -> Value {
        reqwest::Client::new()
            .get(format!("{}{path}", self.meili_host))
            .bearer_auth(&self.meili_key)
            .send()
            .await
            .expect("meilisearch answers")
            .json()
            .await
            .expect("json")
    }

    /// Documents in one of this target's indexes (0 if it does not exist).
    pub async fn meili_count(&self, index: &str) -> u64 {
        let stats = self
            .meili_get(&format!("/indexes/{}{index}/stats", self.prefix))
            .await;
        stats["numberOfDocuments"].as_u64().unwrap_or(0)
    }

    /// Drops the database and the indexes.
    pub async fn cleanup(&self) {
        let _ = self.db().await.drop().await;
        for index in ["messages", "convos"] {
            let _ = reqwest::Client::new()
                .delete(format!(
                    "{}/indexes/{}{index}",
                    self.meili_host, self.prefix
                ))
                .bearer_auth(&self.meili_key)
                .send()
                .await;
        }
    }
}

/// Whether `owner` is the id of a replica started with `label` as its
/// `lease.owner` (`Target::command`): the label, a colon and the process's
/// own 8-character suffix, which keeps replicas given one label apart.
pub fn is_labelled(owner: &str, label: &str) -> bool {
    owner
        .strip_prefix(label)
        .and_then(|rest| rest.strip_prefix(':'))
        .is_some_and(|suffix| suffix.len() == 8 && suffix.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `check` every 50 ms until it returns `Some`, or panics after `limit`
/// naming `what`.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A replica started by [`Target::spawn`]; killed on drop if still running,
/// so a failing test leaves no process behind.
pub struct Replica {
    pub child: Child,
    out: std::path::PathBuf,
    err: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Replica {
    /// What the replica has written to stderr so far.
    pub fn stderr_so_far(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// Waits until the replica, started with `RECONCILER_TEST_PAUSE_AFTER`,
    /// says it paused after `step`; panics if it exits first or after `limit`.
    pub async fn await_pause(&mut self, step: &str, limit: Duration) {
        let paused = format!("test hook: paused after {step}");
        let waited = Instant::now();
        while !self.stderr_so_far().contains(&paused) {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "exited ({status}) before pausing after {step}: {}",
                    self.stderr_so_far()
                );
            }
            assert!(waited.elapsed() < limit, "no pause after {step}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Sends SIGTERM to a replica.
pub fn terminate(replica: &Replica) {
    let child = &replica.child;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("send SIGTERM");
}

/// Waits for a replica to exit, at most `limit`; kills it and panics past that.
pub fn wait_exit(replica: &mut Replica, limit: Duration) -> std::process::ExitStatus {
    let child = &mut replica.child;
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("process did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Everything a replica wrote (stdout, stderr), once it has exited.
pub fn output_of(mut replica: Replica) -> (String, String) {
    let _ = replica.child.wait();
    (
        std::fs::read_to_string(&replica.out).unwrap_or_default(),
        std::fs::read_to_string(&replica.err).unwrap_or_default(),
    )
}

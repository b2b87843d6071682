//! A MongoDB of one test's own: a secantusdb process (the stand-in
//! `scripts/test-servers` installs) started with extra flags — a tiny oplog
//! (`--oplog-max-entries`), or no replica set at all (`--standalone`, so no
//! change streams). Stopped on drop.
//!
//! Only the stand-in can be started like this: without
//! `.test-servers/venv/bin/secantusd-py` (e.g. against a real MongoDB)
//! [`private_mongo`] says the test is skipped ([`super::skip::skip`]) and
//! returns `None`.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A secantusdb process of this test alone.
pub struct PrivateMongo {
    pub uri: String,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for PrivateMongo {
    /// SIGTERM first, so secantusd removes its working directory under
    /// /tmp (a SIGKILL leaves one behind per test); SIGKILL if it lingers.
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts secantusdb with `extra_args`, or says why not (the test is
/// skipped) and returns `None`.
pub async fn private_mongo(extra_args: &[&str]) -> Option<PrivateMongo> {
    let exe = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/.test-servers/venv/bin/secantusd-py"
    );
    if !std::path::Path::new(exe).is_file() {
        super::skip::skip(format_args!(
            "no {exe} (run scripts/test-servers start; a private MongoDB with custom flags needs the stand-in)"
        ));
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    // An empty config file keeps secantusd from reading one elsewhere.
    let config = dir.path().join("secantusd.toml");
    std::fs::write(&config, "").unwrap();
    let port = super::cli::free_port();
    let child = Command::new(exe)
        .arg("--config")
        .arg(&config)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--storage-path", ":memory:", "--log-level", "WARNING"])
        .args(extra_args)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start secantusd-py");
    let uri = format!("mongodb://127.0.0.1:{port}/?directConnection=true");
    let mongo = PrivateMongo {
        uri,
        child,
        _dir: dir,
    };
    let client = mongodb::Client::with_uri_str(&mongo.uri).await.unwrap();
    let started = Instant::now();
    while client
        .database("admin")
        .run_command(mongodb::bson::doc! { "ping": 1 })
        .await
        .is_err()
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "secantusd at {} did not answer",
            mongo.uri
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Some(mongo)
}

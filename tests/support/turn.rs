//! Turns on a server-wide resource between tests in any process: the suite's
//! tests run as processes side by side (scripts/test), so a lock held in one
//! test binary's memory would not keep another's out. The lock is an
//! exclusive lock on a file in the temporary directory named after the
//! resource and the server, released when the [`Turn`] is dropped or its
//! process ends.
#![allow(dead_code)]

use std::hash::{Hash, Hasher};

/// Held while a test uses the resource.
pub struct Turn(std::fs::File);

/// Waits for `resource` (e.g. `failpoint`) on `server` (its URI or host).
pub async fn take(resource: &str, server: &str) -> Turn {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    server.hash(&mut hasher);
    let path = std::env::temp_dir().join(format!(
        "meili-reconciler-{resource}-{:016x}.lock",
        hasher.finish()
    ));
    tokio::task::spawn_blocking(move || {
        let file = std::fs::File::create(&path)
            .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        file.lock()
            .unwrap_or_else(|e| panic!("lock {}: {e}", path.display()));
        Turn(file)
    })
    .await
    .expect("wait for a turn")
}

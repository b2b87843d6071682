//! A test that cannot run on the given servers says so, visibly, and is
//! counted: [`skip`] writes one line
//!
//! ```text
//! SKIPPED <test binary>::<test>: <reason>
//! ```
//!
//! where the test is named by its path in the binary: `<file>::<test>` in
//! the `suite` binary (`SKIPPED suite::follow_changes::…`), whose modules
//! are the files tests/<file>.rs.
//!
//! to stderr *past* the test harness's output capture (libtest hides what a
//! passing test prints with `eprintln!`, and a skipped test passes as far as
//! libtest knows), and appends it to the file named by `TEST_SKIP_LOG` when
//! that is set. `scripts/test` sets it, counts the lines and ends with
//! `tests: N passed, M failed, K skipped`, listing each skip.
//!
//! The test then returns at once: `return skip("…")` (or `let Some(x) = …
//! else { return skip("…") };`).
#![allow(dead_code)]

use std::fmt::Display;
use std::io::Write;

/// The calling test's name as the summary shows it: the test binary (this
/// crate) and the test's path in it, from the thread libtest runs it on.
pub fn current_test() -> String {
    let thread = std::thread::current();
    let name = thread.name().unwrap_or("<unnamed thread>");
    // libtest names a test's thread after the test; `main` when it runs
    // tests on the main thread, a tokio worker when called from a task.
    format!("{}::{name}", env!("CARGO_CRATE_NAME"))
}

/// Says the calling test did not run, and why (see the module docs).
pub fn skip(reason: impl Display) {
    let line = format!(
        "SKIPPED {}: {}\n",
        current_test(),
        reason.to_string().replace('\n', " ")
    );
    // `std::io::stderr()` written to directly is not captured (only the
    // print macros are), so the line shows in `cargo test`'s live output.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
    if let Some(path) = std::env::var_os("TEST_SKIP_LOG").filter(|p| !p.is_empty()) {
        // One append of one short line: lines of tests running in parallel
        // (threads, processes) do not interleave.
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut file| file.write_all(line.as_bytes()));
        if let Err(error) = written {
            panic!("cannot record the skip in TEST_SKIP_LOG ({path:?}): {error}");
        }
    }
}

/// Skips the calling test (saying why) when the service was built without
/// its `fault-injection` feature: the test hook that stops a run at a
/// given step (`RECONCILER_TEST_PAUSE_AFTER`, src/reconcile/test_hook.rs)
/// is then compiled out. `true` when it skipped, so the test returns.
pub fn skip_without_fault_injection() -> bool {
    if cfg!(feature = "fault-injection") {
        return false;
    }
    skip("built without the fault-injection feature (scripts/test enables it)");
    true
}

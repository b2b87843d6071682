//! The integration tests that assert on the service's process-wide state —
//! `flag_retry::retries()`, the flag writes sent again in this process —
//! which tests running beside them in `tests/suite.rs` would move too. A
//! test's name is `<module>::<test>`, as in the suite.

mod support;

mod flag_write_faults;

//! Failures as an operator says them ("connection refused", not "os error
//! 111"): below `servers` (the start-up check) and `meili` (every HTTP
//! exchange), which both describe I/O errors this way.

/// An I/O error as an operator says it: "connection refused", not "os error 111".
pub(crate) fn io_cause(error: &std::io::Error) -> String {
    use std::io::ErrorKind as Io;
    match error.kind() {
        Io::ConnectionRefused => "connection refused".into(),
        Io::ConnectionReset => "connection reset".into(),
        Io::ConnectionAborted => "connection aborted".into(),
        Io::TimedOut => "connection timed out".into(),
        Io::HostUnreachable => "host unreachable".into(),
        Io::NetworkUnreachable => "network unreachable".into(),
        Io::AddrNotAvailable => "address not available".into(),
        _ => first_line(&error.to_string()),
    }
}

/// The first line of `text`, trimmed (a cause is said in one line).
pub(crate) fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").trim().to_string()
}

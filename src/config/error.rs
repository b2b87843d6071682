//! The error of loading the settings ([`ConfigError`]), below `config` and
//! its `mongo_uri` part so that both can return it: the URI's parser is
//! `config`'s child and must not import from its parent.

/// A bad configuration: names the key, the offending value (redacted when
/// secret) and what is allowed. The CLI exits with code 2 on it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid value {value:?} for `{key}`: {allowed}")]
    Invalid {
        key: String,
        value: String,
        allowed: String,
    },
    #[error("`{key}` is required: {hint}")]
    Missing { key: String, hint: String },
    /// `var`: the environment variable that set it, if one did.
    #[error(
        "unknown setting `{key}`{}; known settings: {known}",
        var.as_ref().map(|var| format!(" (set by {var})")).unwrap_or_default()
    )]
    Unknown {
        key: String,
        var: Option<String>,
        known: String,
    },
    #[error("cannot read configuration file {path}: {reason}")]
    File { path: String, reason: String },
}

impl ConfigError {
    pub(super) fn invalid(key: &str, value: impl Into<String>, allowed: impl Into<String>) -> Self {
        ConfigError::Invalid {
            key: key.to_string(),
            value: value.into(),
            allowed: allowed.into(),
        }
    }
}

//! The MongoDB connection string (`mongo.uri`): validated by the driver's
//! own parser when the settings load, so that a URI the driver would refuse
//! is bad configuration (exit 2) rather than an unreachable server, and held
//! in [`MongoUri`], whose `Debug`/`Display` hide its credentials and
//! secret-bearing options. Also the redaction of URLs that may not be well
//! formed ([`redact_uri`]) and the scrubbing of the secrets the driver may
//! echo back in its messages ([`MongoUri::scrub`]).

use std::fmt;

use percent_encoding::percent_decode_str;
use serde::{de::Error, Deserialize, Deserializer};

use crate::cause::first_line;
use crate::setting;

/// A MongoDB connection string, validated by the driver's own parser, whose
/// `Debug`/`Display` hide its credentials and secret-bearing options.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct MongoUri {
    uri: String,
    /// The database named in the path, percent-decoded, as the driver reads it.
    pub(super) database: Option<String>,
}

impl MongoUri {
    /// The full URI, credentials included, for the driver only.
    pub fn expose(&self) -> &str {
        &self.uri
    }

    /// The URI with any `user:password@` replaced by `***@` and the values of
    /// secret-bearing options ([`SECRET_URI_OPTIONS`]) by `***`.
    pub(crate) fn redacted(&self) -> String {
        // Validated: the userinfo holds no reserved character, so it ends at
        // the last `@` before the options, as the driver splits it (an `@` in
        // an option such as `appName` stays readable).
        redact(&self.uri, true)
    }

    /// Whether one was given: `mongo.uri` may be empty only where no server
    /// is reached (search off), which `config` checks after loading.
    pub(crate) fn is_set(&self) -> bool {
        !self.uri.is_empty()
    }

    /// `text`, a message of the driver's, without any secret of the URI it
    /// may echo back (the password and the values of secret-bearing options,
    /// raw and percent-decoded); one shorter than 4 bytes is left, not to
    /// mangle the message.
    pub(crate) fn scrub(&self, text: String) -> String {
        scrub(&self.uri, text)
    }
}

impl<'de> Deserialize<'de> for MongoUri {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let uri = setting::text(d)?;
        if uri.is_empty() {
            return Ok(MongoUri::default());
        }
        parse_mongo_uri(&uri).map_err(D::Error::custom)
    }
}

impl fmt::Debug for MongoUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.redacted())
    }
}

impl fmt::Display for MongoUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// Options of a MongoDB connection string (lowercase) whose values are
/// secrets: never shown, always scrubbed from the driver's messages.
const SECRET_URI_OPTIONS: &[&str] = &[
    "authmechanismproperties",
    "proxypassword",
    "tlscertificatekeyfilepassword",
];

/// Redacts a URL or connection string that may not be well formed: everything
/// between `://` and the last `@` (a password may itself hold `/`, `?` or
/// `@`) becomes `***`, and so does the value of every secret-bearing option.
/// An `@` in the options hides more than the userinfo: never less.
pub(crate) fn redact_uri(uri: &str) -> String {
    redact(uri, false)
}

/// Redacts `uri`, whose userinfo ends at the last `@` before the options
/// with `before_options` (a URI the driver accepted), else at the last `@`
/// of all (a URI that may not be well formed).
fn redact(uri: &str, before_options: bool) -> String {
    let rest = uri.split_once("://").map_or(uri, |(_, rest)| rest);
    let scheme = &uri[..uri.len() - rest.len()];
    let searched = match before_options {
        true => rest.split('?').next().unwrap_or(rest),
        false => rest,
    };
    let rest = match searched.rfind('@') {
        Some(at) => format!("***{}", &rest[at..]),
        None => rest.to_string(),
    };
    match rest.split_once('?') {
        Some((before, options)) => format!("{scheme}{before}?{}", redact_secret_options(options)),
        None => format!("{scheme}{rest}"),
    }
}

/// `a=1&authMechanismProperties=AWS_SESSION_TOKEN:x` → `a=1&authMechanismProperties=***`.
fn redact_secret_options(options: &str) -> String {
    let pairs = options.split('&').map(|pair| match pair.split_once('=') {
        Some((key, _)) if is_secret_option(key) => format!("{key}=***"),
        _ => pair.to_string(),
    });
    pairs.collect::<Vec<_>>().join("&")
}

fn is_secret_option(key: &str) -> bool {
    let key = percent_decode(key).to_ascii_lowercase();
    SECRET_URI_OPTIONS.contains(&key.as_str())
}

/// `%41` → `A`; a `%` not followed by two hex digits stays as it is.
fn percent_decode(text: &str) -> String {
    percent_decode_str(text).decode_utf8_lossy().into_owned()
}

/// `text` with every secret of `uri` ([`uri_passwords`],
/// [`uri_option_secrets`]) replaced by `***`, longest first; one shorter
/// than 4 bytes is left, not to mangle the text.
fn scrub(uri: &str, text: String) -> String {
    let mut secrets = uri_passwords(uri);
    secrets.extend(uri_option_secrets(uri));
    secrets.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
    secrets.dedup();
    let secrets = secrets.iter().filter(|s| s.len() >= 4);
    secrets.fold(text, |text, secret| text.replace(secret, "***"))
}

/// The password, raw and percent-decoded: after the first `:` of the userinfo
/// as the driver splits a valid URI (up to the last `@` before the options),
/// and as far as it might reach in an invalid one (up to the last `@`).
fn uri_passwords(uri: &str) -> Vec<String> {
    let rest = uri.split_once("://").map_or(uri, |(_, rest)| rest);
    let before_options = rest.split('?').next().unwrap_or("");
    let mut secrets = Vec::new();
    for part in [before_options, rest] {
        let userinfo = part.rsplit_once('@').map_or("", |(userinfo, _)| userinfo);
        if let Some((_, password)) = userinfo.split_once(':') {
            secrets.push(password.to_string());
            secrets.push(percent_decode(password));
        }
    }
    secrets.retain(|s| !s.is_empty());
    secrets
}

/// The values of secret-bearing options, raw and percent-decoded, and for
/// `authMechanismProperties` each `KEY:value` entry and each value.
fn uri_option_secrets(uri: &str) -> Vec<String> {
    let mut secrets = Vec::new();
    let options = uri.split_once('?').map_or("", |(_, options)| options);
    let pairs = options.split('&').filter_map(|pair| pair.split_once('='));
    for (_, value) in pairs.filter(|(key, _)| is_secret_option(key)) {
        let decoded = percent_decode(value);
        secrets.push(value.to_string());
        for property in decoded.split(',') {
            secrets.push(property.to_string());
            if let Some((_, v)) = property.split_once(':') {
                secrets.push(v.to_string());
            }
        }
        secrets.push(decoded);
    }
    secrets.retain(|s| !s.is_empty());
    secrets
}

/// Validates `mongo.uri` with the MongoDB driver's own parser, so that a URI
/// the driver would refuse is bad configuration (exit 2) rather than an
/// unreachable server. Only a `mongodb+srv://` URI's DNS lookup (and what the
/// records it finds say) is left to connecting: a lookup that fails there is
/// an unreachable server. The error is what is allowed, with the driver's
/// reason without any secret (`config` shows the URI redacted,
/// [`redact_uri`]).
fn parse_mongo_uri(uri: &str) -> Result<MongoUri, String> {
    let allowed = "a MongoDB connection string (MONGO_URI or RECONCILER__MONGO__URI): \
                   mongodb://[user:password@]host[:port][,host…]/[database][?options] or mongodb+srv://…; \
                   percent-encode : / ? # [ ] @ % in the user name and password";
    let refuse = |reason: Option<String>| match reason {
        Some(reason) => format!("{reason}; expected {allowed}"),
        None => format!("expected {allowed}"),
    };
    let valid_scheme = uri.starts_with("mongodb://") || uri.starts_with("mongodb+srv://");
    let (_, rest) = uri.split_once("://").unwrap_or_default();
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let hosts = authority.rsplit('@').next().unwrap_or("");
    if !valid_scheme || hosts.is_empty() || uri.contains(char::is_whitespace) {
        return Err(refuse(None));
    }
    let parsed = mongodb::options::ConnectionString::parse(uri).and_then(|parsed| {
        if uri.starts_with("mongodb+srv://") {
            return Ok(parsed);
        }
        // Without SRV the driver's remaining checks (`socketTimeoutMS`, the
        // combinations of options) need no I/O: its future is ready at once.
        futures::executor::block_on(std::future::IntoFuture::into_future(
            mongodb::options::ClientOptions::parse(uri),
        ))?;
        Ok(parsed)
    });
    let parsed = parsed.map_err(|error| refuse(driver_reason(uri, &error)))?;
    let (uri, database) = (uri.to_string(), parsed.default_database);
    Ok(MongoUri { uri, database })
}

/// The driver's reason for refusing `uri`, when it can be shown without a
/// secret. An `@` after the first `?` makes the driver's split of the URI
/// uncertain (a `?` in the password moves part of it into the host list,
/// which the driver then echoes): no detail then.
fn driver_reason(uri: &str, error: &mongodb::error::Error) -> Option<String> {
    let rest = uri.split_once("://").map_or(uri, |(_, rest)| rest);
    let (_, options) = rest.split_once('?').unwrap_or_default();
    if options.contains('@') {
        return None;
    }
    let message = match error.kind.as_ref() {
        mongodb::error::ErrorKind::InvalidArgument { message, .. } => message.clone(),
        other => other.to_string(),
    };
    // With the split certain, the driver's messages about the userinfo are
    // fixed texts ("password must be URL encoded"); only an option's value
    // may be echoed ("… got AWS_SESSION_TOKEN…"). Passwords are scrubbed
    // anyway where long enough not to mangle the message.
    let message = scrub(uri, first_line(&message));
    // An option's value too short to replace without mangling the rest:
    // say nothing.
    let mut short = uri_option_secrets(uri).into_iter().filter(|s| s.len() < 4);
    let hidden = message.is_empty() || short.any(|s| message.contains(&s));
    (!hidden).then_some(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_hides_all_of_a_userinfo_that_holds_reserved_characters() {
        for uri in [
            "mongodb://user:s3cr3/pwTAIL@h:1/x",
            "mongodb://user:s3cr3?pwTAIL@h:1/x",
            "mongodb://user:s3cr3@pwTAIL@h:1/x",
        ] {
            assert_eq!(redact_uri(uri), "mongodb://***@h:1/x", "{uri}");
        }
        assert_eq!(redact_uri("http://h:7700"), "http://h:7700");
        assert_eq!(
            redact_uri("mongodb://h/x?proxyPassword=p4ss&appName=a"),
            "mongodb://h/x?proxyPassword=***&appName=a"
        );
    }

    #[test]
    fn scrubs_the_secrets_the_driver_may_echo() {
        let of = |uri: &str| MongoUri {
            uri: uri.into(),
            database: None,
        };
        let uri = of("mongodb://u:s3%2Fcret@h:1/x?authMechanismProperties=K:v4lue");
        let echoed = "auth failed for s3%2Fcret, s3/cret, K:v4lue, v4lue".to_string();
        assert_eq!(
            uri.scrub(echoed.clone()),
            "auth failed for ***, ***, ***, ***"
        );
        assert_eq!(of("mongodb://h:1/x").scrub(echoed.clone()), echoed);
    }
}

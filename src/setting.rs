//! One setting's value, read into the type the code uses: the serde
//! `deserialize_with` functions of every settings type, and the
//! compiled-in defaults (`config/default.toml`, where each default is
//! written). Below `lease` and `config`, so that each derives the
//! `Deserialize` of its own types.
//!
//! Every value is read as its text first, as an environment variable gives
//! it: a number or a boolean written in a file stands for its text
//! (`job = 5`, `threshold = "1000"`), and a table or a list where one value
//! belongs is refused. An error's message is what the setting allows;
//! `config` adds the key and the value (redacted when secret).

use std::fmt::Display;
use std::time::Duration;

use ::config::{Value, ValueKind};
use serde::de::{Deserialize, Deserializer, Error};

/// The defaults, compiled in so the binary works without the file.
pub const DEFAULTS_TOML: &str = include_str!("../config/default.toml");

/// What a single-valued setting takes, said when it is given a table or a list.
pub(crate) const STRING: &str = "a single value (a string)";
pub(crate) const NUMBER: &str = "a single value (a whole number)";
const BOOLEAN: &str = "a single value (true or false)";
const LIST: &str = "a list of strings (or one comma-separated string)";

/// The compiled-in defaults, as the lowest layer of the configuration.
pub(crate) fn defaults() -> ::config::Config {
    let file = ::config::File::from_str(DEFAULTS_TOML, ::config::FileFormat::Toml);
    let built = ::config::Config::builder().add_source(file).build();
    built.expect("the compiled-in defaults parse")
}

/// A single value as its text, trimmed; else what was given instead.
fn text_of(value: Value) -> Result<String, &'static str> {
    match value.kind {
        ValueKind::Table(_) => Err("a table"),
        ValueKind::Array(_) => Err("a list"),
        ValueKind::Nil => Ok(String::new()),
        ValueKind::String(text) => Ok(text.trim().to_string()),
        _ => Ok(value.to_string()),
    }
}

/// The text of a setting that takes one value: `expected` ([`STRING`],
/// [`NUMBER`], [`BOOLEAN`]) names it when given a table or a list.
fn single<'de, D: Deserializer<'de>>(d: D, expected: &str) -> Result<String, D::Error> {
    text_of(Value::deserialize(d)?)
        .map_err(|given| D::Error::custom(format!("{expected} is expected, not {given}")))
}

/// A string setting.
pub(crate) fn text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    single(d, STRING)
}

/// A setting that takes one value (`expected`: [`STRING`], [`NUMBER`] or
/// [`BOOLEAN`]), read from its text by `parse`; `allowed`: what it may be.
pub(crate) fn parse<'de, D: Deserializer<'de>, T>(
    d: D,
    expected: &'static str,
    allowed: impl Display,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Result<T, D::Error> {
    parse(&single(d, expected)?).ok_or_else(|| D::Error::custom(allowed))
}

/// One of the variants of `T`, named in any case (by the names `clap`
/// derives for it, which the command line shares).
pub(crate) fn variant<'de, D: Deserializer<'de>, T: clap::ValueEnum>(
    d: D,
    allowed: &str,
) -> Result<T, D::Error> {
    parse(d, STRING, allowed, |text| T::from_str(text, true).ok())
}

pub(crate) fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let allowed = "a duration such as \"250ms\", \"3s\", \"5m\" (a number with a unit)";
    parse(d, STRING, allowed, |t| humantime::parse_duration(t).ok())
}

pub(crate) fn positive_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let positive = Some(duration(d)?).filter(|duration| !duration.is_zero());
    positive.ok_or_else(|| D::Error::custom("a duration greater than zero"))
}

/// A number of bytes, at least 1 KiB: `8MiB`, `512KiB` or a plain number.
pub(crate) fn size<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let allowed = "a size ≥ 1KiB such as \"8MiB\", \"512KiB\" or a number of bytes";
    parse(d, STRING, allowed, |t| {
        let bytes = (t.parse::<u64>().ok())
            .or_else(|| t.parse::<bytesize::ByteSize>().ok().map(|b| b.as_u64()))?;
        usize::try_from(bytes).ok().filter(|b| *b >= 1024)
    })
}

/// A whole number from `MIN` to `MAX` (`u64::MAX`: no upper bound).
pub(crate) fn whole<'de, const MIN: u64, const MAX: u64, D: Deserializer<'de>, T: TryFrom<u64>>(
    d: D,
) -> Result<T, D::Error> {
    let allowed = if MAX == u64::MAX {
        format!("a whole number ≥ {MIN}")
    } else {
        format!("a whole number from {MIN} to {MAX}")
    };
    parse(d, NUMBER, allowed, |t| {
        let n = t.parse::<u64>().ok().filter(|n| (MIN..=MAX).contains(n))?;
        T::try_from(n).ok()
    })
}

pub(crate) fn boolean<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    let allowed = "true or false (also 1/0, yes/no, on/off)";
    parse(d, BOOLEAN, allowed, |t| {
        match t.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Some(true),
            "false" | "0" | "no" | "off" => Some(false),
            _ => None,
        }
    })
}

/// A list of strings: a list, or one comma-separated string (as an
/// environment variable gives it); empty items are dropped.
pub(crate) fn list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let refuse = |given| D::Error::custom(format!("{LIST} is expected, not {given}"));
    let text = match Value::deserialize(d)?.kind {
        ValueKind::Array(items) => (items.into_iter().map(text_of))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| refuse("a list holding a table or a list"))?
            .join(","),
        kind => text_of(Value::new(None, kind)).map_err(refuse)?,
    };
    let items = text.split(',').map(|s| s.trim().to_string());
    Ok(items.filter(|s| !s.is_empty()).collect())
}

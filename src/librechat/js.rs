//! The little of JavaScript's and Mongoose's value semantics that LibreChat's
//! projection depends on: how a BSON value reads once the Node driver has
//! decoded it (`String(value)`, truthiness), and how Mongoose casts a stored
//! value to a `String` schema path when it loads a document.
//!
//! LibreChat builds each Meilisearch document from a Mongoose document
//! (`preprocessObjectForIndex` calls `toJSON()`), so a `messageId` stored as
//! the number 7 is sent as `"7"`, and a `text.value` of `true` joins the text
//! as `"true"`. Kept here, apart from the rules that use it, so that each
//! emulated conversion is pinned by a unit test of its own. Values LibreChat
//! never stores (binary data, regular expressions, timestamps) are given a
//! plain reading and are not promised to match.

use mongodb::bson::Bson;
use time::macros::format_description;
use time::OffsetDateTime;

/// JavaScript's `String(value)` of a BSON value as the Node driver decodes
/// it (Int64 promoted to a Number, ObjectId printing its hex, a Date in UTC
/// — LibreChat's containers run in UTC).
pub(crate) fn to_js_string(value: &Bson) -> String {
    match value {
        Bson::String(s) => s.clone(),
        Bson::Boolean(b) => b.to_string(),
        Bson::Int32(n) => n.to_string(),
        Bson::Int64(n) => number_to_string(*n as f64),
        Bson::Double(n) => number_to_string(*n),
        Bson::Null => "null".into(),
        Bson::Undefined => "undefined".into(),
        Bson::ObjectId(id) => id.to_hex(),
        Bson::Decimal128(d) => d.to_string(),
        Bson::DateTime(t) => date_to_string(*t),
        // `Array.prototype.toString`: the elements joined by commas, with
        // null and undefined as empty strings.
        Bson::Array(items) => items
            .iter()
            .map(|item| match item {
                Bson::Null | Bson::Undefined => String::new(),
                other => to_js_string(other),
            })
            .collect::<Vec<_>>()
            .join(","),
        Bson::Document(_) => "[object Object]".into(),
        other => other.clone().into_relaxed_extjson().to_string(),
    }
}

/// Whether JavaScript takes `value` as true in a condition (`value || ""`):
/// everything but `false`, `0`, `NaN`, `""`, `null` and `undefined`.
pub(crate) fn is_truthy(value: &Bson) -> bool {
    match value {
        Bson::Boolean(b) => *b,
        Bson::Int32(n) => *n != 0,
        Bson::Int64(n) => *n != 0,
        Bson::Double(n) => *n != 0.0 && !n.is_nan(),
        Bson::String(s) => !s.is_empty(),
        Bson::Null | Bson::Undefined => false,
        _ => true,
    }
}

/// `Number.prototype.toString()` (ECMAScript's Number::toString, radix 10):
/// the shortest digits that read back as the same double, laid out as
/// JavaScript does — `1e21` and `1e-7` in exponent form, `100`, `0.000001`
/// and `1.5` plainly.
fn number_to_string(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x == 0.0 {
        return "0".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if x < 0.0 {
        return format!("-{}", number_to_string(-x));
    }
    // Rust's `{:e}` prints the shortest round-trip digits: "d.ddde±x".
    let scientific = format!("{x:e}");
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("`{:e}` always has an exponent");
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exponent: i32 = exponent.parse().expect("`{:e}` prints a decimal exponent");
    let k = digits.len() as i32;
    let n = exponent + 1;
    if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        let (whole, fraction) = digits.split_at(n as usize);
        format!("{whole}.{fraction}")
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let sign = if n - 1 < 0 { '-' } else { '+' };
        let (first, rest) = digits.split_at(1);
        let dot = if rest.is_empty() { "" } else { "." };
        format!("{first}{dot}{rest}e{sign}{}", (n - 1).abs())
    }
}

/// `Date.prototype.toString()` in UTC, e.g. `Tue Dec 01 2026 21:25:00
/// GMT+0000 (Coordinated Universal Time)`.
fn date_to_string(t: mongodb::bson::DateTime) -> String {
    let format = format_description!(
        "[weekday repr:short] [month repr:short] [day] [year] [hour]:[minute]:[second]"
    );
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(t.timestamp_millis()) * 1_000_000)
        .ok()
        .and_then(|at| at.format(&format).ok())
        .map(|text| format!("{text} GMT+0000 (Coordinated Universal Time)"))
        .unwrap_or_else(|| "Invalid Date".into())
}

/// What a Mongoose `String` schema path holds once a stored value is loaded
/// (Mongoose's `castString`): `None` when the cast fails and Mongoose leaves
/// the path unset — a plain object (its `toString` is Object's own) or an
/// array. `null` stays `null`; an object with a string `_id` becomes that
/// `_id`; anything else becomes its `String(value)`.
pub(crate) fn cast_to_string_path(value: &Bson) -> Option<Bson> {
    match value {
        Bson::Null | Bson::Undefined => Some(Bson::Null),
        Bson::String(_) => Some(value.clone()),
        Bson::Document(d) => match d.get("_id") {
            Some(Bson::String(id)) if !id.is_empty() => Some(Bson::String(id.clone())),
            _ => None,
        },
        Bson::Array(_) => None,
        other => Some(Bson::String(to_js_string(other))),
    }
}

/// What a Mongoose `[String]` schema path holds once loaded: an array of
/// cast elements (a single value is wrapped in one), `null` kept, `None`
/// when an element fails its cast.
pub(crate) fn cast_to_string_array_path(value: &Bson) -> Option<Bson> {
    match value {
        Bson::Null | Bson::Undefined => Some(Bson::Null),
        Bson::Array(items) => items
            .iter()
            .map(cast_to_string_path)
            .collect::<Option<Vec<_>>>()
            .map(Bson::Array),
        single => cast_to_string_path(single).map(|v| Bson::Array(vec![v])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::{doc, oid::ObjectId, DateTime};

    #[test]
    fn numbers_print_as_javascript_prints_them() {
        let cases = [
            (0.0, "0"),
            (-0.0, "0"),
            (7.0, "7"),
            (-7.0, "-7"),
            (1.5, "1.5"),
            (0.1, "0.1"),
            (100.0, "100"),
            (123456789012.0, "123456789012"),
            (1e21, "1e+21"),
            (1.5e21, "1.5e+21"),
            (1e20, "100000000000000000000"),
            (0.000001, "0.000001"),
            (1e-7, "1e-7"),
            (1.25e-7, "1.25e-7"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
            (0.30000000000000004, "0.30000000000000004"),
        ];
        for (x, expected) in cases {
            assert_eq!(number_to_string(x), expected, "{x:?}");
        }
    }

    #[test]
    fn bson_values_read_as_javascript_strings() {
        let id = ObjectId::parse_str("64b7f0000000000000000001").unwrap();
        assert_eq!(to_js_string(&Bson::Int32(5)), "5");
        assert_eq!(to_js_string(&Bson::Int64(5)), "5");
        assert_eq!(to_js_string(&Bson::Double(2.0)), "2");
        assert_eq!(to_js_string(&Bson::Boolean(true)), "true");
        assert_eq!(
            to_js_string(&Bson::ObjectId(id)),
            "64b7f0000000000000000001"
        );
        assert_eq!(
            to_js_string(&Bson::Document(doc! { "x": 1 })),
            "[object Object]"
        );
        let array = Bson::Array(vec![Bson::Int32(1), Bson::Null, "a".into()]);
        assert_eq!(to_js_string(&array), "1,,a");
        assert_eq!(
            to_js_string(&Bson::DateTime(DateTime::from_millis(1_796_160_300_000))),
            "Tue Dec 01 2026 21:25:00 GMT+0000 (Coordinated Universal Time)"
        );
    }

    #[test]
    fn truthiness_is_javascript_s() {
        for falsy in [
            Bson::Boolean(false),
            Bson::Int32(0),
            Bson::Int64(0),
            Bson::Double(0.0),
            Bson::Double(f64::NAN),
            Bson::String(String::new()),
            Bson::Null,
        ] {
            assert!(!is_truthy(&falsy), "{falsy:?}");
        }
        for truthy in [
            Bson::Boolean(true),
            Bson::Int32(-1),
            Bson::String(" ".into()),
            Bson::Array(vec![]),
            Bson::Document(doc! {}),
        ] {
            assert!(is_truthy(&truthy), "{truthy:?}");
        }
    }

    #[test]
    fn string_paths_cast_as_mongoose_casts_them() {
        let id = ObjectId::parse_str("64b7f0000000000000000001").unwrap();
        let cast = |v: Bson| cast_to_string_path(&v);
        assert_eq!(cast("a".into()), Some("a".into()));
        assert_eq!(cast(Bson::Null), Some(Bson::Null));
        assert_eq!(cast(Bson::Int32(7)), Some("7".into()));
        assert_eq!(cast(Bson::Double(1.5)), Some("1.5".into()));
        assert_eq!(cast(Bson::Boolean(false)), Some("false".into()));
        assert_eq!(
            cast(Bson::ObjectId(id)),
            Some("64b7f0000000000000000001".into())
        );
        assert_eq!(cast(Bson::Document(doc! { "_id": "x" })), Some("x".into()));
        assert_eq!(cast(Bson::Document(doc! { "a": 1 })), None);
        assert_eq!(cast(Bson::Array(vec!["x".into()])), None);

        let cast = |v: Bson| cast_to_string_array_path(&v);
        assert_eq!(
            cast(Bson::Array(vec!["a".into(), Bson::Int32(3), Bson::Null])),
            Some(Bson::Array(vec!["a".into(), "3".into(), Bson::Null]))
        );
        assert_eq!(cast("solo".into()), Some(Bson::Array(vec!["solo".into()])));
        assert_eq!(cast(Bson::Null), Some(Bson::Null));
        assert_eq!(cast(Bson::Array(vec![Bson::Document(doc! {})])), None);
    }
}

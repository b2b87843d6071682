//! docs/configuration.md agrees with the code: its tables list exactly the
//! keys of config/default.toml (the keys the configuration accepts), each
//! under its own section, with its default, its `RECONCILER__` variable and
//! exactly the LibreChat variables `config::LIBRECHAT_VARS` maps onto it;
//! and its sample log lines are the ones the code writes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use config::{Config, File, FileFormat, Value, ValueKind};
use meili_reconciler::config::{
    self as settings, env_var_of, Sources, DEFAULTS_TOML, LIBRECHAT_TUNING_VARS, LIBRECHAT_VARS,
};
use meili_reconciler::follow::mode::NoChangeStreams;
use meili_reconciler::follow::ModeView;

const DOC: &str = include_str!("../docs/configuration.md");
const HEADER: &str = "| key | default | environment | meaning and allowed values |";

/// One row of a key table.
#[derive(Debug)]
struct Row {
    /// The `## [section]` heading it is under.
    section: String,
    default: String,
    /// Every variable the environment cell names.
    vars: Vec<String>,
}

/// The text between the first pair of backticks of `cell`, if any.
fn backticked(cell: &str) -> Option<&str> {
    let rest = cell.split_once('`')?.1;
    Some(rest.split_once('`')?.0)
}

/// Every backticked name in capitals (`MONGO_URI`, `RECONCILER__LEASE__TTL`).
fn variables(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| {
            !t.is_empty()
                && t.starts_with(|c: char| c.is_ascii_uppercase())
                && t.chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        })
        .map(str::to_string)
        .collect()
}

/// The key tables of the document, by key (panics on a key listed twice).
fn documented(doc: &str) -> BTreeMap<String, Row> {
    let mut rows = BTreeMap::new();
    let mut section = String::new();
    let mut in_table = false;
    for line in doc.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            section = heading
                .trim()
                .trim_matches('`')
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            in_table = false;
            continue;
        }
        if line.trim() == HEADER {
            in_table = true;
            continue;
        }
        if !in_table || !line.starts_with('|') || line.starts_with("|---") {
            in_table = in_table && line.starts_with('|');
            continue;
        }
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
        assert_eq!(cells.len(), 4, "a row of four cells: {line}");
        let key = backticked(cells[0]).unwrap_or_else(|| panic!("a `key` first: {line}"));
        let default = backticked(cells[1]).unwrap_or_else(|| panic!("a `default`: {line}"));
        let row = Row {
            section: section.clone(),
            default: default.to_string(),
            vars: variables(cells[2]),
        };
        assert!(
            rows.insert(key.to_string(), row).is_none(),
            "{key} is documented twice"
        );
    }
    rows
}

/// A value as comparable text: a string's characters, a list's items
/// joined by commas, anything else as TOML writes it.
fn canonical(value: &Value) -> String {
    match &value.kind {
        ValueKind::String(s) => s.clone(),
        ValueKind::Array(items) => items.iter().map(canonical).collect::<Vec<_>>().join(","),
        ValueKind::Table(_) => panic!("a table is no setting's value"),
        _ => value.to_string(),
    }
}

/// A documented default as comparable text: read as a TOML value where it
/// is one (`""`, `["user"]`, `10000`, `true`), else as written (`180s`).
fn canonical_documented(text: &str) -> String {
    Config::builder()
        .add_source(File::from_str(&format!("v = {text}"), FileFormat::Toml))
        .build()
        .ok()
        .and_then(|c| c.get::<Value>("v").ok())
        .map(|v| canonical(&v))
        .unwrap_or_else(|| text.to_string())
}

fn defaults() -> Config {
    Config::builder()
        .add_source(File::from_str(DEFAULTS_TOML, FileFormat::Toml))
        .build()
        .expect("config/default.toml parses")
}

#[test]
fn every_key_of_default_toml_is_documented_once_under_its_section_and_no_other() {
    let rows = documented(DOC);
    let documented: BTreeSet<String> = rows.keys().cloned().collect();
    let known: BTreeSet<String> = settings::known_keys().into_iter().collect();
    let missing: Vec<_> = known.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&known).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/configuration.md and config/default.toml disagree: not documented {missing:?}, \
         documented but not a setting {unknown:?}"
    );
    for (key, row) in &rows {
        let section = key.split('.').next().unwrap();
        assert_eq!(
            row.section, section,
            "{key} is documented under [{}]",
            row.section
        );
    }
}

#[test]
fn each_documented_default_is_the_default() {
    let defaults = defaults();
    let mut wrong = Vec::new();
    for (key, row) in documented(DOC) {
        let Ok(default) = defaults.get::<Value>(&key) else {
            continue; // the key test names it
        };
        let (doc, code) = (canonical_documented(&row.default), canonical(&default));
        if doc != code {
            wrong.push(format!(
                "{key}: documented `{}`, default {code:?}",
                row.default
            ));
        }
    }
    assert!(wrong.is_empty(), "defaults differ:\n{}", wrong.join("\n"));
}

#[test]
fn each_key_names_its_own_variable_and_exactly_the_librechat_variables_that_set_it() {
    let mut librechat: HashMap<&str, BTreeSet<String>> = HashMap::new();
    for (var, key) in LIBRECHAT_VARS {
        librechat.entry(key).or_default().insert(var.to_string());
    }
    let rows = documented(DOC);
    for (key, row) in &rows {
        let own = env_var_of(key);
        let named_own = row
            .vars
            .iter()
            .filter(|v| v.starts_with("RECONCILER__"))
            .collect::<Vec<_>>();
        assert_eq!(named_own, vec![&own], "{key}: its own variable is {own}");
        let others: BTreeSet<String> = row
            .vars
            .iter()
            .filter(|v| !v.starts_with("RECONCILER__"))
            .cloned()
            .collect();
        let expected = librechat.get(key.as_str()).cloned().unwrap_or_default();
        assert_eq!(
            others, expected,
            "{key}: the LibreChat variables documented vs config::LIBRECHAT_VARS"
        );
    }
    for (var, key) in LIBRECHAT_VARS {
        assert!(
            rows.contains_key(*key),
            "{var} sets {key}, which is not documented"
        );
    }
    for var in LIBRECHAT_TUNING_VARS {
        assert!(
            LIBRECHAT_VARS.iter().any(|(v, _)| v == var),
            "{var} is read as a LibreChat variable"
        );
        assert!(DOC.contains(var), "{var} is documented");
    }
}

/// The lines of the document's ```text blocks that start with `prefix`.
fn sample_lines(prefix: &str) -> Vec<&'static str> {
    let mut in_block = false;
    let mut lines = Vec::new();
    for line in DOC.lines() {
        if line.starts_with("```") {
            in_block = line == "```text";
            continue;
        }
        if in_block && line.starts_with(prefix) {
            lines.push(line);
        }
    }
    lines
}

#[test]
fn the_sample_log_lines_are_the_ones_the_code_writes() {
    // A LibreChat sync setting in the shared environment.
    let env: HashMap<String, String> = [
        ("MONGO_URI", "mongodb://127.0.0.1:27017/LibreChat"),
        ("MEILI_HOST", "http://127.0.0.1:7700"),
        ("MEILI_SYNC_BATCH_SIZE", "100"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let loaded = settings::load(&Sources {
        base_dir: None,
        config_file: None,
        env,
    })
    .unwrap();
    let [set] = loaded.librechat_overrides.as_slice() else {
        panic!("one override: {:?}", loaded.librechat_overrides)
    };
    assert_eq!(
        sample_lines("WARN MEILI_SYNC_BATCH_SIZE"),
        vec![format!("WARN {set}")],
        "docs/configuration.md's sample of the LibreChat variable warning"
    );

    // The two modes of `run`, at the default serve.interval.
    let interval = Duration::from_secs(300);
    let (level, follow) = ModeView::follow().log_line(interval);
    assert_eq!(level, tracing::Level::INFO);
    assert_eq!(
        sample_lines("INFO follow mode:"),
        vec![format!("INFO {follow}")]
    );
    let message = "The $changeStream stage is only supported on replica sets";
    let standalone = NoChangeStreams::from_server(
        40573,
        message,
        format!("{message} (code 40573 IllegalOperation)"),
    );
    let (level, interval_line) = ModeView::no_change_streams(&standalone).log_line(interval);
    assert_eq!(level, tracing::Level::WARN);
    assert_eq!(
        sample_lines("WARN interval mode:"),
        vec![format!("WARN {interval_line}")]
    );
}

//! docs/design.md is checkable: every test its invariant table names exists,
//! so renaming or deleting a test without updating the design fails here.

use std::collections::BTreeSet;

const DESIGN: &str = include_str!("../docs/design.md");

/// `file::test` references in backticks (`file::*` names a whole suite).
fn referenced_tests() -> BTreeSet<(String, String)> {
    let table = DESIGN
        .split("## 8. Invariants and the tests that prove them")
        .nth(1)
        .and_then(|rest| rest.split("Unit tests in `src/`").next())
        .expect("docs/design.md has the invariants table");
    table
        .split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|code| {
            let (file, test) = code.split_once("::")?;
            let plain = |s: &str| s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            (plain(file) && (test == "*" || plain(test)))
                .then(|| (file.to_string(), test.to_string()))
        })
        .collect()
}

#[test]
fn every_test_the_design_names_exists() {
    let referenced = referenced_tests();
    assert!(
        referenced.len() >= 30,
        "too few test references: {referenced:?}"
    );
    let mut missing = vec![];
    for (file, test) in &referenced {
        let path = format!("{}/tests/{file}.rs", env!("CARGO_MANIFEST_DIR"));
        let Ok(source) = std::fs::read_to_string(&path) else {
            missing.push(format!("{file}.rs (no such file)"));
            continue;
        };
        if test != "*" && !source.contains(&format!("fn {test}(")) {
            missing.push(format!("{file}::{test}"));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/design.md names tests that do not exist: {missing:?}"
    );
}

//! The dsh conformance corpus (spec §18): every recording behaves as MANIFEST.tsv says.

use std::fs::File;

use sessionlog_format::{read_log, ReadError, ReadOptions};

use crate::support::{fixtures_dir, manifest};

// Goal: accept every recording the manifest accepts and refuse the rest with a clear fault.
// Method: read each file with the default (strict, auto-snapshot) options and compare with the
// `expect` column; `either` rows must end in a clean result or a fault, never a panic.
#[test]
fn every_fixture_matches_the_manifest() {
    let Some(dir) = fixtures_dir() else { return };
    let rows = manifest(&dir);
    assert!(rows.len() >= 20, "the corpus has {} rows", rows.len());
    let mut failures = Vec::new();
    for row in &rows {
        let file = File::open(&row.path).expect("fixture is readable");
        let outcome = read_log(file, ReadOptions::default());
        let name = row.path.strip_prefix(&dir).unwrap().display().to_string();
        match (row.expect.as_str(), &outcome) {
            ("accept", Ok(log)) => {
                assert_eq!(log.version.number().to_string(), row.version, "{name}");
                assert!(log.withheld.is_none(), "{name}");
            }
            (expect, Err(ReadError::Fault(fault))) if !expect.starts_with("accept") => {
                assert!(!fault.message.is_empty(), "{name}");
            }
            (expect, Ok(_)) if expect.starts_with("either") => {}
            (expect, other) => failures.push(format!("{name}: expected {expect}, got {other:?}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

//! The dsh conformance corpus (spec 18): every recording behaves as MANIFEST.tsv says.

use std::fs::File;

use sessionlog_format::{read_log, ReadError, ReadOptions};

use crate::support::{assert_staged_reads_agree, fixtures_dir, manifest};

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

// Goal: every recording of the corpus, valid or not, reads the same with the row stage on a
// thread of its own (`LogReader::pipelined`) and decoding beside a helper thread
// (`LogReader::parallel`) as inline, under every policy and mode.
#[test]
fn every_fixture_reads_the_same_staged() {
    let Some(dir) = fixtures_dir() else { return };
    for row in &manifest(&dir) {
        let bytes = std::fs::read(&row.path).expect("fixture is readable");
        let name = row.path.strip_prefix(&dir).unwrap().display().to_string();
        assert_staged_reads_agree(&bytes, &name);
    }
}

// Goal: the V1 physical reader (V0's layout, packed rows included, under a version-1 header)
// reads the same logical events as V0. The corpus holds no V1 recording, so one is made from
// the V0 packed-chunks recording by changing its header's version.
#[test]
fn v1_reads_like_v0() {
    let Some(dir) = fixtures_dir() else { return };
    let v0_path = dir.join(
        "toninfo__deepseek-harness/examples/acp-agent/tests/snapshots/packed-chunks/session.jsonl",
    );
    let text = std::fs::read_to_string(&v0_path).expect("the packed-chunks recording exists");
    let v1_text = text.replacen("\"version\":0", "\"version\":1", 1);
    let v0 = read_log(text.as_bytes(), ReadOptions::default()).unwrap();
    let v1 = read_log(v1_text.as_bytes(), ReadOptions::default()).unwrap();
    assert_eq!(v1.version, sessionlog_format::FormatVersion::V1);
    assert_eq!(v1.events, v0.events);
    let chunks = v0
        .events
        .iter()
        .filter(|e| e.kind.as_str() == "assistant/chunk")
        .count();
    assert!(
        chunks > 50,
        "packed rows expand to their members: {chunks} chunks"
    );
}

//! `audit` over a directory laid out like a dsh session root, and over a store.

use std::path::{Path, PathBuf};

use pretty_assertions::assert_eq;
use sessionlog_engine::audit::{audit_file, audit_store, session_files, totals, Integrity};
use sessionlog_engine::generate::generate_file;
use sessionlog_engine::transfer::import_file;
use sessionlog_format::gen::GenOptions;
use sessionlog_format::{Compression, FormatVersion, SnapshotMode};

use crate::support::*;

/// `<root>/--work-gen--/<id>/<name>` with a generated log of `version`.
fn generated(root: &Path, id: &str, name: &str, version: FormatVersion, seed: u64) -> PathBuf {
    let dir = root.join("--work-gen--").join(id);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let compression = if name.ends_with(".zstd") {
        Compression::Zstd
    } else {
        Compression::None
    };
    let options = GenOptions { events: 600, seed };
    generate_file(&path, options, version, compression, &mut |_| {}).unwrap();
    path
}

// Goal: audit walks a dsh-like root (every generation file, stray files ignored), keys rows
// by path relative to the root, reads every version through the migration, and reports a
// damaged file as corrupt with its line and a refused one with its reason.
// Method: a root with a V0, a V2, a V3 .zstd, a V3 whose line 40 is garbled, a V0 with a
// retired `mode/set` and a stray notes.txt; audit each file, then the totals.
#[test]
fn audit_rows_on_a_dsh_root() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    generated(root, "a", "session.jsonl", FormatVersion::V0, 1);
    generated(root, "b", "session.v2.jsonl", FormatVersion::V2, 2);
    generated(root, "c", "session.v3.jsonl.zstd", FormatVersion::V3, 3);
    let damaged = generated(root, "d", "session.v3.jsonl", FormatVersion::V3, 4);
    let text = std::fs::read_to_string(&damaged).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[39] = "{not json";
    std::fs::write(&damaged, lines.join("\n") + "\n").unwrap();
    let refused_dir = root.join("--work-gen--").join("e");
    std::fs::create_dir_all(&refused_dir).unwrap();
    let header = r#"{"type":"session","version":0,"id":"e","createdAt":1,"delegationDepth":0}"#;
    let mode = r#"{"type":"mode/set","seq":0,"time":1,"data":{"mode":"plan"}}"#;
    std::fs::write(
        refused_dir.join("session.jsonl"),
        format!("{header}\n{mode}\n"),
    )
    .unwrap();
    std::fs::write(root.join("--work-gen--").join("notes.txt"), "not a log").unwrap();

    let files = session_files(root).unwrap().files;
    let relative: Vec<String> = files.iter().map(|(_, r)| r.display().to_string()).collect();
    assert_eq!(
        relative,
        [
            "--work-gen--/a/session.jsonl",
            "--work-gen--/b/session.v2.jsonl",
            "--work-gen--/c/session.v3.jsonl.zstd",
            "--work-gen--/d/session.v3.jsonl",
            "--work-gen--/e/session.jsonl",
        ]
    );
    let rows: Vec<_> = files
        .iter()
        .map(|(file, relative)| audit_file(file, relative, SnapshotMode::Auto))
        .collect();
    let versions: Vec<_> = rows.iter().map(|r| r.version).collect();
    assert_eq!(versions, [Some(0), Some(2), Some(3), Some(3), Some(0)]);
    for row in &rows[..3] {
        assert_eq!(row.integrity, Integrity::Ok, "{:?}", row.relative);
        assert!(row.events >= 600 && row.turns > 0 && row.prompt_versions > 0);
    }
    assert_eq!(rows[1].events, 600, "a V2 row counts the events as stored");
    assert!(rows[0].events > 600, "a V0 row counts its chunk events too");
    match &rows[3].integrity {
        Integrity::Corrupt { line, .. } => assert_eq!(*line, Some(40)),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        rows[4].integrity,
        Integrity::Refused {
            line: Some(2),
            message: "session \"e\" contains unsupported legacy mode/set event at seq 0".to_owned()
        }
    );
    let totals = totals(&rows);
    assert_eq!(
        (totals.sessions, totals.ok, totals.corrupt, totals.refused),
        (5, 3, 1, 1)
    );
}

// Goal: a store audit verifies each session first; a session with a damaged record is
// corrupt, the others are analysed.
// Method: import two generated logs, audit the store, check the rows.
#[test]
fn audit_rows_of_a_store() {
    let tmp = tempfile::tempdir().unwrap();
    let (_dir, store) = temp_store();
    for (idx, version) in [FormatVersion::V3, FormatVersion::V2]
        .into_iter()
        .enumerate()
    {
        let path = generated(
            tmp.path(),
            &format!("s{idx}"),
            "session.jsonl",
            version,
            10 + idx as u64,
        );
        import_file(&store, &path, SnapshotMode::Auto, &mut |_| {}).unwrap();
    }
    let rows = audit_store(&store, &[]).unwrap();
    assert_eq!(rows.len(), 2);
    for row in &rows {
        assert_eq!(row.integrity, Integrity::Ok);
        assert_eq!(row.version, Some(3));
        assert!(row.events >= 600 && row.turns > 0);
    }
}

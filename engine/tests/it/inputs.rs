//! Hostile inputs of issue #20 (finding 5): walks that loop through links, FIFOs and devices
//! named as logs, and rows whose decoded size is far beyond their bytes. Every input is
//! generated into a temporary folder.

use std::io::Write;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use pretty_assertions::assert_eq;
use sessionlog_engine::check::{check_file, CheckOptions};
use sessionlog_engine::documents::{messages, write_messages};
use sessionlog_engine::generate::generate_file;
use sessionlog_engine::inspect::fold_session;
use sessionlog_engine::replay::SessionSource;
use sessionlog_engine::walk::{walk, SkipReason};
use sessionlog_format::budget::JSON_VALUES_MAX;
use sessionlog_format::gen::GenOptions;
use sessionlog_format::{Compression, FormatVersion, SnapshotMode};

fn generated(path: &Path, version: FormatVersion, compression: Compression) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let options = GenOptions {
        events: 40,
        seed: 7,
    };
    generate_file(path, options, version, compression, &mut |_| {}).unwrap();
}

fn relative(found: &[(PathBuf, PathBuf)]) -> Vec<String> {
    found.iter().map(|(_, r)| r.display().to_string()).collect()
}

// Goal: pin the bug of issue #20 where one back-link made 2 logs into 902 sessions and three
// made a walk that never ended: a walk follows no link, lists each logs once, and names what
// it skipped. Method: a root with two logs, three links back to ancestors, a link to a log
// file, a dangling link and a FIFO under generation names; walk it.
#[test]
fn walk_follows_no_link_and_reports_each() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    generated(
        &root.join("a/session.v3.jsonl"),
        FormatVersion::V3,
        Compression::None,
    );
    generated(
        &root.join("b/c/session.jsonl"),
        FormatVersion::V0,
        Compression::None,
    );
    symlink("..", root.join("a/back")).unwrap();
    symlink("../..", root.join("b/c/up")).unwrap();
    symlink(&root, root.join("b/root")).unwrap();
    symlink("../a/session.v3.jsonl", root.join("b/session.v3.jsonl")).unwrap();
    symlink("/nonexistent/x", root.join("b/session.v2.jsonl")).unwrap();
    let fifo = root.join("a/session.jsonl");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());

    let found = walk(&root).unwrap();
    assert_eq!(
        relative(&found.files),
        ["a/session.v3.jsonl", "b/c/session.jsonl"]
    );
    let skipped: Vec<(String, &SkipReason)> = found
        .skipped
        .iter()
        .map(|s| {
            let path = s.path.strip_prefix(&root).unwrap().display().to_string();
            (path, &s.reason)
        })
        .collect();
    assert_eq!(
        skipped,
        [
            ("a/back".to_owned(), &SkipReason::DirectoryLink),
            (
                "a/session.jsonl".to_owned(),
                &SkipReason::NotRegular("fifo")
            ),
            ("b/c/up".to_owned(), &SkipReason::DirectoryLink),
            ("b/root".to_owned(), &SkipReason::DirectoryLink),
            ("b/session.v2.jsonl".to_owned(), &SkipReason::BrokenLink),
            ("b/session.v3.jsonl".to_owned(), &SkipReason::FileLink),
        ]
    );
    assert!(!found.has_fault());

    // Named on the command line, a link is followed: to a root, and to a file.
    let via_link = tmp.path().join("link-to-root");
    symlink(&root, &via_link).unwrap();
    assert_eq!(relative(&walk(&via_link).unwrap().files).len(), 2);
    let file_link = walk(&root.join("b/session.v3.jsonl")).unwrap();
    assert_eq!(relative(&file_link.files), ["session.v3.jsonl"]);
}

// Goal: a directory the walk cannot list is reported as a fault (the walk could not look
// inside it), and the rest of the tree is still walked. Method: a subdirectory with mode 000;
// skipped when running as root, which lists it anyway.
#[test]
fn walk_reports_an_unlistable_directory_as_a_fault() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    generated(
        &root.join("a/session.v3.jsonl"),
        FormatVersion::V3,
        Compression::None,
    );
    let closed = root.join("closed");
    std::fs::create_dir(&closed).unwrap();
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o000)).unwrap();
    if std::fs::read_dir(&closed).is_ok() {
        eprintln!("skipping: running with the right to list any directory");
        return;
    }
    let found = walk(root).unwrap();
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(relative(&found.files), ["a/session.v3.jsonl"]);
    assert_eq!(found.skipped.len(), 1);
    assert!(matches!(found.skipped[0].reason, SkipReason::Unreadable(_)));
    assert!(found.has_fault());
}

// Goal: a FIFO without a writer, a character device and a directory named as a log are
// refused at once with an error naming the kind, instead of blocking forever (the FIFO) or
// reading without end (the device). Method: check each; the test would hang on the FIFO if
// the open blocked.
#[test]
fn fifos_devices_and_directories_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("session.v3.jsonl");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    for (path, kind) in [
        (fifo.as_path(), "a fifo"),
        (Path::new("/dev/zero"), "a character device"),
        (tmp.path(), "a directory"),
    ] {
        let report = check_file(path, CheckOptions::default());
        assert!(!report.ok);
        let message = &report.errors[0].message;
        assert!(
            message.contains(&format!("{kind}, not a regular file: refused")),
            "{message}"
        );
    }
}

/// A V3 log whose one event carries an unknown member `x` holding an array of `n` ones.
fn wide_row_log(n: u64) -> Vec<u8> {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("session.v3.jsonl");
    generated(&source, FormatVersion::V3, Compression::None);
    let generated = std::fs::read(&source).unwrap();
    let header_len = generated.iter().position(|b| *b == b'\n').unwrap();
    let mut text = generated[..header_len].to_vec();
    text.extend_from_slice(
        b"\n{\"type\":\"permission/preset\",\"seq\":0,\"time\":1,\"data\":{\"preset\":\"workspace-write\",\"x\":[1",
    );
    for _ in 1..n {
        text.extend_from_slice(b",1");
    }
    text.extend_from_slice(b"]}}\n");
    text
}

// Goal: pin the bug of issue #20 where a 2.8 KB `.jsonl.zstd` holding one 30 MiB row of
// `[1,1,...]` took 2.35 GB to check: a row over the value budget is refused with a `too-large`
// fault naming its line and the limit, before it is decoded, raw or compressed; a row just
// at the budget still reads. Method: the hostile row (the budget's worth of array values
// plus the row's own, in a 2 MiB row) written raw and as zstd; and one exactly at the budget.
#[test]
fn a_wide_array_is_refused_before_decoding() {
    let tmp = tempfile::tempdir().unwrap();
    let raw = tmp.path().join("wide.jsonl");
    std::fs::write(&raw, wide_row_log(JSON_VALUES_MAX)).unwrap();
    let compressed = tmp.path().join("wide.jsonl.zstd");
    // One checksummed frame at level 19, as a hostile writer would make it.
    let mut encoder = zstd::stream::Encoder::new(Vec::new(), 19).unwrap();
    encoder.include_checksum(true).unwrap();
    encoder.write_all(&wide_row_log(JSON_VALUES_MAX)).unwrap();
    let bytes = encoder.finish().unwrap();
    assert!(bytes.len() < 8192, "a zstd bomb of {} bytes", bytes.len());
    std::fs::write(&compressed, bytes).unwrap();
    for path in [&raw, &compressed] {
        let report = check_file(path, CheckOptions::default());
        assert!(!report.ok, "{}", path.display());
        let error = &report.errors[0];
        assert_eq!((error.line, error.rule.as_str()), (2, "too-large"));
        assert!(
            error.message.contains("1048576 JSON values"),
            "{}",
            error.message
        );
    }
    // The row's own members (`{`, four `:`, three `,`, the data object's `{`, two `:` and one
    // `,`) count 12 beside the array's values.
    let fits = tmp.path().join("fits.jsonl");
    std::fs::write(&fits, wide_row_log(JSON_VALUES_MAX - 12)).unwrap();
    let report = check_file(&fits, CheckOptions::default());
    assert!(report.ok, "{:?}", report.errors);
}

// Goal: the streamed `messages --json` document is byte for byte the one built as a value
// (the server's), so the CLI can write it without the tree. Method: fold a generated V3 log
// and an older one; compare the two writings.
#[test]
fn streamed_messages_document_matches_the_value() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, version) in [
        ("session.v3.jsonl", FormatVersion::V3),
        ("session.v2.jsonl", FormatVersion::V2),
    ] {
        let path = tmp.path().join(name);
        generated(&path, version, Compression::None);
        let source = SessionSource::File {
            path: &path,
            snapshot: SnapshotMode::Auto,
        };
        let folded = fold_session(source, None).unwrap();
        assert!(!folded.messages().is_empty());
        let mut streamed = Vec::new();
        write_messages(&folded, &mut streamed).unwrap();
        let built = serde_json::to_vec(&messages(&folded).unwrap()).unwrap();
        assert_eq!(
            String::from_utf8(streamed).unwrap(),
            String::from_utf8(built).unwrap()
        );
    }
}

//! `check`, `cat` and `gen` through the binary: exit codes, diagnostics and `--json` shapes.

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::support::{fixtures_dir, manifest, sessionlog, stderr, stdout, write_file};

const HEADER: &str = r#"{"type":"session","version":3,"id":"s1","createdAt":1,"isSeeded":false,"delegationDepth":0}"#;

// Goal: the manifest's expectations hold through the CLI: accepted files exit 0, refused ones
// exit 1 with `FILE:LINE: message`, and nothing panics.
// Method: run `check` on each fixture separately and all of them together with --json.
#[test]
fn check_follows_the_manifest() {
    let Some(dir) = fixtures_dir() else { return };
    for (path, expect) in manifest(&dir) {
        let path_text = path.to_str().unwrap();
        let output = sessionlog(&["check", path_text]);
        let code = output.status.code().expect("exited normally, no signal");
        let err = stderr(&output);
        assert!(!err.contains("panicked"), "{path_text}: {err}");
        match expect.as_str() {
            "accept" => assert_eq!(code, 0, "{path_text}: {err}"),
            e if e.starts_with("refuse") => {
                assert_eq!(code, 1, "{path_text}");
                assert!(err.starts_with(&format!("{path_text}:")), "{err}");
            }
            _ => assert!(code == 0 || (code == 1 && err.contains(path_text)), "{err}"),
        }
    }
}

// Goal: the `--json` document of `check` has CLI.md's shape, and stdout holds only it.
#[test]
fn check_json_shape() {
    let tmp = tempfile::tempdir().unwrap();
    let good = write_file(tmp.path(), "good.jsonl", &format!("{HEADER}\n"));
    let bad_row = r#"{"type":"turn/start","seq":1,"time":0,"data":{"turn":1}}"#;
    let bad = write_file(tmp.path(), "bad.jsonl", &format!("{HEADER}\n{bad_row}\n"));
    let output = sessionlog(&[
        "--json",
        "check",
        good.to_str().unwrap(),
        bad.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let doc: Value = serde_json::from_str(&stdout(&output)).expect("stdout is one JSON document");
    let files = doc["files"].as_array().unwrap();
    assert_eq!(files.len(), 2);
    assert_eq!(files[0]["ok"], Value::Bool(true));
    assert_eq!(files[0]["version"], Value::from(3));
    assert_eq!(files[1]["ok"], Value::Bool(false));
    let error = &files[1]["errors"][0];
    assert_eq!(error["line"], Value::from(2));
    assert_eq!(error["rule"], Value::from("seq-gap"));
    assert_eq!(
        error["message"],
        Value::from("session event seq 1 is not contiguous; expected 0")
    );
    assert!(stderr(&output).contains("bad.jsonl:2: seq 1: session event seq 1 is not contiguous"));
}

// Goal: usage errors exit 2, not 1.
#[test]
fn usage_errors_exit_2() {
    assert_eq!(sessionlog(&["check"]).status.code(), Some(2));
    assert_eq!(sessionlog(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(
        sessionlog(&["gen", "--events", "x", "-o", "/tmp/x"])
            .status
            .code(),
        Some(2)
    );
}

// Goal: a file from a newer harness is refused with the spec's text, before any other check.
#[test]
fn newer_version_is_refused_first() {
    let tmp = tempfile::tempdir().unwrap();
    let file = write_file(
        tmp.path(),
        "s.jsonl",
        "{\"type\":\"session\",\"version\":9,\"id\":\"x\"}\n",
    );
    let output = sessionlog(&["check", file.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains(
            "session \"x\" uses log format v9, but this harness reads only v4: the log was \
             written by a newer harness \u{2014} upgrade the harness to open it"
        ),
        "{}",
        stderr(&output)
    );
}

// Goal: `gen` output passes `check` raw and compressed, `cat` re-reads it identically, and
// `gen` never overwrites.
#[test]
fn gen_then_check_then_cat() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, zstd) in [("g.v3.jsonl", false), ("g.v3.jsonl.zstd", true)] {
        let path = tmp.path().join(name);
        let path_text = path.to_str().unwrap();
        let mut args = vec!["gen", "--events", "2000", "--seed", "3", "-o", path_text];
        if zstd {
            args.push("--zstd");
        }
        assert_eq!(sessionlog(&args).status.code(), Some(0));
        let check = sessionlog(&["--json", "check", path_text]);
        assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));
        let doc: Value = serde_json::from_str(&stdout(&check)).unwrap();
        assert_eq!(doc["files"][0]["events"], Value::from(2000));
        assert_eq!(doc["files"][0]["compressed"], Value::Bool(zstd));
        let again = sessionlog(&args);
        assert_eq!(again.status.code(), Some(1), "gen must refuse to overwrite");
        let cat = sessionlog(&["cat", path_text]);
        assert_eq!(cat.status.code(), Some(0));
        let copy = write_file(tmp.path(), &format!("{name}.cat.jsonl"), &stdout(&cat));
        let recat = sessionlog(&["cat", copy.to_str().unwrap()]);
        assert_eq!(stdout(&recat), stdout(&cat), "cat is a fixed point");
    }
}

// Goal: `check` never modifies its inputs.
#[test]
fn inputs_are_not_modified() {
    let tmp = tempfile::tempdir().unwrap();
    let text = format!("{HEADER}\n{{\"broken");
    let file = write_file(tmp.path(), "torn.jsonl", &text);
    let output = sessionlog(&["check", file.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("torn.jsonl:2: the last line is cut short"),
        "{}",
        stderr(&output)
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
}

// Goal: compressed files (decompressed on a second thread) report a torn last frame and a
// corrupt middle frame exactly as the in-thread reader does: `check` names the frame, `cat
// --recovery recoverable` keeps every complete record of a torn file, never of a corrupt one.
#[test]
fn torn_and_corrupt_zstd_files() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("z.v3.jsonl.zstd");
    let path_text = path.to_str().unwrap();
    let gen = sessionlog(&[
        "gen", "--events", "400", "--seed", "5", "--zstd", "-o", path_text,
    ]);
    assert_eq!(gen.status.code(), Some(0));
    let bytes = std::fs::read(&path).unwrap();

    let torn = write_bytes(tmp.path(), "torn.jsonl.zstd", &bytes[..bytes.len() - 7]);
    let check = sessionlog(&["check", torn.to_str().unwrap()]);
    assert_eq!(check.status.code(), Some(1));
    assert!(
        stderr(&check).contains("end of file inside zstd frame"),
        "{}",
        stderr(&check)
    );
    let cat = sessionlog(&["cat", "--recovery", "recoverable", torn.to_str().unwrap()]);
    assert_eq!(cat.status.code(), Some(0), "{}", stderr(&cat));
    let kept = stdout(&cat).lines().count();
    assert!(kept > 300 && kept < 401, "{kept} lines kept");

    let mut damaged = bytes.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x40;
    let corrupt = write_bytes(tmp.path(), "corrupt.jsonl.zstd", &damaged);
    for args in [vec!["check"], vec!["cat", "--recovery", "recoverable"]] {
        let mut args = args.clone();
        args.push(corrupt.to_str().unwrap());
        let output = sessionlog(&args);
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        assert!(
            stderr(&output).contains("is corrupt"),
            "{}",
            stderr(&output)
        );
    }
}

fn write_bytes(dir: &std::path::Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

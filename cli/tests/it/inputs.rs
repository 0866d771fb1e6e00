//! Issue #20 (finding 5) through the binary: `-` as standard input, walks over link loops,
//! and the refusal of a FIFO, end to end. Inputs are generated into temporary folders.

use std::io::Write;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::support::{sessionlog, stderr, stdout};

/// Runs `sessionlog` with `args`, `input` on its standard input.
fn sessionlog_stdin(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sessionlog"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the sessionlog binary runs");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // Written from another thread: the child may print before it has read everything.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap();
    output
}

fn gen(path: &Path, version: &str, zstd: bool) {
    let path = path.to_str().unwrap();
    let mut args = vec!["gen", "--events", "60", "--version", version, "-o", path];
    if zstd {
        args.push("--zstd");
    }
    let output = sessionlog(&args);
    assert!(output.status.success(), "{}", stderr(&output));
}

// Goal: `-` reads standard input wherever a log is read, raw or zstd (told by the magic),
// with the same output as the file; an older log read twice (check's migration pass,
// import's proof before it writes, messages' header probe) works from a pipe too.
// Method: a V3, a V3 .zstd and a V2 log; check, cat, messages and import each through `-` and
// by name, and compare.
#[test]
fn dash_reads_standard_input() {
    let tmp = tempfile::tempdir().unwrap();
    let logs = [
        (tmp.path().join("a.v3.jsonl"), "3", false),
        (tmp.path().join("b.v3.jsonl.zstd"), "3", true),
        (tmp.path().join("c.v2.jsonl"), "2", false),
    ];
    for (idx, (path, version, zstd)) in logs.iter().enumerate() {
        gen(path, version, *zstd);
        let bytes = std::fs::read(path).unwrap();
        let name = path.to_str().unwrap();
        for command in [
            &["cat"][..],
            &["cat", "--to", "3"],
            &["messages"],
            &["--json", "messages"],
        ] {
            let by_name = sessionlog(&[command, &[name]].concat());
            let piped = sessionlog_stdin(&[command, &["-"]].concat(), &bytes);
            assert!(
                by_name.status.success(),
                "{command:?} {name}: {}",
                stderr(&by_name)
            );
            assert!(piped.status.success(), "{command:?} -: {}", stderr(&piped));
            assert_eq!(stdout(&piped), stdout(&by_name), "{command:?} {name}");
        }
        let checked = sessionlog_stdin(&["--json", "check", "-"], &bytes);
        assert!(checked.status.success(), "{}", stderr(&checked));
        let document: Value = serde_json::from_slice(&checked.stdout).unwrap();
        assert_eq!(document["files"][0]["file"], "-");
        assert_eq!(document["files"][0]["compressed"], *zstd);
        if *version == "2" {
            assert_eq!(document["files"][0]["migration"]["ok"], true);
        }
        let db = tmp.path().join(format!("store{idx}.redb"));
        let db = db.to_str().unwrap();
        let imported = sessionlog_stdin(&["--json", "import", "--db", db, "-"], &bytes);
        assert!(imported.status.success(), "{}", stderr(&imported));
        let document: Value = serde_json::from_slice(&imported.stdout).unwrap();
        assert!(document["imports"][0]["events"].as_u64().unwrap() > 0);
        let verified = sessionlog(&["verify", "--db", db]);
        assert!(verified.status.success(), "{}", stderr(&verified));
    }
}

// Goal: a damaged log on standard input fails like the file: exit 1 and `-:LINE:` naming the
// row. Method: a V3 log whose third line is garbled, checked through `-`.
#[test]
fn dash_names_the_line_of_a_fault() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("a.jsonl");
    gen(&path, "3", false);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[2] = "{not json";
    let damaged = lines.join("\n") + "\n";
    let output = sessionlog_stdin(&["check", "-"], damaged.as_bytes());
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).starts_with("-:3: "), "{}", stderr(&output));
}

// Goal: pin the bug of issue #20 where one back-link made 2 logs into 902 sessions and 902
// written files: `audit` and `migrate` read each log once, exit 0, and list the links they did
// not follow (a note on stderr, `skipped` in --json); a FIFO named as a log is refused at once.
// Method: a root with a V3 and a V2 log and three links back to ancestors; audit it, migrate
// it, count the files written; then check a FIFO.
#[test]
fn walks_skip_links_and_fifos_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    std::fs::create_dir_all(root.join("a")).unwrap();
    std::fs::create_dir_all(root.join("b/c")).unwrap();
    gen(&root.join("a/session.v3.jsonl"), "3", false);
    gen(&root.join("b/c/session.v2.jsonl"), "2", false);
    symlink("..", root.join("a/back")).unwrap();
    symlink("../..", root.join("b/c/up")).unwrap();
    symlink("../../root", root.join("b/again")).unwrap();
    let root_text = root.to_str().unwrap();

    let audited = sessionlog(&["--json", "audit", root_text]);
    assert_eq!(audited.status.code(), Some(0), "{}", stderr(&audited));
    let document: Value = serde_json::from_slice(&audited.stdout).unwrap();
    assert_eq!(document["totals"]["sessions"], 2);
    let reasons: Vec<(&str, &str)> = document["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let path = s["path"].as_str().unwrap();
            let path = path.strip_prefix(root_text).unwrap();
            (path, s["reason"].as_str().unwrap())
        })
        .collect();
    assert_eq!(
        reasons,
        [
            ("/a/back", "directory-link"),
            ("/b/again", "directory-link"),
            ("/b/c/up", "directory-link"),
        ]
    );
    let noted = sessionlog(&["audit", root_text]);
    assert!(
        stderr(&noted).contains("a/back: note: skipped: a symbolic link to a directory"),
        "{}",
        stderr(&noted)
    );

    let migrated = sessionlog(&["--json", "migrate", root_text]);
    assert_eq!(migrated.status.code(), Some(0), "{}", stderr(&migrated));
    let document: Value = serde_json::from_slice(&migrated.stdout).unwrap();
    assert_eq!(document["files"].as_array().unwrap().len(), 2);
    assert_eq!(document["skipped"].as_array().unwrap().len(), 3);
    assert!(root.join("b/c/session.v3.jsonl").is_file());
    let written = std::fs::read_dir(root.join("a")).unwrap().count();
    assert_eq!(written, 2, "a/ holds its log and the link, nothing more");

    let fifo = tmp.path().join("session.v3.jsonl");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let fifo_text = fifo.to_str().unwrap();
    for command in [&["check"][..], &["cat"], &["messages"]] {
        let output = sessionlog(&[command, &[fifo_text]].concat());
        assert_eq!(output.status.code(), Some(1), "{command:?}");
        assert!(
            stderr(&output).contains("a fifo, not a regular file: refused"),
            "{command:?}: {}",
            stderr(&output)
        );
    }
}

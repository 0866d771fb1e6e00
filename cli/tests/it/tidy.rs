//! The house rules no compiler checks (STYLE.md rule 40): every source file opens with a `//!`
//! line, sources are ASCII, and none of the banned macros and test attributes listed below,
//! nor a fix-me note without an issue number, is left behind.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

// Goal: the rules hold in every Rust file of the workspace.
#[test]
fn sources_follow_the_house_rules() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    // Every member of the workspace, as the root manifest lists them.
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let members = manifest
        .lines()
        .find_map(|line| line.strip_prefix("members = ["))
        .expect("the root manifest lists its members on one line");
    for member in members.trim_end_matches(']').split(',') {
        let member = member.trim().trim_matches('"');
        rust_files(&root.join(member), &mut files);
    }
    assert!(files.len() > 40, "found {} files", files.len());
    // Spelled in pieces so that this file does not trip its own rules.
    let banned = [
        ["dbg", "!("].concat(),
        ["todo", "!("].concat(),
        ["unimplemented", "!("].concat(),
        ["#[", "ignore]"].concat(),
        ["#[", "should_panic"].concat(),
    ];
    let fixme = ["FIX", "ME"].concat();
    let mut problems = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let name = file.strip_prefix(&root).unwrap().display().to_string();
        if !text.starts_with("//!") {
            problems.push(format!("{name}: does not open with a //! line"));
        }
        for (line_idx, line) in text.lines().enumerate() {
            let place = format!("{name}:{}", line_idx + 1);
            if !line.is_ascii() {
                problems.push(format!("{place}: non-ASCII"));
            }
            for word in &banned {
                if line.contains(word.as_str()) {
                    problems.push(format!("{place}: {word}"));
                }
            }
            if line.contains(fixme.as_str()) && !line.contains("(#") {
                problems.push(format!("{place}: {fixme} without an issue number"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

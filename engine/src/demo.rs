//! `demo`: a dsh-like session root the project makes itself, for the README's main job.
//!
//! The root holds generated sessions of every released layout the engine reads: V0 (with
//! top-level chunk events), V2 (the prompt in request headers), V3, raw and `.jsonl.zstd`,
//! and V4 (what dsh 0.1.7 and 0.2.0 write), laid out as
//! `<root>/--<cwd>--/<id>/session[.vN].jsonl[.zstd]` (spec 3.1), one encoding per session
//! directory.

use std::path::{Path, PathBuf};

use sessionlog_format::gen::GenOptions;
use sessionlog_format::{Compression, FormatVersion};

use crate::error::Error;
use crate::generate::generate_file;

/// One session of the demo root: its version, compression and size relative to the base.
struct Planned {
    id: &'static str,
    version: FormatVersion,
    compressed: bool,
    /// Events, in units of the base size / 10.
    tenths: u64,
}

const PLAN: [Planned; 6] = [
    Planned {
        id: "demo-v0-chunks",
        version: FormatVersion::V0,
        compressed: false,
        tenths: 5,
    },
    Planned {
        id: "demo-v2-zstd",
        version: FormatVersion::V2,
        compressed: true,
        tenths: 10,
    },
    Planned {
        id: "demo-v2-raw",
        version: FormatVersion::V2,
        compressed: false,
        tenths: 6,
    },
    Planned {
        id: "demo-v3-raw",
        version: FormatVersion::V3,
        compressed: false,
        tenths: 20,
    },
    Planned {
        id: "demo-v3-zstd",
        version: FormatVersion::V3,
        compressed: true,
        tenths: 15,
    },
    Planned {
        id: "demo-v4-raw",
        version: FormatVersion::V4,
        compressed: false,
        tenths: 10,
    },
];

/// The folder name of the demo sessions' working directory (`projectKey("/work/gen")`).
pub const PROJECT_DIR: &str = "--work-gen--";

/// Writes the demo root under `root` (created if missing; existing files are never
/// overwritten) and returns the session files written, in plan order. `base_events` sets the
/// sizes (the largest session has twice as many events).
pub fn write_root(
    root: &Path,
    base_events: u64,
    progress: &mut dyn FnMut(&Path),
) -> Result<Vec<PathBuf>, Error> {
    let mut files = Vec::with_capacity(PLAN.len());
    for (idx, planned) in PLAN.iter().enumerate() {
        let dir = root.join(PROJECT_DIR).join(planned.id);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let path = dir.join(planned.version.file_name(planned.compressed));
        let options = GenOptions {
            events: (base_events * planned.tenths / 10).max(1),
            seed: 7 + idx as u64,
        };
        let compression = if planned.compressed {
            Compression::Zstd
        } else {
            Compression::None
        };
        generate_file(&path, options, planned.version, compression, &mut |_| {})?;
        progress(&path);
        files.push(path);
    }
    Ok(files)
}

/// The file the store imports of each session directory under `root` after migration: the
/// `session.v3.jsonl[.zstd]` beside each V0 to V3 source. A V4 session is read and audited in
/// place but not imported: the store keeps V3 sessions until it records each session's
/// version (issue #22 item 4).
pub fn current_files(files: &[PathBuf]) -> Vec<PathBuf> {
    files
        .iter()
        .filter(|file| !file.to_string_lossy().contains(".v4.jsonl"))
        .map(|file| {
            let compressed = file.extension().is_some_and(|e| e == "zstd");
            file.with_file_name(FormatVersion::V3.file_name(compressed))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the demo root holds every planned layout under dsh's file names, and the current
    // file of each session is its V3 name beside it.
    // Method: write a small root into a temporary directory and list it.
    #[test]
    fn root_layout() {
        let tmp = tempfile::tempdir().unwrap();
        let files = write_root(tmp.path(), 20, &mut |_| {}).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|f| f.strip_prefix(tmp.path()).unwrap().display().to_string())
            .collect();
        assert_eq!(
            names,
            [
                "--work-gen--/demo-v0-chunks/session.jsonl",
                "--work-gen--/demo-v2-zstd/session.v2.jsonl.zstd",
                "--work-gen--/demo-v2-raw/session.v2.jsonl",
                "--work-gen--/demo-v3-raw/session.v3.jsonl",
                "--work-gen--/demo-v3-zstd/session.v3.jsonl.zstd",
                "--work-gen--/demo-v4-raw/session.v4.jsonl",
            ]
        );
        let current = current_files(&files);
        assert!(current[0].ends_with("demo-v0-chunks/session.v3.jsonl"));
        assert!(current[1].ends_with("demo-v2-zstd/session.v3.jsonl.zstd"));
        assert_eq!(current[3], files[3]);
        assert_eq!(
            current.len(),
            files.len() - 1,
            "the V4 session is not imported"
        );
    }
}

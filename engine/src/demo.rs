//! `demo`: a dsh-like session root the project makes itself, for the README's main job.
//!
//! The root holds generated sessions of every released layout the engine reads: V0 (with
//! top-level chunk events), V2 (the prompt in request headers), V3, raw and `.jsonl.zstd`,
//! and V4 (what dsh 0.1.7 and 0.2.0 write), laid out as
//! `<root>/--<cwd>--/<id>/session[.vN].jsonl[.zstd]` (spec 3.1), one encoding per session
//! directory.

use std::path::{Path, PathBuf};

use sessionlog_format::gen::GenOptions;
use sessionlog_format::{Compression, FormatVersion, SnapshotMode};

use crate::audit::{audit_file, session_files, totals, AuditRow, AuditTotals};
use crate::error::Error;
use crate::generate::generate_file;
use crate::migrate::{migrate_file, FileOutcome, MigrateOptions, Outcome};
use crate::open::{open_store, Access, Location};
use crate::replay::SessionSource;
use crate::requests::{requests, RequestOptions, RequestReport};
use crate::store::verify::SessionReport;
use crate::transfer::{import_file, ImportReport};

/// The session whose requests the demo reports.
pub const SHOWN_SESSION_DIR: &str = "demo-v3-raw";

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
/// `session.v3.jsonl[.zstd]` beside each V0 to V3 source, and a V4 source itself (the store
/// keeps each session in its own version, V3 or V4).
pub fn current_files(files: &[PathBuf]) -> Vec<PathBuf> {
    files
        .iter()
        .map(|file| {
            if file.to_string_lossy().contains(".v4.jsonl") {
                return file.clone();
            }
            let compressed = file.extension().is_some_and(|e| e == "zstd");
            file.with_file_name(FormatVersion::V3.file_name(compressed))
        })
        .collect()
}

/// What the main job did, step by step: what `sessionlog demo` prints.
#[derive(Debug)]
pub struct DemoReport {
    pub root: PathBuf,
    pub store: PathBuf,
    /// The generated session files, in plan order.
    pub files: Vec<PathBuf>,
    pub migrated: Vec<FileOutcome>,
    pub imported: Vec<ImportReport>,
    pub verified: Vec<SessionReport>,
    pub audit: Vec<AuditRow>,
    pub totals: AuditTotals,
    /// The V3 session whose requests are reported, and its requests.
    pub shown_session: String,
    pub requests: RequestReport,
}

impl DemoReport {
    /// Whether every step succeeded: nothing refused, the store verifies, the audit is clean.
    pub fn ok(&self) -> bool {
        let refused = self
            .migrated
            .iter()
            .any(|o| matches!(o.outcome, Outcome::Refused { .. }));
        !refused
            && self.verified.iter().all(SessionReport::ok)
            && self.totals.corrupt == 0
            && self.totals.refused == 0
    }
}

/// A step of [`run`], told as it ends (the CLI prints each).
#[derive(Debug)]
pub enum DemoStep<'a> {
    /// A session file of the root was written.
    Wrote(&'a Path),
    Migrated(&'a [FileOutcome]),
    /// One current-version file was imported into the store.
    Imported(&'a ImportReport),
    Verified(&'a [SessionReport]),
    Audited(&'a [AuditRow], &'a AuditTotals),
}

/// The main job in `dir` (which must be new or empty): writes the demo root
/// (`dir/root`, [`write_root`]), migrates every older log to a proven V3 successor beside it,
/// imports the current files into a new embedded store (`dir/sessions.redb`), verifies the
/// store, audits the root, and rebuilds the requests of the [`SHOWN_SESSION_DIR`] session.
pub fn run(
    dir: &Path,
    base_events: u64,
    step: &mut dyn FnMut(DemoStep<'_>),
) -> Result<DemoReport, Error> {
    if dir.exists()
        && dir
            .read_dir()
            .map_err(|e| Error::io(dir, e))?
            .next()
            .is_some()
    {
        return Err(Error::Refused(format!(
            "{} is not empty; the demo writes only into a new directory",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let root = dir.join("root");
    let store_path = dir.join("sessions.redb");
    let files = write_root(&root, base_events, &mut |path| step(DemoStep::Wrote(path)))?;
    let migrated: Vec<FileOutcome> = files
        .iter()
        .map(|file| {
            let name = file.strip_prefix(&root).unwrap_or(file);
            migrate_file(file, name, &MigrateOptions::default())
        })
        .collect();
    step(DemoStep::Migrated(&migrated));
    let store = open_store(&Location::Redb(store_path.clone()), Access::Write)?;
    let mut imported = Vec::new();
    let mut shown_session = None;
    for file in current_files(&files) {
        let report = import_file(store.as_ref(), &file, SnapshotMode::Auto, &mut |_| {})?;
        step(DemoStep::Imported(&report));
        if file
            .parent()
            .is_some_and(|p| p.ends_with(SHOWN_SESSION_DIR))
        {
            shown_session = Some(report.session.clone());
        }
        imported.push(report);
    }
    let verified = store.verify(&[])?;
    step(DemoStep::Verified(&verified));
    let audit: Vec<AuditRow> = session_files(&root)?
        .files
        .iter()
        .map(|(file, relative)| audit_file(file, relative, SnapshotMode::Auto))
        .collect();
    let totals = totals(&audit);
    step(DemoStep::Audited(&audit, &totals));
    let shown_session = shown_session
        .ok_or_else(|| Error::Refused("the demo root has no V3 session to show".into()))?;
    let source = SessionSource::Store {
        store: store.as_ref(),
        session: &shown_session,
    };
    let requests = requests(source, RequestOptions::default())?;
    Ok(DemoReport {
        root,
        store: store_path,
        files,
        migrated,
        imported,
        verified,
        audit,
        totals,
        shown_session,
        requests,
    })
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
        assert_eq!(current.len(), files.len(), "every session is imported");
        assert_eq!(current[5], files[5], "the V4 session is imported as it is");
    }

    // Goal: the main job runs end to end as a library call: every step is told, the store
    // verifies, the audit is clean, and the shown session has requests.
    // Method: run it on a small root in a temporary directory; a second run in the same
    // (now non-empty) directory is refused.
    #[test]
    fn run_reports_every_step() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("demo");
        let mut steps = Vec::new();
        let report = run(&dir, 40, &mut |step| {
            steps.push(match step {
                DemoStep::Wrote(_) => "wrote",
                DemoStep::Migrated(_) => "migrated",
                DemoStep::Imported(_) => "imported",
                DemoStep::Verified(_) => "verified",
                DemoStep::Audited(..) => "audited",
            })
        })
        .unwrap();
        assert!(report.ok());
        assert_eq!(report.files.len(), PLAN.len());
        // Every session is stored, the V4 one in its own version.
        assert_eq!(report.imported.len(), PLAN.len());
        assert_eq!(report.verified.len(), PLAN.len());
        let v4 = report
            .files
            .iter()
            .position(|file| file.to_string_lossy().contains(".v4.jsonl"))
            .expect("the plan holds a V4 session");
        use crate::log_store::LogStore as _;
        let store = crate::store::Store::open_read_only(&report.store).unwrap();
        let info = store.session_info(&report.imported[v4].session).unwrap();
        assert_eq!(info.version(), FormatVersion::V4);
        assert!(!report.requests.requests.is_empty());
        assert_eq!(steps.iter().filter(|s| **s == "wrote").count(), PLAN.len());
        assert_eq!(steps.last(), Some(&"audited"));
        assert!(run(&dir, 40, &mut |_| {}).is_err());
    }
}

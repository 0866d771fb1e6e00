//! `salvage`: every intact session of a store (read-only, a damaged WAL included) written out
//! as canonical logs of their own version through the export path, and an exact account of what was lost.

use std::path::{Path, PathBuf};

use crate::embedded::{DamagedFrame, Store};
use crate::error::Error;
use crate::log_store::LogStore;
use crate::transfer::export_prefix;

/// One session written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Salvaged {
    pub session: String,
    pub file: PathBuf,
    /// Events written: seqs `0..events`.
    pub events: u64,
}

/// What of one session could not be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loss {
    pub session: String,
    /// The first seq not written (`None`: nothing of the session was written).
    pub from_seq: Option<u64>,
    /// The session's verify faults, or why the export failed.
    pub reasons: Vec<String>,
}

/// A session left out on purpose: an import that did not finish (its log is the source; a
/// rerun of the import completes it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub session: String,
    /// Events the unfinished session holds.
    pub events: u64,
    pub reason: String,
}

/// The result of a salvage.
#[derive(Debug, Default)]
pub struct SalvageReport {
    pub written: Vec<Salvaged>,
    pub lost: Vec<Loss>,
    /// Interrupted imports, not written: they are no sessions yet, and were never whole.
    pub skipped: Vec<Skipped>,
    pub damaged_frames: Vec<DamagedFrame>,
}

/// The result of a backup.
#[derive(Debug, Default)]
pub struct BackupReport {
    pub copied: Vec<crate::log_store::CopiedSession>,
    /// Interrupted imports, not copied (their ids).
    pub skipped: Vec<String>,
}

/// Why an interrupted import is skipped, as `salvage`, `backup` and `copy` say it.
pub const SKIPPED_IMPORT_REASON: &str =
    "an interrupted import, not a session yet: rerun `sessionlog import FILE` with its log";

impl SalvageReport {
    /// Whether nothing was lost (a skipped interrupted import is not a loss: its log holds it).
    pub fn complete(&self) -> bool {
        self.lost.is_empty() && self.damaged_frames.is_empty()
    }
}

/// Writes every session of `store` to `dir` (created if missing) as `<id>.v<N>.jsonl` (N its
/// version, 3 or 4): a session
/// that verifies whole, whole; a damaged one, its events before the first fault (a verified
/// prefix), reported as a loss from that seq; an interrupted import, skipped. Never
/// overwrites a file.
pub fn salvage(store: &dyn LogStore, dir: &Path) -> Result<SalvageReport, Error> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let reports = store.verify(&[])?;
    let imports = store.interrupted_imports()?;
    let mut salvage = SalvageReport {
        damaged_frames: store.damaged_frames(),
        ..SalvageReport::default()
    };
    for report in reports {
        if imports.contains(&report.session) {
            salvage.skipped.push(Skipped {
                session: report.session,
                events: report.events,
                reason: SKIPPED_IMPORT_REASON.to_owned(),
            });
            continue;
        }
        let first_fault = report.faults.iter().map(|f| f.seq.unwrap_or(0)).min();
        let reasons: Vec<String> = report
            .faults
            .iter()
            .map(|f| {
                let at = f.seq.map(|s| s.to_string()).unwrap_or_else(|| "-".into());
                format!("{}@{at}: {} [{}]", report.session, f.message, f.kind.name())
            })
            .collect();
        let end_seq = first_fault.unwrap_or(report.events);
        // Each session in its own version; a record too damaged to say is written as V3 (its
        // export then fails on the same damage and is reported).
        let version = store
            .session_info(&report.session)
            .map_or(3, |info| info.version().number());
        let file = dir.join(format!("{}.v{version}.jsonl", report.session));
        let exported = if end_seq == 0 && first_fault.is_some() {
            None
        } else {
            Some(export_prefix(store, &report.session, end_seq, &file))
        };
        match exported {
            Some(Ok(events)) => {
                salvage.written.push(Salvaged {
                    session: report.session.clone(),
                    file,
                    events,
                });
                if first_fault.is_some() {
                    salvage.lost.push(Loss {
                        session: report.session,
                        from_seq: Some(events),
                        reasons,
                    });
                }
            }
            Some(Err(error)) => salvage.lost.push(Loss {
                session: report.session,
                from_seq: None,
                reasons: reasons
                    .into_iter()
                    .chain([format!("not written: {error}")])
                    .collect(),
            }),
            None => salvage.lost.push(Loss {
                session: report.session,
                from_seq: None,
                reasons,
            }),
        }
    }
    Ok(salvage)
}

/// Writes a consistent single-file copy of `store` (open read-only, its WAL replayed) to the
/// new file `out`: a store built under a temporary name by copying every session (which
/// checks every record and chain on the way and verifies the target), closed cleanly so
/// that its WAL is empty, whose WAL file is then removed, and linked into place. Returns the
/// sessions copied and the interrupted imports left out; an existing `out` is refused.
pub fn backup(store: &dyn LogStore, out: &Path) -> Result<BackupReport, Error> {
    if out.exists() {
        return Err(Error::Refused(format!(
            "{}: exists; backup never overwrites",
            out.display()
        )));
    }
    let mut temp_wal = None;
    let copied = crate::publish::publish_file(out, "backup", |temp| {
        let wal = temp_wal.insert(crate::embedded::wal_path(temp));
        let target = Store::open(temp)?;
        let copied = crate::log_store::copy_sessions(store, &target, &[], &mut |_, _| {})?;
        drop(target);
        std::fs::remove_file(&*wal).map_err(|e| Error::io(wal, e))?;
        if let Some(bad) = copied.iter().find(|c| !c.report.ok()) {
            return Err(Error::Refused(format!(
                "{}: the copy does not verify: {:?}",
                bad.session, bad.report.faults
            )));
        }
        Ok(copied)
    });
    if let Some(wal) = temp_wal {
        let _ = std::fs::remove_file(wal);
    }
    Ok(BackupReport {
        copied: copied?,
        skipped: store.interrupted_imports()?,
    })
}

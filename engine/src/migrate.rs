//! `migrate`: turn dsh logs into V3 successors, proven request-equivalent, published without
//! ever touching the source or overwriting a file.
//!
//! A successor is written to a temporary file in its target directory, synced, linked into
//! place (which fails if the name exists), and the directory is synced. A refusal or a failed
//! proof publishes nothing.

use std::fs::{self, File};
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use sessionlog_format::{
    Compression, Event, FormatVersion, LogWriter, ReadOptions, Recovery, SessionHeader,
    SnapshotMode, WriterOptions,
};
use sessionlog_migrations::{
    migrate_v2_to_v3_unproved, migrate_v2_to_v3_with, Migrated, StageOptions,
};

use crate::error::Error;
use crate::files::open_log;
use crate::transfer::sync_parent;

/// Events per frame (and write) of a published successor.
const WRITE_BATCH_EVENTS: usize = 4096;

/// How `migrate` runs.
#[derive(Debug, Clone, Default)]
pub struct MigrateOptions {
    /// Put successors under this directory instead of beside their sources.
    pub out_dir: Option<PathBuf>,
    /// Convert and prove, but write nothing.
    pub dry_run: bool,
    pub snapshot: SnapshotMode,
    /// Skip the request-equivalence proof (`--no-verify`); on by default.
    pub skip_proof: bool,
}

/// What happened to one source file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Converted {
        /// `None` when the proof was skipped (`--no-verify`).
        requests_proved: Option<u64>,
    },
    /// The source is already V3, or its successor exists.
    Current,
    /// Refused: the physical line (header = 1) when one is known, and the reason.
    Refused { line: Option<u64>, reason: String },
}

/// One source file's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileOutcome {
    pub source: PathBuf,
    pub target: Option<PathBuf>,
    pub from: Option<u64>,
    pub to: u64,
    pub outcome: Outcome,
}

/// Whether `name` is a session log generation name (spec 3.1 rule 1).
pub fn is_generation_name(name: &str) -> bool {
    let base = name.strip_suffix(".zstd").unwrap_or(name);
    if base == "session.jsonl" {
        return true;
    }
    let Some(number) = base
        .strip_prefix("session.v")
        .and_then(|r| r.strip_suffix(".jsonl"))
    else {
        return false;
    };
    !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()) && !number.starts_with('0')
}

/// The session logs under `path`: the file itself, or every generation file of a tree
/// (sorted), each with its path relative to the walked root.
pub fn sources(path: &Path) -> Result<Vec<(PathBuf, PathBuf)>, Error> {
    if !path.is_dir() {
        let name = path.file_name().map(PathBuf::from).unwrap_or_default();
        return Ok(vec![(path.to_owned(), name)]);
    }
    let mut found = Vec::new();
    walk(path, path, &mut found)?;
    found.sort();
    Ok(found)
}

fn walk(root: &Path, dir: &Path, found: &mut Vec<(PathBuf, PathBuf)>) -> Result<(), Error> {
    for entry in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        if path.is_dir() {
            walk(root, &path, found)?;
        } else if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(is_generation_name)
        {
            let relative = path.strip_prefix(root).unwrap_or(&path).to_owned();
            found.push((path, relative));
        }
    }
    Ok(())
}

/// Migrates one source file to V3.
pub fn migrate_file(source: &Path, relative: &Path, options: &MigrateOptions) -> FileOutcome {
    let mut result = FileOutcome {
        source: source.to_owned(),
        target: None,
        from: None,
        to: FormatVersion::V3.number(),
        outcome: Outcome::Current,
    };
    match convert(source, relative, options, &mut result) {
        Ok(outcome) => result.outcome = outcome,
        Err(error) => result.outcome = refused_by(error),
    }
    result
}

fn refused_by(error: Error) -> Outcome {
    match error {
        Error::Read { source, .. } => match source.fault() {
            Some(fault) => Outcome::Refused {
                line: Some(fault.line),
                reason: fault.message.clone(),
            },
            None => Outcome::Refused {
                line: Some(1),
                reason: source.to_string(),
            },
        },
        other => Outcome::Refused {
            line: None,
            reason: format!("{other:#}"),
        },
    }
}

fn convert(
    source: &Path,
    relative: &Path,
    options: &MigrateOptions,
    result: &mut FileOutcome,
) -> Result<Outcome, Error> {
    let read_options = ReadOptions {
        recovery: Recovery::Strict,
        snapshot: options.snapshot,
    };
    let reader = open_log(source, read_options)?;
    let version = reader.version();
    result.from = Some(version.number());
    let compressed = reader.compressed();
    let target = target_path(source, relative, options, compressed);
    result.target = Some(if version == FormatVersion::V3 {
        source.to_owned()
    } else {
        target.clone()
    });
    if version == FormatVersion::V3 || target.exists() {
        return Ok(Outcome::Current);
    }
    if version != FormatVersion::V2 {
        return Ok(Outcome::Refused {
            line: Some(1),
            reason: format!(
                "format {version} has no upgrade path in this build yet (the V0->V1 and V1->V2 \
                 edges are not released)"
            ),
        });
    }
    let (header, events, snapshot) = drain(reader, source)?;
    let stage_options = StageOptions { snapshot };
    let migrated = if options.skip_proof {
        migrate_v2_to_v3_unproved(header, events, stage_options)
    } else {
        migrate_v2_to_v3_with(header, events, stage_options)
    };
    let migrated = match migrated {
        Ok(migrated) => migrated,
        Err(refusal) => {
            return Ok(Outcome::Refused {
                line: refusal.v2_line(),
                reason: refusal.to_string(),
            })
        }
    };
    let requests_proved = (!options.skip_proof).then_some(migrated.requests_proved);
    if !options.dry_run {
        let compression = if compressed {
            Compression::Zstd
        } else {
            Compression::None
        };
        publish(
            &target,
            &migrated,
            WriterOptions {
                compression,
                snapshot,
            },
        )?;
    }
    Ok(Outcome::Converted { requests_proved })
}

fn target_path(
    source: &Path,
    relative: &Path,
    options: &MigrateOptions,
    compressed: bool,
) -> PathBuf {
    let name = FormatVersion::V3.file_name(compressed);
    match &options.out_dir {
        Some(dir) => match relative.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(parent) => dir.join(parent).join(name),
            None => dir.join(name),
        },
        None => source.with_file_name(name),
    }
}

/// Writes the successor to a temporary file, syncs it, links it into place without
/// overwriting, and syncs the directory.
fn publish(target: &Path, migrated: &Migrated, options: WriterOptions) -> Result<(), Error> {
    if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = target.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    let written = write_successor(&temp, &migrated.header, &migrated.events, options);
    let published = written.and_then(|()| {
        fs::hard_link(&temp, target).map_err(|e| Error::io(target, e))?;
        sync_parent(target)
    });
    let removed = fs::remove_file(&temp).map_err(|e| Error::io(&temp, e));
    published?;
    removed
}

fn write_successor(
    temp: &Path,
    header: &SessionHeader,
    events: &[Event],
    options: WriterOptions,
) -> Result<(), Error> {
    let file = File::options()
        .write(true)
        .create_new(true)
        .open(temp)
        .map_err(|e| Error::io(temp, e))?;
    let mut writer =
        LogWriter::with_options(BufWriter::with_capacity(1 << 20, file), header, options)
            .map_err(|e| Error::io(temp, e))?;
    for batch in events.chunks(WRITE_BATCH_EVENTS) {
        writer.append_batch(batch).map_err(|source| Error::Write {
            path: temp.to_owned(),
            source,
        })?;
    }
    let out = writer.into_inner().map_err(|e| Error::io(temp, e))?;
    let file = out
        .into_inner()
        .map_err(|e| Error::io(temp, e.into_error()))?;
    file.sync_all().map_err(|e| Error::io(temp, e))
}

/// Reads a log of any migratable version and returns it as V3, in memory (nothing written):
/// the header, the events, and whether it is a normalized recording.
pub fn read_as_v3(
    path: &Path,
    snapshot: SnapshotMode,
) -> Result<(SessionHeader, Vec<Event>, bool), Error> {
    let reader = open_log(
        path,
        ReadOptions {
            recovery: Recovery::Strict,
            snapshot,
        },
    )?;
    let version = reader.version();
    let (header, events, snapshot) = drain(reader, path)?;
    match version {
        FormatVersion::V3 => Ok((header, events, snapshot)),
        FormatVersion::V2 => {
            let migrated = migrate_v2_to_v3_with(header, events, StageOptions { snapshot })
                .map_err(|refusal| {
                    let line = refusal
                        .v2_line()
                        .map(|l| format!(":{l}"))
                        .unwrap_or_default();
                    Error::Refused(format!("{}{line}: {refusal}", path.display()))
                })?;
            Ok((migrated.header, migrated.events, snapshot))
        }
        older => Err(Error::Refused(format!(
            "{}: format {older} has no upgrade path in this build yet",
            path.display()
        ))),
    }
}

/// Runs the in-memory migration of a readable V2 log for `check`: the refusal, if any, as a
/// check error with the physical line (header = 1).
pub(crate) fn migration_refusal(
    path: &Path,
    snapshot: SnapshotMode,
) -> Result<(), crate::check::CheckError> {
    let reader = open_log(
        path,
        ReadOptions {
            recovery: Recovery::Strict,
            snapshot,
        },
    )
    .map_err(|e| migration_error(None, e.to_string()))?;
    let (header, events, snapshot) =
        drain(reader, path).map_err(|e| migration_error(None, e.to_string()))?;
    let options = StageOptions { snapshot };
    match migrate_v2_to_v3_with(header, events, options) {
        Ok(_) => Ok(()),
        Err(refusal) => Err(migration_error(refusal.v2_line(), refusal.to_string())),
    }
}

fn migration_error(line: Option<u64>, message: String) -> crate::check::CheckError {
    crate::check::CheckError {
        line: line.unwrap_or(0),
        seq: None,
        rule: "migration".to_owned(),
        message,
    }
}

/// Reads every event of an open log; returns the header, the events and whether the log is a
/// normalized recording.
fn drain(
    mut reader: sessionlog_format::LogReader<crate::files::LogInput>,
    path: &Path,
) -> Result<(SessionHeader, Vec<Event>, bool), Error> {
    let mut events = Vec::new();
    while let Some(next) = reader.next_event() {
        events.push(next.map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })?);
    }
    Ok((reader.header().clone(), events, reader.snapshot()))
}

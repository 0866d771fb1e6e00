//! `check`: decode files and report every rule they break (CLI.md `check`).

use std::path::{Path, PathBuf};

use sessionlog_format::rules::RuleContext;
use sessionlog_format::{
    Event, Fault, FormatVersion, LogReader, ReadError, ReadOptions, Recovery, Rule, SnapshotMode,
};
use sessionlog_migrations::Refusal;

use crate::error::Error;
use crate::files::{open_log, read_ahead, LogInput};
use crate::migrate::{LineMemo, MigrationSource, Refused};

/// How `check` reads.
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckOptions {
    pub snapshot: SnapshotMode,
}

/// One problem found in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckError {
    /// Physical line, 1-based (the header is line 1); 0 when the file could not be opened.
    pub line: u64,
    pub seq: Option<u64>,
    /// The broken rule's stable name, or `io`.
    pub rule: String,
    pub message: String,
}

/// The outcome of checking one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileReport {
    pub file: PathBuf,
    /// The header's format version, when it could be read.
    pub version: Option<u64>,
    pub ok: bool,
    pub events: u64,
    pub compressed: bool,
    /// The file was read as a normalized recording (spec 18).
    pub snapshot: bool,
    pub errors: Vec<CheckError>,
    /// For an intact log older than V4: why its in-memory migration was refused, if it was.
    /// Not an error of the file: a valid older log may have no order-preserving successor
    /// (spec 10.6), and dsh's manifest accepts such logs.
    pub migration: Option<CheckError>,
    /// The version whose successor `migration` is about: 3 when the chain refused before
    /// reaching V3, else 4.
    pub migration_to: u64,
}

/// Checks one file strictly: any fault the recoverable decoder would record is an error.
pub fn check_file(path: &Path, options: CheckOptions) -> FileReport {
    let mut report = FileReport {
        file: path.to_owned(),
        version: None,
        ok: false,
        events: 0,
        compressed: false,
        snapshot: false,
        errors: Vec::new(),
        migration: None,
        migration_to: 4,
    };
    let read_options = ReadOptions {
        recovery: Recovery::Strict,
        snapshot: options.snapshot,
    };
    let reader = match open_log(path, read_options) {
        Ok(reader) => reader,
        Err(error) => {
            report.errors.push(error_of(error));
            return report;
        }
    };
    // The events are counted and dropped, so the rows are skimmed (`LogReader::skimming`):
    // nothing below reads the packed runs of embedded streams (the in-memory migration of an
    // older log rewrites messages and chunk records only, the V4 rules read chunk records,
    // and its proof compares messages). A log older than V4 is also migrated in memory below,
    // so its rows are read ahead on a thread of their own (`read_ahead`); a V4 log's check is
    // mostly decoding, which this thread and a helper share (`LogReader::parallel`).
    let reader = reader.skimming();
    let reader = if reader.version() < FormatVersion::V4 {
        read_ahead(reader, path)
    } else {
        reader.parallel()
    };
    report.version = Some(reader.version().number());
    report.compressed = reader.compressed();
    let version = reader.version();
    // An intact older log is also run through the migration chain in memory (spec 9, 10.6),
    // so that `check` tells whether it has a V4 successor (through V3). The first migration
    // (to V3, or for a V3 log to V4) reads the events of the check's own pass: the reader
    // applies every rule either way, and its outcome counts only when the pass found no fault.
    let first = match version {
        v if v >= FormatVersion::V4 => None,
        v if v >= FormatVersion::V3 => Some(FormatVersion::V4),
        _ => Some(FormatVersion::V3),
    };
    let mut source = CheckSource {
        reader,
        path,
        lines: LineMemo::default(),
        events: 0,
        error: None,
        done: false,
    };
    let migrated = first.map(|to| migration_of(&mut source, to));
    while source.next_event().is_some() {}
    report.events = source.events;
    report.errors.extend(source.error.take().map(read_error));
    report.snapshot = source.reader.snapshot();
    drop(source);
    if let (Some(first), Some(migrated), true) = (first, migrated, report.errors.is_empty()) {
        // Then the V4 successor of an older log, through its V3 one: the note names the first
        // version a log cannot reach.
        let refused = match migrated {
            Err(refused) => Some(refused),
            Ok(()) if first == FormatVersion::V3 => {
                migration_refusal(path, options.snapshot, FormatVersion::V4)
                    .err()
                    .map(|refused| (FormatVersion::V4, refused))
            }
            Ok(()) => None,
        };
        if let Some((to, refused)) = refused {
            report.migration = Some(refused);
            report.migration_to = to.number();
        }
    }
    report.ok = report.errors.is_empty();
    report
}

fn error_of(error: Error) -> CheckError {
    match error {
        Error::Read { source, .. } => read_error(source),
        other => CheckError {
            line: 0,
            seq: None,
            rule: "io".to_owned(),
            message: other.to_string(),
        },
    }
}

fn read_error(error: ReadError) -> CheckError {
    match error {
        ReadError::Fault(Fault {
            line,
            seq,
            rule,
            message,
            ..
        }) => CheckError {
            line,
            seq,
            rule: rule.name().to_owned(),
            message,
        },
        ReadError::NewerVersion { message, .. } => CheckError {
            line: 1,
            seq: None,
            rule: Rule::Header.name().to_owned(),
            message,
        },
        other => CheckError {
            line: 0,
            seq: None,
            rule: "io".to_owned(),
            message: other.to_string(),
        },
    }
}

/// The events of `check`'s read pass, fed to the in-memory migration as they are read: the
/// first read fault ends the migration's source (and is kept for the report), and the pass
/// reads on after a refusal.
struct CheckSource<'a> {
    reader: LogReader<LogInput>,
    path: &'a Path,
    lines: LineMemo,
    events: u64,
    error: Option<ReadError>,
    done: bool,
}

impl MigrationSource for CheckSource<'_> {
    fn next_event(&mut self) -> Option<Result<Event, Error>> {
        if self.done {
            return None;
        }
        match self.reader.next_event() {
            Some(Ok(event)) => {
                self.events += 1;
                self.lines.note(event.seq, self.reader.line());
                Some(Ok(event))
            }
            Some(Err(error)) => {
                self.error = Some(error);
                self.done = true;
                None
            }
            None => {
                self.done = true;
                None
            }
        }
    }

    fn place(&self, refusal: &Refusal) -> Refused {
        self.lines.place(refusal, self.reader.version())
    }

    fn path(&self) -> &Path {
        self.path
    }

    fn admitted(&self) -> Option<RuleContext> {
        Some(self.reader.admission().context())
    }
}

/// The in-memory migration of `source` to `to` with its proof, as [`migration_refusal`]
/// runs it, but on the events of the check's read pass.
fn migration_of(
    source: &mut CheckSource<'_>,
    to: FormatVersion,
) -> Result<(), (FormatVersion, CheckError)> {
    let header = source.reader.header().clone();
    let normalized = source.reader.snapshot();
    let migrated =
        crate::migrate::migrate_events(source, header, normalized, to, true, &mut |_| {}, |_| {
            Ok(crate::migrate::Discard)
        });
    match migrated {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(refused)) => Err((to, migration_error(refused.line, refused.reason))),
        Err(error) => Err((to, migration_error(None, error.to_string()))),
    }
}

/// Runs the in-memory migration of a readable older log to `to` for `check`: the refusal, if
/// any, as a check error with the physical line (header = 1).
fn migration_refusal(
    path: &Path,
    snapshot: SnapshotMode,
    to: FormatVersion,
) -> Result<(), CheckError> {
    let reader = open_log(
        path,
        ReadOptions {
            recovery: Recovery::Strict,
            snapshot,
        },
    )
    .map_err(|e| migration_error(None, e.to_string()))?;
    // Migrated to be proved and dropped: skimmed, as the check's own pass.
    let reader = read_ahead(reader.skimming(), path);
    match crate::migrate::stream_to(reader, path, to, true, &mut |_| {}, |_| {
        Ok(crate::migrate::Discard)
    }) {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(refused)) => Err(migration_error(refused.line, refused.reason)),
        Err(error) => Err(migration_error(None, error.to_string())),
    }
}

fn migration_error(line: Option<u64>, message: String) -> CheckError {
    CheckError {
        line: line.unwrap_or(0),
        seq: None,
        rule: "migration".to_owned(),
        message,
    }
}

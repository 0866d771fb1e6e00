//! `check`: decode files and report every rule they break (CLI.md `check`).

use std::path::{Path, PathBuf};

use sessionlog_format::{
    Fault, FormatVersion, ReadError, ReadOptions, Recovery, Rule, SnapshotMode,
};

use crate::error::Error;
use crate::files::open_log;

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
    let mut reader = match open_log(path, read_options) {
        Ok(reader) => reader,
        Err(error) => {
            report.errors.push(error_of(error));
            return report;
        }
    };
    report.version = Some(reader.version().number());
    report.compressed = reader.compressed();
    while let Some(next) = reader.next_event() {
        match next {
            Ok(_) => report.events += 1,
            Err(error) => {
                report.errors.push(read_error(error));
                break;
            }
        }
    }
    report.snapshot = reader.snapshot();
    // An intact older log is also run through the migration chain in memory (spec 9, 10.6),
    // so that `check` tells whether it has a V4 successor (through V3).
    if report.errors.is_empty() && reader.version() < FormatVersion::V4 {
        let version = reader.version();
        drop(reader);
        // First the V3 successor (the note names the first version a log cannot reach), then
        // the V4 one through it.
        for to in [FormatVersion::V3, FormatVersion::V4] {
            if version >= to {
                continue;
            }
            let refused = migration_refusal(path, options.snapshot, to).err();
            if refused.is_some() {
                report.migration = refused;
                report.migration_to = to.number();
                break;
            }
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

//! `migrate`: turn dsh logs into V3 successors, proven request-equivalent, published without
//! ever touching the source or overwriting a file.
//!
//! A successor is written to a temporary file in its target directory, synced, linked into
//! place (which fails if the name exists), and the directory is synced. A refusal or a failed
//! proof publishes nothing.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use sessionlog_format::rules::RuleContext;
use sessionlog_format::{
    Compression, Event, FormatVersion, LogReader, LogWriter, ReadOptions, Recovery, SessionHeader,
    SnapshotMode, WriterOptions,
};
use sessionlog_migrations::{
    Catalog, Migrator, MigratorError, MigratorOptions, Refusal, StageOptions, Summary,
};

use crate::error::Error;
use crate::files::{open_log, LogInput};
use crate::publish::publish_new;

/// Source events between two progress reports.
const PROGRESS_EVENTS: u64 = 8192;

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
    /// The target version (`--to`); V3 when `None`.
    pub to: Option<FormatVersion>,
}

impl MigrateOptions {
    /// The version successors are written in.
    pub fn target(&self) -> FormatVersion {
        self.to.unwrap_or(FormatVersion::V3)
    }
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

/// Migrates one source file to V3.
pub fn migrate_file(source: &Path, relative: &Path, options: &MigrateOptions) -> FileOutcome {
    migrate_file_observed(source, relative, options, &mut |_| {})
}

/// [`migrate_file`], calling `progress` with the number of source events read so far every
/// few thousand events (for a progress display on large files).
pub fn migrate_file_observed(
    source: &Path,
    relative: &Path,
    options: &MigrateOptions,
    progress: &mut dyn FnMut(u64),
) -> FileOutcome {
    let mut result = FileOutcome {
        source: source.to_owned(),
        target: None,
        from: None,
        to: options.target().number(),
        outcome: Outcome::Current,
    };
    match convert(source, relative, options, &mut result, progress) {
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
    progress: &mut dyn FnMut(u64),
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
    // A source at or past the target is current: there is no downgrade edge.
    let current = version >= options.target();
    result.target = Some(if current {
        source.to_owned()
    } else {
        target.clone()
    });
    if current || target.exists() {
        return Ok(Outcome::Current);
    }
    let to = options.target();
    let prove = !options.skip_proof;
    let reader = crate::files::read_ahead(reader, source);
    let writer_options = WriterOptions {
        compression: if compressed {
            Compression::Zstd
        } else {
            Compression::None
        },
        snapshot: reader.snapshot(),
    };
    let migrated = if options.dry_run {
        stream_to(reader, source, to, prove, progress, |_| Ok(Discard))?.map(|(summary, _)| summary)
    } else {
        publish(&target, |temp| {
            stream_to(reader, source, to, prove, progress, |header| {
                open_successor(temp, header, writer_options)
            })
        })?
    };
    Ok(match migrated {
        Ok(summary) => Outcome::Converted {
            requests_proved: summary.requests_proved,
        },
        Err(refused) => Outcome::Refused {
            line: refused.line,
            reason: refused.reason,
        },
    })
}

/// A refusal placed in its source file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The physical line (header = 1), when the refusal names an event or the header.
    pub line: Option<u64>,
    pub reason: String,
}

impl Refused {
    /// The refusal as an error naming `path` and the line: `FILE:LINE: reason`.
    pub fn into_error(self, path: &Path) -> Error {
        let line = self.line.map(|l| format!(":{l}")).unwrap_or_default();
        Error::Refused(format!("{}{line}: {}", path.display(), self.reason))
    }
}

/// Streams an open log through the migrator into the writer `open` makes once the target
/// header is known. The outer error is an I/O or read failure; the inner one a refusal.
pub fn stream<S: Sink>(
    reader: LogReader<LogInput>,
    path: &Path,
    prove: bool,
    progress: &mut dyn FnMut(u64),
    open: impl FnOnce(&SessionHeader) -> Result<S, Error>,
) -> Result<Result<(Summary, S), Refused>, Error> {
    stream_to(reader, path, FormatVersion::V3, prove, progress, open)
}

/// [`stream`] towards `to`; a log at or past `to` passes through under its own rules.
pub fn stream_to<S: Sink>(
    reader: LogReader<LogInput>,
    path: &Path,
    to: FormatVersion,
    prove: bool,
    progress: &mut dyn FnMut(u64),
    open: impl FnOnce(&SessionHeader) -> Result<S, Error>,
) -> Result<Result<(Summary, S), Refused>, Error> {
    let header = reader.header().clone();
    let snapshot = reader.snapshot();
    let mut source = FileSource {
        reader,
        path,
        lines: LineMemo::default(),
    };
    migrate_events(&mut source, header, snapshot, to, prove, progress, open)
}

/// What the migration reads: a log file, or a stored session (`migrate --db`).
pub(crate) trait MigrationSource {
    /// The next event in seq order; `None` at the end.
    fn next_event(&mut self) -> Option<Result<Event, Error>>;
    /// Where `refusal` is: the physical line of a file, the `SESSION@SEQ` of a session.
    fn place(&self, refusal: &Refusal) -> Refused;
    /// What errors name as the source: the file, or the session's id.
    fn path(&self) -> &Path;
    /// The rule context under which an admission checked every event this source yields
    /// before yielding it, asked once the first event is out: a log reader's (every event it
    /// yields passed its version's rules). `None` (a stored session, read back without its
    /// rules) leaves the proof to check them itself.
    fn admitted(&self) -> Option<RuleContext> {
        None
    }
}

struct FileSource<'a> {
    reader: LogReader<LogInput>,
    path: &'a Path,
    lines: LineMemo,
}

impl MigrationSource for FileSource<'_> {
    fn next_event(&mut self) -> Option<Result<Event, Error>> {
        let next = self.reader.next_event()?;
        Some(match next {
            Ok(event) => {
                self.lines.note(event.seq, self.reader.line());
                Ok(event)
            }
            Err(source) => Err(Error::Read {
                path: self.path.to_owned(),
                source,
            }),
        })
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

/// The one migration driver: streams `source` (whose header is `header`) through the
/// migrator into the sink `open` makes once the target header is known, proving it when
/// `prove`. The outer error is an I/O or read failure; the inner one a refusal.
pub(crate) fn migrate_events<S: Sink>(
    source: &mut dyn MigrationSource,
    header: SessionHeader,
    snapshot: bool,
    to: FormatVersion,
    prove: bool,
    progress: &mut dyn FnMut(u64),
    open: impl FnOnce(&SessionHeader) -> Result<S, Error>,
) -> Result<Result<(Summary, S), Refused>, Error> {
    let options = MigratorOptions {
        stage: StageOptions { snapshot },
        prove,
        target: to,
    };
    let (mut migrator, header) = match Migrator::new(&Catalog::released(), header, options) {
        Ok(started) => started,
        Err(MigratorError::Catalog(error)) => {
            let reason = error.to_string();
            return Ok(Err(Refused {
                line: Some(1),
                reason,
            }));
        }
        Err(MigratorError::Refused(refusal)) => {
            return Ok(Err(Refused {
                line: Some(1),
                reason: refusal.to_string(),
            }))
        }
    };
    let mut writer = open(&header)?;
    let discards = writer.discards();
    let mut out = Vec::with_capacity(WRITE_BATCH_EVENTS);
    let mut read = 0u64;
    while let Some(next) = source.next_event() {
        let event = next?;
        if read == 0 {
            if let Some(ctx) = source.admitted() {
                migrator.source_admitted(ctx);
            }
        }
        let pushed = if discards {
            migrator.push_discarding(event)
        } else {
            migrator.push(event, &mut out)
        };
        if let Err(refusal) = pushed {
            return Ok(Err(source.place(&refusal)));
        }
        if out.len() >= WRITE_BATCH_EVENTS {
            writer.take(&mut out, source.path())?;
        }
        read += 1;
        if read.is_multiple_of(PROGRESS_EVENTS) {
            progress(read);
        }
    }
    let summary = match migrator.finish(&mut out) {
        Ok(summary) => summary,
        Err(refusal) => return Ok(Err(source.place(&refusal))),
    };
    writer.take(&mut out, source.path())?;
    Ok(Ok((summary, writer)))
}

/// Where migrated events go: a log writer, a collection, a store, or nowhere (`--dry-run`).
pub trait Sink {
    /// Takes the events out of `events`, leaving it empty; `path` names the source in errors.
    fn take(&mut self, events: &mut Vec<Event>, path: &Path) -> Result<(), Error>;

    /// The sink drops every event it takes: the driver then gives it none but the tail, and
    /// lets the migrator share events instead of copying them ([`Migrator::push_discarding`]).
    fn discards(&self) -> bool {
        false
    }
}

impl<W: Write> Sink for LogWriter<W> {
    fn take(&mut self, events: &mut Vec<Event>, path: &Path) -> Result<(), Error> {
        self.append_batch(events).map_err(|source| Error::Write {
            path: path.to_owned(),
            source,
        })?;
        events.clear();
        Ok(())
    }
}

/// The target header and events, in memory.
struct Collected {
    header: SessionHeader,
    events: Vec<Event>,
}

impl Sink for Collected {
    fn take(&mut self, events: &mut Vec<Event>, _path: &Path) -> Result<(), Error> {
        self.events.append(events);
        Ok(())
    }
}

/// Keeps nothing; the migrator has admitted and proved the events already.
pub struct Discard;

impl Sink for Discard {
    fn take(&mut self, events: &mut Vec<Event>, _path: &Path) -> Result<(), Error> {
        events.clear();
        Ok(())
    }

    fn discards(&self) -> bool {
        true
    }
}

/// The physical line of the event being migrated, for placing a refusal: the seq a refusal
/// names is the current event's (whose line the reader reports) or, from a one-event-per-row
/// log, any earlier one (line = seq + 2).
#[derive(Debug, Default)]
pub(crate) struct LineMemo {
    current: Option<(u64, u64)>,
}

impl LineMemo {
    pub(crate) fn note(&mut self, seq: u64, line: u64) {
        self.current = Some((seq, line));
    }

    pub(crate) fn place(&self, refusal: &Refusal, version: FormatVersion) -> Refused {
        let line = match (refusal.seq, self.current) {
            (Some(seq), Some((current, line))) if seq == current => Some(line),
            (Some(seq), _) if version >= FormatVersion::V2 => Some(seq + 2),
            _ => None,
        };
        Refused {
            line,
            reason: refusal.to_string(),
        }
    }
}

fn target_path(
    source: &Path,
    relative: &Path,
    options: &MigrateOptions,
    compressed: bool,
) -> PathBuf {
    let name = options.target().file_name(compressed);
    match &options.out_dir {
        Some(dir) => match relative.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(parent) => dir.join(parent).join(name),
            None => dir.join(name),
        },
        None => source.with_file_name(name),
    }
}

/// Publishes the successor (see [`crate::publish`]): `write` streams it into the temporary
/// file and ends with the writer. A refusal publishes nothing.
fn publish(
    target: &Path,
    write: impl FnOnce(&Path) -> Result<Result<(Summary, LogWriter<BufWriter<File>>), Refused>, Error>,
) -> Result<Result<Summary, Refused>, Error> {
    if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    publish_new(target, "tmp", |temp| {
        Ok(match write(temp)? {
            Ok((summary, writer)) => {
                let out = writer.into_inner().map_err(|e| Error::io(temp, e))?;
                out.into_inner()
                    .map_err(|e| Error::io(temp, e.into_error()))?;
                Ok(summary)
            }
            Err(refused) => Err(refused),
        })
    })
}

fn open_successor(
    temp: &Path,
    header: &SessionHeader,
    options: WriterOptions,
) -> Result<LogWriter<BufWriter<File>>, Error> {
    let file = File::options()
        .write(true)
        .create_new(true)
        .open(temp)
        .map_err(|e| Error::io(temp, e))?;
    LogWriter::with_options(BufWriter::with_capacity(1 << 20, file), header, options)
        .map_err(|e| Error::io(temp, e))
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
    let snapshot = reader.snapshot();
    let open = |header: &SessionHeader| {
        Ok(Collected {
            header: header.clone(),
            events: Vec::new(),
        })
    };
    match stream(reader, path, true, &mut |_| {}, open)? {
        Ok((_, collected)) => Ok((collected.header, collected.events, snapshot)),
        Err(refused) => Err(refused.into_error(path)),
    }
}

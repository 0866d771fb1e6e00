//! `import` and `export`: moving sessions between dsh log files and the store.
//!
//! Export publishes safely: it writes a temporary file beside the target, syncs it, links it
//! into place without overwriting, and syncs the directory, so a crash never leaves a partial
//! file under the target name.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use sessionlog_format::record::{self, ChainHash};
use sessionlog_format::{
    Compression, Event, LogWriter, ReadOptions, Recovery, SessionHeader, SnapshotMode,
    WriterOptions,
};

use crate::embedded::{AppendAck, Head, StoreError};
use crate::error::Error;
use crate::files::{open_log, read_ahead};
use crate::log_store::LogStore;
use crate::publish::publish_file;

/// Events per append batch during import.
pub const IMPORT_BATCH_EVENTS: usize = 1024;
/// Events read per chunk during export (one zstd frame each).
const EXPORT_CHUNK_EVENTS: u64 = 4096;

/// What an import did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportReport {
    pub file: PathBuf,
    pub session: String,
    pub events: u64,
    pub head_chain: ChainHash,
}

/// Imports one log file as a new session, calling `on_commit` after each durable batch.
///
/// The session is created with the importing flag and is no normal session until its last
/// event is appended (docs/format.md, "Session record"): an import cut short leaves a session
/// that every reader refuses and `verify` reports, never a shorter one that looks whole. A
/// rerun of the same import finds it, checks that the log starts with the events it holds
/// (their chain must reach the session's head), appends the rest and finishes it; a session
/// that holds anything else is refused, unchanged.
pub fn import_file(
    store: &dyn LogStore,
    path: &Path,
    snapshot: SnapshotMode,
    on_commit: &mut dyn FnMut(&AppendAck),
) -> Result<ImportReport, Error> {
    let options = ReadOptions {
        recovery: Recovery::Strict,
        snapshot,
    };
    let mut reader = open_log(path, options)?;
    if !crate::types::STORED_VERSIONS.contains(&reader.version()) {
        // Older versions are migrated in memory to V3 first; the source is not touched. A
        // V3 or V4 log is kept in its own version.
        drop(reader);
        return import_migrated(store, path, snapshot, on_commit);
    }
    // A first pass reads the whole log under every rule, writing nothing, so that a log
    // refused anywhere (a relationship rule may only fail at its end) creates no session.
    // It only checks, so its rows are skimmed (`LogReader::skimming`) and decoded on two
    // threads (`LogReader::parallel`); the appending pass decodes them whole and stays
    // inline, the sealer taking the second core.
    let mut check = open_log(path, options)?.skimming().parallel();
    while let Some(event) = check.next_event() {
        event.map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })?;
    }
    drop(check);
    let mut writer = ImportWriter::begin(store, path, reader.header(), reader.snapshot())?;
    while let Some(event) = reader.next_event() {
        let event = event.map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })?;
        writer.push(event, on_commit)?;
    }
    writer.finish(on_commit)
}

/// Imports an older log through the migration chain in two streaming passes: the first
/// converts, admits and proves it writing nothing, so that a refused log creates no session;
/// the second begins the import once the target header is known and appends each batch
/// the migrator releases. Memory stays bounded for any size of log.
fn import_migrated(
    store: &dyn LogStore,
    path: &Path,
    snapshot: SnapshotMode,
    on_commit: &mut dyn FnMut(&AppendAck),
) -> Result<ImportReport, Error> {
    let options = ReadOptions {
        recovery: Recovery::Strict,
        snapshot,
    };
    let discard = |_: &SessionHeader| Ok(crate::migrate::Discard);
    // The first pass only migrates and proves, so its rows are skimmed and read ahead; the
    // second one appends them whole, and the second core is then the sealer's
    // (`read_ahead`).
    let first = read_ahead(open_log(path, options)?.skimming(), path);
    let proved = crate::migrate::stream(first, path, true, &mut |_| {}, discard)?;
    let streamed = match proved {
        Ok(_) => {
            let reader = open_log(path, options)?;
            let snapshot = reader.snapshot();
            // The import begins once the migrator knows the target header.
            crate::migrate::stream(reader, path, false, &mut |_| {}, move |header| {
                Ok(StoreSink {
                    writer: ImportWriter::begin(store, path, header, snapshot)?,
                    on_commit,
                })
            })?
        }
        Err(refused) => Err(refused),
    };
    match streamed {
        Ok((_, sink)) => sink.writer.finish(sink.on_commit),
        Err(refused) => Err(refused.into_error(path)),
    }
}

/// One import's writer: on a resumed import it first checks the log's events against those
/// the session holds (chaining them from the log's genesis up to the session's head) and
/// skips them; then it appends the rest in batches of [`IMPORT_BATCH_EVENTS`] and finishes
/// the import. Nothing is appended before the held events have been matched.
pub(crate) struct ImportWriter<'a> {
    store: &'a dyn LogStore,
    session: String,
    /// The session's head when the import began: what a rerun must find first in the log.
    held: Head,
    /// The chain over the log's events read so far below `held.next_seq`.
    chain: ChainHash,
    /// Events of the log pushed so far.
    n_pushed: u64,
    batch: Vec<Event>,
    report: ImportReport,
    record: Vec<u8>,
}

impl<'a> ImportWriter<'a> {
    pub(crate) fn begin(
        store: &'a dyn LogStore,
        path: &Path,
        header: &SessionHeader,
        snapshot: bool,
    ) -> Result<ImportWriter<'a>, Error> {
        let held = store.begin_import(header, snapshot)?;
        let writer = ImportWriter {
            store,
            session: header.id.clone(),
            held,
            chain: record::genesis_chain(header),
            n_pushed: 0,
            batch: Vec::with_capacity(IMPORT_BATCH_EVENTS),
            report: ImportReport {
                file: path.to_owned(),
                session: header.id.clone(),
                events: held.next_seq,
                head_chain: held.chain,
            },
            record: Vec::new(),
        };
        if held.next_seq == 0 {
            // The genesis covers the header, which `begin_import` compared.
            writer.check_held()?;
        }
        Ok(writer)
    }

    fn push(&mut self, event: Event, on_commit: &mut dyn FnMut(&AppendAck)) -> Result<(), Error> {
        if self.n_pushed < self.held.next_seq {
            self.record.clear();
            self.chain = record::encode_event(&event, &self.chain, &mut self.record)
                .map_err(|e| self.mismatch(format!("seq {}: {e}", event.seq)))?;
            self.n_pushed += 1;
            if self.n_pushed == self.held.next_seq {
                self.check_held()?;
            }
            return Ok(());
        }
        self.n_pushed += 1;
        self.batch.push(event);
        if self.batch.len() >= IMPORT_BATCH_EVENTS {
            self.flush(on_commit)?;
        }
        Ok(())
    }

    /// Whether the log's events so far are the session's: their chain is its head's.
    fn check_held(&self) -> Result<(), Error> {
        debug_assert_eq!(self.n_pushed, self.held.next_seq);
        if self.chain == self.held.chain {
            return Ok(());
        }
        Err(self.mismatch(format!(
            "the {} events it holds are not the log's first {}",
            self.held.next_seq, self.held.next_seq
        )))
    }

    fn flush(&mut self, on_commit: &mut dyn FnMut(&AppendAck)) -> Result<(), Error> {
        if self.batch.is_empty() {
            return Ok(());
        }
        assert!(
            self.n_pushed > self.held.next_seq,
            "held events are never appended"
        );
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(IMPORT_BATCH_EVENTS));
        let ack = self
            .store
            .append_import(&self.session, self.report.events, batch)?;
        self.report.events = ack.next_seq;
        self.report.head_chain = ack.head_chain;
        on_commit(&ack);
        Ok(())
    }

    /// Appends what is left and finishes the import; a log shorter than what the session
    /// holds is not its log.
    pub(crate) fn finish(
        mut self,
        on_commit: &mut dyn FnMut(&AppendAck),
    ) -> Result<ImportReport, Error> {
        if self.n_pushed < self.held.next_seq {
            return Err(self.mismatch(format!(
                "it holds {} events and the log only {}",
                self.held.next_seq, self.n_pushed
            )));
        }
        self.flush(on_commit)?;
        debug_assert_eq!(self.report.events, self.n_pushed);
        self.store.finish_import(&self.session)?;
        Ok(self.report)
    }

    fn mismatch(&self, reason: String) -> Error {
        Error::Store(StoreError::ImportMismatch {
            session: self.session.clone(),
            reason,
        })
    }
}

/// Feeds migrated batches to an import.
pub(crate) struct StoreSink<'a, 'c> {
    pub(crate) writer: ImportWriter<'a>,
    pub(crate) on_commit: &'c mut dyn FnMut(&AppendAck),
}

impl crate::migrate::Sink for StoreSink<'_, '_> {
    fn take(&mut self, events: &mut Vec<Event>, _path: &Path) -> Result<(), Error> {
        for event in events.drain(..) {
            self.writer.push(event, self.on_commit)?;
        }
        Ok(())
    }
}

/// Where an export goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExportTarget {
    /// A new file; `.zstd` selects compression. An existing file is never overwritten.
    File(PathBuf),
    Stdout,
}

/// Exports a session as a canonical log of its own version (V3 or V4); returns the number of
/// events written.
pub fn export_session(
    store: &dyn LogStore,
    session: &str,
    target: &ExportTarget,
) -> Result<u64, Error> {
    match target {
        ExportTarget::Stdout => {
            let stdout = io::stdout().lock();
            let out = BufWriter::with_capacity(1 << 16, stdout);
            write_session(
                store,
                session,
                None,
                out,
                Compression::None,
                Path::new("<stdout>"),
            )
            .map(|(n, _)| n)
        }
        ExportTarget::File(path) => export_to_file(store, session, None, path),
    }
}

/// Exports the events of a session below `end_seq` (all of them when it is past the head) to
/// a new file, as `export` does: what `salvage` writes of a session damaged at `end_seq`.
pub fn export_prefix(
    store: &dyn LogStore,
    session: &str,
    end_seq: u64,
    path: &Path,
) -> Result<u64, Error> {
    export_to_file(store, session, Some(end_seq), path)
}

fn export_to_file(
    store: &dyn LogStore,
    session: &str,
    end_seq: Option<u64>,
    path: &Path,
) -> Result<u64, Error> {
    if path.exists() {
        return Err(Error::Refused(format!(
            "{}: exists; export never overwrites",
            path.display()
        )));
    }
    // dsh refuses a generation file whose name and header disagree (dsh-v4.md 7), so export
    // never writes one.
    let named = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(crate::walk::named_generation);
    if let Some(named) = named {
        let version = store.session_info(session)?.version().number();
        if named != version {
            return Err(Error::Refused(format!(
                "{}: the name identifies v{named} and the session is v{version}; dsh refuses a \
                 generation file whose name and header disagree (name it session.v{version}.jsonl)",
                path.display()
            )));
        }
    }
    let compression = if path.extension().is_some_and(|e| e == "zstd") {
        Compression::Zstd
    } else {
        Compression::None
    };
    publish_file(path, "tmp", |temp| {
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(temp)
            .map_err(|e| Error::io(temp, e))?;
        let (n_events, _file) = write_session(
            store,
            session,
            end_seq,
            BufWriter::new(file),
            compression,
            temp,
        )?;
        Ok(n_events)
    })
}

fn write_session<W: IntoInnerWriter>(
    store: &dyn LogStore,
    session: &str,
    end_seq: Option<u64>,
    out: W,
    compression: Compression,
    path: &Path,
) -> Result<(u64, W::Inner), Error> {
    let info = store.session_info(session)?;
    let (header, snapshot) = (info.header, info.snapshot);
    let head = store.head(session)?;
    let options = WriterOptions {
        compression,
        snapshot,
    };
    let mut writer =
        LogWriter::with_options(out, &header, options).map_err(|e| Error::io(path, e))?;
    let end_seq = end_seq.map_or(head.next_seq, |end| end.min(head.next_seq));
    let mut from_seq = 0;
    while from_seq < end_seq {
        let to_seq = (from_seq + EXPORT_CHUNK_EVENTS).min(end_seq);
        let events = store.read_range(session, from_seq, to_seq)?;
        writer
            .append_batch(&events)
            .map_err(|source| Error::Write {
                path: path.to_owned(),
                source,
            })?;
        from_seq = to_seq;
    }
    let out = writer.into_inner().map_err(|e| Error::io(path, e))?;
    let inner = out.into_inner_writer().map_err(|e| Error::io(path, e))?;
    Ok((end_seq, inner))
}

/// A buffered writer that can hand back what it wraps after flushing.
pub trait IntoInnerWriter: Write {
    type Inner;
    fn into_inner_writer(self) -> io::Result<Self::Inner>;
}

impl<W: Write> IntoInnerWriter for BufWriter<W> {
    type Inner = W;
    fn into_inner_writer(self) -> io::Result<W> {
        self.into_inner().map_err(|e| e.into_error())
    }
}

//! `import` and `export`: moving sessions between dsh log files and the store.
//!
//! Export publishes safely: it writes a temporary file beside the target, syncs it, links it
//! into place without overwriting, and syncs the directory, so a crash never leaves a partial
//! file under the target name.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use sessionlog_format::record::ChainHash;
use sessionlog_format::{
    Compression, Event, FormatVersion, LogWriter, ReadOptions, Recovery, SessionHeader,
    SnapshotMode, WriterOptions,
};

use crate::error::Error;
use crate::files::open_log;
use crate::publish::publish_file;
use crate::store::{AppendAck, Store};

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

/// Imports one V3 log file as a new session, calling `on_commit` after each durable batch.
pub fn import_file(
    store: &Store,
    path: &Path,
    snapshot: SnapshotMode,
    on_commit: &mut dyn FnMut(&AppendAck),
) -> Result<ImportReport, Error> {
    let options = ReadOptions {
        recovery: Recovery::Strict,
        snapshot,
    };
    let mut reader = open_log(path, options)?;
    if reader.version() != FormatVersion::V3 {
        // Older versions are migrated in memory first; the source is not touched.
        drop(reader);
        return import_migrated(store, path, snapshot, on_commit);
    }
    // A first pass reads the whole log under every rule, writing nothing, so that a log
    // refused anywhere (a relationship rule may only fail at its end) creates no session.
    let mut check = open_log(path, options)?;
    while let Some(event) = check.next_event() {
        event.map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })?;
    }
    drop(check);
    let session = reader.header().id.clone();
    let mut created = false;
    let mut batch: Vec<Event> = Vec::with_capacity(IMPORT_BATCH_EVENTS);
    let mut report = ImportReport {
        file: path.to_owned(),
        session: session.clone(),
        events: 0,
        head_chain: [0; 32],
    };
    loop {
        let next = reader.next_event();
        let done = next.is_none();
        if let Some(event) = next {
            batch.push(event.map_err(|source| Error::Read {
                path: path.to_owned(),
                source,
            })?);
        }
        if !created && (done || !batch.is_empty()) {
            store.create_session_with(reader.header(), reader.snapshot())?;
            created = true;
            report.head_chain = store.head(&session)?.chain;
        }
        if batch.len() >= IMPORT_BATCH_EVENTS || (done && !batch.is_empty()) {
            let n_events = batch.len() as u64;
            let ack = store.append(&session, report.events, std::mem::take(&mut batch))?;
            report.events += n_events;
            report.head_chain = ack.head_chain;
            on_commit(&ack);
        }
        if done {
            return Ok(report);
        }
    }
}

/// Imports an older log through the migration chain in two streaming passes: the first
/// converts, admits and proves it writing nothing, so that a refused log creates no session;
/// the second creates the session once the target header is known and appends each batch
/// the migrator releases. Memory stays bounded for any size of log.
fn import_migrated(
    store: &Store,
    path: &Path,
    snapshot: SnapshotMode,
    on_commit: &mut dyn FnMut(&AppendAck),
) -> Result<ImportReport, Error> {
    let options = ReadOptions {
        recovery: Recovery::Strict,
        snapshot,
    };
    let discard = |_: &SessionHeader| Ok(crate::migrate::Discard);
    let proved =
        crate::migrate::stream(open_log(path, options)?, path, true, &mut |_| {}, discard)?;
    let streamed = match proved {
        Ok(_) => {
            let reader = open_log(path, options)?;
            let snapshot = reader.snapshot();
            let open = open_session(store, path, snapshot, on_commit);
            crate::migrate::stream(reader, path, false, &mut |_| {}, open)?
        }
        Err(refused) => Err(refused),
    };
    match streamed {
        Ok((_, sink)) => Ok(sink.report),
        Err(refused) => {
            let line = refused.line.map(|l| format!(":{l}")).unwrap_or_default();
            Err(Error::Refused(format!(
                "{}{line}: {}",
                path.display(),
                refused.reason
            )))
        }
    }
}

/// Creates the session once the target header is known, and the sink that fills it.
fn open_session<'a>(
    store: &'a Store,
    path: &'a Path,
    snapshot: bool,
    on_commit: &'a mut dyn FnMut(&AppendAck),
) -> impl FnOnce(&SessionHeader) -> Result<StoreSink<'a>, Error> + 'a {
    move |header| {
        store.create_session_with(header, snapshot)?;
        Ok(StoreSink {
            store,
            report: ImportReport {
                file: path.to_owned(),
                session: header.id.clone(),
                events: 0,
                head_chain: store.head(&header.id)?.chain,
            },
            on_commit,
        })
    }
}

/// Appends migrated batches to a session of the store.
struct StoreSink<'a> {
    store: &'a Store,
    report: ImportReport,
    on_commit: &'a mut dyn FnMut(&AppendAck),
}

impl crate::migrate::Sink for StoreSink<'_> {
    fn take(&mut self, events: &mut Vec<Event>, _path: &Path) -> Result<(), Error> {
        if events.is_empty() {
            return Ok(());
        }
        let n_events = events.len() as u64;
        let batch = std::mem::take(events);
        let ack = self
            .store
            .append(&self.report.session, self.report.events, batch)?;
        self.report.events += n_events;
        self.report.head_chain = ack.head_chain;
        (self.on_commit)(&ack);
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

/// Exports a session as a canonical V3 log; returns the number of events written.
pub fn export_session(store: &Store, session: &str, target: &ExportTarget) -> Result<u64, Error> {
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
    store: &Store,
    session: &str,
    end_seq: u64,
    path: &Path,
) -> Result<u64, Error> {
    export_to_file(store, session, Some(end_seq), path)
}

fn export_to_file(
    store: &Store,
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
    store: &Store,
    session: &str,
    end_seq: Option<u64>,
    out: W,
    compression: Compression,
    path: &Path,
) -> Result<(u64, W::Inner), Error> {
    let header = store.header(session)?;
    let snapshot = store.is_snapshot(session)?;
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

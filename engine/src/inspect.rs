//! `messages` and `surface`: what the model saw at a seq, from a file or from the store.

use std::path::Path;
use std::sync::Arc;

use sessionlog_format::fold::SessionFold;
use sessionlog_format::rules::RuleContext;
use sessionlog_format::{
    Event, FormatVersion, LogReader, Message, ReadOptions, Recovery, SessionHeader, SnapshotMode,
};

use crate::error::Error;
use crate::files::{open_log, LogInput};
use crate::migrate::Sink;
use crate::store::{Store, StoreError};

/// Where a session comes from.
#[derive(Debug, Clone, Copy)]
pub enum SessionSource<'a> {
    File {
        path: &'a Path,
        snapshot: SnapshotMode,
    },
    Store {
        store: &'a Store,
        session: &'a str,
    },
}

/// A session folded up to a seq.
pub struct FoldedSession {
    pub session: String,
    /// The last seq folded; `None` for a session with no events.
    pub at_seq: Option<u64>,
    pub fold: SessionFold,
}

impl FoldedSession {
    /// The derived messages (spec 7.3).
    pub fn messages(&self) -> Vec<&Message> {
        self.fold.messages()
    }

    /// The live surface nodes in surface order.
    pub fn nodes(&self) -> Vec<u64> {
        self.fold.admission().surface().seqs()
    }
}

/// Folds a session through `at_seq` inclusive (its head when `None`).
pub fn fold_session(
    source: SessionSource<'_>,
    at_seq: Option<u64>,
) -> Result<FoldedSession, Error> {
    match source {
        SessionSource::Store { store, session } => {
            // The head comes from the warm fold; an earlier seq is folded from the start.
            let fold = match at_seq {
                None => store.with_fold(session, SessionFold::clone)?,
                Some(at) => store.fold_at(session, Some(at))?,
            };
            let next_seq = fold.admission().next_seq();
            Ok(FoldedSession {
                session: session.to_owned(),
                at_seq: next_seq.checked_sub(1),
                fold,
            })
        }
        SessionSource::File { path, snapshot } => fold_file(path, snapshot, at_seq),
    }
}

fn fold_file(
    path: &Path,
    snapshot: SnapshotMode,
    at_seq: Option<u64>,
) -> Result<FoldedSession, Error> {
    let mut reader = open_log(
        path,
        ReadOptions {
            recovery: Recovery::Strict,
            snapshot,
        },
    )?;
    if reader.version() != FormatVersion::V3 {
        // Older versions stream through the migration chain into the fold, in memory (nothing
        // is written): memory stays one batch plus the live surface, as for V3.
        return fold_migrated(path, reader, at_seq);
    }
    // A V3 file streams: memory stays one row plus the live surface.
    let session = reader.header().id.clone();
    let read_error = |source| Error::Read {
        path: path.to_owned(),
        source,
    };
    // The first row settles whether the file is a normalized recording.
    let first = reader.next_event().transpose().map_err(read_error)?;
    let snapshot = reader.snapshot();
    let rest = std::iter::from_fn(|| reader.next_event()).map(|next| next.map_err(read_error));
    fold_events(
        path,
        session,
        snapshot,
        first.map(Ok).into_iter().chain(rest),
        at_seq,
    )
}

/// The fold a migration streams into: events past `at_seq` are not admitted.
struct FoldSink {
    fold: SessionFold,
    at_seq: Option<u64>,
}

impl Sink for FoldSink {
    fn take(&mut self, events: &mut Vec<Event>, path: &Path) -> Result<(), Error> {
        for event in events.drain(..) {
            if self.at_seq.is_some_and(|at| event.seq > at) {
                continue;
            }
            let seq = event.seq;
            self.fold
                .admit(Arc::new(event))
                .map_err(|v| Error::Refused(format!("{}: seq {seq}: {v}", path.display())))?;
        }
        Ok(())
    }
}

fn fold_migrated(
    path: &Path,
    reader: LogReader<LogInput>,
    at_seq: Option<u64>,
) -> Result<FoldedSession, Error> {
    let snapshot = reader.snapshot();
    let mut session = String::new();
    let open = |header: &SessionHeader| {
        session = header.id.clone();
        let ctx = RuleContext {
            version: FormatVersion::V3,
            snapshot,
        };
        Ok(FoldSink {
            fold: SessionFold::new(ctx),
            at_seq,
        })
    };
    let sink = match crate::migrate::stream(reader, path, true, &mut |_| {}, open)? {
        Ok((_, sink)) => sink,
        Err(refused) => return Err(refused.into_error(path)),
    };
    finish_fold(session, sink.fold, at_seq)
}

fn fold_events(
    path: &Path,
    session: String,
    snapshot: bool,
    events: impl Iterator<Item = Result<Event, Error>>,
    at_seq: Option<u64>,
) -> Result<FoldedSession, Error> {
    let ctx = RuleContext {
        version: FormatVersion::V3,
        snapshot,
    };
    let mut fold = SessionFold::new(ctx);
    for event in events {
        let event = event?;
        if at_seq.is_some_and(|at| event.seq > at) {
            break;
        }
        let seq = event.seq;
        fold.admit(Arc::new(event))
            .map_err(|v| Error::Refused(format!("{}: seq {seq}: {v}", path.display())))?;
    }
    finish_fold(session, fold, at_seq)
}

fn finish_fold(
    session: String,
    fold: SessionFold,
    at_seq: Option<u64>,
) -> Result<FoldedSession, Error> {
    let next_seq = fold.admission().next_seq();
    if let Some(at) = at_seq {
        if next_seq <= at {
            return Err(Error::Store(StoreError::SeqOutOfRange {
                session,
                seq: at,
                next_seq,
            }));
        }
    }
    Ok(FoldedSession {
        session,
        at_seq: next_seq.checked_sub(1),
        fold,
    })
}

//! `messages` and `surface`: what the model saw at a seq, from a file or from the store.

use std::path::Path;
use std::sync::Arc;

use sessionlog_format::fold::SessionFold;
use sessionlog_format::rules::RuleContext;
use sessionlog_format::{FormatVersion, Message, ReadOptions, Recovery, SnapshotMode};

use crate::error::Error;
use crate::files::open_log;
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
        return Err(Error::Refused(format!(
            "{}: derived messages need a V3 log, and this one is {} (older logs need the \
             migration chain)",
            path.display(),
            reader.version()
        )));
    }
    let session = reader.header().id.clone();
    let mut fold: Option<SessionFold> = None;
    while let Some(next) = reader.next_event() {
        let event = next.map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })?;
        if at_seq.is_some_and(|at| event.seq > at) {
            break;
        }
        let ctx = RuleContext {
            version: FormatVersion::V3,
            snapshot: reader.snapshot(),
        };
        let fold = fold.get_or_insert_with(|| SessionFold::new(ctx));
        // The reader has admitted the event already; the fold repeats the check for its state.
        fold.admit(Arc::new(event))
            .map_err(|v| Error::Refused(format!("{}: {v}", path.display())))?;
    }
    let ctx = RuleContext {
        version: FormatVersion::V3,
        snapshot: reader.snapshot(),
    };
    let fold = fold.unwrap_or_else(|| SessionFold::new(ctx));
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

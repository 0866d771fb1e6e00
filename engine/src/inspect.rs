//! `messages` and `surface`: what the model saw at a seq, from a file or from the store.

use std::sync::Arc;

use sessionlog_format::fold::SessionFold;
use sessionlog_format::relations::Identity;
use sessionlog_format::{Event, Message, Violation};

use crate::error::Error;
use crate::replay::{Flow, Projection, SessionSource};
use crate::store::StoreError;

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
            // The backend's own fold: the redb store's warm fold at the head, its checkpoint
            // below it.
            let fold = store.fold_at(session, at_seq)?;
            let next_seq = fold.admission().next_seq();
            Ok(FoldedSession {
                session: session.to_owned(),
                at_seq: next_seq.checked_sub(1),
                fold,
            })
        }
        SessionSource::File { .. } => replay_fold(source, at_seq),
    }
}

/// Folds a session from its first event through `at_seq` inclusive (its head when `None`)
/// under every rule, through the replay driver: what `check --db` runs on a stored session,
/// whatever fold the backend keeps.
pub fn replay_fold(source: SessionSource<'_>, at_seq: Option<u64>) -> Result<FoldedSession, Error> {
    let mut session = String::new();
    let folded = source.replay(|opening| {
        session = opening.session().to_owned();
        let mut fold = SessionFold::new(opening.rules());
        fold.set_identity(Identity::of(opening.header));
        FoldTo { fold, at_seq }
    })?;
    finish_fold(session, folded.fold, at_seq)
}

/// The messages fold, through `at_seq` inclusive when set.
struct FoldTo {
    fold: SessionFold,
    at_seq: Option<u64>,
}

impl Projection for FoldTo {
    type Error = Violation;

    fn push(&mut self, event: Arc<Event>) -> Result<Flow, Violation> {
        let seq = event.seq;
        if self.at_seq.is_some_and(|at| seq > at) {
            return Ok(Flow::Stop);
        }
        self.fold.admit(event)?;
        Ok(if self.at_seq == Some(seq) {
            Flow::Stop
        } else {
            Flow::Continue
        })
    }
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
/// The check of one stored session (`check --db DB SESSION`): every record read back
/// (checksums, the chain) and every rule applied to a fold from scratch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionCheck {
    pub session: String,
    pub ok: bool,
    /// Events checked.
    pub events: u64,
    /// The first fault, `SESSION@SEQ: reason` where it has a seq.
    pub error: Option<String>,
}

/// Checks a stored session under every rule, from its first event, on any backend.
pub fn check_session(store: &dyn crate::log_store::LogStore, session: &str) -> SessionCheck {
    let source = crate::replay::SessionSource::Store { store, session };
    match replay_fold(source, None) {
        Ok(folded) => SessionCheck {
            session: session.to_owned(),
            ok: true,
            events: folded.fold.admission().next_seq(),
            error: None,
        },
        Err(error) => SessionCheck {
            session: session.to_owned(),
            ok: false,
            events: 0,
            error: Some(error.to_string()),
        },
    }
}

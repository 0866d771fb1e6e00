//! The one replay driver: a session's events, in seq order, into a [`Projection`].
//!
//! Every consumer of a whole session (the request analyzer, the token meter, the transcript,
//! the prompt history, the messages fold) is a projection; [`SessionSource::replay`] feeds it
//! from a log file of any version or from a stored session of any backend. Memory stays one
//! read (a row, a migrator batch or [`READ_EVENTS_MAX`] stored events) plus what the
//! projection keeps: a V3 file streams row by row, an older one streams through the migration
//! chain in memory (nothing is written), a stored session is read a range at a time.

use std::path::Path;
use std::sync::Arc;

pub use sessionlog_format::projection::{Flow, Opening, Projection, Replay};
use sessionlog_format::{Event, FormatVersion, ReadOptions, Recovery, SessionHeader, SnapshotMode};

use crate::error::Error;
use crate::files::open_log;
use crate::log_store::{LogStore, READ_EVENTS_MAX};
use crate::migrate::Sink;

/// Where a session comes from.
#[derive(Clone, Copy)]
pub enum SessionSource<'a> {
    /// A dsh log file of any version (older ones migrated in memory).
    File {
        path: &'a Path,
        snapshot: SnapshotMode,
    },
    /// A session of a store, on any backend.
    Store {
        store: &'a dyn LogStore,
        session: &'a str,
    },
}

impl std::fmt::Debug for SessionSource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionSource::File { path, snapshot } => f
                .debug_struct("File")
                .field("path", path)
                .field("snapshot", snapshot)
                .finish(),
            SessionSource::Store { store, session } => f
                .debug_struct("Store")
                .field("backend", &store.backend_name())
                .field("session", session)
                .finish(),
        }
    }
}

impl SessionSource<'_> {
    /// Replays the session into the projection `open` makes once the header is known, and
    /// returns it. A refused event is [`Error::Refused`] naming where: `FILE:LINE: seq N:
    /// reason` for a V3 file, `FILE: seq N: reason` for a migrated one, `SESSION@N: reason`
    /// for a stored session.
    pub fn replay<P: Projection>(self, open: impl FnOnce(&Opening<'_>) -> P) -> Result<P, Error> {
        match self {
            SessionSource::File { path, snapshot } => replay_file(path, snapshot, open),
            SessionSource::Store { store, session } => replay_stored(store, session, open),
        }
    }
}

impl Replay for SessionSource<'_> {
    type Error = Error;

    fn replay<P: Projection>(self, open: impl FnOnce(&Opening<'_>) -> P) -> Result<P, Error> {
        SessionSource::replay(self, open)
    }
}

fn replay_stored<P: Projection>(
    store: &dyn LogStore,
    session: &str,
    open: impl FnOnce(&Opening<'_>) -> P,
) -> Result<P, Error> {
    let info = store.session_info(session)?;
    let next_seq = store.head(session)?.next_seq;
    let mut projection = open(&Opening {
        header: &info.header,
        snapshot: info.snapshot,
    });
    let mut from_seq = 0;
    while from_seq < next_seq {
        let to_seq = next_seq.min(from_seq.saturating_add(READ_EVENTS_MAX));
        let events = store.read_range(session, from_seq, to_seq)?;
        if events.is_empty() {
            break;
        }
        for event in events {
            let seq = event.seq;
            let flow = projection
                .push(Arc::new(event))
                .map_err(|e| Error::Refused(format!("{session}@{seq}: {e}")))?;
            if flow == Flow::Stop {
                return Ok(projection);
            }
        }
        from_seq = to_seq;
    }
    Ok(projection)
}

fn replay_file<P: Projection>(
    path: &Path,
    snapshot: SnapshotMode,
    open: impl FnOnce(&Opening<'_>) -> P,
) -> Result<P, Error> {
    let mut reader = open_log(
        path,
        ReadOptions {
            recovery: Recovery::Strict,
            snapshot,
        },
    )?;
    // V3 and V4 are read natively; older versions migrate in memory.
    if reader.version() < FormatVersion::V3 {
        let snapshot = reader.snapshot();
        let start = |header: &SessionHeader| {
            Ok(Fed {
                projection: open(&Opening { header, snapshot }),
                stopped: false,
            })
        };
        return match crate::migrate::stream(reader, path, true, &mut |_| {}, start)? {
            Ok((_, fed)) => Ok(fed.projection),
            Err(refused) => Err(refused.into_error(path)),
        };
    }
    let read_error = |source| Error::Read {
        path: path.to_owned(),
        source,
    };
    // The first row settles whether the file is a normalized recording.
    let mut next = reader.next_event().transpose().map_err(read_error)?;
    let header = reader.header().clone();
    let mut projection = open(&Opening {
        header: &header,
        snapshot: reader.snapshot(),
    });
    while let Some(event) = next {
        let (seq, line) = (event.seq, reader.line());
        let flow = projection
            .push(Arc::new(event))
            .map_err(|e| Error::Refused(format!("{}:{line}: seq {seq}: {e}", path.display())))?;
        if flow == Flow::Stop {
            break;
        }
        next = reader.next_event().transpose().map_err(read_error)?;
    }
    Ok(projection)
}

/// A projection fed by the migrator: events after a `Stop` are not pushed (the migration
/// still runs to the end, so that a log refused later is refused).
struct Fed<P> {
    projection: P,
    stopped: bool,
}

impl<P: Projection> Sink for Fed<P> {
    fn take(&mut self, events: &mut Vec<Event>, path: &Path) -> Result<(), Error> {
        for event in events.drain(..) {
            if self.stopped {
                continue;
            }
            let seq = event.seq;
            let flow = self
                .projection
                .push(Arc::new(event))
                .map_err(|e| Error::Refused(format!("{}: seq {seq}: {e}", path.display())))?;
            self.stopped = flow == Flow::Stop;
        }
        Ok(())
    }
}

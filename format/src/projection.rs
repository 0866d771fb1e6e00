//! `Projection`: a consumer of a session's events in seq order, and what it is told first.
//!
//! Every whole-session view (the request analyzer, the token meter, the transcript, the prompt
//! history, the messages fold, audit's counters) is a projection. The one driver that feeds
//! them, from a log file of any version or a stored session of any backend, lives in the store
//! crate (`sessionlog_store::replay`) and implements [`Replay`]; the traits are here so that
//! the projections, and the functions that run them over any source, depend on nothing but
//! the format.

use std::sync::Arc;

use crate::{Event, SessionHeader};

/// What a projection is told before the first event.
#[derive(Debug, Clone, Copy)]
pub struct Opening<'a> {
    /// The session's V3 header (a migrated file's target header).
    pub header: &'a SessionHeader,
    /// The session is a normalized dsh recording (spec 18).
    pub snapshot: bool,
}

impl Opening<'_> {
    /// The session id.
    pub fn session(&self) -> &str {
        &self.header.id
    }

    /// The rules the session's events are folded under: its header's version (V3, or V4 read
    /// natively) and the snapshot mode.
    pub fn rules(&self) -> crate::rules::RuleContext {
        let version = self
            .header
            .version
            .and_then(crate::FormatVersion::from_number);
        crate::rules::RuleContext {
            version: version.unwrap_or(crate::FormatVersion::V3),
            snapshot: self.snapshot,
        }
    }
}

/// Whether the replay goes on after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// The projection has what it needs: no later event is pushed.
    Stop,
}

/// A consumer of a session's events in seq order.
pub trait Projection {
    /// Why the projection refuses an event (a rule the log breaks).
    type Error: std::fmt::Display;

    /// Takes the next event.
    fn push(&mut self, event: Arc<Event>) -> Result<Flow, Self::Error>;
}

/// A source that can replay a session into a projection: a log file of any version or a
/// stored session (the store crate's `SessionSource`), or anything else that yields a
/// session's events in seq order.
pub trait Replay {
    /// Why the replay failed: the source could not be read, or the projection refused an
    /// event (the error then names where).
    type Error;

    /// Replays the session into the projection `open` makes once the header is known, and
    /// returns it.
    fn replay<P: Projection>(self, open: impl FnOnce(&Opening<'_>) -> P) -> Result<P, Self::Error>;
}

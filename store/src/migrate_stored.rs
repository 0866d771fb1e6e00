//! `migrate --db`: a stored session's successor in a newer format version, proven
//! request-equivalent and written as a new session of the same store, never in place.
//!
//! Two streaming passes over the stored events, as `import` runs an older log: the first
//! converts, admits and proves them writing nothing, so that a refused session creates
//! nothing; the second writes the successor through the import protocol, so that a run cut
//! short leaves an interrupted import (which a rerun completes), never a shorter session that
//! looks whole. The source session is only read.
//!
//! The successor has its own id (its header's `id`; by default `SESSION.v4`). The migration
//! runs under the source's header, whose id its delivery markers name, and the target id is
//! set on the header the migrator writes: generation-3 markers are inert records in V4.

use std::path::{Path, PathBuf};

use sessionlog_format::{Event, FormatVersion, SessionHeader};
use sessionlog_migrations::Refusal;

use crate::error::Error;
use crate::log_store::{LogStore, READ_EVENTS_MAX};
use crate::migrate::{migrate_events, Discard, MigrateOptions, MigrationSource, Outcome, Refused};
use crate::transfer::{ImportWriter, StoreSink};
use crate::types::StoreError;

/// One stored session's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionOutcome {
    pub session: String,
    /// The successor's id; `None` when the session is current in its own version.
    pub target: Option<String>,
    pub from: u64,
    pub to: u64,
    pub outcome: Outcome,
}

/// The id a successor gets by default: `SESSION.v<to>`.
pub fn default_target_id(session: &str, to: FormatVersion) -> String {
    format!("{session}.v{}", to.number())
}

/// Migrates the stored `session` to `options.target()` as the new session `target_id`,
/// calling `progress` with the number of source events read every few thousand events.
///
/// A session already at or past the target is `Current` (there is no downgrade edge); so is
/// one whose successor `target_id` exists, which is never rewritten. A successor left by an
/// interrupted run is resumed. `--dry-run` converts and proves, writing nothing. The outer
/// error is one of the store (an unknown session, a refused target id, a storage failure).
pub fn migrate_stored(
    store: &dyn LogStore,
    session: &str,
    target_id: &str,
    options: &MigrateOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<SessionOutcome, Error> {
    let info = store.session_info(session)?;
    let to = options.target();
    let mut result = SessionOutcome {
        session: session.to_owned(),
        target: None,
        from: info.version().number(),
        to: to.number(),
        outcome: Outcome::Current,
    };
    if info.version() >= to {
        return Ok(result);
    }
    crate::types::check_session_id(target_id)?;
    result.target = Some(target_id.to_owned());
    match store.session_info(target_id) {
        Ok(_) => return Ok(result),
        Err(StoreError::UnknownSession { .. } | StoreError::ImportInterrupted { .. }) => {}
        Err(other) => return Err(other.into()),
    }
    let prove = !options.skip_proof;
    let label = PathBuf::from(session);
    let proved = migrate_events(
        &mut StoredSource::new(store, session, &label),
        info.header.clone(),
        info.snapshot,
        to,
        prove,
        progress,
        |_| Ok(Discard),
    )?;
    let summary = match proved {
        Ok((summary, _)) => summary,
        Err(refused) => return Ok(refused_outcome(result, refused)),
    };
    if options.dry_run {
        result.outcome = Outcome::Converted {
            requests_proved: summary.requests_proved,
        };
        return Ok(result);
    }
    let mut on_commit = |_: &crate::types::AppendAck| {};
    let written = migrate_events(
        &mut StoredSource::new(store, session, &label),
        info.header.clone(),
        info.snapshot,
        to,
        false,
        &mut |_| {},
        |header: &SessionHeader| {
            let mut header = header.clone();
            header.id = target_id.to_owned();
            Ok(StoreSink {
                writer: ImportWriter::begin(store, &label, &header, info.snapshot)?,
                on_commit: &mut on_commit,
            })
        },
    )?;
    match written {
        Ok((_, sink)) => {
            sink.writer.finish(sink.on_commit)?;
            result.outcome = Outcome::Converted {
                requests_proved: summary.requests_proved,
            };
            Ok(result)
        }
        // The first pass accepted the same events: a refusal now is the store's.
        Err(refused) => Ok(refused_outcome(result, refused)),
    }
}

fn refused_outcome(mut result: SessionOutcome, refused: Refused) -> SessionOutcome {
    result.outcome = Outcome::Refused {
        line: None,
        reason: refused.reason,
    };
    result
}

/// A stored session's events in seq order, read a page at a time.
struct StoredSource<'a> {
    store: &'a dyn LogStore,
    session: &'a str,
    label: &'a Path,
    next_seq: u64,
    end_seq: Option<u64>,
    page: std::vec::IntoIter<Event>,
}

impl<'a> StoredSource<'a> {
    fn new(store: &'a dyn LogStore, session: &'a str, label: &'a Path) -> StoredSource<'a> {
        StoredSource {
            store,
            session,
            label,
            next_seq: 0,
            end_seq: None,
            page: Vec::new().into_iter(),
        }
    }

    fn next_page(&mut self) -> Result<(), Error> {
        let end_seq = match self.end_seq {
            Some(end) => end,
            None => *self.end_seq.insert(self.store.head(self.session)?.next_seq),
        };
        if self.next_seq >= end_seq {
            return Ok(());
        }
        let to_seq = (self.next_seq + READ_EVENTS_MAX).min(end_seq);
        let events = self.store.read_range(self.session, self.next_seq, to_seq)?;
        self.next_seq = to_seq;
        self.page = events.into_iter();
        Ok(())
    }
}

impl MigrationSource for StoredSource<'_> {
    fn next_event(&mut self) -> Option<Result<Event, Error>> {
        if let Some(event) = self.page.next() {
            return Some(Ok(event));
        }
        if let Err(error) = self.next_page() {
            return Some(Err(error));
        }
        self.page.next().map(Ok)
    }

    fn place(&self, refusal: &Refusal) -> Refused {
        let at = refusal
            .seq
            .map(|seq| format!("{}@{seq}: ", self.session))
            .unwrap_or_else(|| format!("{}: ", self.session));
        Refused {
            line: None,
            reason: format!("{at}{refusal}"),
        }
    }

    fn path(&self) -> &Path {
        self.label
    }
}

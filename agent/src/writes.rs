//! The one way the agent stack appends: each batch in the session's own format version.
//!
//! The loop, the prompt driver, compaction and the repair build their events in the V3 form.
//! On a V4 session every batch passes through the V3 -> V4 edge's per-event rewrite
//! (`sessionlog_migrations::event_as_v4`: producer-owned sources, tool results as tool
//! messages, `plugin:` content tags), so the V4 form has one definition, the edge's, and the
//! store admits the result under the native V4 rules like any other writer's.

use sessionlog_engine::log_store::LogStore;
use sessionlog_engine::store::{AppendAck, StoreError};
use sessionlog_format::error::{Rule, Violation};
use sessionlog_format::{Event, FormatVersion};

/// Appends `events` at `expected_next_seq` to `session`, each in the session's version.
pub fn append_events(
    store: &dyn LogStore,
    session: &str,
    expected_next_seq: u64,
    events: Vec<Event>,
) -> Result<AppendAck, StoreError> {
    let version = store.session_info(session)?.version();
    let events = in_version(session, version, events)?;
    store.append_events(session, expected_next_seq, events)
}

/// `events` (built in the V3 form) in `version`: unchanged for V3, rewritten for V4. A
/// rewrite the edge refuses is a refusal of the batch, naming the event's seq.
pub fn in_version(
    session: &str,
    version: FormatVersion,
    events: Vec<Event>,
) -> Result<Vec<Event>, StoreError> {
    if version < FormatVersion::V4 {
        return Ok(events);
    }
    events
        .into_iter()
        .map(|event| {
            let seq = event.seq;
            sessionlog_migrations::event_as_v4(event).map_err(|refusal| StoreError::Rejected {
                session: session.to_owned(),
                seq,
                violation: Violation::new(Rule::Payload, refusal.to_string()),
            })
        })
        .collect()
}

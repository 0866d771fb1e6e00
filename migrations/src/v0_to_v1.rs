//! The V0 -> V1 edge (issue #5): bounded normalisations of released V0 logs.
//!
//! V1 has V0's physical layout; the edge changes the header's version and a closed list of
//! historical payload forms, nothing else (spec 2). [`V0ToV1`] is a streaming stage that
//! emits exactly one V1 event per V0 event at the same seq, so no reference needs
//! remapping. Per event, in dsh's order:
//!
//! 1. the closed inventory: a type outside the released V0 vocabulary is refused, even when
//!    `ignorable` (spec 9, "Unknown events");
//! 2. `compact/*` is renamed `compaction/*`;
//! 3. the retired forms are refused: `request/header-delta`, `mode/set` and the `fallback`
//!    reason of `request/header`;
//! 4. the normalisers: `turn/start.trigger` dropped, retired `turn/end` reasons converted,
//!    `request/header.header.messagePrefix` dropped, `steering/message` made a
//!    `user/message`, deterministic `llm/retry.retryId` and compaction ids, and the current
//!    wrappers with deterministic ids for pre-identity messages;
//! 5. the payload check: the exact top-level members of the released dispositions and the
//!    nested facts the normalisers rely on;
//! 6. the delivery marker of the current generation must name this session.
//!
//! An event no normaliser touched is passed through as it came; `assistant/chunk` events
//! (the bulk of a V0 log) skip the JSON round trip entirely. The stage retains only the
//! identities the normalisers need: one message id per message event, one retry id per
//! retry chain, and the open compaction group.

mod audit;
mod json;
mod normalize;

use serde_json::Value;
use sessionlog_format::row::DataRef;
use sessionlog_format::{Event, EventData, EventType, FormatVersion, SessionHeader, SurfaceOp};

use crate::catalog::{Finish, Stage, StageOptions};
use crate::error::Refusal;
use json::quote;
use normalize::{Draft, Identities};

/// Why the V0 -> V1 edge refused a source. Texts follow dsh's wording where its code words
/// the refusal; `session` fields hold the raw id, quoted as JSON in the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum V0Reason {
    #[error("expected format v0 header")]
    HeaderVersion,
    #[error("format v0 header is not a released v0 header: {detail}")]
    InvalidHeader { detail: String },
    #[error("format v0 source events must be dense")]
    NotDense { expected: u64, found: u64 },
    #[error(
        "format v0 contains unknown historical event type {} at seq {seq}; migration refuses \
         unknown historical events even when ignorable",
        quote(.kind)
    )]
    UnknownEvent { kind: String, seq: u64 },
    #[error("session {} contains unsupported legacy {kind} event at seq {seq}", quote(.session))]
    RetiredEvent {
        session: String,
        kind: String,
        seq: u64,
    },
    #[error(
        "session {} contains unsupported request/header reason \"fallback\" at seq {seq}",
        quote(.session)
    )]
    FallbackReason { session: String, seq: u64 },
    #[error("session {} contains malformed pre-react-loop {kind} at seq {seq}", quote(.session))]
    MalformedLegacy {
        session: String,
        kind: &'static str,
        seq: u64,
    },
    #[error(
        "session {} contains malformed request/header messagePrefix at seq {seq}",
        quote(.session)
    )]
    MalformedMessagePrefix { session: String, seq: u64 },
    #[error("tool/result {seq} replacement cites a message without identity")]
    ReplacementWithoutIdentity { seq: u64 },
    /// A payload fact, worded `<type> <seq> <subject> ...` as dsh's validators word it.
    #[error("{detail}")]
    Payload { detail: String },
    #[error("current-generation delivery marker names the wrong Session")]
    DeliveryWrongSession { session_id: String },
    #[error("Session inheritedEventCount exceeds its event count")]
    CutBeyondEnd { cut: u64, n_events: u64 },
    #[error("the stage received an event after finish")]
    Finished,
    #[error("the stage received an event or its end before the header")]
    HeaderMissing,
}

/// The id of a pre-identity message (flat user, assistant, steering or tool result) at `seq`.
pub fn legacy_message_id(session_id: &str, seq: u64) -> String {
    format!("legacy-message:{session_id}:{seq}")
}

/// The id of a retry chain first seen without an id at `seq`.
pub fn legacy_retry_id(session_id: &str, seq: u64) -> String {
    format!("legacy-retry:{session_id}:{seq}")
}

/// The id of a compaction group whose `compaction/start` at `seq` had none.
pub fn legacy_compaction_id(session_id: &str, seq: u64) -> String {
    format!("legacy-compaction:{session_id}:{seq}")
}

/// The V0 -> V1 stage for one log.
#[derive(Debug, Clone)]
pub struct V0ToV1 {
    options: StageOptions,
    /// Set by [`Stage::header`].
    session: Option<SessionFacts>,
    finished: bool,
    /// The seq the next source event must carry; also the number of events seen.
    next_seq: u64,
    identities: Identities,
}

#[derive(Debug, Clone)]
struct SessionFacts {
    id: String,
    has_parent: bool,
    /// `seedLength`, or 0 for an unseeded log.
    cut: u64,
}

impl V0ToV1 {
    pub fn new(options: StageOptions) -> V0ToV1 {
        V0ToV1 {
            options,
            session: None,
            finished: false,
            next_seq: 0,
            identities: Identities::default(),
        }
    }

    fn push_event(&mut self, event: Event) -> Result<Event, V0Reason> {
        let Some(session) = &self.session else {
            return Err(V0Reason::HeaderMissing);
        };
        if event.seq != self.next_seq {
            return Err(V0Reason::NotDense {
                expected: self.next_seq,
                found: event.seq,
            });
        }
        let seq = event.seq;
        if !audit::is_historical(event.kind.as_str()) {
            let kind = event.kind.as_str().to_owned();
            return Err(V0Reason::UnknownEvent { kind, seq });
        }
        self.next_seq += 1;
        // No normaliser reads or changes a chunk, and dsh does not check its payload.
        if event.kind == EventType::AssistantChunk {
            return Ok(event);
        }
        normalize::check_retired_type(&session.id, event.kind.as_str(), seq)?;
        let mut draft = draft(&event)?;
        normalize::check_fallback(&session.id, &draft)?;
        self.identities.normalize(&session.id, &mut draft)?;
        audit::check_payload(&draft, event.ignorable)?;
        self.identities.record_message(&draft);
        check_delivery(session, &draft)?;
        if !draft.changed {
            return Ok(event);
        }
        rebuild(event, draft)
    }
}

impl Stage for V0ToV1 {
    fn from(&self) -> FormatVersion {
        FormatVersion::V0
    }

    fn to(&self) -> FormatVersion {
        FormatVersion::V1
    }

    /// Checked as a released V0 header, then carried over with version 1; `seedLength` stays
    /// (V1 keeps V0's header shape).
    fn header(&mut self, mut header: SessionHeader) -> Result<SessionHeader, Refusal> {
        if header.version != Some(0) {
            return Err(Refusal::v0_to_v1(None, V0Reason::HeaderVersion));
        }
        header
            .check(FormatVersion::V0, self.options.snapshot)
            .map_err(|detail| Refusal::v0_to_v1(None, V0Reason::InvalidHeader { detail }))?;
        self.session = Some(SessionFacts {
            id: header.id.clone(),
            has_parent: header.parent_session.is_some(),
            cut: header.seed_length.unwrap_or(0),
        });
        header.version = Some(1);
        Ok(header)
    }

    fn push(&mut self, event: Event, out: &mut Vec<Event>) -> Result<(), Refusal> {
        let seq = event.seq;
        if self.finished {
            return Err(Refusal::v0_to_v1(Some(seq), V0Reason::Finished));
        }
        let target = self
            .push_event(event)
            .map_err(|reason| Refusal::v0_to_v1(Some(seq), reason))?;
        assert_eq!(target.seq, seq, "the edge keeps every seq");
        out.push(target);
        Ok(())
    }

    /// The target's cut is the source's `seedLength`: no event is added or dropped.
    fn finish(&mut self, _out: &mut Vec<Event>) -> Result<Finish, Refusal> {
        if self.finished {
            return Err(Refusal::v0_to_v1(None, V0Reason::Finished));
        }
        self.finished = true;
        let Some(session) = &self.session else {
            return Err(Refusal::v0_to_v1(None, V0Reason::HeaderMissing));
        };
        if session.cut > self.next_seq {
            let reason = V0Reason::CutBeyondEnd {
                cut: session.cut,
                n_events: self.next_seq,
            };
            return Err(Refusal::v0_to_v1(None, reason));
        }
        Ok(Finish { cut: session.cut })
    }
}

/// The event's type name and payload as JSON, renamed when the name is retired.
fn draft(event: &Event) -> Result<Draft, V0Reason> {
    let source_name = event.kind.as_str();
    let kind = normalize::current_name(source_name).unwrap_or(source_name);
    let data = match &event.data {
        EventData::Other(value) => value.clone(),
        data => serde_json::to_value(DataRef(data)).map_err(|error| V0Reason::Payload {
            detail: format!("{kind} {} data {error}", event.seq),
        })?,
    };
    let Value::Object(data) = data else {
        return Err(json::payload(format!(
            "{kind} {} data must be a JSON object",
            event.seq
        )));
    };
    let replace_start = match event.surface_op {
        Some(SurfaceOp::Replace { start_seq, .. }) => Some(start_seq),
        _ => None,
    };
    Ok(Draft {
        seq: event.seq,
        kind: kind.to_owned(),
        changed: kind != source_name,
        data,
        replace_start,
    })
}

/// dsh's check of a V0 delivery marker: one of this generation names this session, unless
/// it was inherited from the parent.
fn check_delivery(session: &SessionFacts, draft: &Draft) -> Result<(), V0Reason> {
    if draft.kind != "session-log-deepseek/delivery-accepted" {
        return Ok(());
    }
    let inherited = session.has_parent && draft.seq < session.cut;
    let named = draft.data.get("sessionId").and_then(Value::as_str);
    if inherited || named == Some(session.id.as_str()) {
        return Ok(());
    }
    Err(V0Reason::DeliveryWrongSession {
        session_id: named.unwrap_or("").to_owned(),
    })
}

/// The V1 event: the source envelope with the normalised type and payload.
fn rebuild(event: Event, draft: Draft) -> Result<Event, V0Reason> {
    let kind = EventType::parse(&draft.kind);
    let seq = draft.seq;
    let data = typed(&kind, Value::Object(draft.data)).map_err(|error| V0Reason::Payload {
        detail: format!("{kind} {seq} data {error}"),
    })?;
    Ok(Event {
        kind,
        data,
        ..event
    })
}

/// Decodes a payload into the typed form `format` holds for `kind`.
fn typed(kind: &EventType, value: Value) -> Result<EventData, serde_json::Error> {
    use serde_json::from_value as decode;
    use EventType as T;
    Ok(match kind {
        T::TurnStart => EventData::TurnStart(Box::new(decode(value)?)),
        T::TurnEnd => EventData::TurnEnd(Box::new(decode(value)?)),
        T::StepStart => EventData::StepStart(Box::new(decode(value)?)),
        T::StepEnd => EventData::StepEnd(Box::new(decode(value)?)),
        T::UserMessage => EventData::UserMessage(Box::new(decode(value)?)),
        T::AssistantMessage => EventData::AssistantMessage(Box::new(decode(value)?)),
        T::AssistantChunk => EventData::AssistantChunk(Box::new(decode(value)?)),
        T::ToolCall => EventData::ToolCall(Box::new(decode(value)?)),
        T::ToolResult => EventData::ToolResult(Box::new(decode(value)?)),
        T::RequestHeader => EventData::RequestHeader(Box::new(decode(value)?)),
        T::RequestContext => EventData::RequestContext(Box::new(decode(value)?)),
        T::SessionEndSeed => EventData::SessionEndSeed(Box::new(decode(value)?)),
        T::CompactionStart => EventData::CompactionStart(Box::new(decode(value)?)),
        T::CompactionSummary => EventData::CompactionSummary(Box::new(decode(value)?)),
        T::CompactionPrune => EventData::CompactionPrune(Box::new(decode(value)?)),
        T::CompactionEnd => EventData::CompactionEnd(Box::new(decode(value)?)),
        // No other V0 inventory type has a typed payload in `format`.
        _ => EventData::Other(value),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the deterministic ids are dsh's: a prefix, the session id and the source seq.
    // Method: each id for one session and seq, including a placeholder session id.
    #[test]
    fn legacy_ids() {
        assert_eq!(legacy_message_id("s", 3), "legacy-message:s:3");
        assert_eq!(legacy_retry_id("s", 0), "legacy-retry:s:0");
        assert_eq!(
            legacy_compaction_id("{{sessionId}}", 12),
            "legacy-compaction:{{sessionId}}:12"
        );
    }

    // Goal: the refusal texts quote the session id and the type as JSON, as dsh does.
    // Method: render an unknown type and a retired type with characters that need escapes.
    #[test]
    fn refusal_texts_quote_as_json() {
        let unknown = V0Reason::UnknownEvent {
            kind: "plugin/x".to_owned(),
            seq: 4,
        };
        assert_eq!(
            unknown.to_string(),
            "format v0 contains unknown historical event type \"plugin/x\" at seq 4; migration \
             refuses unknown historical events even when ignorable"
        );
        let retired = V0Reason::RetiredEvent {
            session: "a\"b".to_owned(),
            kind: "mode/set".to_owned(),
            seq: 0,
        };
        assert_eq!(
            retired.to_string(),
            "session \"a\\\"b\" contains unsupported legacy mode/set event at seq 0"
        );
    }
}

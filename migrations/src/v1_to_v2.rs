//! The V1 -> V2 edge (issue #5): chunk folding into embedded streams and dense remapping.
//!
//! [`V1ToV2`] is a streaming stage. Top-level `assistant/chunk` events are grouped into
//! attempts (one `(turn, step)`, ended by a `finish` chunk, a claiming message, or a
//! `turn/end`, `step/end`, `llm/retry` or `llm/retry-started`). A successful
//! `assistant/message` cites its complete attempt in `sourceEventSeqs`; the attempt's packed
//! stream moves into `data.stream` and the citation is dropped. An attempt no message claims
//! becomes one `assistant/attempt` at the position of its last chunk. Every other event keeps
//! its source order; output seqs are dense, and every declared reference is remapped (see
//! `remap`). A reference to a consumed chunk is refused, never redirected.
//!
//! The header trades `seedLength` for `isSeeded`; the cut is marked in the events by
//! `session/end-seed {inherited: true}`, and a cut inside an attempt is refused. Two legacy
//! shapes are repaired (see `legacy`): a goal message carrying its mutation, and a turn
//! left open by the next-turn restart.
//!
//! Memory: the unsettled attempt (its packed stream and the events held behind it) and one
//! u64 per source event for the seq map.
//!
//! [`unpack_stream`] is the inverse of the packing: it gives back every chunk with its time.

mod attempt;
mod legacy;
mod pack;
mod remap;

use serde_json::Value;
use sessionlog_format::payload::{AssistantAttemptData, EndSeedData};
use sessionlog_format::{Event, EventData, EventType, FormatVersion, SessionHeader};

use crate::catalog::{Finish, Stage, StageOptions};
use crate::error::Refusal;
use crate::v2_to_v3::Migrated;
use attempt::Attempt;
use legacy::TurnTracker;
use remap::SeqMap;

pub use pack::{unpack_stream, UnpackError};
pub use remap::Target;

/// Why the V1 -> V2 edge refused a source. Where dsh's edge words a refusal, the text is
/// dsh's; the others are ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum V1Reason {
    #[error("format v1 source events must be dense: expected seq {expected}, found {found}")]
    NotDense { expected: u64, found: u64 },
    #[error("format v1 source header is not a released v1 header: {detail}")]
    InvalidHeader { detail: String },
    /// `kind` is the type as a JSON string, quotes included.
    #[error("format v1 contains unknown event type {kind} at seq {seq}")]
    UnknownEvent { kind: String, seq: u64 },
    #[error("assistant/chunk {seq} has unexpected member {member}")]
    ChunkMember { seq: u64, member: &'static str },
    #[error("turn/start {turn} does not close the prior turn")]
    PriorTurnOpen { turn: u64 },
    #[error("current-generation delivery marker names the wrong Session")]
    DeliveryWrongSession { session_id: String },
    #[error("assistant/message {seq} does not cite its complete v1 chunk attempt")]
    UncitedAttempt { seq: u64 },
    #[error("assistant/message {seq} chunk references are not one complete ordered attempt")]
    IncompleteAttempt { seq: u64 },
    #[error("inherited Session cut {cut} splits one Assistant attempt")]
    CutSplitsAttempt { cut: u64 },
    /// `label` names the owner and the field, as `command/done 7 sourceEventSeq`.
    #[error("{label} targets consumed assistant/chunk {target}")]
    ConsumedChunk { label: String, target: u64 },
    #[error("{label} targets seq {target}, which has no earlier mapping")]
    UnmappedReference { label: String, target: u64 },
    #[error("format v1 {kind} payload {detail}")]
    Payload { kind: String, detail: String },
    #[error("the stage received an event after finish")]
    Finished,
}

/// Migrates a whole V1 log through [`V1ToV2`]. No proof runs here (`requests_proved` is 0);
/// the output is not admitted either.
pub fn migrate_v1_to_v2(
    header: SessionHeader,
    events: impl IntoIterator<Item = Event>,
    options: StageOptions,
) -> Result<Migrated, Refusal> {
    let mut stage = V1ToV2::new(options);
    let header = stage.header(header)?;
    let mut out = Vec::new();
    for event in events {
        stage.push(event, &mut out)?;
    }
    let finish = stage.finish(&mut out)?;
    Ok(Migrated {
        header,
        events: out,
        requests_proved: 0,
        cut: finish.cut,
    })
}

/// The V1 -> V2 stage for one log.
#[derive(Debug, Clone)]
pub struct V1ToV2 {
    options: StageOptions,
    /// Set by [`Stage::header`].
    session: Option<SessionFacts>,
    /// Set by `finish` and by any refusal: a refused stage takes no more events.
    finished: bool,
    map: SeqMap,
    target_seq: u64,
    pending: Option<Attempt>,
    turns: TurnTracker,
    /// The time of the last source event (the header's `createdAt` before any): the time of a
    /// cut marker appended at the end.
    last_time: i64,
    /// The target seq of the inherited marker, once placed; `Some(0)` for an unseeded log.
    target_cut: Option<u64>,
}

#[derive(Debug, Clone)]
struct SessionFacts {
    id: String,
    seeded: bool,
    has_parent: bool,
    /// The source's `seedLength`; 0 for an unseeded log.
    source_cut: u64,
}

impl V1ToV2 {
    pub fn new(options: StageOptions) -> V1ToV2 {
        V1ToV2 {
            options,
            session: None,
            finished: false,
            map: SeqMap::default(),
            target_seq: 0,
            pending: None,
            turns: TurnTracker::default(),
            last_time: 0,
            target_cut: None,
        }
    }

    /// Where source seq `seq` went, as far as the events pushed so far tell.
    pub fn target_of(&self, seq: u64) -> Target {
        self.map.get(seq)
    }

    fn session(&self) -> &SessionFacts {
        self.session
            .as_ref()
            .expect("Stage::header runs before any event")
    }

    fn push_event(&mut self, event: Event, out: &mut Vec<Event>) -> Result<(), Refusal> {
        let seq = event.seq;
        let refuse = |reason: V1Reason| Refusal::v1_to_v2(Some(seq), reason);
        let expected = self.map.n_events();
        if seq != expected {
            return Err(refuse(V1Reason::NotDense {
                expected,
                found: seq,
            }));
        }
        audit(&event).map_err(refuse)?;
        let restart = self.turns.check_turn_start(&event).map_err(refuse)?;
        self.check_delivery(&event).map_err(refuse)?;
        self.turns.observe(&event);
        self.last_time = event.time;
        self.map.push_pending();
        if let Some(turn) = restart {
            self.settle(out)?;
            self.emit_generated(seq, legacy::interrupted_turn_end(turn, event.time), out);
        }
        match event.kind {
            EventType::AssistantChunk => self.push_chunk(event, out),
            EventType::AssistantMessage => self.push_message(event, out),
            EventType::TurnEnd
            | EventType::StepEnd
            | EventType::LlmRetry
            | EventType::LlmRetryStarted => {
                self.settle(out)?;
                self.emit_source(event, out)
            }
            _ => match &mut self.pending {
                Some(attempt) => {
                    attempt.held.push(event);
                    Ok(())
                }
                None => self.emit_source(event, out),
            },
        }
    }

    /// dsh's own-generation check: a V1 delivery marker outside the inherited prefix of a
    /// child must name this session.
    fn check_delivery(&self, event: &Event) -> Result<(), V1Reason> {
        let EventData::Other(data) = &event.data else {
            return Ok(());
        };
        if event.kind != EventType::DeliveryAccepted {
            return Ok(());
        }
        let session = self.session();
        let inherited = session.has_parent && event.seq < session.source_cut;
        let current = data.get("sessionFormatVersion").and_then(Value::as_u64) == Some(1);
        let named = data.get("sessionId").and_then(Value::as_str);
        if current && !inherited && named != Some(session.id.as_str()) {
            let session_id = named.unwrap_or("").to_owned();
            return Err(V1Reason::DeliveryWrongSession { session_id });
        }
        Ok(())
    }

    fn push_chunk(&mut self, event: Event, out: &mut Vec<Event>) -> Result<(), Refusal> {
        let seq = event.seq;
        let EventData::AssistantChunk(data) = event.data else {
            let reason = not_typed(&event.kind);
            return Err(Refusal::v1_to_v2(Some(seq), reason));
        };
        match self.pending.take() {
            Some(mut attempt) if attempt.continues_with(data.turn, data.step) => {
                for held in std::mem::take(&mut attempt.held) {
                    self.emit_source(held, out)?;
                }
                self.pending = Some(attempt);
            }
            Some(attempt) => self.settle_attempt(attempt, out)?,
            None => {}
        }
        let cut = self.session().source_cut;
        let attempt = self
            .pending
            .get_or_insert_with(|| Attempt::new(data.turn, data.step, seq));
        if (attempt.first_seq() < cut) != (seq < cut) {
            let reason = V1Reason::CutSplitsAttempt { cut };
            return Err(Refusal::v1_to_v2(Some(seq), reason));
        }
        attempt.push(seq, event.time, data.chunk);
        self.map.consume(seq);
        Ok(())
    }

    fn push_message(&mut self, mut event: Event, out: &mut Vec<Event>) -> Result<(), Refusal> {
        let seq = event.seq;
        let refuse = |reason: V1Reason| Refusal::v1_to_v2(Some(seq), reason);
        let Some((turn, step)) = event.data.turn_step() else {
            return Err(refuse(not_typed(&event.kind)));
        };
        let sources = event.source_event_seqs.take();
        let cites = sources.as_ref().is_some_and(|seqs| !seqs.is_empty());
        let pending = self.pending.take();
        let stream = match (pending, sources) {
            (Some(attempt), _) if !attempt.is_step(turn, step) => {
                // dsh settles the other step's attempt and keeps the message with an empty
                // stream; a message that also cites chunks would lose them, so it refuses.
                if cites {
                    return Err(refuse(V1Reason::IncompleteAttempt { seq }));
                }
                self.settle_attempt(attempt, out)?;
                Vec::new()
            }
            (Some(_), None) => return Err(refuse(V1Reason::UncitedAttempt { seq })),
            (None, None) => Vec::new(),
            (pending, Some(sources)) if sources.is_empty() => {
                if let Some(attempt) = pending {
                    self.settle_attempt(attempt, out)?;
                }
                Vec::new()
            }
            (None, Some(_)) => return Err(refuse(V1Reason::IncompleteAttempt { seq })),
            (Some(mut attempt), Some(sources)) => {
                if !attempt.is_cited_by(&sources) {
                    return Err(refuse(V1Reason::IncompleteAttempt { seq }));
                }
                let cut = self.session().source_cut;
                if (attempt.first_seq() < cut) != (seq < cut) {
                    return Err(refuse(V1Reason::CutSplitsAttempt { cut }));
                }
                for held in std::mem::take(&mut attempt.held) {
                    self.emit_source(held, out)?;
                }
                attempt.into_stream()
            }
        };
        if let EventData::AssistantMessage(data) = &mut event.data {
            data.stream = Some(stream);
        }
        self.emit_source(event, out)
    }

    /// Settles the pending attempt, if any, as unclaimed.
    fn settle(&mut self, out: &mut Vec<Event>) -> Result<(), Refusal> {
        match self.pending.take() {
            Some(attempt) => self.settle_attempt(attempt, out),
            None => Ok(()),
        }
    }

    /// Emits an unclaimed attempt at its last chunk's position, then the events held behind
    /// it.
    fn settle_attempt(
        &mut self,
        mut attempt: Attempt,
        out: &mut Vec<Event>,
    ) -> Result<(), Refusal> {
        let held = std::mem::take(&mut attempt.held);
        let (last_seq, last_time) = attempt.last_chunk();
        let (turn, step) = attempt.turn_step();
        let data = AssistantAttemptData {
            turn,
            step,
            stream: attempt.into_stream(),
            extra: Default::default(),
        };
        assert!(
            !data.stream.is_empty(),
            "an attempt holds at least one chunk"
        );
        let event = Event::new(0, last_time, EventData::AssistantAttempt(Box::new(data)));
        self.emit_generated(last_seq, event, out);
        for event in held {
            self.emit_source(event, out)?;
        }
        Ok(())
    }

    /// Emits a surviving source event at the next target seq, references remapped.
    fn emit_source(&mut self, mut event: Event, out: &mut Vec<Event>) -> Result<(), Refusal> {
        let seq = event.seq;
        if let Some(change) = legacy::split_goal_change(&mut event) {
            self.emit_generated(seq, change, out);
        }
        let session = self.session();
        let at_cut =
            session.seeded && seq == session.source_cut && event.kind == EventType::SessionEndSeed;
        if at_cut {
            let marker = EndSeedData {
                inherited: Some(true),
                extra: Default::default(),
            };
            event.data = EventData::SessionEndSeed(Box::new(marker));
        }
        self.place_cut(seq, event.time, at_cut, out);
        remap::remap(&mut event, &self.map)
            .map_err(|reason| Refusal::v1_to_v2(Some(seq), reason))?;
        self.map.emit(seq, self.target_seq);
        event.seq = self.target_seq;
        self.target_seq += 1;
        out.push(event);
        Ok(())
    }

    /// Emits an event the stage made, standing at source position `origin`.
    fn emit_generated(&mut self, origin: u64, mut event: Event, out: &mut Vec<Event>) {
        self.place_cut(origin, event.time, false, out);
        event.seq = self.target_seq;
        self.target_seq += 1;
        out.push(event);
    }

    /// Places the inherited marker before the first event at or after the source cut. A
    /// source `session/end-seed` exactly at the cut becomes the marker itself.
    fn place_cut(&mut self, origin: u64, time: i64, is_marker: bool, out: &mut Vec<Event>) {
        let session = self.session();
        if !session.seeded || self.target_cut.is_some() || origin < session.source_cut {
            return;
        }
        self.target_cut = Some(self.target_seq);
        if !is_marker {
            self.emit_marker(time, out);
        }
    }

    fn emit_marker(&mut self, time: i64, out: &mut Vec<Event>) {
        let marker = EndSeedData {
            inherited: Some(true),
            extra: Default::default(),
        };
        let event = Event::new(
            self.target_seq,
            time,
            EventData::SessionEndSeed(Box::new(marker)),
        );
        self.target_seq += 1;
        out.push(event);
    }

    fn finish_log(&mut self, out: &mut Vec<Event>) -> Result<Finish, Refusal> {
        self.settle(out)?;
        if self.session().seeded && self.target_cut.is_none() {
            self.target_cut = Some(self.target_seq);
            self.emit_marker(self.last_time, out);
        }
        Ok(Finish {
            cut: self.target_cut.unwrap_or(0),
        })
    }
}

impl Stage for V1ToV2 {
    fn from(&self) -> FormatVersion {
        FormatVersion::V1
    }

    fn to(&self) -> FormatVersion {
        FormatVersion::V2
    }

    /// Validated as released V1, then written as V2: `seedLength` becomes `isSeeded`.
    fn header(&mut self, mut header: SessionHeader) -> Result<SessionHeader, Refusal> {
        let invalid = |detail: String| Refusal::v1_to_v2(None, V1Reason::InvalidHeader { detail });
        if header.version != Some(1) {
            let found = header
                .version
                .map_or("absent".to_owned(), |v| v.to_string());
            return Err(invalid(format!("version is {found}, not 1")));
        }
        header
            .check(FormatVersion::V1, self.options.snapshot)
            .map_err(invalid)?;
        let created_at = i64::try_from(header.created_at)
            .map_err(|_| invalid("createdAt is out of range".to_owned()))?;
        let seeded = header.seed_length.is_some();
        self.session = Some(SessionFacts {
            id: header.id.clone(),
            seeded,
            has_parent: header.parent_session.is_some(),
            source_cut: header.seed_length.unwrap_or(0),
        });
        self.last_time = created_at;
        self.target_cut = if seeded { None } else { Some(0) };
        header.version = Some(2);
        header.seed_length = None;
        header.is_seeded = Some(seeded);
        Ok(header)
    }

    fn push(&mut self, event: Event, out: &mut Vec<Event>) -> Result<(), Refusal> {
        if self.finished {
            return Err(Refusal::v1_to_v2(Some(event.seq), V1Reason::Finished));
        }
        let result = self.push_event(event, out);
        self.finished = result.is_err();
        result
    }

    fn finish(&mut self, out: &mut Vec<Event>) -> Result<Finish, Refusal> {
        if self.finished {
            return Err(Refusal::v1_to_v2(None, V1Reason::Finished));
        }
        self.finished = true;
        self.finish_log(out)
    }
}

/// The checks on one source event that need no state: the closed V1 inventory, and the
/// members the edge would otherwise drop.
fn audit(event: &Event) -> Result<(), V1Reason> {
    if !is_v1_kind(&event.kind) {
        let kind = Value::from(event.kind.as_str()).to_string();
        return Err(V1Reason::UnknownEvent {
            kind,
            seq: event.seq,
        });
    }
    let payload = |detail: &str| V1Reason::Payload {
        kind: event.kind.as_str().to_owned(),
        detail: detail.to_owned(),
    };
    match &event.data {
        EventData::AssistantChunk(_) => {
            // The chunk envelope carries nothing a stream record could keep.
            if event.surface_op.is_some() {
                let member = "surfaceOp";
                return Err(V1Reason::ChunkMember {
                    seq: event.seq,
                    member,
                });
            }
            if event.source_event_seqs.is_some() {
                let member = "sourceEventSeqs";
                return Err(V1Reason::ChunkMember {
                    seq: event.seq,
                    member,
                });
            }
        }
        EventData::AssistantMessage(data) if data.stream.is_some() => {
            return Err(payload(
                "must not carry stream; a v1 message cites its chunks",
            ));
        }
        EventData::SessionEndSeed(data) if data.inherited.is_some() => {
            return Err(payload(
                "must not carry inherited; v1 states its cut in seedLength",
            ));
        }
        _ => {}
    }
    Ok(())
}

fn not_typed(kind: &EventType) -> V1Reason {
    V1Reason::Payload {
        kind: kind.as_str().to_owned(),
        detail: "is not a typed payload of its type".to_owned(),
    }
}

/// The released V1 inventory: dsh's frozen V0 dispositions, which V0 -> V1 keeps. Everything
/// else is refused even when ignorable, including the K fork's `fork/session-source` (our
/// V2 -> V3 edge refuses it too).
fn is_v1_kind(kind: &EventType) -> bool {
    use EventType as T;
    crate::inventory::is_shared_released(kind) || matches!(kind, T::AssistantChunk)
}

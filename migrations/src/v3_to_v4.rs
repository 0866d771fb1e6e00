//! The V3 -> V4 edge (dsh-v4.md 5), as dsh's `ReleasedV3ToV4Stage`: mostly a 1:1 rewrite.
//!
//! Per event, in dsh's order: density, the evidenced restart (an interrupted `turn/end` is
//! inserted before a `turn/start` that follows a next-turn inbox insert while the previous
//! turn is still open), the inherited marker and catalog collection, the delivery-marker
//! audit, unknown ignorable events renamed `plugin:<type>`, unknown required events refused,
//! references remapped after an insertion, then the payload rewrites of `rewrite.rs`: plugin
//! sources become producer kinds, `tool/result` wrappers become tool messages, unknown content
//! tags become `plugin:<tag>`. [`Stage::finish`] checks the cut, the catalog facts and the
//! foreign delivery marker, and appends a `subagent/catalog` fact for every child the caller
//! supplied that the parent's catalog lacks.
//!
//! The stage never reorders, drops or invents model-visible content; the migrator admits its
//! output under the native V4 rules and proves every request unchanged.

mod facts;
mod rewrite;
mod typed;

use std::sync::Arc;

use serde_json::{json, Value};
use sessionlog_format::payload::TurnEnd;
use sessionlog_format::{Event, EventData, EventType, FormatVersion, SessionHeader, SurfaceOp};

pub use facts::ChildFact;
pub use rewrite::producer_kind;

use crate::catalog::{Finish, Stage, StageOptions};
use crate::error::{Reason, Refusal};

/// dsh's frozen V3 vocabulary (`RELEASED_V3_EVENT_TYPES`, upstream scope): 58 names. An
/// ignorable event of another type is renamed `plugin:<type>`; a required one is refused.
pub const RELEASED_V3_EVENT_TYPES: [&str; 58] = [
    "agent-preset/selected",
    "agent/inbox/spliced",
    "approval/asked",
    "approval/decided",
    "approval/policy",
    "assistant/attempt",
    "assistant/message",
    "command/done",
    "command/run",
    "compaction/end",
    "compaction/prune",
    "compaction/start",
    "compaction/summary",
    "deliverables/presented",
    "feedback/message-delete",
    "feedback/message-put",
    "feedback/record",
    "goal/change",
    "hook/invoked",
    "hook/result",
    "image/offload",
    "llm/retry",
    "llm/retry-started",
    "model/selection",
    "permission/preset",
    "plan/mode",
    "request/context",
    "request/header",
    "sandbox/mode",
    "schedule/change",
    "session-log-deepseek/delivery-accepted",
    "session/end-seed",
    "session/title",
    "session/title-llm-request",
    "step/end",
    "step/start",
    "subagent/catalog",
    "subagent/descriptor",
    "subagent/model-selection-policy",
    "system/message",
    "team/member",
    "team/message/delivered",
    "team/message/queued",
    "team/task",
    "todo/write",
    "tool-workflow/agent-end",
    "tool-workflow/agent-start",
    "tool-workflow/run-end",
    "tool-workflow/run-start",
    "tool/call",
    "tool/ptc-dispatch",
    "tool/ptc-dispatch-start",
    "tool/result",
    "turn/end",
    "turn/start",
    "user/message",
    "web/deepseek-search-llm-request",
    "workspace/changes",
];

/// Why the V3 -> V4 edge refused, with dsh's texts (dsh-v4.md 5).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum V3Reason {
    #[error("format v3 source header is not a released v3 header: {0}")]
    InvalidHeader(String),
    #[error("V3 source events must be dense")]
    NotDense,
    #[error("unseeded format v3 Session contains an inherited end-seed marker")]
    InheritedMarkerUnseeded,
    #[error("{0}")]
    Delivery(&'static str),
    #[error("format v3 delivery marker claims target format v4")]
    DeliveryClaimsV4,
    #[error("format v3 contains unknown event type {kind:?} at seq {seq}")]
    UnknownEvent { kind: String, seq: u64 },
    #[error("{0}")]
    Reference(&'static str),
    #[error("{0}")]
    Slot(String),
    #[error("message source at seq {seq} requires a nonempty kind")]
    SourceKind { seq: u64 },
    #[error("plugin source at seq {seq} is not canonical: plugin requires a string")]
    PluginNotCanonical { seq: u64 },
    #[error(
        "format v3 tool/result at seq {seq} requires exactly one tool-result wrapper matching \
         its tool source"
    )]
    ToolResultWrapper { seq: u64 },
    #[error("format v3 tool/result at seq {seq} tool-result isError must be boolean")]
    WrapperIsError { seq: u64 },
    #[error("format v3 tool/result at seq {seq} tool-result content must be an array")]
    WrapperContent { seq: u64 },
    #[error("format v3 tool/result at seq {seq} contains a nested tool-result unsupported by this converter")]
    NestedToolResult { seq: u64 },
    #[error("{0}")]
    Content(String),
    #[error(
        "format v3 request/header at seq {seq}.header.tools[{idx}] contains deferLoading, which \
         is only defined in V4"
    )]
    DeferLoading { seq: u64, idx: usize },
    #[error("V3 inherited event count must be a non-negative safe integer")]
    CutUnknown,
    #[error("subagent/catalog requires a supported versioned catalog fact")]
    CatalogFact,
    #[error("duplicate catalog child {0}")]
    DuplicateChild(String),
    #[error("current-generation delivery marker names the wrong Session")]
    ForeignDelivery,
    #[error("{0}")]
    Child(String),
    #[error("the stage received an event after finish")]
    Finished,
}

/// The header facts the stage reads.
#[derive(Debug, Clone, Default)]
struct Session {
    id: String,
    seeded: bool,
    has_parent: bool,
    created_at: u64,
}

/// The V3 -> V4 stage of one log.
pub struct V3ToV4 {
    options: StageOptions,
    session: Session,
    /// Source seq -> target seq of every event so far.
    mapping: Vec<u64>,
    next_seq: u64,
    /// The target and source seqs of the last inherited marker; 0 for an unseeded source.
    cut: Option<(u64, u64)>,
    turn: Option<u64>,
    step_open: bool,
    /// The previous event inserted messages into the next turn.
    next_turn_spliced: bool,
    /// The time of the last source event (the header's creation time before any).
    time: i64,
    /// `subagent/catalog` payloads after the last inherited marker.
    catalogs: Vec<Value>,
    /// The source seq of a generation-3 delivery marker naming another session.
    foreign_delivery: Option<u64>,
    children: Vec<ChildFact>,
    finished: bool,
    /// Payload rewrites on the typed payload where they can be ([`typed`]); off only in the
    /// tests that compare both paths.
    typed: bool,
}

impl V3ToV4 {
    /// A stage for a log with no children (dsh's explicit empty child evidence).
    pub fn new(options: StageOptions) -> V3ToV4 {
        V3ToV4::with_children(options, Vec::new())
    }

    /// A stage with the child facts of the log's direct subagent children.
    pub fn with_children(options: StageOptions, children: Vec<ChildFact>) -> V3ToV4 {
        V3ToV4 {
            options,
            session: Session::default(),
            mapping: Vec::new(),
            next_seq: 0,
            cut: None,
            turn: None,
            step_open: false,
            next_turn_spliced: false,
            time: 0,
            catalogs: Vec::new(),
            foreign_delivery: None,
            children,
            finished: false,
            typed: true,
        }
    }

    fn refuse(seq: Option<u64>, reason: V3Reason) -> Refusal {
        Refusal {
            from: FormatVersion::V3,
            to: FormatVersion::V4,
            seq,
            reason: Reason::V3ToV4(reason),
        }
    }

    fn push_event(&mut self, event: Event, out: &mut Vec<Event>) -> Result<(), V3Reason> {
        let target_seq = self.note_source(&event, out)?;
        self.convert(event, target_seq, out)
    }

    /// [`Stage::push_shared`]: an event the edge leaves as it is (its seq and payload
    /// unchanged) passes on shared; any other is converted like [`Stage::push`] does.
    fn push_event_shared(
        &mut self,
        event: Arc<Event>,
        out: &mut Vec<Arc<Event>>,
    ) -> Result<(), V3Reason> {
        let mut owned = Vec::new();
        let target_seq = self.note_source(&event, &mut owned)?;
        out.extend(owned.drain(..).map(Arc::new));
        if self.typed
            && target_seq == event.seq
            && RELEASED_V3_EVENT_TYPES.contains(&event.kind.as_str())
            && typed::unchanged(&event.kind, &event.data)
        {
            self.mapping.push(target_seq);
            out.push(event);
            return Ok(());
        }
        self.convert(Arc::unwrap_or_clone(event), target_seq, &mut owned)?;
        out.extend(owned.into_iter().map(Arc::new));
        Ok(())
    }

    /// The per-event bookkeeping before the conversion, in dsh's order: density, the
    /// evidenced restart (its `turn/end` goes to `out`), the lifecycle, the inherited marker,
    /// the catalogs, the delivery audit. Returns the event's target seq.
    fn note_source(&mut self, event: &Event, out: &mut Vec<Event>) -> Result<u64, V3Reason> {
        if event.seq != self.mapping.len() as u64 {
            return Err(V3Reason::NotDense);
        }
        let restart = self.is_evidenced_restart(event);
        self.note_lifecycle(event);
        if let Some(turn) = restart {
            let data = TurnEnd {
                turn,
                reason: json!({"kind": "interrupted"}),
                extra: Default::default(),
            };
            out.push(Event::new(
                self.next_seq,
                event.time,
                EventData::TurnEnd(Box::new(data)),
            ));
            self.next_seq += 1;
        }
        let source_seq = event.seq;
        let target_seq = self.next_seq;
        self.next_seq += 1;
        self.time = event.time;
        match &event.data {
            EventData::SessionEndSeed(d) if d.inherited == Some(true) => {
                if !self.session.seeded {
                    return Err(V3Reason::InheritedMarkerUnseeded);
                }
                self.cut = Some((target_seq, source_seq));
                self.catalogs.clear();
            }
            EventData::Other(data) if event.kind == EventType::SubagentCatalog => {
                self.catalogs.push(data.clone());
            }
            _ => {}
        }
        if event.kind == EventType::DeliveryAccepted {
            self.audit_delivery(event)?;
        }
        Ok(target_seq)
    }

    /// Converts one event to its V4 form at `target_seq`: the rename of an unknown ignorable
    /// type, the refusal of an unknown required one, the reference remap and the payload
    /// rewrites.
    fn convert(
        &mut self,
        mut event: Event,
        target_seq: u64,
        out: &mut Vec<Event>,
    ) -> Result<(), V3Reason> {
        let source_seq = event.seq;
        let known = RELEASED_V3_EVENT_TYPES.contains(&event.kind.as_str());
        if !known && event.ignorable {
            let renamed = EventType::parse(&format!("plugin:{}", event.kind));
            let data = match std::mem::replace(&mut event.data, EventData::Other(Value::Null)) {
                EventData::Other(value) => value,
                payload => payload.to_value(),
            };
            let mut opaque = Event::other(target_seq, event.time, renamed, data);
            opaque.ignorable = true;
            opaque.source_event_seqs = event.source_event_seqs;
            opaque.surface_op = event.surface_op;
            self.mapping.push(target_seq);
            out.push(opaque);
            return Ok(());
        }
        if !known {
            return Err(V3Reason::UnknownEvent {
                kind: event.kind.as_str().to_owned(),
                seq: source_seq,
            });
        }
        if self.typed && target_seq == source_seq && typed::rewrite(&event.kind, &mut event.data) {
            self.mapping.push(target_seq);
            out.push(event);
            return Ok(());
        }
        let mut data = match std::mem::replace(&mut event.data, EventData::Other(Value::Null)) {
            EventData::Other(value) => value,
            payload => payload.to_value(),
        };
        if target_seq != source_seq {
            self.remap(&mut event, &mut data)?;
        }
        self.mapping.push(target_seq);
        rewrite::rewrite_sources(&event.kind, &mut data, source_seq)?;
        if event.kind == EventType::ToolResult {
            rewrite::lift_tool_result(&mut data, target_seq)?;
        }
        rewrite::migrate_content(&event.kind, &mut data, target_seq)?;
        let data = EventData::from_value(&event.kind, data).map_err(|e| {
            V3Reason::Content(format!("format v3 {} at seq {target_seq}: {e}", event.kind))
        })?;
        event.seq = target_seq;
        event.data = data;
        out.push(event);
        Ok(())
    }

    /// The open turn to close before `event`, when it is the evidenced restart.
    fn is_evidenced_restart(&self, event: &Event) -> Option<u64> {
        let EventData::TurnStart(start) = &event.data else {
            return None;
        };
        let open = self.turn?;
        (!self.step_open && self.next_turn_spliced && Some(start.turn) == open.checked_add(1))
            .then_some(open)
    }

    fn note_lifecycle(&mut self, event: &Event) {
        self.next_turn_spliced = is_next_turn_splice(event);
        match &event.data {
            EventData::TurnStart(d) => self.turn = Some(d.turn),
            EventData::TurnEnd(_) => self.turn = None,
            EventData::StepStart(_) => self.step_open = true,
            EventData::StepEnd(_) => self.step_open = false,
            _ => {}
        }
    }

    /// dsh's `validateDeliveryAccepted` on a source marker, whatever its `ignorable` flag.
    fn audit_delivery(&mut self, event: &Event) -> Result<(), V3Reason> {
        let data = match &event.data {
            EventData::Other(Value::Object(data)) => data,
            _ => {
                return Err(V3Reason::Delivery(
                    "delivery-accepted data must be an object",
                ))
            }
        };
        let generation = match data.get("sessionFormatVersion") {
            None => 0,
            Some(v) => count(v).ok_or(V3Reason::Delivery(
                "delivery sessionFormatVersion must be a non-negative safe integer",
            ))?,
        };
        if generation == 4 {
            return Err(V3Reason::DeliveryClaimsV4);
        }
        if generation != 3 {
            return Ok(());
        }
        let through = data
            .get("throughSeq")
            .and_then(count)
            .ok_or(V3Reason::Delivery(
                "delivery throughSeq must be a non-negative safe integer",
            ))?;
        if through >= event.seq {
            return Err(V3Reason::Delivery(
                "delivery throughSeq must precede its marker",
            ));
        }
        let session = match data.get("sessionId") {
            Some(Value::String(s)) if !s.is_empty() => s,
            _ => {
                return Err(V3Reason::Delivery(
                    "delivery requires a nonempty Session id",
                ))
            }
        };
        if *session != self.session.id && self.foreign_delivery.is_none() {
            self.foreign_delivery = Some(event.seq);
        }
        Ok(())
    }

    /// Remaps every seq reference of an event after an insertion (dsh's `references.ts`).
    fn remap(&self, event: &mut Event, data: &mut Value) -> Result<(), V3Reason> {
        let map = |seq: u64| -> Result<u64, V3Reason> {
            if seq >= event.seq {
                return Err(V3Reason::Reference(
                    "V3 reference must name an earlier source event",
                ));
            }
            Ok(self.mapping[seq as usize])
        };
        if let Some(seqs) = &mut event.source_event_seqs {
            for seq in seqs.iter_mut() {
                *seq = map(*seq)?;
            }
        }
        if let Some(SurfaceOp::Replace { start_seq, end_seq }) = &mut event.surface_op {
            *start_seq = map(*start_seq)?;
            *end_seq = map(*end_seq)?;
        }
        let remap_value = |value: &mut Value| -> Result<(), V3Reason> {
            let seq = count(value).ok_or(V3Reason::Reference(
                "V3 source event reference must be a non-negative safe integer",
            ))?;
            *value = map(seq)?.into();
            Ok(())
        };
        let remap_list = |list: Option<&mut Value>| -> Result<(), V3Reason> {
            let Some(list) = list else {
                return Ok(());
            };
            let Some(items) = list.as_array_mut() else {
                return Err(V3Reason::Reference("V3 event references must be an array"));
            };
            items.iter_mut().try_for_each(remap_value)
        };
        match event.kind {
            EventType::CommandDone => {
                if let Some(seq) = data.get_mut("sourceEventSeq") {
                    remap_value(seq)?;
                }
            }
            EventType::CompactionSummary | EventType::CompactionPrune => {
                let Some(range) = data.get_mut("shadowedRange").filter(|r| r.is_object()) else {
                    return Err(V3Reason::Reference(
                        "V3 event reference container must be an object",
                    ));
                };
                for key in ["start", "end"] {
                    match range.get_mut(key) {
                        Some(seq) => remap_value(seq)?,
                        None => {
                            return Err(V3Reason::Reference(
                                "V3 source event reference must be a non-negative safe integer",
                            ))
                        }
                    }
                }
                match data.get_mut("shadowedSeqs") {
                    Some(seqs) => remap_list(Some(seqs))?,
                    None => {
                        return Err(V3Reason::Reference("V3 event references must be an array"))
                    }
                }
            }
            EventType::SessionTitle | EventType::SessionTitleLlmRequest => {
                remap_list(data.get_mut("messageSeqs"))?;
            }
            EventType::ImageOffload => {
                let Some(targets) = data.get_mut("targets").and_then(Value::as_array_mut) else {
                    return Err(V3Reason::Reference(
                        "V3 image offload targets must be an array",
                    ));
                };
                for target in targets {
                    let Some(seq) = target.get_mut("seq") else {
                        return Err(V3Reason::Reference(
                            "V3 event reference container must be an object",
                        ));
                    };
                    remap_value(seq)?;
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// A non-negative safe integer.
/// The V4 form of one event that a V3 writer built, for a writer appending to a live V4
/// session (the agent loop): the edge's payload rewrites (dsh-v4.md 5.4, 5.3 and 5.5: plugin
/// sources become producer kinds, a `tool/result` wrapper becomes a tool message, unknown
/// content tags become `plugin:<tag>`) at the event's own seq. Nothing is renumbered,
/// inserted or collected: a live writer's events need no closer, no catalog and no remap.
/// An event of a type outside the released V3 vocabulary is returned unchanged; the store
/// admits the result under the native V4 rules either way.
pub fn event_as_v4(mut event: Event) -> Result<Event, Refusal> {
    if !RELEASED_V3_EVENT_TYPES.contains(&event.kind.as_str()) {
        return Ok(event);
    }
    if typed::rewrite(&event.kind, &mut event.data) {
        return Ok(event);
    }
    let seq = event.seq;
    let refuse = |reason| V3ToV4::refuse(Some(seq), reason);
    let mut data = match std::mem::replace(&mut event.data, EventData::Other(Value::Null)) {
        EventData::Other(value) => value,
        typed => typed.to_value(),
    };
    rewrite::rewrite_sources(&event.kind, &mut data, seq).map_err(refuse)?;
    if event.kind == EventType::ToolResult {
        rewrite::lift_tool_result(&mut data, seq).map_err(refuse)?;
    }
    rewrite::migrate_content(&event.kind, &mut data, seq).map_err(refuse)?;
    event.data = EventData::from_value(&event.kind, data).map_err(|e| {
        refuse(V3Reason::Content(format!(
            "format v3 {} at seq {seq}: {e}",
            event.kind
        )))
    })?;
    Ok(event)
}

fn count(value: &Value) -> Option<u64> {
    value
        .as_u64()
        .filter(|n| *n <= sessionlog_format::SAFE_INTEGER_MAX)
}

fn is_next_turn_splice(event: &Event) -> bool {
    let EventData::Other(data) = &event.data else {
        return false;
    };
    event.kind == EventType::AgentInboxSpliced
        && data.get("target").and_then(Value::as_str) == Some("next-turn")
        && data
            .get("inserted")
            .and_then(Value::as_array)
            .is_some_and(|inserted| !inserted.is_empty())
}

impl Stage for V3ToV4 {
    fn from(&self) -> FormatVersion {
        FormatVersion::V3
    }

    fn to(&self) -> FormatVersion {
        FormatVersion::V4
    }

    /// dsh's `migrateHeader`: the released V3 header, then `version: 4`.
    fn header(&mut self, mut header: SessionHeader) -> Result<SessionHeader, Refusal> {
        let invalid = |detail: String| V3ToV4::refuse(None, V3Reason::InvalidHeader(detail));
        if header.version != Some(3) {
            return Err(invalid(format!("version is {:?}, not 3", header.version)));
        }
        header
            .check(FormatVersion::V3, self.options.snapshot)
            .map_err(invalid)?;
        self.session = Session {
            id: header.id.clone(),
            seeded: header.seeded(),
            has_parent: header.parent_session.is_some(),
            created_at: header.created_at,
        };
        self.time = i64::try_from(header.created_at).unwrap_or(i64::MAX);
        if !self.session.seeded {
            self.cut = Some((0, 0));
        }
        header.version = Some(4);
        Ok(header)
    }

    fn push(&mut self, event: Event, out: &mut Vec<Event>) -> Result<(), Refusal> {
        let seq = event.seq;
        if self.finished {
            return Err(V3ToV4::refuse(Some(seq), V3Reason::Finished));
        }
        self.push_event(event, out)
            .map_err(|reason| V3ToV4::refuse(Some(seq), reason))
    }

    fn push_shared(&mut self, event: Arc<Event>, out: &mut Vec<Arc<Event>>) -> Result<(), Refusal> {
        let seq = event.seq;
        if self.finished {
            return Err(V3ToV4::refuse(Some(seq), V3Reason::Finished));
        }
        self.push_event_shared(event, out)
            .map_err(|reason| V3ToV4::refuse(Some(seq), reason))
    }

    fn finish(&mut self, out: &mut Vec<Event>) -> Result<Finish, Refusal> {
        if self.finished {
            return Err(V3ToV4::refuse(None, V3Reason::Finished));
        }
        self.finished = true;
        let refuse = |reason| V3ToV4::refuse(None, reason);
        let Some((cut, source_cut)) = self.cut else {
            return Err(refuse(V3Reason::CutUnknown));
        };
        let parent = facts::parent_catalog(&self.catalogs).map_err(refuse)?;
        if let Some(seq) = self.foreign_delivery {
            if !self.session.has_parent || seq >= source_cut {
                return Err(V3ToV4::refuse(Some(seq), V3Reason::ForeignDelivery));
            }
        }
        let time = if self.mapping.is_empty() {
            i64::try_from(self.session.created_at).unwrap_or(i64::MAX)
        } else {
            self.time
        };
        let appended = facts::complete_catalog(&parent, &self.children).map_err(refuse)?;
        for fact in appended {
            out.push(Event::other(
                self.next_seq,
                time,
                EventType::SubagentCatalog,
                fact,
            ));
            self.next_seq += 1;
        }
        Ok(Finish { cut })
    }
}

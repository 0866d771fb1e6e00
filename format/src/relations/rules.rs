//! The rules of [`Relations`]: [`Relations::check`] (no state change) and
//! [`Relations::commit`], one arm per event type of the released validator.

use serde_json::{Map, Value};

use super::facts::{self, Fact};
use super::{
    retry_step, Attempts, Chain, ChainKey, Change, Compaction, Crossing, Ptc, PtcOpen, Relations,
    Scheduled, Tool, Undo,
};
use crate::error::{Rule, Violation};
use crate::event::{Event, EventData, EventType, SurfaceOp};
use crate::header::is_placeholder;
use crate::message::{ContentBlock, Message, Source};
use crate::payload::{DeveloperMessageData, SeqRange, ToolResultData};
use crate::surface::Surface;

type Checked = Result<(), Violation>;

fn fail(rule: Rule, message: impl Into<String>) -> Checked {
    Err(Violation::new(rule, message))
}

/// The text of the synthetic result of a call that never started (spec 12.4).
pub(crate) const NOT_STARTED_TEXT: &str =
    "The tool call was interrupted before the Harness recorded it as started. Retry it if it \
     is still needed.";

/// The only plugin a title request's message may come from.
const TITLE_PLUGIN: &str = "dsh-session-title-llm";

impl Relations {
    /// Checks `event` as the next event against the relationships so far, without changing
    /// anything. `surface` is the surface before the event.
    pub fn check(&self, event: &Event, surface: &Surface) -> Checked {
        if !self.enabled {
            return Ok(());
        }
        if self.unreplayed.is_some() {
            // Never decided against sets that are not there (see `replay_journal`).
            return fail(
                Rule::Surface,
                "the resumed checkpoint's fact journal is not replayed",
            );
        }
        use EventType as T;
        match (&event.kind, &event.data) {
            (T::TurnStart, EventData::TurnStart(d)) => self.check_turn_start(d.turn),
            (T::TurnEnd, EventData::TurnEnd(d)) => self.check_turn_end(d.turn),
            (T::StepStart, EventData::StepStart(d)) => {
                if self.s.open_turn != Some(d.turn)
                    || self.s.open_step.is_some()
                    || d.step != self.s.next_step
                {
                    return fail(
                        Rule::StepStart,
                        "step/start does not match the open turn and next step",
                    );
                }
                Ok(())
            }
            (T::StepEnd, EventData::StepEnd(d)) => {
                self.require_open_step(&event.kind, d.turn, d.step)?;
                self.check_resolved("step/end")
            }
            (T::AssistantAttempt, EventData::AssistantAttempt(d)) => {
                self.require_open_step(&event.kind, d.turn, d.step)
            }
            (T::DeveloperMessage, EventData::DeveloperMessage(d)) => {
                self.require_open_step(&event.kind, d.turn, d.step)?;
                self.check_header_binding(event.seq, d)
            }
            (T::AssistantMessage, EventData::AssistantMessage(d)) => {
                self.require_open_step(&event.kind, d.turn, d.step)?;
                self.check_advertised(&d.message)
            }
            (T::ToolCall, EventData::ToolCall(d)) => {
                self.require_open_step(&event.kind, d.turn, d.step)?;
                let matches = self.tool(&d.call_id).is_some_and(|(_, tool)| {
                    !tool.started && *tool.name == d.name && *tool.arguments == d.arguments
                });
                if !matches {
                    let message = format!(
                        "tool/call {} does not match one advertised tool call",
                        d.call_id
                    );
                    return fail(Rule::ToolCallUnmatched, message);
                }
                Ok(())
            }
            (T::ToolResult, EventData::ToolResult(d)) => self.check_tool_result(event, d),
            (T::RequestHeader | T::RequestContext, _) => self.require_open_turn(&event.kind),
            (T::ToolCodeDispatchStart | T::ToolCodeDispatch, EventData::Other(data))
                if !self.v3 =>
            {
                self.check_ptc(event, data)
            }
            (T::ToolPtcDispatchStart | T::ToolPtcDispatch, EventData::Other(data)) if self.v3 => {
                self.check_ptc(event, data)
            }
            (T::LlmRetry, EventData::Other(data)) => self.check_retry(data),
            (T::LlmRetryStarted, EventData::Other(data)) => self.check_retry_started(data),
            (T::SessionTitle | T::SessionTitleLlmRequest, EventData::Other(data)) => {
                self.check_title(event, data)
            }
            (T::CommandRun, EventData::Other(data)) => {
                self.check_forward_source(event.seq)?;
                let id = required_str(event, data, "commandId")?;
                if self.commands.contains(id) {
                    return fail(
                        Rule::CommandRepeated,
                        format!("command/run repeats commandId {id}"),
                    );
                }
                Ok(())
            }
            (T::CommandDone, EventData::Other(data)) => self.check_command_done(event, data),
            (T::SubagentCatalog, EventData::Other(data)) if self.v4 => self.check_catalog(data),
            (T::SessionEndSeed, EventData::SessionEndSeed(d))
                if self.v4 && d.inherited == Some(true) && !self.seeded() =>
            {
                fail(
                    Rule::InheritedMarker,
                    "format v4 unseeded Session contains an inherited end-seed marker",
                )
            }
            (T::DeliveryAccepted, EventData::Other(data)) => {
                if self.delivery_is_foreign(data)
                    && !self
                        .identity
                        .as_ref()
                        .is_some_and(|i| i.has_parent && i.seeded)
                {
                    return fail(
                        Rule::DeliverySession,
                        "current-generation delivery marker names the wrong Session",
                    );
                }
                Ok(())
            }
            (T::CompactionStart, EventData::CompactionStart(d)) => {
                if self.compaction.is_some() {
                    return fail(
                        Rule::CompactionOverlap,
                        "compaction/start overlaps an open compaction",
                    );
                }
                let owner = owner_turn(&d.turn).map_or(Owner::Never, Owner::of);
                self.check_compaction_turn(owner, &event.kind)
            }
            (T::CompactionSummary, EventData::CompactionSummary(d)) => {
                let open = self.compaction_owner(
                    &event.kind,
                    Some(&d.compaction_id),
                    d.source_command_id.as_deref(),
                )?;
                self.check_compaction_turn(Owner::of(open.owner), &event.kind)?;
                if open.summarized {
                    return fail(
                        Rule::CompactionSummaryRepeated,
                        "compaction/summary repeats",
                    );
                }
                check_span(surface, &event.kind, &d.shadowed_range, &d.shadowed_seqs)
            }
            (T::CompactionPrune, EventData::CompactionPrune(d)) => {
                check_span(surface, &event.kind, &d.shadowed_range, &d.shadowed_seqs)
            }
            (T::CompactionEnd, EventData::CompactionEnd(d)) => {
                // The crossing came first: this end proves the crossed start was not stale.
                if let Some(crossing) = self.s.crossing {
                    return Err(crossing_violation(crossing));
                }
                let open = self.compaction_owner(
                    &event.kind,
                    Some(&d.compaction_id),
                    d.source_command_id.as_deref(),
                )?;
                if owner_turn(&d.turn) != Some(open.owner) {
                    return fail(
                        Rule::CompactionOwnerChanged,
                        "compaction/end changes its owner turn",
                    );
                }
                self.check_compaction_turn(Owner::of(open.owner), &event.kind)?;
                if d.error.is_none() && !open.summarized {
                    return fail(
                        Rule::CompactionSummaryMissing,
                        "successful compaction/end requires one summary",
                    );
                }
                Ok(())
            }
            (T::SystemMessage, EventData::SystemMessage(d)) if self.v4 => {
                self.require_open_step(&event.kind, d.turn, d.step)?;
                self.check_checkpoint(event)
            }
            (T::UserMessage | T::SystemMessage, _) => self.check_checkpoint(event),
            _ => Ok(()),
        }
    }

    /// Applies a checked event (or an opaque one, which only moves the previous-event mark).
    pub fn commit(&mut self, event: &Event, opaque: bool) -> Undo {
        assert!(
            !self.enabled || self.unreplayed.is_none(),
            "commit follows a check, which refuses an unreplayed journal"
        );
        let scalars = self.s;
        let journal_len = self.journal_len();
        let change = if self.enabled && !opaque {
            self.apply(event)
        } else {
            Change::None
        };
        self.s.prev_next_turn_splice = self.enabled && !opaque && is_next_turn_splice(event);
        let settled = match self.forward_sources.first_key_value() {
            Some((&seq, _)) if seq == event.seq => self.forward_sources.pop_first(),
            _ => None,
        };
        let pruned = if self.chains.is_empty() || retry_step(&self.s) == retry_step(&scalars) {
            Vec::new()
        } else {
            self.prune_chains()
        };
        Undo {
            scalars,
            change,
            settled,
            pruned,
            journal_len,
        }
    }

    /// The faults only the end of a complete log decides: a compaction crossing that no
    /// end-seed proved stale, a foreign delivery marker outside the inherited prefix. Returns
    /// the seq of the event at fault with its violation.
    pub fn finish(&self) -> Result<(), (u64, Violation)> {
        if let Some(crossing) = self.s.crossing {
            return Err((crossing.seq, crossing_violation(crossing)));
        }
        if let Some(seq) = self.s.foreign_delivery {
            let violation = Violation::new(
                Rule::DeliverySession,
                "current-generation delivery marker names the wrong Session",
            );
            return Err((seq, violation));
        }
        // A seeded V4 session's cut is its last inherited end-seed: one must exist. The
        // fault belongs to the header, placed at the first event (seq 0).
        if self.v4 && self.seeded() && !self.s.inherited_seen {
            let violation = Violation::new(
                Rule::InheritedMarker,
                "format v4 seeded header disagrees with its last inherited end-seed marker",
            );
            return Err((0, violation));
        }
        Ok(())
    }

    /// Whether the header says the session is seeded (a fork that inherited a prefix).
    fn seeded(&self) -> bool {
        self.identity.as_ref().is_some_and(|i| i.seeded)
    }

    fn apply(&mut self, event: &Event) -> Change {
        use EventType as T;
        match (&event.kind, &event.data) {
            (T::TurnStart, EventData::TurnStart(d)) => {
                self.note_crossing(event.seq, false);
                let (_, next_turn) = self.restart(d.turn);
                self.s.next_turn = next_turn;
                self.s.open_turn = Some(d.turn);
                self.s.open_step = None;
                self.s.next_step = 1;
                self.clear_tools()
            }
            (T::TurnEnd, _) => {
                self.note_crossing(event.seq, true);
                self.s.open_turn = None;
                self.s.next_turn += 1;
                Change::None
            }
            (T::StepStart, EventData::StepStart(d)) => {
                self.s.open_step = Some(d.step);
                Change::None
            }
            (T::StepEnd, _) => {
                self.s.open_step = None;
                self.s.next_step += 1;
                self.clear_tools()
            }
            (T::AssistantMessage, EventData::AssistantMessage(d)) => {
                let len = self.tools.len();
                for block in &d.message.content {
                    if let ContentBlock::ToolCall(call) = block {
                        self.tool_idx
                            .insert(call.id.as_str().into(), self.tools.len());
                        self.tools.push(Some(Tool {
                            call_id: call.id.as_str().into(),
                            name: call.name.as_str().into(),
                            arguments: call.arguments.as_str().into(),
                            started: false,
                        }));
                    }
                }
                if self.tools.len() == len {
                    Change::None
                } else {
                    Change::Advertised(len)
                }
            }
            (T::ToolCall, EventData::ToolCall(d)) => {
                let idx = self.tool_idx[d.call_id.as_str()];
                self.tools[idx]
                    .as_mut()
                    .expect("a checked call is live")
                    .started = true;
                Change::Started(idx)
            }
            (T::ToolResult, EventData::ToolResult(d))
                if event.surface_op == Some(SurfaceOp::Append) =>
            {
                let call_id = result_call_id(&d.message);
                let idx = self
                    .tool_idx
                    .remove(call_id)
                    .expect("a checked result has a lifecycle");
                let tool = self.tools[idx].take().expect("a checked result is live");
                Change::Resolved(idx, tool)
            }
            (T::RequestHeader, EventData::RequestHeader(d)) => {
                let provider = d.header.config.provider.as_deref().map(Box::from);
                let previous = std::mem::replace(&mut self.provider, provider);
                if !self.v4 {
                    return Change::Provider(previous);
                }
                let tools = crate::v4_rows::header_tools(d).map(|tools| {
                    let tools = tools
                        .into_iter()
                        .map(|(name, complete)| (name.into(), complete));
                    tools.collect()
                });
                facts::push_header(&mut self.journal, event.seq, &tools);
                self.headers.insert(event.seq, tools);
                Change::Header(previous, event.seq)
            }
            (T::ToolCodeDispatchStart | T::ToolPtcDispatchStart, EventData::Other(data)) => {
                let sub: Box<str> = str_member(data, "subCallId").into();
                let open = PtcOpen {
                    parent: str_member(data, "parentCallId").into(),
                    name: str_member(data, "name").into(),
                    arguments: data.get("arguments").cloned().unwrap_or(Value::Null),
                };
                let entry = Ptc {
                    root: str_member(data, "rootCallId").into(),
                    open: Some(Box::new(open)),
                };
                self.ptc.insert(sub.clone(), entry);
                Change::PtcStart(sub)
            }
            (T::ToolCodeDispatch | T::ToolPtcDispatch, EventData::Other(data)) => {
                let sub = str_member(data, "subCallId");
                let entry = self.ptc.get_mut(sub).expect("a checked settle has a start");
                let open = entry
                    .open
                    .take()
                    .expect("a checked settle has an open start");
                Change::PtcSettle(sub.into(), open)
            }
            (T::LlmRetry, EventData::Other(data)) => self.apply_retry(data),
            (T::LlmRetryStarted, EventData::Other(data)) => {
                let (retry_id, retry) = scheduled_key(data).expect("a checked start pairs");
                let attempts = self.retries.get_mut(retry_id);
                let scheduled = attempts.and_then(|a| a.get_mut(retry));
                scheduled.expect("a checked start pairs").started = true;
                facts::push(&mut self.journal, &Fact::RetryStarted { retry_id, retry });
                Change::RetryStarted((retry_id.into(), retry))
            }
            (T::CommandRun, EventData::Other(data)) => {
                let id: Box<str> = str_member(data, "commandId").into();
                let fact = Fact::CommandRun {
                    seq: event.seq,
                    command_id: &id,
                };
                facts::push(&mut self.journal, &fact);
                self.commands.insert(id.clone());
                self.command_seqs.push(event.seq);
                Change::CommandRun(id)
            }
            (T::CommandDone, EventData::Other(data)) => {
                facts::push(&mut self.journal, &Fact::CommandDone { seq: event.seq });
                self.command_seqs.push(event.seq);
                let later = data
                    .get("sourceEventSeq")
                    .and_then(Value::as_u64)
                    .filter(|s| *s > event.seq && !self.forward_sources.contains_key(s));
                if let Some(seq) = later {
                    let id = str_member(data, "commandId").into();
                    self.forward_sources.insert(seq, id);
                }
                Change::CommandDone { forward: later }
            }
            (T::DeliveryAccepted, EventData::Other(data)) => {
                if self.delivery_is_foreign(data) && self.s.foreign_delivery.is_none() {
                    self.s.foreign_delivery = Some(event.seq);
                }
                Change::None
            }
            (T::CompactionStart, EventData::CompactionStart(d)) => {
                let open = Compaction {
                    id: d.compaction_id.as_str().into(),
                    source_command_id: d.source_command_id.as_deref().map(Box::from),
                    owner: owner_turn(&d.turn).expect("a checked start has an owner"),
                    start_seq: event.seq,
                    summarized: false,
                };
                Change::Compaction(self.compaction.replace(Box::new(open)))
            }
            (T::CompactionSummary, _) => {
                let open = self
                    .compaction
                    .as_mut()
                    .expect("a checked summary is owned");
                open.summarized = true;
                Change::Summarized
            }
            (T::CompactionEnd, _) => {
                self.s.crossing = None;
                Change::Compaction(self.compaction.take())
            }
            (T::SessionEndSeed, EventData::SessionEndSeed(d)) => {
                // An unmatched inherited transaction belongs to the ended source lifecycle.
                self.s.crossing = None;
                if d.inherited == Some(true) {
                    self.s.foreign_delivery = None;
                    if self.v4 {
                        // The catalog facts before the cut are inherited; the session's own
                        // start here.
                        self.s.inherited_seen = true;
                        let children = std::mem::take(&mut self.catalog_children);
                        return Change::InheritedEnd(self.compaction.take(), children);
                    }
                }
                Change::Compaction(self.compaction.take())
            }
            (T::SubagentCatalog, EventData::Other(data)) if self.v4 && self.catalog_counts() => {
                let fact = crate::v4_rows::catalog_fact(data).expect("a checked fact is valid");
                let id: Box<str> = fact.child_id.into();
                self.catalog_children.insert(id.clone());
                Change::CatalogChild(id)
            }
            (T::UserMessage, EventData::UserMessage(m)) if m.source_kind() == "user" => {
                facts::push(&mut self.journal, &Fact::HumanUser { seq: event.seq });
                self.human_users.push(event.seq);
                Change::HumanUser
            }
            _ => Change::None,
        }
    }

    fn tool(&self, call_id: &str) -> Option<(usize, &Tool)> {
        let idx = *self.tool_idx.get(call_id)?;
        self.tools[idx].as_ref().map(|tool| (idx, tool))
    }

    fn clear_tools(&mut self) -> Change {
        assert!(
            self.tool_idx.is_empty(),
            "tools are resolved before their step closes"
        );
        if self.tools.is_empty() {
            return Change::None;
        }
        let len = self.tools.len();
        self.tools.clear();
        Change::Cleared(len)
    }

    /// The open turn and next turn number a `turn/start` of `turn` sees, after the legacy
    /// restart exception (spec 12.2 turns 5) when its extension is set.
    fn restart(&self, turn: u64) -> (Option<u64>, u64) {
        let s = &self.s;
        if let Some(open) = s.open_turn {
            if self.ext.legacy_interrupted_turn_restart
                && s.open_step.is_none()
                && Some(turn) == open.checked_add(1)
                && s.next_turn == open
                && s.prev_next_turn_splice
            {
                return (None, s.next_turn + 1);
            }
        }
        (s.open_turn, s.next_turn)
    }

    fn check_turn_start(&self, turn: u64) -> Checked {
        let (open_turn, next_turn) = self.restart(turn);
        if open_turn.is_some() || turn != next_turn {
            let message = format!("turn/start {turn} does not open expected turn {next_turn}");
            return fail(Rule::TurnStart, message);
        }
        Ok(())
    }

    fn check_turn_end(&self, turn: u64) -> Checked {
        if self.s.open_turn != Some(turn) {
            let message = format!("turn/end {turn} has no matching open turn");
            return fail(Rule::TurnEndUnmatched, message);
        }
        self.check_resolved("turn/end")?;
        if self.s.open_step.is_some() {
            return fail(
                Rule::TurnEndOpenStep,
                format!("turn/end {turn} crosses an open step"),
            );
        }
        Ok(())
    }

    /// No advertised or started call of the open step is unresolved at `boundary`.
    fn check_resolved(&self, boundary: &str) -> Checked {
        match self.tools.iter().flatten().next() {
            Some(tool) => fail(
                Rule::UnresolvedToolCall,
                format!("{boundary} leaves unresolved tool call {}", tool.call_id),
            ),
            None => Ok(()),
        }
    }

    fn require_open_step(&self, kind: &EventType, turn: u64, step: u64) -> Checked {
        if self.s.open_turn != Some(turn) || self.s.open_step != Some(step) {
            let message = format!("{kind} does not match an open turn and step");
            return fail(Rule::OpenStep, message);
        }
        Ok(())
    }

    fn require_open_turn(&self, kind: &EventType) -> Checked {
        if self.s.open_turn.is_none() {
            return fail(Rule::OpenTurn, format!("{kind} is outside an open turn"));
        }
        Ok(())
    }

    /// Every `tool-call` block is a new lifecycle: no id repeats one of the open step or an
    /// earlier block of the same message.
    fn check_advertised(&self, message: &Message) -> Checked {
        let calls = message.content.iter().filter_map(|block| match block {
            ContentBlock::ToolCall(call) => Some(call.id.as_str()),
            _ => None,
        });
        let mut seen: super::Set<&str> = super::Set::default();
        for id in calls {
            if self.tool_idx.contains_key(id) || !seen.insert(id) {
                let message = format!("assistant/message repeats advertised tool call {id}");
                return fail(Rule::ToolCallRepeated, message);
            }
        }
        Ok(())
    }

    fn check_tool_result(&self, event: &Event, data: &ToolResultData) -> Checked {
        if event.surface_op != Some(SurfaceOp::Append) {
            if self.s.open_turn.is_none() {
                return fail(
                    Rule::ToolResultReplaceOutsideTurn,
                    "tool/result replacement is outside an open turn",
                );
            }
            return Ok(());
        }
        self.require_open_step(&event.kind, data.turn, data.step)?;
        let call_id = result_call_id(&data.message);
        let Some((_, tool)) = self.tool(call_id) else {
            let message = format!("tool/result {call_id} has no advertised tool lifecycle");
            return fail(Rule::ToolResultUnmatched, message);
        };
        if !tool.started && !self.is_not_started_repair(event, data, call_id) {
            let message = format!("tool/result {call_id} is not the exact TOOL_NOT_STARTED repair");
            return fail(Rule::ToolResultNotStarted, message);
        }
        Ok(())
    }

    /// The exact synthetic result of spec 12.4 for a call that never started. In V3 its id may
    /// carry any historical seq suffix (the private view re-suffixes it with the current seq).
    fn is_not_started_repair(&self, event: &Event, data: &ToolResultData, call_id: &str) -> bool {
        let error = data.error.as_ref().and_then(Value::as_object);
        let error_ok = error.is_some_and(|e| {
            e.get("name").and_then(Value::as_str) == Some("ToolNotStartedError")
                && e.get("code").and_then(Value::as_str) == Some("TOOL_NOT_STARTED")
        });
        let id = data.message.id.as_deref().unwrap_or("");
        if self.v4 {
            return self.is_v4_not_started_repair(event, data, call_id, error_ok);
        }
        let id_ok = if self.snapshot && is_placeholder(id) {
            true
        } else if self.v3 {
            is_repair_identity(id, call_id)
        } else {
            id.strip_prefix("interrupted-tool-result-")
                .and_then(|rest| rest.strip_prefix(call_id))
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(|suffix| suffix == event.seq.to_string())
        };
        let block_ok = match data.message.content.first() {
            Some(ContentBlock::ToolResult(block)) => {
                block.is_error == Some(true)
                    && block.content.len() == 1
                    && matches!(&block.content[0], ContentBlock::Text(t) if t.text == NOT_STARTED_TEXT)
            }
            _ => false,
        };
        error_ok && event.source_event_seqs.is_none() && id_ok && block_ok
    }

    /// The V4 repairs of a call that never started (dsh-v4.md 4.2): the interrupted form (a
    /// tool message with `isError: true` and the one text block) or the fork-generated form,
    /// whose exact shape row admission checked (`crate::v4_rows`).
    fn is_v4_not_started_repair(
        &self,
        event: &Event,
        data: &ToolResultData,
        call_id: &str,
        error_ok: bool,
    ) -> bool {
        let message = &data.message;
        let id = message.id.as_deref().unwrap_or("");
        if id.starts_with(crate::v4_rows::FORK_RESULT_PREFIX) {
            return error_ok;
        }
        let id_ok = (self.snapshot && is_placeholder(id)) || is_repair_identity(id, call_id);
        let flagged = message.extra.get("isError") == Some(&Value::Bool(true));
        let block_ok = matches!(
            message.content.as_slice(),
            [ContentBlock::Text(t)] if t.text == NOT_STARTED_TEXT
        );
        error_ok && event.source_event_seqs.is_none() && id_ok && flagged && block_ok
    }

    /// A developer message's tool additions bind to the `request/header` its `headerSeq`
    /// names: an earlier event, a header, one complete definition per added name.
    fn check_header_binding(&self, seq: u64, data: &DeveloperMessageData) -> Checked {
        let Some(header_seq) = data
            .header_seq
            .as_ref()
            .and_then(crate::v4_rows::header_seq)
        else {
            return Ok(());
        };
        let refuse = |text: String| fail(Rule::DeveloperHeader, text);
        if header_seq >= seq {
            return refuse("developer/message headerSeq must name an earlier event".to_owned());
        }
        let Some(tools) = self.headers.get(&header_seq) else {
            return refuse(
                "developer/message headerSeq must reference an earlier request/header".to_owned(),
            );
        };
        // A normalized recording keeps tools as names or a placeholder (dsh-v4.md 9 item 7):
        // its binding needs only the earlier header.
        let Some(tools) = tools.as_ref().filter(|_| !self.snapshot) else {
            return Ok(());
        };
        for block in &data.message.content {
            let ContentBlock::Other(object) = block else {
                continue;
            };
            if block.tag() != "tool-addition" {
                continue;
            }
            let name = object.get("toolName").and_then(Value::as_str).unwrap_or("");
            let mut entries = tools.iter().filter(|(n, _)| &**n == name);
            match (entries.next(), entries.next()) {
                (Some((_, true)), None) => {}
                (Some((_, false)), None) => {
                    return refuse(format!(
                        "developer/message tool-addition {name:?} requires a complete tool \
                         definition in headerSeq {header_seq}"
                    ))
                }
                _ => {
                    return refuse(format!(
                        "developer/message tool-addition {name:?} must name exactly one tool in \
                         headerSeq {header_seq}"
                    ))
                }
            }
        }
        Ok(())
    }

    /// Whether catalog facts are the session's own here: always in an unseeded log, after an
    /// inherited end-seed in a seeded one (the inherited entries do not count).
    fn catalog_counts(&self) -> bool {
        !self.seeded() || self.s.inherited_seen
    }

    /// A V4 catalog fact of the session's own is valid and lists its child once.
    fn check_catalog(&self, data: &Value) -> Checked {
        if !self.catalog_counts() {
            return Ok(());
        }
        let Some(fact) = crate::v4_rows::catalog_fact(data) else {
            return fail(Rule::Payload, crate::v4_rows::CATALOG_FACT_REFUSAL);
        };
        if self.catalog_children.contains(fact.child_id.as_str()) {
            return fail(
                Rule::Payload,
                format!("duplicate catalog child {}", fact.child_id),
            );
        }
        Ok(())
    }

    fn check_ptc(&self, event: &Event, data: &Value) -> Checked {
        self.require_open_turn(&event.kind)?;
        let kind = &event.kind;
        let root = required_str(event, data, "rootCallId")?;
        let parent = required_str(event, data, "parentCallId")?;
        let sub = required_str(event, data, "subCallId")?;
        let name = required_str(event, data, "name")?;
        let known = self.ptc.get(sub);
        if known.is_some_and(|p| *p.root != *root) {
            return fail(
                Rule::PtcRootChanged,
                format!("{kind} changes its rootCallId"),
            );
        }
        if parent != root && self.ptc.get(parent).is_none_or(|p| *p.root != *root) {
            let message = format!("{kind} parentCallId does not belong to rootCallId");
            return fail(Rule::PtcParent, message);
        }
        let start = matches!(
            kind,
            EventType::ToolCodeDispatchStart | EventType::ToolPtcDispatchStart
        );
        if start {
            if known.is_some() {
                return fail(Rule::PtcStartRepeated, format!("{kind} repeats subCallId"));
            }
            return Ok(());
        }
        let Some(open) = known.and_then(|p| p.open.as_deref()) else {
            return fail(
                Rule::PtcSettleUnmatched,
                format!("{kind} has no unique start"),
            );
        };
        let arguments = data.get("arguments").unwrap_or(&Value::Null);
        if *open.parent != *parent || *open.name != *name || open.arguments != *arguments {
            return fail(
                Rule::PtcSettleMismatch,
                format!("{kind} does not match its start"),
            );
        }
        Ok(())
    }

    fn check_retry(&self, data: &Value) -> Checked {
        let turn = data.get("turn").and_then(Value::as_u64);
        let step = data.get("step").and_then(Value::as_u64);
        let current = retry_step(&self.s);
        if current.is_none() || turn.zip(step) != current {
            return fail(
                Rule::RetryStep,
                "llm/retry does not match the current turn and step",
            );
        }
        let provider = optional_str(data, "provider", "llm/retry")?;
        if provider != self.provider.as_deref() {
            return fail(
                Rule::RetryProvider,
                "llm/retry provider does not match the open request/header",
            );
        }
        let key = chain_key(data)?;
        let retry_id = required_str_of(data, "retryId", "llm/retry")?;
        let prior = self.chains.get(&key);
        let expected = prior.map_or(1, |c| c.last_retry + 1);
        if data.get("retry").and_then(Value::as_u64) != Some(expected) {
            return fail(
                Rule::RetryNumber,
                format!("llm/retry must use retry {expected}"),
            );
        }
        match prior {
            Some(chain) if *chain.retry_id != *retry_id => fail(
                Rule::RetryIdChanged,
                "llm/retry must preserve retryId across one policy chain",
            ),
            None if self.retries.contains_key(retry_id) => {
                let json = Value::String(retry_id.to_owned());
                fail(
                    Rule::RetryIdReused,
                    format!("llm/retry reuses retryId {json} across policy chains"),
                )
            }
            _ => Ok(()),
        }
    }

    fn apply_retry(&mut self, data: &Value) -> Change {
        let chain = chain_key(data).expect("a checked retry has a chain");
        let retry_id: Box<str> = str_member(data, "retryId").into();
        let retry = data.get("retry").and_then(Value::as_u64).expect("checked");
        let next = Chain {
            last_retry: retry,
            retry_id: retry_id.clone(),
        };
        let previous = self.chains.insert(chain.clone(), next);
        let turn = data.get("turn").and_then(Value::as_u64).expect("checked");
        let step = data.get("step").and_then(Value::as_u64).expect("checked");
        let fact = Fact::Retry {
            retry_id: &retry_id,
            retry,
            turn,
            step,
        };
        facts::push(&mut self.journal, &fact);
        let entry = Scheduled {
            turn,
            step,
            started: false,
        };
        // The checked number is the chain's next, and the chain's attempts are its id's.
        match self.retries.get_mut(&retry_id) {
            Some(attempts) => {
                assert_eq!(attempts.last_retry() + 1, retry, "an id's attempts follow");
                attempts.push(entry);
            }
            None => {
                assert_eq!(retry, 1, "a new id starts its chain");
                self.retries.insert_new(&retry_id, Attempts::new(entry));
            }
        }
        Change::Retry {
            chain,
            previous,
            retry_id,
        }
    }

    fn check_retry_started(&self, data: &Value) -> Checked {
        let attempt = scheduled_key(data)
            .and_then(|(retry_id, retry)| self.retries.get(retry_id)?.get(retry));
        let Some(scheduled) = attempt else {
            return fail(
                Rule::RetryStartedUnpaired,
                "llm/retry-started pairs no prior scheduled attempt",
            );
        };
        let turn = data.get("turn").and_then(Value::as_u64);
        let step = data.get("step").and_then(Value::as_u64);
        if turn != Some(scheduled.turn) || step != Some(scheduled.step) {
            return fail(
                Rule::RetryStartedStep,
                "llm/retry-started does not match its scheduled turn and step",
            );
        }
        if scheduled.started {
            return fail(
                Rule::RetryStartedRepeated,
                "llm/retry-started repeats one scheduled attempt",
            );
        }
        Ok(())
    }

    fn check_title(&self, event: &Event, data: &Value) -> Checked {
        let kind = &event.kind;
        let Some(seqs) = data.get("messageSeqs").and_then(Value::as_array) else {
            return fail(
                Rule::Payload,
                format!(
                    "{kind} at seq {} data.messageSeqs must be an array",
                    event.seq
                ),
            );
        };
        if *kind == EventType::SessionTitle {
            let user = data.get("source").and_then(|s| s.get("kind")) == Some(&"user".into());
            if seqs.is_empty() != user {
                let message = format!(
                    "session/title {} messageSeqs must be empty exactly for a user title",
                    event.seq
                );
                return fail(Rule::TitleUserSeqs, message);
            }
        }
        for seq in seqs {
            let cited = seq
                .as_u64()
                .filter(|s| *s < event.seq)
                .is_some_and(|s| self.human_users.contains(s));
            if !cited {
                let message = format!(
                    "{kind} {} messageSeqs must cite earlier human user/message events",
                    event.seq
                );
                return fail(Rule::TitleSources, message);
            }
        }
        if *kind == EventType::SessionTitleLlmRequest && !represents_title(data, self.v4) {
            return fail(
                Rule::TitleRequestMessages,
                "session/title-llm-request messages do not represent messageSeqs",
            );
        }
        Ok(())
    }

    fn check_command_done(&self, event: &Event, data: &Value) -> Checked {
        self.check_forward_source(event.seq)?;
        let id = required_str(event, data, "commandId")?;
        if !self.commands.contains(id) {
            let message = format!("command/done {id} has no prior command/run");
            return fail(Rule::CommandDoneUnmatched, message);
        }
        let Some(source) = data.get("sourceEventSeq") else {
            return Ok(());
        };
        let success = data.get("kind").and_then(Value::as_str) == Some("success");
        let names_command = source
            .as_u64()
            .is_some_and(|s| s == event.seq || (s < event.seq && self.command_seqs.contains(s)));
        if !success || names_command {
            let message = format!("command/done {id} has invalid sourceEventSeq");
            return fail(Rule::CommandSourceSeq, message);
        }
        Ok(())
    }

    /// A `command/*` event at `seq` is refused when an earlier `command/done` named it.
    fn check_forward_source(&self, seq: u64) -> Checked {
        match self.forward_sources.get(&seq) {
            Some(id) => fail(
                Rule::CommandSourceSeq,
                format!("command/done {id} has invalid sourceEventSeq"),
            ),
            None => Ok(()),
        }
    }

    /// A current-generation marker (its version is the header's) naming another session.
    fn delivery_is_foreign(&self, data: &Value) -> bool {
        let Some(identity) = &self.identity else {
            return false;
        };
        let version = match data.get("sessionFormatVersion") {
            None => Some(0),
            Some(v) => v.as_u64(),
        };
        version == Some(identity.version)
            && data.get("sessionId").and_then(Value::as_str) != Some(identity.id.as_str())
    }

    fn note_crossing(&mut self, seq: u64, turn_end: bool) {
        if self.compaction.is_some() && self.s.crossing.is_none() {
            self.s.crossing = Some(Crossing { seq, turn_end });
        }
    }

    /// The open compaction, when `compaction_id` and `source_command_id` name it.
    fn compaction_owner(
        &self,
        subject: &dyn std::fmt::Display,
        compaction_id: Option<&str>,
        source_command_id: Option<&str>,
    ) -> Result<&Compaction, Violation> {
        match self.compaction.as_deref() {
            Some(open)
                if compaction_id == Some(&*open.id)
                    && source_command_id == open.source_command_id.as_deref() =>
            {
                Ok(open)
            }
            _ => Err(Violation::new(
                Rule::CompactionUnmatched,
                format!("{subject} has no matching compaction/start"),
            )),
        }
    }

    fn check_compaction_turn(&self, owner: Owner, kind: &EventType) -> Checked {
        let matches = match owner {
            Owner::Standalone => self.s.open_turn.is_none(),
            Owner::Turn(turn) => self.s.open_turn == Some(turn),
            Owner::Never => false,
        };
        if !matches {
            return fail(
                Rule::CompactionTurn,
                format!("{kind} does not match the open turn"),
            );
        }
        Ok(())
    }

    /// A non-append message with the `compact` plugin source is the checkpoint of the open
    /// compaction (spec 12.2 compaction 6).
    fn check_checkpoint(&self, event: &Event) -> Checked {
        if event.surface_op == Some(SurfaceOp::Append) {
            return Ok(());
        }
        let Some(source) = event.message().and_then(|m| m.source.as_ref()) else {
            return Ok(());
        };
        let checkpoint = if self.v4 {
            source.kind == "compact-checkpoint"
        } else {
            source.kind == "plugin" && source.plugin.as_deref() == Some("compact")
        };
        if !checkpoint {
            return Ok(());
        }
        let subject = format!("compaction checkpoint at seq {}", event.seq);
        let id = extra_str(source, "compactionId");
        let command = extra_str(source, "sourceCommandId");
        self.compaction_owner(&subject, id, command).map(|_| ())
    }
}

/// The owner turn of a compaction event: `null` (standalone), a turn, or a value no turn
/// equals.
#[derive(Debug, Clone, Copy)]
enum Owner {
    Standalone,
    Turn(u64),
    Never,
}

impl Owner {
    fn of(owner: Option<u64>) -> Owner {
        match owner {
            None => Owner::Standalone,
            Some(turn) => Owner::Turn(turn),
        }
    }
}

/// `Some(None)` for `null`, `Some(Some(turn))` for a turn number, `None` for anything else.
fn owner_turn(turn: &Value) -> Option<Option<u64>> {
    match turn {
        Value::Null => Some(None),
        other => other.as_u64().map(Some),
    }
}

fn crossing_violation(crossing: Crossing) -> Violation {
    let kind = if crossing.turn_end {
        "turn/end"
    } else {
        "turn/start"
    };
    Violation::new(
        Rule::CompactionCrossing,
        format!("{kind} crosses an open compaction"),
    )
}

/// `shadowedSeqs` is exactly the current surface from `shadowedRange.start` to `.end`.
fn check_span(surface: &Surface, kind: &EventType, range: &SeqRange, seqs: &[u64]) -> Checked {
    let span = match (surface.position(range.start), surface.position(range.end)) {
        (Some(start), Some(end)) if start <= end => &surface.nodes()[start..=end],
        _ => &[],
    };
    let exact = span.len() == seqs.len() && span.iter().zip(seqs).all(|(n, s)| n.seq == *s);
    if !exact {
        let message = format!("{kind} shadowedSeqs do not name an exact current surface span");
        return fail(Rule::CompactionSpan, message);
    }
    Ok(())
}

/// dsh's `isRepairIdentity`: the repair prefix of `call_id`, then a canonical safe integer.
fn is_repair_identity(id: &str, call_id: &str) -> bool {
    let suffix = id
        .strip_prefix("interrupted-tool-result-")
        .and_then(|rest| rest.strip_prefix(call_id))
        .and_then(|rest| rest.strip_prefix('-'));
    suffix.is_some_and(|s| {
        let canonical = s == "0" || (!s.starts_with('0') && !s.is_empty());
        canonical
            && s.bytes().all(|b| b.is_ascii_digit())
            && s.parse::<u64>()
                .is_ok_and(|n| n <= crate::json::SAFE_INTEGER_MAX)
    })
}

fn result_call_id(message: &Message) -> &str {
    message
        .source
        .as_ref()
        .and_then(|s| s.call_id.as_deref())
        .unwrap_or("undefined")
}

fn extra_str<'a>(source: &'a Source, key: &str) -> Option<&'a str> {
    source.extra.get(key).and_then(Value::as_str)
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

/// The one user message a title request sends: from the title plugin (V4: the producer kind
/// of that name), one text block.
fn represents_title(data: &Value, v4: bool) -> bool {
    let Some([message]) = data
        .get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
    else {
        return false;
    };
    let source: Option<&Map<String, Value>> = message.get("source").and_then(Value::as_object);
    let content = message.get("content").and_then(Value::as_array);
    message.get("role").and_then(Value::as_str) == Some("user")
        && content.is_some_and(|c| {
            c.len() == 1 && c[0].get("type").and_then(Value::as_str) == Some("text")
        })
        && source.is_some_and(|s| {
            let kind = s.get("kind").and_then(Value::as_str);
            if v4 {
                return kind == Some(TITLE_PLUGIN);
            }
            kind == Some("plugin") && s.get("plugin").and_then(Value::as_str) == Some(TITLE_PLUGIN)
        })
}

fn chain_key(data: &Value) -> Result<ChainKey, Violation> {
    let provider = optional_str(data, "provider", "llm/retry")?;
    let policy_key = optional_str(data, "policyKey", "llm/retry")?;
    Ok(ChainKey {
        turn: data.get("turn").and_then(Value::as_u64).unwrap_or(u64::MAX),
        step: data.get("step").and_then(Value::as_u64).unwrap_or(u64::MAX),
        provider: provider.map(Box::from),
        policy_key: policy_key.map(Box::from),
    })
}

fn scheduled_key(data: &Value) -> Option<(&str, u64)> {
    let retry_id = data.get("retryId").and_then(Value::as_str)?;
    let retry = data.get("retry").and_then(Value::as_u64)?;
    Some((retry_id, retry))
}

/// A string member the rules compare; a missing or non-string one is a payload fault.
fn required_str<'a>(event: &Event, data: &'a Value, key: &str) -> Result<&'a str, Violation> {
    required_str_of(data, key, event.kind.as_str())
}

fn required_str_of<'a>(data: &'a Value, key: &str, kind: &str) -> Result<&'a str, Violation> {
    data.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| Violation::new(Rule::Payload, format!("{kind} data.{key} must be a string")))
}

fn optional_str<'a>(data: &'a Value, key: &str, kind: &str) -> Result<Option<&'a str>, Violation> {
    match data.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(Violation::new(
            Rule::Payload,
            format!("{kind} data.{key} must be a string"),
        )),
    }
}

/// A string member of a checked event.
fn str_member<'a>(data: &'a Value, key: &str) -> &'a str {
    data.get(key)
        .and_then(Value::as_str)
        .expect("checked events have their string members")
}

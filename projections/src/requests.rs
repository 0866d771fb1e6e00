//! `requests`: every request the model was sent, rebuilt from the log, with the prefix it
//! shared with the previous request and why that prefix broke.
//!
//! A request is one settled model call: each `assistant/message` or `assistant/attempt`
//! (CLI.md). Its body is what the loop sends (spec 7.3, 8): the canonical header in force
//! (config, adapter defaults, tools) and the derived messages of the surface just before the
//! settling event. [`RequestAnalyzer`] folds V3 events in seq order with a [`SessionFold`] and
//! takes a snapshot of that body at every settlement.
//!
//! **Tokens.** Every estimate is the token meter's fixed heuristic (spec 14,
//! [`sessionlog_format::tokens`]). A request's estimate is the sum of its message estimates
//! plus the tools estimate of its canonical header: the tools travel in every request and, in
//! the provider's cache key, before the messages.
//!
//! **Prefix.** The prefix a request shares with the previous one is what a provider's prompt
//! cache could reuse:
//! - when the header changed in between (`headers_equal` is false), nothing is shared: the
//!   tools and the call configuration come before the messages, and a different model has
//!   its own cache. The break is [`PrefixBreak::ConfigChanged`] when the configuration or the
//!   adapter defaults changed, else [`PrefixBreak::ToolsChanged`], at the seq of the latest
//!   `request/header`;
//! - otherwise the shared prefix is the longest common prefix of the two message lists,
//!   messages compared by `id`, `role` and `content` (not `source`, which no wire body
//!   carries), and its tokens are those messages' estimates plus the tools estimate. An
//!   in-history append (a `system/message` appended after the history) or any other append
//!   keeps the whole previous request as the prefix, and `broken_by` is `None`;
//! - when the previous request is not a whole prefix, the break is the surface change
//!   between the two requests at the earliest surface position (the first in seq order among
//!   equals): a replace of node 0 by a `system/message` is a [`PrefixBreak::HeadRewrite`]
//!   (clearing the prompt included); a replace by the compaction checkpoint, the
//!   `user/message` right after a `compaction/summary` or citing a compaction's
//!   `compaction/start` or `compaction/summary` in `sourceEventSeqs` (spec 13.1), is a
//!   [`PrefixBreak::Compaction`]; a message projection (`image/offload`, spec 6.4) is a
//!   [`PrefixBreak::Projection`]; any other replace is a [`PrefixBreak::Replace`].
//!
//! **Prompt changes** (the summary): an *append* is a `system/message` appended at a surface
//! position after 0 (the in-history route, spec 7.5 rule 3); the first head is not counted.
//! A *rewrite* replaces node 0 with non-empty content (rule 2). A replace with empty content
//! is a *clear* (counted apart, at any position), and a non-empty replace of a later system
//! node (an in-history prompt rewritten in place) is a *history rewrite*.
//!
//! Memory is the fold, the previous request's message list (shared with the fold's events,
//! not copied), and the rows; with [`RequestOptions::bodies`], every row also owns a copy of
//! its messages, which grows with the square of the session length.

use std::collections::HashSet;
use std::ptr;
use std::sync::Arc;

use serde_json::Value;
use sessionlog_format::fold::{derive_event_message, headers_equal, SessionFold};
use sessionlog_format::payload::EpochHeader;
use sessionlog_format::rules::RuleContext;
use sessionlog_format::stream::{StreamChunk, StreamRecord, TokenUsage};
use sessionlog_format::tokens::{estimate_message, estimate_tools};
use sessionlog_format::{Event, EventData, EventType, Message, SurfaceOp, Violation};

use sessionlog_format::projection::{Flow, Projection, Replay};

/// How `requests` runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestOptions {
    /// Keep each request's full message list (for `--json`).
    pub bodies: bool,
}

/// Why a request's shared prefix with the previous request ended where it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrefixBreak {
    /// The system prompt at node 0 was rewritten (a head replace) at `seq`.
    HeadRewrite { seq: u64 },
    /// The header's tools changed (`request/header` at `seq`).
    ToolsChanged { seq: u64 },
    /// The header's call configuration changed (`request/header` at `seq`).
    ConfigChanged { seq: u64 },
    /// A compaction replaced part of the surface (the checkpoint at `seq`).
    Compaction { seq: u64 },
    /// Another replace (a tool-result prune, a cleared system node) at `seq`.
    Replace { seq: u64 },
    /// A message projection (`image/offload` at `seq`) changed earlier messages in place.
    Projection { seq: u64 },
}

/// The prefix a request shares with the previous one.
#[derive(Debug, Clone, PartialEq)]
pub struct Prefix {
    pub messages: usize,
    pub estimated_tokens: u64,
    /// `None` when the whole previous request is a prefix of this one (or this is the first).
    pub broken_by: Option<PrefixBreak>,
}

/// An injected message of a request (one whose source is neither the user, the model nor a
/// tool): its position among the request's messages and its source label
/// ([`crate::sources::source_label`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injected {
    pub message_idx: usize,
    pub source: String,
}

/// One settled model call.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRow {
    /// 0-based request number in the session.
    pub index: u64,
    /// Seq of the `assistant/message` or `assistant/attempt` that settled it.
    pub seq: u64,
    pub turn: u64,
    pub step: u64,
    /// `message` or `attempt`.
    pub settled: &'static str,
    /// Reason of the `request/header` in force.
    pub reason: Option<String>,
    /// The header's call configuration and tools in force (`null` before any header).
    pub config: Value,
    /// Shared by every row of the same header, not copied per request.
    pub tools: Option<Arc<Value>>,
    /// The canonical header's `adapterDefaults`, when it has one.
    pub adapter_defaults: Option<Value>,
    /// The `request/context` in force, whole.
    pub context: Option<Value>,
    pub message_count: usize,
    /// Messages plus tools.
    pub estimated_tokens: u64,
    /// The tools estimate alone (0 without tools).
    pub tools_tokens: u64,
    pub prefix: Prefix,
    /// Recorded usage, when the log has it.
    pub usage: Option<TokenUsage>,
    /// The derived messages, with [`RequestOptions::bodies`].
    pub messages: Option<Vec<Message>>,
    /// The request's injected messages, in order.
    pub injected: Vec<Injected>,
}

/// Totals over a session's requests.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RequestSummary {
    pub requests: u64,
    /// Estimated input tokens over all requests.
    pub estimated_tokens: u64,
    /// Estimated tokens each request could reuse from the previous one's prefix.
    pub predicted_reused_tokens: u64,
    /// `predicted_reused_tokens / estimated_tokens` (0 without requests).
    pub predicted_reuse_ratio: f64,
    /// Sums of recorded usage, where the log records it.
    pub recorded_input_tokens: Option<u64>,
    pub recorded_cache_read_tokens: Option<u64>,
    /// System-prompt changes: in-history appends and head rewrites.
    pub prompt_appends: u64,
    pub prompt_rewrites: u64,
    /// System nodes replaced with empty content (the prompt cleared), at any position.
    pub prompt_clears: u64,
    /// Non-empty replaces of a system node after the head.
    pub prompt_history_rewrites: u64,
    /// Requests whose previous request was not a whole prefix (header changes included).
    pub prefix_breaks: u64,
}

/// Every request of a session.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestReport {
    pub session: String,
    /// Whether the log was read as a normalized recording.
    pub snapshot: bool,
    pub requests: Vec<RequestRow>,
    pub summary: RequestSummary,
}

/// Rebuilds requests from V3 events pushed in seq order.
pub struct RequestAnalyzer {
    session: String,
    snapshot: bool,
    options: RequestOptions,
    fold: SessionFold,
    previous: Option<Sent>,
    /// Surface changes since the previous request.
    changes: Vec<Change>,
    /// Seq and reason of the latest `request/header`.
    header_seq: Option<u64>,
    header_reason: Option<String>,
    /// The header in force as of the last request.
    in_force: InForce,
    /// Seqs of every `compaction/start` and `compaction/summary` so far.
    compaction_seqs: HashSet<u64>,
    /// The last event pushed was a `compaction/summary`.
    after_summary: bool,
    /// The indexes of the rows kept; the others only count in the summary.
    kept: std::ops::Range<u64>,
    rows: Vec<RequestRow>,
    summary: RequestSummary,
}

/// A request as the next one is compared with.
struct Sent {
    messages: Vec<SentMessage>,
    header: Option<Arc<EpochHeader>>,
}

/// The canonical header in force and what the rows take from it, built once per
/// `request/header` and shared by the requests under it.
#[derive(Default)]
struct InForce {
    /// The `request/header` it was built from; `None` before any.
    header_seq: Option<u64>,
    header: Option<Arc<EpochHeader>>,
    config: Value,
    tools: Option<Arc<Value>>,
    tools_tokens: u64,
}

/// One message of a request, with its estimate.
struct SentMessage {
    seq: u64,
    body: Body,
    tokens: u64,
}

/// Where a sent message lives: the event it derives from (shared, not copied), or a copy
/// when a projection changed it.
enum Body {
    Event(Arc<Event>),
    Projected(Box<Message>),
}

/// A surface change between two requests.
struct Change {
    /// Surface position of the first changed node, when the change was made.
    position: usize,
    cause: PrefixBreak,
}

impl PrefixBreak {
    /// The event that broke the prefix.
    pub fn seq(&self) -> u64 {
        match *self {
            PrefixBreak::HeadRewrite { seq }
            | PrefixBreak::ToolsChanged { seq }
            | PrefixBreak::ConfigChanged { seq }
            | PrefixBreak::Compaction { seq }
            | PrefixBreak::Replace { seq }
            | PrefixBreak::Projection { seq } => seq,
        }
    }

    /// A stable kebab-case name for output.
    pub fn name(&self) -> &'static str {
        match self {
            PrefixBreak::HeadRewrite { .. } => "head-rewrite",
            PrefixBreak::ToolsChanged { .. } => "tools-changed",
            PrefixBreak::ConfigChanged { .. } => "config-changed",
            PrefixBreak::Compaction { .. } => "compaction",
            PrefixBreak::Replace { .. } => "replace",
            PrefixBreak::Projection { .. } => "projection",
        }
    }
}

impl Body {
    fn message(&self) -> Option<&Message> {
        match self {
            Body::Event(event) => derive_event_message(event),
            Body::Projected(message) => Some(message),
        }
    }

    /// The same unprojected event: the message is the same without comparing it.
    fn is_same_event(&self, other: &Body) -> bool {
        match (self, other) {
            (Body::Event(a), Body::Event(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl RequestAnalyzer {
    /// An analyzer of a session whose events follow `ctx` (its version's rules).
    pub fn new(session: &str, ctx: RuleContext, options: RequestOptions) -> RequestAnalyzer {
        let snapshot = ctx.snapshot;
        RequestAnalyzer {
            session: session.to_owned(),
            snapshot,
            options,
            fold: SessionFold::new(ctx),
            previous: None,
            changes: Vec::new(),
            header_seq: None,
            header_reason: None,
            in_force: InForce::default(),
            compaction_seqs: HashSet::new(),
            after_summary: false,
            kept: 0..u64::MAX,
            rows: Vec::new(),
            summary: RequestSummary::default(),
        }
    }

    /// Keeps only the rows whose index is in `rows` (a page); the summary still counts every
    /// request. A server answers pages so that no answer grows with the square of a session
    /// (each row with bodies carries its whole message list).
    pub fn keep_rows(mut self, rows: std::ops::Range<u64>) -> RequestAnalyzer {
        self.kept = rows;
        self
    }

    /// Folds the next event; a request row is produced when it settles a model call.
    pub fn push(&mut self, event: &Event) -> Result<(), Violation> {
        self.push_shared(Arc::new(event.clone()))
    }

    /// [`RequestAnalyzer::push`] without copying the event.
    pub fn push_shared(&mut self, event: Arc<Event>) -> Result<(), Violation> {
        // A refused event changes nothing, not even the rows.
        let checked = self.fold.check(&event)?;
        if matches!(
            event.kind,
            EventType::AssistantMessage | EventType::AssistantAttempt
        ) {
            self.settle(&event);
        }
        self.observe(&event);
        let generation = self.fold.content_generation();
        let replaces = matches!(event.surface_op, Some(SurfaceOp::Replace { .. }));
        self.fold.apply(Arc::clone(&event), checked);
        if self.fold.content_generation() != generation && !replaces {
            // Only a message projection changes messages without a replace.
            let position = self.projection_position(&event);
            let cause = PrefixBreak::Projection { seq: event.seq };
            self.changes.push(Change { position, cause });
        }
        self.after_summary = event.kind == EventType::CompactionSummary;
        Ok(())
    }

    /// The rows so far.
    pub fn rows(&self) -> &[RequestRow] {
        &self.rows
    }

    pub fn finish(self) -> RequestReport {
        let mut summary = self.summary;
        summary.predicted_reuse_ratio = if summary.estimated_tokens == 0 {
            0.0
        } else {
            summary.predicted_reused_tokens as f64 / summary.estimated_tokens as f64
        };
        RequestReport {
            session: self.session,
            snapshot: self.snapshot,
            requests: self.rows,
            summary,
        }
    }

    /// Records what an event (already checked, not yet applied) changes for the next
    /// request's prefix and for the prompt counts.
    fn observe(&mut self, event: &Event) {
        match &event.data {
            EventData::RequestHeader(data) => {
                self.header_seq = Some(event.seq);
                self.header_reason = Some(data.reason.clone());
            }
            EventData::CompactionStart(_) | EventData::CompactionSummary(_) => {
                self.compaction_seqs.insert(event.seq);
            }
            _ => {}
        }
        let surface = self.fold.admission().surface();
        match event.surface_op {
            // The first system node is the head; a later one is an in-history append.
            Some(SurfaceOp::Append)
                if event.kind == EventType::SystemMessage && !surface.is_empty() =>
            {
                self.summary.prompt_appends += 1;
            }
            Some(SurfaceOp::Replace { start_seq, .. }) => {
                // The check passed, so the endpoint is live.
                let position = surface.position(start_seq).unwrap_or(0);
                if event.kind == EventType::SystemMessage {
                    self.count_prompt_replace(event, position);
                }
                let cause = self.replace_cause(event, position);
                self.changes.push(Change { position, cause });
            }
            Some(SurfaceOp::Append) | None => {}
        }
    }

    fn count_prompt_replace(&mut self, event: &Event, position: usize) {
        let empty = event.message().is_none_or(|m| m.content.is_empty());
        let counter = match (empty, position) {
            (true, _) => &mut self.summary.prompt_clears,
            (false, 0) => &mut self.summary.prompt_rewrites,
            (false, _) => &mut self.summary.prompt_history_rewrites,
        };
        *counter += 1;
    }

    fn replace_cause(&self, event: &Event, position: usize) -> PrefixBreak {
        let seq = event.seq;
        if event.kind == EventType::SystemMessage && position == 0 {
            return PrefixBreak::HeadRewrite { seq };
        }
        let cites_compaction = event
            .source_event_seqs
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|s| self.compaction_seqs.contains(s));
        if event.kind == EventType::UserMessage && (self.after_summary || cites_compaction) {
            return PrefixBreak::Compaction { seq };
        }
        PrefixBreak::Replace { seq }
    }

    /// The earliest surface position a projection event targets (0 when it names none).
    fn projection_position(&self, event: &Event) -> usize {
        let surface = self.fold.admission().surface();
        match &event.data {
            EventData::ImageOffload(data) => data
                .targets
                .iter()
                .filter_map(|t| surface.position(t.seq))
                .min()
                .unwrap_or(0),
            _ => 0,
        }
    }

    /// Takes the request that `event` settles: the body before the event is folded.
    fn settle(&mut self, event: &Event) {
        let (turn, step, settled, usage) = match &event.data {
            EventData::AssistantMessage(d) => {
                let stream = d.stream.as_deref().unwrap_or_default();
                let usage = d.usage.clone().or_else(|| stream_usage(stream));
                (d.turn, d.step, "message", usage)
            }
            EventData::AssistantAttempt(d) => (d.turn, d.step, "attempt", stream_usage(&d.stream)),
            _ => return,
        };
        self.refresh_in_force();
        let header = self.in_force.header.clone();
        let tools_tokens = self.in_force.tools_tokens;
        let messages = self.sent_messages();
        let message_tokens: u64 = messages.iter().map(|m| m.tokens).sum();
        let prefix = self.prefix(&messages, header.as_ref(), tools_tokens);
        let injected = messages
            .iter()
            .enumerate()
            .filter_map(|(message_idx, m)| {
                let message = m.body.message()?;
                let source = message.source.as_ref()?;
                crate::sources::is_injected(message).then(|| Injected {
                    message_idx,
                    source: crate::sources::source_label(source),
                })
            })
            .collect();
        let index = self.summary.requests;
        let kept = self.kept.contains(&index);
        let row = RequestRow {
            index,
            seq: event.seq,
            turn,
            step,
            settled,
            reason: self.header_reason.clone(),
            config: self.in_force.config.clone(),
            tools: self.in_force.tools.clone(),
            adapter_defaults: header.as_ref().and_then(|h| h.adapter_defaults.clone()),
            context: self
                .fold
                .request_context()
                .map(|c| json_of(serde_json::to_value(c))),
            message_count: messages.len(),
            estimated_tokens: message_tokens + tools_tokens,
            tools_tokens,
            prefix,
            usage,
            messages: (self.options.bodies && kept).then(|| {
                let bodies = messages.iter().filter_map(|m| m.body.message());
                bodies.cloned().collect()
            }),
            injected,
        };
        debug_assert!(row.prefix.estimated_tokens <= row.estimated_tokens);
        self.count(&row);
        if kept {
            self.rows.push(row);
        }
        self.previous = Some(Sent { messages, header });
        self.changes.clear();
    }

    /// Rebuilds [`InForce`] when a `request/header` came since it was built.
    fn refresh_in_force(&mut self) {
        if self.in_force.header_seq == self.header_seq {
            return;
        }
        let header = self.fold.request_header().cloned().map(Arc::new);
        let tools = header.as_ref().and_then(|h| h.tools.clone());
        self.in_force = InForce {
            header_seq: self.header_seq,
            config: header
                .as_ref()
                .map_or(Value::Null, |h| json_of(serde_json::to_value(&h.config))),
            tools_tokens: tools.as_ref().map_or(0, estimate_tools),
            tools: tools.map(Arc::new),
            header,
        };
        debug_assert_eq!(self.in_force.header.is_some(), self.header_seq.is_some());
    }

    fn count(&mut self, row: &RequestRow) {
        let summary = &mut self.summary;
        summary.requests += 1;
        summary.estimated_tokens += row.estimated_tokens;
        summary.predicted_reused_tokens += row.prefix.estimated_tokens;
        summary.prefix_breaks += u64::from(row.prefix.broken_by.is_some());
        if let Some(usage) = &row.usage {
            let input = summary.recorded_input_tokens.get_or_insert(0);
            *input += usage.input_tokens;
            if let Some(cache_read) = usage.cache_read_tokens {
                *summary.recorded_cache_read_tokens.get_or_insert(0) += cache_read;
            }
        }
    }

    /// The derived messages now, each with its estimate. An estimate is reused from the
    /// previous request when the same event sits at the same position, so that a session of
    /// appends prices each message once.
    fn sent_messages(&self) -> Vec<SentMessage> {
        let previous = self.previous.as_ref().map_or(&[][..], |p| &p.messages[..]);
        let mut messages: Vec<SentMessage> = Vec::with_capacity(previous.len() + 4);
        for (seq, message) in self.fold.node_messages() {
            let Some(message) = message else { continue };
            let body = match self.fold.live_event(seq) {
                Some(event) if derive_event_message(event).is_some_and(|m| ptr::eq(m, message)) => {
                    Body::Event(Arc::clone(event))
                }
                _ => Body::Projected(Box::new(message.clone())),
            };
            let tokens = match previous.get(messages.len()) {
                Some(p) if p.seq == seq && p.body.is_same_event(&body) => p.tokens,
                _ => estimate_message(message),
            };
            messages.push(SentMessage { seq, body, tokens });
        }
        messages
    }

    /// The prefix `messages` under `header` shares with the previous request.
    fn prefix(
        &self,
        messages: &[SentMessage],
        header: Option<&Arc<EpochHeader>>,
        tools_tokens: u64,
    ) -> Prefix {
        let Some(previous) = &self.previous else {
            return Prefix {
                messages: 0,
                estimated_tokens: 0,
                broken_by: None,
            };
        };
        // The same shared header is equal without comparing its tools.
        let same_header = match (&previous.header, header) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (a, b) => a.is_none() && b.is_none(),
        };
        let cause = if same_header {
            None
        } else {
            header_break(
                previous.header.as_deref(),
                header.map(|h| &**h),
                self.header_seq,
            )
        };
        if let Some(cause) = cause {
            return Prefix {
                messages: 0,
                estimated_tokens: 0,
                broken_by: Some(cause),
            };
        }
        let n_common = common_prefix(&previous.messages, messages);
        assert!(n_common <= previous.messages.len() && n_common <= messages.len());
        let common_tokens: u64 = messages[..n_common].iter().map(|m| m.tokens).sum();
        // A shorter common prefix needs a surface change in between; without one (which the
        // fold rules out) the break is left unnamed rather than invented.
        let broken_by = if n_common < previous.messages.len() {
            self.earliest_change()
        } else {
            None
        };
        Prefix {
            messages: n_common,
            estimated_tokens: tools_tokens + common_tokens,
            broken_by,
        }
    }

    /// The change at the earliest surface position since the previous request; the first in
    /// seq order among changes at the same position.
    fn earliest_change(&self) -> Option<PrefixBreak> {
        let mut earliest: Option<&Change> = None;
        for change in &self.changes {
            if earliest.is_none_or(|e| change.position < e.position) {
                earliest = Some(change);
            }
        }
        earliest.map(|c| c.cause.clone())
    }
}

/// The header change between two requests, when the headers differ: a configuration (or
/// adapter-defaults) change wins over a tools change, since either alone breaks at 0.
fn header_break(
    previous: Option<&EpochHeader>,
    current: Option<&EpochHeader>,
    header_seq: Option<u64>,
) -> Option<PrefixBreak> {
    // Headers can only differ after a `request/header`.
    let seq = header_seq?;
    match (previous, current) {
        (None, None) => None,
        (Some(a), Some(b)) if headers_equal(a, b) => None,
        (Some(a), Some(b)) if headers_equal(&without_tools(a), &without_tools(b)) => {
            Some(PrefixBreak::ToolsChanged { seq })
        }
        _ => Some(PrefixBreak::ConfigChanged { seq }),
    }
}

fn without_tools(header: &EpochHeader) -> EpochHeader {
    EpochHeader {
        config: header.config.clone(),
        adapter_defaults: header.adapter_defaults.clone(),
        tools: None,
        system: header.system.clone(),
        extra: Default::default(),
    }
}

/// The number of leading messages two requests share: the same event at the same position,
/// or messages with equal `id`, `role` and `content`.
fn common_prefix(previous: &[SentMessage], current: &[SentMessage]) -> usize {
    previous
        .iter()
        .zip(current)
        .take_while(|(a, b)| {
            a.body.is_same_event(&b.body) || same_message(a.body.message(), b.body.message())
        })
        .count()
}

fn same_message(a: Option<&Message>, b: Option<&Message>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.id == b.id && a.role == b.role && a.content == b.content,
        _ => false,
    }
}

/// The last `usage` chunk of a stream.
fn stream_usage(stream: &[StreamRecord]) -> Option<TokenUsage> {
    stream.iter().rev().find_map(|record| match record {
        StreamRecord::Chunk(raw) => match &raw.chunk {
            StreamChunk::Usage(chunk) => Some(chunk.usage.clone()),
            _ => None,
        },
        _ => None,
    })
}

/// A format value as JSON, for the row; the format's types always serialize (string keys).
fn json_of(value: serde_json::Result<Value>) -> Value {
    value.unwrap_or(Value::Null)
}

/// The requests of a file (any version, migrated in memory) or of a stored session: any
/// [`Replay`] source.
pub fn requests<R: Replay>(source: R, options: RequestOptions) -> Result<RequestReport, R::Error> {
    let analyzer = source
        .replay(|opening| RequestAnalyzer::new(opening.session(), opening.rules(), options))?;
    Ok(analyzer.finish())
}

impl Projection for RequestAnalyzer {
    type Error = Violation;

    fn push(&mut self, event: Arc<Event>) -> Result<Flow, Violation> {
        self.push_shared(event).map(|()| Flow::Continue)
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    fn header(value: Value) -> EpochHeader {
        serde_json::from_value(value).unwrap()
    }

    // Goal: a header change breaks at 0 and names what changed, config winning over tools.
    // Method: pairs of headers that differ in tools, in config, in adapter flags, in both,
    // and not at all.
    #[test]
    fn header_changes_are_classified() {
        let base =
            header(json!({"config": {"provider": "p", "model": "m"}, "tools": [{"name": "a"}]}));
        let tools =
            header(json!({"config": {"provider": "p", "model": "m"}, "tools": [{"name": "b"}]}));
        let model =
            header(json!({"config": {"provider": "p", "model": "n"}, "tools": [{"name": "a"}]}));
        let both = header(json!({"config": {"provider": "p", "model": "n"}}));
        let flags = header(json!({"config": {"provider": "p", "model": "m"},
            "adapterDefaults": {"maxTokens": true}, "tools": [{"name": "a"}]}));
        let cases = [
            (&base, &base, None),
            (&base, &tools, Some(PrefixBreak::ToolsChanged { seq: 7 })),
            (&base, &model, Some(PrefixBreak::ConfigChanged { seq: 7 })),
            (&base, &both, Some(PrefixBreak::ConfigChanged { seq: 7 })),
            (&base, &flags, Some(PrefixBreak::ConfigChanged { seq: 7 })),
        ];
        for (a, b, expected) in cases {
            assert_eq!(header_break(Some(a), Some(b), Some(7)), expected);
        }
        assert_eq!(
            header_break(None, Some(&base), Some(3)),
            Some(PrefixBreak::ConfigChanged { seq: 3 })
        );
        assert_eq!(header_break(None, None, None), None);
    }

    // Goal: an attempt's usage is the last usage chunk of its stream. Method: a stream with
    // two usage chunks and a finish, and one without usage.
    #[test]
    fn stream_usage_is_the_last_usage_chunk() {
        let chunk = |usage: Value| json!({"type": "chunk", "time": 0, "chunk": usage});
        let stream: Vec<StreamRecord> = serde_json::from_value(json!([
            chunk(json!({"type": "usage", "usage": {"inputTokens": 1, "outputTokens": 0}})),
            chunk(
                json!({"type": "usage", "usage": {"inputTokens": 9, "outputTokens": 2,
                "cacheReadTokens": 4}})
            ),
            chunk(json!({"type": "finish", "reason": {"kind": "stop"}})),
        ]))
        .unwrap();
        let usage = stream_usage(&stream).unwrap();
        assert_eq!((usage.input_tokens, usage.cache_read_tokens), (9, Some(4)));
        assert_eq!(stream_usage(&stream[2..]), None);
    }
}

//! A deterministic synthetic V3 session generator, for benchmarks and engine tests.
//!
//! [`Generator`] produces a valid V3 session (every event passes [`Admission`] under the V3
//! rules) of exactly [`GenOptions::events`] events, one append batch at a time: turns of steps
//! whose assistant messages embed realistic packed streams, tool calls and their results,
//! retried attempts, system-prompt rewrites and in-history appends, compactions and
//! tool-result prunes, and a few log-only plugin events.
//!
//! The same options give the same events, byte for byte: the only source of variation is a
//! splitmix64 stream seeded from [`GenOptions::seed`], and time is a simulated clock that
//! starts at a fixed epoch and only moves forward.
//!
//! The generator keeps a model of the surface (the live node seqs, their kinds and estimated
//! tokens) that mirrors [`crate::surface::Surface`], so that every replace it writes names live
//! endpoints, never shadows the system head, and never splits a tool call from its results.
//!
//! [`Admission`]: crate::Admission

use serde_json::{json, Number, Value};

use crate::event::{Event, EventData, EventType, SurfaceOp};
use crate::header::SessionHeader;
use crate::json::Extra;
use crate::message::{ContentBlock, Message, Source, TextBlock, ToolCallBlock, ToolResultBlock};
use crate::payload::{
    AssistantAttemptData, AssistantMessageData, CallConfig, CompactionEndData, CompactionPruneData,
    CompactionStartData, CompactionSummaryData, EpochHeader, RequestContextData, RequestHeaderData,
    SeqRange, StepRef, SystemMessageData, ToolCallData, ToolResultData, TurnEnd, TurnStart,
};
use crate::stream::{
    BlockEnd, BlockStart, Finish, RawChunk, StreamChunk, StreamRecord, TextChunks, TokenUsage,
    ToolCallChunks, UsageChunk,
};
use crate::surface::NodeKind;

/// `createdAt` of every generated header; the simulated clock starts just after it.
const CREATED_AT_MS: u64 = 1_785_000_000_000;
/// Mixed into the seed to derive the session id, so that it is not the first draw of the
/// event stream.
const SESSION_ID_SALT: u64 = 0x5e55_1011_d0c5_e7a1;
const CWD: &str = "/work/gen";
const PROVIDER: &str = "deepseek-official";
const MODEL: &str = "deepseek-v4-flash";
const CONTEXT_WINDOW_TOKENS: u64 = 1_000_000;
const PROMPT_PLUGIN: &str = "@deepseek-ai/dsh-system-prompt";
/// Estimated surface tokens above which the next gap between steps compacts.
const SURFACE_TOKENS_MAX: u64 = 60_000;
/// Bounds of the tail a compaction keeps, in estimated tokens.
const RETAIN_TOKENS_MIN: u64 = 8_000;
const RETAIN_TOKENS_MAX: u64 = 20_000;
/// Nodes a compaction always leaves at the tail of the surface.
const RETAIN_NODES_MIN: usize = 4;
/// Tokens a request carries besides the surface: tool schemas and framing.
const REQUEST_OVERHEAD_TOKENS: u64 = 3_000;
/// Most steps in one turn; the turn's last step answers without tool calls.
const TURN_STEPS_MAX: u64 = 12;
const PRESETS: [&str; 3] = ["workspace-write", "read-only", "danger-full-access"];
const RETRY_POLICY_KEY: &str =
    r#"["normal",2,["EMPTY_RESPONSE","RATE_LIMIT","SERVER","TIMEOUT","TRANSPORT"],1,1,0]"#;
const EMPTY_RESPONSE: &str = "model returned a completed response with no content";
const CHECKPOINT_OPENING: &str = "This is an automatically generated checkpoint condensing an \
     earlier span of the conversation to free up context. The summary below stands in for the \
     original messages; continue the work from where it left off, without acknowledging this \
     checkpoint.\n\n<compacted-summary>";
const CHECKPOINT_CLOSING: &str = "</compacted-summary>";
const PRUNED_OUTPUT: &str = "[output pruned]";

/// What to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenOptions {
    /// Exactly this many events are produced, over all batches.
    pub events: u64,
    /// Everything else follows from it.
    pub seed: u64,
}

/// Writes one synthetic V3 session, batch by batch.
#[derive(Debug, Clone)]
pub struct Generator {
    options: GenOptions,
    rng: Rng,
    /// Events handed out so far.
    emitted: u64,
    /// The seq of the next event built.
    seq: u64,
    /// The simulated clock, epoch ms; it never goes back.
    time: i64,
    /// The open (or last) turn and step numbers.
    turn: u64,
    step: u64,
    turn_open: bool,
    /// The open turn's last step answered without tool calls: the turn ends next.
    turn_done: bool,
    /// The step after which the open turn answers without tool calls.
    turn_steps: u64,
    turns_completed: u64,
    surface: Vec<Live>,
    /// Seq of the protected system head (surface position 0), once written.
    head: Option<u64>,
    header_logged: bool,
    context_logged: bool,
    /// Whether the tool set in force includes the optional tool.
    extra_tool: bool,
    /// Whether the route in force says `systemPromptUpdate: "in-history"`.
    in_history: bool,
    /// The surface was rewritten since the last request: the next request starts a series.
    need_series: bool,
    /// The runtime context changed: the next turn's first step injects a snapshot of it.
    runtime_due: bool,
    preset: usize,
    prompt_revision: u64,
    /// The first user prompt and the title derived from it.
    title: Option<(u64, String)>,
    /// Input tokens the provider has cached, as of the last request.
    cached_tokens: u64,
    gaps: Gaps,
    /// The tool lists of the two tool sets, built once.
    tools: [Value; 2],
    /// The budget is too small for one whole turn: the natural log is cut at the budget.
    truncating: bool,
}

/// One live surface node, as the generator models it.
#[derive(Debug, Clone)]
struct Live {
    seq: u64,
    kind: NodeKind,
    tokens: u64,
    /// An empty system node (a cleared in-history prompt).
    blank: bool,
    /// An appended tool result that has not been pruned: the payload a rewrite copies.
    tool: Option<Box<ToolResultData>>,
}

/// Steps since each optional feature last happened. A feature is forced once its gap
/// reaches a maximum, so that every kind of event appears within a few thousand events.
#[derive(Debug, Clone, Default)]
struct Gaps {
    retry: u64,
    head_rewrite: u64,
    history_append: u64,
    route: u64,
    tools: u64,
    prune: u64,
    compaction: u64,
}

/// Everything one step will hold, decided before any event is built so that its size is
/// known: a step that would not fit the remaining budget is shrunk or skipped.
#[derive(Debug, Clone, Default)]
struct StepPlan {
    /// The session's first step: the system head and the title.
    head: bool,
    title: bool,
    /// The turn's first step: the user prompt.
    prompt: bool,
    runtime: bool,
    steer: bool,
    /// A tool result to prune (its seq).
    prune: Option<u64>,
    /// Later non-empty system nodes to clear before the head rewrite.
    empties: Vec<u64>,
    head_rewrite: bool,
    history_append: bool,
    tools_change: bool,
    route_change: bool,
    /// Derived by [`Generator::resolve`].
    header: Option<&'static str>,
    starts_series: bool,
    context: bool,
    retry: bool,
    tool_calls: u64,
}

impl StepPlan {
    /// The number of events the step holds.
    fn size(&self) -> u64 {
        let flags = [
            self.head,
            self.title,
            self.prompt,
            self.runtime,
            self.steer,
            self.head_rewrite,
            self.history_append,
            self.header.is_some(),
            self.context,
        ];
        let flagged = flags.iter().filter(|flag| **flag).count() as u64;
        let prune = 2 * u64::from(self.prune.is_some());
        let retry = 3 * u64::from(self.retry);
        // step/start, assistant/message and step/end, then the optional parts.
        3 + flagged + self.empties.len() as u64 + prune + retry + 2 * self.tool_calls
    }

    /// The smallest step with the same obligations: head and prompt stay, options go.
    fn minimal(&self) -> StepPlan {
        StepPlan {
            head: self.head,
            prompt: self.prompt,
            ..StepPlan::default()
        }
    }
}

/// A tool invocation: what the model asks for and what the tool answers.
struct ToolUse {
    name: &'static str,
    arguments: String,
    output: String,
}

impl Generator {
    /// A generator at the start of its session.
    pub fn new(options: GenOptions) -> Generator {
        Generator {
            options,
            rng: Rng::new(options.seed),
            emitted: 0,
            seq: 0,
            time: i64::try_from(CREATED_AT_MS).expect("the fixed epoch is a safe integer") + 1_000,
            turn: 0,
            step: 0,
            turn_open: false,
            turn_done: false,
            turn_steps: 0,
            turns_completed: 0,
            surface: Vec::new(),
            head: None,
            header_logged: false,
            context_logged: false,
            extra_tool: false,
            in_history: false,
            need_series: false,
            runtime_due: true,
            preset: 0,
            prompt_revision: 0,
            title: None,
            cached_tokens: 0,
            gaps: Gaps::default(),
            tools: [tool_schemas(false), tool_schemas(true)],
            truncating: false,
        }
    }

    /// The V3 header: an id derived from the seed, a fixed `createdAt`, cwd `/work/gen`.
    pub fn header(&self) -> SessionHeader {
        let id = Rng::new(self.options.seed ^ SESSION_ID_SALT).next_u64();
        let mut header = SessionHeader::new_v3(format!("gen-{id:016x}"), CREATED_AT_MS);
        header.cwd = Some(CWD.to_owned());
        header
    }

    /// The next append batch, or `None` once `events` events have been produced. A batch is
    /// a whole step, a turn boundary, or a compaction transaction; seqs are dense from 0.
    pub fn next_batch(&mut self) -> Option<Vec<Event>> {
        let remaining = self.options.events - self.emitted;
        if remaining == 0 {
            return None;
        }
        let mut batch = if self.turn_open {
            self.batch_in_turn(remaining)
        } else {
            self.batch_between_turns(remaining)
        };
        assert!(!batch.is_empty(), "every batch holds at least one event");
        if batch.len() as u64 > remaining {
            assert!(
                self.truncating,
                "only a log cut at its budget overruns a batch"
            );
            batch.truncate(usize::try_from(remaining).expect("smaller than a batch length"));
        }
        assert_eq!(
            batch[0].seq, self.emitted,
            "seqs are dense from 0 across batches"
        );
        self.emitted += batch.len() as u64;
        Some(batch)
    }

    /// Opens a turn when a whole one fits the budget; otherwise pads with log-only events,
    /// or, before the first turn, cuts the natural log at the budget.
    fn batch_between_turns(&mut self, remaining: u64) -> Vec<Event> {
        // turn/start, the smallest first step, turn/end.
        let first_step = StepPlan {
            head: self.head.is_none(),
            prompt: true,
            ..StepPlan::default()
        };
        let turn_cost = 1 + self.resolve(first_step).size() + 1;
        if remaining < turn_cost {
            if self.turns_completed > 0 {
                return self.padding(remaining);
            }
            self.truncating = true;
        }
        let mut batch = Vec::with_capacity(2);
        let preset_change = self.turn == 0 || self.rng.permille(100);
        if preset_change && (self.truncating || remaining > turn_cost) {
            if self.turn > 0 {
                self.preset = (self.preset + 1) % PRESETS.len();
            }
            self.advance(200, 5_000);
            let preset = json!({ "preset": PRESETS[self.preset] });
            self.push_other(&mut batch, EventType::PermissionPreset, preset);
            self.runtime_due = true;
        }
        self.advance(3_000, 90_000);
        self.turn += 1;
        self.step = 0;
        self.turn_open = true;
        self.turn_done = false;
        self.turn_steps = self.rng.range(1, TURN_STEPS_MAX);
        let data = TurnStart {
            turn: self.turn,
            extra: Extra::new(),
        };
        self.push(&mut batch, EventData::TurnStart(Box::new(data)));
        batch
    }

    /// Log-only plugin events that fill a budget too small for another whole turn.
    fn padding(&mut self, remaining: u64) -> Vec<Event> {
        let mut batch = Vec::new();
        for pad_idx in 0..remaining {
            self.advance(500, 5_000);
            match self.title.clone() {
                Some((seq, title)) if pad_idx % 2 == 0 => {
                    let data = json!({
                        "title": title, "messageSeqs": [seq], "source": { "kind": "fallback" },
                    });
                    self.push_other(&mut batch, EventType::SessionTitle, data);
                }
                _ => {
                    let preset = json!({ "preset": PRESETS[self.preset] });
                    self.push_other(&mut batch, EventType::PermissionPreset, preset);
                }
            }
        }
        batch
    }

    /// A compaction, a step, or the turn's end, whichever is due and fits the budget.
    fn batch_in_turn(&mut self, remaining: u64) -> Vec<Event> {
        // Whatever is built inside the turn leaves room for its turn/end.
        let truncating = self.truncating;
        let fits = |size: u64| truncating || size < remaining;
        if self.step > 0 && fits(4) && self.compaction_due() {
            if let Some(end_idx) = self.compaction_end() {
                return self.compaction(end_idx);
            }
        }
        if self.turn_done {
            return self.turn_end();
        }
        let mut plan = self.plan_step();
        if !fits(plan.size()) {
            plan = self.resolve(plan.minimal());
        }
        if !fits(plan.size()) {
            return self.turn_end();
        }
        self.build_step(plan)
    }

    fn turn_end(&mut self) -> Vec<Event> {
        let mut batch = Vec::with_capacity(1);
        self.advance(5, 50);
        let reason = json!({ "kind": "completed" });
        let data = TurnEnd {
            turn: self.turn,
            reason,
            extra: Extra::new(),
        };
        self.push(&mut batch, EventData::TurnEnd(Box::new(data)));
        self.turn_open = false;
        self.turns_completed += 1;
        batch
    }

    /// Decides what the next step holds.
    fn plan_step(&mut self) -> StepPlan {
        let session_first = self.head.is_none();
        let turn_first = self.step == 0;
        let mut plan = StepPlan {
            head: session_first,
            title: session_first,
            prompt: turn_first,
            runtime: session_first || (turn_first && self.runtime_due),
            ..StepPlan::default()
        };
        if !session_first {
            self.plan_options(&mut plan);
        }
        plan.retry = self.gaps.retry >= 50 || self.rng.permille(30);
        // The step being planned is `self.step + 1`; the turn's last step calls no tools.
        plan.tool_calls = if self.step + 1 < self.turn_steps {
            match self.rng.range(0, 19) {
                0..=11 => 1,
                12..=16 => 2,
                _ => 3,
            }
        } else {
            0
        };
        self.resolve(plan)
    }

    /// The optional parts of a step after the session's first.
    fn plan_options(&mut self, plan: &mut StepPlan) {
        plan.steer = !plan.prompt && self.rng.permille(25);
        if self.in_history {
            plan.history_append = self.gaps.history_append >= 12 || self.rng.permille(60);
        } else if self.gaps.head_rewrite >= 60 || self.rng.permille(12) {
            plan.head_rewrite = true;
            plan.empties = self.surface[1..]
                .iter()
                .filter(|node| node.kind == NodeKind::System && !node.blank)
                .map(|node| node.seq)
                .collect();
        }
        let route_gap_max = if self.in_history { 30 } else { 70 };
        plan.route_change = !plan.history_append
            && !plan.head_rewrite
            && self.gaps.route >= 10
            && (self.gaps.route >= route_gap_max || self.rng.permille(8));
        plan.tools_change = self.gaps.tools >= 100 || self.rng.permille(8);
        if self.gaps.prune >= 60 || self.rng.permille(20) {
            plan.prune = self.prune_target();
        }
    }

    /// Derives the request header and context a plan needs (spec §7.5 rule 5, §8.3).
    fn resolve(&self, mut plan: StepPlan) -> StepPlan {
        let series = self.need_series || plan.head_rewrite || plan.prune.is_some();
        plan.header = if !self.header_logged {
            Some("initial")
        } else if plan.tools_change {
            Some("change")
        } else if series {
            Some("series")
        } else {
            None
        };
        plan.starts_series = self.header_logged && plan.tools_change && series;
        plan.context = !self.context_logged || plan.route_change;
        plan
    }

    fn build_step(&mut self, plan: StepPlan) -> Vec<Event> {
        let mut batch = Vec::with_capacity(usize::try_from(plan.size()).expect("a small count"));
        self.step += 1;
        self.advance(5, 50);
        self.push(&mut batch, EventData::StepStart(Box::new(self.step_ref())));
        if let Some(target) = plan.prune {
            self.push_prune(&mut batch, target);
        }
        self.push_system(&mut batch, &plan);
        self.push_user(&mut batch, &plan);
        self.push_request(&mut batch, &plan);
        if plan.retry {
            self.push_retry(&mut batch);
        }
        let uses = self.push_assistant(&mut batch, plan.tool_calls);
        self.push_tools(&mut batch, uses);
        self.advance(1, 20);
        self.push(&mut batch, EventData::StepEnd(Box::new(self.step_ref())));
        assert_eq!(
            batch.len() as u64,
            plan.size(),
            "a step holds exactly what its plan counted"
        );
        self.note_gaps(&plan);
        self.turn_done = plan.tool_calls == 0;
        batch
    }

    fn note_gaps(&mut self, plan: &StepPlan) {
        let next = |happened: bool, gap: u64| if happened { 0 } else { gap + 1 };
        let gaps = &mut self.gaps;
        gaps.retry = next(plan.retry, gaps.retry);
        gaps.route = next(plan.route_change, gaps.route);
        gaps.tools = next(plan.tools_change, gaps.tools);
        gaps.prune = next(plan.prune.is_some(), gaps.prune);
        gaps.compaction += 1;
        // These two count only the steps in which they could have happened.
        if self.in_history {
            gaps.history_append = next(plan.history_append, gaps.history_append);
        } else {
            gaps.head_rewrite = next(plan.head_rewrite, gaps.head_rewrite);
        }
    }

    /// `compaction/prune`, then the tool result again with its output replaced.
    fn push_prune(&mut self, batch: &mut Vec<Event>, target: u64) {
        let position = self
            .position(target)
            .expect("the prune target was chosen from the surface");
        let node = &self.surface[position];
        let tokens = node.tokens;
        let mut data = node
            .tool
            .clone()
            .expect("prune targets are unpruned tool results");
        let range = SeqRange {
            start: target,
            end: target,
            extra: Extra::new(),
        };
        let prune = CompactionPruneData {
            shadowed_range: range,
            shadowed_seqs: vec![target],
            shadowed_token_count: tokens,
            extra: Extra::new(),
        };
        self.push(batch, EventData::CompactionPrune(Box::new(prune)));
        match data.message.content.first_mut() {
            Some(ContentBlock::ToolResult(block)) => {
                block.content = vec![ContentBlock::text(PRUNED_OUTPUT)];
            }
            _ => panic!("generated tool results hold one tool-result block"),
        }
        let op = SurfaceOp::Replace {
            start_seq: target,
            end_seq: target,
        };
        self.push_surface(batch, EventData::ToolResult(data), op, Some(vec![target]));
    }

    /// The system head, cleared in-history nodes, a head rewrite, an in-history append.
    fn push_system(&mut self, batch: &mut Vec<Event>, plan: &StepPlan) {
        if plan.head {
            let content = vec![ContentBlock::text(self.system_prompt())];
            let data = self.system_data(content);
            self.head = Some(self.push_surface(batch, data, SurfaceOp::Append, None));
        }
        for &seq in &plan.empties {
            let data = self.system_data(Vec::new());
            let op = SurfaceOp::Replace {
                start_seq: seq,
                end_seq: seq,
            };
            self.push_surface(batch, data, op, Some(vec![seq]));
        }
        if plan.head_rewrite {
            let head = self
                .head
                .expect("a head rewrite is planned only once the head exists");
            let content = vec![ContentBlock::text(self.system_prompt())];
            let data = self.system_data(content);
            let op = SurfaceOp::Replace {
                start_seq: head,
                end_seq: head,
            };
            self.head = Some(self.push_surface(batch, data, op, Some(vec![head])));
            assert_eq!(
                self.surface[0].seq,
                self.head.expect("just set"),
                "the head stays at 0"
            );
        }
        if plan.history_append {
            self.prompt_revision += 1;
            let words = self.rng.range(40, 160);
            let text = format!(
                "Updated instructions, revision {}.\n\n{}",
                self.prompt_revision,
                prose(&mut self.rng, words)
            );
            let data = self.system_data(vec![ContentBlock::text(text)]);
            self.push_surface(batch, data, SurfaceOp::Append, None);
        }
    }

    /// The user prompt (and the title it gives), a runtime-context snapshot, a steering note.
    fn push_user(&mut self, batch: &mut Vec<Event>, plan: &StepPlan) {
        if plan.prompt {
            let words = self.rng.range(8, 90);
            let text = prose(&mut self.rng, words);
            let title: String = text.split(' ').take(5).collect::<Vec<_>>().join(" ");
            let message = self.message("user", source("user"), vec![ContentBlock::text(text)]);
            let data = EventData::UserMessage(Box::new(message));
            let seq = self.push_surface(batch, data, SurfaceOp::Append, None);
            if plan.title {
                let data = json!({
                    "title": title, "messageSeqs": [seq], "source": { "kind": "fallback" },
                });
                self.push_other(batch, EventType::SessionTitle, data);
                self.title = Some((seq, title));
            }
        }
        if plan.runtime {
            let message = self.runtime_context();
            self.push_surface(
                batch,
                EventData::UserMessage(Box::new(message)),
                SurfaceOp::Append,
                None,
            );
            self.runtime_due = false;
        }
        if plan.steer {
            self.advance(1_000, 20_000);
            let words = self.rng.range(5, 30);
            let text = prose(&mut self.rng, words);
            let message = self.message("user", source("user"), vec![ContentBlock::text(text)]);
            self.push_surface(
                batch,
                EventData::UserMessage(Box::new(message)),
                SurfaceOp::Append,
                None,
            );
        }
    }

    /// `request/header` and `request/context`, each only when the plan says it changed.
    fn push_request(&mut self, batch: &mut Vec<Event>, plan: &StepPlan) {
        if let Some(reason) = plan.header {
            if plan.tools_change {
                self.extra_tool = !self.extra_tool;
            }
            let config = CallConfig {
                provider: Some(PROVIDER.to_owned()),
                model: MODEL.to_owned(),
                reasoning_effort: None,
                temperature: None,
                max_tokens: None,
                stop: None,
                extra: Extra::new(),
            };
            let header = EpochHeader {
                config,
                adapter_defaults: None,
                tools: Some(self.tools[usize::from(self.extra_tool)].clone()),
                system: None,
                extra: Extra::new(),
            };
            let starts_series = plan.starts_series.then_some(true);
            let data = RequestHeaderData {
                header,
                reason: reason.to_owned(),
                starts_series,
                extra: Extra::new(),
            };
            self.push(batch, EventData::RequestHeader(Box::new(data)));
            self.header_logged = true;
            self.need_series = false;
        }
        if plan.context {
            if plan.route_change {
                self.in_history = !self.in_history;
            }
            let data = RequestContextData {
                provider: PROVIDER.to_owned(),
                model: MODEL.to_owned(),
                context_window: Some(Number::from(CONTEXT_WINDOW_TOKENS)),
                system_prompt_update: self.in_history.then(|| "in-history".to_owned()),
                extra: Extra::new(),
            };
            self.push(batch, EventData::RequestContext(Box::new(data)));
            self.context_logged = true;
        }
    }

    /// An empty response, then the retry that is scheduled and started for it.
    fn push_retry(&mut self, batch: &mut Vec<Event>) {
        let retry_id = self.id("retry");
        let failure = json!({ "message": EMPTY_RESPONSE, "code": "EMPTY_RESPONSE" });
        self.advance(300, 3_000);
        let usage = TokenUsage {
            input_tokens: self.surface_tokens() + REQUEST_OVERHEAD_TOKENS,
            output_tokens: 0,
            cache_read_tokens: None,
            reasoning_tokens: None,
            total_tokens: None,
            extra: Extra::new(),
        };
        let finish = json!({ "kind": "error", "failure": failure });
        let stream = vec![
            raw(
                self.time,
                StreamChunk::Usage(UsageChunk {
                    usage,
                    extra: Extra::new(),
                }),
            ),
            raw(self.time, finish_chunk(finish)),
        ];
        let (turn, step) = (self.turn, self.step);
        let data = AssistantAttemptData {
            turn,
            step,
            stream,
            extra: Extra::new(),
        };
        self.push(batch, EventData::AssistantAttempt(Box::new(data)));
        let delay_ms = self.rng.range(200, 2_000);
        let retry = json!({
            "retryId": retry_id, "turn": turn, "step": step, "provider": PROVIDER,
            "mode": "normal", "policyKey": RETRY_POLICY_KEY, "retry": 1, "maxRetries": 2,
            "delayMs": delay_ms, "failure": failure,
        });
        self.push_other(batch, EventType::LlmRetry, retry);
        self.advance(delay_ms, delay_ms + 5);
        let started = json!({ "retryId": retry_id, "turn": turn, "step": step, "retry": 1 });
        self.push_other(batch, EventType::LlmRetryStarted, started);
    }

    /// The assistant message with its embedded stream; returns the tool calls it makes.
    fn push_assistant(
        &mut self,
        batch: &mut Vec<Event>,
        tool_calls: u64,
    ) -> Vec<(String, ToolUse)> {
        let words = self.rng.range(15, 160);
        let reasoning = prose(&mut self.rng, words);
        let mut content = vec![ContentBlock::Reasoning(TextBlock {
            text: reasoning,
            extra: Extra::new(),
        })];
        let answers = tool_calls == 0;
        if answers || self.rng.permille(350) {
            let words = if answers {
                self.rng.range(20, 300)
            } else {
                self.rng.range(5, 40)
            };
            content.push(ContentBlock::text(prose(&mut self.rng, words)));
        }
        let mut uses = Vec::with_capacity(usize::try_from(tool_calls).expect("a small count"));
        for call_idx in 0..tool_calls {
            let tool = tool_use(&mut self.rng);
            let id = format!("call_{call_idx:02}_{}", base62(&mut self.rng, 24));
            content.push(ContentBlock::ToolCall(ToolCallBlock {
                id: id.clone(),
                name: tool.name.to_owned(),
                arguments: tool.arguments.clone(),
                extra: Extra::new(),
            }));
            uses.push((id, tool));
        }
        let usage = self.usage(&content);
        self.advance(300, 2_500);
        let finish = if answers { "stop" } else { "tool-calls" };
        let stream = self.stream(&content, &usage, finish);
        let model_source = Source {
            provider: Some(PROVIDER.to_owned()),
            model: Some(MODEL.to_owned()),
            ..source("model")
        };
        let data = AssistantMessageData {
            turn: self.turn,
            step: self.step,
            message: self.message("assistant", model_source, content),
            stream: Some(stream),
            usage: Some(usage),
            interrupted: None,
            extra: Extra::new(),
        };
        self.push_surface(
            batch,
            EventData::AssistantMessage(Box::new(data)),
            SurfaceOp::Append,
            None,
        );
        uses
    }

    /// One `tool/call` per call as it starts, then one `tool/result` per call as it settles.
    fn push_tools(&mut self, batch: &mut Vec<Event>, uses: Vec<(String, ToolUse)>) {
        let mut call_seqs = Vec::with_capacity(uses.len());
        for (id, tool) in &uses {
            self.advance(1, 20);
            let data = ToolCallData {
                turn: self.turn,
                step: self.step,
                call_id: id.clone(),
                name: tool.name.to_owned(),
                arguments: tool.arguments.clone(),
                extra: Extra::new(),
            };
            call_seqs.push(self.push(batch, EventData::ToolCall(Box::new(data))));
        }
        for ((id, tool), call_seq) in uses.into_iter().zip(call_seqs) {
            self.advance(20, 4_000);
            let block = ContentBlock::ToolResult(ToolResultBlock {
                tool_call_id: id.clone(),
                content: vec![ContentBlock::text(tool.output)],
                is_error: Some(false),
                extra: Extra::new(),
            });
            let tool_source = Source {
                call_id: Some(id),
                ..source("tool")
            };
            let data = ToolResultData {
                turn: self.turn,
                step: self.step,
                message: self.message("user", tool_source, vec![block]),
                error: None,
                meta: None,
                extra: Extra::new(),
            };
            let op = SurfaceOp::Append;
            self.push_surface(
                batch,
                EventData::ToolResult(Box::new(data)),
                op,
                Some(vec![call_seq]),
            );
        }
    }

    /// Usage of a request over the current surface; the provider caches the last prefix.
    fn usage(&mut self, content: &[ContentBlock]) -> TokenUsage {
        let output_tokens = tokens_of(content);
        let reasoning_tokens = match content.first() {
            Some(block @ ContentBlock::Reasoning(_)) => tokens_of(std::slice::from_ref(block)),
            _ => 0,
        };
        let input = self.surface_tokens() + REQUEST_OVERHEAD_TOKENS;
        let cache_read_tokens = self.cached_tokens.min(input) / 64 * 64;
        self.cached_tokens = input + output_tokens;
        TokenUsage {
            input_tokens: input - cache_read_tokens,
            output_tokens,
            cache_read_tokens: Some(cache_read_tokens),
            reasoning_tokens: Some(reasoning_tokens),
            total_tokens: None,
            extra: Extra::new(),
        }
    }

    /// The stream of a message: per block a raw start, its packed deltas and a raw end, then
    /// usage and finish. Advances the clock by the time the deltas take.
    fn stream(
        &mut self,
        content: &[ContentBlock],
        usage: &TokenUsage,
        finish: &str,
    ) -> Vec<StreamRecord> {
        let mut records = Vec::with_capacity(content.len() * 3 + 2);
        for (index, block) in (0u64..).zip(content) {
            let block_type = block.tag().to_owned();
            let start = BlockStart {
                index,
                block_type,
                extra: Extra::new(),
            };
            records.push(raw(self.time, StreamChunk::BlockStart(start)));
            records.push(self.packed(index, block));
            let end = BlockEnd {
                index,
                block: block.clone(),
                extra: Extra::new(),
            };
            records.push(raw(self.time, StreamChunk::BlockEnd(end)));
            self.advance(0, 5);
        }
        let usage = UsageChunk {
            usage: usage.clone(),
            extra: Extra::new(),
        };
        records.push(raw(self.time, StreamChunk::Usage(usage)));
        records.push(raw(self.time, finish_chunk(json!({ "kind": finish }))));
        records
    }

    /// The packed delta record of one block; its pieces concatenate to the block exactly.
    fn packed(&mut self, index: u64, block: &ContentBlock) -> StreamRecord {
        let time0 = self.time;
        match block {
            ContentBlock::Reasoning(b) | ContentBlock::Text(b) => {
                let texts = deltas(&mut self.rng, &b.text);
                let dt = self.delta_times(texts.len());
                let chunks = TextChunks {
                    time0,
                    index,
                    dt,
                    texts,
                    extra: Extra::new(),
                };
                if matches!(block, ContentBlock::Reasoning(_)) {
                    StreamRecord::ReasoningChunks(chunks)
                } else {
                    StreamRecord::TextChunks(chunks)
                }
            }
            ContentBlock::ToolCall(call) => {
                // The first delta names the call and carries no arguments, as dsh records it.
                let mut args = vec![String::new()];
                args.extend(deltas(&mut self.rng, &call.arguments));
                let dt = self.delta_times(args.len());
                StreamRecord::ToolCallChunks(ToolCallChunks {
                    time0,
                    index,
                    dt,
                    id: call.id.clone(),
                    name: Some(call.name.clone()),
                    args,
                    extra: Extra::new(),
                })
            }
            _ => panic!("assistant messages hold only reasoning, text and tool-call blocks"),
        }
    }

    /// `count - 1` gaps between deltas, mostly tens of ms with an occasional stall.
    fn delta_times(&mut self, count: usize) -> Vec<i64> {
        assert!(count > 0, "a packed record holds at least one delta");
        let dt: Vec<i64> = (1..count)
            .map(|_| {
                let ms = if self.rng.permille(15) {
                    self.rng.range(80, 600)
                } else {
                    self.rng.range(0, 40)
                };
                i64::try_from(ms).expect("a small delay")
            })
            .collect();
        self.time += dt.iter().sum::<i64>();
        dt
    }

    /// Whether the gap between two steps compacts: the surface is large, or by chance.
    fn compaction_due(&mut self) -> bool {
        self.surface.len() > 2 * RETAIN_NODES_MIN
            && (self.surface_tokens() > SURFACE_TOKENS_MAX
                || self.gaps.compaction >= 90
                || self.rng.permille(8))
    }

    /// The last surface position of a compaction range that starts at position 1 (spec
    /// §13.2): it keeps a tail of recent nodes and never splits a tool call from its results.
    fn compaction_end(&mut self) -> Option<usize> {
        assert_eq!(
            self.surface.first().map(|n| n.kind),
            Some(NodeKind::System),
            "head at 0"
        );
        let retain_tokens = self.rng.range(RETAIN_TOKENS_MIN, RETAIN_TOKENS_MAX);
        let mut keep_from = self.surface.len();
        let mut kept_tokens = 0;
        while keep_from > 1 && kept_tokens < retain_tokens {
            keep_from -= 1;
            kept_tokens += self.surface[keep_from].tokens;
        }
        keep_from = keep_from.min(self.surface.len().saturating_sub(RETAIN_NODES_MIN));
        // Tool results follow their assistant message on the surface, so a boundary is
        // balanced when the first kept node is not a tool result.
        while keep_from > 1 && self.surface[keep_from].kind == NodeKind::ToolResult {
            keep_from -= 1;
        }
        // At least two nodes, or compacting is not worth a summary.
        (keep_from >= 3).then(|| keep_from - 1)
    }

    /// A compaction transaction replacing surface positions `1..=end_idx` by a checkpoint.
    fn compaction(&mut self, end_idx: usize) -> Vec<Event> {
        let compaction_id = self.id("cmp");
        let shadowed: Vec<u64> = self.surface[1..=end_idx].iter().map(|n| n.seq).collect();
        let shadowed_tokens: u64 = self.surface[1..=end_idx].iter().map(|n| n.tokens).sum();
        let (first, last) = (shadowed[0], shadowed[shadowed.len() - 1]);
        let turn = json!(self.turn);
        let mut batch = Vec::with_capacity(4);
        self.advance(50, 500);
        let start = CompactionStartData {
            compaction_id: compaction_id.clone(),
            turn: turn.clone(),
            source_command_id: None,
            extra: Extra::new(),
        };
        let start_seq = self.push(&mut batch, EventData::CompactionStart(Box::new(start)));
        let words = self.rng.range(150, 450);
        let summary = prose(&mut self.rng, words);
        self.advance(3_000, 30_000);
        let summary_seq = self.push_summary(
            &mut batch,
            &compaction_id,
            &summary,
            &shadowed,
            shadowed_tokens,
        );
        let mut sources = vec![start_seq, summary_seq];
        sources.extend(&shadowed);
        let content = vec![
            ContentBlock::text(CHECKPOINT_OPENING),
            ContentBlock::text(summary),
            ContentBlock::text(CHECKPOINT_CLOSING),
        ];
        let mut checkpoint_source = Source {
            plugin: Some("compact".to_owned()),
            ..source("plugin")
        };
        checkpoint_source
            .extra
            .insert("compactionId".to_owned(), json!(compaction_id));
        let message = self.message("user", checkpoint_source, content);
        let op = SurfaceOp::Replace {
            start_seq: first,
            end_seq: last,
        };
        self.push_surface(
            &mut batch,
            EventData::UserMessage(Box::new(message)),
            op,
            Some(sources),
        );
        self.advance(1, 20);
        let end = CompactionEndData {
            compaction_id,
            turn,
            source_command_id: None,
            error: None,
            extra: Extra::new(),
        };
        self.push(&mut batch, EventData::CompactionEnd(Box::new(end)));
        self.gaps.compaction = 0;
        batch
    }

    fn push_summary(
        &mut self,
        batch: &mut Vec<Event>,
        compaction_id: &str,
        summary: &str,
        shadowed: &[u64],
        shadowed_tokens: u64,
    ) -> u64 {
        let summary_tokens = tokens_of(&[ContentBlock::text(summary)]);
        let range = SeqRange {
            start: shadowed[0],
            end: shadowed[shadowed.len() - 1],
            extra: Extra::new(),
        };
        let data = CompactionSummaryData {
            compaction_id: compaction_id.to_owned(),
            summary: json!([{ "type": "text", "text": summary }]),
            shadowed_range: range,
            shadowed_seqs: shadowed.to_vec(),
            shadowed_token_count: shadowed_tokens,
            provider: PROVIDER.to_owned(),
            model: MODEL.to_owned(),
            source_command_id: None,
            max_tokens: None,
            usage: Some(json!({
                "inputTokens": shadowed_tokens + REQUEST_OVERHEAD_TOKENS,
                "outputTokens": summary_tokens,
            })),
            raw_output: None,
            llm_stream_call: Some(true),
            extra: Extra::new(),
        };
        self.push(batch, EventData::CompactionSummary(Box::new(data)))
    }

    /// An older, unpruned tool result, if any.
    fn prune_target(&mut self) -> Option<u64> {
        let older = self.surface.len().saturating_sub(2 * RETAIN_NODES_MIN);
        let candidates: Vec<u64> = self.surface[..older]
            .iter()
            .filter(|n| n.tool.is_some() && n.tokens >= 64)
            .map(|n| n.seq)
            .collect();
        if candidates.is_empty() {
            return None;
        }
        Some(*self.rng.pick(&candidates))
    }

    fn runtime_context(&mut self) -> Message {
        let preset = PRESETS[self.preset];
        let sandbox = format!(
            "Current DSH file policy: {preset}. Any available operation enforced by the DSH \
             file sandbox may modify files under the session workspace: \"{CWD}\". Some \
             platform temporary areas may also be writable."
        );
        let approval = "Approval policy: ask. Operations that require approval may ask through \
             the configured answerers; without an available answerer, the request fails closed.";
        let text = format!(
            "Current runtime context. This snapshot supersedes earlier runtime-context \
             snapshots.\n\n{sandbox}\n\n{approval}"
        );
        let mut snapshot = Source {
            plugin: Some(PROMPT_PLUGIN.to_owned()),
            ..source("plugin")
        };
        snapshot.extra.insert("form".to_owned(), json!("snapshot"));
        let sections = json!([
            { "name": "sandbox:policy", "text": sandbox },
            { "name": "approval:policy", "text": approval },
        ]);
        snapshot.extra.insert("sections".to_owned(), sections);
        self.message("user", snapshot, vec![ContentBlock::text(text)])
    }

    fn system_prompt(&mut self) -> String {
        self.prompt_revision += 1;
        let mut text = format!(
            "You are dsh, a coding agent working in {CWD}. Prompt revision {}.",
            self.prompt_revision
        );
        for section in ["Working style", "Tools", "Safety", "Output"] {
            let words = self.rng.range(60, 160);
            text.push_str(&format!(
                "\n\n# {section}\n\n{}",
                prose(&mut self.rng, words)
            ));
        }
        text
    }

    fn system_data(&mut self, content: Vec<ContentBlock>) -> EventData {
        let prompt_source = Source {
            plugin: Some(PROMPT_PLUGIN.to_owned()),
            ..source("plugin")
        };
        EventData::SystemMessage(Box::new(SystemMessageData {
            turn: self.turn,
            step: self.step,
            message: self.message("system", prompt_source, content),
            extra: Extra::new(),
        }))
    }

    fn message(&mut self, role: &str, source: Source, content: Vec<ContentBlock>) -> Message {
        Message {
            id: Some(self.id("msg")),
            role: Some(role.to_owned()),
            content,
            source: Some(source),
            extra: Extra::new(),
        }
    }

    fn step_ref(&self) -> StepRef {
        StepRef {
            turn: self.turn,
            step: self.step,
            extra: Extra::new(),
        }
    }

    fn id(&mut self, prefix: &str) -> String {
        format!("{prefix}_{:016x}", self.rng.next_u64())
    }

    /// Moves the clock forward by `lo..=hi` ms.
    fn advance(&mut self, lo: u64, hi: u64) {
        self.time += i64::try_from(self.rng.range(lo, hi)).expect("a small delay");
    }

    /// The seq and time of the next event; events a few ms apart.
    fn stamp(&mut self) -> (u64, i64) {
        let seq = self.seq;
        self.seq += 1;
        self.advance(0, 3);
        (seq, self.time)
    }

    fn push(&mut self, batch: &mut Vec<Event>, data: EventData) -> u64 {
        let (seq, time) = self.stamp();
        batch.push(Event::new(seq, time, data));
        seq
    }

    fn push_other(&mut self, batch: &mut Vec<Event>, kind: EventType, data: Value) -> u64 {
        let (seq, time) = self.stamp();
        batch.push(Event::other(seq, time, kind, data));
        seq
    }

    /// Pushes a surface event and applies it to the surface model.
    fn push_surface(
        &mut self,
        batch: &mut Vec<Event>,
        data: EventData,
        op: SurfaceOp,
        sources: Option<Vec<u64>>,
    ) -> u64 {
        let message = data.message().expect("surface payloads carry a message");
        let kind = match &data {
            EventData::SystemMessage(_) => NodeKind::System,
            EventData::UserMessage(_) => NodeKind::User,
            EventData::AssistantMessage(_) => NodeKind::Assistant,
            _ => NodeKind::ToolResult,
        };
        let tokens = tokens_of(&message.content);
        let blank = message.content.is_empty();
        let tool = match (&data, op) {
            (EventData::ToolResult(d), SurfaceOp::Append) => Some(d.clone()),
            _ => None,
        };
        let (seq, time) = self.stamp();
        let mut event = Event::new(seq, time, data).with_surface_op(op);
        if let Some(sources) = sources {
            event = event.with_sources(sources);
        }
        batch.push(event);
        self.apply_surface(
            Live {
                seq,
                kind,
                tokens,
                blank,
                tool,
            },
            op,
        );
        seq
    }

    /// The surface transition of spec §7.2, on the model; endpoints resolve by position.
    fn apply_surface(&mut self, node: Live, op: SurfaceOp) {
        let SurfaceOp::Replace { start_seq, end_seq } = op else {
            self.surface.push(node);
            return;
        };
        let start_idx = self
            .position(start_seq)
            .expect("replace endpoints are live nodes");
        let end_idx = self
            .position(end_seq)
            .expect("replace endpoints are live nodes");
        assert!(start_idx <= end_idx, "a replace spans the surface in order");
        assert!(
            start_idx > 0 || node.kind == NodeKind::System,
            "only the prompt replaces 0"
        );
        // The provider cache holds only the prefix before the rewritten span.
        let prefix_tokens: u64 = self.surface[..start_idx].iter().map(|n| n.tokens).sum();
        self.cached_tokens = self
            .cached_tokens
            .min(prefix_tokens + REQUEST_OVERHEAD_TOKENS);
        self.surface.splice(start_idx..=end_idx, [node]);
        self.need_series = true;
    }

    fn position(&self, seq: u64) -> Option<usize> {
        self.surface.iter().rposition(|n| n.seq == seq)
    }

    fn surface_tokens(&self) -> u64 {
        self.surface.iter().map(|n| n.tokens).sum()
    }
}

fn source(kind: &str) -> Source {
    Source {
        kind: kind.to_owned(),
        plugin: None,
        provider: None,
        model: None,
        call_id: None,
        extra: Extra::new(),
    }
}

fn raw(time: i64, chunk: StreamChunk) -> StreamRecord {
    StreamRecord::Chunk(RawChunk {
        time,
        chunk,
        extra: Extra::new(),
    })
}

fn finish_chunk(reason: Value) -> StreamChunk {
    StreamChunk::Finish(Finish {
        reason,
        replay_state: None,
        extra: Extra::new(),
    })
}

/// The heuristic token estimate of some content: four bytes a token.
fn tokens_of(content: &[ContentBlock]) -> u64 {
    fn bytes(block: &ContentBlock) -> usize {
        match block {
            ContentBlock::Text(b) | ContentBlock::Reasoning(b) => b.text.len(),
            ContentBlock::ToolCall(c) => c.name.len() + c.arguments.len(),
            ContentBlock::ToolResult(r) => r.content.iter().map(bytes).sum(),
            _ => 0,
        }
    }
    content.iter().map(bytes).sum::<usize>() as u64 / 4 + 4
}

/// The tool list of a request header; the optional tool is what a tool change toggles.
fn tool_schemas(with_web_search: bool) -> Value {
    let text = |description: &str| json!({ "type": "string", "description": description });
    let mut tools = vec![
        schema(
            "bash",
            "Run a shell command in the workspace and return its combined output.",
            json!({
                "command": text("The command line to run."),
                "description": text("What the command does, in five to ten words."),
                "timeoutMs": { "type": "integer", "description": "Kill the command after this." },
            }),
            &["command"],
        ),
        schema(
            "read_file",
            "Read a file of the workspace, with line numbers.",
            json!({
                "path": text("The file to read, relative to the workspace."),
                "offset": { "type": "integer", "description": "The first line to read." },
                "limit": { "type": "integer", "description": "How many lines to read." },
            }),
            &["path"],
        ),
        schema(
            "grep",
            "Search file contents with a regular expression.",
            json!({ "pattern": text("The regular expression."), "path": text("Where to search.") }),
            &["pattern"],
        ),
        schema(
            "edit_file",
            "Replace an exact string in a file by another.",
            json!({
                "path": text("The file to edit."),
                "old_string": text("The text to replace; it must occur exactly once."),
                "new_string": text("The replacement."),
            }),
            &["path", "old_string", "new_string"],
        ),
        schema(
            "list_dir",
            "List the entries of a directory.",
            json!({ "path": text("The directory to list.") }),
            &["path"],
        ),
    ];
    if with_web_search {
        let properties = json!({ "query": text("What to search for.") });
        tools.push(schema(
            "web_search",
            "Search the web.",
            properties,
            &["query"],
        ));
    }
    Value::Array(tools)
}

fn schema(name: &str, description: &str, properties: Value, required: &[&str]) -> Value {
    json!({
        "name": name,
        "description": description,
        "parameters": { "type": "object", "properties": properties, "required": required },
    })
}

/// splitmix64 (Steele, Lea and Flood): tiny, fast, and good enough for synthetic data.
#[derive(Debug, Clone)]
struct Rng {
    state: u64,
}

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`; the modulo bias is negligible at these ranges.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo <= hi, "range bounds are ordered");
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// True with probability `p / 1000`.
    fn permille(&mut self, p: u64) -> bool {
        self.next_u64() % 1000 < p
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        assert!(!items.is_empty(), "pick from a non-empty list");
        let idx = self.next_u64() % items.len() as u64;
        &items[usize::try_from(idx).expect("an index below a slice length")]
    }
}

#[rustfmt::skip]
const WORDS: &[&str] = &[
    "the", "a", "to", "of", "and", "in", "is", "that", "it", "for", "this", "with", "we", "on",
    "be", "as", "not", "file", "test", "function", "error", "value", "module", "crate", "type",
    "struct", "field", "return", "call", "read", "write", "check", "build", "change", "update",
    "fix", "add", "remove", "path", "line", "buffer", "index", "offset", "length", "batch",
    "event", "log", "session", "surface", "node", "seq", "step", "turn", "header", "stream",
    "chunk", "token", "config", "option", "result", "output", "input", "state", "cache", "frame",
    "record", "reader", "writer", "parser", "decode", "encode", "version", "format", "schema",
    "rule", "admission", "replace", "append", "compaction", "summary", "range", "span", "tail",
    "head", "system", "prompt", "message", "assistant", "user", "tool", "arguments", "command",
    "workspace", "directory", "cargo", "rust", "compile", "warning", "lint", "assert", "invariant",
    "expected", "actual", "now", "then", "first", "next", "last", "before", "after", "because",
    "so", "but", "also", "only", "each", "every", "all", "some", "should", "must", "can", "will",
    "would", "need", "looks", "seems", "run", "passes", "fails", "works", "let", "me", "I", "see",
    "think", "maybe", "probably", "instead", "again", "here", "there", "which", "where", "when",
    "into", "from", "by", "at", "or", "if", "new", "old", "same", "different", "small", "large",
    "empty", "missing", "current", "previous", "bytes", "lines", "count", "number", "string",
    "vector", "map", "key", "order",
];

#[rustfmt::skip]
const TYPE_NAMES: &[&str] = &[
    "Event", "Surface", "Batch", "Reader", "Writer", "Header", "Frame", "Record", "Node", "Plan",
    "Stream", "Config", "Session", "Violation",
];

const DIRS: &[&str] = &[
    "src",
    "format/src",
    "engine/src",
    "engine/src/store",
    "cli/src",
    "tests",
];

/// Sentences of words from [`WORDS`], with a few identifiers in backticks; ASCII only.
fn prose(rng: &mut Rng, words: u64) -> String {
    let mut out = String::with_capacity(usize::try_from(words).expect("a small count") * 7);
    let mut left = words;
    while left > 0 {
        let len = rng.range(4, 18).min(left);
        if !out.is_empty() {
            out.push_str(if rng.permille(200) { "\n\n" } else { " " });
        }
        for word_idx in 0..len {
            if word_idx > 0 {
                out.push(' ');
            }
            if rng.permille(40) {
                out.push('`');
                out.push_str(&identifier(rng));
                out.push('`');
            } else {
                let word = *rng.pick(WORDS);
                if word_idx == 0 {
                    out.push(word.as_bytes()[0].to_ascii_uppercase() as char);
                    out.push_str(&word[1..]);
                } else {
                    out.push_str(word);
                }
            }
            if word_idx + 1 < len && rng.permille(60) {
                out.push(',');
            }
        }
        out.push('.');
        left -= len;
    }
    out
}

fn identifier(rng: &mut Rng) -> String {
    format!(
        "{}_{}",
        rng.pick(WORDS).to_ascii_lowercase(),
        rng.pick(WORDS).to_ascii_lowercase()
    )
}

fn file_path(rng: &mut Rng) -> String {
    format!("{}/{}.rs", rng.pick(DIRS), identifier(rng))
}

fn base62(rng: &mut Rng, len: usize) -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    (0..len).map(|_| *rng.pick(ALPHABET) as char).collect()
}

/// Splits ASCII `text` into stream deltas the way a tokenizer would: leading spaces stay with
/// the next word, punctuation stands alone, and long words sometimes break in two. The
/// deltas concatenate to `text` exactly, and there is always at least one.
fn deltas(rng: &mut Rng, text: &str) -> Vec<String> {
    assert!(
        text.is_ascii(),
        "generated text is ASCII, so any byte index is a char boundary"
    );
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(text.len() / 4 + 1);
    let mut start = 0;
    while start < bytes.len() {
        let mut end = start;
        while end < bytes.len() && bytes[end].is_ascii_whitespace() {
            end += 1;
        }
        if end < bytes.len() && bytes[end].is_ascii_alphanumeric() {
            while end < bytes.len() && bytes[end].is_ascii_alphanumeric() {
                end += 1;
            }
        } else if end < bytes.len() {
            end += 1;
        }
        if end - start > 7 && rng.permille(300) {
            let middle = start + (end - start) / 2;
            out.push(text[start..middle].to_owned());
            start = middle;
        }
        out.push(text[start..end].to_owned());
        start = end;
    }
    if out.is_empty() {
        out.push(String::new());
    }
    debug_assert_eq!(out.concat(), text);
    out
}

fn tool_use(rng: &mut Rng) -> ToolUse {
    match rng.range(0, 9) {
        0..=3 => bash(rng),
        4 | 5 => {
            let path = file_path(rng);
            let offset = rng.range(1, 400);
            let lines = rng.range(5, 70);
            let output = lines_of(rng, lines, |rng, n| {
                format!("{:>6}\t{}", offset + n, code_line(rng))
            });
            let arguments = json!({ "path": path, "offset": offset, "limit": lines }).to_string();
            ToolUse {
                name: "read_file",
                arguments,
                output,
            }
        }
        6 | 7 => {
            let pattern = identifier(rng);
            let lines = rng.range(2, 40);
            let output = lines_of(rng, lines, grep_line);
            let arguments = json!({ "pattern": pattern, "path": rng.pick(DIRS) }).to_string();
            ToolUse {
                name: "grep",
                arguments,
                output,
            }
        }
        8 => {
            let path = file_path(rng);
            let old = code_line(rng);
            let new = code_line(rng);
            let arguments =
                json!({ "path": path, "old_string": old, "new_string": new }).to_string();
            let output = format!("Applied 1 edit to {path}.\n");
            ToolUse {
                name: "edit_file",
                arguments,
                output,
            }
        }
        _ => {
            let dir = *rng.pick(DIRS);
            let lines = rng.range(3, 40);
            let output = lines_of(rng, lines, ls_line);
            ToolUse {
                name: "list_dir",
                arguments: json!({ "path": dir }).to_string(),
                output,
            }
        }
    }
}

fn bash(rng: &mut Rng) -> ToolUse {
    let lines = rng.range(4, 60);
    let (command, output) = match rng.range(0, 3) {
        0 => {
            let filter = identifier(rng);
            let crate_name = *rng.pick(&["sessionlog-format", "sessionlog-engine", "sessionlog"]);
            let mut output = format!("\nrunning {lines} tests\n");
            output.push_str(&lines_of(rng, lines, |rng, _| {
                let status = if rng.permille(970) { "ok" } else { "FAILED" };
                format!("test {}::{} ... {status}", identifier(rng), identifier(rng))
            }));
            output.push_str(&format!("\ntest result: ok. {lines} passed; 0 failed\n"));
            (format!("cargo test -p {crate_name} {filter}"), output)
        }
        1 => (
            format!("ls -la {}", rng.pick(DIRS)),
            lines_of(rng, lines, ls_line),
        ),
        2 => {
            let output = lines_of(rng, lines, |rng, _| format!(" M {}", file_path(rng)));
            ("git status --short".to_owned(), output)
        }
        _ => {
            let command = format!("rg -n {} {}", identifier(rng), rng.pick(DIRS));
            (command, lines_of(rng, lines, grep_line))
        }
    };
    let words = rng.range(3, 9);
    let description = prose(rng, words);
    let arguments = json!({ "command": command, "description": description }).to_string();
    ToolUse {
        name: "bash",
        arguments,
        output,
    }
}

/// `count` lines made by `line`, each ending in a newline.
fn lines_of(rng: &mut Rng, count: u64, mut line: impl FnMut(&mut Rng, u64) -> String) -> String {
    let mut out = String::new();
    for line_idx in 0..count {
        out.push_str(&line(rng, line_idx));
        out.push('\n');
    }
    out
}

fn grep_line(rng: &mut Rng, _line_idx: u64) -> String {
    let line = rng.range(1, 900);
    format!("{}:{line}:    {}", file_path(rng), code_line(rng))
}

fn ls_line(rng: &mut Rng, _line_idx: u64) -> String {
    let size = rng.range(120, 90_000);
    let (day, minute) = (rng.range(1, 28), rng.range(0, 59));
    format!(
        "-rw-r--r--  1 dev dev {size:>7} Mar {day:>2} 12:{minute:02} {}.rs",
        identifier(rng)
    )
}

fn code_line(rng: &mut Rng) -> String {
    let (a, b, c) = (identifier(rng), identifier(rng), identifier(rng));
    let type_name = *rng.pick(TYPE_NAMES);
    match rng.range(0, 7) {
        0 => format!("    let {a} = {b}(&{c})?;"),
        1 => format!("fn {a}(&self, {b}: u64) -> Result<{type_name}, Error> {{"),
        2 => {
            let words = rng.range(4, 12);
            format!("    // {}", prose(rng, words))
        }
        3 => format!("    assert_eq!({a}.{b}(), {});", rng.range(0, 4096)),
        4 => "}".to_owned(),
        5 => format!("        self.{a} += {};", rng.range(1, 64)),
        6 => format!("use crate::{a}::{{{type_name}, {}}};", rng.pick(TYPE_NAMES)),
        _ => format!("    {a}.push({c});"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::Admission;
    use crate::reader::{read_log, ReadOptions};
    use crate::rules::RuleContext;
    use crate::stream::StreamRecord;
    use crate::version::FormatVersion;
    use crate::writer::{Compression, LogWriter};

    const V3: RuleContext = RuleContext {
        version: FormatVersion::V3,
        snapshot: false,
    };

    fn batches(events: u64, seed: u64) -> Vec<Vec<Event>> {
        let mut generator = Generator::new(GenOptions { events, seed });
        std::iter::from_fn(|| generator.next_batch()).collect()
    }

    fn write(events: u64, seed: u64) -> Vec<u8> {
        let generator = Generator::new(GenOptions { events, seed });
        let mut writer =
            LogWriter::new(Vec::new(), &generator.header(), Compression::None).unwrap();
        for batch in batches(events, seed) {
            writer.append_batch(&batch).unwrap();
        }
        writer.into_inner().unwrap()
    }

    // Goal: the same options give the same session, byte for byte; another seed another one.
    // Method: compare the batches and the written bytes of two runs, then of a third seed.
    #[test]
    fn determinism() {
        assert_eq!(batches(2_000, 42), batches(2_000, 42));
        assert_eq!(write(2_000, 42), write(2_000, 42));
        assert_ne!(write(2_000, 42), write(2_000, 43));
        let header = |seed| Generator::new(GenOptions { events: 1, seed }).header();
        assert_eq!(header(42), header(42));
        assert_ne!(header(42).id, header(43).id);
    }

    // Goal: every generated log is valid V3 of exactly N events, survives a write-read round
    // trip, and a long one holds every kind of event the generator can write.
    // Method: admit each batch on a fresh Admission, write through LogWriter, read back with
    // read_log and compare; for N = 3000 count the features over several seeds.
    #[test]
    fn validity() {
        for seed in [0, 1, 7, 0xdead_beef] {
            for events in [0, 1, 2, 5, 9, 10, 50, 3_000] {
                let batches = batches(events, seed);
                let mut admission = Admission::new(V3);
                for batch in &batches {
                    if let Err((idx, violation)) = admission.admit_batch(batch) {
                        panic!(
                            "seed {seed} N {events}: seq {} refused: {violation}",
                            batch[idx].seq
                        );
                    }
                }
                let generated: Vec<Event> = batches.into_iter().flatten().collect();
                assert_eq!(generated.len() as u64, events, "seed {seed}");
                let log = read_log(&write(events, seed)[..], ReadOptions::default()).unwrap();
                assert_eq!(
                    log.header,
                    Generator::new(GenOptions { events, seed }).header()
                );
                assert!(
                    log.events == generated,
                    "seed {seed} N {events}: round trip differs"
                );
                if events == 3_000 {
                    check_features(&generated, seed);
                    check_balanced(&generated, seed);
                }
            }
        }
    }

    /// Asserts at least one of each feature the generator is meant to write.
    fn check_features(events: &[Event], seed: u64) {
        let mut head = None;
        let mut seen = std::collections::BTreeMap::<&str, u64>::new();
        for event in events {
            let feature = match (&event.data, event.surface_op) {
                (EventData::SystemMessage(_), Some(SurfaceOp::Append)) if head.is_none() => {
                    head = Some(event.seq);
                    "head"
                }
                (EventData::SystemMessage(_), Some(SurfaceOp::Append)) => "in-history append",
                (EventData::SystemMessage(_), Some(SurfaceOp::Replace { start_seq, end_seq }))
                    if Some(start_seq) == head && end_seq == start_seq =>
                {
                    head = Some(event.seq);
                    "head rewrite"
                }
                (EventData::UserMessage(m), Some(SurfaceOp::Replace { .. })) => {
                    let source = m.source.as_ref().unwrap();
                    assert_eq!(source.plugin.as_deref(), Some("compact"));
                    "compaction checkpoint"
                }
                (EventData::ToolResult(_), Some(SurfaceOp::Append)) => "tool result",
                (EventData::ToolResult(_), Some(SurfaceOp::Replace { .. })) => "tool rewrite",
                (EventData::AssistantAttempt(_), _) => "attempt",
                (EventData::RequestHeader(h), _) => match h.reason.as_str() {
                    "series" => "series header",
                    "change" => "change header",
                    _ => "header",
                },
                _ => event.kind.as_str(),
            };
            *seen.entry(feature).or_default() += 1;
        }
        for feature in [
            "head rewrite",
            "in-history append",
            "compaction checkpoint",
            "attempt",
            "tool result",
            "tool rewrite",
            "series header",
            "change header",
            "llm/retry",
            "llm/retry-started",
            "session/title",
            "permission/preset",
            "compaction/prune",
        ] {
            assert!(
                seen.contains_key(feature),
                "seed {seed}: no {feature} in {seen:?}"
            );
        }
    }

    /// Asserts that turns and steps nest and close, and that tool calls are settled in their
    /// step (the relational rules of spec §12.2 that admission does not check).
    fn check_balanced(events: &[Event], seed: u64) {
        let (mut turn, mut step, mut calls) = (None, None, Vec::new());
        for event in events {
            match &event.data {
                EventData::TurnStart(d) => {
                    assert_eq!(turn, None, "seed {seed}");
                    turn = Some(d.turn);
                }
                EventData::TurnEnd(d) => {
                    assert_eq!((turn, step), (Some(d.turn), None), "seed {seed}");
                    turn = None;
                }
                EventData::StepStart(d) => {
                    assert_eq!((turn, step), (Some(d.turn), None), "seed {seed}");
                    step = Some(d.step);
                }
                EventData::StepEnd(d) => {
                    assert_eq!(step, Some(d.step), "seed {seed}");
                    assert!(calls.is_empty(), "seed {seed}: unsettled calls {calls:?}");
                    step = None;
                }
                EventData::ToolCall(d) => calls.push(d.call_id.clone()),
                EventData::ToolResult(d) if event.surface_op == Some(SurfaceOp::Append) => {
                    let id = d.message.source.as_ref().unwrap().call_id.clone().unwrap();
                    calls.retain(|call| *call != id);
                }
                EventData::RequestHeader(_) | EventData::RequestContext(_) => {
                    assert!(step.is_some(), "seed {seed}: request outside a step");
                }
                _ => {}
            }
        }
        assert_eq!(
            (turn, step),
            (None, None),
            "seed {seed}: the log ends between turns"
        );
    }

    // Goal: embedded streams agree with their message: packed deltas concatenate to the block
    // and carry one dt fewer than deltas, times never go back, and tool calls match blocks.
    // Method: walk every assistant/message and tool/call of a few thousand events.
    #[test]
    fn streams_match_content() {
        let events: Vec<Event> = batches(3_000, 5).into_iter().flatten().collect();
        let mut advertised = Vec::new();
        for pair in events.windows(2) {
            assert!(pair[0].time <= pair[1].time, "time is monotonic");
        }
        for event in &events {
            match &event.data {
                EventData::AssistantMessage(d) => {
                    let stream = d.stream.as_ref().unwrap();
                    check_stream(&d.message.content, stream, event.time);
                    for block in &d.message.content {
                        if let ContentBlock::ToolCall(call) = block {
                            advertised.push((
                                call.id.clone(),
                                call.name.clone(),
                                call.arguments.clone(),
                            ));
                        }
                    }
                }
                EventData::ToolCall(d) => {
                    let call = (d.call_id.clone(), d.name.clone(), d.arguments.clone());
                    assert!(
                        advertised.contains(&call),
                        "tool/call {} was advertised",
                        d.call_id
                    );
                }
                _ => {}
            }
        }
        assert!(!advertised.is_empty());
    }

    fn check_stream(content: &[ContentBlock], stream: &[StreamRecord], event_time: i64) {
        let mut packed = 0;
        for record in stream {
            match record {
                StreamRecord::TextChunks(c) | StreamRecord::ReasoningChunks(c) => {
                    assert_eq!(c.dt.len() + 1, c.texts.len());
                    let block = &content[usize::try_from(c.index).unwrap()];
                    assert_eq!(Some(c.texts.concat().as_str()), block.as_text());
                    assert!(c.time0 + c.dt.iter().sum::<i64>() <= event_time);
                    packed += 1;
                }
                StreamRecord::ToolCallChunks(c) => {
                    assert_eq!(c.dt.len() + 1, c.args.len());
                    let ContentBlock::ToolCall(call) = &content[usize::try_from(c.index).unwrap()]
                    else {
                        panic!("tool-call chunks point at a tool-call block");
                    };
                    assert_eq!((&c.id, c.args.concat()), (&call.id, call.arguments.clone()));
                    packed += 1;
                }
                StreamRecord::Chunk(raw) => assert!(raw.time <= event_time),
                StreamRecord::Other(_) => panic!("no unknown records"),
            }
        }
        assert_eq!(packed, content.len(), "one packed record per block");
    }

    // Goal: head rewrites make the surface numerically non-monotonic, as in spec §7.2.
    // Method: admit 3000 events batch by batch and look at the admitted surface's seqs.
    #[test]
    fn surface_becomes_non_monotonic() {
        let mut admission = Admission::new(V3);
        let mut non_monotonic = 0;
        for batch in batches(3_000, 11) {
            admission.admit_batch(&batch).unwrap();
            let seqs = admission.surface().seqs();
            if seqs.windows(2).any(|w| w[0] > w[1]) {
                non_monotonic += 1;
            }
        }
        assert!(non_monotonic > 0, "the surface stayed in seq order");
    }
}

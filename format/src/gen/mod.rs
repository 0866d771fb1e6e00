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

mod builders;
mod compaction;
mod plan;
mod rng;
mod step;
mod stream;
mod surface_model;
mod text;
mod tools;
mod v0;

#[cfg(test)]
mod tests;

use serde_json::{json, Value};

use crate::event::{Event, EventData, EventType};
use crate::header::SessionHeader;
use crate::json::Extra;
use crate::payload::{TurnEnd, TurnStart};
use crate::version::FormatVersion;

use self::plan::{Gaps, StepPlan};
use self::rng::Rng;
use self::surface_model::Live;
use self::tools::tool_schemas;

/// `createdAt` of every generated header; the simulated clock starts just after it.
const CREATED_AT_MS: u64 = 1_785_000_000_000;
/// Mixed into the seed to derive the session id, so that it is not the first draw of the
/// event stream.
const SESSION_ID_SALT: u64 = 0x5e55_1011_d0c5_e7a1;
const CWD: &str = "/work/gen";
const PROVIDER: &str = "deepseek-official";
const MODEL: &str = "deepseek-v4-flash";
/// Tokens a request carries besides the surface: tool schemas and framing.
const REQUEST_OVERHEAD_TOKENS: u64 = 3_000;
/// Most steps in one turn; the turn's last step answers without tool calls.
const TURN_STEPS_MAX: u64 = 12;
const PRESETS: [&str; 3] = ["workspace-write", "read-only", "danger-full-access"];

/// What to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenOptions {
    /// Exactly this many events are produced, over all batches.
    pub events: u64,
    /// Everything else follows from it.
    pub seed: u64,
}

/// The seq of the V2 generator's stand-in for the system head: a V2 log has no system node,
/// but its prompt is part of every request, so the surface model keeps a node for it that no
/// event ever names.
const V2_PROMPT_NODE_SEQ: u64 = u64::MAX;

/// Writes one synthetic V3 (or V2) session, batch by batch.
#[derive(Debug, Clone)]
pub struct Generator {
    options: GenOptions,
    /// V3, or V2: no `system/message` events, the prompt travels in `header.system`, no
    /// in-history route.
    version: FormatVersion,
    /// V2 and V0: the system prompt in force, written into every `request/header`.
    prompt: Option<String>,
    /// V0: every batch is built as V2 and then has its streams expanded into chunk events.
    expansion: Option<v0::Expansion>,
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

impl Generator {
    /// A generator of a V3 session.
    pub fn new(options: GenOptions) -> Generator {
        Generator::for_version(options, FormatVersion::V3)
            .expect("the current version is generated")
    }

    /// A generator of a session of `version`: V3; V4 (V3's session written natively as dsh's
    /// V4 writer does: producer-owned sources, tool results as tool messages, a developer
    /// message bound to each tool-changing request header); V2 (the last version before the
    /// system prompt became a surface node); or V0 (V2 with every embedded stream expanded
    /// into top-level `assistant/chunk` events that the message cites), for migration
    /// benchmarks and tests. A V0 log holds `events` events before its streams are expanded, so it holds
    /// more in the end; [`Generator::next_batch`] returns them all.
    pub fn for_version(options: GenOptions, version: FormatVersion) -> Result<Generator, String> {
        if !matches!(
            version,
            FormatVersion::V0 | FormatVersion::V2 | FormatVersion::V3 | FormatVersion::V4
        ) {
            return Err(format!(
                "cannot generate {version} logs, only v0, v2, v3 and v4"
            ));
        }
        Ok(Generator {
            options,
            version,
            prompt: None,
            expansion: (version == FormatVersion::V0).then(v0::Expansion::default),
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
        })
    }

    /// The header: an id derived from the seed, a fixed `createdAt`, cwd `/work/gen`.
    pub fn header(&self) -> SessionHeader {
        let id = Rng::new(self.options.seed ^ SESSION_ID_SALT).next_u64();
        let mut header = SessionHeader::new_v3(format!("gen-{id:016x}"), CREATED_AT_MS);
        header.cwd = Some(CWD.to_owned());
        header.version = Some(self.version.number());
        if self.version == FormatVersion::V0 {
            // A V0 header says nothing of seeding unless it is seeded (`seedLength`).
            header.is_seeded = None;
        }
        header
    }

    /// Whether the prompt is written as `system/message` events (V3) rather than carried in
    /// request headers (V2).
    fn prompt_on_surface(&self) -> bool {
        self.version.has_system_head()
    }

    /// Whether the session is written in dsh's V4 shapes.
    fn v4(&self) -> bool {
        self.version == FormatVersion::V4
    }

    /// Every event the generator produces, its batches joined.
    pub fn into_events(mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.next_batch()).flatten().collect()
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
        match &mut self.expansion {
            Some(expansion) => Some(expansion.batch(batch)),
            None => Some(batch),
        }
    }

    /// Opens a turn when a whole one fits the budget; otherwise pads with log-only events,
    /// or, before the first turn, cuts the natural log at the budget.
    fn batch_between_turns(&mut self, remaining: u64) -> Vec<Event> {
        // turn/start, the smallest first step, turn/end.
        let first_step = StepPlan {
            head: self.head.is_none(),
            prompt: true,
            prompt_in_header: !self.prompt_on_surface(),
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
}

//! One step of the prompt layer against the store, in the writer order of spec 7.5:
//! `step/start`, the system-prompt commits, the step's user messages, the runtime-context
//! snapshot, then `request/header` and `request/context` when needed, in one atomic batch.
//!
//! The loop instance remembers the surface generation of its last request (series
//! detection) and whether it has made a request (a resume header); everything else is read
//! from the session's fold.

use serde_json::{json, Value};
use sessionlog_format::payload::{
    AssistantMessageData, CallConfig, EpochHeader, RequestContextData, StepRef, TurnEnd, TurnStart,
};
use sessionlog_format::{
    ContentBlock, Event, EventData, Extra, Message, SessionFold, Source, SurfaceOp,
};

use super::capability::PreparedCall;
use super::header_log::{
    context_differs, context_event, decide_header, epoch_header, header_event, HeaderDecision,
    HeaderInputs,
};
use super::projection::{commit_events, project, system_nodes, Commit, EventStamp, ProjectOptions};
use super::runtime::{RuntimeCommit, RuntimeContextProjection};
use super::series::{starts_series, tool_set_changed, SeriesInputs};
use super::tools::ToolSchema;
use super::PromptError;
use sessionlog_engine::log_store::{with_fold, LogStore};

/// What one step brings to the log.
#[derive(Debug, Clone)]
pub struct StepInput<'a> {
    pub turn: u64,
    pub step: u64,
    pub time: i64,
    /// Write `turn/start` first.
    pub new_turn: bool,
    /// The rendered system prompt (`Assembly::render_prompt`).
    pub rendered: &'a str,
    /// The rendered runtime contexts; `None` skips the runtime-context projection.
    pub runtime: Option<Vec<(String, String)>>,
    /// The step's accepted user messages.
    pub users: Vec<Message>,
    /// The call prepared after `agent/request`: its route decides the prompt admission.
    pub call: &'a PreparedCall,
    pub config: CallConfig,
    /// The visible tool schemas, in order.
    pub tools: &'a [ToolSchema],
    /// The `agent/pre-step` decision declares `startsRequestSeries`.
    pub declared_series: bool,
}

/// What a step committed.
#[derive(Debug, Clone, PartialEq)]
pub struct StepOutcome {
    pub first_seq: u64,
    pub next_seq: u64,
    pub commits: Vec<Commit>,
    /// Whether the prompt projection saw a series start.
    pub starts_series: bool,
    pub runtime: Option<RuntimeCommit>,
    pub header: Option<HeaderDecision>,
    pub context_logged: bool,
}

/// The end of a step: the assistant's reply.
#[derive(Debug, Clone)]
pub struct FinishInput<'a> {
    pub turn: u64,
    pub step: u64,
    pub time: i64,
    pub reply: &'a str,
    pub call: &'a PreparedCall,
    /// Write `turn/end` after `step/end`.
    pub end_turn: bool,
}

/// One loop instance over one session.
#[derive(Debug, Clone)]
pub struct PromptLoop {
    session: String,
    /// The surface replace generation at this instance's last request.
    request_generation: Option<u64>,
    runtime: RuntimeContextProjection,
}

/// How a batch opens: a new step, or the readmission of a retried step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opening {
    Step,
    Retry,
}

/// Everything a step reads from the fold.
struct Plan {
    next_seq: u64,
    commits: Vec<Commit>,
    starts_series: bool,
    generation_after: u64,
    tools_changed: bool,
    latest_header: Option<EpochHeader>,
    latest_context: Option<RequestContextData>,
    runtime: Option<RuntimeCommit>,
}

impl PromptLoop {
    /// A new loop instance (a start or a resume) over `session`.
    pub fn new(store: &dyn LogStore, session: &str) -> Result<PromptLoop, PromptError> {
        let runtime = with_fold(store, session, RuntimeContextProjection::restore)?;
        Ok(PromptLoop {
            session: session.to_owned(),
            request_generation: None,
            runtime,
        })
    }

    pub fn session(&self) -> &str {
        &self.session
    }

    /// Runs the prompt side of one step and commits it as one batch.
    pub fn run_step(
        &mut self,
        store: &dyn LogStore,
        input: StepInput<'_>,
    ) -> Result<StepOutcome, PromptError> {
        self.commit(store, input, Opening::Step)
    }

    /// Admits the step's assembly again after a recovery compaction replaced part of the
    /// surface while the step's call was being retried: the same rendering, runtime contexts
    /// and tools, no `step/start` and no user messages (they were admitted once, with the
    /// step). The compaction moved the replace generation, so the projection consolidates the
    /// prompt (a shadowed latest version is restored) under one series header; `input.users`
    /// must be empty.
    pub fn readmit(
        &mut self,
        store: &dyn LogStore,
        input: StepInput<'_>,
    ) -> Result<StepOutcome, PromptError> {
        assert!(
            input.users.is_empty(),
            "a readmission admits no user message"
        );
        assert!(!input.new_turn, "a readmission opens no turn");
        self.commit(store, input, Opening::Retry)
    }

    fn commit(
        &mut self,
        store: &dyn LogStore,
        input: StepInput<'_>,
        opening: Opening,
    ) -> Result<StepOutcome, PromptError> {
        let session = self.session.clone();
        let plan = with_fold(store, &session, |fold| self.plan(fold, &input))?;
        let header = epoch_header(input.config.clone(), input.tools);
        let series_now = SeriesInputs {
            declared: input.declared_series,
            request_generation: self.request_generation,
            surface_generation: plan.generation_after,
            tools_changed: plan.tools_changed,
            tool_update: input.call.tool_update,
        };
        let decision = decide_header(HeaderInputs {
            latest: plan.latest_header.as_ref(),
            next: &header,
            first_of_instance: self.request_generation.is_none(),
            starts_series: starts_series(series_now),
        });
        let context = input.call.request_context();
        let log_context = context_differs(plan.latest_context.as_ref(), &context);
        let time = input.time;
        let (turn, step) = (input.turn, input.step);
        let stamp = |events: &Vec<Event>| EventStamp {
            next_seq: plan.next_seq + events.len() as u64,
            time,
            turn,
            step,
        };
        let mut events: Vec<Event> = Vec::new();
        if input.new_turn {
            let data = TurnStart {
                turn,
                extra: Extra::new(),
            };
            let at = stamp(&events).next_seq;
            events.push(Event::new(at, time, EventData::TurnStart(Box::new(data))));
        }
        if opening == Opening::Step {
            let step_ref = StepRef {
                turn,
                step,
                extra: Extra::new(),
            };
            let at = stamp(&events).next_seq;
            events.push(Event::new(
                at,
                time,
                EventData::StepStart(Box::new(step_ref)),
            ));
        }
        let system = commit_events(&plan.commits, stamp(&events));
        events.extend(system);
        for user in input.users {
            let at = stamp(&events).next_seq;
            let event = Event::new(at, time, EventData::UserMessage(Box::new(user)));
            events.push(event.with_surface_op(SurfaceOp::Append));
        }
        let mut runtime_seq = None;
        if let Some(commit) = &plan.runtime {
            let at = stamp(&events);
            runtime_seq = Some(at.next_seq);
            events.push(commit.event(at));
        }
        if let Some(decision) = decision {
            let at = stamp(&events).next_seq;
            events.push(header_event(at, time, &header, decision));
        }
        if log_context {
            let at = stamp(&events).next_seq;
            events.push(context_event(at, time, context));
        }
        let (first_seq, next_seq) = if events.is_empty() {
            (plan.next_seq, plan.next_seq)
        } else {
            let ack = crate::writes::append_events(store, &self.session, plan.next_seq, events)?;
            (ack.first_seq, ack.next_seq)
        };
        if let (Some(commit), Some(at)) = (&plan.runtime, runtime_seq) {
            self.runtime.committed(at, commit);
        }
        self.request_generation = Some(plan.generation_after);
        Ok(StepOutcome {
            first_seq,
            next_seq,
            commits: plan.commits,
            starts_series: plan.starts_series,
            runtime: plan.runtime,
            header: decision,
            context_logged: log_context,
        })
    }

    /// Decides the step's commits from the fold; changes nothing but the runtime projection's
    /// retained state (which it re-reads from the surface).
    fn plan(&mut self, fold: &SessionFold, input: &StepInput<'_>) -> Plan {
        let generation = fold.replace_generation();
        let latest_header = fold.request_header().cloned();
        let previous_tools = latest_header.as_ref().map(header_tools);
        let tools_changed = tool_set_changed(previous_tools.as_deref(), input.tools);
        let starts = starts_series(SeriesInputs {
            declared: input.declared_series,
            request_generation: self.request_generation,
            surface_generation: generation,
            tools_changed,
            tool_update: input.call.tool_update,
        });
        let options = ProjectOptions {
            in_history: input.call.in_history(),
            starts_series: starts,
        };
        let commits = project(&system_nodes(fold), input.rendered, options);
        let replaces = commits
            .iter()
            .filter(|c| matches!(c, Commit::Replace { .. }))
            .count() as u64;
        let runtime = match &input.runtime {
            Some(sections) => self.runtime.project(fold, sections.clone()),
            None => None,
        };
        Plan {
            next_seq: fold.admission().next_seq(),
            commits,
            starts_series: starts,
            generation_after: generation + replaces,
            tools_changed,
            latest_header,
            latest_context: fold.request_context().cloned(),
            runtime,
        }
    }

    /// Commits the assistant's reply, `step/end` and, when asked, `turn/end`.
    pub fn finish_step(
        &mut self,
        store: &dyn LogStore,
        input: FinishInput<'_>,
    ) -> Result<u64, PromptError> {
        let next_seq = with_fold(store, &self.session, |f| f.admission().next_seq())?;
        let source = Source {
            kind: "model".to_owned(),
            plugin: None,
            provider: Some(input.call.provider.clone()),
            model: Some(input.call.model.clone()),
            call_id: None,
            extra: Extra::new(),
        };
        let message = Message {
            id: Some(format!("assistant-{next_seq}")),
            role: Some("assistant".to_owned()),
            content: vec![ContentBlock::text(input.reply)],
            source: Some(source),
            extra: Extra::new(),
        };
        let data = AssistantMessageData {
            turn: input.turn,
            step: input.step,
            message,
            stream: Some(Vec::new()),
            usage: None,
            interrupted: None,
            extra: Extra::new(),
        };
        let assistant = Event::new(
            next_seq,
            input.time,
            EventData::AssistantMessage(Box::new(data)),
        )
        .with_surface_op(SurfaceOp::Append);
        let step_ref = StepRef {
            turn: input.turn,
            step: input.step,
            extra: Extra::new(),
        };
        let mut events = vec![
            assistant,
            Event::new(
                next_seq + 1,
                input.time,
                EventData::StepEnd(Box::new(step_ref)),
            ),
        ];
        if input.end_turn {
            let data = TurnEnd {
                turn: input.turn,
                reason: json!({ "kind": "completed" }),
                extra: Extra::new(),
            };
            events.push(Event::new(
                next_seq + 2,
                input.time,
                EventData::TurnEnd(Box::new(data)),
            ));
        }
        Ok(crate::writes::append_events(store, &self.session, next_seq, events)?.next_seq)
    }
}

/// The tool schemas of a header, named by their `name` member.
fn header_tools(header: &EpochHeader) -> Vec<ToolSchema> {
    let Some(Value::Array(tools)) = &header.tools else {
        return Vec::new();
    };
    tools
        .iter()
        .map(|schema| ToolSchema {
            name: schema
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            schema: schema.clone(),
        })
        .collect()
}

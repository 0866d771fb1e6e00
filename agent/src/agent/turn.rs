//! The agent loop: turns of steps in the writer order of spec 7.5.
//!
//! Per step: claim the inbox (the turn's input, on its first step) -> assemble the prompt ->
//! project the runtime context -> the pre-step hook (none is registered here) -> bind the
//! prepared call (the route: its capability decides the admission) -> one batch from
//! [`PromptLoop::run_step`]: `turn/start` (first step), `step/start`, the `system/message`s,
//! the step's `user/message`s, the runtime-context snapshot, `request/header` and
//! `request/context` when needed -> the request body serialised from the fold -> stream ->
//! `assistant/message` with its `tool/call`s -> run the tools -> their `tool/result`s and
//! `step/end` (and `turn/end` when the model asked for no tool).
//!
//! Before the batch, the step compares its call with the fold's request in force: a changed
//! visible tool set adds a tool-update notice (a plugin user message listing only the added
//! and removed names, which the DeepSeek serializer turns into `<tool_addition>` /
//! `<tool_removal>` blocks of an in-history system message), and a changed route adds a
//! one-line model-switch notice saying which model wrote the replies above. Both are
//! admitted with the step's users, after the history and before the new user input.
//!
//! A retryable failure commits `assistant/attempt`, `llm/retry`, waits, commits
//! `llm/retry-started` and sends the same body again: the retry reuses the step's assembly
//! and the users are admitted once. A cancel before the batch commits nothing; a cancel
//! mid-stream commits no partial message, only an `assistant/attempt` that failed with
//! `ABORTED` and the closers of the step and the turn.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use sessionlog_format::payload::{
    AssistantAttemptData, AssistantMessageData, CallConfig, ToolCallData,
};
use sessionlog_format::{
    ContentBlock, Event, EventData, EventType, Extra, Message, SessionFold, SessionHeader, Source,
    SurfaceOp,
};

use super::adapter::{
    failed_stream, CallFailure, CallRequest, Completion, LlmAdapter, RetryPolicy, StreamBuilder,
};
use super::deepseek::serialize::{wire_body, TOOL_UPDATE_FORM};
use super::events::{step_end, step_ref, tool_result, turn_end, ToolAnswer};
use super::repair::repair_session;
use super::tools::{BuiltinTools, PLAN_TOOL};
use super::{AgentError, CancelToken};
use crate::compaction::trigger::CompactionPolicy;
use crate::context::instructions::Instructions;
use crate::context::notices::{
    approval_notice, plan_mode_notice, working_directory_notice, Announced, NOTICE_PLUGIN,
    PLAN_MODE_FORM,
};
use crate::context::skills::{invocation_message, SkillCatalog, CATALOG_SOURCE, SKILL_TOOL};
use crate::prompt::capability::PreparedCall;
use crate::prompt::registry::{AssemblyContext, Item, Layer, PromptRegistry, Registration};
use crate::prompt::step::{PromptLoop, StepInput};
use crate::prompt::tools::ToolSchema;
use sessionlog_engine::log_store::{with_fold, LogStore};

pub use super::options::{
    ContextOptions, RouteSelector, BASE_PROMPT, DEFAULT_APPROVAL_POLICY, MODEL_SWITCH_FORM,
    TURN_STEPS_MAX,
};

/// The injected context of one agent: instructions and skills.
struct Context {
    instructions: Instructions,
    skills: SkillCatalog,
    /// The skill names the log's latest catalog listed (a new catalog follows a change).
    catalog_sent: Option<Vec<String>>,
}

/// The context state a step keeps once its batch is committed.
struct Settled {
    announced: Announced,
    instructions: Option<Instructions>,
    /// The skill names the log's latest catalog listed (a new catalog follows a change).
    catalog_sent: Option<Vec<String>>,
}

/// The assembly a step admitted, kept so that a retry after a recovery compaction admits
/// exactly the same prompt, contexts and tools again.
struct Admitted {
    rendered: String,
    contexts: Vec<(String, String)>,
    tools: Vec<ToolSchema>,
}

/// What one step did: its reply text, and whether it ended the turn.
struct StepOutcome {
    reply: String,
    ends_turn: bool,
}

/// The tool calls of a reply: `(id, name, arguments)` in order.
fn tool_calls(content: &[ContentBlock]) -> Vec<(String, String, String)> {
    content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolCall(c) => Some((c.id.clone(), c.name.clone(), c.arguments.clone())),
            _ => None,
        })
        .collect()
}

/// What a finished turn did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnReport {
    pub turn: u64,
    pub steps: u64,
    /// The text of the last assistant message.
    pub reply: String,
}

/// One agent over one session of a store.
pub struct Agent<'a> {
    store: &'a dyn LogStore,
    session: String,
    prompt: PromptLoop,
    registry: PromptRegistry,
    tools: BuiltinTools,
    /// Tools added through [`Agent::add_tool`], by name.
    extra_tools: Vec<(String, Registration)>,
    adapter: Box<dyn LlmAdapter + 'a>,
    route: RouteSelector,
    retry: RetryPolicy,
    /// The pressure-compaction policy; `None` reads it from the environment at each step.
    compaction: Option<CompactionPolicy>,
    last_turn: u64,
    /// Instructions and skills, once [`Agent::with_context`] installed them.
    context: Option<Context>,
    /// The `skill` tool's registration (with a non-empty catalog).
    skill_tool: Option<Registration>,
    approval: String,
    cwd: PathBuf,
    /// What the log's notices announced last.
    announced: Announced,
}

fn now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// The request body the fold's head sends: the header in force and the derived messages.
pub fn fold_body(fold: &SessionFold) -> Value {
    let header = fold.request_header();
    let config = header
        .and_then(|h| serde_json::to_value(&h.config).ok())
        .unwrap_or(Value::Null);
    let tools = header.and_then(|h| h.tools.as_ref());
    let messages: Vec<Message> = fold
        .node_messages()
        .filter_map(|(_, m)| m.cloned())
        .collect();
    wire_body(&config, tools, &messages)
}

fn call_config(route: &PreparedCall) -> CallConfig {
    CallConfig {
        provider: Some(route.provider.clone()),
        model: route.model.clone(),
        reasoning_effort: None,
        temperature: None,
        max_tokens: None,
        stop: None,
        extra: Extra::new(),
    }
}

fn source(kind: &str) -> Source {
    crate::context::source_of(kind, &[])
}

impl<'a> Agent<'a> {
    /// Opens `session` (created when new), repairs an interrupted turn, and installs the
    /// base prompt and the built-in tools rooted at `root`.
    pub fn open(
        store: &'a dyn LogStore,
        session: &str,
        adapter: Box<dyn LlmAdapter + 'a>,
        route: PreparedCall,
        root: &Path,
    ) -> Result<Agent<'a>, AgentError> {
        if !store.sessions()?.iter().any(|s| s == session) {
            let created = u64::try_from(now_ms()).unwrap_or(0);
            store.create_session(&SessionHeader::new_v3(session, created), false)?;
        }
        repair_session(store, session)?;
        let head = store.head(session)?;
        let events = store.read_range(session, 0, head.next_seq)?;
        let last_turn = events
            .iter()
            .filter_map(|e| match &e.data {
                EventData::TurnStart(d) => Some(d.turn),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let plan = plan_mode_in_log(&events);
        let announced = Announced::restore(events.iter().filter_map(|e| e.message()));
        let registry = PromptRegistry::new();
        let base = Item::section("base", 0, |_| BASE_PROMPT.to_owned());
        registry
            .register(Layer::Global, base)
            .map_err(|e| AgentError::Assembly(e.to_string()))?;
        let mut tools = BuiltinTools::install(&registry, root).map_err(AgentError::Assembly)?;
        if plan {
            let restored = tools.set_plan(&registry, true);
            if restored.is_error {
                return Err(AgentError::Assembly(restored.text));
            }
        }
        let prompt = PromptLoop::new(store, session)?;
        Ok(Agent {
            store,
            session: session.to_owned(),
            prompt,
            registry,
            tools,
            extra_tools: Vec::new(),
            adapter,
            route: RouteSelector::new(route),
            retry: RetryPolicy::default(),
            compaction: None,
            last_turn,
            context: None,
            skill_tool: None,
            approval: DEFAULT_APPROVAL_POLICY.to_owned(),
            cwd: root.to_path_buf(),
            announced,
        })
    }

    /// Installs the injected context: project instructions discovered from the working
    /// directory (and `options.user_dir`), and the skills of `options.skill_dirs` with the
    /// `skill` tool when there is one. What the log already announced is restored.
    pub fn with_context(mut self, options: ContextOptions) -> Result<Agent<'a>, AgentError> {
        let mut instructions =
            Instructions::new(options.user_dir, self.cwd.clone(), options.budget_bytes);
        let head = self.store.head(&self.session)?;
        let events = self.store.read_range(&self.session, 0, head.next_seq)?;
        let messages = || events.iter().filter_map(|e| e.message());
        instructions.restore(messages());
        let catalog_sent = messages()
            .filter_map(|m| m.source.as_ref().filter(|s| s.kind == CATALOG_SOURCE))
            .next_back()
            .map(|s| catalog_names(s.extra.get("skills")));
        let skills = SkillCatalog::discover(&options.skill_dirs);
        if !skills.is_empty() {
            let item = Item::tools("skill", |_| vec![SkillCatalog::tool_schema()]);
            let registration = self
                .registry
                .register(Layer::Global, item)
                .map_err(|e| AgentError::Assembly(e.to_string()))?;
            self.skill_tool = Some(registration);
        }
        self.context = Some(Context {
            instructions,
            skills,
            catalog_sent,
        });
        Ok(self)
    }

    /// The approval policy in force.
    pub fn approval_policy(&self) -> &str {
        &self.approval
    }

    /// Changes the approval policy; the next step appends a one-line notice when it differs
    /// from the one announced.
    pub fn set_approval_policy(&mut self, policy: &str) {
        self.approval = policy.to_owned();
    }

    pub fn working_directory(&self) -> &Path {
        &self.cwd
    }

    /// Changes the working directory: the tools resolve paths there, its instructions are
    /// looked up, and the next step appends a one-line notice.
    pub fn set_working_directory(&mut self, cwd: &Path) {
        self.cwd = cwd.to_path_buf();
        self.tools.set_root(cwd);
        if let Some(context) = &mut self.context {
            context.instructions.set_cwd(cwd.to_path_buf());
        }
    }

    pub fn with_retry(mut self, retry: RetryPolicy) -> Agent<'a> {
        self.retry = retry;
        self
    }

    /// Sets the pressure-compaction policy, overriding [`CompactionPolicy::from_env`].
    pub fn with_compaction(mut self, policy: CompactionPolicy) -> Agent<'a> {
        self.compaction = Some(policy);
        self
    }

    /// The pressure-compaction policy the next step uses.
    pub fn compaction_policy(&self) -> CompactionPolicy {
        self.compaction.unwrap_or_else(CompactionPolicy::from_env)
    }

    pub fn session(&self) -> &str {
        &self.session
    }

    pub fn registry(&self) -> &PromptRegistry {
        &self.registry
    }

    /// Binds another route for the next steps (a model switch). The next step logs the
    /// model-switch notice when the route's provider or model differs from the request in
    /// force.
    pub fn set_route(&mut self, route: PreparedCall) {
        self.route.select(route);
    }

    /// The route the next step binds.
    pub fn route(&self) -> PreparedCall {
        self.route.current()
    }

    /// A handle that changes the selection from elsewhere, also while a step runs.
    pub fn selector(&self) -> RouteSelector {
        self.route.clone()
    }

    /// Whether plan mode is active (restored from the log on open).
    pub fn plan_mode(&self) -> bool {
        self.tools.plan_mode()
    }

    /// Turns plan mode on or off from outside the model (the user's toggle): the plan
    /// section enters or leaves the prompt and the next step appends a plan-mode notice after
    /// its user message (which a resumed session restores the mode from); the tool table
    /// stays.
    pub fn set_plan_mode(&mut self, active: bool) -> Result<(), AgentError> {
        let output = self.tools.set_plan(&self.registry, active);
        if output.is_error {
            return Err(AgentError::Assembly(output.text));
        }
        Ok(())
    }

    /// Offers one more tool from the next step on (an MCP server connected, a plugin
    /// installed); the next step logs the tool-update notice. The loop answers a call of
    /// such a tool with an error result: it has no implementation.
    pub fn add_tool(&mut self, schema: ToolSchema) -> Result<(), AgentError> {
        let name = schema.name.clone();
        let builtin = super::tools::schemas().iter().any(|t| t.name == name);
        if builtin || self.extra_tools.iter().any(|(n, _)| *n == name) {
            return Err(AgentError::Assembly(format!(
                "tool {name:?} is already offered"
            )));
        }
        let item = Item::tools(&format!("extra:{name}"), move |_| vec![schema.clone()]);
        let registration = self
            .registry
            .register(Layer::Global, item)
            .map_err(|e| AgentError::Assembly(e.to_string()))?;
        self.extra_tools.push((name, registration));
        Ok(())
    }

    /// Withdraws a tool added by [`Agent::add_tool`]; `false` when no such tool was added.
    pub fn remove_tool(&mut self, name: &str) -> bool {
        let Some(idx) = self.extra_tools.iter().position(|(n, _)| n == name) else {
            return false;
        };
        let (_, registration) = self.extra_tools.remove(idx);
        self.registry.release(&registration)
    }

    /// Appends events built from the session's next seq.
    fn append(&self, build: impl FnOnce(u64) -> Vec<Event>) -> Result<u64, AgentError> {
        let next = with_fold(self.store, &self.session, |f| f.admission().next_seq())?;
        let events = build(next);
        Ok(crate::writes::append_events(self.store, &self.session, next, events)?.next_seq)
    }

    /// Runs one turn for the user's `input`; `on_text` sees the reply text as it streams.
    pub fn run_turn(
        &mut self,
        input: &str,
        cancel: &CancelToken,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<TurnReport, AgentError> {
        if input.trim().is_empty() {
            return Err(AgentError::EmptyInput);
        }
        let turn = self.last_turn + 1;
        let mut users = vec![Message {
            id: Some(format!("user-{}-{turn}", self.session)),
            role: Some("user".into()),
            content: vec![ContentBlock::text(input)],
            source: Some(source("user")),
            extra: Extra::new(),
        }];
        let mut reply = String::new();
        for step in 1..=TURN_STEPS_MAX {
            let outcome = self.run_step((turn, step), &mut users, cancel, on_text)?;
            reply = outcome.reply;
            if outcome.ends_turn {
                return Ok(TurnReport {
                    turn,
                    steps: step,
                    reply,
                });
            }
        }
        Ok(TurnReport {
            turn,
            steps: TURN_STEPS_MAX,
            reply,
        })
    }

    /// One step in the writer order of spec 7.5: the assembly, the pre-step compaction, the
    /// prompt side and the step's context (one batch), the call and its reply, the tools, then
    /// the results and the step's (and maybe the turn's) end.
    fn run_step(
        &mut self,
        (turn, step): (u64, u64),
        users: &mut Vec<Message>,
        cancel: &CancelToken,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<StepOutcome, AgentError> {
        let admitted = self.assemble()?;
        let route = self.route.current();
        crate::compaction::trigger::pre_step_with(
            self.compaction_policy(),
            self.store,
            &self.session,
            &mut *self.adapter,
            &route,
            turn,
            step,
            cancel,
        )?;
        if cancel.is_cancelled() {
            if step > 1 {
                self.close(turn, None, "aborted")?;
            }
            return Err(AgentError::Cancelled);
        }
        self.commit_step((turn, step), &route, &admitted, users)?;
        let completion = self.call((turn, step), &route, &admitted, cancel, on_text)?;
        let reply = ContentBlock::reply_text(&completion.content);
        let calls = tool_calls(&completion.content);
        let call_seqs = self.commit_reply(turn, step, &route, completion, &calls)?;
        let mut results = Vec::new();
        for ((id, name, arguments), seq) in calls.iter().zip(call_seqs) {
            let output = self.run_tool(name, arguments);
            results.push((id.clone(), seq, output));
        }
        let ends_turn = calls.is_empty() || step == TURN_STEPS_MAX;
        self.commit_results((turn, step), results, ends_turn)?;
        Ok(StepOutcome { reply, ends_turn })
    }

    /// The step's prompt, runtime contexts and tools from the registry.
    fn assemble(&self) -> Result<Admitted, AgentError> {
        let assembly = self
            .registry
            .assemble(&AssemblyContext::agent("main"))
            .map_err(|e| AgentError::Assembly(e.to_string()))?;
        let rendered = assembly
            .render_prompt()
            .map_err(|e| AgentError::Assembly(e.to_string()))?;
        let contexts = assembly
            .render_contexts()
            .map_err(|e| AgentError::Assembly(e.to_string()))?;
        Ok(Admitted {
            rendered,
            contexts,
            tools: assembly.tools,
        })
    }

    /// Commits the step's opening batch: the switch notices and the step's context and user
    /// messages around the prompt side (`PromptLoop::run_step`).
    fn commit_step(
        &mut self,
        (turn, step): (u64, u64),
        route: &PreparedCall,
        admitted: &Admitted,
        users: &mut Vec<Message>,
    ) -> Result<(), AgentError> {
        let notices = with_fold(self.store, &self.session, |fold| {
            switch_notices(fold, &self.session, route, &admitted.tools, (turn, step))
        })?;
        let (admitted_users, after) = self.step_context(notices, users, (turn, step));
        let input = StepInput {
            turn,
            step,
            time: now_ms(),
            new_turn: step == 1,
            rendered: &admitted.rendered,
            runtime: (!admitted.contexts.is_empty()).then(|| admitted.contexts.clone()),
            users: admitted_users,
            call: route,
            config: call_config(route),
            tools: &admitted.tools,
            declared_series: false,
        };
        self.prompt.run_step(self.store, input)?;
        self.settle_context(after);
        self.last_turn = turn;
        Ok(())
    }

    /// Commits the tools' results, the step's end and, when the turn ends, its end.
    fn commit_results(
        &self,
        (turn, step): (u64, u64),
        results: Vec<(String, u64, super::tools::ToolOutput)>,
        ends_turn: bool,
    ) -> Result<u64, AgentError> {
        self.append(|next| {
            let time = now_ms();
            let mut events = Vec::new();
            for (id, seq, output) in &results {
                let at = next + events.len() as u64;
                let answer = ToolAnswer {
                    call_id: id,
                    text: &output.text,
                    is_error: output.is_error,
                    error: None,
                };
                let message_id = format!("tool-result-{id}-{at}");
                events.push(tool_result(
                    (at, time),
                    (turn, step),
                    message_id,
                    answer,
                    Some(vec![*seq]),
                ));
            }
            let at = next + events.len() as u64;
            events.push(step_end(at, time, (turn, step)));
            if ends_turn {
                events.push(turn_end(at + 1, time, turn, "completed"));
            }
            events
        })
    }

    /// Runs one tool call: the `skill` tool against the catalog, the built-ins otherwise. A
    /// `read` or `write` marks its path for the deeper-directory instructions lookup.
    fn run_tool(&mut self, name: &str, arguments: &str) -> super::tools::ToolOutput {
        if let Some(context) = &mut self.context {
            if name == SKILL_TOOL && !context.skills.is_empty() {
                return match context.skills.load(arguments) {
                    Ok(text) => super::tools::ToolOutput {
                        text,
                        is_error: false,
                    },
                    Err(text) => super::tools::ToolOutput {
                        text,
                        is_error: true,
                    },
                };
            }
            if name == "read" || name == "write" {
                let args: Option<Value> = serde_json::from_str(arguments).ok();
                if let Some(path) = args.as_ref().and_then(|a| a.get("path")?.as_str()) {
                    context.instructions.touched(Path::new(path));
                }
            }
        }
        self.tools.run(&self.registry, name, arguments)
    }

    /// The messages a step admits, in order: the switch notices (tool set, model), the
    /// approval-policy and working-directory notices, the instructions messages, the skill
    /// catalog (when its skills differ from the last one logged), the step's user messages,
    /// the plan-mode notice, then the full text of every skill the user named as
    /// `/skill-name`. Returns them with the state to keep once the batch is committed.
    fn step_context(
        &self,
        mut out: Vec<Message>,
        users: &mut Vec<Message>,
        (turn, step): (u64, u64),
    ) -> (Vec<Message>, Settled) {
        let id = |kind: &str, n: usize| format!("{kind}-{}-{turn}-{step}-{n}", self.session);
        let mut announced = self.announced.clone();
        let approval_before = announced
            .approval
            .clone()
            .unwrap_or_else(|| DEFAULT_APPROVAL_POLICY.to_owned());
        if approval_before != self.approval {
            out.push(approval_notice(
                id("approval", 0),
                &approval_before,
                &self.approval,
            ));
            announced.approval = Some(self.approval.clone());
        }
        let cwd = self.cwd.display().to_string();
        if let Some(before) = announced.working_directory.clone() {
            if before != cwd {
                out.push(working_directory_notice(
                    id("cwd", 0),
                    Path::new(&before),
                    &self.cwd,
                ));
            }
        }
        announced.working_directory = Some(cwd);
        let mut instructions = None;
        let mut catalog_sent = None;
        let mut invoked = Vec::new();
        if let Some(context) = &self.context {
            let mut next = context.instructions.clone();
            out.extend(next.step_messages(&|n| id("instructions", n)));
            instructions = Some(next);
            catalog_sent = context.catalog_sent.clone();
            let names: Vec<String> = context
                .skills
                .skills()
                .iter()
                .map(|s| s.name.clone())
                .collect();
            if !names.is_empty() && catalog_sent.as_ref() != Some(&names) {
                out.push(context.skills.message(id("skill-catalog", 0)));
                catalog_sent = Some(names);
            }
            for user in users.iter() {
                let text: String = ContentBlock::reply_text(&user.content);
                for skill in context.skills.invoked(&text) {
                    let n = invoked.len();
                    invoked.push(invocation_message(id("skill-invocation", n), skill));
                }
            }
        }
        out.append(users);
        let plan = self.tools.plan_mode();
        if announced.plan_mode.unwrap_or(false) != plan {
            out.push(plan_mode_notice(id(PLAN_MODE_FORM, 0), plan));
        }
        announced.plan_mode = Some(plan);
        out.extend(invoked);
        let settled = Settled {
            announced,
            instructions,
            catalog_sent,
        };
        (out, settled)
    }

    /// Keeps the context state of a committed step.
    fn settle_context(&mut self, settled: Settled) {
        self.announced = settled.announced;
        if let Some(context) = &mut self.context {
            if let Some(instructions) = settled.instructions {
                context.instructions = instructions;
            }
            context.catalog_sent = settled.catalog_sent;
        }
    }

    /// Streams the step's call with bounded retries; returns the completion. After a recovery
    /// compaction the step's assembly is admitted again (see [`PromptLoop::readmit`]) before
    /// the call is sent again.
    fn call(
        &mut self,
        (turn, step): (u64, u64),
        route: &PreparedCall,
        admitted: &Admitted,
        cancel: &CancelToken,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Completion, AgentError> {
        let mut retry = 0u32;
        loop {
            let body = with_fold(self.store, &self.session, fold_body)?;
            let mut builder = StreamBuilder::new();
            let request = CallRequest { route, body: &body };
            let result = self.adapter.stream(&request, cancel, &mut |delta| {
                if let super::adapter::Delta::Text(text) = &delta {
                    on_text(text);
                }
                builder.push(now_ms(), delta);
            });
            let failure = match result {
                Ok(()) => return Ok(builder.finish()),
                Err(failure) => failure,
            };
            self.attempt(turn, step, &failure)?;
            if crate::compaction::trigger::recover_overflow(
                self.store,
                &self.session,
                &mut *self.adapter,
                route,
                turn,
                &failure,
                cancel,
            )? {
                self.readmit((turn, step), route, admitted)?;
                continue;
            }
            if failure.is_aborted() {
                self.close(turn, Some(step), "aborted")?;
                return Err(AgentError::Cancelled);
            }
            if !failure.retryable || retry >= self.retry.max_retries {
                self.close(turn, Some(step), "error")?;
                return Err(AgentError::Call {
                    code: failure.code,
                    message: failure.message,
                });
            }
            retry += 1;
            self.retry_after((turn, step), route, retry, &failure)?;
        }
    }

    /// After a recovery compaction replaced part of the surface, admits the step's kept
    /// assembly again (no `step/start`, no user message).
    fn readmit(
        &mut self,
        (turn, step): (u64, u64),
        route: &PreparedCall,
        admitted: &Admitted,
    ) -> Result<(), AgentError> {
        let input = StepInput {
            turn,
            step,
            time: now_ms(),
            new_turn: false,
            rendered: &admitted.rendered,
            runtime: (!admitted.contexts.is_empty()).then(|| admitted.contexts.clone()),
            users: Vec::new(),
            call: route,
            config: call_config(route),
            tools: &admitted.tools,
            declared_series: false,
        };
        self.prompt.readmit(self.store, input)?;
        Ok(())
    }

    /// Logs retry `retry` of the step's call (`llm/retry`), waits its delay, and logs that it
    /// starts (`llm/retry-started`).
    fn retry_after(
        &self,
        (turn, step): (u64, u64),
        route: &PreparedCall,
        retry: u32,
        failure: &CallFailure,
    ) -> Result<(), AgentError> {
        let delay = self.retry.delay_ms(retry);
        let retry_id = format!("retry-{turn}-{step}-{retry}");
        let scheduled = json!({
            "retryId": retry_id, "turn": turn, "step": step, "provider": route.provider,
            "mode": "normal", "policyKey": "llm", "retry": retry,
            "maxRetries": self.retry.max_retries, "delayMs": delay,
            "failure": failure.to_json(),
        });
        self.append(|next| vec![Event::other(next, now_ms(), EventType::LlmRetry, scheduled)])?;
        std::thread::sleep(Duration::from_millis(delay));
        let started = json!({ "retryId": retry_id, "turn": turn, "step": step, "retry": retry });
        self.append(|next| {
            vec![Event::other(
                next,
                now_ms(),
                EventType::LlmRetryStarted,
                started,
            )]
        })?;
        Ok(())
    }

    /// Commits a failed call as `assistant/attempt`: no partial content.
    fn attempt(&self, turn: u64, step: u64, failure: &CallFailure) -> Result<u64, AgentError> {
        self.append(|next| {
            let time = now_ms();
            let data = AssistantAttemptData {
                turn,
                step,
                stream: failed_stream(time, failure),
                extra: Extra::new(),
            };
            vec![Event::new(
                next,
                time,
                EventData::AssistantAttempt(Box::new(data)),
            )]
        })
    }

    /// Closes the open step (when given) and the turn with `kind`.
    fn close(&self, turn: u64, step: Option<u64>, kind: &str) -> Result<u64, AgentError> {
        self.append(|next| {
            let time = now_ms();
            let mut events = Vec::new();
            if let Some(step) = step {
                let end = EventData::StepEnd(Box::new(step_ref(turn, step)));
                events.push(Event::new(next, time, end));
            }
            events.push(turn_end(next + events.len() as u64, time, turn, kind));
            events
        })
    }

    /// Commits `assistant/message` and one `tool/call` per call; returns the calls' seqs.
    fn commit_reply(
        &self,
        turn: u64,
        step: u64,
        route: &PreparedCall,
        completion: Completion,
        calls: &[(String, String, String)],
    ) -> Result<Vec<u64>, AgentError> {
        let mut seqs = Vec::new();
        self.append(|next| {
            let time = now_ms();
            let mut src = source("model");
            src.provider = Some(route.provider.clone());
            src.model = Some(route.model.clone());
            let message = Message {
                id: Some(format!("assistant-{next}")),
                role: Some("assistant".into()),
                content: completion.content,
                source: Some(src),
                extra: Extra::new(),
            };
            let data = AssistantMessageData {
                turn,
                step,
                message,
                stream: Some(completion.stream),
                usage: completion.usage,
                interrupted: None,
                extra: Extra::new(),
            };
            let mut events =
                vec![
                    Event::new(next, time, EventData::AssistantMessage(Box::new(data)))
                        .with_surface_op(SurfaceOp::Append),
                ];
            for (id, name, arguments) in calls {
                let at = next + events.len() as u64;
                seqs.push(at);
                let data = ToolCallData {
                    turn,
                    step,
                    call_id: id.clone(),
                    name: name.clone(),
                    arguments: arguments.clone(),
                    extra: Extra::new(),
                };
                events.push(Event::new(at, time, EventData::ToolCall(Box::new(data))));
            }
            events
        })?;
        Ok(seqs)
    }
}

/// The names of a catalog message's `skills` member.
fn catalog_names(value: Option<&Value>) -> Vec<String> {
    let Some(Value::Array(names)) = value else {
        return Vec::new();
    };
    names
        .iter()
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect()
}

/// Whether the log leaves plan mode on: the last `plan_mode` call that got a successful
/// result, or the last plan-mode notice, decides.
fn plan_mode_in_log(events: &[Event]) -> bool {
    let mut calls: Vec<(String, bool)> = Vec::new();
    let mut active = false;
    for event in events {
        match &event.data {
            EventData::ToolCall(d) if d.name == PLAN_TOOL => {
                let args: Option<Value> = serde_json::from_str(&d.arguments).ok();
                let wanted = args.as_ref().and_then(|a| a.get("active")?.as_bool());
                if let Some(wanted) = wanted {
                    calls.push((d.call_id.clone(), wanted));
                }
            }
            EventData::UserMessage(d)
                if crate::context::notices::notice_form(d) == Some(PLAN_MODE_FORM) =>
            {
                let extra = d.source.as_ref().map(|s| &s.extra);
                if let Some(on) = extra.and_then(|e| e.get("active")?.as_bool()) {
                    active = on;
                }
            }
            EventData::ToolResult(d) => {
                let id = d.message.source.as_ref().and_then(|s| s.call_id.as_deref());
                // V3 flags the wrapper block, a V4 tool message itself (`isError`).
                let failed = d.error.is_some()
                    || d.message.extra.get("isError") == Some(&Value::Bool(true))
                    || d.message.content.iter().any(
                        |b| matches!(b, ContentBlock::ToolResult(r) if r.is_error == Some(true)),
                    );
                let call = calls.iter().find(|(c, _)| Some(c.as_str()) == id);
                if let (Some((_, wanted)), false) = (call, failed) {
                    active = *wanted;
                }
            }
            _ => {}
        }
    }
    active
}

fn notice(id: String, text: String, form: &str, extra: Extra) -> Message {
    let mut src = source("plugin");
    src.plugin = Some(NOTICE_PLUGIN.to_owned());
    src.extra.insert("form".into(), Value::from(form));
    src.extra.extend(extra);
    Message {
        id: Some(id),
        role: Some("user".into()),
        content: vec![ContentBlock::text(text)],
        source: Some(src),
        extra: Extra::new(),
    }
}

/// The one-line model-switch notice.
pub fn model_switch_text(from: &str, to: &str) -> String {
    format!(
        "Model switch: the assistant replies above were written by {from}; the replies from \
here on are written by {to}."
    )
}

/// The notices a step admits before its users: a tool-update notice when the visible tool
/// names differ from the header in force, and a model-switch notice when the route differs
/// from the request context in force. Nothing before the first request.
fn switch_notices(
    fold: &SessionFold,
    session: &str,
    route: &PreparedCall,
    tools: &[ToolSchema],
    (turn, step): (u64, u64),
) -> Vec<Message> {
    let mut out = Vec::new();
    if let Some(header) = fold.request_header() {
        let before: Vec<String> = match &header.tools {
            Some(Value::Array(list)) => list
                .iter()
                .filter_map(|t| t.get("name")?.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        };
        let added: Vec<String> = tools
            .iter()
            .filter(|t| !before.contains(&t.name))
            .map(|t| t.name.clone())
            .collect();
        let removed: Vec<String> = before
            .iter()
            .filter(|n| !tools.iter().any(|t| t.name == **n))
            .cloned()
            .collect();
        if !added.is_empty() || !removed.is_empty() {
            let mut text = String::from("The tool set changed.");
            if !added.is_empty() {
                text.push_str(&format!(" Added: {}.", added.join(", ")));
            }
            if !removed.is_empty() {
                text.push_str(&format!(" Removed: {}.", removed.join(", ")));
            }
            let mut extra = Extra::new();
            extra.insert("added".into(), json!(added));
            extra.insert("removed".into(), json!(removed));
            let id = format!("tool-update-{session}-{turn}-{step}");
            out.push(notice(id, text, TOOL_UPDATE_FORM, extra));
        }
    }
    if let Some(context) = fold.request_context() {
        if context.provider != route.provider || context.model != route.model {
            let from = format!("{}/{}", context.provider, context.model);
            let to = format!("{}/{}", route.provider, route.model);
            let mut extra = Extra::new();
            extra.insert("from".into(), Value::from(from.clone()));
            extra.insert("to".into(), Value::from(to.clone()));
            let id = format!("model-switch-{session}-{turn}-{step}");
            out.push(notice(
                id,
                model_switch_text(&from, &to),
                MODEL_SWITCH_FORM,
                extra,
            ));
        }
    }
    out
}

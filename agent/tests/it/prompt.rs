//! The prompt layer against a real store: the projection's commits are admitted, node 0 stays
//! untouched on an in-history route while the series continues, and requests reconstructed
//! from the log carry exactly the current prompt (the in-history note's admission, request
//! reconstruction and clearing cases).

use pretty_assertions::assert_eq;
use proptest::prelude::*;
use serde_json::json;

use sessionlog_agent::prompt::capability::{Adapter, Catalog, PreparedCall};
use sessionlog_agent::prompt::header_log::HeaderReason;
use sessionlog_agent::prompt::history::{history, VersionKind};
use sessionlog_agent::prompt::projection::{message_text, Commit};
use sessionlog_agent::prompt::step::{FinishInput, PromptLoop, StepInput, StepOutcome};
use sessionlog_agent::prompt::tools::ToolSchema;
use sessionlog_engine::replay::SessionSource;
use sessionlog_engine::store::Store;
use sessionlog_format::payload::CallConfig;
use sessionlog_format::{ContentBlock, Event, EventData, Extra, Message, SurfaceOp};

use crate::support::{header, source, temp_store, user};

fn flash() -> PreparedCall {
    PreparedCall::prepare(Adapter::DeepSeek, &Catalog::deepseek().models()[0])
}

/// A route without the capability: the same model through pi-ai.
fn pi_flash() -> PreparedCall {
    PreparedCall::prepare(Adapter::PiAi, &Catalog::deepseek().models()[0])
}

/// Another model without the capability.
fn pro() -> PreparedCall {
    PreparedCall {
        model: "deepseek-pro".into(),
        system_prompt_update: None,
        ..flash()
    }
}

fn config(call: &PreparedCall) -> CallConfig {
    CallConfig {
        provider: Some(call.provider.clone()),
        model: call.model.clone(),
        reasoning_effort: None,
        temperature: None,
        max_tokens: None,
        stop: None,
        extra: Extra::new(),
    }
}

fn tools(names: &[&str]) -> Vec<ToolSchema> {
    names
        .iter()
        .map(|n| ToolSchema {
            name: (*n).into(),
            schema: json!({ "name": n, "parameters": {} }),
        })
        .collect()
}

/// A session and a loop instance over it.
struct Harness {
    _dir: tempfile::TempDir,
    store: Store,
    session: String,
    lp: PromptLoop,
    turn: u64,
}

impl Harness {
    fn new() -> Harness {
        let (dir, store) = temp_store();
        store.create_session(&header("s")).unwrap();
        let lp = PromptLoop::new(&store, "s").unwrap();
        Harness {
            _dir: dir,
            store,
            session: "s".into(),
            lp,
            turn: 0,
        }
    }

    /// A process restart: a new loop instance over the same log.
    fn resume(&mut self) {
        self.lp = PromptLoop::new(&self.store, &self.session).unwrap();
    }

    /// The prompt side of a new turn's first step, left open.
    fn open_turn(
        &mut self,
        rendered: &str,
        call: &PreparedCall,
        tool_set: &[ToolSchema],
        declared: bool,
    ) -> StepOutcome {
        self.turn += 1;
        let user_message = Message {
            id: Some(format!("u-{}", self.turn)),
            role: Some("user".into()),
            content: vec![ContentBlock::text(format!("question {}", self.turn))],
            source: Some(source("user")),
            extra: Extra::new(),
        };
        let config = CallConfig {
            provider: Some(call.provider.clone()),
            model: call.model.clone(),
            reasoning_effort: None,
            temperature: None,
            max_tokens: None,
            stop: None,
            extra: Extra::new(),
        };
        let input = StepInput {
            turn: self.turn,
            step: 1,
            time: 0,
            new_turn: true,
            rendered,
            runtime: None,
            users: vec![user_message],
            call,
            config,
            tools: tool_set,
            declared_series: declared,
        };
        let outcome = self.lp.run_step(&self.store, input).unwrap();
        self.check_request(rendered);
        outcome
    }

    /// The reply that closes the open step and its turn.
    fn finish(&mut self, call: &PreparedCall) {
        let finish = FinishInput {
            turn: self.turn,
            step: 1,
            time: 0,
            reply: "ok",
            call,
            end_turn: true,
        };
        self.lp.finish_step(&self.store, finish).unwrap();
    }

    /// One turn of one step: the prompt side, then a reply.
    fn turn_with(
        &mut self,
        rendered: &str,
        call: &PreparedCall,
        tool_set: &[ToolSchema],
        declared: bool,
    ) -> StepOutcome {
        let outcome = self.open_turn(rendered, call, tool_set, declared);
        self.finish(call);
        outcome
    }

    /// The readmission of the current turn's assembly after a recovery compaction.
    fn readmit(&mut self, rendered: &str, call: &PreparedCall) -> StepOutcome {
        let input = StepInput {
            turn: self.turn,
            step: 1,
            time: 0,
            new_turn: false,
            rendered,
            runtime: None,
            users: Vec::new(),
            call,
            config: config(call),
            tools: &tools(&["read"]),
            declared_series: false,
        };
        let outcome = self.lp.readmit(&self.store, input).unwrap();
        self.check_request(rendered);
        outcome
    }

    fn turn(&mut self, rendered: &str, call: &PreparedCall) -> StepOutcome {
        self.turn_with(rendered, call, &tools(&["read"]), false)
    }

    /// The request as reconstructed from the log: its system messages carry exactly the
    /// current prompt as the effective (latest) system text.
    fn check_request(&self, rendered: &str) {
        let systems = self.system_texts();
        if rendered.is_empty() {
            assert_eq!(systems, Vec::<String>::new(), "no prompt version remains");
        } else {
            assert_eq!(systems.last().map(String::as_str), Some(rendered));
        }
        let has_header = self
            .store
            .with_fold(&self.session, |f| f.request_header().is_some());
        assert!(has_header.unwrap(), "every request has a header in force");
    }

    /// The text of every derived system message, in order.
    fn system_texts(&self) -> Vec<String> {
        self.store
            .with_fold(&self.session, |fold| {
                fold.messages()
                    .into_iter()
                    .filter(|m| m.role.as_deref() == Some("system"))
                    .map(message_text)
                    .collect()
            })
            .unwrap()
    }

    /// Surface node 0: its seq and text.
    fn node0(&self) -> (u64, String) {
        self.store
            .with_fold(&self.session, |fold| {
                let seq = fold.admission().surface().nodes()[0].seq;
                let text = message_text(fold.live_event(seq).unwrap().message().unwrap());
                (seq, text)
            })
            .unwrap()
    }

    fn events(&self, outcome: &StepOutcome) -> Vec<Event> {
        self.store
            .read_range(&self.session, outcome.first_seq, outcome.next_seq)
            .unwrap()
    }

    fn event_types(&self, outcome: &StepOutcome) -> Vec<String> {
        self.events(outcome)
            .iter()
            .map(|e| e.kind.as_str().to_owned())
            .collect()
    }

    /// A compaction-like replacement of every node after the head by one summary.
    fn compact(&mut self) {
        self.compact_from(1);
    }

    /// A compaction-like replacement of the surface nodes from position `from_idx` to the
    /// end by one summary.
    fn compact_from(&mut self, from_idx: usize) {
        let (next_seq, nodes) = self
            .store
            .with_fold(&self.session, |f| {
                (f.admission().next_seq(), f.admission().surface().seqs())
            })
            .unwrap();
        let (start, end) = (nodes[from_idx], *nodes.last().unwrap());
        let op = SurfaceOp::Replace {
            start_seq: start,
            end_seq: end,
        };
        let summary = user(next_seq, "summary", op, Some(nodes[from_idx..].to_vec()));
        self.store
            .append(&self.session, next_seq, vec![summary])
            .unwrap();
    }
}

fn append(text: &str) -> Commit {
    Commit::Append { text: text.into() }
}

fn replace(seq: u64, text: &str) -> Commit {
    Commit::Replace {
        seq,
        text: text.into(),
    }
}

// Goal: on an in-history route whose series continues, A -> B -> C appends each version,
// node 0 stays untouched, the appends need no request/header, and the history reports the
// order and the effective version. Method: three turns on deepseek-flash.
#[test]
fn in_history_route_keeps_node_zero() {
    let mut h = Harness::new();
    let first = h.turn("A", &flash());
    assert_eq!(first.commits, vec![append("A")]);
    assert_eq!(first.header.map(|d| d.reason), Some(HeaderReason::Initial));
    assert!(first.context_logged);
    let head = h.node0();
    let second = h.turn("B", &flash());
    assert_eq!(second.commits, vec![append("B")]);
    assert_eq!(
        second.header, None,
        "the append alone needs no request/header"
    );
    assert!(!second.context_logged);
    assert_eq!(
        h.event_types(&second),
        vec!["turn/start", "step/start", "system/message", "user/message"],
        "the system node comes before the step's user messages"
    );
    let third = h.turn("C", &flash());
    assert_eq!(third.commits, vec![append("C")]);
    assert_eq!(h.node0(), head, "node 0 is untouched");
    assert_eq!(h.system_texts(), vec!["A", "B", "C"]);
    let unchanged = h.turn("C", &flash());
    assert_eq!(unchanged.commits, vec![]);
    let history = history(SessionSource::Store {
        store: &h.store,
        session: "s",
    })
    .unwrap();
    let kinds: Vec<VersionKind> = history.versions.iter().map(|v| v.kind).collect();
    assert_eq!(
        kinds,
        vec![
            VersionKind::Initial,
            VersionKind::Append,
            VersionKind::Append
        ]
    );
    let texts: Vec<&str> = history.versions.iter().map(|v| v.text.as_str()).collect();
    assert_eq!(
        texts,
        vec!["A", "B", "C"],
        "C's previous prompt is B, not A"
    );
    assert_eq!(history.effective().map(|v| v.text.as_str()), Some("C"));
}

// Goal: capable -> incapable routing consolidates into node 0, with changed or unchanged
// text; the request/context records the mode change. Method: flash appends B, then pi-ai
// serves the same model.
#[test]
fn capable_to_incapable_route() {
    for next in ["C", "B"] {
        let mut h = Harness::new();
        h.turn("A", &flash());
        let b = h.turn("B", &flash());
        let b_seq = b.first_seq + 2;
        let head = h.node0().0;
        let out = h.turn(next, &pi_flash());
        assert_eq!(out.commits, vec![replace(b_seq, ""), replace(head, next)]);
        assert!(out.context_logged, "systemPromptUpdate changed");
        assert_eq!(out.header.map(|d| d.reason), Some(HeaderReason::Series));
        assert_eq!(h.system_texts(), vec![next.to_owned()]);
        assert_eq!(h.node0().1, next);
    }
}

// Goal: incapable -> capable routing appends the changed prompt: a provider or model swap
// alone is not a series start. Method: pro rewrites, then flash appends.
#[test]
fn incapable_to_capable_route() {
    let mut h = Harness::new();
    h.turn("A", &pro());
    let rewrite = h.turn("B", &pro());
    assert_eq!(rewrite.commits.len(), 1);
    assert!(matches!(rewrite.commits[0], Commit::Replace { .. }));
    let head = h.node0();
    let out = h.turn("C", &flash());
    assert_eq!(out.commits, vec![append("C")]);
    let decision = out.header.unwrap();
    assert_eq!(
        (decision.reason, decision.starts_series),
        (HeaderReason::Change, false)
    );
    assert!(out.context_logged);
    assert_eq!(h.node0(), head);
    assert_eq!(h.system_texts(), vec!["B", "C"]);
}

// Goal: resume continues the series: an unchanged prompt commits nothing, a changed one is
// appended on a capable route, and the first request logs a resume header. Method: restart
// the loop instance twice.
#[test]
fn resume_continues_the_series() {
    let mut h = Harness::new();
    h.turn("A", &flash());
    h.resume();
    let same = h.turn("A", &flash());
    assert_eq!(same.commits, vec![]);
    assert_eq!(same.header.map(|d| d.reason), Some(HeaderReason::Resume));
    h.resume();
    let changed = h.turn("B", &flash());
    assert_eq!(changed.commits, vec![append("B")]);
    assert_eq!(changed.header.map(|d| d.reason), Some(HeaderReason::Resume));
    assert_eq!(h.system_texts(), vec!["A", "B"]);
}

// Goal: an empty rendering clears three active versions on capable and incapable routes;
// repeated and resumed empty requests add no prompt events; restoring brings back only the
// new text (append on a continuing capable route, head refill otherwise). Method: A, B, C,
// then empty, then N.
#[test]
fn clearing_three_active_versions() {
    for (call, restore_appends) in [(flash(), true), (pro(), false)] {
        let mut h = Harness::new();
        h.turn("A", &flash());
        h.turn("B", &flash());
        h.turn("C", &flash());
        let cleared = h.turn("", &call);
        assert_eq!(cleared.commits.len(), 3);
        assert!(cleared.commits.iter().all(|c| c.text().is_empty()));
        assert_eq!(h.system_texts(), Vec::<String>::new());
        assert_eq!(h.turn("", &call).commits, vec![]);
        h.resume();
        assert_eq!(h.turn("", &call).commits, vec![]);
        let restored = h.turn("N", &call);
        assert_eq!(restored.commits.len(), 1);
        assert_eq!(
            matches!(restored.commits[0], Commit::Append { .. }),
            restore_appends
        );
        assert_eq!(h.system_texts(), vec!["N"]);
        let history = history(SessionSource::Store {
            store: &h.store,
            session: "s",
        })
        .unwrap();
        let clears = history
            .versions
            .iter()
            .filter(|v| v.kind == VersionKind::Clear);
        assert_eq!(clears.count(), 3);
        assert_eq!(history.effective().map(|v| v.text.as_str()), Some("N"));
    }
}

// Goal: a cleared prompt has no effective version. Method: clear and read the history.
#[test]
fn cleared_prompt_has_no_effective_version() {
    let mut h = Harness::new();
    h.turn("A", &flash());
    h.turn("", &flash());
    let history = history(SessionSource::Store {
        store: &h.store,
        session: "s",
    })
    .unwrap();
    assert_eq!(history.effective(), None);
    assert_eq!(history.versions[1].kind, VersionKind::Clear);
}

// Goal: a compaction moves the replace generation, so the next request starts a series: the
// prompt is consolidated into node 0 under a series header. Method: compact after B.
#[test]
fn compaction_rebaselines() {
    let mut h = Harness::new();
    h.turn("A", &flash());
    h.turn("B", &flash());
    h.compact();
    assert_eq!(h.system_texts(), vec!["A"], "the compaction shadowed B");
    let out = h.turn("C", &flash());
    assert!(out.starts_series);
    let head = h.node0().0;
    assert_eq!(h.system_texts(), vec!["C"]);
    assert_ne!(head, 0, "node 0 was rewritten");
    assert_eq!(out.header.map(|d| d.reason), Some(HeaderReason::Series));
}

// Goal: a tool-schema change on a route without toolUpdate starts a series: the prompt is
// consolidated even when unchanged, under a change header with startsSeries; with toolUpdate
// the series continues. Method: add a tool after an append.
#[test]
fn tool_change_rebaselines_without_tool_update() {
    let mut h = Harness::new();
    h.turn("A", &flash());
    let b = h.turn("B", &flash());
    let out = h.turn_with("B", &flash(), &tools(&["read", "write"]), false);
    assert!(out.starts_series);
    assert_eq!(out.commits.len(), 2);
    assert_eq!(out.commits[0], replace(b.first_seq + 2, ""));
    let decision = out.header.unwrap();
    assert_eq!(
        (decision.reason, decision.starts_series),
        (HeaderReason::Change, true)
    );
    assert_eq!(h.system_texts(), vec!["B"]);

    let mut h = Harness::new();
    let updating = PreparedCall {
        tool_update: true,
        ..flash()
    };
    h.turn("A", &updating);
    let out = h.turn_with("B", &updating, &tools(&["read", "write"]), false);
    assert!(!out.starts_series);
    assert_eq!(out.commits, vec![append("B")]);
}

// Goal: a declared series start consolidates and logs a series header. Method: declare it.
#[test]
fn declared_series_start() {
    let mut h = Harness::new();
    h.turn("A", &flash());
    h.turn("B", &flash());
    let out = h.turn_with("B", &flash(), &tools(&["read"]), true);
    assert!(out.starts_series);
    assert_eq!(out.header.map(|d| d.reason), Some(HeaderReason::Series));
    assert_eq!(h.system_texts(), vec!["B"]);
}

// Goal: an empty first rendering still reserves the head, and a later prompt on an incapable
// route replaces node 0 rather than landing behind the history. Method: "" then "P".
#[test]
fn empty_first_render_reserves_the_head() {
    let mut h = Harness::new();
    let first = h.turn("", &pro());
    assert_eq!(first.commits, vec![append("")]);
    let (head, text) = h.node0();
    assert_eq!(text, "");
    let out = h.turn("P", &pro());
    assert_eq!(out.commits, vec![replace(head, "P")]);
    let messages = h
        .store
        .with_fold("s", |f| f.messages()[0].role.clone())
        .unwrap();
    assert_eq!(
        messages.as_deref(),
        Some("system"),
        "the prompt leads the request"
    );
}

#[derive(Debug, Clone)]
enum Step {
    Turn {
        text: &'static str,
        route: u8,
        declared: bool,
        tools_changed: bool,
    },
    Compact,
    Resume,
}

fn step() -> impl Strategy<Value = Step> {
    let turn = (
        prop::sample::select(vec!["", "A", "B", "C"]),
        0u8..3,
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.15),
    )
        .prop_map(|(text, route, declared, tools_changed)| Step::Turn {
            text,
            route,
            declared,
            tools_changed,
        });
    prop_oneof![6 => turn, 1 => Just(Step::Compact), 1 => Just(Step::Resume)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    // Goal: after any sequence of steps on any routes, every commit is admitted by the
    // store, and the derived messages hold exactly the current prompt as the effective system
    // text (checked inside each turn); on a continuing in-history step node 0 is untouched.
    // Method: random prompts, routes, declared series, tool changes, compactions, resumes.
    #[test]
    fn derived_messages_hold_the_current_prompt(steps in prop::collection::vec(step(), 1..10)) {
        let mut h = Harness::new();
        let mut wide = false;
        for step in steps {
            match step {
                Step::Compact => {
                    let nodes = h.store.with_fold("s", |f| f.admission().surface().len()).unwrap();
                    if nodes > 1 {
                        h.compact();
                    }
                }
                Step::Resume => h.resume(),
                Step::Turn { text, route, declared, tools_changed } => {
                    wide ^= tools_changed;
                    let tool_set = if wide { tools(&["read", "write"]) } else { tools(&["read"]) };
                    let call = [flash(), pi_flash(), pro()][usize::from(route)].clone();
                    let before = h.store.with_fold("s", |f| f.admission().surface().len()).unwrap();
                    let head_before = (before > 0).then(|| h.node0());
                    let out = h.turn_with(text, &call, &tool_set, declared);
                    if call.in_history() && !out.starts_series && !text.is_empty() {
                        if let Some(head) = head_before {
                            prop_assert_eq!(h.node0(), head);
                        }
                    }
                    if !text.is_empty() && (!call.in_history() || out.starts_series) {
                        prop_assert_eq!(h.system_texts(), vec![text.to_owned()]);
                    }
                }
            }
        }
    }
}

// Goal: the user helper events are well formed for the compaction stand-in. Method: its data
// is a user message.
#[test]
fn summary_is_a_user_message() {
    let event = user(5, "s", SurfaceOp::Append, None);
    assert!(matches!(event.data, EventData::UserMessage(_)));
}

// Goal: the whole path: a registry assembly renders the prompt and the runtime context, the
// loop commits the snapshot after the step's user messages and only when it changed, and a
// disappearing context commits one clear marker. Method: three turns over one registry.
#[test]
fn assembly_and_runtime_context_through_the_loop() {
    use sessionlog_agent::prompt::registry::{AssemblyContext, Item, Layer, PromptRegistry};
    use sessionlog_agent::prompt::runtime::{RuntimeCommit, RUNTIME_DECLARATION};
    use std::cell::RefCell;
    use std::rc::Rc;

    let registry = PromptRegistry::new();
    let sandbox = Rc::new(RefCell::new("read-only".to_owned()));
    let shown = Rc::clone(&sandbox);
    registry
        .register(
            Layer::Global,
            Item::section("identity", -100, |_| "You are {{model}}.".into()),
        )
        .unwrap();
    registry
        .register(
            Layer::Global,
            Item::variable("model", |p| Some(p.ctx.agent.clone())),
        )
        .unwrap();
    registry
        .register(
            Layer::Global,
            Item::context("sandbox", 10, move |_| shown.borrow().clone()),
        )
        .unwrap();
    let ctx = AssemblyContext::agent("deepseek-flash");
    let mut h = Harness::new();
    let call = flash();
    let run = |h: &mut Harness| {
        let assembly = registry.assemble(&ctx).unwrap();
        let rendered = assembly.render_prompt().unwrap();
        let contexts = assembly.render_contexts().unwrap();
        h.turn += 1;
        let input = StepInput {
            turn: h.turn,
            step: 1,
            time: 0,
            new_turn: true,
            rendered: &rendered,
            runtime: Some(contexts),
            users: vec![],
            call: &call,
            config: CallConfig {
                provider: Some(call.provider.clone()),
                model: call.model.clone(),
                reasoning_effort: None,
                temperature: None,
                max_tokens: None,
                stop: None,
                extra: Extra::new(),
            },
            tools: &[],
            declared_series: false,
        };
        let out = h.lp.run_step(&h.store, input).unwrap();
        let finish = FinishInput {
            turn: h.turn,
            step: 1,
            time: 0,
            reply: "ok",
            call: &call,
            end_turn: true,
        };
        h.lp.finish_step(&h.store, finish).unwrap();
        out
    };
    let first = run(&mut h);
    assert_eq!(first.commits, vec![append("You are deepseek-flash.")]);
    let snapshot = first.runtime.clone().unwrap();
    assert_eq!(
        snapshot.text(),
        format!("{RUNTIME_DECLARATION}\n\nread-only")
    );
    assert_eq!(
        h.event_types(&first),
        vec![
            "turn/start",
            "step/start",
            "system/message",
            "user/message",
            "request/header",
            "request/context"
        ]
    );
    let second = run(&mut h);
    assert_eq!(
        (second.commits.len(), second.runtime),
        (0, None),
        "nothing changed"
    );
    sandbox.borrow_mut().clear();
    let third = run(&mut h);
    assert_eq!(third.runtime, Some(RuntimeCommit::Clear));
    h.resume();
    assert_eq!(
        run(&mut h).runtime,
        None,
        "the restored loop retains the clear marker"
    );
}

// Goal: the retry-compaction cases. A recovery compaction during an open step that
// shadows the step's latest prompt version, with no earlier update surviving, is readmitted
// by consolidating the step's prompt into node 0 under one series header; with an earlier
// update surviving (after an empty head), that update is emptied first. A second
// readmission with nothing changed commits nothing and logs no further header. Method: the
// loop's `readmit` after compactions of the tail of an open step.
#[test]
fn readmission_after_a_retry_compaction() {
    let read = tools(&["read"]);
    // Without an earlier surviving update: [A, u, a, B, u] -> compact from 1.
    let mut h = Harness::new();
    h.turn("A", &flash());
    h.open_turn("B", &flash(), &read, false);
    h.compact();
    assert_eq!(h.system_texts(), vec!["A"], "the compaction shadowed B");
    let head = h.node0().0;
    let out = h.readmit("B", &flash());
    assert_eq!(out.commits, vec![replace(head, "B")]);
    assert_eq!(out.header.map(|d| d.reason), Some(HeaderReason::Series));
    assert_eq!(
        h.event_types(&out),
        vec!["system/message", "request/header"]
    );
    let again = h.readmit("B", &flash());
    assert_eq!((again.commits, again.header), (vec![], None));
    assert_eq!(again.first_seq, again.next_seq, "nothing was committed");
    h.finish(&flash());

    // With an earlier surviving update: ["", A, u, a, B, u] -> compact after A.
    let mut h = Harness::new();
    h.turn("", &flash());
    let a = h.turn("A", &flash());
    assert_eq!(a.commits, vec![append("A")]);
    let a_seq = a.first_seq + 2;
    h.open_turn("B", &flash(), &read, false);
    let nodes = h
        .store
        .with_fold("s", |f| f.admission().surface().seqs())
        .unwrap();
    let from = nodes.iter().position(|s| *s == a_seq).unwrap() + 1;
    h.compact_from(from);
    assert_eq!(h.system_texts(), vec!["A"], "A survives, B is shadowed");
    let head = h.node0().0;
    let out = h.readmit("B", &flash());
    assert_eq!(out.commits, vec![replace(a_seq, ""), replace(head, "B")]);
    assert_eq!(out.header.map(|d| d.reason), Some(HeaderReason::Series));
    assert_eq!(h.system_texts(), vec!["B"]);
    let again = h.readmit("B", &flash());
    assert_eq!((again.commits, again.header), (vec![], None));
    h.finish(&flash());
}

// Goal: the request-reconstruction cases: `requests` rebuilds, from the log, the appended
// node under an inherited header with a request/context carrying systemPromptUpdate, the
// series-start fold into node 0, the compaction-driven re-baseline, and the tool-schema
// re-baseline on a route without toolUpdate under a change header that starts a series.
// Method: four kinds of turns on one session, then `requests` over the store.
#[test]
fn requests_reconstruct_the_prompt_versions() {
    use sessionlog_engine::replay::SessionSource;
    use sessionlog_engine::requests::{requests, RequestOptions};

    let mut h = Harness::new();
    h.turn("A", &flash());
    h.turn("B", &flash());
    h.turn_with("B", &flash(), &tools(&["read"]), true);
    h.turn("C", &flash());
    h.compact();
    h.turn("D", &flash());
    h.turn_with("D", &flash(), &tools(&["read", "write"]), false);
    let report = requests(
        SessionSource::Store {
            store: &h.store,
            session: "s",
        },
        RequestOptions { bodies: true },
    )
    .unwrap();
    let systems = |i: usize| -> Vec<String> {
        report.requests[i]
            .messages
            .as_ref()
            .unwrap()
            .iter()
            .filter(|m| m.role.as_deref() == Some("system"))
            .map(message_text)
            .collect()
    };
    assert_eq!(report.requests.len(), 6);
    assert_eq!(report.requests[0].reason.as_deref(), Some("initial"));
    // The appended node under the inherited header.
    assert_eq!(systems(1), vec!["A", "B"]);
    assert_eq!(
        report.requests[1].reason.as_deref(),
        Some("initial"),
        "the initial header is inherited"
    );
    let context = report.requests[1].context.clone().unwrap();
    assert_eq!(context["systemPromptUpdate"], "in-history");
    // The declared series start folds B into node 0.
    assert_eq!(systems(2), vec!["B"]);
    assert_eq!(report.requests[2].reason.as_deref(), Some("series"));
    assert_eq!(systems(3), vec!["B", "C"]);
    // The compaction re-baseline.
    assert_eq!(systems(4), vec!["D"]);
    assert_eq!(report.requests[4].reason.as_deref(), Some("series"));
    // The tool-schema change without toolUpdate.
    assert_eq!(systems(5), vec!["D"]);
    assert_eq!(report.requests[5].reason.as_deref(), Some("change"));
    let messages = report.requests[5].messages.as_ref().unwrap();
    assert_eq!(messages[0].role.as_deref(), Some("system"));
    let header = h
        .store
        .with_fold("s", |f| f.request_header().cloned())
        .unwrap()
        .unwrap();
    let names: Vec<&str> = header
        .tools
        .as_ref()
        .and_then(|t| t.as_array())
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, vec!["read", "write"]);
}

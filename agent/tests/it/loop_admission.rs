//! The loop-level admission cases of the in-history note: cancellation in request middleware
//! (the pre-step compaction hook) or preparation, a
//! selection change while the prepared route stays bound, route changes in both directions
//! with changed and unchanged text, and admission on resume. A scripted adapter records every
//! body; the prompt admission is read from the bodies and the log.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use pretty_assertions::assert_eq;
use serde_json::Value;
use sessionlog_agent::agent::adapter::{CallFailure, CallRequest, Delta, LlmAdapter};
use sessionlog_agent::agent::tools::PLAN_SECTION;
use sessionlog_agent::agent::turn::{Agent, RouteSelector, BASE_PROMPT};
use sessionlog_agent::agent::{AgentError, CancelToken};
use sessionlog_agent::prompt::capability::{
    Adapter, Catalog, ModelInfo, PreparedCall, DEEPSEEK_PROVIDER,
};
use sessionlog_engine::store::Store;
use sessionlog_format::{Event, EventData, EventType};

use crate::support::temp_store;

/// One scripted answer.
#[derive(Clone)]
pub enum Answer {
    Text(&'static str),
    Tool(&'static str, &'static str),
}

/// What the adapter does when a call arrives, before it answers (by call index).
pub type OnCall = Box<dyn FnMut(usize)>;

/// A scripted adapter that records every body it is sent.
pub struct Scripted {
    answers: VecDeque<Answer>,
    bodies: Rc<RefCell<Vec<Value>>>,
    on_call: OnCall,
}

impl Scripted {
    pub fn new(answers: Vec<Answer>, on_call: OnCall) -> (Scripted, Rc<RefCell<Vec<Value>>>) {
        let bodies = Rc::new(RefCell::new(Vec::new()));
        let adapter = Scripted {
            answers: answers.into(),
            bodies: Rc::clone(&bodies),
            on_call,
        };
        (adapter, bodies)
    }
}

impl LlmAdapter for Scripted {
    fn stream(
        &mut self,
        call: &CallRequest<'_>,
        _cancel: &CancelToken,
        sink: &mut dyn FnMut(Delta),
    ) -> Result<(), CallFailure> {
        let index = self.bodies.borrow().len();
        self.bodies.borrow_mut().push(call.body.clone());
        (self.on_call)(index);
        match self.answers.pop_front() {
            Some(Answer::Tool(name, arguments)) => sink(Delta::ToolCall {
                index: 0,
                id: Some(format!("call_{index}")),
                name: Some(name.to_owned()),
                arguments: arguments.to_owned(),
            }),
            Some(Answer::Text(text)) => sink(Delta::Text(text.to_owned())),
            None => return Err(CallFailure::new("SCRIPT_END", "no answer left", false)),
        }
        sink(Delta::Finish("stop".into()));
        Ok(())
    }
}

pub fn flash() -> PreparedCall {
    PreparedCall::prepare(Adapter::DeepSeek, &Catalog::deepseek().models()[0])
}

/// A DeepSeek model without the in-history capability.
pub fn pro() -> PreparedCall {
    let info = ModelInfo {
        provider: DEEPSEEK_PROVIDER.to_owned(),
        model: "deepseek-pro".to_owned(),
        input: Vec::new(),
        context_window: None,
        system_prompt_update: None,
        tool_update: false,
    };
    PreparedCall::prepare(Adapter::DeepSeek, &info)
}

pub fn open<'a>(store: &'a Store, adapter: Scripted, route: PreparedCall) -> Agent<'a> {
    let root = std::env::temp_dir();
    Agent::open(store, "s", Box::new(adapter), route, &root).expect("the agent opens")
}

pub fn turn(agent: &mut Agent<'_>, input: &str) {
    agent
        .run_turn(input, &CancelToken::new(), &mut |_| {})
        .expect("the turn runs");
}

/// The contents of the system messages of a wire body, in order.
pub fn systems(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter(|m| m["role"] == "system")
                .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

pub fn messages(body: &Value) -> Vec<Value> {
    body["messages"].as_array().cloned().unwrap_or_default()
}

pub fn all_events(store: &Store) -> Vec<Event> {
    let head = store.head("s").expect("a head");
    store.read_range("s", 0, head.next_seq).expect("events")
}

fn count(events: &[Event], kind: EventType) -> usize {
    events.iter().filter(|e| e.kind == kind).count()
}

/// The two renderings of the built-in agent, read from a body whose system messages are the
/// base prompt and then the plan-mode prompt.
fn prompts(body: &Value) -> (String, String) {
    let texts = systems(body);
    assert_eq!(
        texts.len(),
        2,
        "the base prompt, then the appended plan prompt"
    );
    assert!(texts[0].starts_with(BASE_PROMPT) && !texts[0].contains(PLAN_SECTION));
    assert!(texts[1].contains(PLAN_SECTION));
    (texts[0].clone(), texts[1].clone())
}

// Goal: a cancel in the step's preparation (before its batch) commits neither the pending
// system prompt nor the step's user messages: on a first step nothing at all; on a later
// step only the turn's closer. Method: a pending plan-mode prompt and a cancelled token; then
// an adapter that cancels during step 1, whose tool call changes the prompt for step 2.
#[test]
fn cancel_in_preparation_commits_no_pending_prompt() {
    let (_dir, store) = temp_store();
    let token = CancelToken::new();
    let trigger = token.clone();
    let answers = vec![
        Answer::Text("hello"),
        Answer::Tool("plan_mode", r#"{"active":false}"#),
    ];
    let on_call: OnCall = Box::new(move |index| {
        if index == 1 {
            trigger.cancel();
        }
    });
    let (adapter, bodies) = Scripted::new(answers, on_call);
    let mut agent = open(&store, adapter, flash());
    turn(&mut agent, "one");
    let settled = all_events(&store).len();
    agent.set_plan_mode(true).expect("plan mode turns on");
    let cancelled = CancelToken::new();
    cancelled.cancel();
    let result = agent.run_turn("two", &cancelled, &mut |_| {});
    assert!(matches!(result, Err(AgentError::Cancelled)));
    assert_eq!(all_events(&store).len(), settled, "nothing was committed");
    let result = agent.run_turn("three", &token, &mut |_| {});
    assert!(matches!(result, Err(AgentError::Cancelled)));
    let events = all_events(&store);
    let kinds: Vec<&EventType> = events[settled..].iter().map(|e| &e.kind).collect();
    assert_eq!(
        kinds,
        vec![
            &EventType::TurnStart,
            &EventType::StepStart,
            &EventType::SystemMessage,
            &EventType::UserMessage,
            &EventType::UserMessage,
            &EventType::AssistantMessage,
            &EventType::ToolCall,
            &EventType::ToolResult,
            &EventType::StepEnd,
            &EventType::TurnEnd,
        ],
        "step 1 admits the plan prompt, the user message and the plan-mode notice; step 2's \
         pending prompt (plan mode off again) is not committed"
    );
    let EventData::TurnEnd(end) = &events.last().expect("events").data else {
        panic!("a turn/end");
    };
    assert_eq!(end.reason["kind"], "aborted");
    assert_eq!(bodies.borrow().len(), 2);
}

// Goal: a selection change while a step runs leaves the step's prepared route bound (its
// reply is sourced from it); the next step binds the new route, and its admission follows
// the new route's capability, not the request/context snapshot in force: the changed prompt
// is consolidated into node 0 on the incapable route. Method: the adapter changes the
// selection during step 1, whose tool call turns plan mode on.
#[test]
fn selection_change_while_the_prepared_route_stays_bound() {
    let (_dir, store) = temp_store();
    let holder: Rc<RefCell<Option<RouteSelector>>> = Rc::new(RefCell::new(None));
    let seen = Rc::clone(&holder);
    let on_call: OnCall = Box::new(move |index| {
        if index == 0 {
            if let Some(selector) = seen.borrow().as_ref() {
                selector.select(pro());
            }
        }
    });
    let answers = vec![
        Answer::Tool("plan_mode", r#"{"active":true}"#),
        Answer::Text("planned"),
    ];
    let (adapter, bodies) = Scripted::new(answers, on_call);
    let mut agent = open(&store, adapter, flash());
    *holder.borrow_mut() = Some(agent.selector());
    turn(&mut agent, "make a plan");
    let bodies = bodies.borrow().clone();
    assert_eq!(bodies[0]["model"], "deepseek-flash");
    assert_eq!(bodies[1]["model"], "deepseek-pro");
    let events = all_events(&store);
    let first_reply = events
        .iter()
        .find_map(|e| match &e.data {
            EventData::AssistantMessage(d) => d.message.source.clone(),
            _ => None,
        })
        .expect("a reply");
    assert_eq!(first_reply.model.as_deref(), Some("deepseek-flash"));
    let texts = systems(&bodies[1]);
    assert_eq!(texts.len(), 1, "consolidated into node 0");
    assert!(texts[0].contains(PLAN_SECTION));
    assert_eq!(messages(&bodies[1])[0]["role"], "system");
    let contexts: Vec<Option<String>> = events
        .iter()
        .filter_map(|e| match &e.data {
            EventData::RequestContext(c) => Some(c.system_prompt_update.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(contexts, vec![Some("in-history".to_owned()), None]);
}

// Goal: capable -> incapable routing consolidates into node 0 with unchanged and with
// changed text, and incapable -> capable appends again while message 0 and the earlier
// messages stay. Method: flash appends the plan section, pro serves the next turn (with
// plan mode kept or dropped), then flash again with plan mode toggled.
#[test]
fn route_changes_decide_the_admission() {
    for changed in [false, true] {
        let (_dir, store) = temp_store();
        let answers = vec![Answer::Text("a"); 4];
        let (adapter, bodies) = Scripted::new(answers, Box::new(|_| {}));
        let mut agent = open(&store, adapter, flash());
        turn(&mut agent, "one");
        agent.set_plan_mode(true).expect("plan on");
        turn(&mut agent, "two");
        agent.set_route(pro());
        if changed {
            agent.set_plan_mode(false).expect("plan off");
        }
        turn(&mut agent, "three");
        agent.set_route(flash());
        agent.set_plan_mode(changed).expect("plan toggled");
        turn(&mut agent, "four");
        let bodies = bodies.borrow().clone();
        let (base, planned) = prompts(&bodies[1]);
        let third = if changed {
            base.clone()
        } else {
            planned.clone()
        };
        assert_eq!(systems(&bodies[2]), vec![third.clone()]);
        assert_eq!(messages(&bodies[2])[0]["content"], third.as_str());
        let (before, after) = (messages(&bodies[2]), messages(&bodies[3]));
        assert_eq!(after[..before.len()], before[..], "the prefix survives");
        let fourth = if changed { planned } else { base };
        assert_eq!(systems(&bodies[3]), vec![third, fourth]);
        let events = all_events(&store);
        assert_eq!(count(&events, EventType::RequestContext), 3);
    }
}

// Goal: resumed-route admission: the first step of a reopened session uses the route it is
// opened with. A log whose prompt was appended in history, reopened on an incapable route,
// consolidates the unchanged prompt into node 0; a log written on the incapable route,
// reopened on a capable one, appends the next change after the history.
#[test]
fn resumed_route_admission() {
    let (_dir, store) = temp_store();
    let answers = vec![
        Answer::Text("a"),
        Answer::Tool("plan_mode", r#"{"active":true}"#),
        Answer::Text("planned"),
    ];
    let (adapter, bodies) = Scripted::new(answers, Box::new(|_| {}));
    let mut agent = open(&store, adapter, flash());
    turn(&mut agent, "one");
    turn(&mut agent, "plan");
    drop(agent);
    let (base, planned) = prompts(&bodies.borrow()[2]);
    let answers = vec![Answer::Text("b")];
    let (adapter, bodies) = Scripted::new(answers, Box::new(|_| {}));
    let mut agent = open(&store, adapter, pro());
    assert!(agent.plan_mode(), "plan mode is restored from the log");
    turn(&mut agent, "resumed on pro");
    drop(agent);
    let on_pro = bodies.borrow()[0].clone();
    assert_eq!(systems(&on_pro), vec![planned.clone()]);
    assert_eq!(messages(&on_pro)[0]["role"], "system");
    let events = all_events(&store);
    let reasons: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.data {
            EventData::RequestHeader(h) => Some(h.reason.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(reasons.last().map(String::as_str), Some("resume"));

    let (adapter, bodies) = Scripted::new(
        vec![
            Answer::Tool("plan_mode", r#"{"active":false}"#),
            Answer::Text("back"),
        ],
        Box::new(|_| {}),
    );
    let mut agent = open(&store, adapter, flash());
    turn(&mut agent, "resumed on flash");
    let bodies = bodies.borrow().clone();
    assert_eq!(systems(&bodies[0]), vec![planned.clone()]);
    let (before, after) = (messages(&bodies[0]), messages(&bodies[1]));
    assert_eq!(after[..before.len()], before[..], "the change is appended");
    assert_eq!(systems(&bodies[1]), vec![planned, base]);
}

// Goal: a cancel in the request middleware (the pre-step compaction hook) commits neither
// the pending system prompt nor the step's user message: the turn leaves only the
// compaction's own events. Method: a second turn under pressure with plan mode pending;
// the adapter cancels when the summarisation call arrives and has no answer for it.
#[test]
fn cancel_in_request_middleware_commits_no_pending_prompt() {
    use sessionlog_agent::compaction::trigger::CompactionPolicy;

    let (_dir, store) = temp_store();
    let token = CancelToken::new();
    let trigger = token.clone();
    let on_call: OnCall = Box::new(move |index| {
        if index == 1 {
            trigger.cancel();
        }
    });
    let (adapter, bodies) = Scripted::new(vec![Answer::Text("a long first answer")], on_call);
    let mut route = flash();
    route.context_window = Some(2_000);
    let agent = open(&store, adapter, route);
    let mut agent = agent.with_compaction(CompactionPolicy {
        threshold_percent: 100,
        retain_percent: 0,
    });
    turn(&mut agent, &"a long first question ".repeat(60));
    let settled = all_events(&store).len();
    let mut agent = agent.with_compaction(CompactionPolicy {
        threshold_percent: 1,
        retain_percent: 0,
    });
    agent.set_plan_mode(true).expect("plan on");
    let result = agent.run_turn("two", &token, &mut |_| {});
    assert!(
        matches!(result, Err(AgentError::Cancelled)),
        "{result:?} {:?}",
        bodies.borrow().len()
    );
    assert_eq!(
        bodies.borrow().len(),
        2,
        "the conversation call, then the summarisation"
    );
    let events = all_events(&store);
    let added: Vec<&EventType> = events[settled..].iter().map(|e| &e.kind).collect();
    assert!(!added.is_empty() && added.contains(&&EventType::CompactionStart));
    assert!(!added.contains(&&EventType::SystemMessage), "{added:?}");
    assert!(!added.contains(&&EventType::UserMessage), "{added:?}");
    assert!(!added.contains(&&EventType::StepStart), "{added:?}");
}

/// Shadows every built-in prompt section of `agent` with an empty one in its nearest scope,
/// so that its rendering is empty; returns the registrations that undo it.
fn shadow_prompt(agent: &Agent<'_>) -> Vec<sessionlog_agent::prompt::registry::Registration> {
    use sessionlog_agent::prompt::registry::{Item, Layer};
    [
        "base",
        "tool:echo",
        "tool:plan_mode",
        "tool:read",
        "tool:write",
    ]
    .iter()
    .map(|name| {
        let item = Item::section(name, 0, |_| String::new());
        agent
            .registry()
            .register(Layer::Scope("main".into()), item)
            .expect("a scope section")
    })
    .collect()
}

fn system_events(store: &Store) -> usize {
    count(&all_events(store), EventType::SystemMessage)
}

// Goal: the clear cases through the loop, on capable and incapable routes: three active
// prompt versions are all cleared by an empty rendering; repeated requests and a seeded
// resume stay empty without extra prompt events; restoring brings back only the new text.
// Method: A, plan (B), A again on flash; then every section shadowed by an empty one on the
// route under test, twice, across a reopen; then the shadow released.
#[test]
fn clear_cases_through_the_loop() {
    for route in [flash(), pro()] {
        let (_dir, store) = temp_store();
        let (adapter, bodies) = Scripted::new(vec![Answer::Text("a"); 4], Box::new(|_| {}));
        let mut agent = open(&store, adapter, flash());
        turn(&mut agent, "one");
        agent.set_plan_mode(true).expect("plan on");
        turn(&mut agent, "two");
        agent.set_plan_mode(false).expect("plan off");
        turn(&mut agent, "three");
        assert_eq!(
            systems(&bodies.borrow()[2]).len(),
            3,
            "three active versions"
        );
        agent.set_route(route.clone());
        let _shadow = shadow_prompt(&agent);
        let before = system_events(&store);
        turn(&mut agent, "cleared");
        assert_eq!(
            system_events(&store) - before,
            3,
            "one clear per active version"
        );
        assert_eq!(systems(&bodies.borrow()[3]), Vec::<String>::new());
        drop(agent);
        let (adapter, bodies) = Scripted::new(vec![Answer::Text("b"); 3], Box::new(|_| {}));
        let mut agent = open(&store, adapter, route.clone());
        let shadow = shadow_prompt(&agent);
        let before = system_events(&store);
        turn(&mut agent, "still empty");
        turn(&mut agent, "and again");
        assert_eq!(system_events(&store), before, "no extra prompt events");
        assert_eq!(systems(&bodies.borrow()[0]), Vec::<String>::new());
        assert_eq!(systems(&bodies.borrow()[1]), Vec::<String>::new());
        for registration in &shadow {
            assert!(agent.registry().release(registration));
        }
        turn(&mut agent, "restored");
        let restored = systems(&bodies.borrow()[2]);
        assert_eq!(restored.len(), 1, "only the new text");
        assert!(restored[0].starts_with(BASE_PROMPT));
        assert_eq!(system_events(&store) - before, 1);
    }
}

//! Compaction through the store and the agent's adapter: the summariser's input, the event sequence, failures.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use sessionlog_agent::agent::adapter::{CallFailure, CallRequest, Delta, LlmAdapter};
use sessionlog_agent::agent::deepseek::client::DeepSeekClient;
use sessionlog_agent::agent::deepseek::serialize::deepseek_row_body;
use sessionlog_agent::agent::turn::Agent;
use sessionlog_agent::agent::CancelToken;
use sessionlog_agent::compaction::run::DEFAULT_RETAIN_TOKENS;
use sessionlog_agent::compaction::trigger::CompactionPolicy;
use sessionlog_agent::compaction::{
    compact, compact_region, surface_nodes, CompactionError, CompactionOptions, RegionError,
    COMPACTION_INSTRUCTION,
};
use sessionlog_agent::prompt::capability::{Adapter, Catalog, PreparedCall};
use sessionlog_engine::replay::SessionSource;
use sessionlog_engine::requests::{requests, PrefixBreak, RequestOptions};
use sessionlog_engine::store::Store;
use sessionlog_format::surface::NodeKind;
use sessionlog_format::{EventData, EventType, SurfaceOp};

use crate::loopback::{done_chunks, is_summarisation, Reply, Server};
use crate::support::temp_store;

/// The context window of the loopback pressure test, in tokens.
const LOOPBACK_WINDOW: u64 = 2_000;

/// One scripted answer.
#[derive(Clone)]
enum Answer {
    Text(String),
    Tool(&'static str, &'static str),
    Fail(&'static str),
    /// A retryable failure (a rate limit).
    Busy,
}

/// A scripted adapter that records every body it is sent.
struct Recorder {
    answers: VecDeque<Answer>,
    bodies: Rc<RefCell<Vec<Value>>>,
    calls: u64,
    /// Answer every summarisation call with a short summary, outside the script.
    summaries_pass: bool,
}

impl Recorder {
    fn new(answers: Vec<Answer>) -> (Recorder, Rc<RefCell<Vec<Value>>>) {
        let bodies = Rc::new(RefCell::new(Vec::new()));
        let recorder = Recorder {
            answers: answers.into(),
            bodies: Rc::clone(&bodies),
            calls: 0,
            summaries_pass: false,
        };
        (recorder, bodies)
    }
}

impl LlmAdapter for Recorder {
    fn stream(
        &mut self,
        call: &CallRequest<'_>,
        _cancel: &CancelToken,
        sink: &mut dyn FnMut(Delta),
    ) -> Result<(), CallFailure> {
        self.calls += 1;
        self.bodies.borrow_mut().push(call.body.clone());
        let last = call.body["messages"].as_array().and_then(|m| m.last());
        let summarising = last.is_some_and(|m| m["content"] == COMPACTION_INSTRUCTION);
        if summarising && self.summaries_pass {
            sink(Delta::Text("short summary".to_owned()));
            sink(Delta::Finish("stop".into()));
            return Ok(());
        }
        match self.answers.pop_front() {
            Some(Answer::Tool(name, arguments)) => sink(Delta::ToolCall {
                index: 0,
                id: Some(format!("call_{}", self.calls)),
                name: Some(name.to_owned()),
                arguments: arguments.to_owned(),
            }),
            Some(Answer::Fail(code)) => return Err(CallFailure::new(code, "scripted", false)),
            Some(Answer::Busy) => return Err(CallFailure::new("RATE_LIMITED", "busy", true)),
            Some(Answer::Text(text)) => sink(Delta::Text(text)),
            None => sink(Delta::Text("short summary".to_owned())),
        }
        sink(Delta::Finish("stop".into()));
        Ok(())
    }
}

fn route(model: &str) -> PreparedCall {
    PreparedCall {
        provider: "replay".into(),
        model: model.into(),
        context_window: None,
        system_prompt_update: None,
        tool_update: false,
    }
}

fn long(words: usize, tag: &str) -> String {
    (0..words)
        .map(|i| format!("{tag}{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Three turns (the first with a tool call) on session "s"; returns the bodies sent.
fn converse(store: &Store) -> Vec<Value> {
    let answers = vec![
        Answer::Tool("echo", r#"{"text":"hi"}"#),
        Answer::Text(long(200, "first")),
        Answer::Text(long(200, "second")),
        Answer::Text(long(40, "third")),
    ];
    let (recorder, bodies) = Recorder::new(answers);
    let root = std::env::temp_dir();
    let mut agent =
        Agent::open(store, "s", Box::new(recorder), route("m"), &root).expect("the agent opens");
    for input in ["use the echo tool", "tell me more", "and more"] {
        agent
            .run_turn(input, &CancelToken::new(), &mut |_| {})
            .expect("a turn");
    }
    let sent = bodies.borrow().clone();
    sent
}

fn manual(retain_tokens: u64) -> CompactionOptions {
    CompactionOptions {
        retain_tokens,
        ..CompactionOptions::default()
    }
}

// Goal: the summarisation call is a prefix-extension of the last routed request: its messages
// equal that request's messages up to the end of the shadowed range, then one trailing user
// instruction, with the same tools and model.
// Method: run three turns through a recording adapter, compact with the same adapter type,
// and compare the recorded summarisation body with the last conversation body.
#[test]
fn summarisation_input_replays_the_routed_prefix() {
    let (_dir, store) = temp_store();
    let sent = converse(&store);
    let last = sent.last().expect("a request").clone();
    let (mut recorder, bodies) = Recorder::new(vec![]);
    let report = compact(
        &store,
        "s",
        &mut recorder,
        &route("m"),
        manual(60),
        &CancelToken::new(),
    )
    .expect("the compaction runs")
    .expect("a range");
    assert!(report.reuses_prefix);
    let summary_body = bodies.borrow()[0].clone();
    let messages = summary_body["messages"].as_array().expect("messages");
    let previous = last["messages"].as_array().expect("messages");
    let (trailing, prefix) = messages.split_last().expect("at least one");
    assert!(prefix.len() >= 2 && prefix.len() <= previous.len());
    assert_eq!(prefix, &previous[..prefix.len()]);
    assert_eq!(previous[0]["role"], "system");
    assert_eq!(trailing["role"], "user");
    assert_eq!(trailing["content"], COMPACTION_INSTRUCTION);
    assert_eq!(summary_body["tools"], last["tools"]);
    assert!(summary_body["tools"].is_array());
    assert_eq!(summary_body["model"], last["model"]);
}

// Goal: one compaction commits start, summary, the checkpoint replace and end, in that order,
// with the checkpoint citing the start, the summary and every shadowed seq; the next request
// shows a compaction break and carries the checkpoint.
// Method: compact after three turns, read the events back, run one more turn, and rebuild the
// requests.
#[test]
fn compaction_commits_the_event_sequence() {
    let (_dir, store) = temp_store();
    converse(&store);
    let before = store.head("s").expect("a head").next_seq;
    let (mut recorder, _) = Recorder::new(vec![Answer::Text("the user asked twice".into())]);
    let report = compact(
        &store,
        "s",
        &mut recorder,
        &route("m"),
        manual(60),
        &CancelToken::new(),
    )
    .expect("the compaction runs")
    .expect("a range");
    assert_eq!(report.start_seq, before);
    let events = store
        .read_range("s", before, before + 4)
        .expect("the events");
    let kinds: Vec<&EventType> = events.iter().map(|e| &e.kind).collect();
    assert_eq!(
        kinds,
        [
            &EventType::CompactionStart,
            &EventType::CompactionSummary,
            &EventType::UserMessage,
            &EventType::CompactionEnd
        ]
    );
    let EventData::CompactionSummary(summary) = &events[1].data else {
        panic!("a summary");
    };
    assert_eq!(summary.shadowed_seqs, report.range.shadowed_seqs);
    assert_eq!(summary.shadowed_token_count, report.range.shadowed_tokens);
    let mut sources = vec![before, before + 1];
    sources.extend(&report.range.shadowed_seqs);
    assert_eq!(events[2].source_event_seqs.as_ref(), Some(&sources));
    assert_eq!(
        events[2].surface_op,
        Some(SurfaceOp::Replace {
            start_seq: report.range.start_seq,
            end_seq: report.range.end_seq
        })
    );
    let EventData::CompactionEnd(end) = &events[3].data else {
        panic!("an end");
    };
    assert_eq!(end.error, None);
    let surface = store
        .with_fold("s", |f| f.admission().surface().seqs())
        .expect("a fold");
    assert_eq!(surface[1], report.checkpoint_seq);

    let (recorder, _) = Recorder::new(vec![Answer::Text("ok".into())]);
    let root = std::env::temp_dir();
    let mut agent =
        Agent::open(&store, "s", Box::new(recorder), route("m"), &root).expect("the agent reopens");
    agent
        .run_turn("continue", &CancelToken::new(), &mut |_| {})
        .expect("a turn");
    let report_rows = requests(
        SessionSource::Store {
            store: &store,
            session: "s",
        },
        RequestOptions::default(),
    )
    .expect("the requests");
    let last = report_rows.requests.last().expect("a request");
    assert_eq!(
        last.prefix.broken_by,
        Some(PrefixBreak::Compaction {
            seq: report.checkpoint_seq
        })
    );
}

// Goal: a failed summarisation commits compaction/end with the error and no checkpoint.
// Method: a scripted failure; the surface is unchanged and the last event is the end.
#[test]
fn failed_summary_records_the_error() {
    let (_dir, store) = temp_store();
    converse(&store);
    let surface = store
        .with_fold("s", |f| f.admission().surface().seqs())
        .expect("a fold");
    let (mut recorder, _) = Recorder::new(vec![Answer::Fail("SERVER_ERROR")]);
    let result = compact(
        &store,
        "s",
        &mut recorder,
        &route("m"),
        manual(60),
        &CancelToken::new(),
    );
    assert!(
        matches!(result, Err(CompactionError::Failed { ref code, .. }) if code == "SERVER_ERROR")
    );
    let after = store
        .with_fold("s", |f| f.admission().surface().seqs())
        .expect("a fold");
    assert_eq!(after, surface);
    let next = store.head("s").expect("a head").next_seq;
    let events = store.read_range("s", next - 2, next).expect("the events");
    assert_eq!(events[0].kind, EventType::CompactionStart);
    let EventData::CompactionEnd(end) = &events[1].data else {
        panic!("an end");
    };
    assert_eq!(
        end.error.as_ref().map(|e| e["code"].clone()),
        Some(json!("SERVER_ERROR"))
    );
}

// Goal: a summary that is not smaller than the span is refused and recorded as an error.
// Method: answer with a summary longer than everything the range holds.
#[test]
fn summary_must_be_smaller() {
    let (_dir, store) = temp_store();
    converse(&store);
    let (mut recorder, _) = Recorder::new(vec![Answer::Text(long(2_000, "x"))]);
    let result = compact(
        &store,
        "s",
        &mut recorder,
        &route("m"),
        manual(60),
        &CancelToken::new(),
    );
    assert!(
        matches!(result, Err(CompactionError::Failed { ref code, .. }) if code == "NOT_SMALLER")
    );
}

// Goal: with nothing to compact, nothing is committed and the adapter is not called.
// Method: retain more than the session holds.
#[test]
fn nothing_to_compact_commits_nothing() {
    let (_dir, store) = temp_store();
    converse(&store);
    let head = store.head("s").expect("a head").next_seq;
    let (mut recorder, bodies) = Recorder::new(vec![]);
    let report = compact(
        &store,
        "s",
        &mut recorder,
        &route("m"),
        manual(DEFAULT_RETAIN_TOKENS * 100),
        &CancelToken::new(),
    )
    .expect("no failure");
    assert_eq!(report, None);
    assert!(bodies.borrow().is_empty());
    assert_eq!(store.head("s").expect("a head").next_seq, head);
}

// Goal: a summarisation route other than the conversation's is allowed and forgoes reuse.
// Method: compact on model "other"; the body names it and the report says no reuse.
#[test]
fn another_summarisation_route_forgoes_reuse() {
    let (_dir, store) = temp_store();
    converse(&store);
    let (mut recorder, bodies) = Recorder::new(vec![]);
    let report = compact(
        &store,
        "s",
        &mut recorder,
        &route("other"),
        manual(60),
        &CancelToken::new(),
    )
    .expect("the compaction runs")
    .expect("a range");
    assert!(!report.reuses_prefix);
    assert_eq!(report.model, "other");
    assert_eq!(bodies.borrow()[0]["model"], "other");
}

// Goal: the incremental breakdown equals one priced from scratch over the fold's surface, at
// every batch of realistic sessions (compactions, head rewrites, in-history prompts, prunes).
// Method: fold generated sessions batch by batch through both the meter and a session fold,
// and compare after each batch.
#[test]
fn meter_replay_equals_the_incremental_fold() {
    use sessionlog_engine::meter::ContextMeter;
    use sessionlog_format::rules::RuleContext;
    use sessionlog_format::{FormatVersion, SessionFold};
    use std::sync::Arc;

    for seed in 0..4 {
        let (_, batches) = crate::support::generated(3_000, seed);
        let mut meter = ContextMeter::new();
        let mut fold = SessionFold::new(RuleContext {
            version: FormatVersion::V3,
            snapshot: false,
        });
        for batch in batches {
            for event in batch {
                meter.push(&event).expect("the meter applies the event");
                fold.admit(Arc::new(event))
                    .expect("the fold admits the event");
            }
            assert_eq!(meter, ContextMeter::from_fold(&fold), "seed {seed}");
        }
    }
}

// Goal: at every request, system + message + tools tokens equal the request's estimated
// tokens as `requests` computes them, including across a compaction.
// Method: three turns, a compaction, one more turn; compare the two reports row by row.
#[test]
fn meter_totals_match_the_requests() {
    use sessionlog_engine::meter::tokens;

    let (_dir, store) = temp_store();
    converse(&store);
    let (mut recorder, _) = Recorder::new(vec![]);
    compact(
        &store,
        "s",
        &mut recorder,
        &route("m"),
        manual(60),
        &CancelToken::new(),
    )
    .expect("the compaction runs")
    .expect("a range");
    let (recorder, _) = Recorder::new(vec![Answer::Text("ok".into())]);
    let root = std::env::temp_dir();
    let mut agent =
        Agent::open(&store, "s", Box::new(recorder), route("m"), &root).expect("the agent reopens");
    agent
        .run_turn("continue", &CancelToken::new(), &mut |_| {})
        .expect("a turn");
    let source = || SessionSource::Store {
        store: &store,
        session: "s",
    };
    let rows = requests(source(), RequestOptions::default()).expect("the requests");
    let report = tokens(source()).expect("the breakdowns");
    assert_eq!(report.requests.len(), rows.requests.len());
    for (row, at) in rows.requests.iter().zip(&report.requests) {
        assert_eq!((at.index, at.seq), (row.index, row.seq));
        assert_eq!(
            at.breakdown.total(),
            row.estimated_tokens,
            "request {}",
            row.index
        );
        assert_eq!(at.breakdown.tools_tokens, row.tools_tokens);
        assert!(at.breakdown.system_tokens > 0);
    }
}

fn windowed(window: u64) -> PreparedCall {
    PreparedCall {
        context_window: Some(window),
        ..route("m")
    }
}

/// The index of the body whose last message is the compaction instruction.
fn summarisation_index(bodies: &[Value]) -> Option<usize> {
    bodies.iter().position(|b| {
        let last = b["messages"].as_array().and_then(|m| m.last());
        last.is_some_and(|m| m["content"] == COMPACTION_INSTRUCTION)
    })
}

// Goal: context pressure compacts in the pre-step phase through the agent's own adapter; the
// summarisation call is the previous routed request's messages up to the end of the shadowed
// range plus one trailing instruction, with the same tools; the next request starts a series.
// Method: a 600-token window and long answers; find the summarisation body among the recorded
// bodies and compare it with the conversation body just before it; check the events.
#[test]
fn pressure_compacts_before_a_step() {
    let (_dir, store) = temp_store();
    let answers = vec![
        Answer::Tool("echo", r#"{"text":"hi"}"#),
        Answer::Text(long(150, "first")),
        Answer::Text(long(150, "second")),
        Answer::Text(long(20, "third")),
    ];
    let (mut recorder, bodies) = Recorder::new(answers);
    recorder.summaries_pass = true;
    let root = std::env::temp_dir();
    let mut agent = Agent::open(&store, "s", Box::new(recorder), windowed(600), &root)
        .expect("the agent opens");
    for input in ["use the echo tool", "tell me more", "and more"] {
        agent
            .run_turn(input, &CancelToken::new(), &mut |_| {})
            .expect("a turn");
    }
    drop(agent);
    let bodies = bodies.borrow().clone();
    let at = summarisation_index(&bodies).expect("a summarisation call");
    assert!(at > 0);
    let (summary, previous) = (&bodies[at], &bodies[at - 1]);
    let messages = summary["messages"].as_array().expect("messages");
    let (trailing, prefix) = messages.split_last().expect("messages");
    let sent = previous["messages"].as_array().expect("messages");
    assert!(prefix.len() >= 2 && prefix.len() <= sent.len());
    assert_eq!(prefix, &sent[..prefix.len()]);
    assert_eq!(trailing["role"], "user");
    assert_eq!(summary["tools"], previous["tools"]);
    assert_eq!(summary["model"], previous["model"]);

    let next = store.head("s").expect("a head").next_seq;
    let events = store.read_range("s", 0, next).expect("the events");
    let start = events
        .windows(2)
        .position(|w| {
            w[0].kind == EventType::CompactionStart && w[1].kind == EventType::CompactionSummary
        })
        .expect("a committed compaction");
    let ends = events.iter().filter_map(|e| match &e.data {
        EventData::CompactionEnd(end) => Some(end.error.is_none()),
        _ => None,
    });
    assert!(ends.clone().count() >= 1 && ends.clone().all(|ok| ok));
    let kinds: Vec<&EventType> = events[start..start + 4].iter().map(|e| &e.kind).collect();
    assert_eq!(
        kinds,
        [
            &EventType::CompactionStart,
            &EventType::CompactionSummary,
            &EventType::UserMessage,
            &EventType::CompactionEnd
        ]
    );
    let series = events[start..].iter().find_map(|e| match &e.data {
        EventData::RequestHeader(h) => Some(h.reason.clone()),
        _ => None,
    });
    assert_eq!(series.as_deref(), Some("series"));
    let report = requests(
        SessionSource::Store {
            store: &store,
            session: "s",
        },
        RequestOptions::default(),
    )
    .expect("the requests");
    let broken = report.requests.iter().any(|r| {
        matches!(r.prefix.broken_by, Some(PrefixBreak::Compaction { seq }) if seq == events[start + 2].seq)
    });
    assert!(broken);
}

// Goal: no window, or a context under the threshold, never compacts.
// Method: three turns on a route without a window and on a huge window.
#[test]
fn no_pressure_no_compaction() {
    for window in [None, Some(1_000_000)] {
        let (_dir, store) = temp_store();
        let (mut recorder, _) = Recorder::new(vec![Answer::Text(long(150, "a"))]);
        recorder.summaries_pass = true;
        let route = PreparedCall {
            context_window: window,
            ..route("m")
        };
        let root = std::env::temp_dir();
        let mut agent =
            Agent::open(&store, "s", Box::new(recorder), route, &root).expect("the agent opens");
        for input in ["one", "two", "three"] {
            agent
                .run_turn(input, &CancelToken::new(), &mut |_| {})
                .expect("a turn");
        }
        drop(agent);
        let next = store.head("s").expect("a head").next_seq;
        let events = store.read_range("s", 0, next).expect("the events");
        assert!(events.iter().all(|e| e.kind != EventType::CompactionStart));
    }
}

// Goal: a context-overflow failure compacts everything after the head and retries the step
// once; the recovery's summarisation call is the failed request's messages up to the end of
// the shadowed range plus one trailing instruction, with the same tools and model; a second
// overflow right after the recovery fails the turn.
// Method: script an overflow on the third turn's call, then a text; then two overflows;
// compare the summarisation body with the failed body just before it.
#[test]
fn overflow_recovers_by_compaction() {
    let (_dir, store) = temp_store();
    let answers = vec![
        Answer::Text(long(100, "first")),
        Answer::Text(long(100, "second")),
        Answer::Fail("CONTEXT_OVERFLOW"),
        Answer::Text("recovered".into()),
        Answer::Fail("CONTEXT_OVERFLOW"),
        Answer::Fail("CONTEXT_OVERFLOW"),
    ];
    let (mut recorder, bodies) = Recorder::new(answers);
    recorder.summaries_pass = true;
    let root = std::env::temp_dir();
    let mut agent =
        Agent::open(&store, "s", Box::new(recorder), route("m"), &root).expect("the agent opens");
    for input in ["one", "two"] {
        agent
            .run_turn(input, &CancelToken::new(), &mut |_| {})
            .expect("a turn");
    }
    let report = agent
        .run_turn("three", &CancelToken::new(), &mut |_| {})
        .expect("the turn recovers");
    assert_eq!(report.reply, "recovered");
    let failed = agent.run_turn("four", &CancelToken::new(), &mut |_| {});
    assert!(matches!(
        failed,
        Err(sessionlog_agent::agent::AgentError::Call { .. })
    ));
    drop(agent);
    let next = store.head("s").expect("a head").next_seq;
    let events = store.read_range("s", 0, next).expect("the events");
    let attempt = events
        .iter()
        .position(|e| e.kind == EventType::AssistantAttempt)
        .expect("an attempt");
    let kinds: Vec<&EventType> = events[attempt..attempt + 7]
        .iter()
        .map(|e| &e.kind)
        .collect();
    // The readmission after the compaction: the prompt is unchanged and already node 0, so
    // only the series header of the new request series is logged.
    assert_eq!(
        kinds,
        [
            &EventType::AssistantAttempt,
            &EventType::CompactionStart,
            &EventType::CompactionSummary,
            &EventType::UserMessage,
            &EventType::CompactionEnd,
            &EventType::RequestHeader,
            &EventType::AssistantMessage
        ]
    );
    let EventData::CompactionStart(start) = &events[attempt + 1].data else {
        panic!("a start");
    };
    assert_eq!(start.turn, json!(3));
    let bodies = bodies.borrow().clone();
    let at = summarisation_index(&bodies).expect("a summarisation call");
    assert!(at > 0);
    let (summary, failed) = (&bodies[at], &bodies[at - 1]);
    let messages = summary["messages"].as_array().expect("messages");
    let (trailing, prefix) = messages.split_last().expect("messages");
    let sent = failed["messages"].as_array().expect("messages");
    assert!(prefix.len() >= 2 && prefix.len() <= sent.len());
    assert_eq!(prefix, &sent[..prefix.len()], "the failed request's prefix");
    assert_eq!(trailing["role"], "user");
    assert_eq!(summary["tools"], failed["tools"]);
    assert_eq!(summary["model"], failed["model"]);
}

/// The DeepSeek flash route with a context window of `window` tokens.
fn flash_windowed(window: u64) -> PreparedCall {
    let mut route = PreparedCall::prepare(Adapter::DeepSeek, &Catalog::deepseek().models()[0]);
    route.context_window = Some(window);
    route
}

// Goal: against the loopback DeepSeek server, pressure compaction sends a summarisation body
// that carries the previous conversation body's messages up to the end of the shadowed range
// (the system head, then one message per shadowed node), then the instruction, with the same
// tools and model; every conversation request rebuilt from the log equals what was sent.
// Method: drive an Agent with the real DeepSeek client on a small window and an explicit
// policy, so pressure compaction fires on a later turn; the server answers summarisation
// calls with a short summary; compare the recorded bodies with each other and with the
// requests rebuilt from the log.
#[test]
fn loopback_summarisation_replays_the_sent_prefix() {
    let replies = ["first", "second", "third", "fourth"]
        .iter()
        .map(|tag| Reply::Sse(done_chunks(&long(150, tag))))
        .collect();
    let server = Server::with_summaries(replies, Reply::Sse(done_chunks("short summary")));
    let (_dir, store) = temp_store();
    let client = DeepSeekClient::new(&server.base, Some("k".into()), Duration::from_secs(5))
        .expect("a client");
    let root = std::env::temp_dir();
    let window = LOOPBACK_WINDOW;
    let mut agent = Agent::open(&store, "s", Box::new(client), flash_windowed(window), &root)
        .expect("the agent opens")
        .with_compaction(CompactionPolicy {
            threshold_percent: 50,
            retain_percent: 10,
        });
    for input in ["one", "two", "three", "four"] {
        agent
            .run_turn(input, &CancelToken::new(), &mut |_| {})
            .expect("a turn");
    }
    drop(agent);
    let sent = server.bodies();
    let at = summarisation_index(&sent).expect("a summarisation call");
    assert!(at > 0);
    let (summary, previous) = (&sent[at], &sent[at - 1]);
    assert!(!is_summarisation(previous));
    let next = store.head("s").expect("a head").next_seq;
    let events = store.read_range("s", 0, next).expect("the events");
    let shadowed = events
        .iter()
        .find_map(|e| match &e.data {
            EventData::CompactionSummary(d) => Some(d.shadowed_seqs.clone()),
            _ => None,
        })
        .expect("a committed summary");
    let messages = summary["messages"].as_array().expect("messages");
    let (trailing, prefix) = messages.split_last().expect("messages");
    let previous_messages = previous["messages"].as_array().expect("messages");
    assert_eq!(prefix.len(), 1 + shadowed.len());
    assert!(prefix.len() <= previous_messages.len());
    assert_eq!(prefix, &previous_messages[..prefix.len()]);
    assert_eq!(prefix[0]["role"], "system");
    assert_eq!(trailing["role"], "user");
    assert_eq!(trailing["content"], COMPACTION_INSTRUCTION);
    assert_eq!(summary["tools"], previous["tools"]);
    assert!(summary["tools"].as_array().is_some_and(|t| !t.is_empty()));
    assert_eq!(summary["model"], previous["model"]);

    let report = requests(
        SessionSource::Store {
            store: &store,
            session: "s",
        },
        RequestOptions { bodies: true },
    )
    .expect("requests rebuild");
    let rebuilt: Vec<Value> = report
        .requests
        .iter()
        .filter_map(deepseek_row_body)
        .collect();
    let conversation: Vec<Value> = sent.into_iter().filter(|b| !is_summarisation(b)).collect();
    assert_eq!(rebuilt.len(), report.requests.len());
    assert_eq!(rebuilt, conversation);
}

// Goal: a manual mid-range region replays the true prefix: the summariser gets every derived
// message before the region, then the region, then the instruction, which is a prefix of the
// last conversation body; the checkpoint replaces exactly the region, the nodes before and
// after it stay, and the report says the span is not the head and forgoes reuse.
// Method: three turns through a recording adapter; compact the second user message and the
// answer to it; compare the summarisation body with the last conversation body and read the
// surface back.
#[test]
fn manual_mid_range_region_replays_the_true_prefix() {
    let (_dir, store) = temp_store();
    let sent = converse(&store);
    let last = sent.last().expect("a request").clone();
    let nodes = store.with_fold("s", surface_nodes).expect("the fold");
    let users: Vec<usize> = nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.kind == NodeKind::User)
        .map(|(i, _)| i)
        .collect();
    let (start, end) = (users[1], users[2] - 1);
    assert!(start > 1 && nodes[end].kind == NodeKind::Assistant);
    let (mut recorder, bodies) = Recorder::new(vec![]);
    let report = compact_region(
        &store,
        "s",
        nodes[start].seq,
        nodes[end].seq,
        &mut recorder,
        &route("m"),
        &CancelToken::new(),
    )
    .expect("the region compacts");
    assert!(!report.at_head);
    assert!(!report.reuses_prefix);
    let region: Vec<u64> = nodes[start..=end].iter().map(|n| n.seq).collect();
    assert_eq!(report.range.shadowed_seqs, region);
    let body = bodies.borrow()[0].clone();
    let messages = body["messages"].as_array().expect("messages");
    let (trailing, prefix) = messages.split_last().expect("messages");
    let previous = last["messages"].as_array().expect("messages");
    assert_eq!(prefix.len(), end + 1);
    assert_eq!(prefix, &previous[..end + 1]);
    assert_eq!(trailing["content"], COMPACTION_INSTRUCTION);
    assert_eq!(body["tools"], last["tools"]);
    let after: Vec<u64> = store
        .with_fold("s", surface_nodes)
        .expect("the fold")
        .iter()
        .map(|n| n.seq)
        .collect();
    let mut expected: Vec<u64> = nodes[..start].iter().map(|n| n.seq).collect();
    expected.push(report.checkpoint_seq);
    expected.extend(nodes[end + 1..].iter().map(|n| n.seq));
    assert_eq!(after, expected);
}

// Goal: a region that includes node 0, splits a tool call from its result or names no
// surface node is refused with a typed error, commits nothing and calls no model.
// Method: three turns with a tool call; try each refused region and check the head and the
// adapter's call count.
#[test]
fn refused_regions_commit_nothing() {
    let (_dir, store) = temp_store();
    converse(&store);
    let nodes = store.with_fold("s", surface_nodes).expect("the fold");
    let call = nodes
        .iter()
        .position(|n| !n.calls.is_empty())
        .expect("a tool call");
    let head = store.head("s").expect("a head").next_seq;
    let (mut recorder, bodies) = Recorder::new(vec![]);
    let cases = [
        ((nodes[0].seq, nodes[2].seq), "includes node 0"),
        ((nodes[1].seq, nodes[call].seq), "splits a tool call"),
        ((nodes[1].seq, head + 10), "is not a live surface node"),
    ];
    for ((from, to), why) in cases {
        let result = compact_region(
            &store,
            "s",
            from,
            to,
            &mut recorder,
            &route("m"),
            &CancelToken::new(),
        );
        let Err(CompactionError::Region(error)) = result else {
            panic!("{why}: expected a region error, got {result:?}");
        };
        assert!(error.to_string().contains(why), "{error}");
    }
    assert!(matches!(
        compact_region(
            &store,
            "s",
            nodes[1].seq,
            nodes[call].seq,
            &mut recorder,
            &route("m"),
            &CancelToken::new()
        ),
        Err(CompactionError::Region(RegionError::Unbalanced { .. }))
    ));
    assert_eq!(store.head("s").expect("a head").next_seq, head);
    assert!(bodies.borrow().is_empty());
}

/// The text of every system message of a wire body.
fn system_contents(body: &Value) -> Vec<String> {
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

// Goal: a recovery compaction that shadows the latest in-history prompt version (appended
// after the history) is followed by a readmission of the step's assembly: the retried
// request carries the step's prompt again, consolidated into node 0 under one series header;
// the step's user message is admitted once; a later plain retry of the same step sends the
// same body and logs no further header or prompt event.
// Method: turn 2 turns plan mode on through the tool (an appended prompt version), turn 3's
// call overflows, is recovered by compaction, then hits a rate limit, then succeeds.
#[test]
fn overflow_recovery_readmits_the_shadowed_prompt() {
    use sessionlog_agent::agent::adapter::RetryPolicy;
    use sessionlog_agent::agent::tools::PLAN_SECTION;

    let (_dir, store) = temp_store();
    let answers = vec![
        Answer::Text("first".into()),
        Answer::Tool("plan_mode", r#"{"active":true}"#),
        Answer::Text("planned".into()),
        Answer::Fail("CONTEXT_OVERFLOW"),
        Answer::Busy,
        Answer::Text("recovered".into()),
    ];
    let (mut recorder, bodies) = Recorder::new(answers);
    recorder.summaries_pass = true;
    let root = std::env::temp_dir();
    let mut agent = Agent::open(&store, "s", Box::new(recorder), flash_windowed(0), &root)
        .expect("the agent opens")
        .with_retry(RetryPolicy {
            max_retries: 2,
            base_delay_ms: 1,
        });
    for input in ["one", "two", "three"] {
        agent
            .run_turn(input, &CancelToken::new(), &mut |_| {})
            .expect("a turn");
    }
    drop(agent);
    let bodies: Vec<Value> = bodies
        .borrow()
        .iter()
        .filter(|b| !is_summarisation(b))
        .cloned()
        .collect();
    assert_eq!(bodies.len(), 6);
    let before = system_contents(&bodies[3]);
    assert_eq!(
        before.len(),
        2,
        "the overflowing request: head plus the appended plan"
    );
    assert!(before[1].contains(PLAN_SECTION));
    let retried = system_contents(&bodies[4]);
    assert_eq!(
        retried.len(),
        1,
        "one system message after the consolidation"
    );
    assert!(
        retried[0].contains(PLAN_SECTION),
        "the shadowed prompt is restored"
    );
    assert_eq!(bodies[4]["messages"][0]["role"], "system");
    assert_eq!(bodies[5], bodies[4], "the plain retry sends the same body");
    let next = store.head("s").expect("a head").next_seq;
    let events = store.read_range("s", 0, next).expect("the events");
    let users = events
        .iter()
        .filter(|e| {
            matches!(&e.data, EventData::UserMessage(d)
            if d.source.as_ref().map(|s| s.kind.as_str()) == Some("user"))
        })
        .count();
    assert_eq!(users, 3, "every user message is admitted once");
    let end = events
        .iter()
        .position(|e| e.kind == EventType::CompactionEnd)
        .expect("a compaction");
    let after: Vec<&EventType> = events[end + 1..].iter().map(|e| &e.kind).collect();
    assert_eq!(
        after,
        vec![
            &EventType::SystemMessage,
            &EventType::RequestHeader,
            &EventType::AssistantAttempt,
            &EventType::LlmRetry,
            &EventType::LlmRetryStarted,
            &EventType::AssistantMessage,
            &EventType::StepEnd,
            &EventType::TurnEnd,
        ]
    );
    let EventData::RequestHeader(header) = &events[end + 2].data else {
        panic!("a request/header payload");
    };
    assert_eq!(header.reason, "series");
}

// Goal: on a V4 session the whole compaction writes V4 events: the checkpoint's source is the
// producer kind `compact-checkpoint` carrying the compaction's id, the session verifies under
// the V4 rules, and the next request shows the compaction break, as on V3.
// Method: three turns and a compaction on a pre-created V4 session, one more turn, then the
// events, verify and the requests.
#[test]
fn a_v4_session_compacts_in_v4() {
    let (_dir, store) = temp_store();
    let mut header = sessionlog_format::SessionHeader::new_v3("s", 1);
    header.version = Some(4);
    store.create_session(&header).expect("a V4 session");
    converse(&store);
    let (mut recorder, _) = Recorder::new(vec![Answer::Text("the user asked twice".into())]);
    let report = compact(
        &store,
        "s",
        &mut recorder,
        &route("m"),
        manual(60),
        &CancelToken::new(),
    )
    .expect("the compaction runs")
    .expect("a range");
    let checkpoint = store
        .read_range("s", report.checkpoint_seq, report.checkpoint_seq + 1)
        .expect("the checkpoint");
    let EventData::UserMessage(message) = &checkpoint[0].data else {
        panic!("a checkpoint: {checkpoint:?}");
    };
    let source = message.source.as_ref().expect("a source");
    assert_eq!(source.kind, "compact-checkpoint");
    assert_eq!(source.plugin, None);
    assert!(source.extra.contains_key("compactionId"), "{source:?}");
    let (recorder, _) = Recorder::new(vec![Answer::Text("ok".into())]);
    let root = std::env::temp_dir();
    Agent::open(&store, "s", Box::new(recorder), route("m"), &root)
        .expect("the agent reopens")
        .run_turn("continue", &CancelToken::new(), &mut |_| {})
        .expect("a turn");
    let reports = store.verify(&["s".to_owned()]).expect("verify runs");
    assert!(reports.iter().all(|r| r.ok()), "{reports:?}");
    let rows = requests(
        SessionSource::Store {
            store: &store,
            session: "s",
        },
        RequestOptions::default(),
    )
    .expect("the requests");
    assert_eq!(
        rows.requests.last().expect("a request").prefix.broken_by,
        Some(PrefixBreak::Compaction {
            seq: report.checkpoint_seq
        })
    );
}

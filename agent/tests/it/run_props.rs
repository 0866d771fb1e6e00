//! The property test over `run` (issue #19): the agent loop, its compactions and crash repair
//! only ever write logs that pass every rule.
//!
//! Goal: whatever the model answers (text, tool calls, retryable and fatal errors, context
//! overflows that force a recovery compaction) and whenever the user cancels, the events the
//! loop commits form a log that the strict reader accepts and `verify` passes; and a log cut
//! anywhere inside a turn is closed by the reopen's repair (spec 12.4) into a log that passes
//! too.
//! Method: proptest draws a few turns, each an input and a replay script of responses, an
//! optional cancel after some streamed words, and a pressure-compaction threshold; the agent
//! runs them on the replay provider against a temporary store. The session's events are then
//! written as V3 rows and read back with `read_log` (strict), and the store verifies. Then a
//! prefix of the log that ends inside a turn is appended to a second session, an agent opens
//! it (which repairs it), and the repaired session is checked the same way. Cases are few and
//! scripts short, to stay in seconds.

use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use serde_json::{json, Value};
use sessionlog_agent::agent::replay::{ReplayProvider, ReplayScript, REPLAY_PROVIDER};
use sessionlog_agent::agent::turn::Agent;
use sessionlog_agent::agent::CancelToken;
use sessionlog_agent::compaction::trigger::CompactionPolicy;
use sessionlog_agent::prompt::capability::{Adapter, PreparedCall};
use sessionlog_engine::store::Store;
use sessionlog_format::row::EventRow;
use sessionlog_format::{
    read_log, Compression, Event, EventType, FormatVersion, LogWriter, ReadOptions, SessionHeader,
};

use crate::support::temp_store;

/// The replay model: a small context window, so that pressure compactions happen.
const MODEL: &str = "replay-small";
const CONTEXT_WINDOW: u64 = 6_000;

/// One scripted model response.
#[derive(Debug, Clone)]
enum Response {
    Text(String),
    /// Tool calls by name and arguments (known tools, and one that does not exist).
    Tools(Vec<(&'static str, Value)>),
    /// A failure; `retryable` ones are retried by the loop.
    Error {
        code: &'static str,
        retryable: bool,
    },
}

impl Response {
    fn to_json(&self) -> Value {
        match self {
            Response::Text(text) => json!({ "reasoning": "thinking", "text": text,
                "usage": { "inputTokens": 100, "outputTokens": 10 } }),
            Response::Tools(calls) => {
                let calls: Vec<Value> = calls
                    .iter()
                    .map(|(name, arguments)| json!({ "name": name, "arguments": arguments }))
                    .collect();
                json!({ "text": "calling", "toolCalls": calls })
            }
            Response::Error { code, retryable } => json!({
                "error": { "code": code, "message": format!("scripted {code}"),
                    "retryable": retryable }
            }),
        }
    }
}

#[derive(Debug, Clone)]
struct TurnPlan {
    input: String,
    responses: Vec<Response>,
    /// Cancel once this many text chunks have been shown.
    cancel_after: Option<usize>,
}

fn words() -> impl Strategy<Value = String> {
    prop::collection::vec("[a-z]{1,9}", 1..40).prop_map(|w| w.join(" "))
}

fn response() -> impl Strategy<Value = Response> {
    let tool = prop_oneof![
        words().prop_map(|t| ("echo", json!({ "text": t }))),
        any::<bool>().prop_map(|a| ("plan_mode", json!({ "active": a }))),
        Just(("no_such_tool", json!({}))),
    ];
    prop_oneof![
        4 => words().prop_map(Response::Text),
        3 => prop::collection::vec(tool, 1..3).prop_map(Response::Tools),
        1 => Just(Response::Error { code: "RATE_LIMITED", retryable: true }),
        1 => Just(Response::Error { code: "CONTEXT_OVERFLOW", retryable: false }),
        1 => Just(Response::Error { code: "BAD_REQUEST", retryable: false }),
    ]
}

fn turn_plan() -> impl Strategy<Value = TurnPlan> {
    (
        words(),
        prop::collection::vec(response(), 1..6),
        prop::option::weighted(0.25, 0usize..12),
    )
        .prop_map(|(input, responses, cancel_after)| TurnPlan {
            input,
            responses,
            cancel_after,
        })
}

fn agent<'a>(store: &'a Store, session: &str, responses: &[Response], threshold: u64) -> Agent<'a> {
    let script = json!({
        "models": [{ "model": MODEL, "contextWindow": CONTEXT_WINDOW,
            "systemPromptUpdate": "in-history" }],
        "responses": responses.iter().map(Response::to_json).collect::<Vec<_>>(),
    });
    let script = ReplayScript::parse(&script.to_string()).expect("a valid script");
    let route = PreparedCall::prepare(
        Adapter::DeepSeek,
        &script.model_info(REPLAY_PROVIDER, MODEL),
    );
    let root = std::env::temp_dir();
    Agent::open(
        store,
        session,
        Box::new(ReplayProvider::new(script)),
        route,
        &root,
    )
    .expect("the agent opens the session")
    .with_retry(sessionlog_agent::agent::adapter::RetryPolicy {
        max_retries: 2,
        base_delay_ms: 0,
    })
    .with_compaction(CompactionPolicy {
        threshold_percent: threshold,
        retain_percent: 30,
    })
}

fn events_of(store: &Store, session: &str) -> Vec<Event> {
    let head = store.head(session).expect("a head");
    store
        .read_range(session, 0, head.next_seq)
        .expect("the events")
}

/// The events as a V3 file read back strictly, and the store's verify: `Err` names the fault.
fn check_strictly(store: &Store, session: &str) -> Result<Vec<Event>, String> {
    let events = events_of(store, session);
    let header = SessionHeader::new_v3(session, 1);
    let mut bytes = LogWriter::new(Vec::new(), &header, Compression::None)
        .and_then(|w| w.into_inner())
        .expect("a header line");
    for event in &events {
        let row = EventRow {
            event,
            version: FormatVersion::V3,
        };
        bytes.extend(serde_json::to_vec(&row).expect("a row"));
        bytes.push(b'\n');
    }
    let log = read_log(bytes.as_slice(), ReadOptions::default()).map_err(|e| e.to_string())?;
    if log.events != events {
        return Err("the log read back differs from the store's events".into());
    }
    let reports = store
        .verify(&[session.to_owned()])
        .map_err(|e| e.to_string())?;
    match reports.iter().find(|r| !r.ok()) {
        Some(report) => Err(format!("verify: {:?}", report.faults)),
        None => Ok(events),
    }
}

/// Sessions of one process get distinct names (the store is per case, but keep them clear).
static SESSIONS: AtomicU64 = AtomicU64::new(0);

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn run_and_repair_write_only_valid_logs(
        turns in prop::collection::vec(turn_plan(), 1..4),
        threshold in prop_oneof![Just(100u64), 5u64..60],
        cut in any::<prop::sample::Index>(),
    ) {
        let (_dir, store) = temp_store();
        let n = SESSIONS.fetch_add(1, Ordering::Relaxed);
        let session = format!("run-{n}");
        for plan in &turns {
            let mut agent = agent(&store, &session, &plan.responses, threshold);
            let cancel = CancelToken::new();
            let mut shown = 0usize;
            let trigger = cancel.clone();
            let cancel_after = plan.cancel_after;
            // Errors (a cancel, a call that fails for good) are outcomes, not test failures:
            // what matters is what was committed.
            let _ = agent.run_turn(&plan.input, &cancel, &mut |_| {
                shown += 1;
                if Some(shown) == cancel_after {
                    trigger.cancel();
                }
            });
            drop(agent);
            if let Err(fault) = check_strictly(&store, &session) {
                return Err(TestCaseError::fail(format!("after {plan:?}: {fault}")));
            }
        }
        let events = check_strictly(&store, &session).map_err(TestCaseError::fail)?;
        // A prefix that ends inside a turn (after a turn/start, before its turn/end).
        let inside: Vec<usize> = {
            let mut open = false;
            let mut ends = Vec::new();
            for (idx, event) in events.iter().enumerate() {
                match event.kind {
                    EventType::TurnStart => open = true,
                    EventType::TurnEnd => open = false,
                    _ => {}
                }
                if open {
                    ends.push(idx);
                }
            }
            ends
        };
        if inside.is_empty() {
            return Ok(());
        }
        let end = inside[cut.index(inside.len())];
        let prefix: Vec<Event> = events[..=end].to_vec();
        let cut_session = format!("{session}-cut");
        store.create_session(&SessionHeader::new_v3(&cut_session, 1)).expect("created");
        store.append(&cut_session, 0, prefix.clone()).expect("a prefix of a valid log is admitted");
        drop(agent(&store, &cut_session, &[], threshold));
        let repaired = check_strictly(&store, &cut_session)
            .map_err(|f| TestCaseError::fail(format!("repair of a cut at seq {end}: {f}")))?;
        prop_assert_eq!(&repaired[..prefix.len()], &prefix[..], "repair only appends");
        prop_assert_eq!(
            repaired.last().map(|e| e.kind.clone()),
            Some(EventType::TurnEnd),
            "repair closes the turn"
        );
    }
}

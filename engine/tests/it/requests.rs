//! `requests`: request reconstruction, prefixes and their breaks, on hand-built logs, on the
//! V3 fixtures, and on generated sessions checked against a from-scratch fold.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use sessionlog_engine::generate::generate_file;
use sessionlog_engine::replay::SessionSource;
use sessionlog_engine::requests::{requests, PrefixBreak, RequestOptions, RequestReport};
use sessionlog_format::fold::{canonical_header, headers_equal, SessionFold};
use sessionlog_format::gen::{GenOptions, Generator};
use sessionlog_format::rules::RuleContext;
use sessionlog_format::tokens::{estimate_message, estimate_tools};
use sessionlog_format::{Compression, Event, EventData, FormatVersion, Message, SnapshotMode};

use crate::support::temp_store;

const BODIES: RequestOptions = RequestOptions { bodies: true };

/// A V3 log built event by event as JSON; seqs are assigned in order.
#[derive(Default)]
struct LogText {
    rows: Vec<Value>,
}

impl LogText {
    /// Adds a log-only event; returns its seq.
    fn event(&mut self, kind: &str, data: Value) -> u64 {
        let seq = self.rows.len() as u64;
        self.rows
            .push(json!({"type": kind, "seq": seq, "time": 0, "data": data}));
        seq
    }

    /// Adds a surface event with its op (`None`: append) and sources.
    fn surface(
        &mut self,
        kind: &str,
        data: Value,
        span: Option<(u64, u64)>,
        sources: &[u64],
    ) -> u64 {
        let seq = self.event(kind, data);
        let row = &mut self.rows[seq as usize];
        row["surfaceOp"] = match span {
            None => json!("append"),
            Some((start, end)) => json!({"op": "replace", "startSeq": start, "endSeq": end}),
        };
        if !sources.is_empty() {
            row["sourceEventSeqs"] = json!(sources);
        }
        seq
    }

    fn system(&mut self, turn: u64, step: u64, text: &str, span: Option<(u64, u64)>) -> u64 {
        let id = format!("sys-{}", self.rows.len());
        let content = if text.is_empty() {
            json!([])
        } else {
            json!([{"type": "text", "text": text}])
        };
        let message = json!({"id": id, "role": "system", "content": content,
            "source": {"kind": "plugin", "plugin": "@deepseek-ai/dsh-system-prompt"}});
        let sources: Vec<u64> = span.map(|(s, _)| vec![s]).unwrap_or_default();
        let data = json!({"turn": turn, "step": step, "message": message});
        self.surface("system/message", data, span, &sources)
    }

    fn user(&mut self, text: &str) -> u64 {
        let id = format!("user-{}", self.rows.len());
        let data = json!({"id": id, "role": "user", "content": [{"type": "text", "text": text}],
            "source": {"kind": "user"}});
        self.surface("user/message", data, None, &[])
    }

    fn header(&mut self, model: &str, tools: &[&str], reason: &str) -> u64 {
        let tools: Vec<Value> = tools
            .iter()
            .map(|n| json!({"name": n, "parameters": {}}))
            .collect();
        let header =
            json!({"config": {"provider": "deepseek-official", "model": model}, "tools": tools});
        self.event(
            "request/header",
            json!({"header": header, "reason": reason}),
        )
    }

    fn assistant(&mut self, turn: u64, step: u64, content: Value, usage: Value) -> u64 {
        let id = format!("assistant-{}", self.rows.len());
        let message = json!({"id": id, "role": "assistant", "content": content,
            "source": {"kind": "model", "provider": "deepseek-official", "model": "m"}});
        let data =
            json!({"turn": turn, "step": step, "message": message, "stream": [], "usage": usage});
        self.surface("assistant/message", data, None, &[])
    }

    fn tool_result(&mut self, step: u64, call: &str, text: &str, span: Option<(u64, u64)>) -> u64 {
        let message = json!({"id": format!("result-{call}"), "role": "user",
            "source": {"kind": "tool", "callId": call},
            "content": [{"type": "tool-result", "toolCallId": call,
                "content": [{"type": "text", "text": text}], "isError": false}]});
        let sources: Vec<u64> = span.map(|(s, _)| vec![s]).unwrap_or_default();
        let data = json!({"turn": 1, "step": step, "message": message});
        self.surface("tool/result", data, span, &sources)
    }

    fn text(&self) -> String {
        let mut text = String::from(
            r#"{"type":"session","version":3,"id":"hand","createdAt":0,"isSeeded":false,"delegationDepth":0}"#,
        );
        text.push('\n');
        for row in &self.rows {
            text.push_str(&row.to_string());
            text.push('\n');
        }
        text
    }
}

fn usage(input: u64, cache_read: u64) -> Value {
    json!({"inputTokens": input, "outputTokens": 1, "cacheReadTokens": cache_read})
}

fn file_report(dir: &Path, name: &str, log: &LogText) -> RequestReport {
    let path = dir.join(name);
    std::fs::write(&path, log.text()).unwrap();
    let source = SessionSource::File {
        path: &path,
        snapshot: SnapshotMode::Auto,
    };
    requests(source, BODIES).unwrap()
}

fn breaks(report: &RequestReport) -> Vec<(usize, Option<PrefixBreak>)> {
    let prefix = |r: &sessionlog_engine::requests::RequestRow| {
        (r.prefix.messages, r.prefix.broken_by.clone())
    };
    report.requests.iter().map(prefix).collect()
}

/// The session behind `every_break_is_named`, with the seqs the test expects.
struct Scripted {
    log: LogText,
    head_rewrite: u64,
    prune: u64,
    checkpoint: u64,
    tools_header: u64,
    model_header: u64,
}

/// One turn of tool use with an in-history prompt append, then a head rewrite, a prune, a
/// compaction, a tools change and a model change, each followed by a request.
fn scripted() -> Scripted {
    let mut log = LogText::default();
    log.event("turn/start", json!({"turn": 1}));
    log.event("step/start", json!({"turn": 1, "step": 1}));
    let head = log.system(1, 1, "prompt v1", None);
    let hello = log.user("hello");
    log.header("m", &["a"], "initial");
    log.event(
        "request/context",
        json!({"provider": "deepseek-official", "model": "m"}),
    );
    // An empty completion, retried: request 0 and request 1 see the same messages.
    let failed = json!([{"type": "chunk", "time": 0, "chunk": {"type": "usage",
        "usage": {"inputTokens": 7, "outputTokens": 0}}}]);
    log.event(
        "assistant/attempt",
        json!({"turn": 1, "step": 1, "stream": failed}),
    );
    let call = json!([{"type": "tool-call", "id": "c1", "name": "bash", "arguments": "{}"}]);
    let calling = log.assistant(1, 1, call, usage(20, 0));
    log.event(
        "tool/call",
        json!({"turn": 1, "step": 1, "callId": "c1", "name": "bash", "arguments": "{}"}),
    );
    let result = log.tool_result(1, "c1", "a long tool output", None);
    log.event("step/end", json!({"turn": 1, "step": 1}));
    log.event("step/start", json!({"turn": 1, "step": 2}));
    // The in-history route appends the changed prompt after the history.
    log.system(1, 2, "note in history", None);
    log.assistant(
        1,
        2,
        json!([{"type": "text", "text": "done"}]),
        usage(30, 20),
    );
    log.event("step/end", json!({"turn": 1, "step": 2}));
    log.event(
        "turn/end",
        json!({"turn": 1, "reason": {"kind": "completed"}}),
    );
    log.event("turn/start", json!({"turn": 2}));
    log.event("step/start", json!({"turn": 2, "step": 1}));
    let head_rewrite = log.system(2, 1, "prompt v2", Some((head, head)));
    log.user("again");
    log.header("m", &["a"], "series");
    log.assistant(2, 1, json!([{"type": "text", "text": "ok"}]), usage(40, 0));
    let shadowed = json!({"start": result, "end": result});
    log.event(
        "compaction/prune",
        json!({"shadowedRange": shadowed, "shadowedSeqs": [result],
        "shadowedTokenCount": 9}),
    );
    let prune = log.tool_result(1, "c1", "[pruned]", Some((result, result)));
    log.assistant(
        2,
        1,
        json!([{"type": "text", "text": "ok again"}]),
        usage(40, 30),
    );
    let start = log.event("compaction/start", json!({"compactionId": "k1", "turn": 2}));
    let summary = log.event(
        "compaction/summary",
        json!({"compactionId": "k1",
        "summary": [{"type": "text", "text": "s"}], "shadowedRange": {"start": hello, "end": prune},
        "shadowedSeqs": [hello, calling, prune], "shadowedTokenCount": 30,
        "provider": "deepseek-official", "model": "m"}),
    );
    let checkpoint_data = json!({"id": "checkpoint", "role": "user",
        "content": [{"type": "text", "text": "summary of the span"}],
        "source": {"kind": "plugin", "plugin": "compact", "compactionId": "k1"}});
    let checkpoint = log.surface(
        "user/message",
        checkpoint_data,
        Some((hello, prune)),
        &[start, summary, hello, calling, prune],
    );
    log.event("compaction/end", json!({"compactionId": "k1", "turn": 2}));
    log.header("m", &["a"], "series");
    log.assistant(
        2,
        1,
        json!([{"type": "text", "text": "after compaction"}]),
        usage(50, 0),
    );
    let tools_header = log.header("m", &["a", "b"], "change");
    log.assistant(
        2,
        1,
        json!([{"type": "text", "text": "new tools"}]),
        usage(60, 0),
    );
    let model_header = log.header("m2", &["a", "b"], "change");
    log.assistant(
        2,
        1,
        json!([{"type": "text", "text": "new model"}]),
        usage(70, 0),
    );
    log.event("step/end", json!({"turn": 2, "step": 1}));
    log.event(
        "turn/end",
        json!({"turn": 2, "reason": {"kind": "completed"}}),
    );
    Scripted {
        log,
        head_rewrite,
        prune,
        checkpoint,
        tools_header,
        model_header,
    }
}

// Goal: request N+1's prefix over request N follows the spec's rules: a retry and an
// in-history append keep the whole prefix, a head rewrite breaks it at message 0, a prune and
// a compaction break it where they replace, and a header change breaks it at 0; each break
// names its event. Method: a hand-built session with one of each, read from a file.
#[test]
fn every_break_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let s = scripted();
    let report = file_report(dir.path(), "scripted.jsonl", &s.log);
    let counts: Vec<usize> = report.requests.iter().map(|r| r.message_count).collect();
    assert_eq!(counts, vec![2, 2, 5, 7, 8, 7, 8, 9]);
    let settled: Vec<&str> = report.requests.iter().map(|r| r.settled).collect();
    assert_eq!(settled[..2], ["attempt", "message"]);
    assert_eq!(
        breaks(&report),
        vec![
            (0, None),
            // The retry resends the same messages.
            (2, None),
            // The assistant call, its result and the appended prompt extend request 1.
            (2, None),
            (
                0,
                Some(PrefixBreak::HeadRewrite {
                    seq: s.head_rewrite
                })
            ),
            // [prompt v2, hello, call | pruned result, ...]
            (3, Some(PrefixBreak::Replace { seq: s.prune })),
            // [prompt v2 | checkpoint, ...]
            (1, Some(PrefixBreak::Compaction { seq: s.checkpoint })),
            (
                0,
                Some(PrefixBreak::ToolsChanged {
                    seq: s.tools_header
                })
            ),
            (
                0,
                Some(PrefixBreak::ConfigChanged {
                    seq: s.model_header
                })
            ),
        ]
    );
    let reasons: Vec<&str> = report
        .requests
        .iter()
        .map(|r| r.reason.as_deref().unwrap_or(""))
        .collect();
    assert_eq!(
        reasons,
        ["initial", "initial", "initial", "series", "series", "series", "change", "change"]
    );
    let summary = &report.summary;
    assert_eq!(
        (
            summary.requests,
            summary.prompt_appends,
            summary.prompt_rewrites
        ),
        (8, 1, 1)
    );
    assert_eq!(
        (summary.prompt_clears, summary.prompt_history_rewrites),
        (0, 0)
    );
    assert_eq!(summary.prefix_breaks, 5);
    assert_eq!(
        summary.recorded_input_tokens,
        Some(7 + 20 + 30 + 40 + 40 + 50 + 60 + 70)
    );
    assert_eq!(summary.recorded_cache_read_tokens, Some(20 + 30));
    assert_eq!(
        report.requests[0].usage.as_ref().map(|u| u.input_tokens),
        Some(7)
    );
}

// Goal: estimated tokens are the spec-14 estimates of the messages plus the tools, and the
// prefix tokens are those of the shared messages plus the tools. Method: recompute both with
// the format's estimator from the reported bodies.
#[test]
fn tokens_follow_the_estimator() {
    let dir = tempfile::tempdir().unwrap();
    let report = file_report(dir.path(), "scripted.jsonl", &scripted().log);
    for row in &report.requests {
        let messages = row.messages.as_ref().unwrap();
        let tools = row.tools.as_deref().map_or(0, estimate_tools);
        assert_eq!(row.tools_tokens, tools);
        let sum = |m: &[Message]| m.iter().map(estimate_message).sum::<u64>();
        assert_eq!(
            row.estimated_tokens,
            sum(messages) + tools,
            "request {}",
            row.index
        );
        // A header change shares nothing; any other break still shares the tools.
        let header_changed = matches!(
            row.prefix.broken_by,
            Some(PrefixBreak::ToolsChanged { .. } | PrefixBreak::ConfigChanged { .. })
        );
        let shared = if row.index == 0 || header_changed {
            0
        } else {
            sum(&messages[..row.prefix.messages]) + tools
        };
        assert_eq!(row.prefix.estimated_tokens, shared, "request {}", row.index);
    }
    let total: u64 = report.requests.iter().map(|r| r.estimated_tokens).sum();
    let reused: u64 = report
        .requests
        .iter()
        .map(|r| r.prefix.estimated_tokens)
        .sum();
    assert_eq!(
        (
            report.summary.estimated_tokens,
            report.summary.predicted_reused_tokens
        ),
        (total, reused)
    );
    let ratio = reused as f64 / total as f64;
    assert!((report.summary.predicted_reuse_ratio - ratio).abs() < 1e-12);
}

// Goal: clearing the prompt is a head rewrite for the prefix but counts as a clear, not a
// rewrite; an empty head that gets a prompt is a rewrite. Method: a session whose head is
// empty, then set, then cleared, with a request after each.
#[test]
fn prompt_clears_and_empty_heads() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = LogText::default();
    log.event("turn/start", json!({"turn": 1}));
    log.event("step/start", json!({"turn": 1, "step": 1}));
    let head = log.system(1, 1, "", None);
    log.user("hi");
    log.header("m", &["a"], "initial");
    log.assistant(1, 1, json!([{"type": "text", "text": "a"}]), Value::Null);
    let set = log.system(1, 1, "now a prompt", Some((head, head)));
    log.assistant(1, 1, json!([{"type": "text", "text": "b"}]), Value::Null);
    let cleared = log.system(1, 1, "", Some((set, set)));
    log.assistant(1, 1, json!([{"type": "text", "text": "c"}]), Value::Null);
    // `usage: null` is not a usage record; drop it so the payload is valid.
    for row in &mut log.rows {
        if let Some(data) = row["data"].as_object_mut() {
            data.retain(|k, v| k != "usage" || !v.is_null());
        }
    }
    let report = file_report(dir.path(), "cleared.jsonl", &log);
    assert_eq!(
        breaks(&report),
        vec![
            (0, None),
            (0, Some(PrefixBreak::HeadRewrite { seq: set })),
            (0, Some(PrefixBreak::HeadRewrite { seq: cleared })),
        ]
    );
    let counts: Vec<usize> = report.requests.iter().map(|r| r.message_count).collect();
    assert_eq!(counts, vec![1, 3, 3]);
    assert_eq!(
        (report.summary.prompt_rewrites, report.summary.prompt_clears),
        (1, 1)
    );
    assert_eq!(report.summary.recorded_input_tokens, None);
}

fn fixture(relative: &str) -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/dsh");
    let path = dir.join(relative);
    if path.is_file() {
        return Some(path);
    }
    eprintln!(
        "skipping: {} is missing (the dsh fixtures live beside the checkout)",
        path.display()
    );
    None
}

fn fixture_report(relative: &str) -> Option<RequestReport> {
    let path = fixture(relative)?;
    let source = SessionSource::File {
        path: &path,
        snapshot: SnapshotMode::Auto,
    };
    Some(requests(source, BODIES).unwrap())
}

// Goal: the recorded retry fixture gives two requests, an attempt and its retry, with the
// same messages, the whole prefix kept, and each request's own recorded usage. Method: the
// K empty-response-retry-current V3 recording.
#[test]
fn retry_fixture() {
    let Some(report) =
        fixture_report("knyazev741__deepseek-harness/snapshots/session/empty-response-retry-current/session.v3.jsonl")
    else {
        return;
    };
    assert!(report.snapshot);
    let rows = &report.requests;
    assert_eq!(rows.len(), 2);
    assert_eq!((rows[0].settled, rows[1].settled), ("attempt", "message"));
    assert_eq!(
        (rows[0].turn, rows[0].step, rows[1].turn, rows[1].step),
        (1, 1, 1, 1)
    );
    assert_eq!(rows[0].messages, rows[1].messages);
    assert_eq!(
        rows[0].message_count, 3,
        "system prompt, user prompt, runtime context"
    );
    assert_eq!(rows[1].prefix.messages, 3);
    assert_eq!(rows[1].prefix.broken_by, None);
    assert_eq!(rows[1].prefix.estimated_tokens, rows[1].estimated_tokens);
    assert_eq!(rows[0].reason.as_deref(), Some("initial"));
    assert_eq!(
        rows[0].config,
        json!({"provider": "deepseek-official", "model": "deepseek-v4-flash"})
    );
    assert_eq!(rows[0].tools.as_deref(), Some(&json!("{{tools}}")));
    let inputs: Vec<Option<u64>> = rows
        .iter()
        .map(|r| r.usage.as_ref().map(|u| u.input_tokens))
        .collect();
    assert_eq!(inputs, vec![Some(0), Some(12)]);
    assert_eq!(report.summary.recorded_cache_read_tokens, None);
}

// Goal: the other V3 recordings with model calls rebuild one request per assistant message,
// each extending the previous one. Method: the text-turn and bash-tool recordings; every
// request after the first keeps the whole previous prefix, and each request's messages are
// those of a from-scratch fold just before its event.
#[test]
fn recorded_sessions_only_append() {
    let files = [
        "knyazev741__deepseek-harness/snapshots/sdk/text-turn/session.v3.jsonl",
        "0r4ng3cc__deepseek-harness/snapshots/sdk/bash-tool/session.v3.jsonl",
    ];
    for relative in files {
        let Some(path) = fixture(relative) else {
            return;
        };
        let log = read(&path);
        let source = SessionSource::File {
            path: &path,
            snapshot: SnapshotMode::Auto,
        };
        let report = requests(source, BODIES).unwrap();
        let settled = settling_seqs(&log.events);
        assert!(!settled.is_empty(), "{relative}");
        check_against_scratch(&log.events, log.snapshot, &report);
        for pair in report.requests.windows(2) {
            assert_eq!(pair[1].prefix.messages, pair[0].message_count, "{relative}");
            assert_eq!(pair[1].prefix.broken_by, None, "{relative}");
        }
    }
}

fn read(path: &Path) -> sessionlog_format::Log {
    let bytes = std::fs::read(path).unwrap();
    sessionlog_format::read_log(&bytes[..], Default::default()).unwrap()
}

fn settling_seqs(events: &[Event]) -> Vec<u64> {
    let settles = |e: &&Event| {
        matches!(
            e.data,
            EventData::AssistantMessage(_) | EventData::AssistantAttempt(_)
        )
    };
    events.iter().filter(settles).map(|e| e.seq).collect()
}

/// Checks every row against a naive model: the messages and header of a fresh fold of the
/// events before the settling event, the estimator over them, and the longest common prefix
/// with the previous row's messages (`id`, `role`, `content`), zero when the header changed.
fn check_against_scratch(events: &[Event], snapshot: bool, report: &RequestReport) {
    let ctx = RuleContext {
        version: FormatVersion::V3,
        snapshot,
    };
    let settled = settling_seqs(events);
    assert_eq!(report.requests.len(), settled.len());
    let mut previous: Option<(
        Vec<Message>,
        Option<sessionlog_format::payload::EpochHeader>,
    )> = None;
    for (row, seq) in report.requests.iter().zip(settled) {
        assert_eq!(row.seq, seq);
        let mut fold = SessionFold::new(ctx);
        for event in &events[..seq as usize] {
            fold.admit(Arc::new(event.clone())).unwrap();
        }
        let messages: Vec<Message> = fold.messages().into_iter().cloned().collect();
        let header = fold.request_header().map(canonical_header);
        assert_eq!(
            row.messages.as_ref(),
            Some(&messages),
            "request {}",
            row.index
        );
        let tools = header
            .as_ref()
            .and_then(|h| h.tools.as_ref())
            .map_or(0, estimate_tools);
        let total: u64 = messages.iter().map(estimate_message).sum::<u64>() + tools;
        assert_eq!(row.estimated_tokens, total, "request {}", row.index);
        if let Some((before, before_header)) = &previous {
            let same_header = match (before_header, &header) {
                (Some(a), Some(b)) => headers_equal(a, b),
                (a, b) => a.is_none() && b.is_none(),
            };
            let common = before
                .iter()
                .zip(&messages)
                .take_while(|(a, b)| a.id == b.id && a.role == b.role && a.content == b.content)
                .count();
            let expected = if same_header { common } else { 0 };
            assert_eq!(row.prefix.messages, expected, "request {}", row.index);
            assert_eq!(
                row.prefix.broken_by.is_none(),
                same_header && common == before.len()
            );
        }
        previous = Some((messages, header));
    }
}

fn generated(events: u64, seed: u64) -> (sessionlog_format::SessionHeader, Vec<Vec<Event>>) {
    let mut generator = Generator::new(GenOptions { events, seed });
    let header = generator.header();
    let mut batches = Vec::new();
    while let Some(batch) = generator.next_batch() {
        batches.push(batch);
    }
    (header, batches)
}

// Goal: on generated sessions with head rewrites, in-history appends, compactions, prunes
// and retries, every request equals a from-scratch rebuild, an in-history append keeps the
// whole prefix and a head rewrite breaks it at message 0; the store gives the same report as
// a file. Method: a few seeds, the analyzer fed from a store, compared with the naive model
// and with the break kinds' rules.
#[test]
fn generated_sessions_match_a_scratch_rebuild() {
    let mut totals = [0u64; 4];
    for seed in 0..4 {
        let (header, batches) = generated(1_500, seed);
        let (_dir, store) = temp_store();
        store.create_session(&header).unwrap();
        let mut next_seq = 0;
        for batch in &batches {
            store.append(&header.id, next_seq, batch.clone()).unwrap();
            next_seq += batch.len() as u64;
        }
        let source = SessionSource::Store {
            store: &store,
            session: &header.id,
        };
        let report = requests(source, BODIES).unwrap();
        let events: Vec<Event> = batches.concat();
        check_against_scratch(&events, false, &report);
        for pair in report.requests.windows(2) {
            let prefix = &pair[1].prefix;
            match &prefix.broken_by {
                None => assert_eq!(prefix.messages, pair[0].message_count),
                Some(PrefixBreak::HeadRewrite { seq }) => {
                    assert_eq!(prefix.messages, 0);
                    assert!(matches!(
                        events[*seq as usize].data,
                        EventData::SystemMessage(_)
                    ));
                }
                Some(PrefixBreak::Compaction { seq }) => {
                    assert!(matches!(
                        events[*seq as usize - 1].data,
                        EventData::CompactionSummary(_)
                    ));
                }
                Some(cause) => assert!(cause.seq() < pair[1].seq),
            }
        }
        let summary = &report.summary;
        totals[0] += summary.prompt_appends;
        totals[1] += summary.prompt_rewrites;
        let count = |name: &str| {
            report
                .requests
                .iter()
                .filter(|r| {
                    r.prefix
                        .broken_by
                        .as_ref()
                        .is_some_and(|b| b.name() == name)
                })
                .count() as u64
        };
        totals[2] += count("compaction");
        totals[3] += count("head-rewrite");
    }
    // The seeds exercise what the rules are about.
    assert!(
        totals.iter().all(|&t| t > 0),
        "appends, rewrites, compactions, head breaks: {totals:?}"
    );
}

// Goal: a file and the same session in the store give the same report, and a missing session
// or file is an error, not a panic. Method: a generated session written as a file and
// imported; then an unknown id and a missing path.
#[test]
fn file_and_store_agree() {
    let dir = tempfile::tempdir().unwrap();
    let (header, batches) = generated(600, 11);
    let path = dir.path().join("gen.jsonl");
    let options = GenOptions {
        events: 600,
        seed: 11,
    };
    generate_file(
        &path,
        options,
        FormatVersion::V3,
        Compression::None,
        &mut |_| {},
    )
    .unwrap();
    let from_file = requests(
        SessionSource::File {
            path: &path,
            snapshot: SnapshotMode::Auto,
        },
        BODIES,
    )
    .unwrap();
    let (_store_dir, store) = temp_store();
    store.create_session(&header).unwrap();
    store.append(&header.id, 0, batches.concat()).unwrap();
    let from_store = requests(
        SessionSource::Store {
            store: &store,
            session: &header.id,
        },
        BODIES,
    )
    .unwrap();
    assert_eq!(from_file, from_store);
    assert!(!from_file.requests.is_empty());
    let unknown = requests(
        SessionSource::Store {
            store: &store,
            session: "nope",
        },
        BODIES,
    );
    assert!(unknown.is_err());
    let missing = dir.path().join("missing.jsonl");
    let missing = requests(
        SessionSource::File {
            path: &missing,
            snapshot: SnapshotMode::Auto,
        },
        BODIES,
    );
    assert!(missing.is_err());
}

// Goal: without bodies no message is kept, and everything else is the same. Method: the
// scripted session with and without `bodies`.
#[test]
fn bodies_are_optional() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scripted.jsonl");
    std::fs::write(&path, scripted().log.text()).unwrap();
    let source = SessionSource::File {
        path: &path,
        snapshot: SnapshotMode::Auto,
    };
    let with = requests(source, BODIES).unwrap();
    let without = requests(source, RequestOptions::default()).unwrap();
    assert!(without.requests.iter().all(|r| r.messages.is_none()));
    let mut stripped = with.clone();
    stripped.requests.iter_mut().for_each(|r| r.messages = None);
    assert_eq!(stripped, without);
}

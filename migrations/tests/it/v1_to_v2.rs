//! The V1 -> V2 edge (issue #5): stream folding, placement, remapping, cut and legacy repairs.

use std::sync::Arc;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use sessionlog_format::fold::fold_from_scratch;
use sessionlog_format::row::encode_row;
use sessionlog_format::rules::RuleContext;
use sessionlog_format::stream::StreamChunk;
use sessionlog_format::{
    read_log, Event, EventData, EventType, FormatVersion, Message, ReadOptions, SessionHeader,
};
use sessionlog_migrations::{
    migrate_v1_to_v2, unpack_stream, Migrated, Refusal, Stage, StageOptions, V1ToV2,
};

use crate::support::fixtures_dir;

/// An unseeded V1 header.
const HEADER: &str =
    r#"{"type":"session","version":1,"id":"s1","createdAt":1,"delegationDepth":0}"#;

/// A seeded V1 header whose first `seed_length` events are inherited.
fn seeded(seed_length: u64, created_at: u64) -> String {
    format!(
        r#"{{"type":"session","version":1,"id":"s2","createdAt":{created_at},"parentSession":"s1","seedLength":{seed_length},"delegationDepth":1}}"#
    )
}

/// One V1 row.
fn ev(kind: &str, seq: u64, time: i64, data: Value) -> Value {
    json!({"type": kind, "seq": seq, "time": time, "data": data})
}

fn chunk(seq: u64, time: i64, chunk: Value) -> Value {
    ev(
        "assistant/chunk",
        seq,
        time,
        json!({"turn": 1, "step": 1, "chunk": chunk}),
    )
}

fn text(seq: u64, time: i64, text: &str) -> Value {
    chunk(
        seq,
        time,
        json!({"type":"text-delta","index":0,"text":text}),
    )
}

fn finish(seq: u64, time: i64, kind: &str) -> Value {
    chunk(seq, time, json!({"type":"finish","reason":{"kind":kind}}))
}

fn message_data() -> Value {
    json!({
        "id": "assistant-1",
        "role": "assistant",
        "content": [{"type": "text", "text": "hello"}],
        "source": {"kind": "model", "provider": "mock", "model": "mock"},
    })
}

/// An appended `assistant/message` of step (1, 1) citing `sources` (absent when `None`).
fn assistant(seq: u64, time: i64, sources: Option<&[u64]>) -> Value {
    let mut row = ev(
        "assistant/message",
        seq,
        time,
        json!({"turn": 1, "step": 1, "message": message_data()}),
    );
    row["surfaceOp"] = json!("append");
    if let Some(sources) = sources {
        row["sourceEventSeqs"] = json!(sources);
    }
    row
}

fn user(seq: u64, time: i64, id: &str) -> Value {
    let data = json!({"id": id, "role": "user", "content": [{"type":"text","text":"question"}], "source": {"kind": "user"}});
    let mut row = ev("user/message", seq, time, data);
    row["surfaceOp"] = json!("append");
    row
}

fn turn_start(seq: u64, time: i64, turn: u64) -> Value {
    ev("turn/start", seq, time, json!({"turn": turn}))
}

fn turn_end(seq: u64, time: i64, turn: u64) -> Value {
    ev(
        "turn/end",
        seq,
        time,
        json!({"turn": turn, "reason": {"kind": "completed"}}),
    )
}

fn step(kind: &str, seq: u64, time: i64) -> Value {
    ev(kind, seq, time, json!({"turn": 1, "step": 1}))
}

fn feedback(seq: u64, time: i64, text: &str) -> Value {
    ev("feedback/record", seq, time, json!({"text": text}))
}

/// Reads a V1 log through the reader, so every row passes the V1 rules.
fn read_v1(header: &str, rows: &[Value]) -> (SessionHeader, Vec<Event>) {
    let mut log_text = format!("{header}\n");
    for row in rows {
        log_text.push_str(&row.to_string());
        log_text.push('\n');
    }
    let log = read_log(log_text.as_bytes(), ReadOptions::default()).expect("a valid v1 log");
    assert_eq!(log.version, FormatVersion::V1);
    (log.header, log.events)
}

/// Reads and migrates a V1 log; a migrated log must read back as a valid V2 file with the
/// same events and cut.
fn migrate(header: &str, rows: &[Value]) -> Result<Migrated, Refusal> {
    let (header, events) = read_v1(header, rows);
    let migrated = migrate_v1_to_v2(header, events, StageOptions::default())?;
    check_v2_readable(&migrated);
    Ok(migrated)
}

/// Writes the migrated log as a V2 file and reads it back under the V2 rules.
fn v2_text(migrated: &Migrated) -> String {
    let mut log_text = serde_json::to_string(&migrated.header).expect("a header serializes");
    log_text.push('\n');
    for row in v2_rows(&migrated.events) {
        log_text.push_str(&row.to_string());
        log_text.push('\n');
    }
    log_text
}

/// Why the V2 reader refuses the output (the test fails when it reads).
fn v2_read_error(migrated: &Migrated) -> String {
    match read_log(v2_text(migrated).as_bytes(), ReadOptions::default()) {
        Ok(_) => panic!("the output reads as a valid v2 log"),
        Err(error) => error.to_string(),
    }
}

fn check_v2_readable(migrated: &Migrated) {
    let log_text = v2_text(migrated);
    let log = read_log(log_text.as_bytes(), ReadOptions::default())
        .unwrap_or_else(|error| panic!("the output is not a valid v2 log: {error}"));
    assert_eq!(log.version, FormatVersion::V2);
    assert_eq!(log.events, migrated.events);
}

/// The output events as V2 rows, parsed back to JSON: what a V2 file would hold.
fn v2_rows(events: &[Event]) -> Vec<Value> {
    let rows = events.iter().map(|event| {
        let mut out = Vec::new();
        encode_row(event, FormatVersion::V2, &mut out);
        serde_json::from_slice(&out).expect("an encoded row is JSON")
    });
    rows.collect()
}

fn types(events: &[Event]) -> Vec<&str> {
    events.iter().map(|event| event.kind.as_str()).collect()
}

/// The refusal text and the V1 seq it blames.
fn refusal(header: &str, rows: &[Value]) -> (String, Option<u64>) {
    let refusal = migrate(header, rows).expect_err("the edge refuses");
    (refusal.to_string(), refusal.seq)
}

// Goal: a cited attempt moves into its message as a timed stream, the interleaved event
// keeps its place, and later references follow the dense renumbering (dsh's own example).
// Method: migrate a turn whose chunks surround a feedback record and compare every V2 row.
#[test]
fn embeds_an_interleaved_stream_and_remaps_survivors() {
    let rows = [
        turn_start(0, 100, 1),
        step("step/start", 1, 101),
        text(2, 110, "hello"),
        feedback(3, 111, "interleaved"),
        finish(4, 120, "stop"),
        assistant(5, 121, Some(&[2, 4])),
        step("step/end", 6, 122),
        turn_end(7, 123, 1),
        ev(
            "command/run",
            8,
            124,
            json!({"commandId":"c1","name":"inspect","source":{"kind":"user"}}),
        ),
        ev(
            "command/done",
            9,
            125,
            json!({"commandId":"c1","kind":"success","sourceEventSeq":5}),
        ),
    ];
    let migrated = migrate(HEADER, &rows).expect("migrates");
    assert_eq!(migrated.cut, 0);
    assert_eq!(migrated.header.version, Some(2));
    assert_eq!(migrated.header.is_seeded, Some(false));
    assert_eq!(migrated.header.seed_length, None);
    let mut message = json!({"turn": 1, "step": 1, "message": message_data()});
    message["stream"] = json!([
        {"type":"text-chunks","time0":110,"index":0,"dt":[],"texts":["hello"]},
        {"type":"chunk","time":120,"chunk":{"type":"finish","reason":{"kind":"stop"}}},
    ]);
    let mut message_row = ev("assistant/message", 3, 121, message);
    message_row["surfaceOp"] = json!("append");
    assert_eq!(
        v2_rows(&migrated.events),
        vec![
            turn_start(0, 100, 1),
            step("step/start", 1, 101),
            feedback(2, 111, "interleaved"),
            message_row,
            step("step/end", 4, 122),
            turn_end(5, 123, 1),
            ev(
                "command/run",
                6,
                124,
                json!({"commandId":"c1","name":"inspect","source":{"kind":"user"}})
            ),
            ev(
                "command/done",
                7,
                125,
                json!({"commandId":"c1","kind":"success","sourceEventSeq":3})
            ),
        ]
    );
}

// Goal: an attempt no message claims becomes assistant/attempt at its final chunk position:
// events between its chunks come before it, events after its last chunk after it.
// Method: a failed attempt with a feedback record between the chunks and one after them.
#[test]
fn unclaimed_attempt_stands_at_its_final_chunk() {
    let rows = [
        turn_start(0, 100, 1),
        step("step/start", 1, 101),
        text(2, 110, "partial"),
        feedback(3, 111, "between"),
        chunk(
            4,
            120,
            json!({"type":"finish","reason":{"kind":"error","failure":{"code":"X"}}}),
        ),
        feedback(5, 121, "after"),
        step("step/end", 6, 122),
        turn_end(7, 123, 1),
    ];
    let migrated = migrate(HEADER, &rows).expect("migrates");
    assert_eq!(
        v2_rows(&migrated.events),
        vec![
            turn_start(0, 100, 1),
            step("step/start", 1, 101),
            feedback(2, 111, "between"),
            ev(
                "assistant/attempt",
                3,
                120,
                json!({"turn":1,"step":1,"stream":[
                    {"type":"text-chunks","time0":110,"index":0,"dt":[],"texts":["partial"]},
                    {"type":"chunk","time":120,"chunk":{"type":"finish","reason":{"kind":"error","failure":{"code":"X"}}}},
                ]}),
            ),
            feedback(4, 121, "after"),
            step("step/end", 5, 122),
            turn_end(6, 123, 1),
        ]
    );
}

// Goal: an unterminated prefix before a retry is its own attempt; the retried stream goes to
// the message; a finish chunk ends an attempt so that the next chunk opens another.
// Method: dsh's retry-prefix case, then two finished attempts in one step and no message.
#[test]
fn retries_and_finishes_delimit_attempts() {
    let retry = json!({"retryId":"r1","turn":1,"step":1,"provider":"mock","mode":"normal","policyKey":"default","retry":1,"maxRetries":1,"delayMs":0,"failure":{"code":"SERVER","message":"retry"}});
    // The retry names the provider of the open request/header (spec 12.2 other 2).
    let header = json!({"header":{"config":{"provider":"mock","model":"m"}},"reason":"initial"});
    let rows = [
        turn_start(0, 100, 1),
        step("step/start", 1, 101),
        ev("request/header", 2, 105, header),
        text(3, 110, "partial"),
        ev("llm/retry", 4, 120, retry),
        ev(
            "llm/retry-started",
            5,
            121,
            json!({"retryId":"r1","turn":1,"step":1,"retry":1}),
        ),
        text(6, 130, "hello"),
        finish(7, 140, "stop"),
        assistant(8, 141, Some(&[6, 7])),
        step("step/end", 9, 142),
        turn_end(10, 143, 1),
    ];
    let migrated = migrate(HEADER, &rows).expect("migrates");
    assert_eq!(
        types(&migrated.events),
        [
            "turn/start",
            "step/start",
            "request/header",
            "assistant/attempt",
            "llm/retry",
            "llm/retry-started",
            "assistant/message",
            "step/end",
            "turn/end"
        ]
    );
    assert_eq!(migrated.events[3].seq, 3);
    assert_eq!(migrated.events[3].time, 110);

    let rows = [
        turn_start(0, 1, 1),
        step("step/start", 1, 2),
        text(2, 3, "first"),
        finish(3, 4, "stop"),
        text(4, 5, "second"),
        step("step/end", 5, 6),
        turn_end(6, 7, 1),
    ];
    let migrated = migrate(HEADER, &rows).expect("migrates");
    let attempts = migrated.events.iter();
    let attempts = attempts.filter(|event| event.kind == EventType::AssistantAttempt);
    assert_eq!(attempts.count(), 2);
}

// Goal: a message must cite its pending attempt completely and in order; a message without
// citations and without a pending attempt keeps an empty stream.
// Method: dsh's citation cases: none, partial, reordered, and the two legacy forms.
#[test]
fn messages_must_cite_their_complete_attempt() {
    let build = |sources: Option<&[u64]>| {
        vec![
            turn_start(0, 1, 1),
            step("step/start", 1, 2),
            text(2, 3, "hello"),
            finish(3, 4, "stop"),
            assistant(4, 5, sources),
            step("step/end", 5, 6),
            turn_end(6, 7, 1),
        ]
    };
    assert_eq!(
        refusal(HEADER, &build(None)),
        (
            "assistant/message 4 does not cite its complete v1 chunk attempt".to_owned(),
            Some(4)
        )
    );
    let incomplete = "assistant/message 4 chunk references are not one complete ordered attempt";
    assert_eq!(
        refusal(HEADER, &build(Some(&[2]))),
        (incomplete.to_owned(), Some(4))
    );
    assert_eq!(
        refusal(HEADER, &build(Some(&[3, 2]))),
        (incomplete.to_owned(), Some(4))
    );
    let orphan = [
        turn_start(0, 1, 1),
        step("step/start", 1, 2),
        assistant(2, 3, Some(&[1])),
    ];
    assert_eq!(
        refusal(HEADER, &orphan),
        (
            "assistant/message 2 chunk references are not one complete ordered attempt".to_owned(),
            Some(2)
        )
    );
    for sources in [None, Some(&[][..])] {
        let rows = [
            turn_start(0, 1, 1),
            step("step/start", 1, 2),
            assistant(2, 3, sources),
            step("step/end", 3, 4),
            turn_end(4, 5, 1),
        ];
        let migrated = migrate(HEADER, &rows).expect("migrates");
        let row = &v2_rows(&migrated.events)[2];
        assert_eq!(row["data"]["stream"], json!([]));
        assert_eq!(row.get("sourceEventSeqs"), None);
    }
}

// Goal: every declared reference kind is remapped, and the title request's text keeps its
// historical seqs.
// Method: a log whose chunks shift everything after them by two, with a surface replace,
// a compaction prune and summary, both title events and both command/done shapes.
#[test]
fn every_declared_reference_is_remapped() {
    let framed = "Generate the session title from this JSON array of human messages:\n[{\"seq\":1,\"text\":\"question\"}]";
    let mut replace = user(6, 7, "checkpoint");
    replace["data"]["source"] = json!({"kind":"plugin","plugin":"test"});
    replace["sourceEventSeqs"] = json!([5]);
    replace["surfaceOp"] = json!({"op":"replace","start":5,"end":5});
    let mut compact = user(9, 10, "compact");
    compact["data"]["source"] = json!({"kind":"plugin","plugin":"compact","compactionId":"c"});
    compact["sourceEventSeqs"] = json!([6]);
    compact["surfaceOp"] = json!({"op":"replace","start":6,"end":6});
    let rows = [
        turn_start(0, 1, 1),
        step("step/start", 1, 2),
        text(2, 3, "hello"),
        finish(3, 4, "stop"),
        assistant(4, 5, Some(&[2, 3])),
        user(5, 6, "question"),
        replace,
        ev(
            "compaction/start",
            7,
            8,
            json!({"compactionId":"c","turn":1}),
        ),
        ev(
            "compaction/summary",
            8,
            9,
            json!({"compactionId":"c","summary":[{"type":"text","text":"s"}],"shadowedRange":{"start":4,"end":6},"shadowedSeqs":[4,6],"shadowedTokenCount":1,"provider":"mock","model":"mock"}),
        ),
        compact,
        ev(
            "compaction/end",
            10,
            11,
            json!({"compactionId":"c","turn":1}),
        ),
        ev(
            "compaction/prune",
            11,
            12,
            json!({"shadowedRange":{"start":9,"end":9},"shadowedSeqs":[9],"shadowedTokenCount":1}),
        ),
        ev(
            "session/title",
            12,
            13,
            json!({"title":"Q","messageSeqs":[5],"source":{"kind":"fallback"}}),
        ),
        ev(
            "session/title-llm-request",
            13,
            14,
            json!({"titleProvider":"t","messageSeqs":[5],"route":{"provider":"mock","model":"mock"},"system":"title","messages":[{"id":"tr","role":"user","content":[{"type":"text","text":framed}],"source":{"kind":"plugin","plugin":"dsh-session-title-llm"}}],"maxTokens":20}),
        ),
        ev(
            "command/run",
            14,
            15,
            json!({"commandId":"a","name":"inspect","source":{"kind":"user"}}),
        ),
        ev(
            "command/done",
            15,
            16,
            json!({"commandId":"a","kind":"success"}),
        ),
        ev(
            "command/done",
            16,
            17,
            json!({"commandId":"a","kind":"success","sourceEventSeq":11}),
        ),
        step("step/end", 17, 18),
        turn_end(18, 19, 1),
    ];
    let migrated = migrate(HEADER, &rows).expect("migrates");
    let out = v2_rows(&migrated.events);
    assert_eq!(out[4]["sourceEventSeqs"], json!([3]));
    assert_eq!(
        out[4]["surfaceOp"],
        json!({"op":"replace","start":3,"end":3})
    );
    assert_eq!(out[6]["data"]["shadowedRange"], json!({"start":2,"end":4}));
    assert_eq!(out[6]["data"]["shadowedSeqs"], json!([2, 4]));
    assert_eq!(out[7]["sourceEventSeqs"], json!([4]));
    assert_eq!(
        out[7]["surfaceOp"],
        json!({"op":"replace","start":4,"end":4})
    );
    assert_eq!(out[9]["data"]["shadowedRange"], json!({"start":7,"end":7}));
    assert_eq!(out[9]["data"]["shadowedSeqs"], json!([7]));
    assert_eq!(out[10]["data"]["messageSeqs"], json!([3]));
    assert_eq!(out[11]["data"]["messageSeqs"], json!([3]));
    assert_eq!(
        out[11]["data"]["messages"][0]["content"][0]["text"],
        json!(framed)
    );
    assert_eq!(out[13]["data"], json!({"commandId":"a","kind":"success"}));
    assert_eq!(
        out[14]["data"],
        json!({"commandId":"a","kind":"success","sourceEventSeq":9})
    );
}

// Goal: a reference to a consumed chunk is refused, naming the owner, the field and the
// chunk, and blaming the referencing event (dsh's wording).
// Method: a command/done pointing at the last chunk of a failed attempt, and a surface
// replace whose provenance cites a chunk.
#[test]
fn references_to_consumed_chunks_are_refused() {
    let rows = [
        turn_start(0, 100, 1),
        step("step/start", 1, 101),
        text(2, 110, "partial"),
        finish(3, 120, "error"),
        step("step/end", 4, 121),
        turn_end(5, 122, 1),
        ev(
            "command/run",
            6,
            123,
            json!({"commandId":"c","name":"inspect","source":{"kind":"user"}}),
        ),
        ev(
            "command/done",
            7,
            124,
            json!({"commandId":"c","kind":"success","sourceEventSeq":3}),
        ),
    ];
    assert_eq!(
        refusal(HEADER, &rows),
        (
            "command/done 7 sourceEventSeq targets consumed assistant/chunk 3".to_owned(),
            Some(7)
        )
    );
    let mut replace = user(5, 6, "u");
    replace["sourceEventSeqs"] = json!([2]);
    let rows = [
        turn_start(0, 1, 1),
        step("step/start", 1, 2),
        text(2, 3, "partial"),
        step("step/end", 3, 4),
        user(4, 5, "q"),
        replace,
    ];
    assert_eq!(
        refusal(HEADER, &rows),
        (
            "user/message 5 sources targets consumed assistant/chunk 2".to_owned(),
            Some(5)
        )
    );
}

// Goal: the inherited marker lands at the exact cut, tagged; a source end-seed at the cut
// becomes the marker; an empty or whole-log prefix gets the marker at the end.
// Method: dsh's seeded cases: a collapsed attempt inside the prefix, an empty seed, a
// retained prefix, and a cut at 0 before the first event.
#[test]
fn seeded_cut_is_marked_in_the_events() {
    let rows = [
        turn_start(0, 100, 1),
        step("step/start", 1, 101),
        text(2, 110, "hello"),
        finish(3, 120, "stop"),
        assistant(4, 121, Some(&[2, 3])),
        step("step/end", 5, 122),
        turn_end(6, 123, 1),
        ev("session/end-seed", 7, 124, json!({})),
    ];
    let migrated = migrate(&seeded(7, 1), &rows).expect("migrates");
    assert_eq!(migrated.cut, 5);
    assert_eq!(migrated.header.is_seeded, Some(true));
    assert_eq!(migrated.header.seed_length, None);
    assert_eq!(migrated.events.len(), 6);
    assert_eq!(
        v2_rows(&migrated.events)[5],
        ev("session/end-seed", 5, 124, json!({"inherited": true}))
    );

    let empty = migrate(&seeded(0, 42), &[]).expect("migrates");
    assert_eq!(empty.cut, 0);
    assert_eq!(
        v2_rows(&empty.events),
        vec![ev("session/end-seed", 0, 42, json!({"inherited": true}))]
    );

    let retained = migrate(&seeded(1, 1), &[feedback(0, 9, "inherited")]).expect("migrates");
    assert_eq!(retained.cut, 1);
    assert_eq!(
        v2_rows(&retained.events),
        vec![
            feedback(0, 9, "inherited"),
            ev("session/end-seed", 1, 9, json!({"inherited": true}))
        ]
    );

    let first = migrate(&seeded(0, 1), &[turn_start(0, 2, 1)]).expect("migrates");
    assert_eq!(first.cut, 0);
    assert_eq!(
        v2_rows(&first.events),
        vec![
            ev("session/end-seed", 0, 2, json!({"inherited": true})),
            turn_start(1, 2, 1)
        ]
    );
}

// Goal: a cut that splits an attempt is refused: between two chunks, and between a complete
// stream and its message.
// Method: dsh's two split cases; the refusal blames the first event past the cut that
// belongs to the attempt.
#[test]
fn a_cut_inside_an_attempt_is_refused() {
    let rows = [
        turn_start(0, 1, 1),
        step("step/start", 1, 2),
        text(2, 3, "hello"),
        ev("session/end-seed", 3, 4, json!({})),
        finish(4, 5, "stop"),
        assistant(5, 6, Some(&[2, 4])),
        step("step/end", 6, 7),
        turn_end(7, 8, 1),
    ];
    assert_eq!(
        refusal(&seeded(3, 1), &rows),
        (
            "inherited Session cut 3 splits one Assistant attempt".to_owned(),
            Some(4)
        )
    );
    let rows = [
        turn_start(0, 1, 1),
        step("step/start", 1, 2),
        text(2, 3, "hello"),
        finish(3, 4, "stop"),
        ev("session/end-seed", 4, 5, json!({})),
        assistant(5, 6, Some(&[2, 3])),
        step("step/end", 6, 7),
        turn_end(7, 8, 1),
    ];
    assert_eq!(
        refusal(&seeded(4, 1), &rows),
        (
            "inherited Session cut 4 splits one Assistant attempt".to_owned(),
            Some(5)
        )
    );
}

// Goal: a legacy goal message becomes goal/change followed by the same message attributed
// to the goal plugin.
// Method: dsh's round-zero goal message.
#[test]
fn goal_mutation_is_split_from_its_message() {
    let change = json!({"kind":"goal/change","version":1,"operation":"create","goal":{"id":"goal-1","revision":1,"objective":"finish","phase":"active","maxGoalRounds":2},"roundsStarted":0,"createdAt":1,"updatedAt":1});
    let mut goal = user(0, 5, "goal-message");
    goal["data"]["source"] =
        json!({"kind":"goal","goalId":"goal-1","revision":1,"round":0,"change":change});
    let migrated = migrate(HEADER, &[goal.clone()]).expect("migrates");
    let mut message = goal;
    message["seq"] = json!(1);
    message["data"]["source"] = json!({"kind":"plugin","plugin":"goal"});
    assert_eq!(
        v2_rows(&migrated.events),
        vec![ev("goal/change", 0, 5, change), message]
    );
}

// Goal: the bounded restart pattern gets an interrupted turn/end for the prior turn; any
// other turn/start inside an open turn is refused.
// Method: dsh's next-turn resume case, then the same with an empty insertion.
#[test]
fn restart_pattern_closes_the_prior_turn() {
    let splice = |inserted: Value| {
        ev(
            "agent/inbox/spliced",
            3,
            4,
            json!({"target":"next-turn","start":0,"inserted":inserted}),
        )
    };
    let inserted = json!([{"id":"u1","role":"user","content":[{"type":"text","text":"q"}],"source":{"kind":"user"}}]);
    let rows = [
        turn_start(0, 1, 1),
        step("step/start", 1, 2),
        step("step/end", 2, 3),
        splice(inserted),
        turn_start(4, 5, 2),
        turn_end(5, 6, 2),
    ];
    let migrated = migrate(HEADER, &rows).expect("migrates");
    assert_eq!(
        types(&migrated.events),
        [
            "turn/start",
            "step/start",
            "step/end",
            "agent/inbox/spliced",
            "turn/end",
            "turn/start",
            "turn/end"
        ]
    );
    assert_eq!(
        v2_rows(&migrated.events)[4],
        ev(
            "turn/end",
            4,
            5,
            json!({"turn":1,"reason":{"kind":"interrupted"}})
        )
    );
    let mut rows = rows;
    rows[3] = splice(json!([]));
    assert_eq!(
        refusal(HEADER, &rows),
        (
            "turn/start 2 does not close the prior turn".to_owned(),
            Some(4)
        )
    );
}

// Goal: the closed inventory refuses an unknown event even when it is ignorable, with
// dsh's text; a chunk envelope member a stream cannot keep is refused too.
// Method: feed hand-built events straight into the stage.
#[test]
fn unknown_events_and_chunk_envelopes_are_refused() {
    let (header, _) = read_v1(HEADER, &[]);
    let mut stage = V1ToV2::new(StageOptions::default());
    stage.header(header.clone()).expect("a v1 header");
    let mut unknown = Event::other(
        0,
        100,
        EventType::parse("external/info"),
        json!({"text": "unknown"}),
    );
    unknown.ignorable = true;
    let refused = stage
        .push(unknown, &mut Vec::new())
        .expect_err("unknown type");
    assert_eq!(
        refused.to_string(),
        "format v1 contains unknown event type \"external/info\" at seq 0"
    );
    assert_eq!(refused.seq, Some(0));

    let (_, events) = read_v1(HEADER, &[text(0, 1, "x")]);
    let mut chunk = events[0].clone();
    chunk.source_event_seqs = Some(vec![]);
    let mut stage = V1ToV2::new(StageOptions::default());
    stage.header(header).expect("a v1 header");
    let refused = stage.push(chunk, &mut Vec::new()).expect_err("envelope");
    assert_eq!(
        refused.to_string(),
        "assistant/chunk 0 has unexpected member sourceEventSeqs"
    );
    let finished = stage.finish(&mut Vec::new()).expect_err("refused stage");
    assert_eq!(
        finished.to_string(),
        "the stage received an event after finish"
    );
}

// Goal: packed rows and single chunk rows of one block coalesce into one record whose
// members are the original deltas; different blocks stay apart.
// Method: a V1 log with a packed text row between single text rows of the same block, then a
// reasoning row; unpack the result and compare with the reader's chunk events.
#[test]
fn packed_rows_coalesce_without_joining_deltas() {
    let packed = json!({"type":"text-chunks","seq0":3,"time0":12,"data":{"turn":1,"step":1,"index":0,"dt":[1,0],"texts":["b","c","d"]}});
    let rows = [
        turn_start(0, 1, 1),
        step("step/start", 1, 2),
        text(2, 10, "a"),
        packed,
        text(6, 15, "e"),
        chunk(
            7,
            16,
            json!({"type":"reasoning-delta","index":1,"text":"r"}),
        ),
        step("step/end", 8, 17),
        turn_end(9, 18, 1),
    ];
    let (header, events) = read_v1(HEADER, &rows);
    let source_chunks = chunks_of(&events);
    let migrated = migrate_v1_to_v2(header, events, StageOptions::default()).expect("migrates");
    let out = v2_rows(&migrated.events);
    assert_eq!(
        out[2]["data"]["stream"],
        json!([
            {"type":"text-chunks","time0":10,"index":0,"dt":[2,1,0,2],"texts":["a","b","c","d","e"]},
            {"type":"reasoning-chunks","time0":16,"index":1,"dt":[],"texts":["r"]},
        ])
    );
    assert_eq!(emitted_chunks(&migrated.events), source_chunks);
}

/// The chunk events of a source, in order, as (time, chunk).
fn chunks_of(events: &[Event]) -> Vec<(i64, StreamChunk)> {
    let chunks = events.iter().filter_map(|event| match &event.data {
        EventData::AssistantChunk(data) => Some((event.time, data.chunk.clone())),
        _ => None,
    });
    chunks.collect()
}

/// Every chunk the output's messages and attempts embed, in output order.
fn emitted_chunks(events: &[Event]) -> Vec<(i64, StreamChunk)> {
    let mut chunks = Vec::new();
    for event in events {
        let stream = match &event.data {
            EventData::AssistantMessage(data) => data.stream.as_deref().unwrap_or_default(),
            EventData::AssistantAttempt(data) => data.stream.as_slice(),
            _ => continue,
        };
        chunks.extend(unpack_stream(stream).expect("emitted streams unpack"));
    }
    chunks
}

/// The derived messages after the whole log.
fn derived_messages(events: &[Event], ctx: RuleContext) -> Vec<Message> {
    let events: Vec<Arc<Event>> = events.iter().cloned().map(Arc::new).collect();
    let fold = fold_from_scratch(ctx, &events).unwrap_or_else(|(event_idx, violation)| {
        panic!("event {event_idx} is refused by the {ctx:?} fold: {violation}")
    });
    fold.messages().into_iter().cloned().collect()
}

// Goal: on every V0 recording the manifest accepts, no chunk text, time, id or usage is
// lost: the embedded streams unpack to exactly the source chunks, each message's stream
// to exactly the chunks it cited, and the derived messages are unchanged.
// Method: read each fixture, relabel its header V1 (canonical V0 events pass V0 -> V1
// unchanged), migrate, then compare chunks and folds (V0 rules for the source, V2 for the
// output).
#[test]
fn v0_fixtures_keep_every_chunk_and_message() {
    let Some(dir) = fixtures_dir() else { return };
    let manifest =
        std::fs::read_to_string(dir.join("MANIFEST.tsv")).expect("the manifest is readable");
    let mut n_fixtures = 0;
    for line in manifest.lines().skip(1) {
        let columns: Vec<&str> = line.split('\t').collect();
        if columns.len() < 3 || columns[1] != "0" || columns[2] != "accept" {
            continue;
        }
        check_fixture(&dir.join(columns[0]), columns[0]);
        n_fixtures += 1;
    }
    assert!(n_fixtures >= 13, "found {n_fixtures} accepted v0 fixtures");
}

fn check_fixture(path: &std::path::Path, name: &str) {
    let bytes = std::fs::read(path).expect("fixture is readable");
    let log = read_log(bytes.as_slice(), ReadOptions::default()).expect("fixture reads");
    assert_eq!(log.version, FormatVersion::V0, "{name}");
    let mut header = log.header.clone();
    header.version = Some(1);
    let options = StageOptions {
        snapshot: log.snapshot,
    };
    let migrated = migrate_v1_to_v2(header, log.events.clone(), options)
        .unwrap_or_else(|refusal| panic!("{name}: {refusal} (v1 seq {:?})", refusal.seq));
    let refused_relationally = name.ends_with("agent-instructions/session.jsonl");
    if refused_relationally {
        // Its compaction checkpoint has no compaction/start: the V2 reader's relationship
        // rules refuse the artifact (the chain's refusal is tested in the engine's chain.rs).
        let refused = v2_read_error(&migrated);
        assert!(
            refused.contains("compaction checkpoint at seq 12 has no matching compaction/start"),
            "{name}: {refused}"
        );
    } else {
        check_v2_readable(&migrated);
    }

    assert_eq!(
        emitted_chunks(&migrated.events),
        chunks_of(&log.events),
        "{name}: all chunks"
    );
    let source_messages = log
        .events
        .iter()
        .filter(|event| event.kind == EventType::AssistantMessage);
    let target_messages = migrated
        .events
        .iter()
        .filter(|event| event.kind == EventType::AssistantMessage);
    let by_seq = |seq: &u64| log.events.get(*seq as usize);
    for (source, target) in source_messages.zip(target_messages) {
        let cited = source.source_event_seqs.iter().flatten().filter_map(by_seq);
        let cited = chunks_of(&cited.cloned().collect::<Vec<_>>());
        assert_eq!(
            emitted_chunks(std::slice::from_ref(target)),
            cited,
            "{name}: message at v1 seq {}",
            source.seq
        );
        assert_eq!(source.message(), target.message(), "{name}");
    }
    let v0 = RuleContext {
        version: FormatVersion::V0,
        snapshot: log.snapshot,
    };
    let v2 = RuleContext {
        version: FormatVersion::V2,
        snapshot: log.snapshot,
    };
    if !refused_relationally {
        // (A V2 fold of a refused artifact stops at its refusal.)
        assert_eq!(
            derived_messages(&migrated.events, v2),
            derived_messages(&log.events, v0),
            "{name}: derived messages"
        );
    }
    let n_chunks = chunks_of(&log.events).len();
    assert!(n_chunks > 0, "{name} has chunks");
    assert!(migrated.events.len() < log.events.len(), "{name}");
}

// Goal: a message of another step settles the pending attempt and keeps an empty stream, as
// dsh does; if it also cites chunks, those could not be kept, so it is refused.
// Method: a partial chunk of turn 1 followed by a message of turn 2, without and with a
// citation, fed straight into the stage.
#[test]
fn a_message_of_another_step_settles_the_attempt() {
    let (header, events) = read_v1(HEADER, &[text(0, 1, "partial")]);
    let mut message = read_v1(HEADER, &[assistant(0, 2, None)]).1.remove(0);
    message.seq = 1;
    if let EventData::AssistantMessage(data) = &mut message.data {
        data.turn = 2;
    }
    let mut events = events;
    events.push(message.clone());
    let migrated = migrate_v1_to_v2(header.clone(), events.clone(), StageOptions::default())
        .expect("migrates");
    assert_eq!(
        types(&migrated.events),
        ["assistant/attempt", "assistant/message"]
    );
    let row = &v2_rows(&migrated.events)[1];
    assert_eq!(row["data"]["stream"], json!([]));
    events[1].source_event_seqs = Some(vec![0]);
    let refused =
        migrate_v1_to_v2(header, events, StageOptions::default()).expect_err("cites chunks");
    assert_eq!(
        refused.to_string(),
        "assistant/message 1 chunk references are not one complete ordered attempt"
    );
}

// Goal: a current-generation delivery marker must name this session, unless it lies in the
// inherited prefix of a child; the stage also refuses a non-V1 header and a seq gap.
// Method: markers in an unseeded and a seeded log, a V0 header, and a gap.
#[test]
fn delivery_markers_headers_and_density() {
    let marker = |session: &str| {
        ev(
            "session-log-deepseek/delivery-accepted",
            0,
            2,
            json!({"sessionId": session, "throughSeq": 0, "sessionFormatVersion": 1}),
        )
    };
    assert_eq!(
        refusal(HEADER, &[marker("other")]),
        (
            "current-generation delivery marker names the wrong Session".to_owned(),
            Some(0)
        )
    );
    assert!(migrate(HEADER, &[marker("s1")]).is_ok());
    let inherited = migrate(&seeded(1, 1), &[marker("s1")]).expect("inherited marker");
    assert_eq!(inherited.cut, 1);

    let (mut header, events) = read_v1(HEADER, &[feedback(0, 1, "a"), feedback(1, 2, "b")]);
    let mut stage = V1ToV2::new(StageOptions::default());
    header.version = Some(0);
    let refused = stage.header(header.clone()).expect_err("a v0 header");
    assert_eq!(
        refused.to_string(),
        "format v1 source header is not a released v1 header: version is 0, not 1"
    );
    header.version = Some(1);
    let migrated = stage.header(header).expect("a v1 header");
    assert_eq!(migrated.version, Some(2));
    let refused = stage
        .push(events[1].clone(), &mut Vec::new())
        .expect_err("a gap");
    assert_eq!(
        refused.to_string(),
        "format v1 source events must be dense: expected seq 0, found 1"
    );
}

/// Reads a V1 log from rows and migrates it through the whole chain.
fn migrate_chain(rows: &[Value]) -> Result<Vec<Event>, sessionlog_migrations::Refusal> {
    use sessionlog_migrations::{Catalog, Migrator, MigratorOptions};
    let mut text = format!("{HEADER}\n");
    for row in rows {
        text.push_str(&format!("{row}\n"));
    }
    let log = read_log(text.as_bytes(), ReadOptions::default()).expect("the V1 reader reads it");
    let (mut migrator, _) =
        Migrator::new(&Catalog::released(), log.header, MigratorOptions::default()).unwrap();
    let mut out = Vec::new();
    for event in log.events {
        migrator.push(event, &mut out)?;
    }
    migrator.finish(&mut out)?;
    Ok(out)
}

// Goal: the chain validates the V1 -> V2 edge's output with the relationship rules (spec
// 12.2), as dsh refuses the transformed artifact, with the legacy restart exception admitted
// there. Method: a V1 log (not validated relationally as read) that skips a turn number, and
// one with the released restart pattern.
#[test]
fn the_transformed_artifact_is_validated() {
    let skipped = [turn_start(0, 1, 1), turn_end(1, 2, 1), turn_start(2, 3, 3)];
    let refusal = migrate_chain(&skipped).expect_err("turn 2 is skipped");
    assert_eq!(
        refusal.to_string(),
        "Session migration from v1 to v2 refuses the transformed artifact: turn/start 3 does \
         not open expected turn 2 [turn-start]"
    );
    assert_eq!(refusal.seq, Some(2));
    let inserted = json!({"target": "next-turn", "start": 0, "inserted": [
        {"id": "i", "role": "user", "content": [{"type": "text", "text": "again"}],
         "source": {"kind": "user"}}]});
    let restart = [
        turn_start(0, 1, 1),
        ev("agent/inbox/spliced", 1, 2, inserted),
        turn_start(2, 3, 2),
        turn_end(3, 4, 2),
    ];
    migrate_chain(&restart).expect("the legacy restart is admitted at V1 -> V2");
}

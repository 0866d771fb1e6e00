//! The V3 -> V4 edge (dsh-v4.md 5): the corpus and generated logs migrate with the proof, the
//! migrated text-turn recording matches dsh's own V4 re-recording up to the writer changes the
//! spec names, and every edge rule refuses with dsh's text.

use std::path::{Path, PathBuf};

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use sessionlog_format::gen::{GenOptions, Generator};
use sessionlog_format::{read_log, Event, FormatVersion, ReadOptions, SessionHeader};
use sessionlog_migrations::{
    Catalog, ChildFact, Migrator, MigratorOptions, Refusal, Stage, StageOptions, Summary, V3ToV4,
};

use crate::support::fixtures_dir;

/// Migrates a whole log to V4 through the released chain, proof on.
fn to_v4(
    header: SessionHeader,
    events: Vec<Event>,
    snapshot: bool,
) -> Result<(SessionHeader, Vec<Event>, Summary), Refusal> {
    let options = MigratorOptions {
        stage: StageOptions { snapshot },
        prove: true,
        target: FormatVersion::V4,
    };
    let (mut migrator, header) =
        Migrator::new(&Catalog::released(), header, options).map_err(|e| match e {
            sessionlog_migrations::MigratorError::Refused(r) => r,
            other => panic!("{other}"),
        })?;
    let mut out = Vec::new();
    for event in events {
        migrator.push(event, &mut out)?;
    }
    let summary = migrator.finish(&mut out)?;
    Ok((header, out, summary))
}

fn read(path: &Path) -> sessionlog_format::Log {
    let bytes = std::fs::read(path).unwrap();
    read_log(bytes.as_slice(), ReadOptions::default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The accepted corpus files of versions V0 to V3, by the manifest.
fn accepted(dir: &Path) -> Vec<(PathBuf, u64)> {
    let manifest = std::fs::read_to_string(dir.join("MANIFEST.tsv")).unwrap();
    let rows = manifest.lines().skip(1).filter_map(|line| {
        let cells: Vec<&str> = line.split('\t').collect();
        let version = cells.get(1)?.parse::<u64>().ok()?;
        (cells.get(2) == Some(&"accept")).then(|| (dir.join(cells[0]), version))
    });
    rows.collect()
}

// Goal: every accepted dsh recording of the corpus that reaches V3 reaches V4 too, in one
// streaming pass with every request proved unchanged; every V3 file does.
// Method: run each through the released chain towards V3 (a refusal there is the older edges'
// business and skips the file, except for a V3 file), then towards V4; the migrator admits the
// output under the V4 rules.
#[test]
fn corpus_migrates_to_v4_with_the_proof() {
    let Some(dir) = fixtures_dir() else { return };
    let files = accepted(&dir);
    let v3_files = files.iter().filter(|(_, v)| *v == 3).count();
    assert!(
        v3_files >= 5,
        "the corpus holds {v3_files} accepted V3 files"
    );
    let mut migrated = 0;
    for (path, version) in files {
        let log = read(&path);
        let to_v3 = MigratorOptions {
            stage: StageOptions {
                snapshot: log.snapshot,
            },
            ..MigratorOptions::default()
        };
        if version < 3
            && Migrator::new(&Catalog::released(), log.header.clone(), to_v3)
                .map_err(|e| e.to_string())
                .and_then(|(mut m, _)| {
                    let mut out = Vec::new();
                    for event in log.events.iter().cloned() {
                        m.push(event, &mut out).map_err(|r| r.to_string())?;
                    }
                    m.finish(&mut out).map(|_| ()).map_err(|r| r.to_string())
                })
                .is_err()
        {
            continue;
        }
        migrated += 1;
        let requests = log
            .events
            .iter()
            .filter(|e| e.kind == sessionlog_format::EventType::RequestHeader)
            .count() as u64;
        let (header, events, summary) = to_v4(log.header, log.events, log.snapshot)
            .unwrap_or_else(|r| panic!("{} (v{version}): {r}", path.display()));
        assert_eq!(header.version, Some(4));
        assert!(!events.is_empty());
        assert_eq!(
            summary.requests_proved,
            Some(requests),
            "{}",
            path.display()
        );
    }
    assert!(migrated > v3_files, "only {migrated} corpus files reach V4");
}

// Goal: the migrated text-turn V3 recording equals dsh's V4 re-recording of the scenario, up
// to the writer changes dsh-v4.md 8.1 lists (the runtime-context text and sections, and the
// delivery marker's sessionFormatVersion).
// Method: migrate the V3 file of the saved pair; compare event by event as JSON rows with
// those members blanked on both sides.
#[test]
fn text_turn_pair_matches_after_the_edge() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/dsh-v4/narutoZed__deepseek-harness/snapshots/sdk/text-turn");
    if !dir.is_dir() {
        eprintln!("skipping: {} is missing", dir.display());
        return;
    }
    let v3 = read(&dir.join("session.v3.jsonl"));
    let v4 = read(&dir.join("session.v4.jsonl"));
    let (header, migrated, summary) = to_v4(v3.header, v3.events, true).unwrap();
    assert_eq!(summary.requests_proved, Some(1));
    assert_eq!(
        serde_json::to_value(&header).unwrap(),
        serde_json::to_value(&v4.header).unwrap()
    );
    assert_eq!(migrated.len(), v4.events.len());
    let blank = |event: &Event| {
        let mut row = Vec::new();
        sessionlog_format::row::encode_row(event, FormatVersion::V4, &mut row);
        let mut row: Value = serde_json::from_slice(&row).unwrap();
        if row["data"]["source"]["kind"] == "runtime-context" {
            row["data"]["content"] = Value::Null;
            row["data"]["source"]["sections"] = Value::Null;
        }
        if row["type"] == "session-log-deepseek/delivery-accepted" {
            row["data"]["sessionFormatVersion"] = Value::Null;
        }
        row
    };
    for (ours, theirs) in migrated.iter().zip(&v4.events) {
        assert_eq!(blank(ours), blank(theirs), "seq {}", ours.seq);
    }
}

// Goal: generated V3 logs (every event type the fold meets) migrate to V4 with the proof.
#[test]
fn generated_v3_logs_migrate_to_v4() {
    for seed in 0..6 {
        let options = GenOptions { events: 400, seed };
        let mut source = Generator::for_version(options, FormatVersion::V3).unwrap();
        let header = source.header();
        let mut events = Vec::new();
        while let Some(batch) = source.next_batch() {
            events.extend(batch);
        }
        let (_, out, summary) =
            to_v4(header, events, false).unwrap_or_else(|r| panic!("seed {seed}: {r}"));
        assert!(summary.requests_proved.unwrap() > 0, "seed {seed}");
        assert!(out
            .iter()
            .all(|e| e.message().is_none_or(|m| m.source_kind() != "plugin")));
    }
}

const V3_HEADER: &str =
    r#"{"type":"session","version":3,"id":"s","createdAt":1,"isSeeded":false,"delegationDepth":0}"#;

/// Runs V3 rows (seq and time filled in) through the edge alone, unproved.
fn edge(header: &str, rows: &[Value], children: Vec<ChildFact>) -> Result<Vec<Event>, String> {
    let mut text = header.to_owned();
    for (seq, row) in rows.iter().enumerate() {
        let mut row = row.clone();
        row["seq"] = json!(seq);
        row["time"] = json!(seq);
        text.push('\n');
        text.push_str(&row.to_string());
    }
    text.push('\n');
    let log =
        read_log(text.as_bytes(), ReadOptions::default()).map_err(|e| format!("read: {e}"))?;
    let mut stage = V3ToV4::with_children(StageOptions::default(), children);
    stage.header(log.header).map_err(|r| r.to_string())?;
    let mut out = Vec::new();
    for event in log.events {
        stage.push(event, &mut out).map_err(|r| r.to_string())?;
    }
    stage.finish(&mut out).map_err(|r| r.to_string())?;
    Ok(out)
}

fn tool_result(content: Value) -> Value {
    json!({"type": "tool/result", "data": {"turn": 1, "step": 1, "message": {"role": "user",
        "content": content, "source": {"kind": "tool", "callId": "c"}, "id": "r"}},
        "surfaceOp": "append"})
}

fn wrapper() -> Value {
    json!([{"type": "tool-result", "toolCallId": "c", "content": [{"type": "text", "text": "ok"}]}])
}

// Goal: each refusal of the edge (dsh-v4.md 5.2 to 5.6) with dsh's text, each beside the
// accepted form it departs from.
#[test]
fn edge_refusals_use_dsh_texts() {
    let ignorable = json!({"type": "x/y", "data": {"a": 1}, "ignorable": true});
    let out = edge(V3_HEADER, std::slice::from_ref(&ignorable), vec![]).unwrap();
    assert_eq!(out[0].kind.as_str(), "plugin:x/y");
    assert!(out[0].ignorable);
    // The V3 reader refuses these first; the edge refuses them on its own too.
    let unknown = Event::other(0, 0, sessionlog_format::EventType::parse("x/y"), json!({}));
    assert_eq!(
        edge_events(vec![unknown]),
        Err("format v3 contains unknown event type \"x/y\" at seq 0".to_owned())
    );
    let no_kind = json!({"role": "user", "content": [], "source": {"kind": ""}, "id": "u"});
    let no_kind = sessionlog_format::EventData::from_value(
        &sessionlog_format::EventType::UserMessage,
        no_kind,
    )
    .unwrap();
    let no_kind = Event::new(0, 0, no_kind).with_surface_op(sessionlog_format::SurfaceOp::Append);
    assert_eq!(
        edge_events(vec![no_kind]),
        Err("message source at seq 0 requires a nonempty kind".to_owned())
    );
    let foreign = json!({"sessionId": "other", "sessionFormatVersion": 3, "throughSeq": 0});
    let events = vec![
        Event::other(
            0,
            0,
            sessionlog_format::EventType::parse("todo/write"),
            json!({}),
        ),
        Event::other(
            1,
            0,
            sessionlog_format::EventType::DeliveryAccepted,
            foreign,
        ),
    ];
    assert_eq!(
        edge_events(events),
        Err("current-generation delivery marker names the wrong Session".to_owned())
    );
    let gap = Event::other(
        1,
        0,
        sessionlog_format::EventType::parse("todo/write"),
        json!({}),
    );
    assert_eq!(
        edge_events(vec![gap]),
        Err("V3 source events must be dense".to_owned())
    );
    let delivery = |version: u64, through: u64| {
        json!({"type": "session-log-deepseek/delivery-accepted",
        "data": {"sessionId": "s", "sessionFormatVersion": version, "throughSeq": through}})
    };
    let ok = [
        json!({"type": "turn/start", "data": {"turn": 1}}),
        delivery(3, 0),
    ];
    assert!(edge(V3_HEADER, &ok, vec![]).is_ok());
    let cases: Vec<(Vec<Value>, &str)> = vec![
        (vec![json!({"type": "turn/start", "data": {"turn": 1}}), delivery(4, 0)],
            "format v3 delivery marker claims target format v4"),
        (vec![json!({"type": "turn/start", "data": {"turn": 1}}), delivery(3, 1)],
            "delivery throughSeq must precede its marker"),
        (vec![json!({"type": "session/end-seed", "data": {"inherited": true}})],
            "unseeded format v3 Session contains an inherited end-seed marker"),
        (vec![json!({"type": "subagent/catalog", "data": {"version": 0, "childId": "c", "mode": "unknown", "childCreatedAt": 1}})],
            "subagent/catalog requires a supported versioned catalog fact"),
        (vec![json!({"type": "subagent/catalog", "data": {"version": 1, "childId": "c", "mode": "one-shot", "childCreatedAt": 1}}),
            json!({"type": "subagent/catalog", "data": {"version": 1, "childId": "c", "mode": "one-shot", "childCreatedAt": 1}})],
            "duplicate catalog child c"),
        (vec![json!({"type": "turn/start", "data": {"turn": 1}}),
            json!({"type": "request/header", "data": {"header": {"config": {"provider": "p", "model": "m"},
            "tools": [{"name": "t", "deferLoading": true}]}, "reason": "initial"}})],
            "format v3 request/header at seq 1.header.tools[0] contains deferLoading, which is only defined in V4"),
    ];
    for (rows, text) in cases {
        let got = edge(V3_HEADER, &rows, vec![]);
        assert_eq!(got, Err(text.to_owned()));
    }
}

/// Runs events through the edge alone, bypassing the V3 reader.
fn edge_events(events: Vec<Event>) -> Result<Vec<Event>, String> {
    let mut stage = V3ToV4::new(StageOptions::default());
    stage
        .header(serde_json::from_str(V3_HEADER).unwrap())
        .map_err(|r| r.to_string())?;
    let mut out = Vec::new();
    for event in events {
        stage.push(event, &mut out).map_err(|r| r.to_string())?;
    }
    stage.finish(&mut out).map_err(|r| r.to_string())?;
    Ok(out)
}

// Goal: the tool-result lift and its refusals (dsh-v4.md 5.3), run on the edge's rewrite alone
// so that no V3 rule stands in front of it.
#[test]
fn tool_result_lift() {
    let rows = [
        json!({"type": "turn/start", "data": {"turn": 1}}),
        json!({"type": "step/start", "data": {"turn": 1, "step": 1}}),
        json!({"type": "assistant/message", "data": {"turn": 1, "step": 1, "message": {"role": "assistant",
            "content": [{"type": "tool-call", "id": "c", "name": "t", "arguments": "{}"}],
            "source": {"kind": "model", "provider": "p", "model": "m"}, "id": "a"}, "stream": []},
            "surfaceOp": "append"}),
        json!({"type": "tool/call", "data": {"turn": 1, "step": 1, "callId": "c", "name": "t", "arguments": "{}"}}),
        tool_result(wrapper()),
    ];
    let out = edge(V3_HEADER, &rows, vec![]).unwrap();
    let message = out[4].message().unwrap();
    assert_eq!(message.role.as_deref(), Some("tool"));
    assert_eq!(message.extra.get("toolCallId"), Some(&json!("c")));
    assert_eq!(
        message.content,
        vec![sessionlog_format::ContentBlock::text("ok")]
    );
}

// Goal: the evidenced restart inserts an interrupted `turn/end` and renumbers what follows,
// remapping references; catalog completion appends a fact for a missing child.
#[test]
fn restart_insertion_and_catalog_completion() {
    let rows = [
        json!({"type": "turn/start", "data": {"turn": 1}}),
        json!({"type": "user/message", "data": {"role": "user", "content": [{"type": "text", "text": "a"}],
            "source": {"kind": "user"}, "id": "u1"}, "surfaceOp": "append"}),
        json!({"type": "agent/inbox/spliced", "data": {"target": "next-turn", "start": 0,
            "inserted": [{"role": "user", "content": [], "source": {"kind": "user"}, "id": "u2"}]}}),
        json!({"type": "turn/start", "data": {"turn": 2}}),
        json!({"type": "session/title", "data": {"title": "t", "messageSeqs": [1], "source": {"kind": "fallback"}}}),
    ];
    // The V3 reader refuses the unclosed turn itself; the edge sees the rows it would get from
    // a released V3 writer's interrupted resume, so feed them to the stage directly.
    let header: SessionHeader = serde_json::from_str(V3_HEADER).unwrap();
    let mut stage = V3ToV4::with_children(
        StageOptions::default(),
        vec![ChildFact {
            child_id: "k".into(),
            child_created_at: 5,
            descriptor_count: 1,
            descriptor: json!({"version": 3, "provider": "fork", "mode": "one-shot"}),
            source_path: None,
        }],
    );
    stage.header(header).unwrap();
    let mut out = Vec::new();
    for (seq, row) in rows.iter().enumerate() {
        let kind = sessionlog_format::EventType::parse(row["type"].as_str().unwrap());
        let data = sessionlog_format::EventData::from_value(&kind, row["data"].clone()).unwrap();
        let mut event = match data {
            sessionlog_format::EventData::Other(v) => Event::other(seq as u64, seq as i64, kind, v),
            typed => Event::new(seq as u64, seq as i64, typed),
        };
        if row.get("surfaceOp").is_some() {
            event.surface_op = Some(sessionlog_format::SurfaceOp::Append);
        }
        stage.push(event, &mut out).unwrap();
    }
    stage.finish(&mut out).unwrap();
    let kinds: Vec<&str> = out.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "turn/start",
            "user/message",
            "agent/inbox/spliced",
            "turn/end",
            "turn/start",
            "session/title",
            "subagent/catalog"
        ]
    );
    assert_eq!(
        out.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4, 5, 6]
    );
    assert_eq!(
        out[3].data.to_value()["reason"],
        json!({"kind": "interrupted"})
    );
    assert_eq!(out[5].data.to_value()["messageSeqs"], json!([1]));
    assert_eq!(
        out[6].data.to_value(),
        json!({"version": 0, "childId": "k", "childCreatedAt": 5, "mode": "one-shot"})
    );
}

// Goal: `event_as_v4`, the rewrite a live writer applies to each event it appends to a V4
// session, is the edge's own per-event rewrite: on generated V3 logs (no inserted closer, no
// catalog) it yields exactly the events the migration writes, and the edge's texts for the
// faults it finds.
// Method: migrate generated logs of several seeds through the chain with the proof, map the
// same events one by one, compare; then a tool result with two wrappers is refused with the
// lift's text naming its seq.
#[test]
fn event_as_v4_is_the_edge_per_event() {
    for seed in [1, 2, 3] {
        let mut generator =
            Generator::for_version(GenOptions { events: 400, seed }, FormatVersion::V3).unwrap();
        let header = generator.header();
        let mut events = Vec::new();
        while let Some(batch) = generator.next_batch() {
            events.extend(batch);
        }
        let (_, migrated, _) = to_v4(header, events.clone(), false).unwrap();
        let mapped: Vec<Event> = events
            .into_iter()
            .map(|e| sessionlog_migrations::event_as_v4(e).unwrap())
            .collect();
        assert_eq!(mapped, migrated, "seed {seed}");
    }
    let row = json!({"type":"tool/result","seq":7,"time":1,"data":{"turn":1,"step":1,
        "message":{"id":"m","role":"user","source":{"kind":"tool","callId":"c"},
        "content":[{"type":"tool-result","toolCallId":"c","content":[]},
                   {"type":"tool-result","toolCallId":"c","content":[]}]}},
        "surfaceOp":"append"});
    let ctx = sessionlog_format::row::RowContext {
        version: FormatVersion::V3,
        snapshot: false,
        skim: false,
    };
    let text = row.to_string();
    let Ok(sessionlog_format::row::Decoded::One(event)) =
        sessionlog_format::row::decode_row(text.as_bytes(), ctx, 7)
    else {
        panic!("the row decodes");
    };
    let event = *event;
    let refusal = sessionlog_migrations::event_as_v4(event).unwrap_err();
    assert_eq!(refusal.seq, Some(7));
    assert!(
        refusal.to_string().contains(
            "format v3 tool/result at seq 7 requires exactly one tool-result wrapper matching its tool source"
        ),
        "{refusal}"
    );
}

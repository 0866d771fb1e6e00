//! The source audit (spec 10.6), fed with events the V2 reader may itself refuse.

use pretty_assertions::assert_eq;
use serde_json::json;
use sessionlog_format::{Event, EventType, SessionHeader};
use sessionlog_migrations::{Reason, Stage, StageOptions, V2ToV3};

use crate::support::*;

/// Runs the stage alone over `events`; returns the first refusal's seq and text.
fn refuse(events: Vec<Event>) -> (Option<u64>, String) {
    let header: SessionHeader = serde_json::from_str(HEADER).expect("header");
    let mut stage = V2ToV3::new(StageOptions { snapshot: true });
    stage.header(header).expect("a released v2 header");
    let mut out = Vec::new();
    for event in events {
        if let Err(refusal) = stage.push(event, &mut out) {
            return (refusal.seq, refusal.to_string());
        }
    }
    match stage.finish(&mut out) {
        Ok(finish) => panic!("expected a refusal, finished with cut {}", finish.cut),
        Err(refusal) => (refusal.seq, refusal.to_string()),
    }
}

/// A V2 prefix (turn, step) read by the reader, then `tail` appended by hand.
fn with_tail(tail: Vec<Event>) -> Vec<Event> {
    let (_, mut events) = read_v2(HEADER, &[TURN_START.to_owned(), step_start(1)]);
    for (idx, mut event) in tail.into_iter().enumerate() {
        event.seq = 2 + idx as u64;
        events.push(event);
    }
    events
}

// Goal: unclassified types are refused even when ignorable, V3-only types included.
// Method: an ignorable unknown, image/offload, deliverables/presented, a V3 PTC tag.
#[test]
fn unclassified_events_refuse() {
    for (name, ignorable) in [
        ("x/unknown", true),
        ("image/offload", false),
        ("deliverables/presented", false),
        ("tool/ptc-dispatch", true),
        ("subagent/catalog", false),
    ] {
        let mut event = Event::other(0, 0, EventType::parse(name), json!({}));
        event.ignorable = ignorable;
        let (seq, text) = refuse(with_tail(vec![event]));
        assert_eq!(seq, Some(2));
        assert_eq!(
            text,
            format!("format v2 to v3 cannot safely transform unclassified event {name}")
        );
    }
}

fn user_event(data: serde_json::Value) -> Event {
    let message = serde_json::from_value(data).expect("a message");
    let event = Event::new(
        0,
        0,
        sessionlog_format::EventData::UserMessage(Box::new(message)),
    );
    event.with_surface_op(sessionlog_format::SurfaceOp::Append)
}

// Goal: envelope and surfaceOp audits: metadata on a log-only event, a surface event
// without surfaceOp, a seq gap.
// Method: hand-built events after a valid prefix.
#[test]
fn envelope_audit() {
    let mut title = Event::other(0, 0, EventType::TodoWrite, json!({"todos": []}));
    title.source_event_seqs = Some(vec![0]);
    assert_eq!(
        refuse(with_tail(vec![title])).1,
        "format v2 todo/write has unexpected field sourceEventSeqs"
    );
    let mut bare =
        user_event(json!({"id":"u","role":"user","source":{"kind":"user"},"content":[]}));
    bare.surface_op = None;
    assert_eq!(
        refuse(with_tail(vec![bare])).1,
        "format v2 user/message requires surfaceOp"
    );
    let mut gap = with_tail(vec![Event::other(
        0,
        0,
        EventType::TodoWrite,
        json!({"todos": []}),
    )]);
    gap[2].seq = 5;
    assert_eq!(
        refuse(gap),
        (Some(5), "format v2 source events must be dense".to_owned())
    );
}

// Goal: message audits: source kinds, content kinds (recursively), exact file blocks.
// Method: one refused message per rule, and an accepted relay source.
#[test]
fn message_audit() {
    let message = |source: serde_json::Value, content: serde_json::Value| {
        user_event(json!({"id":"u","role":"user","source":source,"content":content}))
    };
    let (_, text) = refuse(with_tail(vec![message(json!({"kind":"robot"}), json!([]))]));
    assert_eq!(
        text,
        "format v2 to v3 cannot safely transform unclassified message source robot"
    );
    let relay = json!({"kind":"agent-message","form":"relay","senderSessionId":"s9","x":1});
    let (_, text) = refuse(with_tail(vec![message(relay, json!([]))]));
    assert_eq!(
        text,
        "format v2 to v3 cannot safely transform unclassified message source agent-message"
    );
    let nested = json!([{"type":"tool-result","toolCallId":"c","content":[{"type":"video"}]}]);
    let (_, text) = refuse(with_tail(vec![message(json!({"kind":"user"}), nested)]));
    assert_eq!(
        text,
        "format v2 to v3 cannot safely transform unclassified message content video"
    );
    let file =
        json!([{"type":"file","attachment":{"attachmentId":"a","name":"n","bytes":1,"mime":"x"}}]);
    let (_, text) = refuse(with_tail(vec![message(json!({"kind":"user"}), file)]));
    assert_eq!(
        text,
        "format v2 to v3 cannot safely transform unclassified message content file"
    );

    let relay = json!({"kind":"agent-message","form":"relay","senderSessionId":"s9"});
    let file = json!([{"type":"file","attachment":{"attachmentId":"a","name":"n","bytes":1}}]);
    let accepted = with_tail(vec![message(relay, file)]);
    let (header, _) = read_v2(HEADER, &[]);
    let migrated = migrate_events(header, accepted).expect("audited kinds pass");
    assert_eq!(migrated.events.len(), 4);
}

// Goal: payload audits: assistant turn/step positive and stream present, end-seed inherited.
// Method: rows the V2 reader accepts but the edge refuses.
#[test]
fn payload_audit() {
    let zero_step = r#"{"type":"assistant/attempt","data":{"turn":1,"step":0,"stream":[]}}"#;
    let refusal = migrate_decoded(
        HEADER,
        &[TURN_START.to_owned(), step_start(1), zero_step.to_owned()],
    )
    .expect_err("step 0");
    assert_eq!(
        refusal.to_string(),
        "format v2 assistant/attempt payload turn and step must be positive"
    );
    let not_inherited = r#"{"type":"session/end-seed","data":{"inherited":false}}"#;
    let refusal = migrate(HEADER, &[not_inherited.to_owned()]).expect_err("inherited false");
    assert_eq!(
        refusal.reason,
        Reason::Payload {
            kind: "session/end-seed".to_owned(),
            detail: "inherited must be true when present".to_owned(),
        }
    );
}

// Goal: spec 10.6 item 4: payload members are exactly the disposition's required and
// optional ones, for plugin payloads (JSON), core payloads (typed) and surface messages.
// Method: one event per way of breaking the member list, each after a valid prefix.
#[test]
fn payload_members_audit() {
    use sessionlog_format::EventData;
    fn from<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Box<T> {
        Box::new(serde_json::from_value(value).expect("a typed payload"))
    }
    let typed = |data: fn(serde_json::Value) -> EventData, value| Event::new(0, 0, data(value));
    let plugin = |kind: EventType, data: serde_json::Value| Event::other(0, 0, kind, data);
    let cases = [
        (
            plugin(EventType::TodoWrite, json!({"todos": [], "owner": "x"})),
            "format v2 todo/write payload has unexpected member owner",
        ),
        (
            plugin(
                EventType::SessionTitle,
                json!({"title": "t", "source": "llm"}),
            ),
            "format v2 session/title payload requires member messageSeqs",
        ),
        (
            plugin(
                EventType::FeedbackRecord,
                json!({"text": "t", "category": "bug", "x": 1}),
            ),
            "format v2 feedback/record payload has unexpected member x",
        ),
        (
            typed(
                |v| EventData::RequestContext(from(v)),
                json!({"provider": "p", "model": "m", "systemPromptUpdate": "in-history"}),
            ),
            "format v2 request/context payload has unexpected member systemPromptUpdate",
        ),
        (
            typed(
                |v| EventData::StepEnd(from(v)),
                json!({"turn": 1, "step": 1, "ok": true}),
            ),
            "format v2 step/end payload has unexpected member ok",
        ),
        (
            user_event(json!({"id": "u", "role": "user", "content": [],
                "source": {"kind": "user"}, "pinned": true})),
            "format v2 user/message payload message has unexpected member pinned",
        ),
        (
            user_event(json!({"role": "user", "content": [], "source": {"kind": "user"}})),
            "format v2 user/message payload message requires member id",
        ),
    ];
    for (event, expected) in cases {
        assert_eq!(refuse(with_tail(vec![event])).1, expected);
    }
    let category = plugin(
        EventType::FeedbackRecord,
        json!({"text": "t", "category": "bug"}),
    );
    let header: SessionHeader = serde_json::from_str(HEADER).expect("header");
    let mut stage = V2ToV3::new(StageOptions { snapshot: true });
    stage.header(header).expect("a released v2 header");
    let mut out = Vec::new();
    for event in with_tail(vec![category]) {
        let seq = event.seq;
        let pushed = stage.push(event, &mut out);
        assert!(pushed.is_ok(), "seq {seq} refused: {pushed:?}");
    }
}

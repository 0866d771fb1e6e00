//! Tests of the session fold: equality with a naive reference over generated sessions, the
//! `image/offload` projection, atomic batches, and checkpoints.

use std::collections::HashMap;
use std::sync::Arc;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use super::*;
use crate::error::Rule;
use crate::event::{EventType, SurfaceOp};
use crate::gen::{GenOptions, Generator};
use crate::json::Extra;
use crate::message::ToolCallBlock;
use crate::message::{AttachmentBlock, ContentBlock, Source, ToolResultBlock};
use crate::payload::{
    AssistantMessageData, ImageOffloadData, OffloadTarget, StepRef, ToolCallData, ToolResultData,
    TurnStart,
};
use crate::version::FormatVersion;

const V3: RuleContext = RuleContext {
    version: FormatVersion::V3,
    snapshot: false,
};

fn generated(events: u64, seed: u64) -> Vec<Vec<Arc<Event>>> {
    let mut generator = Generator::new(GenOptions { events, seed });
    let batches = std::iter::from_fn(|| generator.next_batch());
    batches
        .map(|batch| batch.into_iter().map(Arc::new).collect())
        .collect()
}

/// Everything a fold derives, in plain values, for whole-value comparison.
#[derive(Debug, PartialEq)]
struct Derived {
    seqs: Vec<u64>,
    messages: Vec<Message>,
    replace_generation: u64,
    content_generation: u64,
    header: Option<Value>,
    context: Option<Value>,
}

fn derived(fold: &SessionFold) -> Derived {
    let to_value = |v| serde_json::to_value(v).unwrap();
    Derived {
        seqs: fold.admission().surface().seqs(),
        messages: fold.messages().into_iter().cloned().collect(),
        replace_generation: fold.replace_generation(),
        content_generation: fold.content_generation(),
        header: fold.request_header().map(to_value),
        context: fold
            .request_context()
            .map(|c| serde_json::to_value(c).unwrap()),
    }
}

/// The naive reference: replays the whole log with the plain rules of spec 7.2, 7.3, 6.4
/// and 8.2, written independently of the fold (linear scans, JSON values, no caches). It
/// trusts the log to be valid; the fold under test is the one that checks.
fn naive_fold(events: &[Arc<Event>]) -> Derived {
    let mut seqs: Vec<u64> = Vec::new();
    let (mut replace_generation, mut content_generation) = (0, 0);
    let mut projected: HashMap<u64, Message> = HashMap::new();
    let (mut header, mut context) = (None, None);
    for event in events {
        if let Some(SurfaceOp::Replace { start_seq, end_seq }) = event.surface_op {
            let start = seqs.iter().position(|&s| s == start_seq).unwrap();
            let end = seqs.iter().position(|&s| s == end_seq).unwrap();
            seqs.splice(start..=end, [event.seq]);
            replace_generation += 1;
            content_generation += 1;
        } else if event.surface_op.is_some() {
            seqs.push(event.seq);
        }
        match &event.data {
            EventData::ImageOffload(data) => {
                for target in &data.targets {
                    let base = match projected.get(&target.seq) {
                        Some(message) => message.clone(),
                        None => naive_message(&events[target.seq as usize]).unwrap().clone(),
                    };
                    projected.insert(target.seq, naive_offload(base, &target.image_indexes));
                }
                content_generation += 1;
            }
            EventData::RequestHeader(data) => {
                header = Some(naive_canonical(serde_json::to_value(&data.header).unwrap()));
            }
            EventData::RequestContext(data) => context = Some(serde_json::to_value(data).unwrap()),
            _ => {}
        }
    }
    let message_of = |seq: &u64| match projected.get(seq) {
        Some(message) => Some(message.clone()),
        None => naive_message(&events[*seq as usize]).cloned(),
    };
    Derived {
        messages: seqs.iter().filter_map(message_of).collect(),
        seqs,
        replace_generation,
        content_generation,
        header,
        context,
    }
}

fn naive_message(event: &Event) -> Option<&Message> {
    let message = event.message()?;
    let may_be_null = matches!(event.kind.as_str(), "system/message" | "assistant/message");
    if may_be_null && message.content.is_empty() {
        return None;
    }
    Some(message)
}

fn naive_offload(message: Message, image_indexes: &[u64]) -> Message {
    fn mark(blocks: &mut Value, image_indexes: &[u64], image_idx: &mut u64) {
        for block in blocks.as_array_mut().unwrap() {
            match block["type"].as_str() {
                Some("image") => {
                    if image_indexes.contains(image_idx) {
                        block["offloaded"] = json!(true);
                    }
                    *image_idx += 1;
                }
                Some("tool-result") => mark(&mut block["content"], image_indexes, image_idx),
                _ => {}
            }
        }
    }
    let mut value = serde_json::to_value(&message).unwrap();
    mark(&mut value["content"], image_indexes, &mut 0);
    serde_json::from_value(value).unwrap()
}

fn naive_canonical(header: Value) -> Value {
    let mut canonical = serde_json::Map::new();
    canonical.insert("config".to_owned(), header["config"].clone());
    let defaults = &header["adapterDefaults"];
    if defaults["reasoningEffort"] == json!(true) || defaults["maxTokens"] == json!(true) {
        canonical.insert("adapterDefaults".to_owned(), defaults.clone());
    }
    for key in ["tools", "system"] {
        let keep = match &header[key] {
            Value::Array(items) => !items.is_empty(),
            Value::String(text) => !text.is_empty(),
            _ => false,
        };
        if keep {
            canonical.insert(key.to_owned(), header[key].clone());
        }
    }
    Value::Object(canonical)
}

/// Whether `event` rewrites something derived: a replace, a projection, a header, a context.
fn rewrites(event: &Event) -> bool {
    let replaces = matches!(event.surface_op, Some(SurfaceOp::Replace { .. }));
    let request = matches!(
        event.kind,
        EventType::RequestHeader | EventType::RequestContext | EventType::ImageOffload
    );
    replaces || request
}

// Goal: the incremental fold derives exactly what a from-scratch replay does, after every
// event of realistic sessions (compactions, head rewrites, prunes, header changes). Method:
// admit 3000 generated events one by one and compare with the naive reference after every
// rewriting event, every 50 events and at the end; then check that folding by batch and
// `fold_from_scratch` give the same fold, and that derived messages are the events' own.
#[test]
fn generated_sessions_match_the_naive_fold() {
    for seed in [1, 2, 3, 5] {
        let events: Vec<Arc<Event>> = generated(3_000, seed).concat();
        let n_replaces = events.iter().filter(|e| rewrites(e)).count();
        assert!(n_replaces > 10, "seed {seed} rewrites too little to test");
        let mut fold = SessionFold::new(V3);
        for (event_idx, event) in events.iter().enumerate() {
            let admitted = fold.admit(Arc::clone(event));
            admitted.unwrap_or_else(|v| panic!("seed {seed}, event {event_idx}: {v}"));
            if rewrites(event) || event_idx % 50 == 0 || event_idx + 1 == events.len() {
                let expected = naive_fold(&events[..=event_idx]);
                assert_eq!(
                    derived(&fold),
                    expected,
                    "seed {seed}, after event {event_idx}"
                );
            }
        }
        let mut batched = SessionFold::new(V3);
        for batch in generated(3_000, seed) {
            batched.admit_batch(&batch).unwrap();
        }
        assert!(batched == fold, "seed {seed}: batches fold differently");
        assert!(
            fold_from_scratch(V3, &events).unwrap() == fold,
            "seed {seed}"
        );
        for (seq, message) in fold.node_messages() {
            let event = fold.live_event(seq).unwrap();
            let own = event.message().filter(|_| message.is_some());
            assert!(message.zip(own).is_none_or(|(m, o)| std::ptr::eq(m, o)));
        }
    }
}

fn image(name: &str) -> ContentBlock {
    ContentBlock::Image(AttachmentBlock {
        attachment: json!({"attachmentId": name, "mediaType": "image/png", "bytes": 1}),
        offloaded: None,
        extra: Extra::new(),
    })
}

fn source(kind: &str) -> Source {
    Source {
        kind: kind.to_owned(),
        plugin: None,
        provider: None,
        model: None,
        call_id: None,
        extra: Extra::new(),
    }
}

fn message(seq: u64, role: &str, content: Vec<ContentBlock>, source: Source) -> Message {
    Message {
        id: Some(format!("message-{seq}")),
        role: Some(role.to_owned()),
        content,
        source: Some(source),
        extra: Extra::new(),
    }
}

fn user(seq: u64, content: Vec<ContentBlock>, op: SurfaceOp) -> Arc<Event> {
    let data = EventData::UserMessage(Box::new(message(seq, "user", content, source("user"))));
    let event = Event::new(seq, 0, data).with_surface_op(op);
    match op {
        SurfaceOp::Append => Arc::new(event),
        SurfaceOp::Replace { start_seq, .. } => Arc::new(event.with_sources(vec![start_seq])),
    }
}

fn tool_result(seq: u64, content: Vec<ContentBlock>) -> Arc<Event> {
    let block = ContentBlock::ToolResult(ToolResultBlock {
        tool_call_id: "call_1".to_owned(),
        content,
        is_error: None,
        extra: Extra::new(),
    });
    let mut tool = source("tool");
    tool.call_id = Some("call_1".to_owned());
    let data = ToolResultData {
        turn: 1,
        step: 1,
        message: message(seq, "user", vec![block], tool),
        error: None,
        meta: None,
        extra: Extra::new(),
    };
    let event = Event::new(seq, 0, EventData::ToolResult(Box::new(data)));
    Arc::new(event.with_surface_op(SurfaceOp::Append))
}

fn assistant(seq: u64, content: Vec<ContentBlock>) -> Arc<Event> {
    let mut model = source("model");
    model.provider = Some("p".to_owned());
    model.model = Some("m".to_owned());
    let data = AssistantMessageData {
        turn: 1,
        step: 1,
        message: message(seq, "assistant", content, model),
        stream: Some(Vec::new()),
        usage: None,
        interrupted: None,
        extra: Extra::new(),
    };
    let event = Event::new(seq, 0, EventData::AssistantMessage(Box::new(data)));
    Arc::new(event.with_surface_op(SurfaceOp::Append))
}

/// An offload target: a node seq and image indexes.
type Target<'a> = (u64, &'a [u64]);

fn offload(seq: u64, targets: &[Target]) -> Arc<Event> {
    let targets = targets.iter().map(|&(seq, indexes)| OffloadTarget {
        seq,
        image_indexes: indexes.to_vec(),
        extra: Extra::new(),
    });
    let data = ImageOffloadData {
        targets: targets.collect(),
        extra: Extra::new(),
    };
    Arc::new(Event::new(seq, 0, EventData::ImageOffload(Box::new(data))))
}

/// The offload marks of every image of the node `seq`, depth first.
fn marks(fold: &SessionFold, seq: u64) -> Vec<bool> {
    fn visit(blocks: &[ContentBlock], marks: &mut Vec<bool>) {
        for block in blocks {
            match block {
                ContentBlock::Image(image) => marks.push(image.offloaded == Some(true)),
                ContentBlock::ToolResult(result) => visit(&result.content, marks),
                _ => {}
            }
        }
    }
    let mut marks = Vec::new();
    visit(&fold.message(seq).unwrap().content, &mut marks);
    marks
}

/// The seq of the tool result in [`images_session`], and the seq after the session.
const T: u64 = 5;
const N: u64 = 6;

/// A user message `[text, image, image]` at seq 0 and, in turn 1, step 1, a tool result
/// `[[image, text, image]]` at seq [`T`] for a call advertised and started before it.
fn images_session() -> (SessionFold, Vec<Arc<Event>>) {
    let mut fold = SessionFold::new(V3);
    let content = vec![ContentBlock::text("look"), image("a"), image("b")];
    let nested = vec![image("c"), ContentBlock::text("between"), image("d")];
    let call = ContentBlock::ToolCall(ToolCallBlock {
        id: "call_1".to_owned(),
        name: "read".to_owned(),
        arguments: "{}".to_owned(),
        extra: Extra::new(),
    });
    let started = ToolCallData {
        turn: 1,
        step: 1,
        call_id: "call_1".to_owned(),
        name: "read".to_owned(),
        arguments: "{}".to_owned(),
        extra: Extra::new(),
    };
    let step = StepRef {
        turn: 1,
        step: 1,
        extra: Extra::new(),
    };
    let turn = TurnStart {
        turn: 1,
        extra: Extra::new(),
    };
    let events = vec![
        user(0, content, SurfaceOp::Append),
        Arc::new(Event::new(1, 0, EventData::TurnStart(Box::new(turn)))),
        Arc::new(Event::new(2, 0, EventData::StepStart(Box::new(step)))),
        assistant(3, vec![call]),
        Arc::new(Event::new(4, 0, EventData::ToolCall(Box::new(started)))),
        tool_result(T, nested),
    ];
    fold.admit_batch(&events).unwrap();
    (fold, events)
}

/// Admits `event`, or checks that it is refused for `rule` with `message` and changes nothing.
fn admit(fold: &mut SessionFold, events: &mut Vec<Arc<Event>>, event: Arc<Event>) {
    fold.admit(Arc::clone(&event)).unwrap();
    events.push(event);
    assert_eq!(derived(fold), naive_fold(events));
}

fn refuse(fold: &mut SessionFold, event: Arc<Event>, rule: Rule, message: &str) {
    let before = fold.clone();
    let violation = fold.admit(event).unwrap_err();
    assert_eq!(
        (violation.rule, violation.message.as_str()),
        (rule, message)
    );
    assert!(*fold == before, "a refused event changed the fold");
}

// Goal: `image/offload` marks the listed images, counting image blocks only, depth first
// through tool results (K's semantics), bumps contentGeneration only, and is dropped with its
// node by a later replace. Method: offload by hand on a user message and a tool result, then
// repeat an offload, replace the node, and target it again; compare with the naive fold.
#[test]
fn image_offload_marks_the_listed_images() {
    let (mut fold, mut events) = images_session();
    admit(&mut fold, &mut events, offload(N, &[(0, &[1]), (T, &[0])]));
    assert_eq!(
        (marks(&fold, 0), marks(&fold, T)),
        (vec![false, true], vec![true, false])
    );
    assert_eq!(
        (fold.replace_generation(), fold.content_generation()),
        (0, 1)
    );
    assert_eq!(
        derive_event_message(&events[0]).map(|m| m.content.len()),
        Some(3)
    );
    assert_eq!(
        marks_of_event(&events[0]),
        vec![false, false],
        "the log is never changed"
    );
    admit(
        &mut fold,
        &mut events,
        offload(N + 1, &[(0, &[0]), (T, &[1])]),
    );
    assert_eq!(
        (marks(&fold, 0), marks(&fold, T)),
        (vec![true, true], vec![true, true])
    );
    assert_eq!(fold.content_generation(), 2);
    let repeated = offload(N + 2, &[(0, &[1])]);
    let already = "image/offload: image index 1 is already offloaded";
    refuse(&mut fold, repeated, Rule::Surface, already);
    let summary = vec![ContentBlock::text("summary")];
    admit(
        &mut fold,
        &mut events,
        user(
            N + 2,
            summary,
            SurfaceOp::Replace {
                start_seq: 0,
                end_seq: 0,
            },
        ),
    );
    assert_eq!(
        (fold.replace_generation(), fold.content_generation()),
        (1, 3)
    );
    let projected: Vec<u64> = fold.checkpoint().projected.iter().map(|p| p.seq).collect();
    assert_eq!(
        projected,
        vec![T],
        "the replace dropped the projection of seq 0"
    );
    let stale = "image/offload: target seq 0 is not a current surface node";
    refuse(
        &mut fold,
        offload(N + 3, &[(0, &[0])]),
        Rule::Surface,
        stale,
    );
}

fn marks_of_event(event: &Event) -> Vec<bool> {
    let content = &event.message().unwrap().content;
    let images = content.iter().filter_map(|b| match b {
        ContentBlock::Image(image) => Some(image.offloaded == Some(true)),
        _ => None,
    });
    images.collect()
}

// Goal: malformed or impossible offloads are refused whole, as K refuses them. Method: one
// refused event per case on the same session, each checked to leave the fold unchanged.
#[test]
fn malformed_offloads_are_refused() {
    let (mut fold, mut events) = images_session();
    admit(&mut fold, &mut events, assistant(N, vec![image("e")]));
    let payload = Rule::Payload;
    let surface = Rule::Surface;
    let cases: [(&[Target], Rule, &str); 7] = [
        (&[], payload, "data must contain a nonempty targets array"),
        (
            &[(0, &[])],
            payload,
            "each target must contain a seq and nonempty imageIndexes",
        ),
        (
            &[(0, &[1, 0])],
            payload,
            "imageIndexes must be strictly increasing",
        ),
        (
            &[(0, &[0, 0])],
            payload,
            "imageIndexes must be strictly increasing",
        ),
        (&[(0, &[0]), (0, &[1])], payload, "duplicate target seq 0"),
        (&[(0, &[2])], surface, "image index 2 does not exist"),
        (
            &[(N, &[0])],
            surface,
            "target seq 6 must be user/message or tool/result",
        ),
    ];
    for (targets, rule, message) in cases {
        let text = format!("image/offload: {message}");
        refuse(&mut fold, offload(N + 1, targets), rule, &text);
    }
    let mut unknown = Event::clone(&offload(N + 1, &[(0, &[0])]));
    let EventData::ImageOffload(data) = &mut unknown.data else {
        unreachable!("built as an offload")
    };
    data.targets[0]
        .extra
        .insert("extra".to_owned(), json!(true));
    let text = "image/offload: each target must contain a seq and nonempty imageIndexes";
    refuse(&mut fold, Arc::new(unknown), payload, text);
}

// Goal: a fold without the projection refuses `image/offload` with K's text, rule
// `projection`, rather than skipping it (spec 20 pitfall 10). Method: an empty registry.
#[test]
fn empty_registry_refuses_image_offload() {
    let mut fold = SessionFold::with_projections(V3, Projections::empty());
    fold.admit(user(0, vec![image("a")], SurfaceOp::Append))
        .unwrap();
    let text = "session event \"image/offload\" requires a message projection; load its owning \
                plugin or supply its projection definition";
    refuse(&mut fold, offload(1, &[(0, &[0])]), Rule::Projection, text);
}

/// Checks that `after` is exactly `before`: equal, and holding the very same event `Arc`s.
fn assert_unchanged(before: &SessionFold, after: &SessionFold) {
    assert!(after == before, "the fold changed");
    assert_eq!(after.checkpoint(), before.checkpoint());
    assert_eq!(after.messages(), before.messages());
    for (seq, event) in &before.live {
        assert!(
            Arc::ptr_eq(event, &after.live[seq]),
            "seq {seq} holds another event"
        );
    }
}

// Goal: a refused batch leaves the fold exactly as before, whatever the batch did first
// (replaces, projections, headers). Method: batches that end with a refused event: generated
// batches from a replace to the next header change, and a hand-made batch with offloads and a
// replace.
#[test]
fn refused_batch_leaves_the_fold_unchanged() {
    let batches = generated(3_000, 7);
    let replaces = |b: &Vec<Arc<Event>>| b.iter().any(|e| rewrites(e) && e.surface_op.is_some());
    let first_idx = (5..batches.len()).find(|&i| replaces(&batches[i])).unwrap();
    let is_header = |e: &Arc<Event>| match &e.data {
        EventData::RequestHeader(data) => data.reason == "change",
        _ => false,
    };
    let last_idx = (first_idx..batches.len())
        .find(|&i| batches[i].iter().any(is_header))
        .unwrap();
    let mut fold = SessionFold::new(V3);
    for batch in &batches[..first_idx] {
        fold.admit_batch(batch).unwrap();
    }
    let mut batch = batches[first_idx..=last_idx].concat();
    let next_seq = batch.last().unwrap().seq + 1;
    batch.push(offload(next_seq, &[(u64::MAX >> 12, &[0])]));
    let before = fold.clone();
    let (refused_idx, violation) = fold.admit_batch(&batch).unwrap_err();
    assert_eq!(
        (refused_idx, violation.rule),
        (batch.len() - 1, Rule::Surface)
    );
    assert_unchanged(&before, &fold);
    fold.admit_batch(&batch[..batch.len() - 1]).unwrap();
    assert!(fold.request_header() != before.request_header());

    let (mut fold, _) = images_session();
    let before = fold.clone();
    let batch = [
        offload(N, &[(0, &[0])]),
        user(N + 1, vec![image("f")], SurfaceOp::Append),
        user(
            N + 2,
            Vec::new(),
            SurfaceOp::Replace {
                start_seq: 0,
                end_seq: 0,
            },
        ),
        offload(N + 3, &[(N + 1, &[0]), (T, &[1])]),
        offload(N + 4, &[(T, &[1])]),
    ];
    let (refused_idx, violation) = fold.admit_batch(&batch).unwrap_err();
    assert_eq!((refused_idx, violation.rule), (4, Rule::Surface));
    assert_unchanged(&before, &fold);
}

// Goal: a checkpoint resumes the fold exactly, through JSON. Method: checkpoint generated
// sessions at several cuts, serialize with serde_json, resume with the live events, fold the
// rest, and compare with the uninterrupted fold; likewise after image offloads.
#[test]
fn checkpoint_resume_matches_uninterrupted_fold() {
    for seed in [4, 9] {
        let events: Vec<Arc<Event>> = generated(3_000, seed).concat();
        let whole = fold_from_scratch(V3, &events).unwrap();
        for cut in [0, 1, 777, 1_500, 2_999, 3_000] {
            let head = fold_from_scratch(V3, &events[..cut]).unwrap();
            let mut resumed = round_trip(&head, &events);
            for event in &events[cut..] {
                resumed.admit(Arc::clone(event)).unwrap();
            }
            assert!(resumed == whole, "seed {seed}, cut {cut}");
            assert_eq!(derived(&resumed), derived(&whole));
        }
    }
    let (mut fold, mut events) = images_session();
    admit(&mut fold, &mut events, offload(N, &[(0, &[1]), (T, &[0])]));
    let mut resumed = round_trip(&fold, &events);
    let next = offload(N + 1, &[(0, &[0])]);
    resumed.admit(Arc::clone(&next)).unwrap();
    admit(&mut fold, &mut events, next);
    assert!(resumed == fold);
}

/// Checkpoints `fold`, through JSON text, and resumes it with events taken from `events`.
fn round_trip(fold: &SessionFold, events: &[Arc<Event>]) -> SessionFold {
    let text = serde_json::to_string(&fold.checkpoint()).unwrap();
    let checkpoint: FoldCheckpoint = serde_json::from_str(&text).unwrap();
    assert_eq!(checkpoint, fold.checkpoint());
    // The live events are asked for once each, in ascending seq order, whatever the surface
    // order (a reader of blocks then decodes each block once).
    let mut asked = Vec::new();
    let live_events = |seq: u64| {
        asked.push(seq);
        events.get(seq as usize).cloned()
    };
    let resumed = SessionFold::resume(V3, checkpoint, live_events).unwrap();
    assert!(resumed == *fold);
    let mut ascending: Vec<u64> = fold.checkpoint().nodes.iter().map(|n| n.seq).collect();
    ascending.sort_unstable();
    assert_eq!(asked, ascending);
    resumed
}

// Goal: a fold whose fact journal is hashed as it goes (`verify`'s fresh fold) names its
// journal by reference exactly as a fold that keeps the bytes, however often it hashes, and
// a batch it refuses after a hash leaves it unchanged (the undo truncates only what follows
// the hashed bytes). Method: a generated session with retries, titles and commands, folded
// whole and hashed every 1, 7 and 100 events, compared at every event; then a batch that
// ends in a refused offload, admitted after a hash.
#[test]
fn a_hashed_fact_journal_is_named_as_the_kept_bytes_name_it() {
    let events: Vec<Arc<Event>> = generated(3_000, 5).concat();
    let (head, rest) = events.split_at(2_000);
    let mut whole = SessionFold::new(V3);
    let mut hashed: Vec<(usize, SessionFold)> = [1, 7, 100]
        .map(|every| (every, SessionFold::new(V3)))
        .into();
    for (i, event) in head.iter().enumerate() {
        whole.admit(Arc::clone(event)).unwrap();
        let reference = crate::relations::FactJournal::stored(whole.fact_journal());
        for (every, fold) in &mut hashed {
            fold.admit(Arc::clone(event)).unwrap();
            if i % *every == 0 {
                fold.hash_fact_journal();
                assert_eq!(fold.unhashed_fact_journal_len(), 0);
            }
            assert_eq!(fold.fact_journal_reference(), reference, "event {i}");
            if i % 50 == 0 {
                let facts = fold.fact_journal_reference();
                assert_eq!(
                    fold.checkpoint_with(facts),
                    whole.checkpoint_with(reference.clone())
                );
            }
        }
    }
    let len = whole.fact_journal().len();
    assert!(len > 500, "a journal worth hashing: {len} bytes");
    let (_, mut fold) = hashed.pop().unwrap();
    fold.hash_fact_journal();
    assert!(fold == whole);

    let next_seq = rest[100].seq;
    let mut batch = rest[..100].to_vec();
    batch.push(offload(next_seq, &[(u64::MAX >> 12, &[0])]));
    let before = fold.clone();
    let (refused_idx, violation) = fold.admit_batch(&batch).unwrap_err();
    assert_eq!((refused_idx, violation.rule), (100, Rule::Surface));
    assert!(fold == before, "the fold changed");
    assert_eq!(
        fold.fact_journal_reference(),
        before.fact_journal_reference()
    );
    fold.admit_batch(&batch[..100]).unwrap();
    for event in &rest[..100] {
        whole.admit(Arc::clone(event)).unwrap();
    }
    assert!(fold.unhashed_fact_journal_len() > 0, "facts since the hash");
    assert!(fold == whole);
}

// Goal: a deferred resume derives and checkpoints as a full resume does without replaying
// the fact journal (and so compares equal to it); it refuses to check an event until the
// journal is replayed; admitting replays it, and it folds on identically; and a journal
// that cannot be replayed leaves every event refused.
// Method: a generated session with retries and titles, cut at 2,000 of 3,000 events.
#[test]
fn a_deferred_resume_replays_the_journal_when_it_first_admits() {
    let events: Vec<Arc<Event>> = generated(3_000, 5).concat();
    let (head, rest) = events.split_at(2_000);
    let fold = fold_from_scratch(V3, head).unwrap();
    let live_events = |seq: u64| events.get(seq as usize).cloned();
    let full = SessionFold::resume(V3, fold.checkpoint(), live_events).unwrap();
    let mut deferred = SessionFold::resume_deferred(V3, fold.checkpoint(), live_events).unwrap();
    assert!(deferred.admission().relations().journal_unreplayed());
    assert!(!fold.fact_journal().is_empty(), "a journal to defer");
    assert_eq!(derived(&deferred), derived(&full));
    assert_eq!(deferred.checkpoint(), full.checkpoint());
    assert!(deferred == full, "fold equality is the checkpointed state");
    let refused = deferred.check(&rest[0]).unwrap_err();
    assert_eq!(
        refused.message,
        "the resumed checkpoint's fact journal is not replayed"
    );
    let mut whole = full.clone();
    for event in rest {
        deferred.admit(Arc::clone(event)).unwrap();
        whole.admit(Arc::clone(event)).unwrap();
    }
    assert!(!deferred.admission().relations().journal_unreplayed());
    assert!(deferred == whole);
    assert!(whole == fold_from_scratch(V3, &events).unwrap());

    // A journal one fact longer than any log could write: a human user message at next_seq.
    let mut bad = fold.checkpoint();
    let mut journal = bad.relations.facts.bytes().unwrap().to_vec();
    journal.push(0x05);
    crate::binary::varint::write_varint(&mut journal, 2_000);
    bad.relations.facts = crate::relations::FactJournal::Bytes(journal);
    assert!(SessionFold::resume(V3, bad.clone(), live_events).is_err());
    let mut unusable = SessionFold::resume_deferred(V3, bad, live_events).unwrap();
    let error = unusable.replay_relations().unwrap_err();
    assert_eq!(error, "human user message 2000 is out of order");
    assert!(unusable.admission().relations().journal_unreplayed());
    let refused = unusable.admit(Arc::clone(&rest[0])).unwrap_err();
    assert_eq!(refused.rule, Rule::Surface);
}

// Goal: resume refuses a checkpoint that does not match its context or the supplied events.
// Method: spoil one part of a valid checkpoint per case.
#[test]
fn resume_refuses_mismatches() {
    let events: Vec<Arc<Event>> = generated(400, 3).concat();
    let fold = fold_from_scratch(V3, &events).unwrap();
    let live_events = |seq: u64| events.get(seq as usize).cloned();
    let resume = |checkpoint| SessionFold::resume(V3, checkpoint, live_events).unwrap_err();
    let mut newer = fold.checkpoint();
    newer.version += 1;
    assert!(matches!(resume(newer), ResumeError::Version { .. }));
    let snapshot = RuleContext {
        snapshot: true,
        ..V3
    };
    let error = SessionFold::resume(snapshot, fold.checkpoint(), live_events).unwrap_err();
    assert!(matches!(error, ResumeError::Context { .. }));
    let seq = fold.checkpoint().nodes[1].seq;
    let missing = SessionFold::resume(V3, fold.checkpoint(), |s| {
        (s != seq).then(|| events[s as usize].clone())
    });
    assert!(matches!(missing.unwrap_err(), ResumeError::MissingEvent { seq: s } if s == seq));
    let shifted = SessionFold::resume(V3, fold.checkpoint(), |s| {
        events.get(s as usize + 1).cloned()
    });
    assert!(matches!(
        shifted.unwrap_err(),
        ResumeError::EventMismatch { .. }
    ));
    let mut dead = fold.checkpoint();
    dead.projected.push(ProjectedMessage {
        seq: 0,
        message: message(0, "user", Vec::new(), source("user")),
    });
    assert!(matches!(resume(dead), ResumeError::Inconsistent { .. }));
    let mut headless = fold.checkpoint();
    headless.head = Some(headless.nodes[1].seq);
    assert!(matches!(resume(headless), ResumeError::Inconsistent { .. }));
}

const V4: RuleContext = RuleContext {
    version: FormatVersion::V4,
    snapshot: false,
};

// Goal: a V4 fold (developer messages bound to their headers, tool messages) checkpoints and
// resumes exactly, and every batch refused at its end leaves it exactly as before: the V4
// state (the request headers a `headerSeq` binds to) is undone and checkpointed like the rest.
// Method: a generated V4 session with tool changes; at several cuts, checkpoint through JSON,
// resume and fold the rest; then replay it batch by batch, each batch first with a trailing
// event of a wrong seq (refused), comparing checkpoints before and after the refusal.
#[test]
fn v4_checkpoint_resume_and_refused_batches() {
    let mut generator = Generator::for_version(
        GenOptions {
            events: 4_000,
            seed: 5,
        },
        FormatVersion::V4,
    )
    .unwrap();
    let batches: Vec<Vec<Arc<Event>>> = std::iter::from_fn(|| generator.next_batch())
        .map(|batch| batch.into_iter().map(Arc::new).collect())
        .collect();
    let events = batches.concat();
    assert!(events
        .iter()
        .any(|e| matches!(e.data, EventData::DeveloperMessage(_))));
    let whole = fold_from_scratch(V4, &events).unwrap();
    assert!(whole.checkpoint().relations.header_facts() > 0);
    for cut in [0, 1, 1_234, 2_500, 4_000] {
        let head = fold_from_scratch(V4, &events[..cut]).unwrap();
        let text = serde_json::to_string(&head.checkpoint()).unwrap();
        let checkpoint: FoldCheckpoint = serde_json::from_str(&text).unwrap();
        let live_events = |seq: u64| events.get(seq as usize).cloned();
        let mut resumed = SessionFold::resume(V4, checkpoint, live_events).unwrap();
        for event in &events[cut..] {
            resumed.admit(Arc::clone(event)).unwrap();
        }
        assert!(resumed == whole, "cut {cut}");
    }
    let mut fold = SessionFold::new(V4);
    for batch in &batches {
        let before = fold.checkpoint();
        let mut bad = batch.clone();
        let wrong = Event::other(u64::MAX >> 12, 0, EventType::TodoWrite, Value::Null);
        bad.push(Arc::new(wrong));
        assert!(fold.admit_batch(&bad).is_err());
        assert_eq!(fold.checkpoint(), before);
        fold.admit_batch(batch).unwrap();
    }
    assert!(fold == whole);
}

// Goal: a following fold (the migration proof's source side, fed by a reader that admitted
// every event) derives exactly the surface and messages a checking fold derives, and checks
// none of the rules the reader already checked. Method: fold generated V3 and V4 sessions both
// ways and compare the surface, the messages and the generations after every event and the
// node kinds at the end; then give both folds a
// tool result moved to another step, which the checking fold refuses and the following one
// folds like any other.
#[test]
fn a_following_fold_derives_what_a_checking_fold_does() {
    for (ctx, seed) in [(V3, 1), (V3, 7), (V4, 5)] {
        let options = GenOptions {
            events: 1_500,
            seed,
        };
        let events = Generator::for_version(options, ctx.version)
            .unwrap()
            .into_events();
        let mut checking = SessionFold::new(ctx);
        let mut following = SessionFold::following(ctx);
        let mut moved = None;
        for (event_idx, event) in events.into_iter().enumerate() {
            if moved.is_none() && matches!(event.data, EventData::ToolResult(_)) {
                let mut other = event.clone();
                if let EventData::ToolResult(data) = &mut other.data {
                    data.step += 100;
                }
                let mut refused = checking.clone();
                assert!(
                    refused.admit(Arc::new(other.clone())).is_err(),
                    "seed {seed}"
                );
                let mut folded = following.clone();
                folded.admit(Arc::new(other)).unwrap();
                assert_eq!(folded.messages().len(), following.messages().len() + 1);
                moved = Some(event_idx);
            }
            let event = Arc::new(event);
            checking.admit(Arc::clone(&event)).unwrap();
            following.admit(event).unwrap();
            let at = format!("seed {seed}, after event {event_idx}");
            let surface_and_messages = |fold: &SessionFold| Derived {
                header: None,
                context: None,
                ..derived(fold)
            };
            assert_eq!(
                surface_and_messages(&following),
                surface_and_messages(&checking),
                "{at}"
            );
            assert_eq!(following.request_header(), None, "{at}");
        }
        assert!(moved.is_some(), "seed {seed} has no tool result");
        let kinds = |fold: &SessionFold| {
            let nodes = fold.admission().surface().nodes();
            nodes.iter().map(|n| (n.seq, n.kind)).collect::<Vec<_>>()
        };
        assert_eq!(kinds(&following), kinds(&checking), "seed {seed}");
    }
}

//! Tests of the generator: determinism, validity, streams and the surface it builds.

use crate::admission::Admission;
use crate::event::{Event, EventData, SurfaceOp};
use crate::message::ContentBlock;
use crate::reader::{read_log, ReadOptions};
use crate::rules::RuleContext;
use crate::stream::StreamRecord;
use crate::version::FormatVersion;
use crate::writer::{Compression, LogWriter};

use super::{GenOptions, Generator};

const V3: RuleContext = RuleContext {
    version: FormatVersion::V3,
    snapshot: false,
};

fn batches(events: u64, seed: u64) -> Vec<Vec<Event>> {
    let mut generator = Generator::new(GenOptions { events, seed });
    std::iter::from_fn(|| generator.next_batch()).collect()
}

fn write(events: u64, seed: u64) -> Vec<u8> {
    let generator = Generator::new(GenOptions { events, seed });
    let mut writer = LogWriter::new(Vec::new(), &generator.header(), Compression::None).unwrap();
    for batch in batches(events, seed) {
        writer.append_batch(&batch).unwrap();
    }
    writer.into_inner().unwrap()
}

// Goal: the same options give the same session, byte for byte; another seed another one.
// Method: compare the batches and the written bytes of two runs, then of a third seed.
#[test]
fn determinism() {
    assert_eq!(batches(2_000, 42), batches(2_000, 42));
    assert_eq!(write(2_000, 42), write(2_000, 42));
    assert_ne!(write(2_000, 42), write(2_000, 43));
    let header = |seed| Generator::new(GenOptions { events: 1, seed }).header();
    assert_eq!(header(42), header(42));
    assert_ne!(header(42).id, header(43).id);
}

// Goal: every generated log is valid V3 of exactly N events, survives a write-read round
// trip, and a long one holds every kind of event the generator can write.
// Method: admit each batch on a fresh Admission, write through LogWriter, read back with
// read_log and compare; for N = 3000 count the features over several seeds.
#[test]
fn validity() {
    for seed in [0, 1, 7, 0xdead_beef] {
        for events in [0, 1, 2, 5, 9, 10, 50, 3_000] {
            let batches = batches(events, seed);
            let mut admission = Admission::new(V3);
            for batch in &batches {
                if let Err((idx, violation)) = admission.admit_batch(batch) {
                    panic!(
                        "seed {seed} N {events}: seq {} refused: {violation}",
                        batch[idx].seq
                    );
                }
            }
            let generated: Vec<Event> = batches.into_iter().flatten().collect();
            assert_eq!(generated.len() as u64, events, "seed {seed}");
            let log = read_log(&write(events, seed)[..], ReadOptions::default()).unwrap();
            assert_eq!(
                log.header,
                Generator::new(GenOptions { events, seed }).header()
            );
            assert!(
                log.events == generated,
                "seed {seed} N {events}: round trip differs"
            );
            if events == 3_000 {
                check_features(&generated, seed);
                check_balanced(&generated, seed);
            }
        }
    }
}

/// Asserts at least one of each feature the generator is meant to write.
fn check_features(events: &[Event], seed: u64) {
    let mut head = None;
    let mut seen = std::collections::BTreeMap::<&str, u64>::new();
    for event in events {
        let feature = match (&event.data, event.surface_op) {
            (EventData::SystemMessage(_), Some(SurfaceOp::Append)) if head.is_none() => {
                head = Some(event.seq);
                "head"
            }
            (EventData::SystemMessage(_), Some(SurfaceOp::Append)) => "in-history append",
            (EventData::SystemMessage(_), Some(SurfaceOp::Replace { start_seq, end_seq }))
                if Some(start_seq) == head && end_seq == start_seq =>
            {
                head = Some(event.seq);
                "head rewrite"
            }
            (EventData::UserMessage(m), Some(SurfaceOp::Replace { .. })) => {
                let source = m.source.as_ref().unwrap();
                assert_eq!(source.plugin.as_deref(), Some("compact"));
                "compaction checkpoint"
            }
            (EventData::ToolResult(_), Some(SurfaceOp::Append)) => "tool result",
            (EventData::ToolResult(_), Some(SurfaceOp::Replace { .. })) => "tool rewrite",
            (EventData::AssistantAttempt(_), _) => "attempt",
            (EventData::RequestHeader(h), _) => match h.reason.as_str() {
                "series" => "series header",
                "change" => "change header",
                _ => "header",
            },
            _ => event.kind.as_str(),
        };
        *seen.entry(feature).or_default() += 1;
    }
    for feature in [
        "head rewrite",
        "in-history append",
        "compaction checkpoint",
        "attempt",
        "tool result",
        "tool rewrite",
        "series header",
        "change header",
        "llm/retry",
        "llm/retry-started",
        "session/title",
        "permission/preset",
        "compaction/prune",
    ] {
        assert!(
            seen.contains_key(feature),
            "seed {seed}: no {feature} in {seen:?}"
        );
    }
}

/// Asserts that turns and steps nest and close, and that tool calls are settled in their
/// step (the relational rules of spec 12.2 that admission does not check).
fn check_balanced(events: &[Event], seed: u64) {
    let (mut turn, mut step, mut calls) = (None, None, Vec::new());
    for event in events {
        match &event.data {
            EventData::TurnStart(d) => {
                assert_eq!(turn, None, "seed {seed}");
                turn = Some(d.turn);
            }
            EventData::TurnEnd(d) => {
                assert_eq!((turn, step), (Some(d.turn), None), "seed {seed}");
                turn = None;
            }
            EventData::StepStart(d) => {
                assert_eq!((turn, step), (Some(d.turn), None), "seed {seed}");
                step = Some(d.step);
            }
            EventData::StepEnd(d) => {
                assert_eq!(step, Some(d.step), "seed {seed}");
                assert!(calls.is_empty(), "seed {seed}: unsettled calls {calls:?}");
                step = None;
            }
            EventData::ToolCall(d) => calls.push(d.call_id.clone()),
            EventData::ToolResult(d) if event.surface_op == Some(SurfaceOp::Append) => {
                let id = d.message.source.as_ref().unwrap().call_id.clone().unwrap();
                calls.retain(|call| *call != id);
            }
            EventData::RequestHeader(_) | EventData::RequestContext(_) => {
                assert!(step.is_some(), "seed {seed}: request outside a step");
            }
            _ => {}
        }
    }
    assert_eq!(
        (turn, step),
        (None, None),
        "seed {seed}: the log ends between turns"
    );
}

// Goal: embedded streams agree with their message: packed deltas concatenate to the block
// and carry one dt fewer than deltas, times never go back, and tool calls match blocks.
// Method: walk every assistant/message and tool/call of a few thousand events.
#[test]
fn streams_match_content() {
    let events: Vec<Event> = batches(3_000, 5).into_iter().flatten().collect();
    let mut advertised = Vec::new();
    for pair in events.windows(2) {
        assert!(pair[0].time <= pair[1].time, "time is monotonic");
    }
    for event in &events {
        match &event.data {
            EventData::AssistantMessage(d) => {
                let stream = d.stream.as_ref().unwrap();
                check_stream(&d.message.content, stream, event.time);
                for block in &d.message.content {
                    if let ContentBlock::ToolCall(call) = block {
                        advertised.push((
                            call.id.clone(),
                            call.name.clone(),
                            call.arguments.clone(),
                        ));
                    }
                }
            }
            EventData::ToolCall(d) => {
                let call = (d.call_id.clone(), d.name.clone(), d.arguments.clone());
                assert!(
                    advertised.contains(&call),
                    "tool/call {} was advertised",
                    d.call_id
                );
            }
            _ => {}
        }
    }
    assert!(!advertised.is_empty());
}

fn check_stream(content: &[ContentBlock], stream: &[StreamRecord], event_time: i64) {
    let mut packed = 0;
    for record in stream {
        match record {
            StreamRecord::TextChunks(c) | StreamRecord::ReasoningChunks(c) => {
                assert_eq!(c.dt.len() + 1, c.texts.len());
                let block = &content[usize::try_from(c.index).unwrap()];
                assert_eq!(Some(c.texts.concat().as_str()), block.as_text());
                assert!(c.time0 + c.dt.iter().sum::<i64>() <= event_time);
                packed += 1;
            }
            StreamRecord::ToolCallChunks(c) => {
                assert_eq!(c.dt.len() + 1, c.args.len());
                let ContentBlock::ToolCall(call) = &content[usize::try_from(c.index).unwrap()]
                else {
                    panic!("tool-call chunks point at a tool-call block");
                };
                assert_eq!((&c.id, c.args.concat()), (&call.id, call.arguments.clone()));
                packed += 1;
            }
            StreamRecord::Chunk(raw) => assert!(raw.time <= event_time),
            StreamRecord::Other(_) => panic!("no unknown records"),
        }
    }
    assert_eq!(packed, content.len(), "one packed record per block");
}

// Goal: head rewrites make the surface numerically non-monotonic, as in spec 7.2.
// Method: admit 3000 events batch by batch and look at the admitted surface's seqs.
#[test]
fn surface_becomes_non_monotonic() {
    let mut admission = Admission::new(V3);
    let mut non_monotonic = 0;
    for batch in batches(3_000, 11) {
        admission.admit_batch(&batch).unwrap();
        let seqs = admission.surface().seqs();
        if seqs.windows(2).any(|w| w[0] > w[1]) {
            non_monotonic += 1;
        }
    }
    assert!(non_monotonic > 0, "the surface stayed in seq order");
}

// Goal: a V2 log is valid V2 of exactly N events: no system/message, the prompt in every
// request header, no V3-only route member, and it survives a write-read round trip.
// Method: generate several sizes and seeds, admit under the V2 rules, write and read back.
#[test]
fn v2_validity() {
    let v2 = RuleContext {
        version: FormatVersion::V2,
        snapshot: false,
    };
    for seed in [0, 3, 0xfeed] {
        for events in [0, 1, 7, 40, 3_000] {
            let options = GenOptions { events, seed };
            let mut generator = Generator::for_version(options, FormatVersion::V2).unwrap();
            let header = generator.header();
            assert_eq!(header.version, Some(2));
            let mut admission = Admission::new(v2);
            let mut writer = LogWriter::new(Vec::new(), &header, Compression::None).unwrap();
            let mut all = Vec::new();
            while let Some(batch) = generator.next_batch() {
                if let Err((idx, violation)) = admission.admit_batch(&batch) {
                    panic!(
                        "seed {seed} N {events}: seq {} refused: {violation}",
                        batch[idx].seq
                    );
                }
                writer.append_batch(&batch).unwrap();
                all.extend(batch);
            }
            assert_eq!(all.len() as u64, events);
            for event in &all {
                assert!(!matches!(event.data, EventData::SystemMessage(_)));
                if let EventData::RequestHeader(data) = &event.data {
                    assert!(
                        data.header.system.is_some(),
                        "seq {} has no prompt",
                        event.seq
                    );
                }
                if let EventData::RequestContext(data) = &event.data {
                    assert_eq!(data.system_prompt_update, None);
                }
            }
            let bytes = writer.into_inner().unwrap();
            let log = read_log(&bytes[..], ReadOptions::default()).unwrap();
            assert_eq!(log.events, all, "seed {seed} N {events}");
        }
    }
    let v1 = Generator::for_version(GenOptions { events: 1, seed: 0 }, FormatVersion::V1);
    assert!(v1.is_err());
}

// Goal: a V0 log is valid V0: streams are top-level chunk events that each message cites,
// no message embeds a stream, attempts are chunks only, and it survives a write-read round
// trip with dense seqs.
// Method: generate several sizes and seeds, admit under the V0 rules, write and read back,
// and check that every message cites exactly the chunks just before it.
#[test]
fn v0_validity() {
    let v0 = RuleContext {
        version: FormatVersion::V0,
        snapshot: false,
    };
    for seed in [0, 9] {
        for events in [0, 1, 40, 2_000] {
            let options = GenOptions { events, seed };
            let mut generator = Generator::for_version(options, FormatVersion::V0).unwrap();
            let header = generator.header();
            assert_eq!((header.version, header.is_seeded), (Some(0), None));
            let mut admission = Admission::new(v0);
            let mut writer = LogWriter::new(Vec::new(), &header, Compression::None).unwrap();
            let mut all: Vec<Event> = Vec::new();
            while let Some(batch) = generator.next_batch() {
                if let Err((idx, violation)) = admission.admit_batch(&batch) {
                    panic!(
                        "seed {seed} N {events}: seq {} refused: {violation}",
                        batch[idx].seq
                    );
                }
                writer.append_batch(&batch).unwrap();
                all.extend(batch);
            }
            assert!(all.len() as u64 >= events);
            for (idx, event) in all.iter().enumerate() {
                assert_eq!(event.seq, idx as u64);
                assert!(!matches!(event.data, EventData::AssistantAttempt(_)));
                if let EventData::AssistantMessage(data) = &event.data {
                    assert!(data.stream.is_none());
                    let cited = event.source_event_seqs.as_deref().unwrap();
                    assert!(!cited.is_empty(), "seq {idx} cites its chunks");
                    let first = cited[0] as usize;
                    assert_eq!(cited, (first as u64..idx as u64).collect::<Vec<_>>());
                    assert!(all[first..idx]
                        .iter()
                        .all(|e| matches!(e.data, EventData::AssistantChunk(_))));
                }
            }
            let bytes = writer.into_inner().unwrap();
            let log = read_log(&bytes[..], ReadOptions::default()).unwrap();
            assert_eq!(log.events, all, "seed {seed} N {events}");
        }
    }
}

// Goal: every `gen` output passes every rule of its version, the payload member types and the
// relational rules of spec 12.2 included (issue #19: `rawOutput` was a string), at many seeds
// and sizes, including sizes that cut the log inside a turn, a step or a compaction.
// Method: for V2, V3 and V4, 40 seeds by sizes from 0 to 600 events; each log is written by
// `LogWriter` (which admits every batch) and read back strictly by `read_log`, which runs
// the stateless rules, the admission and the relational validator again from the bytes.
#[test]
fn every_version_passes_every_rule_at_many_seeds_and_sizes() {
    let sizes = [0, 1, 3, 4, 6, 11, 17, 29, 64, 101, 233, 600];
    for version in [FormatVersion::V2, FormatVersion::V3, FormatVersion::V4] {
        for seed in 0..40u64 {
            let events = sizes[usize::try_from(seed).unwrap() % sizes.len()] + seed;
            let options = GenOptions { events, seed };
            let mut generator = Generator::for_version(options, version).unwrap();
            let header = generator.header();
            let mut writer = LogWriter::new(Vec::new(), &header, Compression::None).unwrap();
            while let Some(batch) = generator.next_batch() {
                writer
                    .append_batch(&batch)
                    .unwrap_or_else(|e| panic!("{version} seed {seed} N {events}: {e}"));
            }
            let bytes = writer.into_inner().unwrap();
            let log = read_log(&bytes[..], ReadOptions::default())
                .unwrap_or_else(|e| panic!("{version} seed {seed} N {events}: {e}"));
            assert_eq!(log.events.len() as u64, events, "{version} seed {seed}");
        }
    }
}

// Goal: a V4 log is written in dsh's V4 shapes: no plugin source, tool results as tool
// messages, and, over a long log, developer messages announcing tool changes (an addition
// bound to its header, a removal without `headerSeq`) beside every other kind of event.
// Method: generate 6000 events at a few seeds, write and read back under the V4 rules, and
// count the V4 shapes.
#[test]
fn v4_shapes() {
    for seed in [0, 5, 11] {
        let options = GenOptions {
            events: 6_000,
            seed,
        };
        let mut generator = Generator::for_version(options, FormatVersion::V4).unwrap();
        let header = generator.header();
        assert_eq!(header.version, Some(4));
        let mut writer = LogWriter::new(Vec::new(), &header, Compression::None).unwrap();
        while let Some(batch) = generator.next_batch() {
            writer
                .append_batch(&batch)
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        }
        let bytes = writer.into_inner().unwrap();
        let log = read_log(&bytes[..], ReadOptions::default()).unwrap();
        let (mut tools, mut additions, mut removals) = (0, 0, 0);
        for event in &log.events {
            if let Some(message) = event.message() {
                assert_ne!(message.source_kind(), "plugin", "seq {}", event.seq);
            }
            match &event.data {
                EventData::ToolResult(data) => {
                    assert_eq!(data.message.role.as_deref(), Some("tool"));
                    tools += 1;
                }
                EventData::DeveloperMessage(data) if data.header_seq.is_some() => additions += 1,
                EventData::DeveloperMessage(_) => removals += 1,
                _ => {}
            }
        }
        assert!(
            tools > 0 && additions > 0 && removals > 0,
            "seed {seed}: {tools} {additions} {removals}"
        );
    }
}

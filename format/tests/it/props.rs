//! Property tests: the row codec is lossless on generated events, unknown members included.

use pretty_assertions::assert_eq;
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Number, Value};
use sessionlog_format::message::{AttachmentBlock, TextBlock, ToolCallBlock, ToolResultBlock};
use sessionlog_format::payload::{
    AssistantChunkData, AssistantMessageData, CallConfig, CompactionSummaryData,
    DeveloperMessageData, EpochHeader, RequestHeaderData, SeqRange, StepRef, SystemMessageData,
    ToolResultData, TurnStart,
};
use sessionlog_format::row::{decode_row, encode_row, Decoded, RowContext};
use sessionlog_format::seq_ranges::{self, SeqItem};
use sessionlog_format::stream::{
    BlockEnd, BlockStart, Delta, Finish, RawChunk, StreamChunk, StreamRecord, TextChunks,
    TokenUsage, ToolCallChunks, ToolCallDelta, UsageChunk,
};
use sessionlog_format::{
    ContentBlock, Event, EventData, EventType, Extra, FormatVersion, Message, Source, SurfaceOp,
    SAFE_INTEGER_MAX,
};

/// Cases per property: enough to reach the nested shapes, small enough for a debug build.
const CASES: u32 = 256;

fn config() -> Config {
    // No persistence: a failure prints its minimal input instead of writing a file beside
    // the sources.
    Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    }
}

// Known member keys per object, so that generated unknown members never collide with them.
const MESSAGE_KEYS: &[&str] = &["id", "role", "content", "source"];
const SOURCE_KEYS: &[&str] = &["kind", "plugin", "provider", "model", "callId"];
const TEXT_BLOCK_KEYS: &[&str] = &["type", "text"];
const TOOL_CALL_BLOCK_KEYS: &[&str] = &["type", "id", "name", "arguments"];
const TOOL_RESULT_BLOCK_KEYS: &[&str] = &["type", "toolCallId", "content", "isError"];
const ATTACHMENT_KEYS: &[&str] = &["type", "attachment", "offloaded"];
const TEXT_CHUNKS_KEYS: &[&str] = &["type", "time0", "index", "dt", "texts"];
const TOOL_CALL_CHUNKS_KEYS: &[&str] = &["type", "time0", "index", "dt", "id", "name", "args"];
const RAW_CHUNK_KEYS: &[&str] = &["type", "time", "chunk"];
const BLOCK_START_KEYS: &[&str] = &["type", "index", "blockType"];
const DELTA_KEYS: &[&str] = &["type", "index", "text"];
const TOOL_CALL_DELTA_KEYS: &[&str] = &["type", "index", "id", "name", "argumentsDelta"];
const BLOCK_END_KEYS: &[&str] = &["type", "index", "block"];
const USAGE_CHUNK_KEYS: &[&str] = &["type", "usage"];
const FINISH_KEYS: &[&str] = &["type", "reason", "replayState"];
const USAGE_KEYS: &[&str] = &[
    "inputTokens",
    "outputTokens",
    "cacheReadTokens",
    "reasoningTokens",
    "totalTokens",
];
const TURN_START_KEYS: &[&str] = &["turn"];
const STEP_KEYS: &[&str] = &["turn", "step"];
const SYSTEM_KEYS: &[&str] = &["turn", "step", "message"];
const DEVELOPER_KEYS: &[&str] = &["turn", "step", "message", "headerSeq"];
const ASSISTANT_KEYS: &[&str] = &["turn", "step", "message", "stream", "usage", "interrupted"];
const CHUNK_EVENT_KEYS: &[&str] = &["turn", "step", "chunk"];
const TOOL_RESULT_KEYS: &[&str] = &["turn", "step", "message", "error", "meta"];
const REQUEST_HEADER_KEYS: &[&str] = &["header", "reason", "startsSeries"];
const EPOCH_HEADER_KEYS: &[&str] = &["config", "adapterDefaults", "tools", "system"];
const CONFIG_KEYS: &[&str] = &[
    "provider",
    "model",
    "reasoningEffort",
    "temperature",
    "maxTokens",
    "stop",
];
const SEQ_RANGE_KEYS: &[&str] = &["start", "end"];
const COMPACTION_SUMMARY_KEYS: &[&str] = &[
    "compactionId",
    "summary",
    "shadowedRange",
    "shadowedSeqs",
    "shadowedTokenCount",
    "provider",
    "model",
    "sourceCommandId",
    "maxTokens",
    "usage",
    "rawOutput",
    "llmStreamCall",
];
const CONTENT_BLOCK_TAGS: &[&str] = &[
    "text",
    "reasoning",
    "tool-call",
    "tool-result",
    "image",
    "file",
];
const STREAM_RECORD_TAGS: &[&str] = &[
    "text-chunks",
    "reasoning-chunks",
    "tool-call-chunks",
    "chunk",
];
const STREAM_CHUNK_TAGS: &[&str] = &[
    "block-start",
    "text-delta",
    "reasoning-delta",
    "tool-call-delta",
    "block-end",
    "usage",
    "finish",
];
/// Known types whose `data` this crate keeps opaque.
const OPAQUE_KNOWN_TYPES: &[&str] = &[
    "session/title",
    "permission/preset",
    "sandbox/mode",
    "approval/policy",
    "agent/inbox/spliced",
    "command/run",
    "feedback/record",
    "session-log-deepseek/delivery-accepted",
    "goal/change",
    "compact/summary",
];
/// Row tags that the V0/V1 row decoder expands, never an event type.
const PACKED_TAGS: &[&str] = &["text-chunks", "reasoning-chunks", "tool-call-chunks"];

// ---- JSON values ----

/// Strings biased towards what JSON escaping must get right: quotes, backslashes, control
/// characters, the line separators JavaScript treats specially, and non-BMP characters.
fn json_string() -> BoxedStrategy<String> {
    let tricky = prop::sample::select(vec![
        '"',
        '\\',
        '/',
        '\0',
        '\n',
        '\r',
        '\t',
        '\u{1f}',
        '\u{7f}',
        'a',
        'Z',
        ' ',
        '\u{e9}',
        '\u{2028}',
        '\u{fffd}',
        '\u{1f600}',
        '{',
        '}',
    ]);
    prop_oneof![
        prop::collection::vec(tricky, 0..12).prop_map(String::from_iter),
        prop::collection::vec(any::<char>(), 0..8).prop_map(String::from_iter),
    ]
    .boxed()
}

fn string_opt() -> BoxedStrategy<Option<String>> {
    prop::option::of(json_string()).boxed()
}

/// Integers over the whole i64 and u64 ranges, and finite floats other than -0.0 (which is
/// not lossless JSON, spec 12.1).
fn json_number() -> BoxedStrategy<Number> {
    prop_oneof![
        any::<i64>().prop_map(Number::from),
        any::<u64>().prop_map(Number::from),
        any::<f64>().prop_filter_map("a finite float other than -0.0", |f| {
            let negative_zero = f == 0.0 && f.is_sign_negative();
            if negative_zero {
                return None;
            }
            Number::from_f64(f)
        }),
    ]
    .boxed()
}

/// Any JSON value, nested at most three levels deep.
fn json_value() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        json_number().prop_map(Value::Number),
        json_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((json_string(), inner), 0..4)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
    .boxed()
}

fn value_opt() -> BoxedStrategy<Option<Value>> {
    prop::option::of(json_value()).boxed()
}

/// A member key that is not one of `known`: arbitrary text, or a plausible camelCase name
/// such as a newer dsh release might add.
fn unknown_key(known: &'static [&'static str]) -> BoxedStrategy<String> {
    let plausible = prop::sample::select(vec![
        "type",
        "form",
        "sections",
        "replayState",
        "compactionId",
        "trigger",
        "meta",
        "Type",
        "ids",
        "turn ",
        "x",
    ])
    .prop_map(str::to_owned);
    prop_oneof![plausible, json_string()]
        .prop_filter(
            "unknown keys must not collide with known ones",
            move |key| !known.contains(&key.as_str()),
        )
        .boxed()
}

/// Unknown members for an object whose known keys are `known`.
fn extra(known: &'static [&'static str]) -> BoxedStrategy<Extra> {
    prop::collection::vec((unknown_key(known), json_value()), 0..3)
        .prop_map(|members| members.into_iter().collect())
        .boxed()
}

/// An object of a tagged union whose tag this build does not know: `type` first, as every
/// writer puts it, then arbitrary members.
fn unknown_tagged(known_tags: &'static [&'static str]) -> BoxedStrategy<Extra> {
    let tag =
        json_string().prop_filter("an unknown tag", move |t| !known_tags.contains(&t.as_str()));
    (tag, extra(&["type"]))
        .prop_map(|(tag, rest)| {
            let mut object = Extra::new();
            object.insert("type".to_owned(), Value::String(tag));
            object.extend(rest);
            object
        })
        .boxed()
}

// ---- messages ----

prop_compose! {
    fn source()(
        kind in json_string(),
        plugin in string_opt(),
        provider in string_opt(),
        model in string_opt(),
        call_id in string_opt(),
        extra in extra(SOURCE_KEYS),
    ) -> Source {
        Source { kind, plugin, provider, model, call_id, extra }
    }
}

fn text_block(known: &'static [&'static str]) -> BoxedStrategy<TextBlock> {
    (json_string(), extra(known))
        .prop_map(|(text, extra)| TextBlock { text, extra })
        .boxed()
}

fn attachment_block() -> BoxedStrategy<AttachmentBlock> {
    (
        json_value(),
        prop::option::of(any::<bool>()),
        extra(ATTACHMENT_KEYS),
    )
        .prop_map(|(attachment, offloaded, extra)| AttachmentBlock {
            attachment,
            offloaded,
            extra,
        })
        .boxed()
}

/// Content blocks of every type, tool results nesting further blocks.
fn content_block() -> BoxedStrategy<ContentBlock> {
    let tool_call = (
        json_string(),
        json_string(),
        json_string(),
        extra(TOOL_CALL_BLOCK_KEYS),
    )
        .prop_map(|(id, name, arguments, extra)| ToolCallBlock {
            id,
            name,
            arguments,
            extra,
        });
    let leaf = prop_oneof![
        text_block(TEXT_BLOCK_KEYS).prop_map(ContentBlock::Text),
        text_block(TEXT_BLOCK_KEYS).prop_map(ContentBlock::Reasoning),
        tool_call.prop_map(ContentBlock::ToolCall),
        attachment_block().prop_map(ContentBlock::Image),
        attachment_block().prop_map(ContentBlock::File),
        unknown_tagged(CONTENT_BLOCK_TAGS).prop_map(ContentBlock::Other),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        (
            json_string(),
            prop::collection::vec(inner, 0..3),
            prop::option::of(any::<bool>()),
            extra(TOOL_RESULT_BLOCK_KEYS),
        )
            .prop_map(|(tool_call_id, content, is_error, extra)| {
                ContentBlock::ToolResult(ToolResultBlock {
                    tool_call_id,
                    content,
                    is_error,
                    extra,
                })
            })
    })
    .boxed()
}

prop_compose! {
    fn message()(
        id in string_opt(),
        role in string_opt(),
        content in prop::collection::vec(content_block(), 0..3),
        source in prop::option::of(source()),
        extra in extra(MESSAGE_KEYS),
    ) -> Message {
        Message { id, role, content, source, extra }
    }
}

// ---- streams ----

prop_compose! {
    fn token_usage()(
        input_tokens in any::<u64>(),
        output_tokens in any::<u64>(),
        cache_read_tokens in prop::option::of(any::<u64>()),
        reasoning_tokens in prop::option::of(any::<u64>()),
        total_tokens in prop::option::of(any::<u64>()),
        extra in extra(USAGE_KEYS),
    ) -> TokenUsage {
        TokenUsage {
            input_tokens,
            output_tokens,
            cache_read_tokens,
            reasoning_tokens,
            total_tokens,
            extra,
        }
    }
}

fn stream_chunk() -> BoxedStrategy<StreamChunk> {
    let delta =
        || {
            (any::<u64>(), json_string(), extra(DELTA_KEYS))
                .prop_map(|(index, text, extra)| Delta { index, text, extra })
        };
    prop_oneof![
        (any::<u64>(), json_string(), extra(BLOCK_START_KEYS)).prop_map(
            |(index, block_type, extra)| StreamChunk::BlockStart(BlockStart {
                index,
                block_type,
                extra
            })
        ),
        delta().prop_map(StreamChunk::TextDelta),
        delta().prop_map(StreamChunk::ReasoningDelta),
        (
            any::<u64>(),
            string_opt(),
            string_opt(),
            string_opt(),
            extra(TOOL_CALL_DELTA_KEYS)
        )
            .prop_map(|(index, id, name, arguments_delta, extra)| {
                StreamChunk::ToolCallDelta(ToolCallDelta {
                    index,
                    id,
                    name,
                    arguments_delta,
                    extra,
                })
            }),
        (any::<u64>(), content_block(), extra(BLOCK_END_KEYS)).prop_map(|(index, block, extra)| {
            StreamChunk::BlockEnd(BlockEnd {
                index,
                block,
                extra,
            })
        }),
        (token_usage(), extra(USAGE_CHUNK_KEYS))
            .prop_map(|(usage, extra)| StreamChunk::Usage(UsageChunk { usage, extra })),
        (json_value(), value_opt(), extra(FINISH_KEYS)).prop_map(
            |(reason, replay_state, extra)| StreamChunk::Finish(Finish {
                reason,
                replay_state,
                extra
            })
        ),
        unknown_tagged(STREAM_CHUNK_TAGS).prop_map(StreamChunk::Other),
    ]
    .boxed()
}

fn text_chunks() -> BoxedStrategy<TextChunks> {
    (
        any::<i64>(),
        any::<u64>(),
        prop::collection::vec(any::<i64>(), 0..4),
        prop::collection::vec(json_string(), 0..4),
        extra(TEXT_CHUNKS_KEYS),
    )
        .prop_map(|(time0, index, dt, texts, extra)| TextChunks {
            time0,
            index,
            dt: dt.into(),
            texts: texts.into(),
            extra,
        })
        .boxed()
}

fn stream_record() -> BoxedStrategy<StreamRecord> {
    let tool_call_chunks = (
        any::<i64>(),
        any::<u64>(),
        prop::collection::vec(any::<i64>(), 0..4),
        json_string(),
        string_opt(),
        prop::collection::vec(json_string(), 0..4),
        extra(TOOL_CALL_CHUNKS_KEYS),
    )
        .prop_map(|(time0, index, dt, id, name, args, extra)| ToolCallChunks {
            time0,
            index,
            dt: dt.into(),
            id,
            name,
            args: args.into(),
            extra,
        });
    prop_oneof![
        text_chunks().prop_map(StreamRecord::TextChunks),
        text_chunks().prop_map(StreamRecord::ReasoningChunks),
        tool_call_chunks.prop_map(StreamRecord::ToolCallChunks),
        (any::<i64>(), stream_chunk(), extra(RAW_CHUNK_KEYS))
            .prop_map(|(time, chunk, extra)| StreamRecord::Chunk(RawChunk { time, chunk, extra })),
        unknown_tagged(STREAM_RECORD_TAGS).prop_map(StreamRecord::Other),
    ]
    .boxed()
}

// ---- payloads ----

fn turn_step() -> (std::ops::RangeInclusive<u64>, std::ops::RangeInclusive<u64>) {
    (0..=u64::MAX, 0..=u64::MAX)
}

fn assistant_message() -> BoxedStrategy<EventData> {
    (
        turn_step(),
        message(),
        prop::option::of(prop::collection::vec(stream_record(), 0..4)),
        prop::option::of(token_usage()),
        prop::option::of(any::<bool>()),
        extra(ASSISTANT_KEYS),
    )
        .prop_map(
            |((turn, step), message, stream, usage, interrupted, extra)| {
                EventData::AssistantMessage(Box::new(AssistantMessageData {
                    turn,
                    step,
                    message,
                    stream,
                    usage,
                    interrupted,
                    extra,
                }))
            },
        )
        .boxed()
}

fn request_header() -> BoxedStrategy<EventData> {
    let config = (
        string_opt(),
        json_string(),
        string_opt(),
        prop::option::of(json_number()),
        prop::option::of(json_number()),
        value_opt(),
        extra(CONFIG_KEYS),
    )
        .prop_map(
            |(provider, model, reasoning_effort, temperature, max_tokens, stop, extra)| {
                CallConfig {
                    provider,
                    model,
                    reasoning_effort,
                    temperature,
                    max_tokens,
                    stop,
                    extra,
                }
            },
        );
    let header = (
        config,
        value_opt(),
        value_opt(),
        value_opt(),
        extra(EPOCH_HEADER_KEYS),
    )
        .prop_map(
            |(config, adapter_defaults, tools, system, extra)| EpochHeader {
                config,
                adapter_defaults,
                tools,
                system,
                extra,
            },
        );
    (
        header,
        json_string(),
        prop::option::of(any::<bool>()),
        extra(REQUEST_HEADER_KEYS),
    )
        .prop_map(|(header, reason, starts_series, extra)| {
            EventData::RequestHeader(Box::new(RequestHeaderData {
                header,
                reason,
                starts_series,
                extra,
            }))
        })
        .boxed()
}

fn compaction_summary() -> BoxedStrategy<EventData> {
    let range = (any::<u64>(), any::<u64>(), extra(SEQ_RANGE_KEYS))
        .prop_map(|(start, end, extra)| SeqRange { start, end, extra });
    let required = (
        json_string(),
        json_value(),
        range,
        prop::collection::vec(any::<u64>(), 0..5),
        any::<u64>(),
        json_string(),
        json_string(),
    );
    let optional = (
        string_opt(),
        prop::option::of(json_number()),
        value_opt(),
        value_opt(),
        prop::option::of(any::<bool>()),
        extra(COMPACTION_SUMMARY_KEYS),
    );
    (required, optional)
        .prop_map(|(required, optional)| {
            let (
                compaction_id,
                summary,
                shadowed_range,
                shadowed_seqs,
                shadowed_token_count,
                provider,
                model,
            ) = required;
            let (source_command_id, max_tokens, usage, raw_output, llm_stream_call, extra) =
                optional;
            EventData::CompactionSummary(Box::new(CompactionSummaryData {
                compaction_id,
                summary,
                shadowed_range,
                shadowed_seqs,
                shadowed_token_count,
                provider,
                model,
                source_command_id,
                max_tokens,
                usage,
                raw_output,
                llm_stream_call,
                extra,
            }))
        })
        .boxed()
}

/// Typed payloads of the core events.
fn typed_data() -> BoxedStrategy<EventData> {
    let turn_start = (any::<u64>(), extra(TURN_START_KEYS))
        .prop_map(|(turn, extra)| EventData::TurnStart(Box::new(TurnStart { turn, extra })));
    let step_start = (turn_step(), extra(STEP_KEYS)).prop_map(|((turn, step), extra)| {
        EventData::StepStart(Box::new(StepRef { turn, step, extra }))
    });
    let system =
        (turn_step(), message(), extra(SYSTEM_KEYS)).prop_map(|((turn, step), message, extra)| {
            EventData::SystemMessage(Box::new(SystemMessageData {
                turn,
                step,
                message,
                extra,
            }))
        });
    let developer = (turn_step(), message(), value_opt(), extra(DEVELOPER_KEYS)).prop_map(
        |((turn, step), message, header_seq, extra)| {
            EventData::DeveloperMessage(Box::new(DeveloperMessageData {
                turn,
                step,
                message,
                header_seq,
                extra,
            }))
        },
    );
    let chunk = (turn_step(), stream_chunk(), extra(CHUNK_EVENT_KEYS)).prop_map(
        |((turn, step), chunk, extra)| {
            EventData::AssistantChunk(Box::new(AssistantChunkData {
                turn,
                step,
                chunk,
                extra,
            }))
        },
    );
    let tool_result = (
        turn_step(),
        message(),
        value_opt(),
        value_opt(),
        extra(TOOL_RESULT_KEYS),
    )
        .prop_map(|((turn, step), message, error, meta, extra)| {
            EventData::ToolResult(Box::new(ToolResultData {
                turn,
                step,
                message,
                error,
                meta,
                extra,
            }))
        });
    prop_oneof![
        message().prop_map(|m| EventData::UserMessage(Box::new(m))),
        assistant_message(),
        tool_result,
        turn_start,
        step_start,
        system,
        developer,
        chunk,
        request_header(),
        compaction_summary(),
    ]
    .boxed()
}

/// A type name whose payload stays opaque: a known plugin type, or a name this build does
/// not know at all.
fn opaque_type() -> BoxedStrategy<EventType> {
    let known = prop::sample::select(OPAQUE_KNOWN_TYPES).prop_map(EventType::parse);
    let plugin = (
        prop::sample::select(vec!["acme", "my-plugin", "x"]),
        json_string(),
    )
        .prop_map(|(plugin, name)| EventType::parse(&format!("{plugin}/{name}")));
    let arbitrary = json_string().prop_map(|name| EventType::parse(&name));
    prop_oneof![known, plugin, arbitrary]
        .prop_filter("an untyped, non-packed type name", |kind| {
            !PACKED_TAGS.contains(&kind.as_str()) && !has_typed_payload(kind)
        })
        .boxed()
}

/// Whether the decoder reads `kind`'s `data` into a typed payload.
fn has_typed_payload(kind: &EventType) -> bool {
    use EventType as T;
    matches!(
        kind,
        T::TurnStart
            | T::TurnEnd
            | T::StepStart
            | T::StepEnd
            | T::SystemMessage
            | T::DeveloperMessage
            | T::UserMessage
            | T::AssistantMessage
            | T::AssistantAttempt
            | T::AssistantChunk
            | T::ToolCall
            | T::ToolResult
            | T::RequestHeader
            | T::RequestContext
            | T::SessionEndSeed
            | T::CompactionStart
            | T::CompactionSummary
            | T::CompactionPrune
            | T::CompactionEnd
            | T::ImageOffload
    )
}

/// `(kind, data)` of any event this suite generates.
fn payload() -> BoxedStrategy<(EventType, EventData)> {
    let typed = typed_data().prop_map(|data| (Event::new(0, 0, data.clone()).kind, data));
    let opaque =
        (opaque_type(), json_value()).prop_map(|(kind, data)| (kind, EventData::Other(data)));
    prop_oneof![3 => typed, 1 => opaque].boxed()
}

// ---- the envelope ----

/// A seq: small, where provenance lists are dense, or anywhere up to the safe maximum.
fn seq() -> BoxedStrategy<u64> {
    prop_oneof![0..64u64, 0..=SAFE_INTEGER_MAX, Just(SAFE_INTEGER_MAX)].boxed()
}

/// Distinct seqs below `seq`, made of short runs so that the range encoding has runs to find,
/// either increasing or shuffled.
fn earlier_seqs(seq: u64) -> BoxedStrategy<Vec<u64>> {
    if seq == 0 {
        return Just(Vec::new()).boxed();
    }
    let window = seq.min(256);
    let base = seq - window;
    let runs = prop::collection::vec((0..window, 1..6u64), 0..5).prop_map(move |runs| {
        let set: std::collections::BTreeSet<u64> = runs
            .into_iter()
            .flat_map(|(start, len)| (base + start..base + start + len).filter(|s| *s < seq))
            .collect();
        Vec::from_iter(set)
    });
    prop_oneof![runs.clone(), runs.prop_shuffle()].boxed()
}

fn surface_op() -> BoxedStrategy<Option<SurfaceOp>> {
    prop_oneof![
        Just(None),
        Just(Some(SurfaceOp::Append)),
        (0..=SAFE_INTEGER_MAX, 0..=SAFE_INTEGER_MAX)
            .prop_map(|(start_seq, end_seq)| Some(SurfaceOp::Replace { start_seq, end_seq })),
    ]
    .boxed()
}

/// Any event: a core or opaque payload with every envelope member.
fn event() -> BoxedStrategy<Event> {
    let safe_time = -(SAFE_INTEGER_MAX as i64)..=SAFE_INTEGER_MAX as i64;
    seq()
        .prop_flat_map(move |seq| {
            (
                Just(seq),
                safe_time.clone(),
                payload(),
                any::<bool>(),
                prop::option::of(earlier_seqs(seq)),
                surface_op(),
            )
        })
        .prop_map(
            |(seq, time, (kind, data), ignorable, source_event_seqs, surface_op)| Event {
                seq,
                time,
                kind,
                data,
                ignorable,
                source_event_seqs,
                surface_op,
            },
        )
        .boxed()
}

// ---- checks ----

/// Decodes one row that must hold exactly one event.
fn decode_one(line: &[u8], version: FormatVersion, expected_seq: u64) -> Event {
    let ctx = RowContext {
        version,
        snapshot: false,
        skim: false,
    };
    match decode_row(line, ctx, expected_seq) {
        Ok(Decoded::One(event)) => *event,
        other => panic!("{other:?} for row {}", String::from_utf8_lossy(line)),
    }
}

/// Reverses the member order of every object inside `value`, so that `type` tags come last.
fn reverse_members(value: Value) -> Value {
    match value {
        Value::Object(members) => {
            let mut pairs: Vec<(String, Value)> = members.into_iter().collect();
            pairs.reverse();
            Value::Object(
                pairs
                    .into_iter()
                    .map(|(k, v)| (k, reverse_members(v)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(reverse_members).collect()),
        leaf => leaf,
    }
}

proptest! {
    #![proptest_config(config())]

    // Goal: decode -> encode -> decode is the identity on V3 rows, unknown members included,
    // and the encoding is a fixed point.
    // Method: encode a generated event, decode it with `decode_row`, compare the whole event,
    // then encode again and compare bytes.
    #[test]
    fn row_round_trip_is_lossless(event in event()) {
        let mut first = Vec::new();
        encode_row(&event, FormatVersion::V3, &mut first);
        let decoded = decode_one(&first, FormatVersion::V3, event.seq);
        assert_eq!(decoded, event);
        let mut second = Vec::new();
        encode_row(&decoded, FormatVersion::V3, &mut second);
        assert_eq!(String::from_utf8(second).unwrap(), String::from_utf8(first).unwrap());
    }

    // Goal: the same identity holds for the row layout of every version (V0 to V2 write a
    // replace as `{op, start, end}`).
    // Method: as above, with the version drawn too.
    #[test]
    fn row_round_trip_every_version(
        event in event(),
        version in prop::sample::select(FormatVersion::ALL.to_vec()),
    ) {
        let mut first = Vec::new();
        encode_row(&event, version, &mut first);
        let decoded = decode_one(&first, version, event.seq);
        assert_eq!(decoded, event);
        let mut second = Vec::new();
        encode_row(&decoded, version, &mut second);
        assert_eq!(String::from_utf8(second).unwrap(), String::from_utf8(first).unwrap());
    }

    // Goal: key order carries no meaning (spec 3.4): a row whose objects list their members
    // in any order decodes to the same event, through the buffered paths for a `data` that
    // precedes `type` and for union tags that are not the first member.
    // Method: encode an event, reverse the members of every object in the row, decode and
    // compare with the original event.
    #[test]
    fn member_order_does_not_matter(event in event()) {
        let mut encoded = Vec::new();
        encode_row(&event, FormatVersion::V3, &mut encoded);
        let reversed = reverse_members(serde_json::from_slice(&encoded).unwrap());
        let line = serde_json::to_vec(&reversed).unwrap();
        assert_eq!(decode_one(&line, FormatVersion::V3, event.seq), event);
    }

    // Goal: generated V3 and V4 logs (every event type the fold meets, in each version's
    // shapes) pass every rule of their version when read back strictly, and each event
    // survives the row codec and the store's binary record codec unchanged.
    // Method: generate a log for a drawn seed, size and version; write it with `LogWriter`
    // (which admits every batch), read it back with `read_log`, and round-trip every event.
    #[test]
    fn generated_logs_pass_their_rules_and_round_trip(
        seed in any::<u64>(),
        events in 0u64..400,
        version in prop::sample::select(vec![FormatVersion::V3, FormatVersion::V4]),
    ) {
        use sessionlog_format::gen::{GenOptions, Generator};
        use sessionlog_format::record::{decode_event, encode_event, genesis_chain};
        use sessionlog_format::{read_log, Compression, LogWriter, ReadOptions};
        let mut generator = Generator::for_version(GenOptions { events, seed }, version).unwrap();
        let header = generator.header();
        let mut writer = LogWriter::new(Vec::new(), &header, Compression::None).unwrap();
        let mut all = Vec::new();
        while let Some(batch) = generator.next_batch() {
            writer.append_batch(&batch).unwrap();
            all.extend(batch);
        }
        let bytes = writer.into_inner().unwrap();
        let log = read_log(&bytes[..], ReadOptions::default()).unwrap();
        assert_eq!(&log.events, &all);
        let chain = genesis_chain(&header);
        for event in &all {
            let mut row = Vec::new();
            encode_row(event, version, &mut row);
            assert_eq!(&decode_one(&row, version, event.seq), event);
            let mut record = Vec::new();
            encode_event(event, &chain, &mut record).unwrap();
            assert_eq!(&decode_event(&record, &chain, event.seq).unwrap().0, event);
        }
    }

    // Goal: the provenance range encoding is lossless for any list of distinct earlier seqs,
    // in any order (spec 3.4).
    // Method: encode the list, decode it as `SeqItem`s and expand it for its event's seq.
    #[test]
    fn seq_ranges_round_trip(
        (seq, seqs) in seq().prop_flat_map(|seq| (Just(seq), earlier_seqs(seq))),
    ) {
        let encoded = seq_ranges::encode(&seqs);
        let items: Vec<SeqItem> = serde_json::from_value(encoded.clone()).unwrap();
        assert_eq!(seq_ranges::expand(&items, seq), Ok(seqs), "{encoded}");
    }
}

//! The compaction event sequence (spec 13.1): start, summary, the checkpoint replace, end.

use serde_json::{json, Value};
use sessionlog_format::payload::{
    CompactionEndData, CompactionStartData, CompactionSummaryData, SeqRange,
};
use sessionlog_format::{ContentBlock, Event, EventData, Extra, Message, Source, SurfaceOp};

use super::range::CompactRange;

/// The opening text block of every checkpoint (spec 13.1 rule 3).
pub const CHECKPOINT_OPENING: &str = "This is an automatically generated checkpoint condensing \
an earlier span of the conversation to free up context. The summary below stands in for the \
original messages; continue the work from where it left off, without acknowledging this \
checkpoint.\n\n<compacted-summary>";
/// The closing text block of every checkpoint.
pub const CHECKPOINT_CLOSING: &str = "</compacted-summary>";

fn owner(turn: Option<u64>) -> Value {
    turn.map(Value::from).unwrap_or(Value::Null)
}

/// `compaction/start` at `seq`; `turn` is the owner turn (`None`: a manual compaction).
pub fn start_event(seq: u64, time: i64, compaction_id: &str, turn: Option<u64>) -> Event {
    let data = CompactionStartData {
        compaction_id: compaction_id.to_owned(),
        turn: owner(turn),
        source_command_id: None,
        extra: Extra::new(),
    };
    Event::new(seq, time, EventData::CompactionStart(Box::new(data)))
}

/// `compaction/end` at `seq`, with `error` when the compaction failed.
pub fn end_event(
    seq: u64,
    time: i64,
    compaction_id: &str,
    turn: Option<u64>,
    error: Option<Value>,
) -> Event {
    let data = CompactionEndData {
        compaction_id: compaction_id.to_owned(),
        turn: owner(turn),
        source_command_id: None,
        error,
        extra: Extra::new(),
    };
    Event::new(seq, time, EventData::CompactionEnd(Box::new(data)))
}

/// What the summariser answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub text: String,
    pub provider: String,
    pub model: String,
    /// The call's usage as the log writes it, when the provider reported one.
    pub usage: Option<Value>,
}

/// The checkpoint message that replaces a range: the opening, the summary, the closing.
pub fn checkpoint_message(compaction_id: &str, summary: &str) -> Message {
    let mut extra = Extra::new();
    extra.insert("compactionId".to_owned(), json!(compaction_id));
    Message {
        id: Some(format!("checkpoint-{compaction_id}")),
        role: Some("user".into()),
        content: vec![
            ContentBlock::text(CHECKPOINT_OPENING),
            ContentBlock::text(summary),
            ContentBlock::text(CHECKPOINT_CLOSING),
        ],
        source: Some(Source {
            kind: "plugin".into(),
            plugin: Some("compact".into()),
            provider: None,
            model: None,
            call_id: None,
            extra,
        }),
        extra: Extra::new(),
    }
}

/// `compaction/summary`, the checkpoint `user/message` and `compaction/end`, from `next`.
/// The checkpoint's `sourceEventSeqs` cite the start, the summary and every shadowed seq.
pub fn finish_events(
    next: u64,
    time: i64,
    compaction_id: &str,
    turn: Option<u64>,
    start_seq: u64,
    range: &CompactRange,
    summary: &Summary,
) -> Vec<Event> {
    let data = CompactionSummaryData {
        compaction_id: compaction_id.to_owned(),
        summary: json!([{ "type": "text", "text": summary.text }]),
        shadowed_range: SeqRange {
            start: range.start_seq,
            end: range.end_seq,
            extra: Extra::new(),
        },
        shadowed_seqs: range.shadowed_seqs.clone(),
        shadowed_token_count: range.shadowed_tokens,
        provider: summary.provider.clone(),
        model: summary.model.clone(),
        source_command_id: None,
        max_tokens: None,
        usage: summary.usage.clone(),
        // The model's raw output is content blocks, like `summary` (a string is refused).
        raw_output: Some(json!([{ "type": "text", "text": summary.text }])),
        llm_stream_call: Some(true),
        extra: Extra::new(),
    };
    let summary_event = Event::new(next, time, EventData::CompactionSummary(Box::new(data)));
    let mut sources = vec![start_seq, next];
    sources.extend(&range.shadowed_seqs);
    let message = checkpoint_message(compaction_id, &summary.text);
    let checkpoint = Event::new(next + 1, time, EventData::UserMessage(Box::new(message)))
        .with_surface_op(SurfaceOp::Replace {
            start_seq: range.start_seq,
            end_seq: range.end_seq,
        })
        .with_sources(sources);
    let end = end_event(next + 2, time, compaction_id, turn, None);
    vec![summary_event, checkpoint, end]
}

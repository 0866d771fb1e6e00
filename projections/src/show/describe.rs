//! One-line descriptions for `show`: markers, reasons, failures and attachments, and the
//! cutting of long bodies.

use serde_json::Value;
use sessionlog_format::message::AttachmentBlock;
use sessionlog_format::stream::{StreamChunk, StreamRecord};
use sessionlog_format::{ContentBlock, EventType, Message};

use super::{Body, CompactionMarker, Marker, PromptText};

/// A one-line excerpt (the first line of a prompt, an error) keeps at most this many chars.
const EXCERPT_CHARS_MAX: usize = 100;

impl Marker {
    /// The marker's kind as `--json` names it.
    pub fn name(&self) -> &'static str {
        match self {
            Marker::TurnStart { .. } => "turn-start",
            Marker::TurnEnd { .. } => "turn-end",
            Marker::Prompt(_) => "prompt",
            Marker::PromptAppend(_) => "prompt-append",
            Marker::PromptRewrite { .. } => "prompt-rewrite",
            Marker::PromptClear { .. } => "prompt-clear",
            Marker::Compaction(_) => "compaction",
            Marker::Prune { .. } => "prune",
            Marker::Attempt { .. } => "attempt",
            Marker::Retry { .. } => "retry",
            Marker::Replace { .. } => "replace",
        }
    }

    /// The marker as one line of text, without a newline.
    pub fn describe(&self) -> String {
        match self {
            Marker::TurnStart { turn } => format!("turn {turn}"),
            Marker::TurnEnd { turn, reason } => format!("turn {turn} ended: {reason}"),
            Marker::Prompt(p) => format!("system prompt{}", p.describe()),
            Marker::PromptAppend(p) => format!("system prompt appended{}", p.describe()),
            Marker::PromptRewrite {
                replaced_seq,
                head,
                prompt,
            } => {
                let what = if *head { "head " } else { "" };
                let rest = prompt.describe();
                format!("system prompt rewritten ({what}#{replaced_seq} replaced){rest}")
            }
            Marker::PromptClear {
                replaced_seq: Some(seq),
            } => format!("system prompt cleared (#{seq} replaced by an empty node)"),
            Marker::PromptClear { replaced_seq: None } => {
                "system prompt cleared (an empty node appended)".to_owned()
            }
            Marker::Compaction(c) => c.describe(),
            Marker::Prune {
                shadowed_seqs,
                shadowed_tokens,
                rewrite_seq,
            } => {
                let seqs = seq_list(shadowed_seqs);
                let copy = rewrite_seq.map_or(String::new(), |s| format!(", model copy #{s}"));
                format!("tool result {seqs} pruned (~{shadowed_tokens} tokens){copy}")
            }
            Marker::Attempt { finish } => format!("model call settled without a message: {finish}"),
            Marker::Retry {
                retry,
                retries_max,
                delay_ms,
                failure,
            } => {
                let number = retry.map_or(String::new(), |n| format!(" {n}"));
                let of = retries_max.map_or(String::new(), |n| format!(" of {n}"));
                let delay = delay_ms.map_or(String::new(), |ms| format!(" in {ms} ms"));
                format!("retry{number}{of}{delay} after {failure}")
            }
            Marker::Replace {
                event_type,
                start_seq,
                end_seq,
            } => format!("{event_type} replaced #{start_seq}..#{end_seq} (model-only copy)"),
        }
    }
}

impl PromptText {
    pub(super) fn of(message: &Message) -> PromptText {
        let text = plain_text(&message.content);
        PromptText {
            size_bytes: text.len() as u64,
            excerpt: excerpt(&text),
        }
    }

    fn describe(&self) -> String {
        if self.size_bytes == 0 {
            return ": (empty)".to_owned();
        }
        format!(" ({} bytes): {}", self.size_bytes, self.excerpt)
    }
}

impl CompactionMarker {
    fn describe(&self) -> String {
        let id = &self.id;
        if let Some(error) = &self.error {
            return format!("compaction {id} failed: {error}");
        }
        let span = format!(
            "{} nodes {} (~{} tokens)",
            self.shadowed_seqs.len(),
            seq_span(&self.shadowed_seqs),
            self.shadowed_tokens
        );
        match (self.checkpoint_seq, self.end_seq) {
            (Some(checkpoint), _) => format!(
                "compaction {id}: {span} replaced by a {}-byte summary, checkpoint #{checkpoint}",
                self.summary_bytes
            ),
            (None, Some(_)) => format!("compaction {id} ended without a checkpoint"),
            (None, None) => format!("compaction {id} started, not ended"),
        }
    }
}

/// `text` cut after `bytes_max` bytes, at the char boundary at or before it.
pub(super) fn cut(text: &str, bytes_max: Option<usize>) -> Body {
    let Some(bytes_max) = bytes_max.filter(|&max| text.len() > max) else {
        return Body {
            text: text.to_owned(),
            cut_bytes: 0,
        };
    };
    let mut end = bytes_max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let kept = &text[..end];
    assert!(kept.len() <= bytes_max);
    Body {
        text: kept.to_owned(),
        cut_bytes: (text.len() - kept.len()) as u64,
    }
}

/// The first non-blank line of `text`, trimmed and cut to [`EXCERPT_CHARS_MAX`] chars; `...`
/// marks that more followed.
pub(super) fn excerpt(text: &str) -> String {
    let mut lines = text.lines().map(str::trim).skip_while(|l| l.is_empty());
    let first = lines.next().unwrap_or("");
    let more_lines = lines.any(|l| !l.is_empty());
    let short: String = first.chars().take(EXCERPT_CHARS_MAX).collect();
    if short.len() < first.len() || more_lines {
        format!("{short}...")
    } else {
        short
    }
}

/// The text blocks of `content`, joined by newlines.
pub(super) fn plain_text(content: &[ContentBlock]) -> String {
    let texts: Vec<&str> = content.iter().filter_map(ContentBlock::as_text).collect();
    texts.join("\n")
}

/// A nested block of a tool result as one piece of text.
pub(super) fn nested_text(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(b) | ContentBlock::Reasoning(b) => b.text.clone(),
        ContentBlock::Image(a) => format!("[{}]", describe_attachment("image", a)),
        ContentBlock::File(a) => format!("[{}]", describe_attachment("file", a)),
        ContentBlock::ToolCall(b) => format!("[tool call {} {}]", b.name, b.id),
        ContentBlock::ToolResult(b) => format!("[tool result {}]", b.tool_call_id),
        ContentBlock::Other(_) => format!("[{} block]", block.tag()),
    }
}

/// `image image/png 1x1, 69 bytes, sha256:b1ff9c8ea3a7`: what the attachment says of itself.
pub(super) fn describe_attachment(kind: &str, block: &AttachmentBlock) -> String {
    let a = &block.attachment;
    let mut parts = vec![kind.to_owned()];
    let mut head = Vec::new();
    for key in ["name", "mediaType"] {
        if let Some(value) = a.get(key).and_then(Value::as_str) {
            head.push(excerpt(value));
        }
    }
    if let (Some(w), Some(h)) = (a.get("width"), a.get("height")) {
        head.push(format!("{w}x{h}"));
    }
    if !head.is_empty() {
        parts.push(head.join(" "));
    }
    let mut details = Vec::new();
    if let Some(bytes) = a.get("bytes").and_then(Value::as_u64) {
        details.push(format!("{bytes} bytes"));
    }
    if let Some(id) = a.get("attachmentId").and_then(Value::as_str) {
        details.push(id.chars().take("sha256:".len() + 12).collect());
    }
    if block.offloaded == Some(true) {
        details.push("offloaded".to_owned());
    }
    let mut text = parts.join(" ");
    if !details.is_empty() {
        text = format!("{text}, {}", details.join(", "));
    }
    text
}

/// The source kind, with the plugin's name for a plugin source and the form (or the
/// instructions trigger, or the skill) of an injected message
/// ([`crate::sources::source_label`]).
pub(super) fn source_label(message: &Message) -> String {
    match &message.source {
        Some(source) => crate::sources::source_label(source),
        None => String::new(),
    }
}

/// The role a surface type implies, for a message that does not name one (V0).
pub(super) fn role_of(kind: &EventType) -> String {
    match kind {
        EventType::AssistantMessage => "assistant",
        EventType::SystemMessage => "system",
        _ => "user",
    }
    .to_owned()
}

/// `completed`, `aborted (user)`, `aborted (hook: reason)`, `error: message`.
pub(super) fn describe_reason(reason: &Value) -> String {
    let kind = reason
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    if let Some(error) = reason.get("error") {
        return format!("{kind}: {}", excerpt(&describe_failure(error)));
    }
    match reason.get("reason") {
        Some(Value::String(text)) => format!("{kind} ({})", excerpt(text)),
        Some(inner @ Value::Object(_)) => {
            let inner_kind = inner
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("unknown");
            match inner.get("reason").and_then(Value::as_str) {
                Some(text) => format!("{kind} ({inner_kind}: {})", excerpt(text)),
                None => format!("{kind} ({inner_kind})"),
            }
        }
        _ => kind.to_owned(),
    }
}

/// A failure or error value as text: `CODE: message`, or what there is of it.
pub(super) fn describe_failure(failure: &Value) -> String {
    match failure {
        Value::String(text) => text.clone(),
        Value::Array(chain) => chain.first().map_or(String::new(), describe_failure),
        Value::Object(object) => {
            let code = object.get("code").and_then(Value::as_str);
            let message = object.get("message").and_then(Value::as_str);
            match (code, message) {
                (Some(code), Some(message)) => format!("{code}: {message}"),
                (Some(text), None) | (None, Some(text)) => text.to_owned(),
                (None, None) => failure.to_string(),
            }
        }
        other => other.to_string(),
    }
}

/// Why a stream finished: the last `finish` chunk's kind and failure.
pub(super) fn describe_finish(stream: &[StreamRecord]) -> String {
    let finish = stream.iter().rev().find_map(|record| match record {
        StreamRecord::Chunk(raw) => match &raw.chunk {
            StreamChunk::Finish(finish) => Some(&finish.reason),
            _ => None,
        },
        _ => None,
    });
    let Some(reason) = finish else {
        return "no finish recorded".to_owned();
    };
    let kind = reason
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    match reason.get("failure") {
        Some(failure) => format!("{kind}: {}", excerpt(&describe_failure(failure))),
        None => kind.to_owned(),
    }
}

pub(super) fn retry_marker(data: &Value) -> Marker {
    let failure = data
        .get("failure")
        .map_or_else(|| "a failure".to_owned(), |f| excerpt(&describe_failure(f)));
    Marker::Retry {
        retry: data.get("retry").and_then(Value::as_u64),
        retries_max: data.get("maxRetries").and_then(Value::as_u64),
        delay_ms: data.get("delayMs").and_then(Value::as_u64),
        failure,
    }
}

/// Text bytes of a summary: content blocks, or a string.
pub(super) fn summary_bytes(summary: &Value) -> u64 {
    match summary {
        Value::String(text) => text.len() as u64,
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .map(|t| t.len() as u64)
            .sum(),
        other => other.to_string().len() as u64,
    }
}

/// `#13` or `#13, #14`.
pub(super) fn seq_list(seqs: &[u64]) -> String {
    let seqs: Vec<String> = seqs.iter().map(|s| format!("#{s}")).collect();
    seqs.join(", ")
}

/// `#4..#74` (first and last in surface order), or `#4` for one node.
pub(super) fn seq_span(seqs: &[u64]) -> String {
    match (seqs.first(), seqs.last()) {
        (Some(first), Some(last)) if first != last => format!("#{first}..#{last}"),
        (Some(first), _) => format!("#{first}"),
        _ => "(none)".to_owned(),
    }
}

//! `show`: a session as a readable transcript: its append nodes, plus one-line markers.
//!
//! Spec 7.2: the events whose `surfaceOp` is `append` form the human transcript; replacement
//! copies are for the model only. So every appended user, assistant and tool node becomes a
//! message entry, and everything else that matters to a reader (turn boundaries, the system
//! prompt and its changes, compactions, prunes, settled attempts, retries, other replaces)
//! becomes a marker: data here, one line when printed. A replacement copy is never a message.
//!
//! The transcript is built by [`TranscriptBuilder`], a fold over V3 events in seq order; files
//! of older versions are migrated in memory first.

mod describe;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;

use sessionlog_format::message::ToolResultBlock;
use sessionlog_format::payload::{
    CompactionEndData, CompactionPruneData, CompactionSummaryData, SystemMessageData,
};
use sessionlog_format::{ContentBlock, Event, EventData, EventType, Message, SurfaceOp};

use sessionlog_format::projection::{Flow, Projection, Replay};

use self::describe::{
    cut, describe_attachment, describe_failure, describe_finish, describe_reason, excerpt,
    nested_text, retry_marker, role_of, source_label, summary_bytes,
};

/// The default cut of one body (a text, reasoning, tool-call arguments or a tool result).
pub const BODY_BYTES_MAX_DEFAULT: usize = 2000;

/// How `show` renders bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShowOptions {
    /// Cut each body after this many bytes (at a char boundary); `None` never cuts.
    pub body_bytes_max: Option<usize>,
}

impl Default for ShowOptions {
    fn default() -> ShowOptions {
        ShowOptions {
            body_bytes_max: Some(BODY_BYTES_MAX_DEFAULT),
        }
    }
}

/// A session's transcript: entries in seq order.
#[derive(Debug, Clone, PartialEq)]
pub struct Transcript {
    pub session: String,
    /// A normalized recording (seq = row index, time = 0).
    pub snapshot: bool,
    pub entries: Vec<Entry>,
}

/// One message or marker, at the seq of the event it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub seq: u64,
    /// The turn and step the event belongs to, when known.
    pub turn: Option<u64>,
    pub step: Option<u64>,
    pub body: EntryBody,
}

#[derive(Debug, Clone, PartialEq)]
pub enum EntryBody {
    Message(MessageEntry),
    Marker(Marker),
}

/// An appended user, assistant or tool node.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageEntry {
    /// `user`, `assistant`, or `tool` for a `tool/result` (whose message role is `user` in V3).
    pub role: String,
    /// The source kind, followed by the plugin's name for a plugin source.
    pub source: String,
    /// The assistant message was cut short (`interrupted: true`).
    pub interrupted: bool,
    pub blocks: Vec<Block>,
}

/// One content block, as readable text.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Text(Body),
    Reasoning(Body),
    ToolCall {
        id: String,
        name: String,
        arguments: Body,
    },
    /// A tool's result: its nested blocks joined, one per line.
    ToolResult {
        tool_call_id: String,
        /// The tool's name, from the call seen earlier in the turn.
        name: Option<String>,
        is_error: bool,
        content: Body,
    },
    /// An image or a file: a one-line placeholder.
    Attachment {
        kind: &'static str,
        description: String,
    },
    /// A block type this build does not know, by its `type` tag.
    Other {
        tag: String,
    },
}

/// A text, possibly cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Body {
    pub text: String,
    /// Bytes cut from the end; 0 when the text is whole.
    pub cut_bytes: u64,
}

/// Something a reader should know that is not an appended message.
#[derive(Debug, Clone, PartialEq)]
pub enum Marker {
    TurnStart {
        turn: u64,
    },
    TurnEnd {
        turn: u64,
        /// The reason's kind, with its detail (`aborted (user)`, `error: ...`).
        reason: String,
    },
    /// The session's first system node, shown once.
    Prompt(PromptText),
    /// A system node appended after the history (the in-history route, spec 7.5 rule 3).
    PromptAppend(PromptText),
    /// A non-empty system node replacing `replaced_seq` (a head rewrite when `head`).
    PromptRewrite {
        replaced_seq: u64,
        head: bool,
        prompt: PromptText,
    },
    /// An empty system node: the prompt at `replaced_seq` (if any) no longer counts.
    PromptClear {
        replaced_seq: Option<u64>,
    },
    Compaction(CompactionMarker),
    /// `compaction/prune`: tool results rewritten for the model.
    Prune {
        shadowed_seqs: Vec<u64>,
        shadowed_tokens: u64,
        /// The `tool/result` copy that replaced them.
        rewrite_seq: Option<u64>,
    },
    /// `assistant/attempt`: a settled model call without a message; `finish` says why.
    Attempt {
        finish: String,
    },
    /// `llm/retry`: a retry scheduled after a failure.
    Retry {
        retry: Option<u64>,
        retries_max: Option<u64>,
        delay_ms: Option<u64>,
        failure: String,
    },
    /// Any other replacement copy (model-only).
    Replace {
        event_type: String,
        start_seq: u64,
        end_seq: u64,
    },
}

/// A system prompt's size and first line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptText {
    pub size_bytes: u64,
    pub excerpt: String,
}

/// One compaction, from `compaction/start` through `compaction/end` (spec 13.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionMarker {
    pub id: String,
    pub shadowed_seqs: Vec<u64>,
    pub shadowed_tokens: u64,
    /// Text bytes of the summary.
    pub summary_bytes: u64,
    /// The checkpoint `user/message` that replaced the span.
    pub checkpoint_seq: Option<u64>,
    pub end_seq: Option<u64>,
    /// The error of a failed compaction.
    pub error: Option<String>,
}

/// Builds a transcript from V3 events pushed in seq order.
pub struct TranscriptBuilder {
    options: ShowOptions,
    transcript: Transcript,
    /// The turn and step open in the log.
    turn: Option<u64>,
    step: Option<u64>,
    /// The turn and step the event being pushed names itself, if any.
    place: Option<(u64, u64)>,
    /// The live system head (node 0), once a system node was seen.
    head_seq: Option<u64>,
    /// Tool names by call id, for the results; emptied at each turn's end.
    tool_names: HashMap<String, String>,
    /// Entry index of the compaction still open.
    compaction_idx: Option<usize>,
    /// Entry index of the prune whose rewrite has not come yet.
    prune_idx: Option<usize>,
}

impl TranscriptBuilder {
    pub fn new(session: &str, snapshot: bool, options: ShowOptions) -> TranscriptBuilder {
        TranscriptBuilder {
            options,
            transcript: Transcript {
                session: session.to_owned(),
                snapshot,
                entries: Vec::new(),
            },
            turn: None,
            step: None,
            place: None,
            head_seq: None,
            tool_names: HashMap::new(),
            compaction_idx: None,
            prune_idx: None,
        }
    }

    /// Folds the next event.
    pub fn push(&mut self, event: &Event) {
        debug_assert!(
            self.transcript
                .entries
                .last()
                .is_none_or(|e| e.seq < event.seq),
            "events come in seq order"
        );
        // A replacement copy repeats the turn and step of the node it replaces; the others
        // name their own.
        self.place = match event.surface_op {
            Some(SurfaceOp::Replace { .. }) => None,
            _ => event.data.turn_step(),
        };
        match &event.data {
            EventData::TurnStart(d) => {
                self.turn = Some(d.turn);
                self.step = None;
                self.mark(event, Marker::TurnStart { turn: d.turn });
            }
            EventData::TurnEnd(d) => {
                let reason = describe_reason(&d.reason);
                self.turn = Some(d.turn);
                self.mark(
                    event,
                    Marker::TurnEnd {
                        turn: d.turn,
                        reason,
                    },
                );
                self.turn = None;
                self.step = None;
                self.tool_names.clear();
            }
            EventData::StepStart(d) => {
                self.turn = Some(d.turn);
                self.step = Some(d.step);
            }
            EventData::StepEnd(_) => self.step = None,
            EventData::SystemMessage(d) => self.system(event, d),
            EventData::UserMessage(_)
            | EventData::AssistantMessage(_)
            | EventData::ToolResult(_) => self.surface(event),
            EventData::AssistantAttempt(d) => {
                let finish = describe_finish(&d.stream);
                self.mark(event, Marker::Attempt { finish });
            }
            EventData::CompactionStart(d) => {
                let marker = CompactionMarker {
                    id: d.compaction_id.clone(),
                    shadowed_seqs: Vec::new(),
                    shadowed_tokens: 0,
                    summary_bytes: 0,
                    checkpoint_seq: None,
                    end_seq: None,
                    error: None,
                };
                self.mark(event, Marker::Compaction(marker));
                self.compaction_idx = Some(self.transcript.entries.len() - 1);
            }
            EventData::CompactionSummary(d) => self.compaction_summary(d),
            EventData::CompactionEnd(d) => self.compaction_end(event.seq, d),
            EventData::CompactionPrune(d) => self.prune(event, d),
            EventData::Other(value) if event.kind == EventType::LlmRetry => {
                self.mark(event, retry_marker(value))
            }
            _ => {}
        }
    }

    pub fn finish(self) -> Transcript {
        self.transcript
    }

    /// The entries so far.
    pub fn entries(&self) -> &[Entry] {
        &self.transcript.entries
    }

    /// No entry is still being completed by later events (an open compaction, a prune
    /// waiting for its rewrite): the entries so far are final.
    pub fn is_settled(&self) -> bool {
        self.compaction_idx.is_none() && self.prune_idx.is_none()
    }

    fn mark(&mut self, event: &Event, marker: Marker) {
        self.add(event.seq, EntryBody::Marker(marker));
    }

    fn add(&mut self, seq: u64, body: EntryBody) {
        let (turn, step) = match self.place {
            Some((turn, step)) => (Some(turn), Some(step)),
            None => (self.turn, self.step),
        };
        self.transcript.entries.push(Entry {
            seq,
            turn,
            step,
            body,
        });
    }

    /// The compaction still open, if any.
    fn open_compaction(&mut self) -> Option<&mut CompactionMarker> {
        let entry = self.transcript.entries.get_mut(self.compaction_idx?)?;
        match &mut entry.body {
            EntryBody::Marker(Marker::Compaction(c)) => Some(c),
            _ => None,
        }
    }

    fn system(&mut self, event: &Event, data: &SystemMessageData) {
        let empty = data.message.content.is_empty();
        let marker = match event.surface_op {
            Some(SurfaceOp::Replace { start_seq, .. }) => {
                let head = self.head_seq == Some(start_seq);
                if head {
                    self.head_seq = Some(event.seq);
                }
                if empty {
                    Marker::PromptClear {
                        replaced_seq: Some(start_seq),
                    }
                } else {
                    Marker::PromptRewrite {
                        replaced_seq: start_seq,
                        head,
                        prompt: PromptText::of(&data.message),
                    }
                }
            }
            Some(SurfaceOp::Append) | None => {
                if self.head_seq.is_none() {
                    self.head_seq = Some(event.seq);
                    Marker::Prompt(PromptText::of(&data.message))
                } else if empty {
                    Marker::PromptClear { replaced_seq: None }
                } else {
                    Marker::PromptAppend(PromptText::of(&data.message))
                }
            }
        };
        self.mark(event, marker);
    }

    /// A user, assistant or tool node: a message when appended, else at most a marker.
    fn surface(&mut self, event: &Event) {
        let Some(message) = event.message() else {
            return;
        };
        match event.surface_op {
            Some(SurfaceOp::Append) => {
                let entry = self.message_entry(event, message);
                self.add(event.seq, EntryBody::Message(entry));
            }
            Some(SurfaceOp::Replace { start_seq, end_seq }) => {
                self.replacement(event, start_seq, end_seq)
            }
            // Not on the surface at all (only a malformed log gets here): not for the reader.
            None => {}
        }
    }

    /// A replacement copy: folded into the open compaction or prune, or its own marker.
    fn replacement(&mut self, event: &Event, start_seq: u64, end_seq: u64) {
        if event.kind == EventType::UserMessage {
            if let Some(c) = self.open_compaction() {
                c.checkpoint_seq = Some(event.seq);
                return;
            }
        }
        if event.kind == EventType::ToolResult && self.rewrite_pending_prune(event.seq, start_seq) {
            return;
        }
        let marker = Marker::Replace {
            event_type: event.kind.as_str().to_owned(),
            start_seq,
            end_seq,
        };
        self.mark(event, marker);
    }

    /// Records `seq` as the copy of the pending prune, if it prunes `start_seq`.
    fn rewrite_pending_prune(&mut self, seq: u64, start_seq: u64) -> bool {
        let Some(entry) = self
            .prune_idx
            .and_then(|idx| self.transcript.entries.get_mut(idx))
        else {
            return false;
        };
        let EntryBody::Marker(Marker::Prune {
            shadowed_seqs,
            rewrite_seq,
            ..
        }) = &mut entry.body
        else {
            return false;
        };
        if !shadowed_seqs.contains(&start_seq) {
            return false;
        }
        *rewrite_seq = Some(seq);
        self.prune_idx = None;
        true
    }

    fn compaction_summary(&mut self, data: &CompactionSummaryData) {
        if let Some(c) = self.open_compaction() {
            c.shadowed_seqs = data.shadowed_seqs.clone();
            c.shadowed_tokens = data.shadowed_token_count;
            c.summary_bytes = summary_bytes(&data.summary);
        }
    }

    fn compaction_end(&mut self, seq: u64, data: &CompactionEndData) {
        let error = data.error.as_ref().map(|e| excerpt(&describe_failure(e)));
        if let Some(c) = self.open_compaction() {
            c.end_seq = Some(seq);
            c.error = error;
        }
        self.compaction_idx = None;
    }

    fn prune(&mut self, event: &Event, data: &CompactionPruneData) {
        let marker = Marker::Prune {
            shadowed_seqs: data.shadowed_seqs.clone(),
            shadowed_tokens: data.shadowed_token_count,
            rewrite_seq: None,
        };
        self.mark(event, marker);
        self.prune_idx = Some(self.transcript.entries.len() - 1);
    }

    fn message_entry(&mut self, event: &Event, message: &Message) -> MessageEntry {
        let role = match event.kind {
            EventType::ToolResult => "tool".to_owned(),
            _ => message.role.clone().unwrap_or_else(|| role_of(&event.kind)),
        };
        let interrupted = match &event.data {
            EventData::AssistantMessage(d) => d.interrupted == Some(true),
            _ => false,
        };
        let blocks = message.content.iter().map(|b| self.block(b)).collect();
        MessageEntry {
            role,
            source: source_label(message),
            interrupted,
            blocks,
        }
    }

    fn block(&mut self, block: &ContentBlock) -> Block {
        match block {
            ContentBlock::Text(b) => Block::Text(self.body(&b.text)),
            ContentBlock::Reasoning(b) => Block::Reasoning(self.body(&b.text)),
            ContentBlock::ToolCall(b) => {
                self.tool_names.insert(b.id.clone(), b.name.clone());
                Block::ToolCall {
                    id: b.id.clone(),
                    name: b.name.clone(),
                    arguments: self.body(&b.arguments),
                }
            }
            ContentBlock::ToolResult(b) => self.tool_result(b),
            ContentBlock::Image(a) => Block::Attachment {
                kind: "image",
                description: describe_attachment("image", a),
            },
            ContentBlock::File(a) => Block::Attachment {
                kind: "file",
                description: describe_attachment("file", a),
            },
            ContentBlock::Other(_) => Block::Other {
                tag: block.tag().to_owned(),
            },
        }
    }

    fn tool_result(&self, block: &ToolResultBlock) -> Block {
        let text: Vec<String> = block.content.iter().map(nested_text).collect();
        Block::ToolResult {
            tool_call_id: block.tool_call_id.clone(),
            name: self.tool_names.get(&block.tool_call_id).cloned(),
            is_error: block.is_error == Some(true),
            content: self.body(&text.join("\n")),
        }
    }

    fn body(&self, text: &str) -> Body {
        cut(text, self.options.body_bytes_max)
    }
}

/// The transcript of a file (any version, migrated in memory) or of a stored session.
pub fn show<R: Replay>(source: R, options: ShowOptions) -> Result<Transcript, R::Error> {
    let builder = source
        .replay(|opening| TranscriptBuilder::new(opening.session(), opening.snapshot, options))?;
    Ok(builder.finish())
}

impl Projection for TranscriptBuilder {
    type Error = std::convert::Infallible;

    fn push(&mut self, event: Arc<Event>) -> Result<Flow, Self::Error> {
        TranscriptBuilder::push(self, &event);
        Ok(Flow::Continue)
    }
}

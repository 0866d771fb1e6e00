//! The system-prompt projection (in-history note, "The decision rule"; spec 7.5): the ordered
//! per-node commits for a rendering, and those commits as V3 `system/message` events.
//!
//! | route | state | commits |
//! |---|---|---|
//! | any | no surviving system node | append the rendering, even when empty (reserve the head) |
//! | any | empty rendering | empty each active later node, then the head if active |
//! | none | non-empty rendering | empty each active later node, then rewrite the head if needed |
//! | in-history | new series, non-empty | the same consolidation, even when the text is unchanged |
//! | in-history | series continues | append when the effective text differs, else nothing |
//!
//! The effective text is the latest active (non-empty) system node's, falling back to the
//! head; dormant empty nodes supply nothing and are never emptied again.

use sessionlog_format::payload::SystemMessageData;
use sessionlog_format::surface::NodeKind;
use sessionlog_format::{
    ContentBlock, Event, EventData, Extra, Message, SessionFold, Source, SurfaceOp,
};

use super::PROMPT_PLUGIN;

/// One surviving system node, in surface order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemNode {
    pub seq: u64,
    /// The text of its blocks, joined.
    pub text: String,
    /// Whether its content is non-empty, so that it derives a message.
    pub active: bool,
}

/// The route and series state a projection decides with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProjectOptions {
    /// The prepared call's route declares `systemPromptUpdate: in-history`.
    pub in_history: bool,
    /// This request starts a new series (see [`super::series`]).
    pub starts_series: bool,
}

/// One per-node commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Commit {
    /// Append a new `system/message` node holding `text` (empty text: no content).
    Append { text: String },
    /// Replace exactly the node `seq` by a `system/message` holding `text`.
    Replace { seq: u64, text: String },
}

impl Commit {
    pub fn text(&self) -> &str {
        match self {
            Commit::Append { text } | Commit::Replace { text, .. } => text,
        }
    }
}

/// The surviving system nodes of a fold, in surface order.
pub fn system_nodes(fold: &SessionFold) -> Vec<SystemNode> {
    let nodes = fold.admission().surface().nodes();
    let system = nodes.iter().filter(|n| n.kind == NodeKind::System);
    system
        .filter_map(|node| {
            let message = fold.live_event(node.seq)?.message()?;
            Some(SystemNode {
                seq: node.seq,
                text: message_text(message),
                active: !message.content.is_empty(),
            })
        })
        .collect()
}

/// The text blocks of a message, joined.
pub fn message_text(message: &Message) -> String {
    let texts: Vec<&str> = message
        .content
        .iter()
        .filter_map(ContentBlock::as_text)
        .collect();
    texts.concat()
}

/// The effective prompt: the latest active node's text, falling back to the head's; `None`
/// when no node is active (no prompt).
pub fn effective_text(nodes: &[SystemNode]) -> Option<&str> {
    nodes
        .iter()
        .rev()
        .find(|n| n.active)
        .map(|n| n.text.as_str())
}

/// The seq of the effective node: the latest active surviving system node.
pub fn effective_seq(nodes: &[SystemNode]) -> Option<u64> {
    nodes.iter().rev().find(|n| n.active).map(|n| n.seq)
}

/// `SystemPromptProjection.project`: the ordered commits that make `rendered` the effective
/// prompt of the surface whose surviving system nodes are `nodes`.
pub fn project(nodes: &[SystemNode], rendered: &str, options: ProjectOptions) -> Vec<Commit> {
    let Some((head, later)) = nodes.split_first() else {
        // Reserve the head, even for an empty rendering.
        return vec![Commit::Append {
            text: rendered.to_owned(),
        }];
    };
    let empty_later = || {
        later.iter().filter(|n| n.active).map(|n| Commit::Replace {
            seq: n.seq,
            text: String::new(),
        })
    };
    if rendered.is_empty() {
        let mut commits: Vec<Commit> = empty_later().collect();
        if head.active {
            commits.push(Commit::Replace {
                seq: head.seq,
                text: String::new(),
            });
        }
        return commits;
    }
    if !options.in_history || options.starts_series {
        // Consolidate into node 0, even when the effective text is unchanged.
        let mut commits: Vec<Commit> = empty_later().collect();
        if !(head.active && head.text == rendered) {
            commits.push(Commit::Replace {
                seq: head.seq,
                text: rendered.to_owned(),
            });
        }
        return commits;
    }
    if effective_text(nodes) == Some(rendered) {
        return Vec::new();
    }
    vec![Commit::Append {
        text: rendered.to_owned(),
    }]
}

/// Where the events of a step go: the next seq, the time and the open step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventStamp {
    pub next_seq: u64,
    pub time: i64,
    pub turn: u64,
    pub step: u64,
}

/// A `system/message` carrying `text` (no content when empty), owned by the prompt plugin.
pub fn system_message(id: String, text: &str) -> Message {
    let content = if text.is_empty() {
        Vec::new()
    } else {
        vec![ContentBlock::text(text)]
    };
    Message {
        id: Some(id),
        role: Some("system".to_owned()),
        content,
        source: Some(plugin_source()),
        extra: Extra::new(),
    }
}

/// `{kind: plugin, plugin: PROMPT_PLUGIN}`.
pub fn plugin_source() -> Source {
    Source {
        kind: "plugin".to_owned(),
        plugin: Some(PROMPT_PLUGIN.to_owned()),
        provider: None,
        model: None,
        call_id: None,
        extra: Extra::new(),
    }
}

/// The commits as `system/message` events from `stamp.next_seq` on: an append with
/// `surfaceOp: append`, a replacement with `{op: replace, startSeq: n, endSeq: n}` and
/// `sourceEventSeqs: [n]`.
pub fn commit_events(commits: &[Commit], stamp: EventStamp) -> Vec<Event> {
    let mut events = Vec::with_capacity(commits.len());
    for (commit_idx, commit) in commits.iter().enumerate() {
        let seq = stamp.next_seq + commit_idx as u64;
        let data = SystemMessageData {
            turn: stamp.turn,
            step: stamp.step,
            message: system_message(format!("system-prompt-{seq}"), commit.text()),
            extra: Extra::new(),
        };
        let event = Event::new(seq, stamp.time, EventData::SystemMessage(Box::new(data)));
        events.push(match commit {
            Commit::Append { .. } => event.with_surface_op(SurfaceOp::Append),
            Commit::Replace { seq: target, .. } => event
                .with_surface_op(SurfaceOp::Replace {
                    start_seq: *target,
                    end_seq: *target,
                })
                .with_sources(vec![*target]),
        });
    }
    events
}

#[cfg(test)]
#[path = "projection_tests.rs"]
mod tests;

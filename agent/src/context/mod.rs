//! Context as sourced user messages: facts that vary by workspace or moment never enter the
//! system prompt (that would rewrite message 0 and cost the prefix cache); they are appended
//! after the history as framed user messages whose `source` names where they came from.
//!
//! - [`instructions`]: project instructions (`AGENTS.md` / `CLAUDE.md`) under a byte budget,
//!   with change, removal and deeper-directory notes (`source.kind: agent-instructions`);
//! - [`skills`]: the skill catalog (`skill-catalog`), the `skill` tool, and `/skill-name`
//!   invocations in a user message (`skill-invocation`);
//! - [`notices`]: one-line notices for plan mode, approval policy and working directory
//!   (`plugin` sources with a `form`).
//!
//! The agent loop (`agent::turn`) decides where each lands in a step's batch.

use serde_json::Value;
use sessionlog_format::{ContentBlock, Extra, Message, Source};

pub mod instructions;
pub mod notices;
pub mod skills;

/// The frame around injected context.
pub const FRAME_OPEN: &str = "<system-reminder>";
/// The end of the frame.
pub const FRAME_CLOSE: &str = "</system-reminder>";

/// `body` inside the `<system-reminder>` frame.
pub fn framed(body: &str) -> String {
    format!("{FRAME_OPEN}\n{body}\n{FRAME_CLOSE}")
}

/// A source of `kind` with extra members.
pub fn source_of(kind: &str, extra: &[(&str, Value)]) -> Source {
    let mut members = Extra::new();
    for (name, value) in extra {
        members.insert((*name).to_owned(), value.clone());
    }
    Source {
        kind: kind.to_owned(),
        plugin: None,
        provider: None,
        model: None,
        call_id: None,
        extra: members,
    }
}

/// Whether `message` comes from `plugin`: a V3 plugin source (`kind:"plugin"` naming it), or
/// the producer kind the V3 -> V4 edge renames it to (`sessionlog_migrations::producer_kind`),
/// so that the agent recognises its own messages in sessions of either version.
pub fn is_from_plugin(message: &Message, plugin: &str) -> bool {
    let Some(source) = message.source.as_ref() else {
        return false;
    };
    if source.kind == "plugin" {
        return source.plugin.as_deref() == Some(plugin);
    }
    source.plugin.is_none()
        && source.kind == sessionlog_migrations::producer_kind(plugin, message.role.as_deref())
}

/// An injected user-role message.
pub fn injected(id: String, text: String, source: Source) -> Message {
    Message {
        id: Some(id),
        role: Some("user".to_owned()),
        content: vec![ContentBlock::text(text)],
        source: Some(source),
        extra: Extra::new(),
    }
}

pub use sessionlog_engine::sources::{is_injected, source_label};

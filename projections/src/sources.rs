//! Where a message came from, as the views print it: a message source's label, and whether a
//! user-role message was injected by the harness (the context layer of the agent crate writes
//! them; `requests` and `show` name them).

use serde_json::Value;
use sessionlog_format::{Message, Source};

/// How a message's source reads in `requests` and `show`: its kind, then the plugin's name
/// for a plugin source, then the form (or the instructions trigger, or the skill) when
/// present: `plugin sessionlog-agent/plan-mode`, `agent-instructions/baseline`,
/// `skill-invocation/review`.
pub fn source_label(source: &Source) -> String {
    let mut label = source.kind.clone();
    if let Some(plugin) = &source.plugin {
        label.push(' ');
        label.push_str(plugin);
    }
    for member in ["form", "trigger", "skill"] {
        if let Some(value) = source.extra.get(member).and_then(Value::as_str) {
            label.push('/');
            label.push_str(value);
            break;
        }
    }
    label
}

/// Whether a message is a user-role message injected by the harness rather than typed by the
/// user or returned by a tool (the system prompt's own nodes are not injections).
pub fn is_injected(message: &Message) -> bool {
    let Some(source) = message.source.as_ref() else {
        return false;
    };
    message.role.as_deref() == Some("user") && !matches!(source.kind.as_str(), "user" | "tool")
}

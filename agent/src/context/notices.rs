//! One-line notices instead of rewrites: plan mode, the approval policy and the working
//! directory. Each is a user-role message with a `plugin` source and a `form`, appended after
//! the history; none touches the system prompt's head or the tool list. (The tool-update and
//! model-switch notices are built by the loop, which compares its route and tools with the
//! request in force.)

use std::path::Path;

use serde_json::{json, Value};
use sessionlog_format::Message;

use super::injected;
use sessionlog_format::{Extra, Source};

/// The plugin name on the loop's notices.
pub const NOTICE_PLUGIN: &str = "sessionlog-agent";

/// The `form` of a plan-mode notice.
pub const PLAN_MODE_FORM: &str = "plan-mode";
/// The `form` of an approval-policy notice.
pub const APPROVAL_FORM: &str = "approval-policy";
/// The `form` of a working-directory notice.
pub const WORKING_DIRECTORY_FORM: &str = "working-directory";

/// The text of a plan-mode notice.
pub fn plan_mode_text(active: bool) -> &'static str {
    if active {
        "Plan mode is now on: investigate and propose a plan, and change no files until the \
         user accepts it; the tool list is unchanged on purpose."
    } else {
        "Plan mode is now off: you may change files again."
    }
}

/// The text of an approval-policy notice.
pub fn approval_text(from: &str, to: &str) -> String {
    format!("The approval policy changed from {from} to {to}; it applies from this message on.")
}

/// The text of a working-directory notice.
pub fn working_directory_text(from: &Path, to: &Path) -> String {
    format!(
        "The working directory changed from {} to {}; relative paths now resolve there.",
        from.display(),
        to.display()
    )
}

/// A notice message of `form` with extra source members.
pub fn notice(id: String, text: String, form: &str, extra: &[(&str, Value)]) -> Message {
    let mut members = Extra::new();
    members.insert("form".into(), Value::from(form));
    for (name, value) in extra {
        members.insert((*name).to_owned(), value.clone());
    }
    let source = Source {
        kind: "plugin".to_owned(),
        plugin: Some(NOTICE_PLUGIN.to_owned()),
        provider: None,
        model: None,
        call_id: None,
        extra: members,
    };
    injected(id, text, source)
}

pub fn plan_mode_notice(id: String, active: bool) -> Message {
    let extra = [("active", json!(active))];
    notice(
        id,
        plan_mode_text(active).to_owned(),
        PLAN_MODE_FORM,
        &extra,
    )
}

pub fn approval_notice(id: String, from: &str, to: &str) -> Message {
    let extra = [("from", json!(from)), ("to", json!(to))];
    notice(id, approval_text(from, to), APPROVAL_FORM, &extra)
}

pub fn working_directory_notice(id: String, from: &Path, to: &Path) -> Message {
    let extra = [
        ("from", json!(from.display().to_string())),
        ("to", json!(to.display().to_string())),
    ];
    notice(
        id,
        working_directory_text(from, to),
        WORKING_DIRECTORY_FORM,
        &extra,
    )
}

/// The form of a notice message of this loop, when it is one.
pub fn notice_form(message: &Message) -> Option<&str> {
    if !super::is_from_plugin(message, NOTICE_PLUGIN) {
        return None;
    }
    let source = message.source.as_ref()?;
    source.extra.get("form").and_then(Value::as_str)
}

/// What the latest notices of a session announced: plan mode, the approval policy and the
/// working directory (each `None` when never announced).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Announced {
    pub plan_mode: Option<bool>,
    pub approval: Option<String>,
    pub working_directory: Option<String>,
}

impl Announced {
    /// Reads the latest notice of each form from `messages`, in log order; an instructions
    /// baseline announces the working directory it was read in.
    pub fn restore<'m>(messages: impl Iterator<Item = &'m Message>) -> Announced {
        use super::instructions::{INSTRUCTIONS_SOURCE, WORKING_DIRECTORY_MEMBER};
        let mut out = Announced::default();
        for message in messages {
            let baseline_cwd = message
                .source
                .as_ref()
                .filter(|s| s.kind == INSTRUCTIONS_SOURCE)
                .and_then(|s| s.extra.get(WORKING_DIRECTORY_MEMBER)?.as_str());
            if let Some(cwd) = baseline_cwd {
                out.working_directory = Some(cwd.to_owned());
            }
            let Some(form) = notice_form(message) else {
                continue;
            };
            let extra = &message.source.as_ref().map(|s| &s.extra);
            let member = |name: &str| extra.and_then(|e| e.get(name)).cloned();
            match form {
                PLAN_MODE_FORM => out.plan_mode = member("active").and_then(|v| v.as_bool()),
                APPROVAL_FORM => {
                    out.approval = member("to").and_then(|v| v.as_str().map(str::to_owned))
                }
                WORKING_DIRECTORY_FORM => {
                    out.working_directory = member("to").and_then(|v| v.as_str().map(str::to_owned))
                }
                _ => {}
            }
        }
        out
    }
}

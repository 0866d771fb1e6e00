//! The prompt history of a session: every `system/message` as a version (initial, append,
//! rewrite or clear), and which one is effective now.
//!
//! Effective means effective now: the latest non-empty surviving system node in surface
//! order. When the prompt has been cleared, no version is effective.

use std::sync::Arc;

use sessionlog_format::relations::Identity;
use sessionlog_format::{Event, EventData, SessionFold, SurfaceOp, Violation};

use super::projection::{effective_seq, message_text, system_nodes};
use super::PromptError;
use sessionlog_engine::replay::{Flow, Projection, SessionSource};

/// How a version entered the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionKind {
    /// The first system node: the head.
    Initial,
    /// A later node appended in history.
    Append,
    /// A replacement with text (a head rewrite).
    Rewrite,
    /// A replacement without content.
    Clear,
}

impl VersionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            VersionKind::Initial => "initial",
            VersionKind::Append => "append",
            VersionKind::Rewrite => "rewrite",
            VersionKind::Clear => "clear",
        }
    }
}

/// One `system/message` of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptVersion {
    pub seq: u64,
    pub turn: u64,
    pub step: u64,
    pub kind: VersionKind,
    pub text: String,
    /// The effective prompt now.
    pub effective: bool,
    /// The node of another version this one replaced.
    pub replaces: Option<u64>,
}

/// The prompt history of one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptHistory {
    pub session: String,
    pub versions: Vec<PromptVersion>,
}

impl PromptHistory {
    /// The effective version, if the prompt is not cleared.
    pub fn effective(&self) -> Option<&PromptVersion> {
        self.versions.iter().find(|v| v.effective)
    }
}

/// The versions of `events`, given the fold at their end.
pub fn prompt_versions<'a>(
    events: impl IntoIterator<Item = &'a Event>,
    fold: &SessionFold,
) -> Vec<PromptVersion> {
    let effective = effective_seq(&system_nodes(fold));
    let mut versions: Vec<PromptVersion> = Vec::new();
    for event in events {
        let EventData::SystemMessage(data) = &event.data else {
            continue;
        };
        let (kind, replaces) = match event.surface_op {
            Some(SurfaceOp::Replace { start_seq, .. }) if data.message.content.is_empty() => {
                (VersionKind::Clear, Some(start_seq))
            }
            Some(SurfaceOp::Replace { start_seq, .. }) => (VersionKind::Rewrite, Some(start_seq)),
            _ if versions.is_empty() => (VersionKind::Initial, None),
            _ => (VersionKind::Append, None),
        };
        versions.push(PromptVersion {
            seq: event.seq,
            turn: data.turn,
            step: data.step,
            kind,
            text: message_text(&data.message),
            effective: Some(event.seq) == effective,
            replaces,
        });
    }
    versions
}

/// The prompt history of a log file of any version (older ones migrated in memory) or of a
/// stored session. Memory holds the fold and the session's system messages.
pub fn history(source: SessionSource<'_>) -> Result<PromptHistory, PromptError> {
    let projection = source.replay(|opening| {
        let mut fold = SessionFold::new(opening.rules());
        fold.set_identity(Identity::of(opening.header));
        HistoryProjection {
            session: opening.session().to_owned(),
            fold,
            system_events: Vec::new(),
        }
    })?;
    Ok(PromptHistory {
        versions: prompt_versions(
            projection.system_events.iter().map(|e| e.as_ref()),
            &projection.fold,
        ),
        session: projection.session,
    })
}

/// The fold of a whole session and its system messages, the versions' material.
struct HistoryProjection {
    session: String,
    fold: SessionFold,
    system_events: Vec<Arc<Event>>,
}

impl Projection for HistoryProjection {
    type Error = Violation;

    fn push(&mut self, event: Arc<Event>) -> Result<Flow, Violation> {
        if matches!(event.data, EventData::SystemMessage(_)) {
            self.system_events.push(Arc::clone(&event));
        }
        self.fold.admit(event)?;
        Ok(Flow::Continue)
    }
}

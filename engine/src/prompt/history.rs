//! The prompt history of a session: every `system/message` as a version (initial, append,
//! rewrite or clear), and which one is effective now.
//!
//! Effective means effective now: the latest non-empty surviving system node in surface
//! order. When the prompt has been cleared, no version is effective.

use std::path::Path;
use std::sync::Arc;

use sessionlog_format::fold::fold_from_scratch;
use sessionlog_format::rules::RuleContext;
use sessionlog_format::{
    Event, EventData, FormatVersion, ReadOptions, Recovery, SessionFold, SnapshotMode, SurfaceOp,
};

use super::projection::{effective_seq, message_text, system_nodes};
use super::PromptError;
use crate::files::open_log;
use crate::migrate::read_as_v3;
use crate::store::Store;

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

/// The prompt history of a stored session.
pub fn history_from_store(store: &Store, session: &str) -> Result<PromptHistory, PromptError> {
    let next_seq = store.with_fold(session, |f| f.admission().next_seq())?;
    let events = store.read_range(session, 0, next_seq)?;
    let fold = store.fold_at(session, next_seq.checked_sub(1))?;
    Ok(PromptHistory {
        session: session.to_owned(),
        versions: prompt_versions(&events, &fold),
    })
}

/// The prompt history of a log file of any version (older ones migrated in memory).
pub fn history_from_file(
    path: &Path,
    snapshot: SnapshotMode,
) -> Result<PromptHistory, PromptError> {
    let options = ReadOptions {
        recovery: Recovery::Strict,
        snapshot,
    };
    let mut reader = open_log(path, options)?;
    let (session, events, snapshot) = if reader.version() == FormatVersion::V3 {
        let session = reader.header().id.clone();
        let mut events = Vec::new();
        while let Some(next) = reader.next_event() {
            events.push(next.map_err(|source| crate::Error::Read {
                path: path.to_owned(),
                source,
            })?);
        }
        (session, events, reader.snapshot())
    } else {
        drop(reader);
        let (header, events, snapshot) = read_as_v3(path, snapshot)?;
        (header.id, events, snapshot)
    };
    let ctx = RuleContext {
        version: FormatVersion::V3,
        snapshot,
    };
    let events: Vec<Arc<Event>> = events.into_iter().map(Arc::new).collect();
    let fold =
        fold_from_scratch(ctx, &events).map_err(|(idx, violation)| PromptError::Refused {
            session: session.clone(),
            seq: events.get(idx).map_or(0, |e| e.seq),
            message: violation.to_string(),
        })?;
    Ok(PromptHistory {
        versions: prompt_versions(events.iter().map(|e| e.as_ref()), &fold),
        session,
    })
}

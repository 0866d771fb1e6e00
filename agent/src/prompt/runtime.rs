//! The runtime-context projection: the assembly's contexts as one user-role snapshot, headed
//! by the fixed "supersedes earlier snapshots" declaration, committed only when it changed.
//!
//! The projection owns the snapshots it commits (`source {kind: plugin, plugin, form}` with
//! `form` `snapshot` or `clear`). It retains the latest owned snapshot that is still on the
//! surface: a clear marker is committed when the context disappears, and a replacement that
//! removes the retained snapshot from the surface (a compaction) makes it forget the snapshot,
//! so the next projection proposes the context again.

use serde_json::json;
use sessionlog_format::{ContentBlock, Event, EventData, Extra, Message, SessionFold, SurfaceOp};

use super::projection::{message_text, plugin_source, EventStamp};
use super::PROMPT_PLUGIN;

/// The fixed first paragraph of every snapshot.
pub const RUNTIME_DECLARATION: &str =
    "Current runtime context. This snapshot supersedes earlier runtime-context snapshots.";
/// The whole text of the clear marker.
pub const RUNTIME_CLEARED: &str = "Runtime context cleared. This supersedes earlier \
     runtime-context snapshots; none of them applies any more.";

/// What the projection proposes for a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeCommit {
    /// A full snapshot of the named sections.
    Snapshot { sections: Vec<(String, String)> },
    /// The context disappeared.
    Clear,
}

impl RuntimeCommit {
    /// The message text: the declaration, then each section, joined by blank lines.
    pub fn text(&self) -> String {
        match self {
            RuntimeCommit::Clear => RUNTIME_CLEARED.to_owned(),
            RuntimeCommit::Snapshot { sections } => {
                let mut parts = vec![RUNTIME_DECLARATION];
                parts.extend(sections.iter().map(|(_, text)| text.as_str()));
                parts.join("\n\n")
            }
        }
    }

    /// The sourced user message.
    pub fn message(&self, id: String) -> Message {
        let mut source = plugin_source();
        let (form, sections) = match self {
            RuntimeCommit::Clear => ("clear", json!([])),
            RuntimeCommit::Snapshot { sections } => {
                let list: Vec<_> = sections
                    .iter()
                    .map(|(name, text)| json!({ "name": name, "text": text }))
                    .collect();
                ("snapshot", json!(list))
            }
        };
        source.extra.insert("form".to_owned(), json!(form));
        source.extra.insert("sections".to_owned(), sections);
        Message {
            id: Some(id),
            role: Some("user".to_owned()),
            content: vec![ContentBlock::text(self.text())],
            source: Some(source),
            extra: Extra::new(),
        }
    }

    /// The commit as an appended `user/message` at `stamp.next_seq`.
    pub fn event(&self, stamp: EventStamp) -> Event {
        let message = self.message(format!("runtime-context-{}", stamp.next_seq));
        let data = EventData::UserMessage(Box::new(message));
        Event::new(stamp.next_seq, stamp.time, data).with_surface_op(SurfaceOp::Append)
    }
}

/// The owned snapshot the projection retains.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Retained {
    seq: u64,
    text: String,
    cleared: bool,
}

/// `RuntimeContextProjection`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeContextProjection {
    retained: Option<Retained>,
}

/// Whether `message` is a runtime-context snapshot or clear marker of ours; returns its form.
fn owned_form(message: &Message) -> Option<&str> {
    if !crate::context::is_from_plugin(message, PROMPT_PLUGIN) {
        return None;
    }
    let source = message.source.as_ref()?;
    let form = source.extra.get("form")?.as_str()?;
    matches!(form, "snapshot" | "clear").then_some(form)
}

impl RuntimeContextProjection {
    /// Restores the latest owned snapshot still on the surface of `fold`.
    pub fn restore(fold: &SessionFold) -> RuntimeContextProjection {
        let nodes = fold.admission().surface().nodes();
        let retained = nodes.iter().rev().find_map(|node| {
            let event = fold.live_event(node.seq)?;
            let EventData::UserMessage(message) = &event.data else {
                return None;
            };
            let form = owned_form(message)?;
            Some(Retained {
                seq: node.seq,
                text: message_text(message),
                cleared: form == "clear",
            })
        });
        RuntimeContextProjection { retained }
    }

    /// Proposes the commit for this step's rendered contexts (`(name, text)`, empty ones
    /// already dropped), or nothing when the retained snapshot already says it. Forgets the
    /// retained snapshot first when a replacement removed it from `fold`'s surface.
    pub fn project(
        &mut self,
        fold: &SessionFold,
        sections: Vec<(String, String)>,
    ) -> Option<RuntimeCommit> {
        if let Some(retained) = &self.retained {
            if fold.live_event(retained.seq).is_none() {
                self.retained = None;
            }
        }
        let commit = if sections.is_empty() {
            RuntimeCommit::Clear
        } else {
            RuntimeCommit::Snapshot { sections }
        };
        match (&self.retained, &commit) {
            // Nothing retained and nothing to say: no clear marker either.
            (None, RuntimeCommit::Clear) => None,
            (Some(r), RuntimeCommit::Clear) if r.cleared => None,
            (Some(r), _) if !r.cleared && r.text == commit.text() => None,
            _ => Some(commit),
        }
    }

    /// Records that `commit` landed at `seq`.
    pub fn committed(&mut self, seq: u64, commit: &RuntimeCommit) {
        self.retained = Some(Retained {
            seq,
            text: commit.text(),
            cleared: *commit == RuntimeCommit::Clear,
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use pretty_assertions::assert_eq;
    use sessionlog_format::payload::StepRef;
    use sessionlog_format::SessionFold;

    use super::*;

    fn sections(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(n, t)| ((*n).to_owned(), (*t).to_owned()))
            .collect()
    }

    fn open_fold() -> SessionFold {
        let ctx = sessionlog_format::rules::RuleContext {
            version: sessionlog_format::FormatVersion::V3,
            snapshot: false,
        };
        let mut fold = SessionFold::new(ctx);
        let step = StepRef {
            turn: 1,
            step: 1,
            extra: Extra::new(),
        };
        let turn = sessionlog_format::payload::TurnStart {
            turn: 1,
            extra: Extra::new(),
        };
        let opening = Event::new(0, 0, EventData::TurnStart(Box::new(turn)));
        fold.admit(Arc::new(opening)).unwrap();
        let start = Event::new(1, 0, EventData::StepStart(Box::new(step)));
        fold.admit(Arc::new(start)).unwrap();
        fold
    }

    fn commit(fold: &mut SessionFold, projection: &mut RuntimeContextProjection, c: RuntimeCommit) {
        let stamp = EventStamp {
            next_seq: fold.admission().next_seq(),
            time: 0,
            turn: 1,
            step: 1,
        };
        let event = c.event(stamp);
        fold.admit(Arc::new(event)).unwrap();
        projection.committed(stamp.next_seq, &c);
    }

    // Goal: the snapshot is the declaration then the named sections; an unchanged context
    // commits nothing; a change commits a full new snapshot. Method: three projections.
    #[test]
    fn snapshot_only_when_changed() {
        let mut fold = open_fold();
        let mut projection = RuntimeContextProjection::default();
        let first = projection.project(&fold, sections(&[("cwd", "in /w"), ("sandbox", "ro")]));
        let first = first.unwrap();
        assert_eq!(
            first.text(),
            format!("{RUNTIME_DECLARATION}\n\nin /w\n\nro")
        );
        commit(&mut fold, &mut projection, first);
        let same = sections(&[("cwd", "in /w"), ("sandbox", "ro")]);
        assert_eq!(projection.project(&fold, same), None);
        let changed = projection.project(&fold, sections(&[("cwd", "in /w"), ("sandbox", "rw")]));
        assert!(matches!(changed, Some(RuntimeCommit::Snapshot { .. })));
    }

    // Goal: a disappearing context commits one clear marker, and only when a snapshot is
    // retained. Method: empty contexts before and after a snapshot.
    #[test]
    fn clear_marker_when_the_context_disappears() {
        let mut fold = open_fold();
        let mut projection = RuntimeContextProjection::default();
        assert_eq!(projection.project(&fold, vec![]), None);
        let snapshot = projection
            .project(&fold, sections(&[("cwd", "x")]))
            .unwrap();
        commit(&mut fold, &mut projection, snapshot);
        let clear = projection.project(&fold, vec![]);
        assert_eq!(clear, Some(RuntimeCommit::Clear));
        commit(&mut fold, &mut projection, RuntimeCommit::Clear);
        assert_eq!(projection.project(&fold, vec![]), None);
        let restored = RuntimeContextProjection::restore(&fold);
        assert_eq!(restored, projection, "restore finds the latest owned node");
    }

    // Goal: a replacement that removes the retained snapshot makes the projection forget it,
    // so the same context is proposed again. Method: replace the snapshot's node.
    #[test]
    fn forgets_a_snapshot_removed_from_the_surface() {
        let mut fold = open_fold();
        let mut projection = RuntimeContextProjection::default();
        let snapshot = projection
            .project(&fold, sections(&[("cwd", "x")]))
            .unwrap();
        commit(&mut fold, &mut projection, snapshot);
        let seq = fold.admission().next_seq() - 1;
        let mut summary = RuntimeCommit::Clear.message("summary".into());
        summary.source = Some(sessionlog_format::Source {
            kind: "compaction".into(),
            plugin: None,
            provider: None,
            model: None,
            call_id: None,
            extra: Extra::new(),
        });
        let replace = Event::new(seq + 1, 0, EventData::UserMessage(Box::new(summary)))
            .with_surface_op(SurfaceOp::Replace {
                start_seq: seq,
                end_seq: seq,
            })
            .with_sources(vec![seq]);
        fold.admit(Arc::new(replace)).unwrap();
        let again = projection.project(&fold, sections(&[("cwd", "x")]));
        assert!(matches!(again, Some(RuntimeCommit::Snapshot { .. })));
        assert_eq!(
            RuntimeContextProjection::restore(&fold),
            RuntimeContextProjection::default()
        );
    }
}

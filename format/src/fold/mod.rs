//! The session fold (spec 7.3, 7.4, 6.4, 8.2): everything derived from a session log,
//! maintained event by event.
//!
//! A [`SessionFold`] wraps the [`Admission`] of a log (the surface, the protected head, the step
//! rules) and adds what a request is built from: the event of every live surface node, the
//! messages that projections changed (see [`Projections`]), `contentGeneration`, the canonical
//! request header (see [`canonical_header`]) and the last request context. A [`FoldCheckpoint`]
//! resumes a fold without replaying the log.
//!
//! Each event costs time in proportion to itself: an append inserts one node; a replace touches
//! only the shadowed nodes (plus the surface's memmove); a projection only its targets. Nothing
//! is recomputed from the start. Derived messages are borrowed from the live events, which the
//! fold holds as `Arc<Event>`, so deriving copies no content.
//!
//! **Invariant:** after any sequence of admitted events, the fold equals
//! [`fold_from_scratch`] over the same events; the migrator and the store rely on it. A
//! following fold ([`SessionFold::following`], the proof's source side) derives the same
//! surface and messages, and keeps no relationship state and no request header or context.

mod checkpoint;
mod header;
mod projection;
#[cfg(test)]
mod tests;

use crate::seq_map::SeqMap;
use std::mem;
use std::sync::Arc;

use crate::admission::{Admission, Admitted, Undo as AdmissionUndo};
use crate::error::Violation;
use crate::event::{Event, EventData};
use crate::message::Message;
use crate::payload::{EpochHeader, RequestContextData};
use crate::rules::RuleContext;
use crate::surface::Undo as SurfaceUndo;

pub use checkpoint::{
    CheckpointNode, CheckpointStep, FoldCheckpoint, ProjectedMessage, ResumeError,
    FOLD_CHECKPOINT_VERSION,
};
pub use header::{canonical_header, headers_equal};
pub use projection::{
    requires_projection, ImageOffloadProjection, MessageProjection, ProjectionHistory, Projections,
    MESSAGE_PROJECTION_EVENT_TYPES,
};

/// Everything derived from a session log, maintained event by event.
#[derive(Debug, Clone)]
pub struct SessionFold {
    admission: Admission,
    projections: Projections,
    /// The event of every live surface node, and of no other.
    live: SeqMap<Arc<Event>>,
    /// The messages projections changed, by live node seq.
    projected: SeqMap<Message>,
    /// K's `contentGeneration`: bumped by every replace and every projection.
    content_generation: u64,
    /// The canonical form of the last `request/header`'s `data.header`.
    header: Option<Box<EpochHeader>>,
    /// The last `request/context`, whole.
    context: Option<Box<RequestContextData>>,
}

/// What [`SessionFold::new`] and [`SessionFold::resume_with`] start from.
#[derive(Debug, Clone)]
pub struct FoldOptions {
    pub ctx: RuleContext,
    pub projections: Projections,
}

/// A checked event's effect, to pass to [`SessionFold::apply`] on the same state.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    admitted: Admitted,
    /// The messages the event's projection changes, if it has one.
    projected: Option<Vec<(u64, Message)>>,
}

/// How to revert one applied event; reverted in reverse order of application.
#[derive(Debug)]
struct FoldUndo {
    admission: AdmissionUndo,
    /// The node the event added to the surface, by append or replace.
    added: Option<u64>,
    /// The events and projected messages of the nodes the event shadowed.
    shadowed: Vec<(Arc<Event>, Option<Message>)>,
    /// The projected messages the event's projection replaced: `(seq, previous)`.
    overwritten: Vec<(u64, Option<Message>)>,
    request: Replaced,
    content_generation: u64,
}

/// The request fold value an event replaced.
#[derive(Debug)]
enum Replaced {
    Nothing,
    Header(Option<Box<EpochHeader>>),
    Context(Option<Box<RequestContextData>>),
}

impl SessionFold {
    /// An empty log, with the default projection registry (`image/offload`).
    pub fn new(ctx: RuleContext) -> SessionFold {
        SessionFold::with_projections(ctx, Projections::default())
    }

    /// An empty log whose events an [`Admission`] of the same rule context admits before they
    /// get here (see [`Admission::following`]): it derives the surface and the messages that
    /// [`SessionFold::new`] derives, projections checked, without checking the admission's
    /// rules again, and folds no request header or context. It is never checkpointed.
    pub fn following(ctx: RuleContext) -> SessionFold {
        SessionFold {
            admission: Admission::following(ctx),
            ..SessionFold::new(ctx)
        }
    }

    /// An empty log that interprets message projections with `projections`.
    pub fn with_projections(ctx: RuleContext, projections: Projections) -> SessionFold {
        SessionFold {
            admission: Admission::new(ctx),
            projections,
            live: SeqMap::default(),
            projected: SeqMap::default(),
            content_generation: 0,
            header: None,
            context: None,
        }
    }

    /// Checks `event` as the next event without changing anything.
    pub fn check(&self, event: &Event) -> Result<Checked, Violation> {
        let admitted = self.admission.check(event)?;
        let projected = match self.projections.get(&event.kind) {
            Some(projection) => Some(projection.project(event, &ProjectionHistory::new(self))?),
            None if requires_projection(&event.kind) => {
                return Err(projection::missing_projection(&event.kind));
            }
            None => None,
        };
        Ok(Checked {
            admitted,
            projected,
        })
    }

    /// Applies an event checked by [`SessionFold::check`] on this same state.
    pub fn apply(&mut self, event: Arc<Event>, checked: Checked) {
        let _undo = self.apply_logged(event, checked);
    }

    /// Checks and applies `event`.
    pub fn admit(&mut self, event: Arc<Event>) -> Result<(), Violation> {
        // A deferred resume's journal is replayed first; when it cannot be, the check refuses.
        let _unusable = self.replay_relations();
        let checked = self.check(&event)?;
        self.apply(event, checked);
        Ok(())
    }

    /// Admits a batch atomically: when an event is refused, the fold is exactly as it was
    /// before the batch, and the refused event's index is returned.
    pub fn admit_batch(&mut self, events: &[Arc<Event>]) -> Result<(), (usize, Violation)> {
        // A deferred resume's journal is replayed first; when it cannot be, the check refuses.
        let _unusable = self.replay_relations();
        let saved = self.admission.state();
        let mut undos = Vec::with_capacity(events.len());
        for (event_idx, event) in events.iter().enumerate() {
            match self.check(event) {
                Ok(checked) => undos.push(self.apply_logged(Arc::clone(event), checked)),
                Err(violation) => {
                    let admission_undos = undos.into_iter().rev().map(|u| self.revert(u));
                    let mut admission_undos: Vec<AdmissionUndo> = admission_undos.collect();
                    admission_undos.reverse();
                    self.admission.rollback(saved, admission_undos);
                    debug_assert_eq!(self.live.len(), self.admission.surface().len());
                    return Err((event_idx, violation));
                }
            }
        }
        Ok(())
    }

    /// Tells the fold's relationship rules the log's header (the delivery-marker rule).
    pub fn set_identity(&mut self, identity: crate::relations::Identity) {
        self.admission.set_identity(identity);
    }

    /// Sets the relationship extensions; only before the first event.
    pub fn set_extensions(&mut self, ext: crate::relations::Extensions) {
        self.admission.set_extensions(ext);
    }

    /// The faults only the end of a whole log decides; see [`Admission::finish`].
    pub fn finish(&self) -> Result<(), (u64, Violation)> {
        self.admission.finish()
    }

    /// The admission state: surface, protected head, open step, next seq.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// The projection registry this fold interprets events with.
    pub fn projections(&self) -> &Projections {
        &self.projections
    }

    /// `deriveMessages()`: the non-null derived messages over the live surface, in order. A
    /// fresh vector of borrowed messages; O(live nodes), no content copied.
    pub fn messages(&self) -> Vec<&Message> {
        self.node_messages().filter_map(|(_, m)| m).collect()
    }

    /// Every live node in surface order, with its derived message (`None` when it derives
    /// none, as an empty system head does).
    pub fn node_messages(&self) -> impl Iterator<Item = (u64, Option<&Message>)> + '_ {
        let nodes = self.admission.surface().nodes();
        nodes.iter().map(|node| (node.seq, self.message(node.seq)))
    }

    /// The derived message of the live node `seq`, projections applied.
    pub fn message(&self, seq: u64) -> Option<&Message> {
        if !self.projected.is_empty() {
            if let Some(message) = self.projected.get(&seq) {
                return Some(message);
            }
        }
        derive_event_message(self.live.get(&seq)?)
    }

    /// The event of the live node `seq`.
    pub fn live_event(&self, seq: u64) -> Option<&Arc<Event>> {
        self.live.get(&seq)
    }

    /// Incremented by every replace.
    pub fn replace_generation(&self) -> u64 {
        self.admission.surface().replace_generation()
    }

    /// K's `contentGeneration`: incremented by every replace and every projection, so it
    /// changes whenever a derived message that was handed out may have changed.
    pub fn content_generation(&self) -> u64 {
        self.content_generation
    }

    /// The canonical form of the last `request/header`'s `data.header` (spec 8.2).
    pub fn request_header(&self) -> Option<&EpochHeader> {
        self.header.as_deref()
    }

    /// The last `request/context`, whole: absent members of a later context are cleared.
    pub fn request_context(&self) -> Option<&RequestContextData> {
        self.context.as_deref()
    }

    fn apply_logged(&mut self, event: Arc<Event>, checked: Checked) -> FoldUndo {
        assert_eq!(
            event.seq,
            self.admission.next_seq(),
            "apply follows check of the same event"
        );
        let content_generation = self.content_generation;
        let admission = self.admission.commit(&event, checked.admitted);
        let surface = admission.surface();
        let mut shadowed = Vec::with_capacity(surface.shadowed().len());
        for node in surface.shadowed() {
            let shadowed_event = self
                .live
                .remove(&node.seq)
                .expect("every live node has its event");
            shadowed.push((shadowed_event, self.projected.remove(&node.seq)));
        }
        let added = match surface {
            SurfaceUndo::Nothing => None,
            SurfaceUndo::Pop => Some(event.seq),
            SurfaceUndo::Restore { .. } => {
                self.content_generation += 1;
                Some(event.seq)
            }
        };
        if let Some(seq) = added {
            let previous = self.live.insert(seq, Arc::clone(&event));
            assert!(previous.is_none(), "a seq joins the surface once");
        }
        let overwritten = match checked.projected {
            Some(messages) => self.project(messages),
            None => Vec::new(),
        };
        // A following fold derives messages only: nothing reads its request header or context.
        let request = if self.admission.follows() {
            Replaced::Nothing
        } else {
            self.fold_request(&event.data)
        };
        debug_assert_eq!(self.live.len(), self.admission.surface().len());
        FoldUndo {
            admission,
            added,
            shadowed,
            overwritten,
            request,
            content_generation,
        }
    }

    /// Stores projected messages; returns the ones they replace.
    fn project(&mut self, messages: Vec<(u64, Message)>) -> Vec<(u64, Option<Message>)> {
        self.content_generation += 1;
        let mut overwritten = Vec::with_capacity(messages.len());
        for (seq, message) in messages {
            assert!(
                self.live.contains_key(&seq),
                "a projection changes only live nodes"
            );
            overwritten.push((seq, self.projected.insert(seq, message)));
        }
        overwritten
    }

    /// Folds the request header and context; returns the value the event replaced.
    fn fold_request(&mut self, data: &EventData) -> Replaced {
        match data {
            EventData::RequestHeader(d) => {
                let header = Some(Box::new(canonical_header(&d.header)));
                Replaced::Header(mem::replace(&mut self.header, header))
            }
            EventData::RequestContext(d) => {
                let context = Some(d.clone());
                Replaced::Context(mem::replace(&mut self.context, context))
            }
            _ => Replaced::Nothing,
        }
    }

    /// Reverts everything but the admission of one applied event; returns its admission undo
    /// for [`Admission::rollback`].
    fn revert(&mut self, undo: FoldUndo) -> AdmissionUndo {
        for (seq, previous) in undo.overwritten.into_iter().rev() {
            match previous {
                Some(message) => self.projected.insert(seq, message),
                None => self.projected.remove(&seq),
            };
        }
        if let Some(seq) = undo.added {
            self.live.remove(&seq).expect("the added node is live");
        }
        for (event, projected) in undo.shadowed {
            if let Some(message) = projected {
                self.projected.insert(event.seq, message);
            }
            self.live.insert(event.seq, event);
        }
        match undo.request {
            Replaced::Nothing => {}
            Replaced::Header(header) => self.header = header,
            Replaced::Context(context) => self.context = context,
        }
        self.content_generation = undo.content_generation;
        undo.admission
    }
}

/// Two folds are equal when everything they derive is: admission, live events, projected
/// messages, generations, header and context. The projection registries are not compared.
impl PartialEq for SessionFold {
    fn eq(&self, other: &SessionFold) -> bool {
        let live_equal = self.live.len() == other.live.len()
            && self.live.iter().all(|(seq, event)| {
                other
                    .live
                    .get(seq)
                    .is_some_and(|o| Arc::ptr_eq(event, o) || event == o)
            });
        self.admission.context() == other.admission.context()
            && self.admission.state() == other.admission.state()
            && self.admission.surface() == other.admission.surface()
            && relations_equal(self.admission.relations(), other.admission.relations())
            && self.content_generation == other.content_generation
            && self.header == other.header
            && self.context == other.context
            && self.projected == other.projected
            && live_equal
    }
}

/// The relationship states agree; the identity is configuration (the header), not state.
/// Their fact journals compare by length and hash, since a hashed journal
/// ([`SessionFold::hash_fact_journal`]) has no bytes left to compare.
fn relations_equal(a: &crate::relations::Relations, b: &crate::relations::Relations) -> bool {
    a.checkpoint_with(a.journal_reference()) == b.checkpoint_with(b.journal_reference())
}

/// `deriveEventMessage` without projections (spec 7.3): `user/message` data verbatim, the
/// message of a `tool/result`, the message of a `system/message` or `assistant/message` unless
/// its content is empty, and nothing for any other event.
pub fn derive_event_message(event: &Event) -> Option<&Message> {
    match &event.data {
        EventData::UserMessage(message) => Some(message),
        EventData::ToolResult(data) => Some(&data.message),
        EventData::SystemMessage(data) => Some(&data.message).filter(|m| !m.content.is_empty()),
        // An empty developer node keeps its surface position and projects nothing (V4).
        EventData::DeveloperMessage(data) => Some(&data.message).filter(|m| !m.content.is_empty()),
        EventData::AssistantMessage(data) => Some(&data.message).filter(|m| !m.content.is_empty()),
        _ => None,
    }
}

/// The fold of `events` from an empty log, one event at a time, with the default projection
/// registry; the reference the incremental fold is compared with. A refused event stops the
/// fold and is returned with its index.
pub fn fold_from_scratch(
    ctx: RuleContext,
    events: &[Arc<Event>],
) -> Result<SessionFold, (usize, Violation)> {
    let mut fold = SessionFold::new(ctx);
    for (event_idx, event) in events.iter().enumerate() {
        fold.admit(Arc::clone(event))
            .map_err(|violation| (event_idx, violation))?;
    }
    Ok(fold)
}

//! Message projections (spec 6.4): plugin-owned events that change the derived messages of
//! live surface nodes without replacing them, and the registry a fold interprets them with.
//!
//! K registers projections per event type (`registerMessageProjection`); a fold that meets a
//! type of [`MESSAGE_PROJECTION_EVENT_TYPES`] without one refuses the event, because skipping
//! it would reconstruct requests the model never saw (spec 20 pitfall 10).

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use crate::error::{Rule, Violation};
use crate::event::{Event, EventData, EventType};
use crate::message::{ContentBlock, Message};

use super::SessionFold;

/// Event types whose effect on derived messages needs a projection (K
/// `known-event-types.ts` @1376315).
pub const MESSAGE_PROJECTION_EVENT_TYPES: &[EventType] = &[EventType::ImageOffload];

/// Whether a fold must have a projection for `kind` to admit it.
pub fn requires_projection(kind: &EventType) -> bool {
    MESSAGE_PROJECTION_EVENT_TYPES.contains(kind)
}

/// The pure interpretation of one event type that changes existing messages.
pub trait MessageProjection: fmt::Debug + Send + Sync {
    /// The event type it interprets; never a surface type.
    fn event_type(&self) -> EventType;

    /// Validates the whole decision against the history before `event`, then returns the
    /// changed messages by node seq. Targets are live nodes; nothing is applied on refusal.
    fn project(
        &self,
        event: &Event,
        history: &ProjectionHistory<'_>,
    ) -> Result<Vec<(u64, Message)>, Violation>;
}

/// The projections a fold interprets events with, at most one per event type.
#[derive(Debug, Clone)]
pub struct Projections {
    entries: Vec<Arc<dyn MessageProjection>>,
}

/// The read-only history a projection sees: the fold just before the event.
#[derive(Debug, Clone, Copy)]
pub struct ProjectionHistory<'a> {
    fold: &'a SessionFold,
}

/// The `image/offload` projection of K's `compaction-image-offload` plugin.
///
/// `imageIndexes` count **image blocks only**, depth first through nested `tool-result`
/// blocks, including images already offloaded; other blocks do not count. So for content
/// `[text, image, tool-result[image], image]` index 1 is the image inside the tool result.
/// This follows K @1376315 `packages/compaction/compaction-image-offload/src/projection.ts`
/// ("indexes count all images in depth-first order, including nested tool results and
/// already omitted images") and `project-message.ts`, and its `projection.spec.ts`.
///
/// Refusals, as in K: targets that are empty, carry unknown members, repeat a seq, or whose
/// indexes are empty or not strictly increasing (rule `payload`); a target that is not a live
/// `user/message` or `tool/result` node, an index past the message's images, or an image
/// already offloaded (rule `surface`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ImageOffloadProjection;

impl Projections {
    /// A registry without projections: such a fold refuses every event that needs one.
    pub fn empty() -> Projections {
        Projections {
            entries: Vec::new(),
        }
    }

    /// Adds `projection` (builder style).
    pub fn register(mut self, projection: Arc<dyn MessageProjection>) -> Projections {
        let kind = projection.event_type();
        assert!(
            !kind.is_surface_v3(),
            "a projection interprets a log-only event, not {kind}"
        );
        assert!(
            self.get(&kind).is_none(),
            "one projection per event type, and {kind} has one"
        );
        self.entries.push(projection);
        self
    }

    /// The projection of `kind`, if one is registered.
    pub fn get(&self, kind: &EventType) -> Option<&dyn MessageProjection> {
        let entry = self.entries.iter().find(|p| &p.event_type() == kind)?;
        Some(entry.as_ref())
    }
}

/// The registry of the built-in projections: `image/offload`.
impl Default for Projections {
    fn default() -> Projections {
        Projections::empty().register(Arc::new(ImageOffloadProjection))
    }
}

impl<'a> ProjectionHistory<'a> {
    pub(super) fn new(fold: &'a SessionFold) -> ProjectionHistory<'a> {
        ProjectionHistory { fold }
    }

    /// Whether `seq` is a live surface node.
    pub fn is_live(&self, seq: u64) -> bool {
        self.fold.admission.surface().contains(seq)
    }

    /// The event of the live node `seq`.
    pub fn event(&self, seq: u64) -> Option<&'a Event> {
        self.fold.live.get(&seq).map(|event| event.as_ref())
    }

    /// The current derived message of the live node `seq`, earlier projections applied.
    pub fn message(&self, seq: u64) -> Option<&'a Message> {
        self.fold.message(seq)
    }
}

impl MessageProjection for ImageOffloadProjection {
    fn event_type(&self) -> EventType {
        EventType::ImageOffload
    }

    fn project(
        &self,
        event: &Event,
        history: &ProjectionHistory<'_>,
    ) -> Result<Vec<(u64, Message)>, Violation> {
        let payload = |m: &str| Violation::new(Rule::Payload, format!("image/offload: {m}"));
        let surface = |m: String| Violation::new(Rule::Surface, format!("image/offload: {m}"));
        let EventData::ImageOffload(data) = &event.data else {
            return Err(payload("data must contain a nonempty targets array"));
        };
        if !data.extra.is_empty() || data.targets.is_empty() {
            return Err(payload("data must contain a nonempty targets array"));
        }
        let mut seen = HashSet::with_capacity(data.targets.len());
        let mut projected = Vec::with_capacity(data.targets.len());
        for target in &data.targets {
            let (seq, indexes) = (target.seq, target.image_indexes.as_slice());
            if !target.extra.is_empty() || indexes.is_empty() {
                return Err(payload(
                    "each target must contain a seq and nonempty imageIndexes",
                ));
            }
            if !seen.insert(seq) {
                return Err(payload(&format!("duplicate target seq {seq}")));
            }
            if indexes.windows(2).any(|pair| pair[0] >= pair[1]) {
                return Err(payload("imageIndexes must be strictly increasing"));
            }
            let Some(source) = history.event(seq) else {
                return Err(surface(format!(
                    "target seq {seq} is not a current surface node"
                )));
            };
            if !matches!(source.kind, EventType::UserMessage | EventType::ToolResult) {
                return Err(surface(format!(
                    "target seq {seq} must be user/message or tool/result"
                )));
            }
            let message = history
                .message(seq)
                .expect("user and tool nodes always derive a message");
            projected.push((seq, offload_images(message, indexes).map_err(surface)?));
        }
        Ok(projected)
    }
}

/// A copy of `message` whose selected images are marked `offloaded: true`.
fn offload_images(message: &Message, indexes: &[u64]) -> Result<Message, String> {
    let mut offloaded = message.clone();
    let mut selection = Selection {
        indexes,
        n_selected: 0,
        image_idx: 0,
    };
    selection.mark(&mut offloaded.content)?;
    if let Some(missing) = indexes.get(selection.n_selected) {
        return Err(format!("image index {missing} does not exist"));
    }
    Ok(offloaded)
}

/// A depth-first walk over the images of one message.
struct Selection<'a> {
    /// Strictly increasing.
    indexes: &'a [u64],
    /// How many of `indexes` were marked so far.
    n_selected: usize,
    /// The index of the next image met.
    image_idx: u64,
}

impl Selection<'_> {
    fn mark(&mut self, blocks: &mut [ContentBlock]) -> Result<(), String> {
        for block in blocks {
            if self.n_selected == self.indexes.len() {
                return Ok(());
            }
            match block {
                ContentBlock::Image(image) => {
                    if self.indexes[self.n_selected] == self.image_idx {
                        if image.offloaded == Some(true) {
                            let image_idx = self.image_idx;
                            return Err(format!("image index {image_idx} is already offloaded"));
                        }
                        image.offloaded = Some(true);
                        self.n_selected += 1;
                    }
                    self.image_idx += 1;
                }
                ContentBlock::ToolResult(result) => self.mark(&mut result.content)?,
                _ => {}
            }
        }
        Ok(())
    }
}

/// The refusal of an event that needs a projection the fold lacks (K `surface.ts`
/// `planSurfaceEvent` @1376315).
pub(super) fn missing_projection(kind: &EventType) -> Violation {
    Violation::new(
        Rule::Projection,
        format!(
            "session event \"{kind}\" requires a message projection; load its owning plugin or \
             supply its projection definition"
        ),
    )
}

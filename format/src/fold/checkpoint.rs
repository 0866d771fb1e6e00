//! Fold checkpoints: what the store persists to resume a [`SessionFold`] without replaying the
//! log. A boundary type: serialized as is, validated on resume.
//!
//! The checkpoint holds everything but the live events themselves, which the store supplies
//! by seq on resume; each supplied event must make exactly the node the checkpoint records.
//! Its version ([`FOLD_CHECKPOINT_VERSION`]) is that of this cache record, independent of the
//! session format version (spec 16.2).

use crate::seq_map::SeqMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::admission::{Admission, AdmissionState};
use crate::event::{Event, EventType};
use crate::message::Message;
use crate::payload::{EpochHeader, RequestContextData};
use crate::relations::{FactJournal, Relations, RelationsCheckpoint};
use crate::rules::RuleContext;
use crate::surface::{node_kind, Node, Surface};

use super::{FoldOptions, Projections, SessionFold};

/// The version of [`FoldCheckpoint`]; bumped whenever its shape or meaning changes.
///
/// Version 2 added [`FoldCheckpoint::relations`], the relationship validator's state. Version 3
/// carries the validator's whole-log sets as its fact journal (`relations.facts`) instead of
/// sorted lists.
pub const FOLD_CHECKPOINT_VERSION: u32 = 3;

/// Everything needed to resume a fold without replaying the log, live events aside.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FoldCheckpoint {
    /// [`FOLD_CHECKPOINT_VERSION`] when written.
    pub version: u32,
    /// The session format version of the log folded.
    pub format_version: u64,
    /// Whether the log was read in normalized snapshot mode.
    pub snapshot: bool,
    /// The seq of the next event: the number of events folded.
    pub next_seq: u64,
    pub open_step: Option<CheckpointStep>,
    /// Seq of the protected system head.
    pub head: Option<u64>,
    pub saw_surface: bool,
    pub replace_generation: u64,
    pub content_generation: u64,
    /// The live nodes in surface order.
    pub nodes: Vec<CheckpointNode>,
    /// Messages changed by projections, in seq order.
    pub projected: Vec<ProjectedMessage>,
    /// The canonical request header.
    pub header: Option<EpochHeader>,
    pub context: Option<RequestContextData>,
    /// The relationship validator's state (spec 12.2).
    pub relations: RelationsCheckpoint,
}

/// The open step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointStep {
    pub turn: u64,
    pub step: u64,
}

/// One live surface node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckpointNode {
    pub seq: u64,
    /// The event type name: `system/message`, `user/message`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// For a tool result: everything a content rewrite must keep, serialized.
    pub rewrite_identity: Option<String>,
}

/// A message a projection changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectedMessage {
    pub seq: u64,
    pub message: Message,
}

/// Why a checkpoint could not be resumed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResumeError {
    #[error("fold checkpoint version {found} is not the supported version {supported}")]
    Version { found: u32, supported: u32 },
    #[error(
        "fold checkpoint of format {found} (snapshot: {found_snapshot}) resumed as format \
         {expected} (snapshot: {expected_snapshot})"
    )]
    Context {
        found: u64,
        found_snapshot: bool,
        expected: u64,
        expected_snapshot: bool,
    },
    #[error("no event was supplied for live node seq {seq}")]
    MissingEvent { seq: u64 },
    #[error("the event supplied for live node seq {seq} does not make the node checkpointed")]
    EventMismatch { seq: u64 },
    #[error("fold checkpoint is inconsistent: {reason}")]
    Inconsistent { reason: String },
}

impl SessionFold {
    /// The checkpoint of this fold; O(live nodes + projected messages + fact journal).
    ///
    /// # Panics
    ///
    /// After [`SessionFold::hash_fact_journal`].
    pub fn checkpoint(&self) -> FoldCheckpoint {
        let facts = FactJournal::Bytes(self.admission.relations().journal().to_vec());
        self.checkpoint_with(facts)
    }

    /// The validator's fact journal (see [`crate::relations::FactJournal`]).
    ///
    /// # Panics
    ///
    /// After [`SessionFold::hash_fact_journal`].
    pub fn fact_journal(&self) -> &[u8] {
        self.admission.relations().journal()
    }

    /// The validator's fact journal by reference (its length and BLAKE3 hash), whether or not
    /// it was hashed; what [`SessionFold::checkpoint_with`] takes to name a stored journal.
    pub fn fact_journal_reference(&self) -> FactJournal {
        self.admission.relations().journal_reference()
    }

    /// The bytes of the fact journal not folded into its hash yet.
    pub fn unhashed_fact_journal_len(&self) -> usize {
        self.admission.relations().unhashed_journal_len()
    }

    /// Folds the fact journal's bytes into their hash and drops them, for a fold whose
    /// checkpoints are only compared, never stored (`verify`'s fresh fold): see
    /// [`crate::relations::Relations::hash_journal`]. [`SessionFold::checkpoint`] and
    /// [`SessionFold::fact_journal`] panic from then on; admitting and checkpointing by
    /// reference go on as before.
    pub fn hash_fact_journal(&mut self) {
        self.admission.relations_mut().hash_journal();
    }

    /// The checkpoint of this fold with `facts` for its fact journal, as a store that keeps
    /// the journal beside its checkpoints writes it; O(live nodes + projected messages).
    pub fn checkpoint_with(&self, facts: FactJournal) -> FoldCheckpoint {
        assert!(
            !self.admission.follows(),
            "a following fold keeps no relationship state to checkpoint"
        );
        let ctx = self.admission.context();
        let state = self.admission.state();
        let surface = self.admission.surface();
        let nodes = surface.nodes().iter().map(|node| CheckpointNode {
            seq: node.seq,
            kind: node.kind.event_type().as_str().to_owned(),
            rewrite_identity: node.rewrite_identity().map(str::to_owned),
        });
        let mut projected: Vec<ProjectedMessage> = (self.projected.iter())
            .map(|(&seq, message)| ProjectedMessage {
                seq,
                message: message.clone(),
            })
            .collect();
        projected.sort_unstable_by_key(|p| p.seq);
        FoldCheckpoint {
            version: FOLD_CHECKPOINT_VERSION,
            format_version: ctx.version.number(),
            snapshot: ctx.snapshot,
            next_seq: state.next_seq,
            open_step: state
                .open_step
                .map(|(turn, step)| CheckpointStep { turn, step }),
            head: state.head,
            saw_surface: state.saw_surface,
            replace_generation: surface.replace_generation(),
            content_generation: self.content_generation,
            nodes: nodes.collect(),
            projected,
            header: self.header.as_deref().cloned(),
            context: self.context.as_deref().cloned(),
            relations: self.admission.relations().checkpoint_with(facts),
        }
    }

    /// Resumes a fold from `checkpoint` with the default projection registry. `live_events`
    /// supplies the event of each live node by seq; it is asked once per node, in ascending
    /// seq order.
    pub fn resume(
        ctx: RuleContext,
        checkpoint: FoldCheckpoint,
        live_events: impl FnMut(u64) -> Option<Arc<Event>>,
    ) -> Result<SessionFold, ResumeError> {
        SessionFold::resume_with(default_options(ctx), checkpoint, live_events)
    }

    /// [`SessionFold::resume`] that leaves the relationship validator's fact journal to be
    /// replayed when the fold next admits an event ([`SessionFold::replay_relations`]): what
    /// a session's cold open uses, so that an open that only reads does not rebuild the
    /// whole-log sets. Until then the fold derives as a resumed one does, checkpoints the same
    /// and compares equal to it (fold equality is the checkpointed state), but
    /// [`SessionFold::check`] refuses every event.
    pub fn resume_deferred(
        ctx: RuleContext,
        checkpoint: FoldCheckpoint,
        live_events: impl FnMut(u64) -> Option<Arc<Event>>,
    ) -> Result<SessionFold, ResumeError> {
        SessionFold::resume_parts(default_options(ctx), checkpoint, live_events, false)
    }

    /// Resumes a fold from `checkpoint`, checking it against `options.ctx` and against the
    /// supplied events.
    pub fn resume_with(
        options: FoldOptions,
        checkpoint: FoldCheckpoint,
        live_events: impl FnMut(u64) -> Option<Arc<Event>>,
    ) -> Result<SessionFold, ResumeError> {
        SessionFold::resume_parts(options, checkpoint, live_events, true)
    }

    /// Replays the relationship validator's fact journal of a deferred resume (nothing to do
    /// otherwise); an error means the checkpoint is unusable, and the fold refuses every event.
    pub fn replay_relations(&mut self) -> Result<(), String> {
        self.admission.relations_mut().replay_journal()
    }

    fn resume_parts(
        options: FoldOptions,
        checkpoint: FoldCheckpoint,
        mut live_events: impl FnMut(u64) -> Option<Arc<Event>>,
        replay: bool,
    ) -> Result<SessionFold, ResumeError> {
        check_identity(&checkpoint, options.ctx)?;
        let inconsistent = |reason: String| ResumeError::Inconsistent { reason };
        // The events are fetched in ascending seq order, whatever the surface order (a
        // summary sits before the older nodes it kept): a reader that decodes a block of
        // records at a time then decodes each block once.
        let mut seqs: Vec<u64> = checkpoint.nodes.iter().map(|n| n.seq).collect();
        seqs.sort_unstable();
        seqs.dedup();
        let mut live = SeqMap::with_capacity_and_hasher(seqs.len(), Default::default());
        for seq in seqs {
            let event = live_events(seq).ok_or(ResumeError::MissingEvent { seq })?;
            if event.seq != seq {
                return Err(ResumeError::EventMismatch { seq });
            }
            live.insert(seq, event);
        }
        let mut nodes = Vec::with_capacity(checkpoint.nodes.len());
        for stored in checkpoint.nodes {
            let seq = stored.seq;
            let node = node_of(stored)?;
            if live.get(&seq).and_then(|event| Node::of(event)).as_ref() != Some(&node) {
                return Err(ResumeError::EventMismatch { seq });
            }
            nodes.push(node);
        }
        let surface = Surface::from_nodes(nodes, checkpoint.replace_generation)
            .map_err(|v| inconsistent(v.message))?;
        let state = AdmissionState {
            open_step: checkpoint.open_step.map(|s| (s.turn, s.step)),
            head: checkpoint.head,
            saw_surface: checkpoint.saw_surface,
            next_seq: checkpoint.next_seq,
        };
        let resumed = if replay {
            Relations::from_checkpoint
        } else {
            Relations::from_checkpoint_deferred
        };
        let relations = resumed(options.ctx, checkpoint.relations, checkpoint.next_seq)
            .map_err(inconsistent)?;
        let admission = Admission::from_parts(options.ctx, surface, state, relations)
            .map_err(|v| inconsistent(v.message))?;
        if checkpoint.content_generation < checkpoint.replace_generation {
            return Err(inconsistent(
                "content generation is behind replace generation".to_owned(),
            ));
        }
        let mut projected =
            SeqMap::with_capacity_and_hasher(checkpoint.projected.len(), Default::default());
        for ProjectedMessage { seq, message } in checkpoint.projected {
            if !live.contains_key(&seq) || projected.insert(seq, message).is_some() {
                return Err(inconsistent(format!(
                    "projected message of seq {seq} is not of one live node"
                )));
            }
        }
        Ok(SessionFold {
            admission,
            projections: options.projections,
            live,
            projected,
            content_generation: checkpoint.content_generation,
            header: checkpoint.header.map(Box::new),
            context: checkpoint.context.map(Box::new),
        })
    }
}

/// The options of a resume with the default projection registry.
fn default_options(ctx: RuleContext) -> FoldOptions {
    FoldOptions {
        ctx,
        projections: Projections::default(),
    }
}

fn check_identity(checkpoint: &FoldCheckpoint, ctx: RuleContext) -> Result<(), ResumeError> {
    if checkpoint.version != FOLD_CHECKPOINT_VERSION {
        return Err(ResumeError::Version {
            found: checkpoint.version,
            supported: FOLD_CHECKPOINT_VERSION,
        });
    }
    if checkpoint.format_version != ctx.version.number() || checkpoint.snapshot != ctx.snapshot {
        return Err(ResumeError::Context {
            found: checkpoint.format_version,
            found_snapshot: checkpoint.snapshot,
            expected: ctx.version.number(),
            expected_snapshot: ctx.snapshot,
        });
    }
    Ok(())
}

fn node_of(stored: CheckpointNode) -> Result<Node, ResumeError> {
    let inconsistent = |reason: String| ResumeError::Inconsistent { reason };
    let Some(kind) = node_kind(&EventType::parse(&stored.kind)) else {
        return Err(inconsistent(format!(
            "node {} has type {}, not a surface type",
            stored.seq, stored.kind
        )));
    };
    let identity = stored.rewrite_identity.map(String::into_boxed_str);
    Node::new(stored.seq, kind, identity).map_err(|v| inconsistent(v.message))
}

//! The surface fold (spec 7.1, 7.2): the ordered live surface nodes and `replaceGeneration`.
//!
//! A transition is planned first and applied second, so a rejected event leaves the state
//! untouched. Replace endpoints are resolved by surface position, never by comparing seqs: after
//! a head rewrite the surface can read `[11, 8, 9]`.
//!
//! Finding a seq's position is O(log n). Every node occupies a *slot*: an append takes a new
//! slot at the end, and a replace of positions `s..=e` gives the new node the slot of position
//! `s` and kills the others. **Invariant:** surface order is slot order, so a node's position is
//! the number of live slots before its slot, a prefix count over a Fenwick tree of live flags.
//! Dead slots are reclaimed by renumbering once they outnumber the live ones, so the index is
//! proportional to the live surface, not to the log (a 10M-event log with a compacted surface
//! of a few thousand nodes keeps a few thousand slots).

mod identity;
mod index;
#[cfg(test)]
mod tests;

use std::collections::HashSet;

use crate::error::{Rule, Violation};
use crate::event::{Event, EventType, SurfaceOp};

use index::SlotIndex;
pub use index::SlotUndo;

/// Most slots the index addresses; slots are `u32` to keep the index small.
pub const SURFACE_SLOTS_MAX: usize = u32::MAX as usize;
/// Longest surface whose whole index debug builds check after every change.
const DEBUG_CHECK_NODES_MAX: usize = 512;

/// What kind of surface event a node holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    System,
    /// A V4 `developer/message`.
    Developer,
    User,
    Assistant,
    ToolResult,
}

/// One live surface node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub seq: u64,
    pub kind: NodeKind,
    /// For tool results: everything a content rewrite must keep, serialized (spec 7.2 6.4).
    rewrite_identity: Option<Box<str>>,
}

/// The surface fold state.
#[derive(Debug, Clone, Default)]
pub struct Surface {
    nodes: Vec<Node>,
    replace_generation: u64,
    /// Derived from `nodes`; compared by neither equality nor anything observable.
    slots: SlotIndex,
}

/// A validated transition, ready to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// A log-only event: no change.
    Keep,
    Append(Node),
    /// Replace the nodes at positions `start_idx..=end_idx` by `node`.
    Replace {
        start_idx: usize,
        end_idx: usize,
        node: Node,
    },
}

/// How to revert one applied plan; undone in reverse order of application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Undo {
    Nothing,
    Pop,
    Restore {
        start_idx: usize,
        removed: Vec<Node>,
        slots: SlotUndo,
    },
}

/// The text of the head-protection refusal (spec 7.2 step 6.5).
pub const HEAD_REWRITE_REFUSAL: &str = "surface replace: node 0 holds the system prompt and may \
     be rewritten only by a system/message over exactly that node";

impl Node {
    /// A node as a checkpoint stores it. Only a tool result has a rewrite identity.
    pub fn new(
        seq: u64,
        kind: NodeKind,
        rewrite_identity: Option<Box<str>>,
    ) -> Result<Node, Violation> {
        if rewrite_identity.is_some() && kind != NodeKind::ToolResult {
            return Err(Violation::new(
                Rule::Surface,
                format!("node {seq}: only a tool/result node has a rewrite identity"),
            ));
        }
        Ok(Node {
            seq,
            kind,
            rewrite_identity,
        })
    }

    /// The node `event` becomes when it joins the surface, if its type is a surface type.
    pub fn of(event: &Event) -> Option<Node> {
        let kind = node_kind(&event.kind)?;
        Some(Node {
            seq: event.seq,
            kind,
            rewrite_identity: identity::rewrite_identity(event),
        })
    }

    /// `event`'s node without its rewrite identity, for a surface whose rewrites were
    /// checked elsewhere (a following admission).
    fn untracked(event: &Event) -> Option<Node> {
        let kind = node_kind(&event.kind)?;
        Some(Node {
            seq: event.seq,
            kind,
            rewrite_identity: None,
        })
    }

    /// For tool results: everything but `message.content[0].content`, serialized.
    pub fn rewrite_identity(&self) -> Option<&str> {
        self.rewrite_identity.as_deref()
    }
}

impl NodeKind {
    /// The event type whose events make nodes of this kind.
    pub fn event_type(self) -> EventType {
        match self {
            NodeKind::System => EventType::SystemMessage,
            NodeKind::Developer => EventType::DeveloperMessage,
            NodeKind::User => EventType::UserMessage,
            NodeKind::Assistant => EventType::AssistantMessage,
            NodeKind::ToolResult => EventType::ToolResult,
        }
    }
}

/// The index is derived from the nodes, so two surfaces are equal when their nodes and
/// generation are, however their slots are numbered.
impl PartialEq for Surface {
    fn eq(&self, other: &Surface) -> bool {
        self.nodes == other.nodes && self.replace_generation == other.replace_generation
    }
}

impl Eq for Surface {}

impl Surface {
    /// A surface resumed from its nodes in surface order (a checkpoint), checking that no seq
    /// appears twice.
    pub fn from_nodes(nodes: Vec<Node>, replace_generation: u64) -> Result<Surface, Violation> {
        if nodes.len() > SURFACE_SLOTS_MAX {
            return Err(Violation::new(
                Rule::Surface,
                format!("{} surface nodes exceed {SURFACE_SLOTS_MAX}", nodes.len()),
            ));
        }
        let mut seen = HashSet::with_capacity(nodes.len());
        if let Some(twice) = nodes.iter().find(|n| !seen.insert(n.seq)) {
            return Err(Violation::new(
                Rule::Surface,
                format!("seq {} appears twice in the surface", twice.seq),
            ));
        }
        let mut surface = Surface {
            nodes,
            replace_generation,
            slots: SlotIndex::default(),
        };
        surface.slots.renumber(&surface.nodes);
        debug_assert!(surface.index_is_consistent());
        Ok(surface)
    }

    /// The live nodes in surface order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The seqs of the live nodes, in surface order.
    pub fn seqs(&self) -> Vec<u64> {
        self.nodes.iter().map(|n| n.seq).collect()
    }

    /// The number of live nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Incremented by every replace.
    pub fn replace_generation(&self) -> u64 {
        self.replace_generation
    }

    /// The surface position of `seq`, if it is live; O(log n).
    pub fn position(&self, seq: u64) -> Option<usize> {
        let position = self.slots.position(seq)?;
        debug_assert_eq!(self.nodes[position].seq, seq, "surface order is slot order");
        Some(position)
    }

    /// Whether `seq` is a live node.
    pub fn contains(&self, seq: u64) -> bool {
        self.slots.slot_of.contains_key(&seq)
    }

    /// Plans the transition for `event`, whose envelope has already been checked.
    pub fn plan(&self, event: &Event, rewrites: bool) -> Result<Plan, Violation> {
        let Some(op) = event.surface_op else {
            return Ok(Plan::Keep);
        };
        let node = if rewrites {
            Node::of(event)
        } else {
            Node::untracked(event)
        };
        let Some(node) = node else {
            return Ok(Plan::Keep);
        };
        let (start_seq, end_seq) = match op {
            SurfaceOp::Append => return Ok(Plan::Append(node)),
            SurfaceOp::Replace { start_seq, end_seq } => (start_seq, end_seq),
        };
        let surface_error = |m: String| Err(Violation::new(Rule::Surface, m));
        let Some(start_idx) = self.position(start_seq) else {
            return surface_error(format!("start seq {start_seq} not found in surface"));
        };
        let Some(end_idx) = self.position(end_seq) else {
            return surface_error(format!("end seq {end_seq} not found in surface"));
        };
        if start_idx > end_idx {
            return surface_error(format!("start seq {start_seq} is after end seq {end_seq}"));
        }
        let shadowed = &self.nodes[start_idx..=end_idx];
        let sources = event.source_event_seqs.as_deref().unwrap_or(&[]);
        if let Some(missing) = shadowed.iter().find(|n| !sources.contains(&n.seq)) {
            return Err(Violation::new(
                Rule::SourceSeqs,
                format!(
                    "replace sourceEventSeqs must cover shadowed seq {}",
                    missing.seq
                ),
            ));
        }
        if node.kind == NodeKind::ToolResult && rewrites {
            check_tool_result_rewrite(&node, shadowed)?;
        }
        let head_is_system = self
            .nodes
            .first()
            .is_some_and(|n| n.kind == NodeKind::System);
        if start_idx == 0 && head_is_system && (node.kind != NodeKind::System || end_idx != 0) {
            return Err(Violation::new(Rule::HeadProtection, HEAD_REWRITE_REFUSAL));
        }
        Ok(Plan::Replace {
            start_idx,
            end_idx,
            node,
        })
    }

    /// Applies a plan made by [`Surface::plan`] on this same state, and returns how to undo
    /// it.
    pub fn apply(&mut self, plan: Plan) -> Undo {
        let (undo, changed_idx) = match plan {
            Plan::Keep => return Undo::Nothing,
            Plan::Append(node) => {
                self.slots.push(node.seq);
                self.nodes.push(node);
                (Undo::Pop, self.nodes.len() - 1)
            }
            Plan::Replace {
                start_idx,
                end_idx,
                node,
            } => {
                assert!(
                    start_idx <= end_idx,
                    "a replace plan spans at least one node"
                );
                assert!(
                    end_idx < self.nodes.len(),
                    "a replace plan was made on this surface"
                );
                let seq = node.seq;
                let removed: Vec<Node> = self.nodes.splice(start_idx..=end_idx, [node]).collect();
                let slots = self.slots.replace(&removed, seq);
                self.replace_generation += 1;
                if self.slots.needs_renumbering(self.nodes.len()) {
                    self.slots.renumber(&self.nodes);
                }
                let undo = Undo::Restore {
                    start_idx,
                    removed,
                    slots,
                };
                (undo, start_idx)
            }
        };
        debug_assert!(self.index_agrees_near(changed_idx));
        undo
    }

    /// Reverts the most recent [`Surface::apply`] that returned `undo`.
    pub fn undo(&mut self, undo: Undo) {
        let changed_idx = match undo {
            Undo::Nothing => return,
            Undo::Pop => {
                let node = self
                    .nodes
                    .pop()
                    .expect("undo follows the append it reverts");
                self.slots.pop(node.seq);
                self.nodes.len().saturating_sub(1)
            }
            Undo::Restore {
                start_idx,
                removed,
                slots,
            } => {
                assert!(!removed.is_empty(), "a replace shadows at least one node");
                let seq = self.nodes[start_idx].seq;
                let restored = self.slots.restore(seq, &removed, slots);
                self.nodes.splice(start_idx..=start_idx, removed);
                if !restored {
                    self.slots.renumber(&self.nodes);
                }
                assert!(self.replace_generation > 0, "undo follows its replace");
                self.replace_generation -= 1;
                start_idx
            }
        };
        debug_assert!(self.index_agrees_near(changed_idx));
    }

    /// Whether the slot index agrees with the nodes; O(n log n).
    fn index_is_consistent(&self) -> bool {
        self.index_counts_agree() && (0..self.nodes.len()).all(|idx| self.index_agrees_at(idx))
    }

    /// The debug check after a change at `changed_idx`: the whole index on short surfaces,
    /// otherwise the counts and the nodes around the change, so that debug builds stay
    /// O(log n) per event on long surfaces.
    fn index_agrees_near(&self, changed_idx: usize) -> bool {
        if self.nodes.len() <= DEBUG_CHECK_NODES_MAX {
            return self.index_is_consistent();
        }
        let near = changed_idx.saturating_sub(1)..(changed_idx + 2).min(self.nodes.len());
        self.index_counts_agree() && near.into_iter().all(|idx| self.index_agrees_at(idx))
    }

    fn index_counts_agree(&self) -> bool {
        let index = &self.slots;
        index.slot_of.len() == self.nodes.len()
            && index.live.total() as usize == self.nodes.len()
            && index.live.len() == self.nodes.len() + index.n_dead
    }

    /// Whether the node at `idx` holds a live slot, after the slot of the node before it,
    /// with exactly `idx` live slots before it.
    fn index_agrees_at(&self, idx: usize) -> bool {
        let index = &self.slots;
        let slot_of = |idx: usize| index.slot_of.get(&self.nodes[idx].seq).map(|&s| s as usize);
        let Some(slot) = slot_of(idx) else {
            return false;
        };
        let live = index.live.prefix(slot + 1) - index.live.prefix(slot) == 1;
        let in_order = idx == 0 || slot_of(idx - 1).is_some_and(|previous| previous < slot);
        live && in_order && index.live.prefix(slot) as usize == idx
    }
}

impl Undo {
    /// The nodes a replace shadowed, in surface order; empty for the other transitions.
    pub fn shadowed(&self) -> &[Node] {
        match self {
            Undo::Restore { removed, .. } => removed,
            Undo::Nothing | Undo::Pop => &[],
        }
    }
}

/// The node kind of a V3 or V4 surface type.
pub fn node_kind(kind: &EventType) -> Option<NodeKind> {
    match kind {
        EventType::SystemMessage => Some(NodeKind::System),
        EventType::DeveloperMessage => Some(NodeKind::Developer),
        EventType::UserMessage => Some(NodeKind::User),
        EventType::AssistantMessage => Some(NodeKind::Assistant),
        EventType::ToolResult => Some(NodeKind::ToolResult),
        _ => None,
    }
}

fn check_tool_result_rewrite(node: &Node, shadowed: &[Node]) -> Result<(), Violation> {
    let [target] = shadowed else {
        return Err(Violation::new(
            Rule::Surface,
            "a tool/result replace must shadow exactly one tool/result node",
        ));
    };
    if target.kind != NodeKind::ToolResult {
        return Err(Violation::new(
            Rule::Surface,
            format!(
                "a tool/result replace must shadow a tool/result node, not seq {}",
                target.seq
            ),
        ));
    }
    if target.rewrite_identity != node.rewrite_identity {
        return Err(Violation::new(
            Rule::Surface,
            format!(
                "a tool/result rewrite may change only message.content[0].content; it differs \
                 from seq {} elsewhere",
                target.seq
            ),
        ));
    }
    Ok(())
}

//! The slot index of the surface: a Fenwick tree of live slots and the slot of every live seq.

use crate::seq_map::SeqMap;

use super::{Node, SURFACE_SLOTS_MAX};

/// Dead slots tolerated before the index is renumbered, whatever the surface length.
const DEAD_SLOTS_MIN: usize = 64;

/// The slots a replace freed, so that its undo puts every node back in its own slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotUndo {
    start_slot: u32,
    dead: Vec<u32>,
    /// The slot numbering the slots belong to; a renumbering in between voids them.
    pub(super) layout: u64,
}

/// Where each live node sits among the slots, and which slots are live.
#[derive(Debug, Clone, Default)]
pub(super) struct SlotIndex {
    /// Live flags of the slots, for prefix counts.
    pub(super) live: Fenwick,
    /// The slot of every live seq. A map rather than a vector indexed by seq, so that memory
    /// follows the live surface rather than the length of the log.
    pub(super) slot_of: SeqMap<u32>,
    /// Slots whose node was shadowed; reclaimed by [`SlotIndex::renumber`].
    pub(super) n_dead: usize,
    /// Bumped by every renumbering, so that an undo knows whether its slots still exist.
    pub(super) layout: u64,
}

impl SlotIndex {
    pub(super) fn position(&self, seq: u64) -> Option<usize> {
        let slot = *self.slot_of.get(&seq)?;
        Some(self.live.prefix(slot as usize) as usize)
    }

    /// Gives `seq` a new slot at the end.
    pub(super) fn push(&mut self, seq: u64) {
        let slot = self.live.len();
        assert!(slot < SURFACE_SLOTS_MAX, "the surface fits the slot index");
        self.live.push_live();
        let slot = u32::try_from(slot).expect("checked against SURFACE_SLOTS_MAX");
        let previous = self.slot_of.insert(seq, slot);
        assert!(previous.is_none(), "a seq joins the surface once");
    }

    /// Reverts the push of `seq`.
    pub(super) fn pop(&mut self, seq: u64) {
        let slot = self.slot_of.remove(&seq).expect("the popped node is live");
        assert_eq!(
            slot as usize + 1,
            self.live.len(),
            "an appended node holds the last slot until it is undone"
        );
        self.live.pop();
    }

    /// Moves `seq` into the slot of the first of `removed` and kills the slots of the rest.
    pub(super) fn replace(&mut self, removed: &[Node], seq: u64) -> SlotUndo {
        let (first, rest) = removed
            .split_first()
            .expect("a replace shadows at least one node");
        let start_slot = self
            .slot_of
            .remove(&first.seq)
            .expect("shadowed nodes are live");
        let mut dead = Vec::with_capacity(rest.len());
        for node in rest {
            let slot = self
                .slot_of
                .remove(&node.seq)
                .expect("shadowed nodes are live");
            self.live.add(slot as usize, -1);
            dead.push(slot);
        }
        self.n_dead += dead.len();
        let previous = self.slot_of.insert(seq, start_slot);
        assert!(previous.is_none(), "a replacing node is new to the surface");
        SlotUndo {
            start_slot,
            dead,
            layout: self.layout,
        }
    }

    /// Puts `removed` back into their slots in place of `seq`. Returns false, changing
    /// nothing, when the slots were renumbered since, and the caller must renumber.
    pub(super) fn restore(&mut self, seq: u64, removed: &[Node], undo: SlotUndo) -> bool {
        if undo.layout != self.layout {
            return false;
        }
        assert_eq!(
            removed.len(),
            undo.dead.len() + 1,
            "one slot per shadowed node"
        );
        let slot = self
            .slot_of
            .remove(&seq)
            .expect("the replacing node is live");
        assert_eq!(slot, undo.start_slot, "the replacing node kept its slot");
        self.slot_of.insert(removed[0].seq, slot);
        for (node, &slot) in removed[1..].iter().zip(&undo.dead) {
            self.live.add(slot as usize, 1);
            self.slot_of.insert(node.seq, slot);
        }
        self.n_dead -= undo.dead.len();
        true
    }

    pub(super) fn needs_renumbering(&self, n_live: usize) -> bool {
        self.n_dead > DEAD_SLOTS_MIN && self.n_dead > n_live
    }

    /// Gives the nodes the slots `0..n`, in order: O(n).
    pub(super) fn renumber(&mut self, nodes: &[Node]) {
        self.live = Fenwick::all_live(nodes.len());
        self.slot_of.clear();
        for (slot, node) in nodes.iter().enumerate() {
            let slot = u32::try_from(slot).expect("the surface fits the slot index");
            self.slot_of.insert(node.seq, slot);
        }
        self.n_dead = 0;
        self.layout += 1;
    }
}

/// A Fenwick (binary indexed) tree of live flags: `tree[i - 1]` counts the live slots in
/// `(i - lowbit(i), i]`, one-based.
#[derive(Debug, Clone, Default)]
pub(super) struct Fenwick {
    tree: Vec<u32>,
}

impl Fenwick {
    /// `n` live slots, built in O(n): each entry covers `lowbit(i)` slots.
    fn all_live(n: usize) -> Fenwick {
        let tree = (1..=n)
            .map(|i| u32::try_from(lowbit(i)).expect("slots fit in u32"))
            .collect();
        Fenwick { tree }
    }

    pub(super) fn len(&self) -> usize {
        self.tree.len()
    }

    /// Appends a live slot in O(log n): the new entry also covers the slots before it.
    fn push_live(&mut self) {
        let i = self.tree.len() + 1;
        let covered = self.prefix(i - 1) - self.prefix(i - lowbit(i));
        self.tree.push(covered + 1);
    }

    /// Removes the last slot; no other entry covers it.
    fn pop(&mut self) {
        self.tree.pop().expect("a slot to pop");
    }

    /// Adds `delta` (+1 or -1) to the flag of `slot`.
    fn add(&mut self, slot: usize, delta: i32) {
        assert!(slot < self.tree.len(), "the slot exists");
        let mut i = slot + 1;
        while i <= self.tree.len() {
            self.tree[i - 1] = self.tree[i - 1]
                .checked_add_signed(delta)
                .expect("a flag is 0 or 1");
            i += lowbit(i);
        }
    }

    /// The number of live slots among `0..n`.
    pub(super) fn prefix(&self, n: usize) -> u32 {
        let mut sum = 0;
        let mut i = n;
        while i > 0 {
            sum += self.tree[i - 1];
            i -= lowbit(i);
        }
        sum
    }

    pub(super) fn total(&self) -> u32 {
        self.prefix(self.tree.len())
    }
}

fn lowbit(i: usize) -> usize {
    i & i.wrapping_neg()
}

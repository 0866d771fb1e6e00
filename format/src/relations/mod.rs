//! The relationship validator (spec 12.2, the exact texts of `spec/relations.md`): dsh's frozen
//! released validator, run incrementally, one event at a time, over V2 and V3 logs.
//!
//! [`Relations`] holds the state the released validator keeps while it walks a log: the open
//! turn and step with the next numbers, the tool lifecycles of the open step, the open
//! compaction transaction, the retry chains and scheduled attempts, the command ids, the PTC
//! dispatch starts, and the seqs of human user messages (for titles). [`Relations::check`]
//! decides without changing anything; [`Relations::commit`] applies a checked event and
//! returns an [`Undo`], so a batch refused part-way restores the state exactly.
//!
//! A V3 log is validated through dsh's *private view* (spec 11, restoration rule 8): a
//! `system/message` is a user message, `tool/ptc-dispatch*` are the PTC dispatch events, an
//! ignorable `tool/code-dispatch*` is opaque, and a `TOOL_NOT_STARTED` repair id may carry any
//! historical seq suffix. The refusal texts name the event's own type.
//!
//! The released validator sees the whole log at once; three of its rules look ahead, and this
//! one decides them as soon as it can (see ARCHITECTURE.md, "Decisions where the spec is
//! silent"): a `turn/start` or `turn/end` crossing an open compaction is pending until a
//! `session/end-seed` proves the start stale (or a `compaction/end`, or the end of the log,
//! proves it is not); a foreign current-generation delivery marker in a forked session is
//! pending until an inherited end-seed puts it in the inherited prefix; a `command/done`
//! whose `sourceEventSeq` names a later seq refuses the `command/*` event that later takes it.
//! Title `messageSeqs` must name earlier events.

mod checkpoint;
mod facts;
mod retry_map;
mod rules;
mod seqs;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;

pub use checkpoint::{ChainCheckpoint, FactJournal, RelationsCheckpoint};
use retry_map::RetryMap;
use seqs::SeqList;

/// Later-format roles the released validator is run with (dsh's `ReleasedRelationshipExtensions`).
/// V2 and V3 restores use `assistant/attempt` as a step event and the preserved title request
/// text; only the V1 -> V2 edge sets `legacy_interrupted_turn_restart`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Extensions {
    /// Admit the released resume pattern whose next-turn inbox insert omitted the prior
    /// `turn/end` (spec 12.2, turns 5).
    pub legacy_interrupted_turn_restart: bool,
}

/// What the delivery-marker rule needs from the header: the session id, whether it has a
/// parent, and whether it is seeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub id: String,
    pub has_parent: bool,
    pub seeded: bool,
    /// The header's format version number (`sessionFormatVersion` of a current marker).
    pub version: u64,
}

impl Identity {
    /// The identity `header` states.
    pub fn of(header: &crate::header::SessionHeader) -> Identity {
        Identity {
            id: header.id.clone(),
            has_parent: header.parent_session.is_some(),
            seeded: header.seeded(),
            version: header.version.unwrap_or(0),
        }
    }
}

/// The validator's state for one log.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Relations {
    /// V2 or later: the validator runs; V0 and V1 logs are validated at their V1 -> V2 edge.
    enabled: bool,
    /// The V3 private view (V3 and V4).
    v3: bool,
    /// The native V4 extensions (dsh-v4.md 6): developer messages and their `headerSeq`
    /// binding, the tool-role repair forms, the producer-owned title and checkpoint sources.
    v4: bool,
    /// Normalized recordings: placeholder repair ids are accepted.
    snapshot: bool,
    ext: Extensions,
    identity: Option<Identity>,
    s: Scalars,
    /// The provider of the last `request/header`.
    provider: Option<Box<str>>,
    /// Tool lifecycles of the open step, in advertisement order (resolved ones are `None`).
    tools: Vec<Option<Tool>>,
    tool_idx: Map<Box<str>, usize>,
    compaction: Option<Box<Compaction>>,
    chains: Map<ChainKey, Chain>,
    /// Every retry id of the log with its scheduled attempts (one chain per id).
    retries: RetryMap,
    commands: Set<Box<str>>,
    /// Seqs of `command/run` and `command/done` events, ascending.
    command_seqs: SeqList,
    /// `sourceEventSeq`s of `command/done` events that named a later seq, with the command id.
    forward_sources: BTreeMap<u64, Box<str>>,
    ptc: Map<Box<str>, Ptc>,
    /// Seqs of `user/message` events with a `user` source, ascending.
    human_users: SeqList,
    /// V4: the `request/header` events by seq, with the tools each defines (see
    /// [`crate::v4_rows::header_tools`]); what a developer message's `headerSeq` binds to.
    headers: BTreeMap<u64, HeaderTools>,
    /// V4: the `childId`s of the catalog facts since the last inherited end-seed (or the
    /// start of an unseeded log): each child is listed once.
    catalog_children: Set<Box<str>>,
    /// The whole-log facts behind `retries`, `commands`, `command_seqs`,
    /// `human_users` and `headers`, journaled in commit order (see [`facts`]): what a
    /// checkpoint carries of those sets. After [`Relations::hash_journal`], only the bytes
    /// since its last call: the ones before are in `hashed`.
    journal: Vec<u8>,
    /// The journal's first bytes, folded into their hash and dropped
    /// ([`Relations::hash_journal`]): a state that is only ever compared by its journal's
    /// length and hash (`verify`'s fresh fold) holds none of a journal that grows with the log.
    hashed: Option<Box<HashedJournal>>,
    /// After a deferred resume ([`Relations::from_checkpoint_deferred`]), until
    /// [`Relations::replay_journal`]: the resumed `next_seq`, with the whole-log sets empty and
    /// `journal` not yet replayed into them.
    unreplayed: Option<u64>,
}

/// The first `len` bytes of a fact journal, as their BLAKE3 hasher.
#[derive(Debug, Clone, Default)]
struct HashedJournal {
    len: u64,
    hasher: blake3::Hasher,
}

impl PartialEq for HashedJournal {
    fn eq(&self, other: &HashedJournal) -> bool {
        self.len == other.len && self.hasher.finalize() == other.hasher.finalize()
    }
}

/// The validator's maps and sets, keyed by the ids, names and keys a log holds. foldhash
/// (hashbrown's default hasher) seeds each map at random as std's SipHash does, so a log cannot
/// be written to collide in them, at a fraction of SipHash's cost on these short keys; nothing
/// depends on their order (checkpoints sort what they keep).
pub(crate) type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
/// See [`Map`].
pub(crate) type Set<T> = HashSet<T, foldhash::fast::RandomState>;

/// The tools a V4 `request/header` defines, `(name, complete definition)` in list order;
/// `None` for a normalized recording's placeholder or name list, which binds any name.
pub(crate) type HeaderTools = Option<Box<[(Box<str>, bool)]>>;

/// The small, copyable part of the state: saved whole in every undo record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Scalars {
    open_turn: Option<u64>,
    open_step: Option<u64>,
    next_turn: u64,
    next_step: u64,
    /// The previous event was an `agent/inbox/spliced` inserting into the next turn.
    prev_next_turn_splice: bool,
    /// A `turn/start` or `turn/end` that crossed the open compaction, not yet proven stale.
    crossing: Option<Crossing>,
    /// The first foreign current-generation delivery marker after the last inherited marker.
    foreign_delivery: Option<u64>,
    /// V4: an inherited end-seed has been seen, so catalog facts are the session's own.
    inherited_seen: bool,
}

impl Default for Scalars {
    fn default() -> Scalars {
        Scalars {
            open_turn: None,
            open_step: None,
            next_turn: 1,
            next_step: 1,
            prev_next_turn_splice: false,
            inherited_seen: false,
            crossing: None,
            foreign_delivery: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Crossing {
    seq: u64,
    turn_end: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Tool {
    call_id: Box<str>,
    name: Box<str>,
    arguments: Box<str>,
    started: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Compaction {
    id: Box<str>,
    source_command_id: Option<Box<str>>,
    /// The owner turn; `None` for a standalone compaction.
    owner: Option<u64>,
    start_seq: u64,
    summarized: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ChainKey {
    turn: u64,
    step: u64,
    provider: Option<Box<str>>,
    policy_key: Option<Box<str>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Chain {
    last_retry: u64,
    retry_id: Box<str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Scheduled {
    turn: u64,
    step: u64,
    started: bool,
}

/// The scheduled attempts of one retry id, `retry` 1, 2, ... in order: a chain's first
/// attempt takes a new id and each later one follows the one before (the retry number rule),
/// so one id's attempts are exactly its chain's. [`RetryMap`] holds one of these for every
/// retry id of the whole log, so the usual chain of one attempt costs its first attempt inline
/// and one pointer: the later ones, when there are any, are boxed (`None` when there are none,
/// so equal chains compare equal whatever they went through).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Attempts {
    first: Scheduled,
    // A thin pointer on purpose: a `Vec` inline is 24 bytes in every entry of the retry map,
    // and the second allocation is paid only by the rare chain of two attempts or more.
    #[allow(clippy::box_collection)]
    later: Option<Box<Vec<Scheduled>>>,
}

// One `RetryMap` entry per retry id of the log: where its id ends, and this.
const _: () = assert!(std::mem::size_of::<Attempts>() <= 32);

impl Attempts {
    fn new(first: Scheduled) -> Attempts {
        Attempts { first, later: None }
    }

    fn later(&self) -> &[Scheduled] {
        self.later.as_deref().map_or(&[], Vec::as_slice)
    }

    /// The number of the last attempt.
    fn last_retry(&self) -> u64 {
        1 + self.later().len() as u64
    }

    fn last(&self) -> &Scheduled {
        self.later().last().unwrap_or(&self.first)
    }

    fn get(&self, retry: u64) -> Option<&Scheduled> {
        match retry {
            0 => None,
            1 => Some(&self.first),
            n => self.later().get(usize::try_from(n - 2).ok()?),
        }
    }

    fn get_mut(&mut self, retry: u64) -> Option<&mut Scheduled> {
        match retry {
            0 => None,
            1 => Some(&mut self.first),
            n => self.later.as_mut()?.get_mut(usize::try_from(n - 2).ok()?),
        }
    }

    /// Adds the attempt after the last one.
    fn push(&mut self, attempt: Scheduled) {
        self.later.get_or_insert_with(Box::default).push(attempt);
    }

    /// Removes the last attempt, unless it is the first: whether it did.
    fn pop(&mut self) -> bool {
        let Some(later) = self.later.as_mut() else {
            return false;
        };
        later.pop();
        if later.is_empty() {
            self.later = None;
        }
        true
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Ptc {
    root: Box<str>,
    /// The start's parent, name and arguments while it is unsettled.
    open: Option<Box<PtcOpen>>,
}

#[derive(Debug, Clone, PartialEq)]
struct PtcOpen {
    parent: Box<str>,
    name: Box<str>,
    arguments: Value,
}

/// How to revert one committed event.
#[derive(Debug)]
pub struct Undo {
    scalars: Scalars,
    change: Change,
    /// A forward command source the event's seq settled.
    settled: Option<(u64, Box<str>)>,
    /// The retry chains the event left behind by moving the current turn or step on.
    pruned: Vec<(ChainKey, Chain)>,
    /// The fact journal's length before the event.
    journal_len: u64,
}

#[derive(Debug)]
enum Change {
    None,
    Provider(Option<Box<str>>),
    /// V4: a `request/header` at this seq was recorded, after this provider.
    Header(Option<Box<str>>, u64),
    /// V4: a catalog fact listed this child.
    CatalogChild(Box<str>),
    /// V4: an inherited end-seed closed this compaction and cleared these catalog children.
    InheritedEnd(Option<Box<Compaction>>, Set<Box<str>>),
    /// Tools were advertised: the lifecycle list had this length before.
    Advertised(usize),
    Started(usize),
    /// The open step's lifecycles (all resolved) were cleared: the list had this length.
    Cleared(usize),
    Resolved(usize, Tool),
    /// The compaction slot held this before.
    Compaction(Option<Box<Compaction>>),
    Summarized,
    /// An attempt scheduled: the last of `retry_id`'s.
    Retry {
        chain: ChainKey,
        previous: Option<Chain>,
        retry_id: Box<str>,
    },
    RetryStarted((Box<str>, u64)),
    CommandRun(Box<str>),
    CommandDone {
        forward: Option<u64>,
    },
    PtcStart(Box<str>),
    PtcSettle(Box<str>, Box<PtcOpen>),
    HumanUser,
}

impl Relations {
    /// The validator for a log of `ctx`'s version (disabled before V2).
    pub fn new(ctx: crate::rules::RuleContext) -> Relations {
        use crate::version::FormatVersion;
        Relations {
            enabled: ctx.version >= FormatVersion::V2,
            v3: ctx.version.has_system_head(),
            v4: ctx.version == FormatVersion::V4,
            snapshot: ctx.snapshot,
            ..Relations::default()
        }
    }

    /// Whether the validator runs for this log's version.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Sets the extensions; only before the first event.
    pub fn set_extensions(&mut self, ext: Extensions) {
        assert!(self.is_fresh(), "extensions are set before the first event");
        self.ext = ext;
    }

    pub fn extensions(&self) -> Extensions {
        self.ext
    }

    /// Sets what the delivery-marker rule reads from the header. Without it, that rule is
    /// not checked (a fold that was never told its header).
    pub fn set_identity(&mut self, identity: Identity) {
        self.identity = Some(identity);
    }

    pub fn identity(&self) -> Option<&Identity> {
        self.identity.as_ref()
    }

    fn is_fresh(&self) -> bool {
        self.s == Scalars::default() && self.command_seqs.is_empty() && self.chains.is_empty()
    }

    /// Reverts one commit; undo records are reverted in reverse order of their commits.
    pub fn undo(&mut self, undo: Undo) {
        self.s = undo.scalars;
        if let Some((seq, id)) = undo.settled {
            self.forward_sources.insert(seq, id);
        }
        match undo.change {
            Change::None => {}
            Change::Provider(previous) => self.provider = previous,
            Change::Header(previous, seq) => {
                self.provider = previous;
                self.headers.remove(&seq);
            }
            Change::CatalogChild(id) => {
                self.catalog_children.remove(&id);
            }
            Change::InheritedEnd(compaction, children) => {
                self.compaction = compaction;
                self.catalog_children = children;
            }
            Change::Advertised(len) => {
                for tool in self.tools.drain(len..).flatten() {
                    self.tool_idx.remove(&tool.call_id);
                }
            }
            Change::Cleared(len) => {
                assert!(self.tools.is_empty(), "cleared lifecycles stay cleared");
                self.tools.resize(len, None);
            }
            Change::Started(idx) => {
                let tool = self.tools[idx].as_mut().expect("a started tool is live");
                tool.started = false;
            }
            Change::Resolved(idx, tool) => {
                self.tool_idx.insert(tool.call_id.clone(), idx);
                self.tools[idx] = Some(tool);
            }
            Change::Compaction(previous) => self.compaction = previous,
            Change::Summarized => {
                let open = self.compaction.as_mut().expect("a summarized compaction");
                open.summarized = false;
            }
            Change::Retry {
                chain,
                previous,
                retry_id,
            } => {
                match previous {
                    Some(previous) => self.chains.insert(chain, previous),
                    None => self.chains.remove(&chain),
                };
                let popped = self
                    .retries
                    .get_mut(&retry_id)
                    .is_some_and(|attempts| attempts.pop());
                if !popped {
                    self.retries.remove_last(&retry_id);
                }
            }
            Change::RetryStarted((retry_id, retry)) => {
                let attempts = self.retries.get_mut(&retry_id);
                let scheduled = attempts.and_then(|a| a.get_mut(retry));
                scheduled.expect("a started retry").started = false;
            }
            Change::CommandRun(id) => {
                self.commands.remove(&id);
                self.command_seqs.pop();
            }
            Change::CommandDone { forward } => {
                self.command_seqs.pop();
                if let Some(seq) = forward {
                    self.forward_sources.remove(&seq);
                }
            }
            Change::PtcStart(sub) => {
                self.ptc.remove(&sub);
            }
            Change::PtcSettle(sub, open) => {
                let entry = self.ptc.get_mut(&sub).expect("a settled start");
                entry.open = Some(open);
            }
            Change::HumanUser => {
                self.human_users.pop();
            }
        }
        self.chains.extend(undo.pruned);
        let hashed = self.hashed.as_ref().map_or(0, |hashed| hashed.len);
        let kept = undo
            .journal_len
            .checked_sub(hashed)
            .expect("an undo reverts facts committed since the journal was last hashed");
        self.journal
            .truncate(usize::try_from(kept).expect("a journal held in memory"));
    }

    /// Drops the retry chains no later `llm/retry` can extend, returning them: a retry names
    /// the open turn and its current step (see [`retry_step`]), and both only move forward
    /// (a `turn/start` opens `next_turn`, a `step/start` opens `next_step`), so a chain of
    /// any other turn and step is never looked up again. The retry ids and their scheduled
    /// attempts stay: their rules reach back across the whole log.
    fn prune_chains(&mut self) -> Vec<(ChainKey, Chain)> {
        let live = retry_step(&self.s);
        self.chains
            .extract_if(|key, _| Some((key.turn, key.step)) != live)
            .collect()
    }
}

/// The turn and step an `llm/retry` must name: the open turn's open step, or its last closed
/// one; `None` while no turn is open.
fn retry_step(s: &Scalars) -> Option<(u64, u64)> {
    retry_step_of(s.open_turn, s.open_step, s.next_step)
}

fn retry_step_of(
    open_turn: Option<u64>,
    open_step: Option<u64>,
    next_step: u64,
) -> Option<(u64, u64)> {
    Some((open_turn?, open_step.unwrap_or(next_step.wrapping_sub(1))))
}

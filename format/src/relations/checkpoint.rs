//! The validator's part of a fold checkpoint: a boundary type, serialized as is, checked on
//! resume. Sets are written sorted, so equal states write equal checkpoints.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::facts::{Fact, Facts};
use super::{
    Attempts, Chain, ChainKey, Compaction, Crossing, Extensions, Ptc, PtcOpen, Relations, Scalars,
    Scheduled, Tool,
};
use crate::rules::RuleContext;

/// Everything [`Relations`] holds besides its configuration (version, identity).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RelationsCheckpoint {
    /// The V1 -> V2 edge's legacy restart extension.
    pub legacy_restart: bool,
    pub open_turn: Option<u64>,
    pub open_step: Option<u64>,
    pub next_turn: u64,
    pub next_step: u64,
    pub prev_next_turn_splice: bool,
    /// `(seq, is turn/end)` of a compaction crossing not yet proven stale.
    pub crossing: Option<(u64, bool)>,
    pub foreign_delivery: Option<u64>,
    pub provider: Option<String>,
    /// The open step's lifecycles in advertisement order; `None` once resolved.
    pub tools: Vec<Option<ToolCheckpoint>>,
    pub compaction: Option<CompactionCheckpoint>,
    pub chains: Vec<ChainCheckpoint>,
    pub forward_sources: Vec<(u64, String)>,
    pub ptc: Vec<PtcCheckpoint>,
    /// V4: an inherited end-seed was seen (catalog facts after it are the session's own).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inherited_seen: bool,
    /// V4: the children the session's own catalog facts list, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub catalog_children: Vec<String>,
    /// The whole-log facts (retry attempts scheduled and started, command runs and
    /// completions, human user messages, V4 request headers) in commit order: the journal
    /// the validator keeps beside its sets, copied as is.
    pub facts: FactJournal,
}

/// The validator's fact journal (`relations/facts.rs` has its layout) as a checkpoint holds it:
/// its bytes, or, in a stored checkpoint, a reference to the first `len` bytes of the journal
/// a store keeps beside its checkpoints, with their BLAKE3 hash. In binary JSON the bytes are
/// a bytes value (tag `0x09`) and the reference an object `{len, blake3}`; in JSON the bytes
/// are an array of byte values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FactJournal {
    Bytes(Vec<u8>),
    Stored { len: u64, blake3: [u8; 32] },
}

impl Default for FactJournal {
    fn default() -> FactJournal {
        FactJournal::Bytes(Vec::new())
    }
}

impl FactJournal {
    /// The journal's bytes, unless it is a reference.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            FactJournal::Bytes(bytes) => Some(bytes),
            FactJournal::Stored { .. } => None,
        }
    }

    /// The reference to `journal` stored elsewhere.
    pub fn stored(journal: &[u8]) -> FactJournal {
        FactJournal::Stored {
            len: journal.len() as u64,
            blake3: *blake3::hash(journal).as_bytes(),
        }
    }

    /// Replaces a reference with the journal `read` returns for its length, checked against
    /// the reference's length and hash; bytes stay as they are.
    pub fn resolve(
        &mut self,
        read: impl FnOnce(u64) -> Result<Vec<u8>, String>,
    ) -> Result<(), String> {
        let FactJournal::Stored { len, blake3 } = *self else {
            return Ok(());
        };
        let journal = read(len)?;
        if journal.len() as u64 != len || *blake3::hash(&journal).as_bytes() != blake3 {
            return Err(not_named(len));
        }
        *self = FactJournal::Bytes(journal);
        Ok(())
    }

    /// Checks a reference against `hash`, the BLAKE3 hash of the stored journal's first `len`
    /// bytes, and leaves it a reference: what [`FactJournal::resolve`] checks, for a reader
    /// that compares journals by reference only and need not hold one. Bytes (an older
    /// build's inline journal) become their reference ([`FactJournal::to_reference`]), so the
    /// journal is a reference whenever this succeeds.
    pub fn check_stored(
        &mut self,
        hash: impl FnOnce(u64) -> Result<[u8; 32], String>,
    ) -> Result<(), String> {
        let FactJournal::Stored { len, blake3 } = *self else {
            self.to_reference();
            return Ok(());
        };
        if hash(len)? != blake3 {
            return Err(not_named(len));
        }
        Ok(())
    }

    /// Makes the journal a reference: bytes become their length and BLAKE3 hash
    /// ([`FactJournal::stored`]); a reference stays as it is.
    pub fn to_reference(&mut self) {
        if let FactJournal::Bytes(bytes) = self {
            *self = FactJournal::stored(bytes);
        }
    }

    /// The journal's length in bytes, held or referenced.
    pub fn byte_len(&self) -> u64 {
        match self {
            FactJournal::Bytes(bytes) => bytes.len() as u64,
            FactJournal::Stored { len, .. } => *len,
        }
    }
}

/// Why a stored journal is refused: its first `len` bytes are not the ones a checkpoint's
/// reference names.
fn not_named(len: u64) -> String {
    format!("the fact journal's first {len} bytes are not the ones the checkpoint names")
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredJournal {
    len: u64,
    #[serde(with = "hash_bytes")]
    blake3: [u8; 32],
}

mod hash_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(hash: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(hash)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
        let bytes = super::FactJournal::deserialize(d)?;
        match bytes {
            super::FactJournal::Bytes(bytes) => bytes
                .try_into()
                .map_err(|_| serde::de::Error::custom("a BLAKE3 hash is 32 bytes")),
            super::FactJournal::Stored { .. } => {
                Err(serde::de::Error::custom("a BLAKE3 hash is 32 bytes"))
            }
        }
    }
}

impl Serialize for FactJournal {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            FactJournal::Bytes(bytes) => serializer.serialize_bytes(bytes),
            FactJournal::Stored { len, blake3 } => StoredJournal {
                len: *len,
                blake3: *blake3,
            }
            .serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for FactJournal {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<FactJournal, D::Error> {
        struct Journal;
        impl<'de> serde::de::Visitor<'de> for Journal {
            type Value = FactJournal;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("the bytes of a fact journal, or a stored journal's length and hash")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<FactJournal, E> {
                Ok(FactJournal::Bytes(v.to_vec()))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<FactJournal, E> {
                Ok(FactJournal::Bytes(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<FactJournal, A::Error> {
                let mut bytes = Vec::new();
                while let Some(byte) = seq.next_element::<u8>()? {
                    bytes.push(byte);
                }
                Ok(FactJournal::Bytes(bytes))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<FactJournal, A::Error> {
                let stored =
                    StoredJournal::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(FactJournal::Stored {
                    len: stored.len,
                    blake3: stored.blake3,
                })
            }
        }
        deserializer.deserialize_any(Journal)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolCheckpoint {
    pub call_id: String,
    pub name: String,
    pub arguments: String,
    pub started: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompactionCheckpoint {
    pub id: String,
    pub source_command_id: Option<String>,
    pub owner: Option<u64>,
    pub start_seq: u64,
    pub summarized: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChainCheckpoint {
    pub turn: u64,
    pub step: u64,
    pub provider: Option<String>,
    pub policy_key: Option<String>,
    pub last_retry: u64,
    pub retry_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PtcCheckpoint {
    pub sub_call_id: String,
    pub root_call_id: String,
    /// The unsettled start's parent, name and arguments.
    pub open: Option<(String, String, Value)>,
}

impl Relations {
    /// The fact journal as it stands.
    ///
    /// # Panics
    ///
    /// After [`Relations::hash_journal`], which dropped the journal's bytes.
    pub fn journal(&self) -> &[u8] {
        assert!(
            self.hashed.is_none(),
            "the fact journal was hashed: only its length and hash are kept"
        );
        &self.journal
    }

    /// The fact journal's length in bytes, hashed ones included.
    pub fn journal_len(&self) -> u64 {
        self.hashed.as_ref().map_or(0, |hashed| hashed.len) + self.journal.len() as u64
    }

    /// The bytes of the fact journal not hashed yet by [`Relations::hash_journal`].
    pub fn unhashed_journal_len(&self) -> usize {
        self.journal.len()
    }

    /// Folds the fact journal's bytes into their BLAKE3 hash and drops them, for a state that
    /// is only ever compared by its journal's length and hash
    /// ([`Relations::journal_reference`]). From then on the state cannot give its journal's
    /// bytes ([`Relations::journal`], [`Relations::checkpoint`]), and an
    /// [`Undo`](super::Undo) committed before the call cannot be reverted.
    ///
    /// # Panics
    ///
    /// On a deferred resume whose journal is not replayed yet.
    pub fn hash_journal(&mut self) {
        assert!(
            self.unreplayed.is_none(),
            "a journal is replayed before it is hashed"
        );
        let hashed = self.hashed.get_or_insert_with(Box::default);
        hashed.hasher.update(&self.journal);
        hashed.len += self.journal.len() as u64;
        self.journal.clear();
    }

    /// The fact journal by reference: its length and BLAKE3 hash, as a checkpoint that names
    /// a stored journal holds it ([`FactJournal::stored`]), whether or not it was hashed.
    pub fn journal_reference(&self) -> FactJournal {
        match &self.hashed {
            None => FactJournal::stored(&self.journal),
            Some(hashed) => {
                let mut hasher = hashed.hasher.clone();
                hasher.update(&self.journal);
                FactJournal::Stored {
                    len: self.journal_len(),
                    blake3: *hasher.finalize().as_bytes(),
                }
            }
        }
    }

    /// The checkpoint of this state; O(state).
    ///
    /// # Panics
    ///
    /// After [`Relations::hash_journal`].
    pub fn checkpoint(&self) -> RelationsCheckpoint {
        self.checkpoint_with(FactJournal::Bytes(self.journal().to_vec()))
    }

    /// The checkpoint of this state with `facts` for its fact journal (a reference to where
    /// the journal is stored); O(state without the journal).
    pub fn checkpoint_with(&self, facts: FactJournal) -> RelationsCheckpoint {
        let s = &self.s;
        let mut chains: Vec<ChainCheckpoint> = (self.chains.iter())
            .map(|(key, chain)| ChainCheckpoint {
                turn: key.turn,
                step: key.step,
                provider: key.provider.as_deref().map(str::to_owned),
                policy_key: key.policy_key.as_deref().map(str::to_owned),
                last_retry: chain.last_retry,
                retry_id: chain.retry_id.to_string(),
            })
            .collect();
        chains.sort();
        let mut ptc: Vec<PtcCheckpoint> = (self.ptc.iter())
            .map(|(sub, p)| PtcCheckpoint {
                sub_call_id: sub.to_string(),
                root_call_id: p.root.to_string(),
                open: p.open.as_ref().map(|o| {
                    (
                        o.parent.to_string(),
                        o.name.to_string(),
                        o.arguments.clone(),
                    )
                }),
            })
            .collect();
        ptc.sort_by(|a, b| a.sub_call_id.cmp(&b.sub_call_id));
        RelationsCheckpoint {
            legacy_restart: self.ext.legacy_interrupted_turn_restart,
            open_turn: s.open_turn,
            open_step: s.open_step,
            next_turn: s.next_turn,
            next_step: s.next_step,
            prev_next_turn_splice: s.prev_next_turn_splice,
            crossing: s.crossing.map(|c| (c.seq, c.turn_end)),
            foreign_delivery: s.foreign_delivery,
            provider: self.provider.as_deref().map(str::to_owned),
            tools: (self.tools.iter())
                .map(|t| {
                    t.as_ref().map(|t| ToolCheckpoint {
                        call_id: t.call_id.to_string(),
                        name: t.name.to_string(),
                        arguments: t.arguments.to_string(),
                        started: t.started,
                    })
                })
                .collect(),
            compaction: self.compaction.as_ref().map(|c| CompactionCheckpoint {
                id: c.id.to_string(),
                source_command_id: c.source_command_id.as_deref().map(str::to_owned),
                owner: c.owner,
                start_seq: c.start_seq,
                summarized: c.summarized,
            }),
            chains,
            forward_sources: (self.forward_sources.iter())
                .map(|(seq, id)| (*seq, id.to_string()))
                .collect(),
            ptc,
            inherited_seen: s.inherited_seen,
            catalog_children: sorted(self.catalog_children.iter().map(|id| id.to_string())),
            facts,
        }
    }

    /// The state a checkpoint records, for a log of `ctx`; checks that its parts agree and
    /// that every seq is older than `next_seq` (forward command sources excepted).
    pub fn from_checkpoint(
        ctx: RuleContext,
        cp: RelationsCheckpoint,
        next_seq: u64,
    ) -> Result<Relations, String> {
        let mut relations = Relations::from_checkpoint_deferred(ctx, cp, next_seq)?;
        relations.replay_journal()?;
        Ok(relations)
    }

    /// [`Relations::from_checkpoint`] without the replay of the fact journal into the
    /// whole-log sets, and without the checks that need them: [`Relations::replay_journal`]
    /// does both, and until it has, [`Relations::check`] refuses every event. The journal is
    /// held as it is, so the state checkpoints the same. A cold open that only reads never
    /// pays for the replay (it grows with the log: 4.4 MB at 10M events).
    pub fn from_checkpoint_deferred(
        ctx: RuleContext,
        cp: RelationsCheckpoint,
        next_seq: u64,
    ) -> Result<Relations, String> {
        let mut relations = Relations::new(ctx);
        if !relations.enabled && cp != RelationsCheckpoint::default_for(false) {
            return Err(format!("format {} has no relationship state", ctx.version));
        }
        relations.ext = Extensions {
            legacy_interrupted_turn_restart: cp.legacy_restart,
        };
        relations.s = Scalars {
            open_turn: cp.open_turn,
            open_step: cp.open_step,
            next_turn: cp.next_turn,
            next_step: cp.next_step,
            prev_next_turn_splice: cp.prev_next_turn_splice,
            crossing: cp
                .crossing
                .map(|(seq, turn_end)| Crossing { seq, turn_end }),
            foreign_delivery: cp.foreign_delivery,
            inherited_seen: cp.inherited_seen,
        };
        if cp.open_step.is_some() && cp.open_turn.is_none() {
            return Err("a step is open outside a turn".to_owned());
        }
        relations.provider = cp.provider.map(String::into_boxed_str);
        for (idx, tool) in cp.tools.into_iter().enumerate() {
            let tool = tool.map(|t| Tool {
                call_id: t.call_id.into(),
                name: t.name.into(),
                arguments: t.arguments.into(),
                started: t.started,
            });
            if let Some(tool) = &tool {
                if relations
                    .tool_idx
                    .insert(tool.call_id.clone(), idx)
                    .is_some()
                {
                    return Err(format!("tool call {} is advertised twice", tool.call_id));
                }
            }
            relations.tools.push(tool);
        }
        if !relations.tools.is_empty() && cp.open_step.is_none() {
            return Err("tool lifecycles outside an open step".to_owned());
        }
        relations.compaction = cp.compaction.map(|c| {
            Box::new(Compaction {
                id: c.id.into(),
                source_command_id: c.source_command_id.map(String::into_boxed_str),
                owner: c.owner,
                start_seq: c.start_seq,
                summarized: c.summarized,
            })
        });
        for c in cp.chains {
            let key = ChainKey {
                turn: c.turn,
                step: c.step,
                provider: c.provider.map(String::into_boxed_str),
                policy_key: c.policy_key.map(String::into_boxed_str),
            };
            let chain = Chain {
                last_retry: c.last_retry,
                retry_id: c.retry_id.into(),
            };
            if relations.chains.insert(key, chain).is_some() {
                return Err("a retry chain is recorded twice".to_owned());
            }
        }
        if !relations.v4 && (cp.inherited_seen || !cp.catalog_children.is_empty()) {
            return Err(format!("format {} records no V4 state", ctx.version));
        }
        relations.catalog_children = cp
            .catalog_children
            .into_iter()
            .map(String::into_boxed_str)
            .collect();
        let FactJournal::Bytes(journal) = cp.facts else {
            return Err("the fact journal is stored elsewhere and was not read".to_owned());
        };
        relations.journal = journal;
        relations.unreplayed = Some(next_seq);
        for (seq, id) in cp.forward_sources {
            if seq < next_seq {
                return Err(format!(
                    "forward command source {seq} is not ahead of the log"
                ));
            }
            relations.forward_sources.insert(seq, id.into());
        }
        for p in cp.ptc {
            let entry = Ptc {
                root: p.root_call_id.into(),
                open: p.open.map(|(parent, name, arguments)| {
                    Box::new(PtcOpen {
                        parent: parent.into(),
                        name: name.into(),
                        arguments,
                    })
                }),
            };
            if relations.ptc.insert(p.sub_call_id.into(), entry).is_some() {
                return Err("a PTC subCallId is recorded twice".to_owned());
            }
        }
        // A checkpoint written before the validator pruned its chains holds dead ones.
        relations.prune_chains();
        Ok(relations)
    }

    /// Whether the fact journal of a deferred resume still waits for its replay.
    pub fn journal_unreplayed(&self) -> bool {
        self.unreplayed.is_some()
    }

    /// Replays the fact journal of a deferred resume into the whole-log sets, checking each
    /// fact and the live retry chains against them; nothing to do otherwise. On an error the
    /// sets stay empty and the journal unreplayed: the checkpoint is unusable.
    pub fn replay_journal(&mut self) -> Result<(), String> {
        let Some(next_seq) = self.unreplayed else {
            return Ok(());
        };
        let journal = std::mem::take(&mut self.journal);
        let replayed = self.replay(&journal, next_seq);
        self.journal = journal;
        if let Err(error) = replayed.and_then(|()| self.check_chains_recorded()) {
            self.clear_whole_log_sets();
            return Err(error);
        }
        self.unreplayed = None;
        Ok(())
    }

    /// A live chain's attempts are exactly its id's, the last one its last.
    fn check_chains_recorded(&self) -> Result<(), String> {
        let recorded = |(key, chain): (&ChainKey, &Chain)| {
            self.retries.get(&chain.retry_id).is_some_and(|attempts| {
                let last = attempts.last();
                attempts.last_retry() == chain.last_retry
                    && (last.turn, last.step) == (key.turn, key.step)
            })
        };
        if !self.chains.iter().all(recorded) {
            return Err("a retry chain's last attempt is not scheduled".to_owned());
        }
        Ok(())
    }

    fn clear_whole_log_sets(&mut self) {
        self.retries.clear();
        self.commands.clear();
        self.command_seqs.clear();
        self.human_users.clear();
        self.headers.clear();
    }
}

impl Relations {
    /// Rebuilds the whole-log sets from a fact journal, checking each fact against the ones
    /// before it and every seq against `next_seq`; the sets must be empty.
    fn replay(&mut self, journal: &[u8], next_seq: u64) -> Result<(), String> {
        let older = |seq: u64, last: Option<u64>| last.is_none_or(|l| l < seq) && seq < next_seq;
        // Size the sets once (the journal is read twice, but no set is rehashed as it grows).
        let (mut firsts, mut humans, mut command_seqs) = (0, 0, 0);
        for fact in Facts::new(journal) {
            match fact? {
                Fact::Retry { retry: 1, .. } => firsts += 1,
                Fact::Retry { .. } => {}
                Fact::HumanUser { .. } => humans += 1,
                Fact::CommandRun { .. } | Fact::CommandDone { .. } => command_seqs += 1,
                Fact::RetryStarted { .. } | Fact::Header { .. } => {}
            }
        }
        self.retries.reserve(firsts);
        self.human_users.reserve_exact(humans);
        self.command_seqs.reserve_exact(command_seqs);
        for fact in Facts::new(journal) {
            match fact? {
                Fact::Retry {
                    retry_id,
                    retry,
                    turn,
                    step,
                } => {
                    let entry = Scheduled {
                        turn,
                        step,
                        started: false,
                    };
                    // A chain's first attempt takes a new id; each later one follows the
                    // id's last attempt, in the same turn and step.
                    let follows = match (retry, self.retries.get_mut(retry_id)) {
                        (1, None) => {
                            self.retries.insert_new(retry_id, Attempts::new(entry));
                            true
                        }
                        (_, Some(attempts))
                            if attempts.last_retry().checked_add(1) == Some(retry)
                                && (attempts.last().turn, attempts.last().step) == (turn, step) =>
                        {
                            attempts.push(entry);
                            true
                        }
                        _ => false,
                    };
                    if !follows {
                        return Err(format!(
                            "scheduled retry {retry} of {retry_id:?} is not of one recorded chain"
                        ));
                    }
                }
                Fact::RetryStarted { retry_id, retry } => {
                    let attempts = self.retries.get_mut(retry_id);
                    match attempts.and_then(|a| a.get_mut(retry)) {
                        Some(s) if !s.started => s.started = true,
                        _ => {
                            return Err(format!(
                                "retry start {retry} of {retry_id:?} pairs no unstarted attempt"
                            ))
                        }
                    }
                }
                Fact::CommandRun { seq, command_id } => {
                    if !older(seq, self.command_seqs.last())
                        || !self.commands.insert(command_id.into())
                    {
                        return Err(format!("command run {seq} is out of order or repeated"));
                    }
                    self.command_seqs.push(seq);
                }
                Fact::CommandDone { seq } => {
                    if !older(seq, self.command_seqs.last()) {
                        return Err(format!("command done {seq} is out of order"));
                    }
                    self.command_seqs.push(seq);
                }
                Fact::HumanUser { seq } => {
                    if !older(seq, self.human_users.last()) {
                        return Err(format!("human user message {seq} is out of order"));
                    }
                    self.human_users.push(seq);
                }
                Fact::Header { seq, tools } => {
                    if !self.v4 {
                        return Err(format!("request header {seq} in a log before V4"));
                    }
                    if !older(seq, self.headers.last_key_value().map(|(s, _)| *s)) {
                        return Err(format!("request header {seq} is out of order"));
                    }
                    let tools = tools.map(|tools| {
                        let tools = tools.into_iter();
                        tools
                            .map(|(name, complete)| (name.into(), complete))
                            .collect()
                    });
                    self.headers.insert(seq, tools);
                }
            }
        }
        Ok(())
    }
}

impl RelationsCheckpoint {
    /// Drops the retry chains no later retry can extend, as the validator does whenever its
    /// turn or step moves on, so that a checkpoint an older build wrote (which kept every
    /// chain) compares equal with one written now of the same state.
    pub fn prune_chains(&mut self) {
        let live = super::retry_step_of(self.open_turn, self.open_step, self.next_step);
        self.chains.retain(|c| Some((c.turn, c.step)) == live);
    }

    /// How many V4 request headers the fact journal records (0 when it cannot be read).
    #[cfg(test)]
    pub(crate) fn header_facts(&self) -> usize {
        let FactJournal::Bytes(journal) = &self.facts else {
            return 0;
        };
        Facts::new(journal)
            .map_while(Result::ok)
            .filter(|fact| matches!(fact, Fact::Header { .. }))
            .count()
    }

    /// The checkpoint of an empty log.
    pub fn default_for(legacy_restart: bool) -> RelationsCheckpoint {
        RelationsCheckpoint {
            legacy_restart,
            next_turn: 1,
            next_step: 1,
            ..RelationsCheckpoint::default()
        }
    }
}

fn sorted(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut items: Vec<String> = items.collect();
    items.sort_unstable();
    items
}

#[cfg(test)]
mod tests {
    use super::FactJournal;

    // Goal: a fact journal round-trips in both forms through binary JSON and JSON, and a
    // reference resolves only to the bytes it names.
    // Method: encode and decode each form; resolve a reference against the right bytes, a
    // short read and other bytes of the same length.
    #[test]
    fn journals_round_trip_and_references_resolve_to_their_bytes() {
        let journal = vec![1u8, 2, 3, 4, 5];
        for form in [
            FactJournal::Bytes(journal.clone()),
            FactJournal::stored(&journal),
        ] {
            let mut raw = Vec::new();
            crate::binary::to_vec(&form, &mut raw).unwrap();
            assert_eq!(
                crate::binary::from_slice::<FactJournal>(&raw).unwrap(),
                form
            );
            let text = serde_json::to_string(&form).unwrap();
            assert_eq!(serde_json::from_str::<FactJournal>(&text).unwrap(), form);
        }
        let mut reference = FactJournal::stored(&journal);
        reference
            .resolve(|len| Ok(journal[..len as usize].to_vec()))
            .unwrap();
        assert_eq!(reference, FactJournal::Bytes(journal.clone()));
        let mut short = FactJournal::stored(&journal);
        assert!(short.resolve(|_| Ok(journal[..4].to_vec())).is_err());
        let mut other = FactJournal::stored(&journal);
        let error = other.resolve(|_| Ok(vec![9; 5])).unwrap_err();
        assert_eq!(
            error,
            "the fact journal's first 5 bytes are not the ones the checkpoint names"
        );
        assert_eq!(other, FactJournal::stored(&journal), "unchanged on failure");
        let mut bytes = FactJournal::Bytes(journal.clone());
        bytes.resolve(|_| panic!("bytes are not read")).unwrap();
    }

    // Goal: checking a reference by hash accepts exactly what resolving it accepts, with the
    // same refusal, and leaves it a reference; a read's own error passes through.
    #[test]
    fn a_reference_checks_by_hash_as_it_resolves() {
        let journal = vec![1u8, 2, 3, 4, 5];
        let reference = FactJournal::stored(&journal);
        let hash_of = |bytes: &[u8]| *blake3::hash(bytes).as_bytes();
        let mut checked = reference.clone();
        checked
            .check_stored(|len| Ok(hash_of(&journal[..len as usize])))
            .unwrap();
        assert_eq!(checked, reference);
        assert_eq!(checked.byte_len(), 5);
        let error = checked.check_stored(|_| Ok(hash_of(&[9; 5]))).unwrap_err();
        assert_eq!(checked, reference, "unchanged on failure");
        let mut resolved = reference.clone();
        assert_eq!(Err(error), resolved.resolve(|_| Ok(vec![9; 5])));
        let error = checked.check_stored(|_| Err("unreadable".to_owned()));
        assert_eq!(error.unwrap_err(), "unreadable");
        let mut bytes = FactJournal::Bytes(journal.clone());
        assert_eq!(bytes.byte_len(), 5);
        bytes
            .check_stored(|_| panic!("inline bytes are not read"))
            .unwrap();
        assert_eq!(bytes, reference, "inline bytes become their reference");
    }
}

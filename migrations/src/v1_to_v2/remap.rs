//! The dense source-to-target seq map and the rewrite of every declared same-log reference.
//!
//! The declared references are those of dsh's frozen inventory (spec 10.4, the same table as
//! the V2 -> V3 edge): the surface envelope (`sourceEventSeqs`, replace endpoints),
//! `command/done.sourceEventSeq`, the compaction `shadowedRange` and `shadowedSeqs`, and the
//! `messageSeqs` of `session/title` and `session/title-llm-request`. The title request's
//! message text keeps its historical seqs byte for byte.

use serde_json::Value;
use sessionlog_format::payload::SeqRange;
use sessionlog_format::{Event, EventData, EventType, SurfaceOp};

use super::V1Reason;

/// The target of a chunk the migration consumed into a stream.
const CONSUMED: u64 = u64::MAX;
/// The target of a source event that has not been emitted yet.
const PENDING: u64 = u64::MAX - 1;

/// Source seq -> target seq, indexed by source seq: one u64 per source event.
#[derive(Debug, Clone, Default)]
pub(crate) struct SeqMap {
    targets: Vec<u64>,
}

/// Where a source seq went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The event survives at this target seq.
    Event(u64),
    /// A chunk folded into an embedded stream; nothing may reference it.
    Consumed,
    /// Not emitted (yet): a later event, one still held behind an attempt, or no event.
    Unmapped,
}

impl SeqMap {
    /// The number of source events seen.
    pub(crate) fn n_events(&self) -> u64 {
        self.targets.len() as u64
    }

    /// Records the next source event, not yet emitted.
    pub(crate) fn push_pending(&mut self) {
        self.targets.push(PENDING);
    }

    pub(crate) fn consume(&mut self, seq: u64) {
        let slot = self.slot(seq);
        assert_eq!(*slot, PENDING, "a chunk is consumed once");
        *slot = CONSUMED;
    }

    pub(crate) fn emit(&mut self, seq: u64, target: u64) {
        assert!(target < PENDING, "target seqs stay below the sentinels");
        let slot = self.slot(seq);
        assert_eq!(*slot, PENDING, "a source event is emitted once");
        *slot = target;
    }

    pub(crate) fn get(&self, seq: u64) -> Target {
        let idx = usize::try_from(seq).ok();
        match idx.and_then(|idx| self.targets.get(idx)) {
            Some(&CONSUMED) => Target::Consumed,
            Some(&PENDING) | None => Target::Unmapped,
            Some(&target) => Target::Event(target),
        }
    }

    fn slot(&mut self, seq: u64) -> &mut u64 {
        let idx = usize::try_from(seq).expect("source seqs are dense and fit in memory");
        &mut self.targets[idx]
    }
}

/// Rewrites every declared reference of `event` (still carrying its source seq) to target
/// seqs. `assistant/message` has already lost its chunk citations.
pub(crate) fn remap(event: &mut Event, map: &SeqMap) -> Result<(), V1Reason> {
    let owner = Owner {
        kind: event.kind.clone(),
        seq: event.seq,
    };
    if let Some(seqs) = &mut event.source_event_seqs {
        for seq in seqs.iter_mut() {
            *seq = owner.map(map, "sources", *seq)?;
        }
    }
    if let Some(SurfaceOp::Replace { start_seq, end_seq }) = &mut event.surface_op {
        *start_seq = owner.map(map, "surface start", *start_seq)?;
        *end_seq = owner.map(map, "surface end", *end_seq)?;
    }
    match &mut event.data {
        EventData::CompactionSummary(data) => {
            owner.map_shadowed(map, &mut data.shadowed_range, &mut data.shadowed_seqs)
        }
        EventData::CompactionPrune(data) => {
            owner.map_shadowed(map, &mut data.shadowed_range, &mut data.shadowed_seqs)
        }
        EventData::Other(data) => match owner.kind {
            EventType::CommandDone => owner.map_member(map, data, "sourceEventSeq"),
            EventType::SessionTitle | EventType::SessionTitleLlmRequest => {
                owner.map_members(map, data, "messageSeqs")
            }
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

/// The event whose references are rewritten; it names them in refusals as dsh does
/// (`command/done 7 sourceEventSeq`).
struct Owner {
    kind: EventType,
    seq: u64,
}

impl Owner {
    fn map(&self, map: &SeqMap, field: &str, target: u64) -> Result<u64, V1Reason> {
        let label = || format!("{} {} {field}", self.kind, self.seq);
        match map.get(target) {
            Target::Event(seq) => Ok(seq),
            Target::Consumed => Err(V1Reason::ConsumedChunk {
                label: label(),
                target,
            }),
            Target::Unmapped => Err(V1Reason::UnmappedReference {
                label: label(),
                target,
            }),
        }
    }

    fn map_shadowed(
        &self,
        map: &SeqMap,
        range: &mut SeqRange,
        seqs: &mut [u64],
    ) -> Result<(), V1Reason> {
        range.start = self.map(map, "shadowedRange start", range.start)?;
        range.end = self.map(map, "shadowedRange end", range.end)?;
        for seq in seqs.iter_mut() {
            *seq = self.map(map, "shadowedSeqs", *seq)?;
        }
        Ok(())
    }

    fn not_a_seq(&self, key: &str) -> V1Reason {
        V1Reason::Payload {
            kind: self.kind.as_str().to_owned(),
            detail: format!("{key} must hold non-negative integer seqs"),
        }
    }

    fn map_member(&self, map: &SeqMap, data: &mut Value, key: &str) -> Result<(), V1Reason> {
        let Some(value) = data.get_mut(key) else {
            return Ok(());
        };
        let seq = value.as_u64().ok_or_else(|| self.not_a_seq(key))?;
        *value = Value::from(self.map(map, key, seq)?);
        Ok(())
    }

    fn map_members(&self, map: &SeqMap, data: &mut Value, key: &str) -> Result<(), V1Reason> {
        let Some(value) = data.get_mut(key) else {
            return Ok(());
        };
        let items = value.as_array_mut().ok_or_else(|| self.not_a_seq(key))?;
        for item in items {
            let seq = item.as_u64().ok_or_else(|| self.not_a_seq(key))?;
            *item = Value::from(self.map(map, key, seq)?);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Source 0 -> 0, 1 consumed, 2 -> 1, 3 pending.
    fn map() -> SeqMap {
        let mut map = SeqMap::default();
        for _ in 0..4 {
            map.push_pending();
        }
        map.emit(0, 0);
        map.consume(1);
        map.emit(2, 1);
        map
    }

    // Goal: the map tells survivors, consumed chunks and unmapped seqs apart.
    // Method: look up each kind of seq, and one past the end.
    #[test]
    fn targets() {
        let map = map();
        assert_eq!(map.get(0), Target::Event(0));
        assert_eq!(map.get(1), Target::Consumed);
        assert_eq!(map.get(2), Target::Event(1));
        assert_eq!(map.get(3), Target::Unmapped);
        assert_eq!(map.get(99), Target::Unmapped);
        assert_eq!(map.n_events(), 4);
    }

    // Goal: opaque references are rewritten in place, and a consumed target is refused with
    // dsh's label.
    // Method: a command/done and a session/title on the map above.
    #[test]
    fn opaque_members() {
        let map = map();
        let mut done = Event::other(
            5,
            0,
            EventType::CommandDone,
            json!({"commandId":"c","kind":"success","sourceEventSeq":2}),
        );
        remap(&mut done, &map).expect("maps");
        assert_eq!(
            done.data,
            EventData::Other(json!({"commandId":"c","kind":"success","sourceEventSeq":1}))
        );
        let mut title = Event::other(
            6,
            0,
            EventType::SessionTitle,
            json!({"title":"t","messageSeqs":[0,1],"source":{"kind":"fallback"}}),
        );
        let refusal = remap(&mut title, &map).expect_err("targets a chunk");
        assert_eq!(
            refusal.to_string(),
            "session/title 6 messageSeqs targets consumed assistant/chunk 1"
        );
        let mut bad = Event::other(7, 0, EventType::SessionTitle, json!({"messageSeqs":"x"}));
        assert!(matches!(
            remap(&mut bad, &map),
            Err(V1Reason::Payload { .. })
        ));
    }
}

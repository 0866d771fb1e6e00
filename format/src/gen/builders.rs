//! Event and payload construction: ids, the simulated clock, seqs, messages and sources.

use serde_json::Value;

use crate::event::{Event, EventData, EventType};
use crate::json::Extra;
use crate::message::{ContentBlock, Message, Source};
use crate::payload::StepRef;

use super::Generator;

impl Generator {
    pub(super) fn message(
        &mut self,
        role: &str,
        source: Source,
        content: Vec<ContentBlock>,
    ) -> Message {
        Message {
            id: Some(self.id("msg")),
            role: Some(role.to_owned()),
            content,
            source: Some(source),
            extra: Extra::new(),
        }
    }

    pub(super) fn step_ref(&self) -> StepRef {
        StepRef {
            turn: self.turn,
            step: self.step,
            extra: Extra::new(),
        }
    }

    pub(super) fn id(&mut self, prefix: &str) -> String {
        format!("{prefix}_{:016x}", self.rng.next_u64())
    }

    /// Moves the clock forward by `lo..=hi` ms.
    pub(super) fn advance(&mut self, lo: u64, hi: u64) {
        self.time += i64::try_from(self.rng.range(lo, hi)).expect("a small delay");
    }

    /// The seq and time of the next event; events a few ms apart.
    pub(super) fn stamp(&mut self) -> (u64, i64) {
        let seq = self.seq;
        self.seq += 1;
        self.advance(0, 3);
        (seq, self.time)
    }

    pub(super) fn push(&mut self, batch: &mut Vec<Event>, data: EventData) -> u64 {
        let (seq, time) = self.stamp();
        batch.push(Event::new(seq, time, data));
        seq
    }

    pub(super) fn push_other(
        &mut self,
        batch: &mut Vec<Event>,
        kind: EventType,
        data: Value,
    ) -> u64 {
        let (seq, time) = self.stamp();
        batch.push(Event::other(seq, time, kind, data));
        seq
    }
}

pub(super) fn source(kind: &str) -> Source {
    Source {
        kind: kind.to_owned(),
        plugin: None,
        provider: None,
        model: None,
        call_id: None,
        extra: Extra::new(),
    }
}

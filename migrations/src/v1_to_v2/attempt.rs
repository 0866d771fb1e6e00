//! One unsettled assistant attempt: its packed chunks and the events held behind them.
//!
//! The held events wait behind the attempt's last chunk until the attempt settles.

use sessionlog_format::stream::{StreamChunk, StreamRecord};
use sessionlog_format::Event;

use super::pack::StreamPacker;

/// A run of consecutive source seqs `first..first + n_events`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    first: u64,
    n_events: u64,
}

/// The chunks of one `(turn, step)` since the last settlement, in source order.
#[derive(Debug, Clone)]
pub(crate) struct Attempt {
    turn: u64,
    step: u64,
    /// The chunk seqs, as runs; a claiming message must cite exactly these, in order.
    spans: Vec<Span>,
    n_chunks: u64,
    last_seq: u64,
    last_time: i64,
    /// A `finish` chunk or a claiming message ended the attempt; the next chunk opens another.
    terminal: bool,
    packer: StreamPacker,
    /// Source events after the last chunk, waiting for the attempt to settle; they keep their
    /// source order and follow the attempt's own event when it is unclaimed.
    pub(crate) held: Vec<Event>,
}

impl Attempt {
    /// Opens an attempt with its first chunk.
    pub(crate) fn new(turn: u64, step: u64, seq: u64) -> Attempt {
        Attempt {
            turn,
            step,
            spans: Vec::new(),
            n_chunks: 0,
            last_seq: seq,
            last_time: 0,
            terminal: false,
            packer: StreamPacker::default(),
            held: Vec::new(),
        }
    }

    /// Whether a chunk of `(turn, step)` continues this attempt.
    pub(crate) fn continues_with(&self, turn: u64, step: u64) -> bool {
        !self.terminal && self.turn == turn && self.step == step
    }

    pub(crate) fn is_step(&self, turn: u64, step: u64) -> bool {
        self.turn == turn && self.step == step
    }

    pub(crate) fn turn_step(&self) -> (u64, u64) {
        (self.turn, self.step)
    }

    /// The seq of the first chunk.
    pub(crate) fn first_seq(&self) -> u64 {
        self.spans.first().map_or(self.last_seq, |span| span.first)
    }

    /// The seq and time of the last chunk: where an unclaimed attempt is placed.
    pub(crate) fn last_chunk(&self) -> (u64, i64) {
        (self.last_seq, self.last_time)
    }

    /// Adds the chunk at `seq`; the caller has released the events held before it.
    pub(crate) fn push(&mut self, seq: u64, time: i64, chunk: StreamChunk) {
        assert!(self.held.is_empty(), "held events precede the new chunk");
        assert!(
            self.n_chunks == 0 || seq > self.last_seq,
            "chunks arrive in seq order"
        );
        if matches!(chunk, StreamChunk::Finish(_)) {
            self.terminal = true;
        }
        self.packer.push(time, chunk);
        match self.spans.last_mut() {
            Some(span) if span.first + span.n_events == seq => span.n_events += 1,
            _ => self.spans.push(Span {
                first: seq,
                n_events: 1,
            }),
        }
        self.n_chunks += 1;
        self.last_seq = seq;
        self.last_time = time;
    }

    /// Whether `sources` cite exactly this attempt's chunks, complete and in order.
    pub(crate) fn is_cited_by(&self, sources: &[u64]) -> bool {
        if sources.len() as u64 != self.n_chunks {
            return false;
        }
        let cited = self
            .spans
            .iter()
            .flat_map(|span| span.first..span.first + span.n_events);
        cited.eq(sources.iter().copied())
    }

    /// The packed stream; consumes the attempt's chunks.
    pub(crate) fn into_stream(self) -> Vec<StreamRecord> {
        self.packer.finish()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn text(value: &str) -> StreamChunk {
        serde_json::from_value(json!({"type":"text-delta","index":0,"text":value}))
            .expect("a valid chunk")
    }

    // Goal: a message claims an attempt only by citing every chunk, in order, across the gaps
    // left by interleaved events.
    // Method: chunks at 2, 3 and 5; complete, partial, reordered and padded citations.
    #[test]
    fn citation_must_be_complete_and_ordered() {
        let mut attempt = Attempt::new(1, 1, 2);
        for seq in [2, 3, 5] {
            attempt.push(seq, seq as i64, text("x"));
        }
        assert!(attempt.is_cited_by(&[2, 3, 5]));
        assert!(!attempt.is_cited_by(&[2, 3]));
        assert!(!attempt.is_cited_by(&[3, 2, 5]));
        assert!(!attempt.is_cited_by(&[2, 3, 4, 5]));
        assert_eq!(attempt.first_seq(), 2);
        assert_eq!(attempt.last_chunk(), (5, 5));
    }

    // Goal: a finish chunk ends the attempt for later chunks of the same step.
    // Method: push a finish and ask whether the same step continues.
    #[test]
    fn finish_is_terminal() {
        let mut attempt = Attempt::new(1, 1, 0);
        attempt.push(0, 0, text("x"));
        assert!(attempt.continues_with(1, 1));
        assert!(!attempt.continues_with(1, 2));
        let finish = serde_json::from_value(json!({"type":"finish","reason":{"kind":"stop"}}))
            .expect("a valid chunk");
        attempt.push(1, 1, finish);
        assert!(!attempt.continues_with(1, 1));
        assert!(attempt.is_step(1, 1));
    }
}

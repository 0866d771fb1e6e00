//! V0 output: the V2 log with every embedded stream expanded into top-level chunk events.
//!
//! A V0 `assistant/message` has no `stream`; the chunks it was assembled from precede it as
//! `assistant/chunk` events, and it cites them in `sourceEventSeqs`. An attempt that produced
//! no message is only its chunks. Expanding shifts every later seq, so the references the
//! generator writes (replace endpoints, `sourceEventSeqs`, title `messageSeqs`, compaction
//! ranges and lists) are remapped through the seq map as events pass.

use serde_json::Value;

use crate::event::{Event, EventData, SurfaceOp};
use crate::json::Extra;
use crate::payload::AssistantChunkData;
use crate::stream::{Delta, StreamChunk, StreamRecord, ToolCallDelta};

/// The running old-seq -> new-seq map of an expansion.
#[derive(Debug, Clone, Default)]
pub(super) struct Expansion {
    /// New seq of each V2 seq so far, indexed by V2 seq.
    map: Vec<u64>,
    next_seq: u64,
}

impl Expansion {
    /// Expands one V2 batch into V0 events with dense seqs.
    pub(super) fn batch(&mut self, batch: Vec<Event>) -> Vec<Event> {
        let mut out = Vec::with_capacity(batch.len() * 4);
        for mut event in batch {
            self.remap(&mut event);
            let (turn, step, stream) = match &mut event.data {
                EventData::AssistantMessage(data) => (data.turn, data.step, data.stream.take()),
                EventData::AssistantAttempt(data) => {
                    (data.turn, data.step, Some(std::mem::take(&mut data.stream)))
                }
                _ => (0, 0, None),
            };
            let mut cited = Vec::new();
            for (time, chunk) in stream.iter().flatten().flat_map(unpack) {
                let data = AssistantChunkData {
                    turn,
                    step,
                    chunk,
                    extra: Extra::new(),
                };
                cited.push(self.next_seq);
                out.push(Event::new(
                    self.next_seq,
                    time,
                    EventData::AssistantChunk(Box::new(data)),
                ));
                self.next_seq += 1;
            }
            let old_seq = event.seq;
            if matches!(event.data, EventData::AssistantAttempt(_)) {
                // The attempt is its chunks; the V1 -> V2 edge rebuilds it at the last one.
                self.map.push(self.next_seq.saturating_sub(1));
                continue;
            }
            if matches!(event.data, EventData::AssistantMessage(_)) {
                event.source_event_seqs = Some(cited);
            }
            debug_assert_eq!(old_seq as usize, self.map.len(), "V2 seqs are dense");
            self.map.push(self.next_seq);
            event.seq = self.next_seq;
            self.next_seq += 1;
            out.push(event);
        }
        out
    }

    fn new_seq(&self, old: u64) -> u64 {
        self.map[usize::try_from(old).expect("a seq fits in usize")]
    }

    /// Rewrites the seqs an event names to their V0 values.
    fn remap(&self, event: &mut Event) {
        if let Some(SurfaceOp::Replace { start_seq, end_seq }) = &mut event.surface_op {
            *start_seq = self.new_seq(*start_seq);
            *end_seq = self.new_seq(*end_seq);
        }
        if let Some(sources) = &mut event.source_event_seqs {
            for seq in sources.iter_mut() {
                *seq = self.new_seq(*seq);
            }
        }
        match &mut event.data {
            EventData::CompactionSummary(data) => {
                data.shadowed_range.start = self.new_seq(data.shadowed_range.start);
                data.shadowed_range.end = self.new_seq(data.shadowed_range.end);
                for seq in &mut data.shadowed_seqs {
                    *seq = self.new_seq(*seq);
                }
            }
            EventData::CompactionPrune(data) => {
                data.shadowed_range.start = self.new_seq(data.shadowed_range.start);
                data.shadowed_range.end = self.new_seq(data.shadowed_range.end);
                for seq in &mut data.shadowed_seqs {
                    *seq = self.new_seq(*seq);
                }
            }
            EventData::Other(Value::Object(data)) => {
                if let Some(Value::Array(seqs)) = data.get_mut("messageSeqs") {
                    for seq in seqs.iter_mut() {
                        if let Some(old) = seq.as_u64() {
                            *seq = Value::from(self.new_seq(old));
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

/// The chunks one stream record stands for, each with its time.
fn unpack(record: &StreamRecord) -> Vec<(i64, StreamChunk)> {
    let times = |time0: i64, dt: &[i64]| {
        std::iter::once(time0)
            .chain(dt.iter().scan(time0, |time, gap| {
                *time += gap;
                Some(*time)
            }))
            .collect::<Vec<_>>()
    };
    match record {
        StreamRecord::Chunk(raw) => vec![(raw.time, raw.chunk.clone())],
        StreamRecord::TextChunks(run) | StreamRecord::ReasoningChunks(run) => {
            let reasoning = matches!(record, StreamRecord::ReasoningChunks(_));
            times(run.time0, &run.dt)
                .into_iter()
                .zip(&run.texts)
                .map(|(time, text)| {
                    let delta = Delta {
                        index: run.index,
                        text: text.to_owned(),
                        extra: Extra::new(),
                    };
                    let chunk = if reasoning {
                        StreamChunk::ReasoningDelta(delta)
                    } else {
                        StreamChunk::TextDelta(delta)
                    };
                    (time, chunk)
                })
                .collect()
        }
        StreamRecord::ToolCallChunks(run) => times(run.time0, &run.dt)
            .into_iter()
            .zip(&run.args)
            .map(|(time, args)| {
                let delta = ToolCallDelta {
                    index: run.index,
                    id: Some(run.id.clone()),
                    name: run.name.clone(),
                    arguments_delta: Some(args.to_owned()),
                    extra: Extra::new(),
                };
                (time, StreamChunk::ToolCallDelta(delta))
            })
            .collect(),
        // The generator writes only the records above.
        _ => Vec::new(),
    }
}

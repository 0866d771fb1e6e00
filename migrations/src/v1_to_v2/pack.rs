//! Packing one attempt's timed chunks into V2 stream records (spec 6.2), and the inverse.
//!
//! A delta joins the last record only when that record holds deltas of the same kind and
//! block (and, for tool calls, the same id and name) and the time gap is a safe integer. A
//! joined delta is appended as its own array member, so no delta boundary is ever lost; every
//! other chunk, and every delta that a packed record could not hold exactly, stays raw.

use sessionlog_format::stream::{
    Delta, RawChunk, StreamChunk, StreamRecord, TextChunks, ToolCallChunks, ToolCallDelta,
};
use sessionlog_format::{Gaps, SAFE_INTEGER_MAX};

/// Why [`unpack_stream`] could not expand a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnpackError {
    #[error("stream record {record_idx} holds {n_members} members but {n_gaps} time gaps")]
    GapCount {
        record_idx: usize,
        n_members: usize,
        n_gaps: usize,
    },
    #[error("stream record {record_idx} holds no member")]
    Empty { record_idx: usize },
    #[error("stream record {record_idx} has a member time outside the i64 range")]
    TimeOverflow { record_idx: usize },
    #[error("stream record {record_idx} has the unknown type \"{tag}\"")]
    UnknownRecord { record_idx: usize, tag: String },
}

/// Packs the chunks of one attempt, in order, without keeping a second raw list.
#[derive(Debug, Clone, Default)]
pub(crate) struct StreamPacker {
    records: Vec<StreamRecord>,
    /// The time of the last member pushed, when there is one.
    last_time: Option<i64>,
}

impl StreamPacker {
    /// Appends one chunk with its event time.
    pub(crate) fn push(&mut self, time: i64, chunk: StreamChunk) {
        let gap = self.last_time.and_then(|last| safe_gap(last, time));
        self.last_time = Some(time);
        let chunk = match gap {
            Some(gap) => match self.join(gap, chunk) {
                None => return,
                Some(chunk) => chunk,
            },
            None => chunk,
        };
        self.records.push(start_record(time, chunk));
    }

    /// The records so far.
    pub(crate) fn finish(self) -> Vec<StreamRecord> {
        self.records
    }

    /// Appends `chunk` to the last record when it fits; gives it back otherwise.
    fn join(&mut self, gap: i64, chunk: StreamChunk) -> Option<StreamChunk> {
        let Some(last) = self.records.last_mut() else {
            return Some(chunk);
        };
        match (last, chunk) {
            (StreamRecord::TextChunks(run), StreamChunk::TextDelta(delta))
            | (StreamRecord::ReasoningChunks(run), StreamChunk::ReasoningDelta(delta))
                if run.index == delta.index && delta.extra.is_empty() =>
            {
                run.dt.push(gap);
                run.texts.push(&delta.text);
                debug_assert_eq!(run.dt.len() + 1, run.texts.len());
                None
            }
            (StreamRecord::ToolCallChunks(run), StreamChunk::ToolCallDelta(delta))
                if packable_call(&delta)
                    && run.index == delta.index
                    && delta.id.as_deref() == Some(run.id.as_str())
                    && delta.name == run.name =>
            {
                run.dt.push(gap);
                run.args
                    .push(delta.arguments_delta.as_deref().unwrap_or_default());
                debug_assert_eq!(run.dt.len() + 1, run.args.len());
                None
            }
            (_, chunk) => Some(chunk),
        }
    }
}

/// The gap between two member times when JavaScript can hold it exactly (dsh's rule).
fn safe_gap(previous: i64, next: i64) -> Option<i64> {
    let gap = next.checked_sub(previous)?;
    (gap.unsigned_abs() <= SAFE_INTEGER_MAX).then_some(gap)
}

/// A tool-call delta a packed record holds exactly: a non-empty id, a name that is absent or
/// non-empty, an arguments delta, and no member beyond those.
fn packable_call(delta: &ToolCallDelta) -> bool {
    let id = delta.id.as_deref().is_some_and(|id| !id.is_empty());
    let name = delta.name.as_deref() != Some("");
    id && name && delta.arguments_delta.is_some() && delta.extra.is_empty()
}

/// The record a chunk opens when it cannot join the last one.
fn start_record(time: i64, chunk: StreamChunk) -> StreamRecord {
    let text_run = |delta: Delta| TextChunks {
        time0: time,
        index: delta.index,
        dt: Gaps::default(),
        texts: [delta.text].into_iter().collect(),
        extra: Default::default(),
    };
    match chunk {
        StreamChunk::TextDelta(delta) if delta.extra.is_empty() => {
            StreamRecord::TextChunks(text_run(delta))
        }
        StreamChunk::ReasoningDelta(delta) if delta.extra.is_empty() => {
            StreamRecord::ReasoningChunks(text_run(delta))
        }
        StreamChunk::ToolCallDelta(delta) if packable_call(&delta) => {
            StreamRecord::ToolCallChunks(ToolCallChunks {
                time0: time,
                index: delta.index,
                dt: Gaps::default(),
                id: delta.id.unwrap_or_default(),
                name: delta.name,
                args: [delta.arguments_delta.unwrap_or_default()]
                    .into_iter()
                    .collect(),
                extra: Default::default(),
            })
        }
        chunk => StreamRecord::Chunk(RawChunk {
            time,
            chunk,
            extra: Default::default(),
        }),
    }
}

/// Expands stream records into the exact timed chunks they were packed from: member `i` of a
/// packed record has time `time0 + dt[0] + ... + dt[i-1]`.
pub fn unpack_stream(stream: &[StreamRecord]) -> Result<Vec<(i64, StreamChunk)>, UnpackError> {
    let mut chunks = Vec::with_capacity(stream.len());
    for (record_idx, record) in stream.iter().enumerate() {
        match record {
            StreamRecord::TextChunks(run) => {
                let times = member_times(record_idx, run.time0, &run.dt, run.texts.len())?;
                for (time, text) in times.into_iter().zip(&run.texts) {
                    chunks.push((time, StreamChunk::TextDelta(delta(run.index, text))));
                }
            }
            StreamRecord::ReasoningChunks(run) => {
                let times = member_times(record_idx, run.time0, &run.dt, run.texts.len())?;
                for (time, text) in times.into_iter().zip(&run.texts) {
                    chunks.push((time, StreamChunk::ReasoningDelta(delta(run.index, text))));
                }
            }
            StreamRecord::ToolCallChunks(run) => {
                let times = member_times(record_idx, run.time0, &run.dt, run.args.len())?;
                for (time, args) in times.into_iter().zip(&run.args) {
                    let call = ToolCallDelta {
                        index: run.index,
                        id: Some(run.id.clone()),
                        name: run.name.clone(),
                        arguments_delta: Some(args.to_owned()),
                        extra: Default::default(),
                    };
                    chunks.push((time, StreamChunk::ToolCallDelta(call)));
                }
            }
            StreamRecord::Chunk(raw) => chunks.push((raw.time, raw.chunk.clone())),
            StreamRecord::Other(object) => {
                let tag = object
                    .get("type")
                    .and_then(|tag| tag.as_str())
                    .unwrap_or("");
                return Err(UnpackError::UnknownRecord {
                    record_idx,
                    tag: tag.to_owned(),
                });
            }
        }
    }
    Ok(chunks)
}

fn delta(index: u64, text: &str) -> Delta {
    Delta {
        index,
        text: text.to_owned(),
        extra: Default::default(),
    }
}

fn member_times(
    record_idx: usize,
    time0: i64,
    dt: &[i64],
    n_members: usize,
) -> Result<Vec<i64>, UnpackError> {
    if n_members == 0 {
        return Err(UnpackError::Empty { record_idx });
    }
    if dt.len() + 1 != n_members {
        return Err(UnpackError::GapCount {
            record_idx,
            n_members,
            n_gaps: dt.len(),
        });
    }
    let mut times = Vec::with_capacity(n_members);
    let mut time = time0;
    times.push(time);
    for gap in dt {
        time = time
            .checked_add(*gap)
            .ok_or(UnpackError::TimeOverflow { record_idx })?;
        times.push(time);
    }
    debug_assert_eq!(times.len(), n_members);
    Ok(times)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn chunk(value: serde_json::Value) -> StreamChunk {
        serde_json::from_value(value).expect("a valid chunk")
    }

    fn pack(chunks: &[(i64, StreamChunk)]) -> Vec<StreamRecord> {
        let mut packer = StreamPacker::default();
        for (time, chunk) in chunks {
            packer.push(*time, chunk.clone());
        }
        packer.finish()
    }

    fn records(value: serde_json::Value) -> Vec<StreamRecord> {
        serde_json::from_value(value).expect("valid records")
    }

    // Goal: consecutive deltas of one block join one record, each delta its own member, with
    // gaps (negative ones too) as dt; raw chunks stay raw.
    // Method: pack a block-start, three text deltas and a finish; compare with the records
    // written by hand, then unpack and compare with the input.
    #[test]
    fn text_deltas_join_without_joining_boundaries() {
        let input = vec![
            (
                5,
                chunk(json!({"type":"block-start","index":0,"blockType":"text"})),
            ),
            (
                10,
                chunk(json!({"type":"text-delta","index":0,"text":"he"})),
            ),
            (
                12,
                chunk(json!({"type":"text-delta","index":0,"text":"llo"})),
            ),
            (11, chunk(json!({"type":"text-delta","index":0,"text":""}))),
            (20, chunk(json!({"type":"finish","reason":{"kind":"stop"}}))),
        ];
        let packed = pack(&input);
        assert_eq!(
            packed,
            records(json!([
                {"type":"chunk","time":5,"chunk":{"type":"block-start","index":0,"blockType":"text"}},
                {"type":"text-chunks","time0":10,"index":0,"dt":[2,-1],"texts":["he","llo",""]},
                {"type":"chunk","time":20,"chunk":{"type":"finish","reason":{"kind":"stop"}}},
            ]))
        );
        assert_eq!(unpack_stream(&packed), Ok(input));
    }

    // Goal: packing never merges different kinds, blocks, calls or names, and never packs a
    // delta a record cannot hold exactly.
    // Method: pairs of deltas that must not join; each pair packs to two records and unpacks
    // back to the input.
    #[test]
    fn different_blocks_and_calls_stay_apart() {
        let call = |index: u64, id: &str, name: Option<&str>| {
            let mut value =
                json!({"type":"tool-call-delta","index":index,"id":id,"argumentsDelta":"x"});
            if let Some(name) = name {
                value["name"] = json!(name);
            }
            chunk(value)
        };
        let pairs = vec![
            (
                chunk(json!({"type":"text-delta","index":0,"text":"a"})),
                chunk(json!({"type":"text-delta","index":1,"text":"b"})),
            ),
            (
                chunk(json!({"type":"text-delta","index":0,"text":"a"})),
                chunk(json!({"type":"reasoning-delta","index":0,"text":"b"})),
            ),
            (call(0, "c1", Some("read")), call(1, "c1", Some("read"))),
            (call(0, "c1", Some("read")), call(0, "c2", Some("read"))),
            (call(0, "c1", Some("read")), call(0, "c1", Some("write"))),
            (call(0, "c1", Some("read")), call(0, "c1", None)),
        ];
        for (first, second) in pairs {
            let input = vec![(1, first), (2, second)];
            let packed = pack(&input);
            assert_eq!(packed.len(), 2, "{packed:?}");
            assert_eq!(unpack_stream(&packed), Ok(input));
        }
        let odd = vec![
            (1, call(0, "", Some("read"))),
            (2, call(0, "c1", Some(""))),
            (
                3,
                chunk(json!({"type":"tool-call-delta","index":0,"id":"c1"})),
            ),
            (
                4,
                chunk(json!({"type":"text-delta","index":0,"text":"a","extra":1})),
            ),
        ];
        let packed = pack(&odd);
        assert!(packed
            .iter()
            .all(|record| matches!(record, StreamRecord::Chunk(_))));
        assert_eq!(unpack_stream(&packed), Ok(odd));
    }

    // Goal: a gap JavaScript cannot hold exactly opens a new record instead of joining.
    // Method: two deltas 2^53 ms apart.
    #[test]
    fn unsafe_gap_opens_a_new_record() {
        let far = i64::try_from(SAFE_INTEGER_MAX).expect("fits") + 1;
        let input = vec![
            (0, chunk(json!({"type":"text-delta","index":0,"text":"a"}))),
            (
                far,
                chunk(json!({"type":"text-delta","index":0,"text":"b"})),
            ),
        ];
        let packed = pack(&input);
        assert_eq!(packed.len(), 2);
        assert_eq!(unpack_stream(&packed), Ok(input));
    }

    // Goal: a malformed record is an error, not a panic or a silent loss.
    // Method: a record with too few gaps, an empty one, one whose times overflow and one of an
    // unknown type.
    #[test]
    fn malformed_records_are_errors() {
        let short =
            records(json!([{"type":"text-chunks","time0":0,"index":0,"dt":[],"texts":["a","b"]}]));
        assert_eq!(
            unpack_stream(&short),
            Err(UnpackError::GapCount {
                record_idx: 0,
                n_members: 2,
                n_gaps: 0
            })
        );
        let empty =
            records(json!([{"type":"reasoning-chunks","time0":0,"index":0,"dt":[],"texts":[]}]));
        assert_eq!(
            unpack_stream(&empty),
            Err(UnpackError::Empty { record_idx: 0 })
        );
        let mut far =
            records(json!([{"type":"text-chunks","time0":0,"index":0,"dt":[1],"texts":["a","b"]}]));
        if let StreamRecord::TextChunks(run) = &mut far[0] {
            run.time0 = i64::MAX;
        }
        assert_eq!(
            unpack_stream(&far),
            Err(UnpackError::TimeOverflow { record_idx: 0 })
        );
        let unknown = records(json!([{"type":"image-chunks","time0":0}]));
        assert_eq!(
            unpack_stream(&unknown),
            Err(UnpackError::UnknownRecord {
                record_idx: 0,
                tag: "image-chunks".to_owned()
            })
        );
    }
}

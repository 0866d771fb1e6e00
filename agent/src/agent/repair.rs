//! Crash repair on reopen (spec 12.4, `interruptedTurnClosers`): an open turn gets one
//! `tool/result` per pending call, `step/end` when a step is open, and
//! `turn/end {kind: interrupted}`, with seqs after the last event and its time. A compaction
//! the crash left open inside that turn is ended first, as failed (`compaction/end` with an
//! `error`): the relationship rules refuse a `turn/end` that crosses an open compaction
//! (spec 12.2), and dsh's closers, written before those rules, never meet one.

use serde_json::json;
use sessionlog_format::payload::CompactionEndData;
use sessionlog_format::{ContentBlock, Event, EventData, Extra};

use super::events::{step_end, tool_result, turn_end, ToolAnswer};

use sessionlog_engine::log_store::LogStore;
use sessionlog_engine::store::StoreError;

const STARTED_TEXT: &str = "The tool call was interrupted after it was recorded, but no result \
was durably recorded. Its outcome is unknown. Decide whether to retry based on whether the call \
is safe to repeat. Do not retry blindly.";
const NOT_STARTED_TEXT: &str = "The tool call was interrupted before the Harness recorded it as \
started. Retry it if it is still needed.";

/// A call advertised and not yet settled: id, step, and its `tool/call` seq once started.
struct Pending {
    id: String,
    step: u64,
    started: Option<u64>,
}

/// The closers for `events` (a whole log in seq order); empty when no turn is open.
pub fn interrupted_turn_closers(events: &[Event]) -> Vec<Event> {
    let mut turn: Option<u64> = None;
    let mut step: Option<u64> = None;
    let mut pending: Vec<Pending> = Vec::new();
    let mut compaction: Option<CompactionEndData> = None;
    for event in events {
        match &event.data {
            EventData::CompactionStart(d) => {
                compaction = Some(CompactionEndData {
                    compaction_id: d.compaction_id.clone(),
                    turn: d.turn.clone(),
                    source_command_id: d.source_command_id.clone(),
                    error: Some(json!({
                        "name": "CompactionInterruptedError",
                        "message": "The compaction was interrupted before it ended."
                    })),
                    extra: Extra::new(),
                });
            }
            EventData::CompactionEnd(_) | EventData::SessionEndSeed(_) => compaction = None,
            EventData::TurnStart(d) => {
                (turn, step) = (Some(d.turn), None);
                pending.clear();
            }
            EventData::TurnEnd(_) => {
                (turn, step) = (None, None);
                pending.clear();
            }
            EventData::StepStart(d) => step = Some(d.step),
            EventData::StepEnd(_) => {
                step = None;
                pending.clear();
            }
            EventData::AssistantMessage(d) => {
                for block in &d.message.content {
                    if let ContentBlock::ToolCall(c) = block {
                        pending.push(Pending {
                            id: c.id.clone(),
                            step: d.step,
                            started: None,
                        });
                    }
                }
            }
            EventData::ToolCall(d) => {
                if let Some(p) = pending.iter_mut().find(|p| p.id == d.call_id) {
                    p.started = Some(event.seq);
                }
            }
            EventData::ToolResult(d) => {
                let id = d.message.source.as_ref().and_then(|s| s.call_id.clone());
                pending.retain(|p| Some(&p.id) != id.as_ref());
            }
            _ => {}
        }
    }
    let Some(turn) = turn else {
        return Vec::new();
    };
    let (mut seq, time) = match events.last() {
        Some(last) => (last.seq + 1, last.time),
        None => return Vec::new(),
    };
    let mut out = Vec::new();
    if let Some(end) = compaction {
        out.push(Event::new(
            seq,
            time,
            EventData::CompactionEnd(Box::new(end)),
        ));
        seq += 1;
    }
    for call in pending {
        let (text, name, code) = match call.started {
            Some(_) => (
                STARTED_TEXT,
                "ToolOutcomeUnknownError",
                "TOOL_OUTCOME_UNKNOWN",
            ),
            None => (NOT_STARTED_TEXT, "ToolNotStartedError", "TOOL_NOT_STARTED"),
        };
        let answer = ToolAnswer {
            call_id: &call.id,
            text,
            is_error: true,
            error: Some(json!({ "name": name, "code": code })),
        };
        let id = format!("interrupted-tool-result-{}-{seq}", call.id);
        let sources = call.started.map(|at| vec![at]);
        out.push(tool_result(
            (seq, time),
            (turn, call.step),
            id,
            answer,
            sources,
        ));
        seq += 1;
    }
    if let Some(step) = step {
        out.push(step_end(seq, time, (turn, step)));
        seq += 1;
    }
    out.push(turn_end(seq, time, turn, "interrupted"));
    out
}

/// Appends the closers to `session` when a turn was left open; returns how many.
pub fn repair_session(store: &dyn LogStore, session: &str) -> Result<usize, StoreError> {
    let head = store.head(session)?;
    let events = store.read_range(session, 0, head.next_seq)?;
    let closers = interrupted_turn_closers(&events);
    let count = closers.len();
    if count > 0 {
        crate::writes::append_events(store, session, head.next_seq, closers)?;
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use sessionlog_format::{read_log, ReadOptions};

    use super::*;

    // Goal: a crash inside a compaction of the open turn is repaired into a log the
    // relationship rules accept (the run property test found `turn/end crosses an open
    // compaction`). Method: a V3 log cut after `compaction/start` inside an open step; its
    // closers end the compaction as failed, then the step and the turn, and the whole log
    // reads back strictly.
    #[test]
    fn an_open_compaction_is_ended_before_the_turn() {
        let rows = [
            r#"{"type":"session","version":3,"id":"s","createdAt":0,"cwd":"/w","isSeeded":false,"delegationDepth":0}"#,
            r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1,"trigger":{"kind":"user"}}}"#,
            r#"{"type":"step/start","seq":1,"time":1,"data":{"turn":1,"step":1}}"#,
            r#"{"type":"compaction/start","seq":2,"time":1,"data":{"compactionId":"c1","turn":1}}"#,
        ];
        let text = rows.join("\n") + "\n";
        let log = read_log(text.as_bytes(), ReadOptions::default()).unwrap();
        let closers = interrupted_turn_closers(&log.events);
        let kinds: Vec<&str> = closers.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, ["compaction/end", "step/end", "turn/end"]);
        let EventData::CompactionEnd(end) = &closers[0].data else {
            panic!("{:?}", closers[0]);
        };
        assert_eq!((end.compaction_id.as_str(), &end.turn), ("c1", &json!(1)));
        assert!(end.error.is_some());

        let mut repaired = text;
        for event in &closers {
            let mut row = Vec::new();
            sessionlog_format::row::encode_row(
                event,
                sessionlog_format::FormatVersion::V3,
                &mut row,
            );
            repaired.push_str(std::str::from_utf8(&row).unwrap());
            repaired.push('\n');
        }
        let read = read_log(repaired.as_bytes(), ReadOptions::default());
        assert!(read.is_ok(), "{read:?}");
    }
}

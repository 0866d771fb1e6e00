//! Two bounded legacy repairs: round-zero goal mutations and the next-turn restart.
//!
//! A legacy goal message carries its goal mutation in `source.change`; the old next-turn
//! restart left the prior turn open.

use serde_json::{json, Value};
use sessionlog_format::message::Source;
use sessionlog_format::payload::TurnEnd;
use sessionlog_format::{Event, EventData, EventType};

use super::V1Reason;

/// The turn and step the source has open, and whether the event just before was a non-empty
/// next-turn inbox splice (the restart pattern's precursor).
#[derive(Debug, Clone, Default)]
pub(crate) struct TurnTracker {
    open_turn: Option<u64>,
    open_step: Option<u64>,
    after_next_turn_splice: bool,
}

impl TurnTracker {
    /// Checks a `turn/start` against the open turn before [`TurnTracker::observe`] sees it.
    /// `Ok(Some(turn))` names the prior turn the restart pattern left open: the caller closes
    /// it with an interrupted `turn/end`. Any other `turn/start` inside an open turn is refused.
    pub(crate) fn check_turn_start(&self, event: &Event) -> Result<Option<u64>, V1Reason> {
        let EventData::TurnStart(data) = &event.data else {
            return Ok(None);
        };
        let Some(open) = self.open_turn else {
            return Ok(None);
        };
        let restart = self.open_step.is_none()
            && self.after_next_turn_splice
            && open.checked_add(1) == Some(data.turn);
        if restart {
            return Ok(Some(open));
        }
        Err(V1Reason::PriorTurnOpen { turn: data.turn })
    }

    /// Follows the turn and step structure through one source event.
    pub(crate) fn observe(&mut self, event: &Event) {
        match &event.data {
            EventData::TurnStart(data) => {
                self.open_turn = Some(data.turn);
                self.open_step = None;
            }
            EventData::TurnEnd(_) => {
                self.open_turn = None;
                self.open_step = None;
            }
            EventData::StepStart(data) => self.open_step = Some(data.step),
            EventData::StepEnd(_) => self.open_step = None,
            _ => {}
        }
        self.after_next_turn_splice = is_next_turn_splice(event);
    }
}

/// An `agent/inbox/spliced` into the next turn that inserted at least one message.
fn is_next_turn_splice(event: &Event) -> bool {
    let EventData::Other(data) = &event.data else {
        return false;
    };
    let inserted = data.get("inserted").and_then(Value::as_array);
    event.kind == EventType::AgentInboxSpliced
        && data.get("target").and_then(Value::as_str) == Some("next-turn")
        && inserted.is_some_and(|items| !items.is_empty())
}

/// The interrupted `turn/end` that closes `turn` at the restarting `turn/start` (its time;
/// the seq is assigned when emitted).
pub(crate) fn interrupted_turn_end(turn: u64, time: i64) -> Event {
    let data = TurnEnd {
        turn,
        reason: json!({"kind": "interrupted"}),
        extra: Default::default(),
    };
    Event::new(0, time, EventData::TurnEnd(Box::new(data)))
}

/// Splits a legacy goal message (`source.kind` `goal` with a `change`) into the `goal/change`
/// that carries the mutation and the same message attributed to the `goal` plugin. Returns
/// the change (seq to be assigned) and rewrites `event` in place; `None` leaves it untouched.
pub(crate) fn split_goal_change(event: &mut Event) -> Option<Event> {
    let EventData::UserMessage(message) = &mut event.data else {
        return None;
    };
    let source = message.source.as_mut()?;
    if source.kind != "goal" {
        return None;
    }
    let change = source.extra.get("change")?.clone();
    *source = Source {
        kind: "plugin".to_owned(),
        plugin: Some("goal".to_owned()),
        provider: None,
        model: None,
        call_id: None,
        extra: Default::default(),
    };
    Some(Event::other(0, event.time, EventType::GoalChange, change))
}

#[cfg(test)]
mod tests {
    use sessionlog_format::row::{decode_row, Decoded, RowContext};
    use sessionlog_format::FormatVersion;

    use super::*;

    fn event(kind: &str, data: Value) -> Event {
        let row = json!({"type": kind, "seq": 0, "time": 7, "data": data});
        let text = serde_json::to_string(&row).expect("serializes");
        let ctx = RowContext {
            version: FormatVersion::V1,
            snapshot: false,
            skim: false,
        };
        match decode_row(text.as_bytes(), ctx, 0) {
            Ok(Decoded::One(event)) => *event,
            other => panic!("not one event: {other:?}"),
        }
    }

    // Goal: only a non-empty next-turn splice right before the next turn's start, with no
    // step open, is the restart pattern; any other start inside an open turn is refused.
    // Method: drive the tracker through the pattern and through its near misses.
    #[test]
    fn restart_pattern_is_bounded() {
        let start = |turn: u64| event("turn/start", json!({"turn": turn}));
        let splice = |inserted: Value| {
            event(
                "agent/inbox/spliced",
                json!({"target":"next-turn","start":0,"inserted":inserted}),
            )
        };
        let mut tracker = TurnTracker::default();
        assert_eq!(tracker.check_turn_start(&start(1)), Ok(None));
        tracker.observe(&start(1));
        tracker.observe(&splice(json!([{"role":"user","content":[]}])));
        assert_eq!(tracker.check_turn_start(&start(2)), Ok(Some(1)));
        assert_eq!(
            tracker.check_turn_start(&start(3)),
            Err(V1Reason::PriorTurnOpen { turn: 3 })
        );
        tracker.observe(&splice(json!([])));
        assert_eq!(
            tracker.check_turn_start(&start(2)),
            Err(V1Reason::PriorTurnOpen { turn: 2 })
        );
        tracker.observe(&event("step/start", json!({"turn":1,"step":1})));
        tracker.observe(&splice(json!([{"role":"user","content":[]}])));
        assert!(tracker.check_turn_start(&start(2)).is_err());
    }

    // Goal: the goal split keeps the message and moves the mutation into goal/change.
    // Method: split a goal message, then a goal message without a change.
    #[test]
    fn goal_split() {
        let data = json!({"id":"g","role":"user","content":[],"source":{"kind":"goal","round":0,"change":{"kind":"goal/change","version":1,"operation":"create"}}});
        let mut message = event("user/message", data);
        let change = split_goal_change(&mut message).expect("a legacy goal message");
        assert_eq!(change.kind, EventType::GoalChange);
        assert_eq!(change.time, 7);
        assert_eq!(
            change.data,
            EventData::Other(json!({"kind":"goal/change","version":1,"operation":"create"}))
        );
        let source = message.message().and_then(|m| m.source.as_ref());
        assert_eq!(source.map(|s| s.kind.as_str()), Some("plugin"));
        assert_eq!(source.and_then(|s| s.plugin.as_deref()), Some("goal"));
        let mut plain = event(
            "user/message",
            json!({"id":"g","role":"user","content":[],"source":{"kind":"goal","round":1}}),
        );
        let before = plain.clone();
        assert!(split_goal_change(&mut plain).is_none());
        assert_eq!(plain, before);
    }
}

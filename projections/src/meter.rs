//! The token meter's context breakdown (spec 14): system, message and tools tokens, folded event by event.
//!
//! Each surface event is priced by the heuristic estimate of its derived message (0 when it
//! derives none, so an empty system node costs nothing). An append pushes the node; a replace
//! splices the range by position and changes the total by the new node's price minus the
//! removed ones. `systemTokens` is the price of the last non-empty surviving system node in
//! surface order; every other node, superseded and dormant prompts included, is message
//! tokens; `toolsTokens` is the tools estimate of the canonical header in force.
//!
//! The state is O(retained surface): the priced nodes and the surviving system nodes. An
//! append costs O(1); a replace costs O(surface) to find its endpoints by position.

use std::sync::Arc;

use sessionlog_format::fold::{canonical_header, derive_event_message, SessionFold};
use sessionlog_format::tokens::{estimate_message, estimate_tools};
use sessionlog_format::{Event, EventData, EventType, SurfaceOp};

use sessionlog_format::projection::{Flow, Projection, Replay};

/// One priced surface node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PricedNode {
    pub seq: u64,
    pub tokens: u64,
    pub system: bool,
}

/// The context breakdown at one point of a session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Breakdown {
    pub system_tokens: u64,
    pub message_tokens: u64,
    pub tools_tokens: u64,
}

impl Breakdown {
    pub fn total(&self) -> u64 {
        self.system_tokens + self.message_tokens + self.tools_tokens
    }
}

/// A replace the priced surface cannot apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MeterError {
    #[error("replace endpoint {missing} is not on the priced surface")]
    Missing { seq: u64, missing: u64 },
    #[error("replace start {start} is after its end {end}")]
    Reversed { seq: u64, start: u64, end: u64 },
}

/// The incremental context-breakdown fold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContextMeter {
    nodes: Vec<PricedNode>,
    /// The surviving system nodes, in surface order: `(seq, tokens)`.
    systems: Vec<(u64, u64)>,
    breakdown: Breakdown,
}

impl ContextMeter {
    pub fn new() -> ContextMeter {
        ContextMeter::default()
    }

    /// The meter of a fold's live surface and header, priced from scratch: the reference the
    /// incremental fold must equal.
    pub fn from_fold(fold: &SessionFold) -> ContextMeter {
        let mut meter = ContextMeter::new();
        for node in fold.admission().surface().nodes() {
            let Some(event) = fold.live_event(node.seq) else {
                continue;
            };
            let priced = price(event);
            meter.nodes.push(priced);
            if priced.system {
                meter.systems.push((priced.seq, priced.tokens));
            }
        }
        let total: u64 = meter.nodes.iter().map(|n| n.tokens).sum();
        let system = meter.effective_system();
        meter.breakdown = Breakdown {
            system_tokens: system,
            message_tokens: total - system,
            tools_tokens: fold
                .request_header()
                .and_then(|h| h.tools.as_ref())
                .map(estimate_tools)
                .unwrap_or(0),
        };
        meter
    }

    pub fn breakdown(&self) -> Breakdown {
        self.breakdown
    }

    pub fn nodes(&self) -> &[PricedNode] {
        &self.nodes
    }

    /// Folds one event. A refused replace leaves the meter unchanged.
    pub fn push(&mut self, event: &Event) -> Result<(), MeterError> {
        if let EventData::RequestHeader(data) = &event.data {
            let header = canonical_header(&data.header);
            self.breakdown.tools_tokens = header.tools.as_ref().map(estimate_tools).unwrap_or(0);
            return Ok(());
        }
        let Some(op) = event.surface_op else {
            return Ok(());
        };
        let node = price(event);
        let previous = self.breakdown.system_tokens + self.breakdown.message_tokens;
        let total = match op {
            SurfaceOp::Append => {
                self.nodes.push(node);
                if node.system {
                    self.systems.push((node.seq, node.tokens));
                }
                previous + node.tokens
            }
            SurfaceOp::Replace { start_seq, end_seq } => {
                let find = |seq: u64| {
                    self.nodes
                        .iter()
                        .rposition(|n| n.seq == seq)
                        .ok_or(MeterError::Missing {
                            seq: event.seq,
                            missing: seq,
                        })
                };
                let (start, end) = (find(start_seq)?, find(end_seq)?);
                if start > end {
                    return Err(MeterError::Reversed {
                        seq: event.seq,
                        start: start_seq,
                        end: end_seq,
                    });
                }
                let systems_before = self.nodes[..start].iter().filter(|n| n.system).count();
                let removed: Vec<PricedNode> = self.nodes.splice(start..=end, [node]).collect();
                let removed_systems = removed.iter().filter(|n| n.system).count();
                let inserted = node.system.then_some((node.seq, node.tokens));
                self.systems
                    .splice(systems_before..systems_before + removed_systems, inserted);
                let removed_tokens: u64 = removed.iter().map(|n| n.tokens).sum();
                (previous + node.tokens).saturating_sub(removed_tokens)
            }
        };
        let system = self.effective_system();
        self.breakdown.system_tokens = system;
        self.breakdown.message_tokens = total.saturating_sub(system);
        Ok(())
    }

    /// The price of the last surviving system node that costs anything.
    fn effective_system(&self) -> u64 {
        let last = self.systems.iter().rev().find(|(_, tokens)| *tokens > 0);
        last.map(|(_, tokens)| *tokens).unwrap_or(0)
    }
}

fn price(event: &Event) -> PricedNode {
    PricedNode {
        seq: event.seq,
        tokens: derive_event_message(event)
            .map(estimate_message)
            .unwrap_or(0),
        system: event.kind == EventType::SystemMessage,
    }
}

/// The breakdown a request was sent with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestBreakdown {
    /// 0-based request number, as `requests` counts them.
    pub index: u64,
    /// Seq of the `assistant/message` or `assistant/attempt` that settled it.
    pub seq: u64,
    pub turn: u64,
    pub step: u64,
    pub breakdown: Breakdown,
}

/// The breakdown of every request of a session, and of its head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokensReport {
    pub session: String,
    pub requests: Vec<RequestBreakdown>,
    /// The breakdown after the last event.
    pub head: Breakdown,
}

/// Folds a session's events in order, noting the breakdown just before each settled call
/// (each `assistant/message` or `assistant/attempt`, spec CLI.md "A request").
#[derive(Debug, Clone)]
pub struct TokensFold {
    session: String,
    meter: ContextMeter,
    requests: Vec<RequestBreakdown>,
}

impl TokensFold {
    pub fn new(session: &str) -> TokensFold {
        TokensFold {
            session: session.to_owned(),
            meter: ContextMeter::new(),
            requests: Vec::new(),
        }
    }

    pub fn push(&mut self, event: &Event) -> Result<(), MeterError> {
        if matches!(
            event.kind,
            EventType::AssistantMessage | EventType::AssistantAttempt
        ) {
            let (turn, step) = event.data.turn_step().unwrap_or((0, 0));
            self.requests.push(RequestBreakdown {
                index: self.requests.len() as u64,
                seq: event.seq,
                turn,
                step,
                breakdown: self.meter.breakdown(),
            });
        }
        self.meter.push(event)
    }

    pub fn finish(self) -> TokensReport {
        TokensReport {
            session: self.session,
            requests: self.requests,
            head: self.meter.breakdown(),
        }
    }
}

/// The breakdown at each request of a log file (any version, migrated in memory) or a stored
/// session.
pub fn tokens<R: Replay>(source: R) -> Result<TokensReport, R::Error> {
    let fold = source.replay(|opening| TokensFold::new(opening.session()))?;
    Ok(fold.finish())
}

impl Projection for TokensFold {
    type Error = MeterError;

    fn push(&mut self, event: Arc<Event>) -> Result<Flow, MeterError> {
        TokensFold::push(self, &event).map(|()| Flow::Continue)
    }
}

#[cfg(test)]
mod tests {
    use sessionlog_format::payload::SystemMessageData;
    use sessionlog_format::{ContentBlock, Extra, Message};

    use super::*;

    fn message(role: &str, text: &str) -> Message {
        Message {
            id: None,
            role: Some(role.to_owned()),
            content: if text.is_empty() {
                Vec::new()
            } else {
                vec![ContentBlock::text(text)]
            },
            source: None,
            extra: Extra::new(),
        }
    }

    fn system(seq: u64, text: &str, op: SurfaceOp) -> Event {
        let data = SystemMessageData {
            turn: 1,
            step: 1,
            message: message("system", text),
            extra: Extra::new(),
        };
        Event::new(seq, 0, EventData::SystemMessage(Box::new(data))).with_surface_op(op)
    }

    fn user(seq: u64, text: &str, op: SurfaceOp) -> Event {
        let data = EventData::UserMessage(Box::new(message("user", text)));
        Event::new(seq, 0, data).with_surface_op(op)
    }

    fn replace(start_seq: u64, end_seq: u64) -> SurfaceOp {
        SurfaceOp::Replace { start_seq, end_seq }
    }

    fn tokens(event: &Event) -> u64 {
        price(event).tokens
    }

    fn fold(events: &[Event]) -> ContextMeter {
        let mut meter = ContextMeter::new();
        for event in events {
            meter.push(event).expect("the event applies");
        }
        meter
    }

    // Goal: emptying the newest prompt makes the previous non-empty one effective again and
    // moves its price out of the message bucket.
    // Method: head S0, user, appended S2; then S2 replaced by an empty system node.
    #[test]
    fn newest_prompt_removal() {
        let s0 = system(0, "the first prompt, a little longer", SurfaceOp::Append);
        let u1 = user(1, "hello there", SurfaceOp::Append);
        let s2 = system(2, "the second prompt", SurfaceOp::Append);
        let mut meter = fold(&[s0.clone(), u1.clone(), s2.clone()]);
        let b = meter.breakdown();
        assert_eq!(b.system_tokens, tokens(&s2));
        assert_eq!(b.message_tokens, tokens(&s0) + tokens(&u1));
        meter
            .push(&system(3, "", replace(2, 2)))
            .expect("the clear applies");
        let b = meter.breakdown();
        assert_eq!(b.system_tokens, tokens(&s0));
        assert_eq!(b.message_tokens, tokens(&u1));
    }

    // Goal: a compaction that shadows a middle prompt removes it from the message bucket and
    // leaves the newest prompt effective.
    // Method: S0, u1, S2, u3, S4, u5; a checkpoint replaces u1..u3.
    #[test]
    fn middle_prompt_removal() {
        let events = vec![
            system(0, "first prompt", SurfaceOp::Append),
            user(1, "one", SurfaceOp::Append),
            system(2, "a middle prompt that is rather long", SurfaceOp::Append),
            user(3, "three", SurfaceOp::Append),
            system(4, "newest", SurfaceOp::Append),
            user(5, "five", SurfaceOp::Append),
        ];
        let mut meter = fold(&events);
        let checkpoint = user(6, "checkpoint", replace(1, 3));
        meter.push(&checkpoint).expect("the replace applies");
        let b = meter.breakdown();
        assert_eq!(b.system_tokens, tokens(&events[4]));
        assert_eq!(
            b.message_tokens,
            tokens(&events[0]) + tokens(&checkpoint) + tokens(&events[5])
        );
        let seqs: Vec<u64> = meter.nodes().iter().map(|n| n.seq).collect();
        assert_eq!(seqs, vec![0, 6, 4, 5]);
    }

    // Goal: the effective prompt follows surface order, not seq order: a head rewrite gets a
    // higher seq but stays at position 0, behind a later appended prompt.
    // Method: S0, u1, S2 appended, then S3 rewrites the head.
    #[test]
    fn surface_order_after_head_rewrite() {
        let s2 = system(2, "appended prompt", SurfaceOp::Append);
        let s3 = system(
            3,
            "a rewritten head prompt, longer than before",
            replace(0, 0),
        );
        let u1 = user(1, "hi", SurfaceOp::Append);
        let meter = fold(&[
            system(0, "head", SurfaceOp::Append),
            u1.clone(),
            s2.clone(),
            s3.clone(),
        ]);
        let b = meter.breakdown();
        assert_eq!(b.system_tokens, tokens(&s2));
        assert_eq!(b.message_tokens, tokens(&s3) + tokens(&u1));
    }

    // Goal: dormant empty system nodes cost nothing and never become the effective prompt.
    // Method: an empty head, a non-empty append, then an empty append.
    #[test]
    fn dormant_empties() {
        let s1 = system(1, "the prompt", SurfaceOp::Append);
        let meter = fold(&[
            system(0, "", SurfaceOp::Append),
            s1.clone(),
            system(2, "", SurfaceOp::Append),
        ]);
        assert_eq!(
            meter.breakdown(),
            Breakdown {
                system_tokens: tokens(&s1),
                message_tokens: 0,
                tools_tokens: 0
            }
        );
    }

    // Goal: a replace whose endpoint is not on the surface is refused and changes nothing.
    // Method: replace a seq never appended.
    #[test]
    fn missing_endpoint_is_refused() {
        let mut meter = fold(&[user(0, "a", SurfaceOp::Append)]);
        let before = meter.clone();
        let refused = meter.push(&user(1, "b", replace(7, 7)));
        assert_eq!(refused, Err(MeterError::Missing { seq: 1, missing: 7 }));
        assert_eq!(meter, before);
    }
}

//! Stateful admission: the surface transition plus the V3 system-head and step rules
//! (spec §7.2, §11 restoration rules 1 to 7).
//!
//! [`Admission::check`] plans without changing anything; [`Admission::commit`] applies the
//! plan. A rejected event therefore leaves the state exactly as it was.

use crate::error::{Rule, Violation};
use crate::event::{Event, EventData, EventType, SurfaceOp};
use crate::rules::{check_event, is_opaque_unknown, RuleContext};
use crate::surface::{Plan, Surface, Undo};
use crate::version::FormatVersion;

/// The admission state of one log.
#[derive(Debug, Clone)]
pub struct Admission {
    ctx: RuleContext,
    surface: Surface,
    open_step: Option<(u64, u64)>,
    /// Seq of the protected system head, once one exists.
    head: Option<u64>,
    /// Whether any surface event has been admitted.
    saw_surface: bool,
    next_seq: u64,
}

/// A checked event's effect, to pass to [`Admission::commit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    plan: Plan,
    becomes_head: bool,
}

impl Admission {
    /// An empty log of the given version.
    pub fn new(ctx: RuleContext) -> Admission {
        Admission {
            ctx,
            surface: Surface::default(),
            open_step: None,
            head: None,
            saw_surface: false,
            next_seq: 0,
        }
    }

    /// The surface as of the last committed event.
    pub fn surface(&self) -> &Surface {
        &self.surface
    }

    /// The seq the next event must carry.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The rule context this admission applies.
    pub fn context(&self) -> RuleContext {
        self.ctx
    }

    /// Checks every rule for `event` as the next event, without changing state.
    pub fn check(&self, event: &Event) -> Result<Admitted, Violation> {
        if event.seq != self.next_seq {
            return Err(Violation::new(
                Rule::SeqGap,
                format!(
                    "session event seq {} is not contiguous; expected {}",
                    event.seq, self.next_seq
                ),
            ));
        }
        check_event(event, self.ctx)?;
        if is_opaque_unknown(event, self.ctx) {
            return Ok(Admitted {
                plan: Plan::Keep,
                becomes_head: false,
            });
        }
        let plan = self.surface.plan(event)?;
        let mut becomes_head = false;
        if self.ctx.version == FormatVersion::V3 {
            becomes_head = self.check_head_rules(event, &plan)?;
        }
        Ok(Admitted { plan, becomes_head })
    }

    /// Applies a checked event.
    pub fn commit(&mut self, event: &Event, admitted: Admitted) -> Undo {
        assert_eq!(
            event.seq, self.next_seq,
            "commit follows check of the same event"
        );
        if !matches!(admitted.plan, Plan::Keep) {
            self.saw_surface = true;
        }
        if admitted.becomes_head {
            self.head = Some(event.seq);
        }
        let undo = self.surface.apply(admitted.plan);
        match &event.data {
            EventData::StepStart(step) => self.open_step = Some((step.turn, step.step)),
            EventData::StepEnd(_) | EventData::TurnEnd(_) => self.open_step = None,
            _ => {}
        }
        self.next_seq += 1;
        undo
    }

    /// Checks and commits `event`.
    pub fn admit(&mut self, event: &Event) -> Result<(), Violation> {
        let admitted = self.check(event)?;
        self.commit(event, admitted);
        Ok(())
    }

    /// Admits a whole batch atomically: when an event is refused, the state is restored to
    /// what it was before the batch, and the refused event's index is returned.
    pub fn admit_batch(&mut self, events: &[Event]) -> Result<(), (usize, Violation)> {
        let saved = (self.open_step, self.head, self.saw_surface, self.next_seq);
        let mut undos = Vec::with_capacity(events.len());
        for (event_idx, event) in events.iter().enumerate() {
            match self.check(event) {
                Ok(admitted) => undos.push(self.commit(event, admitted)),
                Err(violation) => {
                    for undo in undos.into_iter().rev() {
                        self.surface.undo(undo);
                    }
                    (self.open_step, self.head, self.saw_surface, self.next_seq) = saved;
                    return Err((event_idx, violation));
                }
            }
        }
        Ok(())
    }

    /// The V3 restoration rules for the protected head; returns whether `event` becomes it.
    fn check_head_rules(&self, event: &Event, plan: &Plan) -> Result<bool, Violation> {
        let head_error = |m: &str| Err(Violation::new(Rule::HeadProtection, m));
        match &event.data {
            EventData::SystemMessage(data) => {
                if self.open_step != Some((data.turn, data.step)) {
                    return Err(Violation::new(
                        Rule::SystemStep,
                        "system/message does not match an open step",
                    ));
                }
                match (self.head, event.surface_op) {
                    (None, _) if self.saw_surface => {
                        head_error("system/message requires a protected first surface head")
                    }
                    (None, _) => Ok(true),
                    (Some(head), Some(SurfaceOp::Replace { start_seq, end_seq }))
                        if start_seq == head || end_seq == head =>
                    {
                        if start_seq != head || end_seq != head {
                            return head_error(
                                "system/message must replace exactly the current system head",
                            );
                        }
                        Ok(true)
                    }
                    _ => Ok(false),
                }
            }
            _ => {
                if let (Some(head), Plan::Replace { start_idx: 0, .. }) = (self.head, plan) {
                    debug_assert_eq!(self.surface.nodes()[0].seq, head);
                    return head_error(
                        "surface replacement cannot shadow the protected system head",
                    );
                }
                let shadowed = match &event.data {
                    EventData::CompactionSummary(d) => Some(&d.shadowed_seqs),
                    EventData::CompactionPrune(d) => Some(&d.shadowed_seqs),
                    _ => None,
                };
                if let (Some(head), Some(seqs)) = (self.head, shadowed) {
                    if seqs.contains(&head) {
                        return head_error("compaction cannot shadow the protected system head");
                    }
                }
                Ok(false)
            }
        }
    }
}

impl Default for Admission {
    fn default() -> Admission {
        Admission::new(RuleContext {
            version: FormatVersion::V3,
            snapshot: false,
        })
    }
}

/// Whether `kind` is allowed to carry `ignorable: true` on append (log-only events only).
pub fn may_be_ignorable(kind: &EventType) -> bool {
    !kind.is_surface_v3()
}

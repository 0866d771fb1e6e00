//! Stateful admission: the surface transition, the V3 system-head and step rules (spec 7.2,
//! 11 restoration rules 1 to 7) and the relationship validator of V2 and V3 logs (spec 12.2,
//! [`crate::relations`]).
//!
//! [`Admission::check`] plans without changing anything; [`Admission::commit`] applies the
//! plan. A rejected event therefore leaves the state exactly as it was.

use crate::error::{Rule, Violation};
use crate::event::{Event, EventData, EventType, SurfaceOp};
use crate::relations::{self, Extensions, Identity, Relations};
use crate::rules::{check_event, is_opaque_unknown, RuleContext};
use crate::surface::{NodeKind, Plan, Surface, Undo as SurfaceUndo};
use crate::version::FormatVersion;

/// The admission state of one log.
#[derive(Debug, Clone)]
pub struct Admission {
    ctx: RuleContext,
    surface: Surface,
    relations: Relations,
    open_step: Option<(u64, u64)>,
    /// Seq of the protected system head, once one exists.
    head: Option<u64>,
    /// Whether any surface event has been admitted.
    saw_surface: bool,
    next_seq: u64,
    /// Follows a log another admission of the same context admitted: see
    /// [`Admission::following`].
    follows: bool,
}

/// Everything of an [`Admission`] besides its rule context and surface: what a batch restores
/// on refusal, and what a checkpoint stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionState {
    /// `(turn, step)` of the open step.
    pub open_step: Option<(u64, u64)>,
    /// Seq of the protected system head, once one exists.
    pub head: Option<u64>,
    /// Whether any surface event has been admitted.
    pub saw_surface: bool,
    /// The seq the next event must carry.
    pub next_seq: u64,
}

/// A checked event's effect, to pass to [`Admission::commit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    plan: Plan,
    becomes_head: bool,
    /// An unknown ignorable event, kept opaquely: no rule reads it.
    opaque: bool,
}

/// How to revert one commit, for [`Admission::rollback`].
#[derive(Debug)]
pub struct Undo {
    surface: SurfaceUndo,
    /// `None` for a following admission, which keeps no relationship state.
    relations: Option<relations::Undo>,
}

impl Undo {
    /// The surface part: what the event added and shadowed.
    pub fn surface(&self) -> &SurfaceUndo {
        &self.surface
    }
}

impl Admission {
    /// An empty log of the given version.
    pub fn new(ctx: RuleContext) -> Admission {
        Admission {
            ctx,
            surface: Surface::default(),
            relations: Relations::new(ctx),
            open_step: None,
            head: None,
            saw_surface: false,
            next_seq: 0,
            follows: false,
        }
    }

    /// An empty log whose events another admission of the same rule context has admitted, in
    /// the same order, before they get here (the migration proof's source side, fed by a
    /// reader). It checks no stateless or relationship rule and keeps no relationship state
    /// and no tool-result rewrite identity; it plans the surface, the protected head and the
    /// open step exactly as [`Admission::new`] does, so what it derives is the same. It never
    /// admits anything else, and is never checkpointed.
    pub fn following(ctx: RuleContext) -> Admission {
        Admission {
            follows: true,
            ..Admission::new(ctx)
        }
    }

    /// Whether this admission follows another one's ([`Admission::following`]).
    pub fn follows(&self) -> bool {
        self.follows
    }

    /// The surface as of the last committed event.
    pub fn surface(&self) -> &Surface {
        &self.surface
    }

    /// The seq the next event must carry.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The relationship validator's state.
    pub fn relations(&self) -> &Relations {
        &self.relations
    }

    /// The relationship validator's state, to replay a deferred resume's fact journal.
    pub fn relations_mut(&mut self) -> &mut Relations {
        &mut self.relations
    }

    /// Sets the relationship extensions (the V1 -> V2 edge's legacy restart); only before the
    /// first event.
    pub fn set_extensions(&mut self, ext: Extensions) {
        assert_eq!(
            self.next_seq, 0,
            "extensions are set before the first event"
        );
        self.relations.set_extensions(ext);
    }

    /// Tells the delivery-marker rule the log's header.
    pub fn set_identity(&mut self, identity: Identity) {
        self.relations.set_identity(identity);
    }

    /// The faults that only the end of a complete log decides (spec 12.2: a compaction
    /// crossing no end-seed proved stale, a foreign delivery marker outside the inherited
    /// prefix), with the seq at fault. A store's log never ends, so only readers of a whole
    /// log call it.
    pub fn finish(&self) -> Result<(), (u64, Violation)> {
        self.relations.finish()
    }

    /// The rule context this admission applies.
    pub fn context(&self) -> RuleContext {
        self.ctx
    }

    /// The state besides the surface.
    pub fn state(&self) -> AdmissionState {
        AdmissionState {
            open_step: self.open_step,
            head: self.head,
            saw_surface: self.saw_surface,
            next_seq: self.next_seq,
        }
    }

    /// An admission resumed from its parts (a checkpoint), checking that they agree: the head
    /// is node 0 and a system node (V3 only), a surface exists exactly when a surface event
    /// was seen, and every node is older than `next_seq`.
    pub fn from_parts(
        ctx: RuleContext,
        surface: Surface,
        state: AdmissionState,
        relations: Relations,
    ) -> Result<Admission, Violation> {
        let inconsistent = |m: String| Err(Violation::new(Rule::Surface, m));
        if let Some(head) = state.head {
            let first = surface.nodes().first();
            if !ctx.version.has_system_head() {
                return inconsistent(format!("format {} has no protected head", ctx.version));
            }
            if first.is_none_or(|n| n.seq != head || n.kind != NodeKind::System) {
                return inconsistent(format!("head {head} is not the system node 0"));
            }
        }
        if state.saw_surface == surface.is_empty() {
            return inconsistent(format!(
                "saw_surface is {} but the surface has {} nodes",
                state.saw_surface,
                surface.len()
            ));
        }
        if let Some(late) = surface.nodes().iter().find(|n| n.seq >= state.next_seq) {
            return inconsistent(format!(
                "node {} is not older than next seq {}",
                late.seq, state.next_seq
            ));
        }
        let AdmissionState {
            open_step,
            head,
            saw_surface,
            next_seq,
        } = state;
        Ok(Admission {
            ctx,
            surface,
            relations,
            open_step,
            head,
            saw_surface,
            next_seq,
            follows: false,
        })
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
        if !self.follows {
            check_event(event, self.ctx)?;
        }
        if is_opaque_unknown(event, self.ctx) || self.is_obsolete_dispatch(event) {
            return Ok(Admitted {
                plan: Plan::Keep,
                becomes_head: false,
                opaque: true,
            });
        }
        let plan = self.surface.plan(event, !self.follows)?;
        let mut becomes_head = false;
        if self.ctx.version.has_system_head() {
            becomes_head = self.check_head_rules(event, &plan)?;
        }
        if !self.follows {
            self.relations.check(event, &self.surface)?;
        }
        Ok(Admitted {
            plan,
            becomes_head,
            opaque: false,
        })
    }

    /// An ignorable `tool/code-dispatch*` in a V3 log: obsolete, opaque to the relationship
    /// rules (spec 11 restoration rule 8); a required one never gets here (row admission).
    fn is_obsolete_dispatch(&self, event: &Event) -> bool {
        self.ctx.version.has_system_head()
            && matches!(
                event.kind,
                EventType::ToolCodeDispatch | EventType::ToolCodeDispatchStart
            )
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
        let relations = (!self.follows).then(|| self.relations.commit(event, admitted.opaque));
        let surface = self.surface.apply(admitted.plan);
        match &event.data {
            EventData::StepStart(step) => self.open_step = Some((step.turn, step.step)),
            EventData::StepEnd(_) | EventData::TurnEnd(_) => self.open_step = None,
            _ => {}
        }
        self.next_seq += 1;
        Undo { surface, relations }
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
        let saved = self.state();
        let mut undos = Vec::with_capacity(events.len());
        for (event_idx, event) in events.iter().enumerate() {
            match self.check(event) {
                Ok(admitted) => undos.push(self.commit(event, admitted)),
                Err(violation) => {
                    self.rollback(saved, undos);
                    return Err((event_idx, violation));
                }
            }
        }
        Ok(())
    }

    /// Reverts commits: `undos` are theirs in commit order, and `saved` is [`Admission::state`]
    /// from before the first.
    pub fn rollback(&mut self, saved: AdmissionState, undos: Vec<Undo>) {
        assert!(
            saved.next_seq + undos.len() as u64 == self.next_seq,
            "one undo per commit since the state was saved"
        );
        for undo in undos.into_iter().rev() {
            self.surface.undo(undo.surface);
            if let Some(relations) = undo.relations {
                self.relations.undo(relations);
            }
        }
        self.open_step = saved.open_step;
        self.head = saved.head;
        self.saw_surface = saved.saw_surface;
        self.next_seq = saved.next_seq;
    }

    /// The V3 restoration rules for the protected head; returns whether `event` becomes it.
    fn check_head_rules(&self, event: &Event, plan: &Plan) -> Result<bool, Violation> {
        let head_error = |m: &str| Err(Violation::new(Rule::HeadProtection, m));
        match &event.data {
            EventData::SystemMessage(data) => {
                // V4 words this rule as its relationship validator does (`crate::relations`).
                let v4 = self.ctx.version == FormatVersion::V4;
                if !v4 && self.open_step != Some((data.turn, data.step)) {
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

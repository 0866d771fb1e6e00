//! One streaming migration of one log: the chain of stages, V3 admission of the output, and
//! the request-equivalence proof, event by event.
//!
//! The caller reads the source one event at a time, hands each to [`Migrator::push`], and
//! writes whatever comes out; memory holds what the stages hold back (an unsettled assistant
//! attempt, the seq maps) and the two folds' live surfaces, never the whole log.
//!
//! The proof's source side is the source itself, except for a V0 source: there it is the
//! output of the V0 -> V1 edge. That edge keeps seqs and changes no model-visible content by
//! construction (canonical V0 passes unchanged; the legacy shapes it rewrites, such as a flat
//! assistant message or a steering note, derive no message under the V0 rules at all), so the
//! proof covers V1 -> V2 -> V3 in full and V0 -> V1 as far as anything can be derived from V0.
//!
//! A refusal names a source seq: the seq of the event a stage refused when the first stage
//! refused it, else the seq of the source event whose arrival led to the refusal (a later
//! stage may be working on an event an earlier one held back). The refusal's text names the
//! edge that refused.

use std::borrow::Borrow;
use std::sync::Arc;

use sessionlog_format::relations::{Extensions, Identity};
use sessionlog_format::rules::RuleContext;
use sessionlog_format::{
    Admission, Event, EventData, FormatVersion, SessionFold, SessionHeader, Violation,
    FORMAT_VERSION_CURRENT,
};

use crate::catalog::{Catalog, Stage, StageOptions};
use crate::error::{CatalogError, Reason, Refusal};
use crate::proof::RequestProof;

/// How a [`Migrator`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigratorOptions {
    pub stage: StageOptions,
    /// Fold the output under the target's rules and prove every request (on unless
    /// `--no-verify`).
    pub prove: bool,
    /// The version to migrate to (`migrate --to`): [`FORMAT_VERSION_CURRENT`] by default. A
    /// log already at or past it passes through unchanged under its own version's rules.
    pub target: FormatVersion,
}

impl Default for MigratorOptions {
    fn default() -> MigratorOptions {
        MigratorOptions {
            stage: StageOptions::default(),
            prove: true,
            target: FormatVersion::from_number(FORMAT_VERSION_CURRENT)
                .expect("the current version is known"),
        }
    }
}

/// What a finished migration reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Requests proved equal; `None` when the proof was off.
    pub requests_proved: Option<u64>,
    /// The target's inherited cut (0 for an unseeded log).
    pub cut: u64,
    /// Events read and written.
    pub source_events: u64,
    pub target_events: u64,
}

/// The streaming migration of one log from its version to the target one.
pub struct Migrator {
    from: FormatVersion,
    /// The version written: the target, or the source's own when it is newer.
    to: FormatVersion,
    stages: Vec<Box<dyn Stage>>,
    /// The V3 fold of the output (admission and the proof's target side), when proving.
    target: Option<SessionFold>,
    /// The V2 admission of the V1 -> V2 edge's output (with the V2 relationship extensions and
    /// the legacy restart exception), and that stage's index: dsh validates the transformed
    /// artifact there.
    v2_check: Option<(usize, Admission)>,
    proof: Option<RequestProof>,
    /// The proof's source side is the first stage's output (a V0 source).
    proof_after_first: bool,
    source_events: u64,
    target_events: u64,
    finished: bool,
    /// The buffers `push_discarding` passes one source event's output through, kept between
    /// events so that a push allocates nothing of its own.
    passing: [Vec<Arc<Event>>; 2],
}

impl Migrator {
    /// Plans the chain for `header`'s version and converts the header. A log already at the
    /// current version gets an empty chain: its events pass through unchanged.
    pub fn new(
        catalog: &Catalog,
        header: SessionHeader,
        options: MigratorOptions,
    ) -> Result<(Migrator, SessionHeader), MigratorError> {
        let found = header.version.unwrap_or(0);
        let chain = catalog.plan(found, options.target, options.stage)?;
        let from = FormatVersion::from_number(found).ok_or(CatalogError::Newer {
            found,
            current: sessionlog_format::FORMAT_VERSION_NEWEST,
        })?;
        Ok(Migrator::with_stages(
            from,
            chain.into_stages(),
            header,
            options,
        )?)
    }

    /// A migrator over explicit stages (one edge alone, in tests and the single-edge API).
    pub(crate) fn with_stages(
        from: FormatVersion,
        mut stages: Vec<Box<dyn Stage>>,
        header: SessionHeader,
        options: MigratorOptions,
    ) -> Result<(Migrator, SessionHeader), Refusal> {
        let mut header = header;
        let mut v2_check = None;
        for (stage_idx, stage) in stages.iter_mut().enumerate() {
            header = stage.header(header)?;
            if stage.from() == FormatVersion::V1 && stage.to() == FormatVersion::V2 {
                let mut admission = Admission::new(RuleContext {
                    version: FormatVersion::V2,
                    snapshot: options.stage.snapshot,
                });
                admission.set_extensions(Extensions {
                    legacy_interrupted_turn_restart: true,
                });
                admission.set_identity(Identity::of(&header));
                v2_check = Some((stage_idx, admission));
            }
        }
        let identity = Identity::of(&header);
        let to = stages.last().map_or(from, |stage| stage.to());
        let fold = || {
            let mut fold = SessionFold::new(RuleContext {
                version: to,
                snapshot: options.stage.snapshot,
            });
            fold.set_identity(identity.clone());
            fold
        };
        let chained = !stages.is_empty();
        let proof_after_first = from == FormatVersion::V0 && chained;
        let folded = if proof_after_first {
            FormatVersion::V1
        } else {
            from
        };
        let migrator = Migrator {
            from,
            to,
            stages,
            target: options.prove.then(fold),
            v2_check,
            // A current log passes through unchanged: there is nothing to prove, but its events
            // are still admitted under the V3 rules.
            proof: (options.prove && chained)
                .then(|| RequestProof::new(from, folded, to, options.stage.snapshot)),
            proof_after_first,
            passing: Default::default(),
            source_events: 0,
            target_events: 0,
            finished: false,
        };
        Ok((migrator, header))
    }

    /// The version the source is read as.
    pub fn from(&self) -> FormatVersion {
        self.from
    }

    /// The version the output has.
    pub fn to(&self) -> FormatVersion {
        self.to
    }

    /// Tells the migrator that every source event it will be given was admitted, in order, by
    /// an [`Admission`] of `ctx`: a log reader's, which applies every rule of the log's version
    /// before it yields an event. The proof's source side then folds those events without
    /// checking the same rules again (when it folds them under `ctx`; a V0 source's proof folds
    /// the V0 -> V1 edge's output, which no reader admitted). Call it before the first event.
    pub fn source_admitted(&mut self, ctx: RuleContext) {
        if let Some(proof) = self.proof.as_mut().filter(|_| !self.proof_after_first) {
            proof.source_admitted(ctx);
        }
    }

    /// Whether the proof's source side follows the source instead of checking it.
    #[cfg(test)]
    fn proof_follows(&self) -> bool {
        self.proof.as_ref().is_some_and(RequestProof::follows)
    }

    /// Converts the next source event, appending the V3 events it releases to `out`.
    pub fn push(&mut self, event: Event, out: &mut Vec<Event>) -> Result<(), Refusal> {
        if self.finished {
            return Err(Refusal::chain(self.from, self.to, None, Reason::Finished));
        }
        let source_seq = event.seq;
        self.source_events += 1;
        if let Some(proof) = self.proof.as_mut().filter(|_| !self.proof_after_first) {
            proof.source_event(Arc::new(event.clone()));
        }
        let first = out.len();
        let mut events = vec![event];
        for stage_idx in 0..self.stages.len() {
            let mut next = Vec::with_capacity(events.len() + 1);
            for event in events {
                self.stages[stage_idx]
                    .push(event, &mut next)
                    .map_err(|refusal| place(refusal, stage_idx, source_seq))?;
            }
            self.check_v2(stage_idx, &next, Some(source_seq))?;
            if stage_idx == 0 && self.proof_after_first {
                if let Some(proof) = &mut self.proof {
                    next.iter()
                        .for_each(|e| proof.source_event(Arc::new(e.clone())));
                }
            }
            events = next;
        }
        out.append(&mut events);
        self.admit(&out[first..], Some(source_seq))
    }

    /// [`Migrator::push`] for a caller that drops the output (`check`, `--dry-run`): the
    /// same conversion, admission, proof and refusals, with the events shared between the
    /// proof's source side, the stages and the target fold instead of copied.
    pub fn push_discarding(&mut self, event: Event) -> Result<(), Refusal> {
        if self.finished {
            return Err(Refusal::chain(self.from, self.to, None, Reason::Finished));
        }
        let source_seq = event.seq;
        self.source_events += 1;
        let event = Arc::new(event);
        if let Some(proof) = self.proof.as_mut().filter(|_| !self.proof_after_first) {
            proof.source_event(Arc::clone(&event));
        }
        let [mut events, mut next] = std::mem::take(&mut self.passing);
        events.clear();
        events.push(event);
        for stage_idx in 0..self.stages.len() {
            next.clear();
            for event in events.drain(..) {
                self.stages[stage_idx]
                    .push_shared(event, &mut next)
                    .map_err(|refusal| place(refusal, stage_idx, source_seq))?;
            }
            self.check_v2(stage_idx, &next, Some(source_seq))?;
            if stage_idx == 0 && self.proof_after_first {
                if let Some(proof) = &mut self.proof {
                    next.iter().for_each(|e| proof.source_event(Arc::clone(e)));
                }
            }
            std::mem::swap(&mut events, &mut next);
        }
        self.target_events += events.len() as u64;
        for event in events.drain(..) {
            self.admit_one(event, Some(source_seq))?;
        }
        self.passing = [events, next];
        Ok(())
    }

    /// Ends the source: finishes every stage in order, admits and proves the tail, and checks
    /// that every source request was proved.
    pub fn finish(&mut self, out: &mut Vec<Event>) -> Result<Summary, Refusal> {
        if self.finished {
            return Err(Refusal::chain(self.from, self.to, None, Reason::Finished));
        }
        self.finished = true;
        let first = out.len();
        let mut cut = None;
        for stage_idx in 0..self.stages.len() {
            let mut events = Vec::new();
            let finish = self.stages[stage_idx].finish(&mut events)?;
            cut = Some(finish.cut);
            self.check_v2(stage_idx, &events, None)?;
            if stage_idx == 0 && self.proof_after_first {
                if let Some(proof) = &mut self.proof {
                    events
                        .iter()
                        .for_each(|e| proof.source_event(Arc::new(e.clone())));
                }
            }
            for later_idx in stage_idx + 1..self.stages.len() {
                let mut next = Vec::with_capacity(events.len() + 1);
                for event in events {
                    self.stages[later_idx].push(event, &mut next)?;
                }
                self.check_v2(later_idx, &next, None)?;
                events = next;
            }
            out.append(&mut events);
        }
        if let Some((_, admission)) = &self.v2_check {
            let to_refusal = |(seq, v)| relationship(FormatVersion::V1, FormatVersion::V2, seq, v);
            admission.finish().map_err(to_refusal)?;
        }
        self.admit(&out[first..], None)?;
        if let Some(target) = &self.target {
            let from = self.from.max(FormatVersion::V2);
            let to_refusal = |(seq, v)| relationship(from, self.to, seq, v);
            target.finish().map_err(to_refusal)?;
        }
        let requests_proved = match &mut self.proof {
            Some(proof) => Some(proof.finish()?),
            None => None,
        };
        Ok(Summary {
            requests_proved,
            // A current log passes through unchanged; its cut is the reader's business.
            cut: cut.unwrap_or(0),
            source_events: self.source_events,
            target_events: self.target_events,
        })
    }

    /// Folds released target events under the target's rules and proves each request header.
    fn admit(&mut self, events: &[Event], source_seq: Option<u64>) -> Result<(), Refusal> {
        self.target_events += events.len() as u64;
        if self.target.is_none() {
            return Ok(());
        }
        for event in events {
            self.admit_one(Arc::new(event.clone()), source_seq)?;
        }
        Ok(())
    }

    /// Folds one released target event (see [`Migrator::admit`]).
    fn admit_one(&mut self, event: Arc<Event>, source_seq: Option<u64>) -> Result<(), Refusal> {
        let Some(target) = &mut self.target else {
            return Ok(());
        };
        let seq = event.seq;
        let request = matches!(event.data, EventData::RequestHeader(_));
        target.admit(event).map_err(|violation| {
            if violation.rule.is_relational() {
                let from = self.from.max(FormatVersion::V2);
                let mut refusal = relationship(from, self.to, seq, violation);
                refusal.seq = source_seq;
                return refusal;
            }
            let detail = format!("target seq {seq}: {violation}");
            let reason = Reason::InvalidOutput {
                to: self.to,
                detail,
            };
            Refusal::chain(self.from, self.to, source_seq, reason)
        })?;
        if request {
            if let Some(proof) = &mut self.proof {
                proof.target_request(target)?;
            }
        }
        Ok(())
    }
}

impl Migrator {
    /// Admits the V1 -> V2 edge's output under the V2 rules when `stage_idx` is that edge.
    fn check_v2<E: Borrow<Event>>(
        &mut self,
        stage_idx: usize,
        events: &[E],
        source_seq: Option<u64>,
    ) -> Result<(), Refusal> {
        let Some((v2_idx, admission)) = &mut self.v2_check else {
            return Ok(());
        };
        if *v2_idx != stage_idx {
            return Ok(());
        }
        for event in events {
            let event = event.borrow();
            admission.admit(event).map_err(|violation| {
                let mut refusal = if violation.rule.is_relational() {
                    relationship(FormatVersion::V1, FormatVersion::V2, event.seq, violation)
                } else {
                    let detail = format!("v2 seq {}: {violation}", event.seq);
                    let to = FormatVersion::V2;
                    Refusal::v1_to_v2(None, Reason::InvalidOutput { to, detail })
                };
                refusal.seq = source_seq;
                refusal
            })?;
        }
        Ok(())
    }
}

/// A relationship refusal of the artifact an edge (`from` -> `to`) produced; `seq` is the
/// artifact's seq, which the caller may replace with a source seq.
fn relationship(from: FormatVersion, to: FormatVersion, seq: u64, violation: Violation) -> Refusal {
    Refusal {
        from,
        to,
        seq: Some(seq),
        reason: Reason::Relationship {
            from,
            to,
            seq,
            rule: violation.rule,
            message: violation.message,
        },
    }
}

/// A refusal from stage `stage_idx` while the migrator worked on source event `source_seq`:
/// the first stage's seq is a source seq; a later stage's is not, so the source seq replaces it.
fn place(mut refusal: Refusal, stage_idx: usize, source_seq: u64) -> Refusal {
    if stage_idx > 0 || refusal.seq.is_none() {
        refusal.seq = Some(source_seq);
    }
    refusal
}

/// Why a migration could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MigratorError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Refused(#[from] Refusal),
}

#[cfg(test)]
mod tests {
    use sessionlog_format::gen::{GenOptions, Generator};

    use super::*;

    // Goal: `push_discarding` converts, admits and proves exactly what `push` does, and so does
    // a migrator whose proof follows a source a reader admitted (`source_admitted`): the same
    // summary for generated logs of every version, and the same refusal where one refuses.
    // Method: three migrators per log, one fed through `push`, two through `push_discarding`
    // (one told the reader's rule context); a V3 log with a duplicated seq for the refusal. The
    // proof follows only when the context is the source fold's own and the source is not V0.
    #[test]
    fn discarding_push_proves_what_push_proves() {
        let run = |version: FormatVersion, seed: u64, damage: bool| {
            let options = GenOptions {
                events: 2_000,
                seed,
            };
            let mut generator = Generator::for_version(options, version).unwrap();
            let header = generator.header();
            let catalog = Catalog::released();
            let options = MigratorOptions {
                target: FormatVersion::V4,
                ..MigratorOptions::default()
            };
            let (mut pushed, _) = Migrator::new(&catalog, header.clone(), options).unwrap();
            let (mut discarded, _) = Migrator::new(&catalog, header.clone(), options).unwrap();
            let (mut followed, _) = Migrator::new(&catalog, header, options).unwrap();
            let (mut elsewhere, _) = Migrator::new(&catalog, generator.header(), options).unwrap();
            let ctx = RuleContext {
                version,
                snapshot: false,
            };
            followed.source_admitted(ctx);
            elsewhere.source_admitted(RuleContext {
                snapshot: true,
                ..ctx
            });
            // A V0 log's proof folds the V0 -> V1 edge's output, which no reader admitted.
            assert_eq!(followed.proof_follows(), version != FormatVersion::V0);
            assert!(!elsewhere.proof_follows() && !discarded.proof_follows());
            let mut out = Vec::new();
            while let Some(batch) = generator.next_batch() {
                for mut event in batch {
                    if damage && event.seq == 1_500 {
                        event.seq = 1_499;
                    }
                    let a = pushed.push(event.clone(), &mut out);
                    let b = discarded.push_discarding(event.clone());
                    let c = followed.push_discarding(event);
                    assert_eq!(a, b, "{version:?} seed {seed}");
                    assert_eq!(a, c, "{version:?} seed {seed}");
                    a?;
                }
            }
            let a = pushed.finish(&mut out);
            let b = discarded.finish(&mut Vec::new());
            let c = followed.finish(&mut Vec::new());
            assert_eq!(a, b, "{version:?} seed {seed}");
            assert_eq!(a, c, "{version:?} seed {seed}");
            a
        };
        for version in [FormatVersion::V0, FormatVersion::V2, FormatVersion::V3] {
            for seed in [3, 9] {
                let summary = run(version, seed, false).unwrap();
                assert!(summary.requests_proved.unwrap() > 0, "{version:?}");
            }
        }
        assert!(run(FormatVersion::V3, 4, true).is_err());
    }
}

//! The chain of adjacent edges: the [`Stage`] trait and the [`Catalog`] that checks the chain.

use std::sync::Arc;

use sessionlog_format::{Event, FormatVersion, SessionHeader, FORMAT_VERSION_NEWEST};

use crate::error::{CatalogError, Refusal};
use crate::v0_to_v1::V0ToV1;
use crate::v1_to_v2::V1ToV2;
use crate::v2_to_v3::V2ToV3;
use crate::v3_to_v4::V3ToV4;

/// One adjacent edge `vN -> vN+1`, applied to one log. A stage is stateful and streaming:
/// [`Stage::header`] first, then [`Stage::push`] for every source event in seq order, then
/// [`Stage::finish`] once.
pub trait Stage {
    /// The version the stage reads.
    fn from(&self) -> FormatVersion;
    /// The version the stage writes; always `from() + 1`.
    fn to(&self) -> FormatVersion;
    /// Converts the header. Called once, before any event.
    fn header(&mut self, header: SessionHeader) -> Result<SessionHeader, Refusal>;
    /// Converts the next source event, appending zero or more target events to `out`.
    fn push(&mut self, event: Event, out: &mut Vec<Event>) -> Result<(), Refusal>;
    /// [`Stage::push`] on shared events, for a caller that keeps the source too (the
    /// request proof): an edge that leaves an event as it is may pass it on without a copy.
    /// The events and refusals are those of [`Stage::push`].
    fn push_shared(&mut self, event: Arc<Event>, out: &mut Vec<Arc<Event>>) -> Result<(), Refusal> {
        let mut owned = Vec::new();
        self.push(Arc::unwrap_or_clone(event), &mut owned)?;
        out.extend(owned.into_iter().map(Arc::new));
        Ok(())
    }
    /// Ends the log: appends any trailing events and reports the target's inherited cut.
    fn finish(&mut self, out: &mut Vec<Event>) -> Result<Finish, Refusal>;
}

/// What a stage reports when its source ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finish {
    /// The number of inherited events at the start of the target (0 for an unseeded log).
    pub cut: u64,
}

/// Options every stage is built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StageOptions {
    /// The source is a normalized recording (spec 18): placeholders stand where values are
    /// expected.
    pub snapshot: bool,
}

/// An edge of the catalog: its two versions and how to build a fresh stage for one log.
#[derive(Debug, Clone, Copy)]
pub struct EdgeSpec {
    pub from: FormatVersion,
    pub to: FormatVersion,
    pub build: fn(StageOptions) -> Box<dyn Stage>,
}

/// Exactly one adjacent edge per step, from the lowest supported version to the current one;
/// checked when built (spec 9, chain integrity).
#[derive(Debug, Clone)]
pub struct Catalog {
    /// Sorted by `from`; `edges[i].to == edges[i + 1].from`.
    edges: Vec<EdgeSpec>,
}

impl Catalog {
    /// Checks that `edges` form one chain ending at the current version, with no gap, no
    /// duplicate and no edge that skips a version.
    pub fn new(mut edges: Vec<EdgeSpec>) -> Result<Catalog, CatalogError> {
        if edges.is_empty() {
            return Err(CatalogError::Empty);
        }
        for edge in &edges {
            if edge.to.number() != edge.from.number() + 1 {
                return Err(CatalogError::NotAdjacent {
                    from: edge.from,
                    to: edge.to,
                });
            }
        }
        edges.sort_by_key(|edge| edge.from);
        for pair in edges.windows(2) {
            if pair[0].from == pair[1].from {
                return Err(CatalogError::Duplicate { from: pair[0].from });
            }
            if pair[0].to != pair[1].from {
                return Err(CatalogError::Gap {
                    missing: pair[0].to,
                });
            }
        }
        let last = edges.last().expect("checked non-empty above").to;
        if last.number() != FORMAT_VERSION_NEWEST {
            let current = FormatVersion::from_number(FORMAT_VERSION_NEWEST)
                .expect("the newest version is known");
            return Err(CatalogError::Incomplete { last, current });
        }
        Ok(Catalog { edges })
    }

    /// The edges this build ships: V0 -> V1 -> V2 -> V3 -> V4.
    pub fn released() -> Catalog {
        Catalog::new(vec![
            EdgeSpec {
                from: FormatVersion::V0,
                to: FormatVersion::V1,
                build: build_v0_to_v1,
            },
            EdgeSpec {
                from: FormatVersion::V1,
                to: FormatVersion::V2,
                build: build_v1_to_v2,
            },
            EdgeSpec {
                from: FormatVersion::V2,
                to: FormatVersion::V3,
                build: build_v2_to_v3,
            },
            EdgeSpec {
                from: FormatVersion::V3,
                to: FormatVersion::V4,
                build: build_v3_to_v4,
            },
        ])
        .expect("the released edges form one chain")
    }

    /// The oldest version the catalog can migrate from.
    pub fn lowest(&self) -> FormatVersion {
        self.edges[0].from
    }

    /// The edges, oldest first.
    pub fn edges(&self) -> &[EdgeSpec] {
        &self.edges
    }

    /// The fresh stages that take a log of version `found` (a header number) to `target`;
    /// empty when the log is already at or past it (a V4 log asked for V3 passes through:
    /// there is no downgrade edge).
    pub fn plan(
        &self,
        found: u64,
        target: FormatVersion,
        options: StageOptions,
    ) -> Result<Chain, CatalogError> {
        if found > FORMAT_VERSION_NEWEST {
            return Err(CatalogError::Newer {
                found,
                current: FORMAT_VERSION_NEWEST,
            });
        }
        let newest = self.edges.last().expect("checked non-empty").to;
        if target > newest {
            return Err(CatalogError::NoTarget { target, newest });
        }
        let lowest = self.lowest();
        let version =
            FormatVersion::from_number(found).expect("numbers up to the newest version are known");
        if version >= target {
            return Ok(Chain { stages: Vec::new() });
        }
        if version < lowest {
            return Err(CatalogError::NoUpgradePath {
                found: version,
                lowest,
            });
        }
        let stages = self
            .edges
            .iter()
            .filter(|edge| edge.from >= version && edge.to <= target)
            .map(|edge| (edge.build)(options))
            .collect();
        Ok(Chain { stages })
    }
}

fn build_v0_to_v1(options: StageOptions) -> Box<dyn Stage> {
    Box::new(V0ToV1::new(options))
}

fn build_v1_to_v2(options: StageOptions) -> Box<dyn Stage> {
    Box::new(V1ToV2::new(options))
}

fn build_v2_to_v3(options: StageOptions) -> Box<dyn Stage> {
    Box::new(V2ToV3::new(options))
}

/// The chain migrates one log: its children are not in view, so the edge gets dsh's explicit
/// empty child evidence (ARCHITECTURE.md, "Decisions where the spec is silent").
fn build_v3_to_v4(options: StageOptions) -> Box<dyn Stage> {
    Box::new(V3ToV4::new(options))
}

/// The stages of one planned migration, applied in order; itself a streaming transform from
/// the found version to the current one.
pub struct Chain {
    stages: Vec<Box<dyn Stage>>,
}

impl Chain {
    /// How many edges the chain crosses.
    pub fn n_stages(&self) -> usize {
        self.stages.len()
    }

    /// The stages, oldest edge first.
    pub fn into_stages(self) -> Vec<Box<dyn Stage>> {
        self.stages
    }

    /// Converts the header through every stage.
    pub fn header(&mut self, header: SessionHeader) -> Result<SessionHeader, Refusal> {
        self.stages
            .iter_mut()
            .try_fold(header, |header, stage| stage.header(header))
    }

    /// Converts one source event through every stage, appending the current-version events
    /// to `out`.
    pub fn push(&mut self, event: Event, out: &mut Vec<Event>) -> Result<(), Refusal> {
        self.push_from(0, vec![event], out)
    }

    /// Ends every stage in order; the last stage's cut is the chain's.
    pub fn finish(&mut self, out: &mut Vec<Event>) -> Result<Finish, Refusal> {
        let mut finish = Finish { cut: 0 };
        for stage_idx in 0..self.stages.len() {
            let mut tail = Vec::new();
            finish = self.stages[stage_idx].finish(&mut tail)?;
            self.push_from(stage_idx + 1, tail, out)?;
        }
        Ok(finish)
    }

    fn push_from(
        &mut self,
        stage_idx: usize,
        mut events: Vec<Event>,
        out: &mut Vec<Event>,
    ) -> Result<(), Refusal> {
        for stage in &mut self.stages[stage_idx..] {
            let mut next = Vec::with_capacity(events.len() + 1);
            for event in events {
                stage.push(event, &mut next)?;
            }
            events = next;
        }
        out.append(&mut events);
        Ok(())
    }
}

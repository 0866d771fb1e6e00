//! The catalog: chain integrity when built, planning, and running a chain.

use pretty_assertions::assert_eq;
use sessionlog_format::{Event, FormatVersion, SessionHeader};
use sessionlog_migrations::{
    Catalog, CatalogError, EdgeSpec, Finish, Refusal, Stage, StageOptions,
};

use crate::support::*;

/// A stage that changes nothing but the header version; stands in for the #5 edges.
struct Identity(FormatVersion);

impl Stage for Identity {
    fn from(&self) -> FormatVersion {
        self.0
    }
    fn to(&self) -> FormatVersion {
        FormatVersion::from_number(self.0.number() + 1).expect("a next version")
    }
    fn header(&mut self, mut header: SessionHeader) -> Result<SessionHeader, Refusal> {
        header.version = Some(self.to().number());
        Ok(header)
    }
    fn push(&mut self, event: Event, out: &mut Vec<Event>) -> Result<(), Refusal> {
        out.push(event);
        Ok(())
    }
    fn finish(&mut self, _out: &mut Vec<Event>) -> Result<Finish, Refusal> {
        Ok(Finish { cut: 0 })
    }
}

fn edge(from: FormatVersion, to: FormatVersion) -> EdgeSpec {
    fn identity_v0(_: StageOptions) -> Box<dyn Stage> {
        Box::new(Identity(FormatVersion::V0))
    }
    fn identity_v1(_: StageOptions) -> Box<dyn Stage> {
        Box::new(Identity(FormatVersion::V1))
    }
    let released = *Catalog::released()
        .edges()
        .iter()
        .find(|edge| edge.from == FormatVersion::V2)
        .expect("the released V2 -> V3 edge");
    let build = match from {
        FormatVersion::V0 => identity_v0,
        FormatVersion::V1 => identity_v1,
        _ => released.build,
    };
    EdgeSpec { from, to, build }
}

// Goal: a catalog is refused when it is empty, has a gap, a duplicate, a skipping edge, or
// does not reach the current version.
// Method: one malformed catalog per rule.
#[test]
fn catalog_checks_the_chain() {
    use FormatVersion::*;
    let new = |edges: Vec<EdgeSpec>| Catalog::new(edges).map(|c| c.lowest());
    assert_eq!(new(vec![]), Err(CatalogError::Empty));
    assert_eq!(
        new(vec![edge(V0, V1), edge(V2, V3), edge(V3, V4)]),
        Err(CatalogError::Gap { missing: V1 })
    );
    assert_eq!(
        new(vec![edge(V2, V3), edge(V2, V3), edge(V3, V4)]),
        Err(CatalogError::Duplicate { from: V2 })
    );
    assert_eq!(
        new(vec![edge(V1, V3)]),
        Err(CatalogError::NotAdjacent { from: V1, to: V3 })
    );
    assert_eq!(
        new(vec![edge(V1, V2)]),
        Err(CatalogError::Incomplete {
            last: V2,
            current: V4
        })
    );
    assert_eq!(
        new(vec![edge(V3, V4), edge(V2, V3), edge(V0, V1), edge(V1, V2)]),
        Ok(V0)
    );
    assert_eq!(Catalog::released().lowest(), V0);
}

// Goal: planning by stored version and target: a log at or past the target needs no stage,
// older versions the edges from there up to the target, newer and unsupported ones are
// refused with their texts.
// Method: plan 4 to 0 towards V3 and V4 on the released catalog, 5, and 1 on one holding
// V2 -> V3 -> V4 alone.
#[test]
fn plan_by_version() {
    use FormatVersion::*;
    let catalog = Catalog::released();
    let options = StageOptions::default();
    for (found, to_v3, to_v4) in [(4, 0, 0), (3, 0, 1), (2, 1, 2), (1, 2, 3), (0, 3, 4)] {
        assert_eq!(
            catalog.plan(found, V3, options).expect("v3").n_stages(),
            to_v3
        );
        assert_eq!(
            catalog.plan(found, V4, options).expect("v4").n_stages(),
            to_v4
        );
    }
    let newer = catalog.plan(5, V4, options).err().expect("newer");
    assert_eq!(
        newer.to_string(),
        "stored Session uses newer format v5; this build writes v4"
    );
    let short = Catalog::new(vec![edge(V2, V3), edge(V3, V4)]).expect("two edges");
    let older = short.plan(1, V3, options).err().expect("no path");
    assert_eq!(
        older.to_string(),
        "stored Session uses format v1, older than the supported v2, and this build ships no \
         upgrade path for it"
    );
    let full =
        Catalog::new(vec![edge(V0, V1), edge(V1, V2), edge(V2, V3), edge(V3, V4)]).expect("full");
    assert_eq!(full.plan(0, V3, options).expect("v0").n_stages(), 3);
}

// Goal: a planned chain gives the same result as the V2 -> V3 stage run directly.
// Method: run the prompt log through a chain of two identity edges and the real edge.
#[test]
fn chain_runs_every_stage() {
    use FormatVersion::*;
    let log = vec![
        TURN_START.to_owned(),
        step_start(1),
        request_header(Some(r#""x""#)),
        STEP_END.to_owned(),
    ];
    let (mut header, events) = read_v2(HEADER, &log);
    let direct = migrate_events(header.clone(), events.clone()).expect("migrates");
    header.version = Some(1);
    let full =
        Catalog::new(vec![edge(V0, V1), edge(V1, V2), edge(V2, V3), edge(V3, V4)]).expect("full");
    let mut chain = full
        .plan(1, V3, StageOptions { snapshot: true })
        .expect("v1");
    assert_eq!(chain.n_stages(), 2);
    let migrated_header = chain.header(header).expect("header");
    let mut out = Vec::new();
    for event in events {
        chain.push(event, &mut out).expect("push");
    }
    let finish = chain.finish(&mut out).expect("finish");
    assert_eq!(
        (migrated_header, out, finish.cut),
        (direct.header, direct.events, direct.cut)
    );
}

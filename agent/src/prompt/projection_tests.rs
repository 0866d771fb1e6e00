//! Tests of the system-prompt decision table, on system nodes alone (the store-level cases are
//! in `agent/tests/it/prompt.rs`).

use pretty_assertions::assert_eq;
use proptest::prelude::*;

use super::*;

/// Nodes from `(seq, text)`; an empty text is a dormant (inactive) node.
fn nodes(items: &[(u64, &str)]) -> Vec<SystemNode> {
    items
        .iter()
        .map(|(seq, text)| SystemNode {
            seq: *seq,
            text: (*text).to_owned(),
            active: !text.is_empty(),
        })
        .collect()
}

fn append(text: &str) -> Commit {
    Commit::Append { text: text.into() }
}

fn replace(seq: u64, text: &str) -> Commit {
    Commit::Replace {
        seq,
        text: text.into(),
    }
}

const CONTINUING: ProjectOptions = ProjectOptions {
    in_history: true,
    starts_series: false,
};
const NEW_SERIES: ProjectOptions = ProjectOptions {
    in_history: true,
    starts_series: true,
};
const INCAPABLE: ProjectOptions = ProjectOptions {
    in_history: false,
    starts_series: false,
};

// Goal: with no surviving system node the head is reserved on every route, even for an empty
// rendering. Method: project onto an empty node list.
#[test]
fn first_render_appends_even_when_empty() {
    for options in [CONTINUING, NEW_SERIES, INCAPABLE] {
        assert_eq!(project(&[], "P", options), vec![append("P")]);
        assert_eq!(project(&[], "", options), vec![append("")]);
    }
}

// Goal: an unchanged prompt commits nothing on a continuing route or an incapable one whose
// head holds it alone. Method: matching texts.
#[test]
fn unchanged_prompt_is_a_no_op() {
    assert_eq!(project(&nodes(&[(0, "A")]), "A", CONTINUING), vec![]);
    assert_eq!(project(&nodes(&[(0, "A")]), "A", INCAPABLE), vec![]);
    assert_eq!(
        project(&nodes(&[(0, "A"), (9, "B")]), "B", CONTINUING),
        vec![]
    );
    assert_eq!(
        project(&nodes(&[(0, ""), (9, "B"), (12, "")]), "B", CONTINUING),
        vec![]
    );
}

// Goal: an in-history route whose series continues appends a changed prompt and leaves node 0
// alone. Method: a changed text over a head and over a head plus an update.
#[test]
fn continuing_capable_route_appends() {
    assert_eq!(
        project(&nodes(&[(0, "A")]), "B", CONTINUING),
        vec![append("B")]
    );
    assert_eq!(
        project(&nodes(&[(0, "A"), (7, "B")]), "C", CONTINUING),
        vec![append("C")]
    );
    // Returning to the head's text is still a change of the effective text.
    assert_eq!(
        project(&nodes(&[(0, "A"), (7, "B")]), "A", CONTINUING),
        vec![append("A")]
    );
}

// Goal: without the capability a change empties active later nodes, then rewrites the head;
// an empty head that becomes non-empty is rewritten in place. Method: several surfaces.
#[test]
fn incapable_route_rewrites_the_head() {
    assert_eq!(
        project(&nodes(&[(0, "A")]), "B", INCAPABLE),
        vec![replace(0, "B")]
    );
    assert_eq!(
        project(&nodes(&[(0, "")]), "B", INCAPABLE),
        vec![replace(0, "B")]
    );
    assert_eq!(
        project(
            &nodes(&[(0, "A"), (5, "B"), (8, ""), (9, "C")]),
            "D",
            INCAPABLE
        ),
        vec![replace(5, ""), replace(9, ""), replace(0, "D")]
    );
    // The head already holds the rendering: only the later versions are emptied.
    assert_eq!(
        project(&nodes(&[(0, "A"), (5, "B")]), "A", INCAPABLE),
        vec![replace(5, "")]
    );
}

// Goal: at a new series the capable route consolidates into node 0, with or without later
// survivors and with changed or unchanged effective text. Method: the four combinations.
#[test]
fn new_series_rebaselines() {
    assert_eq!(
        project(&nodes(&[(0, "A")]), "B", NEW_SERIES),
        vec![replace(0, "B")]
    );
    assert_eq!(project(&nodes(&[(0, "A")]), "A", NEW_SERIES), vec![]);
    assert_eq!(
        project(&nodes(&[(0, "A"), (7, "B")]), "C", NEW_SERIES),
        vec![replace(7, ""), replace(0, "C")]
    );
    assert_eq!(
        project(&nodes(&[(0, "A"), (7, "B")]), "B", NEW_SERIES),
        vec![replace(7, ""), replace(0, "B")],
        "consolidation applies even when the effective text is unchanged"
    );
}

// Goal: an empty rendering clears every active version on any route, skips dormant empties,
// and commits nothing once everything is clear. Method: three active versions.
#[test]
fn empty_rendering_clears_every_active_node() {
    let three = nodes(&[(0, "A"), (5, "B"), (6, ""), (9, "C")]);
    for options in [CONTINUING, NEW_SERIES, INCAPABLE] {
        assert_eq!(
            project(&three, "", options),
            vec![replace(5, ""), replace(9, ""), replace(0, "")]
        );
        assert_eq!(
            project(&nodes(&[(0, ""), (5, ""), (9, "")]), "", options),
            vec![]
        );
    }
}

// Goal: dormant empty tails supply no effective text, so clearing cannot resurrect an older
// prompt, and restoring text follows the admission rule. Method: a cleared surface.
#[test]
fn dormant_tails_and_restoring() {
    let cleared = nodes(&[(0, ""), (5, ""), (9, "")]);
    assert_eq!(effective_text(&cleared), None);
    assert_eq!(project(&cleared, "N", CONTINUING), vec![append("N")]);
    assert_eq!(project(&cleared, "N", NEW_SERIES), vec![replace(0, "N")]);
    assert_eq!(project(&cleared, "N", INCAPABLE), vec![replace(0, "N")]);
    // A compaction shadowed the later update: the head is effective again, a change appends.
    let shadowed = nodes(&[(0, "A")]);
    assert_eq!(project(&shadowed, "B", CONTINUING), vec![append("B")]);
    assert_eq!(
        effective_seq(&nodes(&[(0, "A"), (5, "B"), (9, "")])),
        Some(5)
    );
}

// Goal: commits become V3 system/message events with the right surface metadata.
// Method: one append and one replacement, compared field by field.
#[test]
fn commit_events_carry_surface_metadata() {
    let stamp = EventStamp {
        next_seq: 10,
        time: 7,
        turn: 2,
        step: 1,
    };
    let events = commit_events(&[replace(0, ""), append("P")], stamp);
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].seq, 10);
    assert_eq!(
        events[0].surface_op,
        Some(SurfaceOp::Replace {
            start_seq: 0,
            end_seq: 0
        })
    );
    assert_eq!(events[0].source_event_seqs, Some(vec![0]));
    assert!(events[0].message().unwrap().content.is_empty());
    assert_eq!(events[1].seq, 11);
    assert_eq!(events[1].surface_op, Some(SurfaceOp::Append));
    assert_eq!(events[1].source_event_seqs, None);
    let message = events[1].message().unwrap();
    assert_eq!(message.role.as_deref(), Some("system"));
    assert_eq!(message_text(message), "P");
    let source = message.source.as_ref().unwrap();
    assert_eq!(
        (source.kind.as_str(), source.plugin.as_deref()),
        ("plugin", Some(PROMPT_PLUGIN))
    );
}

/// Applies commits to a node list the way the surface does.
fn apply(surface: &mut Vec<SystemNode>, commits: &[Commit], next_seq: &mut u64) {
    for commit in commits {
        let node = SystemNode {
            seq: *next_seq,
            text: commit.text().to_owned(),
            active: !commit.text().is_empty(),
        };
        *next_seq += 1;
        match commit {
            Commit::Append { .. } => surface.push(node),
            Commit::Replace { seq, .. } => {
                let idx = surface
                    .iter()
                    .position(|n| n.seq == *seq)
                    .expect("a live target");
                surface[idx] = node;
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Render {
        text: &'static str,
        options: ProjectOptions,
    },
    /// A compaction shadows the later system node at this index (never the head).
    Shadow(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let render = (
        prop::sample::select(vec!["", "A", "B", "C"]),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(text, in_history, starts_series)| Op::Render {
            text,
            options: ProjectOptions {
                in_history,
                starts_series,
            },
        });
    prop_oneof![4 => render, 1 => (0usize..4).prop_map(Op::Shadow)]
}

proptest! {
    // Goal: after any sequence of projections the effective text is exactly the current
    // rendering (none for an empty one); a consolidating projection leaves the head as the
    // only active node; a continuing in-history projection never touches node 0; projecting
    // the same rendering again commits nothing. Method: random renderings, routes, series
    // starts and compactions over a model of the system nodes.
    #[test]
    fn effective_text_is_always_the_rendering(ops in prop::collection::vec(op(), 1..40)) {
        let mut surface: Vec<SystemNode> = Vec::new();
        let mut next_seq = 0;
        for op in ops {
            match op {
                Op::Shadow(idx) => {
                    if surface.len() > 1 {
                        surface.remove(1 + idx % (surface.len() - 1));
                    }
                }
                Op::Render { text, options } => {
                    let head_before = surface.first().cloned();
                    let commits = project(&surface, text, options);
                    apply(&mut surface, &commits, &mut next_seq);
                    let expected = (!text.is_empty()).then_some(text);
                    prop_assert_eq!(effective_text(&surface), expected);
                    if !text.is_empty() && (!options.in_history || options.starts_series) {
                        let active: Vec<u64> =
                            surface.iter().filter(|n| n.active).map(|n| n.seq).collect();
                        prop_assert_eq!(active, vec![surface[0].seq]);
                    }
                    if !text.is_empty() && options.in_history && !options.starts_series {
                        if let Some(head) = head_before {
                            prop_assert_eq!(&surface[0], &head);
                        }
                    }
                    let again = ProjectOptions { starts_series: false, ..options };
                    prop_assert_eq!(project(&surface, text, again), vec![]);
                }
            }
        }
    }
}

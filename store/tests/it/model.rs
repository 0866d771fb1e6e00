//! Model-based test: random operation sequences run against the store and against a trivial
//! in-memory model (a `Vec<Event>` and a naive fold written from the spec), compared after
//! every step. Failing cases are shrunk and printed by proptest.

use proptest::prelude::*;
use sessionlog_format::{Event, EventData, Message, SurfaceOp};
use sessionlog_store::embedded::{Store, StoreError};

use crate::support::*;

#[derive(Debug, Clone)]
enum Op {
    /// Append a user message.
    User,
    /// Append a tool result.
    ToolResult,
    /// Replace the live nodes between two positions (as fractions of the surface) by a user
    /// checkpoint; positions that would touch the head make it a refused operation.
    Replace(u8, u8),
    /// Rewrite the system head with a new prompt (or clear it).
    HeadRewrite(bool),
    /// Rewrite a live tool result's content.
    Prune(u8),
    /// Append with a stale expected seq: a conflict that changes nothing.
    Stale,
    /// Close the store and open it again.
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::User),
        3 => Just(Op::ToolResult),
        2 => (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Op::Replace(a, b)),
        1 => any::<bool>().prop_map(Op::HeadRewrite),
        1 => any::<u8>().prop_map(Op::Prune),
        1 => Just(Op::Stale),
        1 => Just(Op::Reopen),
    ]
}

/// The trivial model: every event, and the rules of spec 7.2 and 7.3 applied naively.
#[derive(Default)]
struct Model {
    events: Vec<Event>,
}

impl Model {
    fn nodes(&self) -> Vec<u64> {
        let mut nodes: Vec<u64> = Vec::new();
        for event in &self.events {
            match event.surface_op {
                None => {}
                Some(SurfaceOp::Append) => nodes.push(event.seq),
                Some(SurfaceOp::Replace { start_seq, end_seq }) => {
                    let start = nodes.iter().position(|s| *s == start_seq).unwrap();
                    let end = nodes.iter().position(|s| *s == end_seq).unwrap();
                    nodes.splice(start..=end, [event.seq]);
                }
            }
        }
        nodes
    }

    fn messages(&self) -> Vec<&Message> {
        self.nodes()
            .into_iter()
            .filter_map(|seq| {
                let event = &self.events[seq as usize];
                let message = event.message()?;
                let empty_hides = matches!(
                    event.data,
                    EventData::SystemMessage(_) | EventData::AssistantMessage(_)
                );
                (!(empty_hides && message.content.is_empty())).then_some(message)
            })
            .collect()
    }

    fn next_seq(&self) -> u64 {
        self.events.len() as u64
    }
}

/// The events an operation appends, or `None` when it is a no-op for this state; the bool
/// says whether the store must refuse them.
fn events_for(op: &Op, model: &Model, next_call: &mut u64) -> Option<(Vec<Event>, bool)> {
    let seq = model.next_seq();
    let nodes = model.nodes();
    let head = nodes[0];
    match op {
        Op::User => Some((
            vec![user(seq, &format!("u{seq}"), SurfaceOp::Append, None)],
            false,
        )),
        Op::ToolResult => {
            *next_call += 1;
            let call = format!("c{next_call}");
            let mut events = advertised(seq, &call);
            events.push(tool_result(
                seq + 2,
                &call,
                &format!("out {seq}"),
                SurfaceOp::Append,
                vec![head],
            ));
            Some((events, false))
        }
        Op::Replace(a, b) => {
            let pick = |x: u8| (x as usize * nodes.len()) / 256;
            let (start, end) = (pick(*a).min(pick(*b)), pick(*a).max(pick(*b)));
            let op = SurfaceOp::Replace {
                start_seq: nodes[start],
                end_seq: nodes[end],
            };
            let sources = nodes[start..=end].to_vec();
            Some((vec![user(seq, "checkpoint", op, Some(sources))], start == 0))
        }
        Op::HeadRewrite(clear) => {
            let text = if *clear { "" } else { "rewritten" };
            let op = SurfaceOp::Replace {
                start_seq: head,
                end_seq: head,
            };
            Some((vec![system(seq, 1, 1, text, op)], false))
        }
        Op::Prune(x) => {
            let results: Vec<&Event> = nodes
                .iter()
                .map(|s| &model.events[*s as usize])
                .filter(|e| matches!(e.data, EventData::ToolResult(_)))
                .collect();
            let target = *results.get(*x as usize % results.len().max(1))?;
            let EventData::ToolResult(data) = &target.data else {
                return None;
            };
            let call = data
                .message
                .source
                .as_ref()
                .and_then(|s| s.call_id.clone())?;
            let op = SurfaceOp::Replace {
                start_seq: target.seq,
                end_seq: target.seq,
            };
            // Same call, so the same id, turn, step and flags: only the content differs.
            let pruned = tool_result(seq, &call, "[pruned]", op, vec![target.seq]);
            Some((vec![pruned], false))
        }
        Op::Stale | Op::Reopen => None,
    }
}

fn check_equal(store: &Store, id: &str, model: &Model) -> Result<(), TestCaseError> {
    let (nodes, messages) = store
        .with_fold(id, |f| {
            (
                f.admission().surface().seqs(),
                f.messages().into_iter().cloned().collect::<Vec<_>>(),
            )
        })
        .unwrap();
    prop_assert_eq!(nodes, model.nodes());
    let expected: Vec<Message> = model.messages().into_iter().cloned().collect();
    prop_assert_eq!(messages, expected);
    prop_assert_eq!(store.head(id).unwrap().next_seq, model.next_seq());
    Ok(())
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let mut store = Store::open(&path).unwrap();
    store.create_session(&header("m")).unwrap();
    let opening = vec![
        turn_start(0, 1),
        step_start(1, 1, 1),
        system(2, 1, 1, "prompt", SurfaceOp::Append),
    ];
    store.append("m", 0, opening.clone()).unwrap();
    let mut model = Model { events: opening };
    let mut next_call = 0;
    for op in &ops {
        match op {
            Op::Reopen => {
                drop(store);
                store = Store::open(&path).unwrap();
            }
            Op::Stale => {
                let stale = model.next_seq().saturating_sub(1);
                let result = store.append("m", stale, vec![title(stale)]);
                prop_assert!(
                    matches!(result, Err(StoreError::Conflict { .. })),
                    "{:?}",
                    result
                );
            }
            _ => {
                let Some((events, refused)) = events_for(op, &model, &mut next_call) else {
                    continue;
                };
                let result = store.append("m", model.next_seq(), events.clone());
                if refused {
                    prop_assert!(
                        matches!(result, Err(StoreError::Rejected { .. })),
                        "{:?}",
                        result
                    );
                } else {
                    prop_assert!(result.is_ok(), "{:?} on {:?}", result, op);
                    model.events.extend(events);
                }
            }
        }
        check_equal(&store, "m", &model)?;
    }
    let reports = store.verify(&[]).unwrap();
    prop_assert!(reports.iter().all(|r| r.ok()), "{:?}", reports);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    // Goal: after every operation the store's surface, derived messages and head equal the
    // trivial model's; refused and conflicting appends change nothing; verify passes at the end.
    #[test]
    fn store_matches_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        run(ops)?;
    }
}

//! The store's admission: each rule once accepted and once refused, through `Store::append`,
//! with the refusal's seq, rule and wording; conflicts; and atomic, all-or-nothing batches.

use sessionlog_format::surface::HEAD_REWRITE_REFUSAL;
use sessionlog_format::{Event, Rule, SurfaceOp};
use sessionlog_store::embedded::{Store, StoreError};

use crate::support::*;

const APPEND: SurfaceOp = SurfaceOp::Append;

fn replace(start_seq: u64, end_seq: u64) -> SurfaceOp {
    SurfaceOp::Replace { start_seq, end_seq }
}

/// A session with an open turn 1, step 1, a system head at seq 2 and users at 3 and 4.
fn opened(store: &Store, id: &str) {
    store.create_session(&header(id)).unwrap();
    let events = vec![
        turn_start(0, 1),
        step_start(1, 1, 1),
        system(2, 1, 1, "be brief", APPEND),
        user(3, "one", APPEND, None),
        user(4, "two", APPEND, None),
    ];
    store.append(id, 0, events).unwrap();
}

fn refusal(
    result: Result<sessionlog_store::embedded::AppendAck, StoreError>,
) -> (u64, Rule, String) {
    match result {
        Err(StoreError::Rejected { seq, violation, .. }) => {
            (seq, violation.rule, violation.message)
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn nodes(store: &Store, id: &str) -> Vec<u64> {
    store
        .with_fold(id, |f| f.admission().surface().seqs())
        .unwrap()
}

// Goal: a surface event needs surfaceOp, and a log-only event may not carry one.
#[test]
fn surface_metadata() {
    let (_dir, store) = temp_store();
    opened(&store, "s");
    let mut bare = user(5, "x", APPEND, None);
    bare.surface_op = None;
    let (seq, rule, message) = refusal(store.append("s", 5, vec![bare]));
    assert_eq!((seq, rule), (5, Rule::SurfaceOp));
    assert_eq!(
        message,
        "user/message is surface-eligible and requires a surfaceOp marker"
    );
    let tagged = title(5).with_surface_op(APPEND);
    let (_, rule, message) = refusal(store.append("s", 5, vec![tagged]));
    assert_eq!(rule, Rule::SurfaceOp);
    assert_eq!(
        message,
        "session/title is not surface-eligible and must not carry a surfaceOp marker"
    );
    store
        .append("s", 5, vec![title(5), user(6, "ok", APPEND, None)])
        .unwrap();
}

// Goal: replace endpoints resolve by surface position, so a span whose start seq is
// numerically after its end seq is accepted when the positions are in order, and refused the
// other way round.
#[test]
fn replace_endpoints_by_position() {
    let (_dir, store) = temp_store();
    opened(&store, "s");
    store
        .append("s", 5, vec![user(5, "three", replace(3, 3), Some(vec![3]))])
        .unwrap();
    assert_eq!(nodes(&store, "s"), vec![2, 5, 4]);
    let (seq, rule, message) =
        refusal(store.append("s", 6, vec![user(6, "x", replace(4, 5), Some(vec![4, 5]))]));
    assert_eq!(
        (seq, rule, message.as_str()),
        (6, Rule::Surface, "start seq 4 is after end seq 5")
    );
    store
        .append(
            "s",
            6,
            vec![user(6, "merged", replace(5, 4), Some(vec![5, 4]))],
        )
        .unwrap();
    assert_eq!(nodes(&store, "s"), vec![2, 6]);
    let (_, rule, message) =
        refusal(store.append("s", 7, vec![user(7, "x", replace(3, 3), Some(vec![3]))]));
    assert_eq!(
        (rule, message.as_str()),
        (Rule::Surface, "start seq 3 not found in surface")
    );
}

// Goal: sourceEventSeqs must cover every shadowed node; extra seqs are allowed.
#[test]
fn sources_cover_shadowed_nodes() {
    let (_dir, store) = temp_store();
    opened(&store, "s");
    let (_, rule, message) =
        refusal(store.append("s", 5, vec![user(5, "x", replace(3, 4), Some(vec![3]))]));
    assert_eq!(
        (rule, message.as_str()),
        (
            Rule::SourceSeqs,
            "replace sourceEventSeqs must cover shadowed seq 4"
        )
    );
    store
        .append(
            "s",
            5,
            vec![user(5, "x", replace(3, 4), Some(vec![1, 3, 4]))],
        )
        .unwrap();
}

// Goal: a tool/result replace shadows exactly one tool/result and changes only its content.
#[test]
fn tool_result_rewrite() {
    let (_dir, store) = temp_store();
    opened(&store, "s");
    let mut batch = advertised(5, "c1");
    batch.push(tool_result(7, "c1", "long output", APPEND, vec![3]));
    store.append("s", 5, batch).unwrap();
    let other_call = tool_result(8, "c2", "short", replace(7, 7), vec![7]);
    let (_, rule, message) = refusal(store.append("s", 8, vec![other_call]));
    assert_eq!(rule, Rule::Surface);
    assert!(
        message.starts_with("a tool/result rewrite may change only message.content[0].content"),
        "{message}"
    );
    let over_user = tool_result(8, "c1", "short", replace(4, 4), vec![4]);
    let (_, _, message) = refusal(store.append("s", 8, vec![over_user]));
    assert_eq!(
        message,
        "a tool/result replace must shadow a tool/result node, not seq 4"
    );
    store
        .append(
            "s",
            8,
            vec![tool_result(8, "c1", "[pruned]", replace(7, 7), vec![7])],
        )
        .unwrap();
    assert_eq!(nodes(&store, "s"), vec![2, 3, 4, 5, 8]);
}

// Goal: node 0 holds the system prompt: only a system/message over exactly that node may
// replace it, with the spec's wording otherwise.
#[test]
fn head_protection() {
    let (_dir, store) = temp_store();
    opened(&store, "s");
    let (seq, rule, message) =
        refusal(store.append("s", 5, vec![user(5, "x", replace(2, 3), Some(vec![2, 3]))]));
    assert_eq!(
        (seq, rule, message.as_str()),
        (5, Rule::HeadProtection, HEAD_REWRITE_REFUSAL)
    );
    let wide = system(5, 1, 1, "new", replace(2, 3));
    let (_, rule, message) = refusal(store.append("s", 5, vec![wide]));
    assert_eq!(
        (rule, message.as_str()),
        (Rule::HeadProtection, HEAD_REWRITE_REFUSAL)
    );
    store
        .append("s", 5, vec![system(5, 1, 1, "new prompt", replace(2, 2))])
        .unwrap();
    assert_eq!(nodes(&store, "s"), vec![5, 3, 4]);
}

// Goal: a system/message must sit inside its own open step.
#[test]
fn system_message_in_its_open_step() {
    let (_dir, store) = temp_store();
    opened(&store, "s");
    let (_, rule, message) = refusal(store.append("s", 5, vec![system(5, 1, 2, "x", APPEND)]));
    assert_eq!(
        (rule, message.as_str()),
        (
            Rule::SystemStep,
            "system/message does not match an open step"
        )
    );
    store
        .append(
            "s",
            5,
            vec![
                step_end(5, 1, 1),
                step_start(6, 1, 2),
                system(7, 1, 2, "later", APPEND),
            ],
        )
        .unwrap();
}

// Goal: a refused batch writes nothing, even when its first events were fine, and the state
// after a reopen is the same.
#[test]
fn rejected_batch_writes_nothing() {
    let (dir, store) = temp_store();
    opened(&store, "s");
    let before = store.head("s").unwrap();
    let batch = vec![
        title(5),
        user(6, "fine", APPEND, None),
        user(7, "bad", replace(99, 99), Some(vec![99])),
    ];
    let (seq, _, _) = refusal(store.append("s", 5, batch));
    assert_eq!(seq, 7);
    assert_eq!(store.head("s").unwrap(), before);
    assert_eq!(store.read_range("s", 0, 100).unwrap().len(), 5);
    drop(store);
    let store = Store::open(&store_path(&dir)).unwrap();
    assert_eq!(store.head("s").unwrap(), before);
    assert!(store.verify(&[]).unwrap().iter().all(|r| r.ok()));
}

// Goal: a stale expected_next_seq is a conflict that names the current head, and of two
// writers racing for the same seq exactly one wins.
#[test]
fn conflicts_and_racing_writers() {
    let (_dir, store) = temp_store();
    opened(&store, "s");
    match store.append("s", 3, vec![title(3)]) {
        Err(StoreError::Conflict {
            expected: 3,
            current: 5,
            ..
        }) => {}
        other => panic!("expected a conflict, got {other:?}"),
    }
    let store = std::sync::Arc::new(store);
    let racers: Vec<_> = (0..2)
        .map(|_| {
            let store = std::sync::Arc::clone(&store);
            std::thread::spawn(move || store.append("s", 5, vec![title(5)]).is_ok())
        })
        .collect();
    let wins = racers
        .into_iter()
        .map(|r| r.join().unwrap())
        .filter(|won| *won)
        .count();
    assert_eq!(wins, 1);
    assert_eq!(store.head("s").unwrap().next_seq, 6);
}

// Goal: sessions are independent, and an unknown session is a clear error.
#[test]
fn many_sessions_and_unknown_ones() {
    let (_dir, store) = temp_store();
    opened(&store, "a");
    opened(&store, "b");
    assert_eq!(
        store.sessions().unwrap(),
        vec!["a".to_owned(), "b".to_owned()]
    );
    assert!(matches!(
        store.append("nope", 0, Vec::<Event>::new()),
        Err(StoreError::UnknownSession { .. })
    ));
    assert!(matches!(
        store.create_session(&header("a")),
        Err(StoreError::SessionExists { .. })
    ));
}

// Goal: a batch that breaks a relationship rule (spec 12.2) is refused with dsh's text and
// stages nothing, and the session's next append sees the state from before it. Method: a
// valid event, then a turn/start while turn 1 is open, in one batch.
#[test]
fn relationship_refusal_stages_nothing() {
    let (_dir, store) = temp_store();
    opened(&store, "s");
    let batch = vec![user(5, "three", APPEND, None), turn_start(6, 2)];
    let (seq, rule, message) = refusal(store.append("s", 5, batch));
    assert_eq!(
        (seq, rule, message.as_str()),
        (
            6,
            Rule::TurnStart,
            "turn/start 2 does not open expected turn 1"
        )
    );
    assert_eq!(nodes(&store, "s"), vec![2, 3, 4]);
    let (_, rule, _) = refusal(store.append("s", 5, vec![turn_start(5, 2)]));
    assert_eq!(rule, Rule::TurnStart);
    store
        .append("s", 5, vec![user(5, "three", APPEND, None)])
        .unwrap();
}

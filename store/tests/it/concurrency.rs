//! Concurrency: a second opener of a locked store gets a clear error, and two appenders with
//! the same expected seq never both win.

use std::sync::Barrier;

use sessionlog_store::embedded::{Store, StoreError};

use crate::support::*;

// Goal: a second open of a store that is already open fails cleanly, naming the lock, and the
// first store is untouched.
// Method: open the same file twice (redb takes an exclusive file lock, which also covers a
// second process), then use the first.
#[test]
fn second_open_is_refused_with_a_lock_error() {
    let (dir, store) = temp_store();
    store.create_session(&header("a")).unwrap();
    let second = Store::open(&store_path(&dir));
    let path = match second {
        Err(StoreError::Locked { path }) => path,
        other => panic!("{other:?}"),
    };
    assert_eq!(path, store_path(&dir).display().to_string());
    store.append("a", 0, vec![title(0)]).unwrap();
    assert!(store.verify(&[]).unwrap().iter().all(|r| r.ok()));
}

// Goal: two threads appending to one session with the same expected seq: exactly one wins and
// the other gets a conflict naming the current seq.
// Method: release both appends at once through a barrier, 50 rounds.
#[test]
fn same_expected_seq_has_one_winner() {
    let (_dir, store) = temp_store();
    store.create_session(&header("a")).unwrap();
    for round in 0..50u64 {
        let barrier = Barrier::new(2);
        let results: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..2)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        store.append("a", round, vec![title(round)])
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let wins = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(wins, 1, "round {round}: {results:?}");
        let conflict = results.iter().find(|r| r.is_err()).unwrap();
        assert!(
            matches!(conflict, Err(StoreError::Conflict { current, .. }) if *current == round + 1),
            "{conflict:?}"
        );
    }
    assert_eq!(store.head("a").unwrap().next_seq, 50);
}

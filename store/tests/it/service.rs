//! The async API: concurrent appenders across sessions share commits through the writer thread,
//! every batch is acknowledged once, conflicts come back to the right caller, and a tail
//! follows a session from any seq.

use std::sync::Arc;

use sessionlog_format::SurfaceOp;
use sessionlog_store::embedded::StoreError;
use sessionlog_store::log_service::LogService;
use sessionlog_store::open::Location;

use crate::support::*;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The service over a redb store at `path`, created if missing.
async fn service(path: &std::path::Path) -> LogService {
    LogService::open(&Location::Redb(path.to_owned()))
        .await
        .unwrap()
}

// Goal: 8 tasks append 50 batches each to 4 sessions at once; every acknowledged batch is
// stored in order, and the data survives a reopen with verify clean.
// Method: two tasks per session race on expected seqs; a conflict is retried with the head.
#[test]
fn concurrent_appenders_are_all_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    runtime().block_on(async {
        let handle = service(&path).await;
        for session in 0..4 {
            handle
                .create_session(header(&format!("s{session}")), false)
                .await
                .unwrap();
        }
        let mut tasks = Vec::new();
        for task_idx in 0..8u64 {
            let handle = handle.clone();
            let id = format!("s{}", task_idx % 4);
            tasks.push(tokio::spawn(async move {
                let mut acked = 0;
                while acked < 50 {
                    let next = handle.head(&id).await.unwrap().next_seq;
                    match handle.append_events(&id, next, vec![title(next)]).await {
                        Ok(ack) => {
                            assert_eq!(ack.next_seq, next + 1);
                            acked += 1;
                        }
                        Err(StoreError::Conflict { current, .. }) => assert!(current > next),
                        Err(other) => panic!("{other}"),
                    }
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        for session in 0..4 {
            let head = handle.head(&format!("s{session}")).await.unwrap();
            assert_eq!(head.next_seq, 100, "two tasks x 50 batches");
        }
    });
    let store = sessionlog_store::embedded::Store::open(&path).unwrap();
    assert!(store
        .verify(&[])
        .unwrap()
        .iter()
        .all(|r| r.ok() && r.events == 100));
}

// Goal: the store is closed once the last handle on its service is dropped, while the
// runtime still runs: the group-commit writer thread is joined, not left to finish later.
// Method: append through two handles, drop both inside the runtime, then open the store
// again at once (a second open of a store still open is refused with a lock error).
#[test]
fn dropping_the_last_handle_closes_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    runtime().block_on(async {
        let handle = service(&path).await;
        handle.create_session(header("a"), false).await.unwrap();
        let second = handle.clone();
        second.append_events("a", 0, vec![title(0)]).await.unwrap();
        drop(second);
        handle.append_events("a", 1, vec![title(1)]).await.unwrap();
        drop(handle);
        let store = sessionlog_store::embedded::Store::open(&path).unwrap();
        assert_eq!(store.head("a").unwrap().next_seq, 2);
    });
}

// Goal: a refused batch is refused to its own caller, with the seq and rule, and the other
// batches of the same group commit.
#[test]
fn refusals_reach_their_caller() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let handle = LogService::open(&Location::Redb(store_path(&dir)))
            .await
            .unwrap();
        handle.create_session(header("a"), false).await.unwrap();
        handle.create_session(header("b"), false).await.unwrap();
        let bad = user(
            0,
            "x",
            SurfaceOp::Replace {
                start_seq: 5,
                end_seq: 5,
            },
            Some(vec![5]),
        );
        let (good, refused) = tokio::join!(
            handle.append_events("a", 0, vec![title(0)]),
            handle.append_events("b", 0, vec![bad])
        );
        assert_eq!(good.unwrap().next_seq, 1);
        assert!(
            matches!(refused, Err(StoreError::Rejected { seq: 0, .. })),
            "{refused:?}"
        );
        assert_eq!(handle.head("b").await.unwrap().next_seq, 0);
    });
}

// Goal: a tail from seq 0 yields the stored events, then each new one as it commits.
#[test]
fn tail_follows_new_events() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let handle = Arc::new(
            LogService::open(&Location::Redb(store_path(&dir)))
                .await
                .unwrap(),
        );
        handle.create_session(header("t"), false).await.unwrap();
        handle
            .append_events("t", 0, vec![title(0), title(1)])
            .await
            .unwrap();
        let mut tail = handle.tail("t", 1).await.unwrap();
        assert_eq!(tail.next().await.unwrap().unwrap().seq, 1);
        let writer = Arc::clone(&handle);
        let appender = tokio::spawn(async move {
            for seq in 2..6 {
                writer
                    .append_events("t", seq, vec![title(seq)])
                    .await
                    .unwrap();
            }
        });
        for expected in 2..6 {
            let event = tokio::time::timeout(std::time::Duration::from_secs(10), tail.next())
                .await
                .expect("the tail wakes up")
                .unwrap()
                .unwrap();
            assert_eq!(event.seq, expected);
        }
        appender.await.unwrap();
    });
}

// Goal: `LogService::run` runs at most `STORE_CALLS_MAX` store calls at once (the bound that
// keeps 200 stalled tails from taking 200 blocking threads and 2.9 GB; issue #20), every
// waiting call still runs, and a whole-session walk (`run_walk`) does not wait for a call
// turn: it finishes while every turn is held.
// Method: 3 x STORE_CALLS_MAX calls each hold their turn until released, counting how many
// run at once; a walk runs while they hold; then they are released and all must succeed.
#[test]
fn store_calls_are_bounded_and_walks_run_beside_them() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Condvar;

    use sessionlog_store::log_service::STORE_CALLS_MAX;

    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(sessionlog_store::embedded::Store::open(&store_path(&dir)).unwrap());
    store.create_session(&header("s")).unwrap();
    runtime().block_on(async {
        let service = LogService::new(store);
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let released = Arc::new((std::sync::Mutex::new(false), Condvar::new()));
        let calls: Vec<_> = (0..3 * STORE_CALLS_MAX)
            .map(|_| {
                let (service, running, most) = (service.clone(), running.clone(), most.clone());
                let released = Arc::clone(&released);
                tokio::spawn(async move {
                    service
                        .run(move |store| {
                            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            let (lock, wake) = &*released;
                            let mut open = lock.lock().unwrap();
                            while !*open {
                                open = wake.wait(open).unwrap();
                            }
                            running.fetch_sub(1, Ordering::SeqCst);
                            store.head("s")
                        })
                        .await
                })
            })
            .collect();
        // Wait until the turns are all taken, then run a walk beside them.
        while running.load(Ordering::SeqCst) < STORE_CALLS_MAX {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let gate = Arc::new(tokio::sync::Semaphore::new(1));
        let turn = Arc::clone(&gate).acquire_owned().await.unwrap();
        let walked = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            service.run_walk(turn, |store| store.verify(&["s".to_owned()])),
        )
        .await
        .expect("a walk does not wait for a store-call turn")
        .unwrap();
        assert!(walked[0].ok());
        assert_eq!(running.load(Ordering::SeqCst), STORE_CALLS_MAX);
        {
            let (lock, wake) = &*released;
            *lock.lock().unwrap() = true;
            wake.notify_all();
        }
        for call in calls {
            assert_eq!(call.await.unwrap().unwrap().next_seq, 0);
        }
        assert_eq!(most.load(Ordering::SeqCst), STORE_CALLS_MAX);
        assert_eq!(gate.available_permits(), 1, "the walk's turn is given back");
    });
}

//! Kill test: a child process appends batches in a loop and is SIGKILLed at random points,
//! 200 times. After every kill the store reopens with every acknowledged batch present, no
//! partial batch visible, and `verify` clean.
//!
//! The child is this same test binary, re-run with `SESSIONLOG_KILL_CHILD` naming the store;
//! it prints `ack N` (the session's next seq) after each durable append.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use sessionlog_format::{Event, SurfaceOp};
use sessionlog_store::embedded::Store;

use crate::support::*;

const CHILD_ENV: &str = "SESSIONLOG_KILL_CHILD";
const KILLS: u64 = 200;
/// Events 0..3 open the session; then every batch is three events.
const OPENING_EVENTS: u64 = 3;
const BATCH_EVENTS: u64 = 3;

/// The batch that starts at `seq`: two user messages, then a checkpoint replacing both.
fn batch_at(seq: u64) -> Vec<Event> {
    let op = SurfaceOp::Replace {
        start_seq: seq,
        end_seq: seq + 1,
    };
    vec![
        user(seq, &format!("message {seq}"), SurfaceOp::Append, None),
        user(
            seq + 1,
            &format!("message {}", seq + 1),
            SurfaceOp::Append,
            None,
        ),
        user(
            seq + 2,
            &format!("checkpoint {seq}"),
            op,
            Some(vec![seq, seq + 1]),
        ),
    ]
}

fn opening() -> Vec<Event> {
    vec![
        turn_start(0, 1),
        step_start(1, 1, 1),
        system(2, 1, 1, "prompt", SurfaceOp::Append),
    ]
}

/// The child: appends forever (until killed), printing each acknowledgement.
fn child(path: &Path) {
    let store = Store::open(path).expect("the child opens the store");
    if store.sessions().expect("sessions list").is_empty() {
        store.create_session(&header("k")).expect("create");
    }
    // A kill between creating the session and appending its opening leaves it empty.
    if store.head("k").expect("head").next_seq == 0 {
        store.append("k", 0, opening()).expect("opening");
        println!("ack {OPENING_EVENTS}");
    }
    let mut next_seq = store.head("k").expect("head").next_seq;
    loop {
        let ack = store
            .append("k", next_seq, batch_at(next_seq))
            .expect("append");
        next_seq = ack.next_seq;
        println!("ack {next_seq}");
    }
}

// The child's entry point; a no-op in a normal test run.
#[test]
fn kill_child_entry() {
    if let Some(path) = std::env::var_os(CHILD_ENV) {
        child(Path::new(&path));
    }
}

/// A small deterministic generator for kill delays (no dependency needed).
fn delay_micros(iteration: u64) -> u64 {
    let mut x = iteration.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xDEAD_BEEF;
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 29;
    500 + x % 30_000
}

fn check_store(path: &Path, acked: u64, iteration: u64) -> u64 {
    let store = Store::open(path).expect("the store reopens after a kill");
    let Ok(head) = store.head("k") else {
        assert_eq!(
            acked, 0,
            "iteration {iteration}: acknowledged data vanished"
        );
        return 0;
    };
    assert!(
        head.next_seq >= acked,
        "iteration {iteration}: head {} < acked {acked}",
        head.next_seq
    );
    if head.next_seq == 0 {
        // Killed after creating the session, before its opening batch: nothing was acked.
        return 0;
    }
    assert!(
        head.next_seq >= OPENING_EVENTS,
        "iteration {iteration}: a partial opening batch is visible"
    );
    assert_eq!(
        (head.next_seq - OPENING_EVENTS) % BATCH_EVENTS,
        0,
        "a partial batch is visible"
    );
    let events = store.read_range("k", 0, head.next_seq).expect("read back");
    let mut expected = opening();
    let mut seq = OPENING_EVENTS;
    while seq < head.next_seq {
        expected.extend(batch_at(seq));
        seq += BATCH_EVENTS;
    }
    assert_eq!(
        events, expected,
        "iteration {iteration}: stored events differ"
    );
    let reports = store.verify(&[]).expect("verify runs");
    assert!(
        reports.iter().all(|r| r.ok()),
        "iteration {iteration}: {reports:?}"
    );
    head.next_seq
}

// Goal: nothing acknowledged is lost and no partial batch is ever visible across 200 SIGKILLs.
// Method: re-run this binary as an appending child, kill it after a pseudo-random delay, read
// the acknowledgements it printed, then reopen, compare and verify.
#[test]
fn sigkill_loses_nothing_acknowledged() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kill.redb");
    let exe = std::env::current_exe().unwrap();
    let mut acked_total = 0;
    for iteration in 0..KILLS {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "kill::kill_child_entry",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_micros(delay_micros(iteration)));
        child.kill().unwrap();
        let stdout = child.stdout.take().unwrap();
        let acked = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .filter_map(|line| {
                line.strip_prefix("ack ")
                    .and_then(|n| n.parse::<u64>().ok())
            })
            .max()
            .unwrap_or(0);
        child.wait().unwrap();
        acked_total = acked_total.max(acked);
        let head = check_store(&path, acked_total, iteration);
        acked_total = acked_total.max(head);
    }
    assert!(
        acked_total > OPENING_EVENTS,
        "the children made progress: {acked_total}"
    );
}

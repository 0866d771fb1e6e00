//! The cost of single-event appends (issue #19's "append cost moves by at most 10%"): a
//! generated V3 session appended one event per durable batch to a fresh store.
//!
//! ```text
//! cargo run --release -p sessionlog-benches --bin append_probe -- [--events N] [--seed S]
//! ```
//!
//! Run it as a whole process under a timer that reports user and system CPU apart from wall
//! time (`/usr/bin/time -v`): wall time is mostly the per-append `fdatasync`, user time is the
//! admission, encoding and fold work each append does. It prints the appends per second it saw.

use std::time::Instant;

use sessionlog_engine::store::Store;
use sessionlog_format::gen::{GenOptions, Generator};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let mut events = 2_000u64;
    let mut seed = 42u64;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().and_then(|v| v.parse().ok());
        match (arg.as_str(), value) {
            ("--events", Some(v)) => events = v,
            ("--seed", Some(v)) => seed = v,
            _ => panic!("usage: append_probe [--events N] [--seed S]"),
        }
    }
    let mut generator = Generator::new(GenOptions { events, seed });
    let header = generator.header();
    let mut all = Vec::new();
    while let Some(batch) = generator.next_batch() {
        all.extend(batch);
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = Store::open(&dir.path().join("probe.redb")).expect("a store");
    store.create_session(&header).expect("a session");
    let started = Instant::now();
    for event in all {
        let seq = event.seq;
        store
            .append(&header.id, seq, vec![event])
            .expect("a generated event is admitted");
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "{events} single-event appends in {elapsed:.3} s: {:.1} appends/s",
        events as f64 / elapsed
    );
}

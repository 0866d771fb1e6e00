//! The append path alone, for a profiler: one session's generated events appended in batches
//! to a fresh store, then `Store::settle` (the sealer's work is part of the run), and nothing
//! else timed. BENCHMARKS.md's per-thread profiles of the append path come from it.
//!
//! ```text
//! cargo build --release -p sessionlog-benches --example append_profile
//! target/release/examples/append_profile DIR EVENTS BATCH_EVENTS
//! perf record -F 2000 --call-graph dwarf,16384 target/release/examples/append_profile ...
//! valgrind --tool=callgrind target/release/examples/append_profile ...
//! ```
//!
//! `DIR` is emptied and holds the store. The events are generated (seed 100, as the append
//! cells of `compare`) and cut into batches before the clock starts. It prints the batches per
//! second and the wall time per event on stderr.
//!
//! With `--payload FILE` instead of a run, it writes the payload a block would compress for
//! all the events (each record without its crc and chain, behind its length), so that the
//! block compression can be weighed with `zstd -b` on the bytes the sealer sees.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use sessionlog_benches::data::session_events;
use sessionlog_engine::store::Store;
use sessionlog_format::record::{encode_event, genesis_chain};
use sessionlog_format::Event;

/// The CLI's allocator, as every benchmark binary.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str =
    "usage: append_profile DIR EVENTS BATCH_EVENTS | append_profile --payload FILE EVENTS";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [flag, file, events] if flag == "--payload" => {
            count(events).and_then(|n| write_payload(&PathBuf::from(file), n))
        }
        [dir, events, batch] => count(events).and_then(|n| {
            let batch = count(batch)?;
            if batch == 0 {
                return Err("BATCH_EVENTS must be at least 1".to_owned());
            }
            run(&PathBuf::from(dir), n, batch as usize)
        }),
        _ => Err(USAGE.to_owned()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("append_profile: {message}");
            ExitCode::from(2)
        }
    }
}

fn count(arg: &str) -> Result<u64, String> {
    arg.parse()
        .map_err(|_| format!("{arg:?} is not a count\n{USAGE}"))
}

fn run(dir: &PathBuf, n_events: u64, batch_events: usize) -> Result<(), String> {
    let fail = |e: &dyn std::fmt::Display| format!("{}: {e}", dir.display());
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| fail(&e))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| fail(&e))?;
    let (header, events) = session_events(100, n_events);
    let batches: Vec<Vec<Event>> = events.chunks(batch_events).map(<[Event]>::to_vec).collect();
    drop(events);
    let n_batches = batches.len();
    let store = Store::open(&dir.join("profile.redb")).map_err(|e| fail(&e))?;
    store.create_session(&header).map_err(|e| fail(&e))?;
    let start = Instant::now();
    let mut next_seq = 0;
    for batch in batches {
        let n = batch.len() as u64;
        store
            .append(&header.id, next_seq, batch)
            .map_err(|e| fail(&e))?;
        next_seq += n;
    }
    store.settle();
    let seconds = start.elapsed().as_secs_f64();
    eprintln!(
        "{n_batches} batches of {batch_events} in {seconds:.3} s: {:.1} batches/s, {:.2} us per event",
        n_batches as f64 / seconds,
        seconds * 1e6 / next_seq.max(1) as f64
    );
    Ok(())
}

fn write_payload(file: &PathBuf, n_events: u64) -> Result<(), String> {
    let (header, events) = session_events(100, n_events);
    let mut chain = genesis_chain(&header);
    let mut payload = Vec::new();
    let mut record = Vec::new();
    for event in &events {
        record.clear();
        chain = encode_event(event, &chain, &mut record).map_err(|e| e.to_string())?;
        // A block's payload: each record from its header's seq field on, behind its length.
        let tail = &record[36..];
        payload.extend_from_slice(&(tail.len() as u32).to_le_bytes());
        payload.extend_from_slice(tail);
    }
    std::fs::write(file, payload).map_err(|e| format!("{}: {e}", file.display()))
}

//! The store's performance targets (issue #3), each measured against its baseline in the same
//! run so that the ratio means something on a noisy machine.
//!
//! ```text
//! cargo run --release -p sessionlog-benches --bin store_bench -- [--events N] [--json]
//! ```
//!
//! 1. Durable append, batches of 1 and 100 events, against JSONL append + fsync of the same
//!    batches (dsh's method). Target: >= 0.8x the baseline's batches/s.
//! 2. Cold open + derive messages of an N-event generated session (default 1M), against a
//!    fold from scratch. Target: >= 20x faster. Peak memory of the open is reported.
//! 3. Derive after one append to that session, against a fold from scratch. Target: >= 1000x.
//! 4. `verify`, against blake3 alone over the same record bytes. Target: >= 0.5x throughput.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::json;
use sessionlog_benches::compare::session::all_record_bytes;
use sessionlog_benches::data::session_events;
use sessionlog_benches::measure::{median, peak_rss_kib, time};
use sessionlog_engine::store::Store;
use sessionlog_format::gen::{GenOptions, Generator};
use sessionlog_format::row::encode_row;
use sessionlog_format::{Event, FormatVersion};

/// The CLI's allocator (BENCHMARKS.md's store figures before issue #12 used glibc's).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Args {
    events: u64,
    json: bool,
    /// Internal: measure one cold open of this store in a fresh process (for peak memory).
    open_only: Option<PathBuf>,
}

fn parse_args() -> Args {
    let mut args = Args {
        events: 1_000_000,
        json: false,
        open_only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--events" => args.events = it.next().and_then(|v| v.parse().ok()).expect("--events N"),
            "--json" => args.json = true,
            "--open-only" => args.open_only = it.next().map(PathBuf::from),
            other => panic!("unknown argument {other}; see the module docs"),
        }
    }
    args
}

fn main() {
    let args = parse_args();
    if let Some(path) = &args.open_only {
        let started = Instant::now();
        let n = cold_open_messages(path);
        println!(
            "{} {} {}",
            started.elapsed().as_secs_f64(),
            n,
            peak_rss_kib()
        );
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut results = Vec::new();
    for batch_events in [1usize, 100] {
        results.push(durable_append(dir.path(), batch_events));
    }
    results.extend(big_session(dir.path(), args.events));
    report(&results, args.json);
}

struct Row {
    name: String,
    ours: f64,
    baseline: f64,
    unit: &'static str,
    /// Higher is better for rates, lower for times; the ratio is always "ours is N x".
    higher_is_better: bool,
    target: f64,
    note: String,
}

impl Row {
    fn ratio(&self) -> f64 {
        if self.higher_is_better {
            self.ours / self.baseline
        } else {
            self.baseline / self.ours
        }
    }
}

fn report(rows: &[Row], as_json: bool) {
    if as_json {
        let rows: Vec<_> = rows
            .iter()
            .map(|r| {
                json!({"name": r.name, "ours": r.ours, "baseline": r.baseline, "unit": r.unit,
                       "ratio": r.ratio(), "target": r.target, "met": r.ratio() >= r.target, "note": r.note})
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).expect("rows serialize")
        );
        return;
    }
    println!("| measurement | sessionlog | baseline | ratio | target | met | note |");
    println!("|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {:.3} {} | {:.3} {} | {:.2}x | >= {}x | {} | {} |",
            r.name,
            r.ours,
            r.unit,
            r.baseline,
            r.unit,
            r.ratio(),
            r.target,
            if r.ratio() >= r.target { "yes" } else { "no" },
            r.note
        );
    }
}

/// Events for append benchmarks: a generated session, cut into batches of `batch_events`.
fn append_batches(
    batch_events: usize,
    n_events: u64,
) -> (sessionlog_format::SessionHeader, Vec<Vec<Event>>) {
    let (header, events) = session_events(11, n_events);
    let batches = events.chunks(batch_events).map(<[Event]>::to_vec).collect();
    (header, batches)
}

/// Rounds of each side, alternated so that machine noise hits both alike.
const APPEND_ROUNDS: usize = 5;

fn durable_append(dir: &Path, batch_events: usize) -> Row {
    let (header, batches) = append_batches(batch_events, 200_000);
    let store = Store::open(&dir.join(format!("append-{batch_events}.redb"))).expect("store");
    store.create_session(&header).expect("session");
    let path = dir.join(format!("append-{batch_events}.jsonl"));
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .expect("jsonl");
    let mut batches = batches.into_iter();
    let (mut ours, mut baseline) = (Vec::new(), Vec::new());
    let mut next_seq = 0;
    for _ in 0..APPEND_ROUNDS {
        // sessionlog: one durable append per batch (owned events prepared before timing).
        let round: Vec<Vec<Event>> = batches.by_ref().take(200).collect();
        let copies = round.clone();
        let started = Instant::now();
        for batch in copies {
            let n = batch.len() as u64;
            store.append(&header.id, next_seq, batch).expect("append");
            next_seq += n;
        }
        ours.push(round.len() as f64 / started.elapsed().as_secs_f64());
        // dsh's method: encode the batch's JSONL rows, append them, fsync.
        let started = Instant::now();
        let mut buf = Vec::new();
        for batch in &round {
            buf.clear();
            for event in batch {
                encode_row(event, FormatVersion::V3, &mut buf);
                buf.push(b'\n');
            }
            file.write_all(&buf).expect("write");
            file.sync_data().expect("fsync");
        }
        baseline.push(round.len() as f64 / started.elapsed().as_secs_f64());
    }
    Row {
        name: format!("durable append, batches of {batch_events}"),
        ours: median(&ours),
        baseline: median(&baseline),
        unit: "batches/s",
        higher_is_better: true,
        target: 0.8,
        note: format!(
            "one writer, one session; median of {APPEND_ROUNDS} alternated rounds of 200 batches"
        ),
    }
}

fn cold_open_messages(path: &Path) -> usize {
    let store = Store::open(path).expect("store");
    let id = store
        .sessions()
        .expect("sessions")
        .pop()
        .expect("one session");
    store
        .with_fold(&id, |fold| fold.messages().len())
        .expect("fold")
}

fn big_session(dir: &Path, n_events: u64) -> Vec<Row> {
    let path = dir.join("big.redb");
    let id = build_big_store(&path, n_events);
    // Cold open + derive, in a fresh process so the page cache is the only warm thing and peak
    // memory is the open's own.
    let exe = std::env::current_exe().expect("own path");
    let output = Command::new(exe)
        .arg("--open-only")
        .arg(&path)
        .output()
        .expect("child runs");
    let text = String::from_utf8_lossy(&output.stdout);
    let fields: Vec<&str> = text.split_whitespace().collect();
    let cold_s: f64 = fields
        .first()
        .and_then(|v| v.parse().ok())
        .expect("child prints its time");
    let peak_kib: u64 = fields.get(2).and_then(|v| v.parse().ok()).unwrap_or(0);
    let store = Store::open(&path).expect("store");
    let scratch_s = time(|| {
        store
            .fold_from_start(&id, None)
            .expect("fold")
            .messages()
            .len()
    });
    let mut rows = vec![Row {
        name: format!("cold open + derive messages, {n_events} events"),
        ours: cold_s,
        baseline: scratch_s,
        unit: "s",
        higher_is_better: false,
        target: 20.0,
        note: format!(
            "baseline: fold from scratch; peak RSS of the open {} MiB",
            peak_kib / 1024
        ),
    }];
    rows.push(derive_after_append(&store, &id, scratch_s));
    let verify_s = time(|| store.verify(&[]).expect("verify"));
    drop(store);
    rows.push(verify_against_blake3(verify_s, &path));
    rows
}

fn build_big_store(path: &Path, n_events: u64) -> String {
    let store = Store::open(path).expect("store");
    let mut generator = Generator::new(GenOptions {
        events: n_events,
        seed: 42,
    });
    let header = generator.header();
    store.create_session(&header).expect("session");
    let mut next_seq = 0;
    let mut pending: Vec<Event> = Vec::new();
    while let Some(batch) = generator.next_batch() {
        pending.extend(batch);
        if pending.len() >= 4096 {
            let n = pending.len() as u64;
            store
                .append(&header.id, next_seq, std::mem::take(&mut pending))
                .expect("append");
            next_seq += n;
        }
    }
    if !pending.is_empty() {
        store.append(&header.id, next_seq, pending).expect("append");
    }
    header.id
}

fn derive_after_append(store: &Store, id: &str, scratch_s: f64) -> Row {
    // Warm the fold, then time one append's fold update plus the derive.
    store.with_fold(id, |f| f.messages().len()).expect("warm");
    let head = store.head(id).expect("head");
    let event = Event::other(
        head.next_seq,
        0,
        sessionlog_format::EventType::SessionTitle,
        json!({"title": "t", "messageSeqs": [], "source": {"kind": "user"}}),
    );
    store
        .append(id, head.next_seq, vec![event])
        .expect("append");
    let samples: Vec<f64> = (0..21)
        .map(|_| time(|| store.with_fold(id, |f| f.messages().len())))
        .collect();
    let derive_s = median(&samples);
    Row {
        name: "derive after one append".to_owned(),
        ours: derive_s,
        baseline: scratch_s,
        unit: "s",
        higher_is_better: false,
        target: 1000.0,
        note: "median of 21; baseline: fold from scratch".to_owned(),
    }
}

fn verify_against_blake3(verify_s: f64, path: &Path) -> Row {
    let records = all_record_bytes(path);
    let total: usize = records.iter().map(Vec::len).sum();
    let hash_s = time(|| {
        let mut hasher = blake3::Hasher::new();
        for record in &records {
            hasher.update(record);
        }
        hasher.finalize()
    });
    let mib = total as f64 / f64::from(1 << 20);
    Row {
        name: format!("verify ({mib:.0} MiB of records)"),
        ours: mib / verify_s,
        baseline: mib / hash_s,
        unit: "MiB/s",
        higher_is_better: true,
        target: 0.5,
        note: "baseline: blake3 over the same record bytes, in memory".to_owned(),
    }
}

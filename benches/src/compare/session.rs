//! The workloads on one session of N events: bulk import, size on disk, cold open + derive,
//! derive after one append, point-in-time read, and verify; and verify of a store of many
//! sessions.
//!
//! The source is a generated V3 log (seed 42) written to a file; each store imports it. The
//! stores the last import built are then read by the other workloads.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Map, Value};
use sessionlog_engine::open::{open_store, Access, Location};
use sessionlog_engine::store::Store;
use sessionlog_engine::transfer::import_file;
use sessionlog_format::{Event, EventType, FormatVersion, SessionHeader, SnapshotMode};

use crate::backends::{derive_from_scratch, derive_messages, size_on_disk_bytes, Baseline, Writer};
use crate::compare::report::{params, Bound, Cell, Stat, Target};
use crate::data::write_generated_log;
use crate::measure::{measure, peak_rss_kib, time};

/// Rows per durable batch in every store's bulk import (sessionlog's import uses 1024 too).
pub const IMPORT_BATCH_EVENTS: usize = 1024;

/// How one scale runs.
#[derive(Debug, Clone)]
pub struct SessionShape {
    pub n_events: u64,
    /// Repeated runs of the import, the cold opens and verify.
    pub runs: usize,
    /// Random seqs read at a point in time.
    pub point_reads: usize,
    /// The baselines to build and compare against.
    pub baselines: Vec<Baseline>,
}

/// The stores built by the import, for the later workloads.
struct Built {
    store: PathBuf,
    baselines: Vec<(Baseline, PathBuf)>,
    source_bytes: u64,
}

/// Every single-session workload at one scale, under `dir`.
pub fn session_cells(dir: &Path, shape: SessionShape) -> Vec<Cell> {
    let source = dir.join("source.jsonl");
    write_generated_log(&source, FormatVersion::V3, shape.n_events, 42);
    let shape = &shape;
    let (import, built) = import_cell(dir, &source, shape);
    let mut cells = vec![import, size_cell(&built, shape)];
    let (cold, scratch) = cold_open_cell(&built, shape);
    cells.push(cold);
    cells.push(derive_after_append_cell(&built, shape, &scratch));
    cells.push(point_in_time_cell(&built, shape));
    cells.push(verify_cell(&built, shape));
    cells
}

fn import_cell(dir: &Path, source: &Path, shape: &SessionShape) -> (Cell, Built) {
    let n_sides = 1 + shape.baselines.len();
    let mut samples = vec![Vec::new(); n_sides];
    let mut peaks = vec![0u64; n_sides];
    let mut built = None;
    let source_arg = source.to_str().expect("a UTF-8 work path");
    for run in 0..shape.runs {
        let run_dir = dir.join(format!("import-{run}"));
        std::fs::create_dir_all(&run_dir).expect("a run directory");
        let store_path = run_dir.join("store.redb");
        // Each side in a fresh process, so that its peak RSS is the import's own.
        let store_arg = store_path.to_str().expect("a UTF-8 work path");
        let (seconds, peak_kib) = child(&["import", source_arg, store_arg]);
        samples[0].push(shape.n_events as f64 / seconds);
        peaks[0] = peaks[0].max(peak_kib);
        let mut baselines = Vec::new();
        for (i, baseline) in shape.baselines.iter().copied().enumerate() {
            let sub = run_dir.join(baseline.name());
            std::fs::create_dir_all(&sub).expect("a baseline directory");
            let sub_arg = sub.to_str().expect("a UTF-8 work path");
            let (seconds, peak_kib) = child(&["import-rows", baseline.name(), source_arg, sub_arg]);
            samples[i + 1].push(shape.n_events as f64 / seconds);
            peaks[i + 1] = peaks[i + 1].max(peak_kib);
            baselines.push((baseline, sub));
        }
        if let Some(previous) = built.replace(Built {
            store: store_path,
            baselines,
            source_bytes: std::fs::metadata(source).expect("the source").len(),
        }) {
            std::fs::remove_dir_all(previous.store.parent().expect("a run directory"))
                .expect("an old run");
        }
    }
    let cell = Cell {
        workload: "import",
        params: params(&[("events", shape.n_events)]),
        unit: "events/s",
        higher_is_better: true,
        ours: Stat::new(samples[0].clone(), peaks[0]),
        baselines: shape
            .baselines
            .iter()
            .enumerate()
            .map(|(i, b)| (b.name(), Stat::new(samples[i + 1].clone(), peaks[i + 1])))
            .collect(),
        targets: vec![
            Target {
                against: "jsonl",
                bound: Bound::AtLeast(if shape.n_events < 10_000 { 0.3 } else { 0.5 }),
            },
            Target {
                against: "sqlite",
                bound: Bound::AtLeast(1.5),
            },
        ]
        .into_iter()
        .filter(|t| shape.baselines.iter().any(|b| b.name() == t.against))
        .filter(|t| t.against == "jsonl" || shape.n_events >= 10_000)
        .collect(),
        note: format!(
            "a V3 file imported in durable batches of {IMPORT_BATCH_EVENTS} events; sessionlog \
             (`sessionlog import`: open for writing, import_file, close) decodes, checks and \
             folds every event, the baselines copy rows; each side timed inside a fresh \
             process, peak RSS its own"
        ),
    };
    (cell, built.expect("at least one run"))
}

/// The child side of the import cell: `import SOURCE STORE` does what `sessionlog import
/// --db STORE SOURCE` does (the store opened for writing as the CLI opens it, the import, the
/// close); `import-rows BASELINE SOURCE DIR` copies the rows into a baseline. Timed from the
/// open to the close; the events imported.
fn run_import_child(args: &[String]) -> (f64, usize) {
    let arg = |i: usize| PathBuf::from(args.get(i).expect("an import child argument"));
    match args[0].as_str() {
        "import" => {
            let (source, store_path) = (arg(1), arg(2));
            let started = std::time::Instant::now();
            let store = open_store(&Location::Redb(store_path), Access::Write).expect("the store");
            let report =
                import_file(&*store, &source, SnapshotMode::Off, &mut |_| {}).expect("the import");
            drop(store);
            let events = usize::try_from(report.events).expect("an in-memory count");
            (started.elapsed().as_secs_f64(), events)
        }
        _ => {
            let baseline = Baseline::from_name(&args[1]).expect("a baseline name");
            let (source, dir) = (arg(2), arg(3));
            let started = std::time::Instant::now();
            let rows = import_rows(baseline, &dir, &source);
            (started.elapsed().as_secs_f64(), rows)
        }
    }
}

/// A baseline's import: the source's rows, in batches, each made durable.
fn import_rows(baseline: Baseline, dir: &Path, source: &Path) -> usize {
    let mut input = BufReader::with_capacity(1 << 20, File::open(source).expect("the source"));
    let mut header_line = Vec::new();
    input.read_until(b'\n', &mut header_line).expect("a header");
    let header: SessionHeader = serde_json::from_slice(&header_line).expect("a header line");
    let writer = Writer::create(baseline, dir, &[header]);
    let mut chunk = Vec::new();
    let (mut first_seq, mut n_rows) = (0u64, 0u64);
    loop {
        let read = input.read_until(b'\n', &mut chunk).expect("a row");
        if read > 0 {
            n_rows += 1;
        }
        if (read == 0 && !chunk.is_empty()) || n_rows - first_seq == IMPORT_BATCH_EVENTS as u64 {
            writer.append_rows(0, first_seq, &chunk);
            chunk.clear();
            first_seq = n_rows;
        }
        if read == 0 {
            return usize::try_from(n_rows).expect("an in-memory count");
        }
    }
}

fn size_cell(built: &Built, shape: &SessionShape) -> Cell {
    let len = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    let wal = built.store.with_extension("redb.wal");
    let ours = len(&built.store) + len(&wal);
    let baselines = built
        .baselines
        .iter()
        .map(|(b, dir)| {
            let bytes = size_on_disk_bytes(*b, dir, 1) as f64;
            (b.name(), Stat::new(vec![bytes], 0))
        })
        .collect();
    Cell {
        workload: "size",
        params: params(&[("events", shape.n_events)]),
        unit: "bytes",
        higher_is_better: false,
        ours: Stat::new(vec![ours as f64], 0),
        baselines,
        targets: vec![Target {
            against: "jsonl.zstd",
            bound: Bound::AtMost(1.2),
        }],
        note: format!(
            "file lengths after the import and a clean close (redb file plus WAL); the source \
             JSONL is {} bytes; ratios here are ours / theirs",
            built.source_bytes
        ),
    }
}

/// One child process's measurement: seconds, peak resident KiB, derived bytes.
pub(crate) fn child(args: &[&str]) -> (f64, u64) {
    quiet_disk();
    let exe = std::env::current_exe().expect("own path");
    let output = Command::new(exe)
        .arg("--child")
        .args(args)
        .output()
        .expect("the child runs");
    assert!(
        output.status.success(),
        "child {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).expect("the child's JSON");
    (
        report["seconds"].as_f64().expect("seconds"),
        report["peakKiB"].as_u64().unwrap_or(0),
    )
}

/// Waits until the data the cells before wrote is on the disk (`sync`), so that a measurement
/// does not share the machine with the kernel's writeback of another side's files. Without a
/// `sync` program the measurement runs as it is.
pub(crate) fn quiet_disk() {
    let _ = Command::new("sync").status();
}

/// The child side of `child`: runs one measurement named by `args` and prints its JSON.
pub fn child_main(args: &[String]) -> String {
    let path = PathBuf::from(args.get(1).expect("a path"));
    let (seconds, bytes) = match args[0].as_str() {
        kind @ ("check" | "ignored-any") => crate::compare::check::run_child(kind, &path),
        "import" | "import-rows" => run_import_child(args),
        "verify" => {
            // What `sessionlog verify --db STORE` does: a read-only open, every session.
            let started = std::time::Instant::now();
            let store = open_store(&Location::Redb(path), Access::Read).expect("the store");
            let reports = store.verify(&[]).expect("verify");
            assert!(reports.iter().all(|r| r.ok()), "the store verifies");
            drop(store);
            let events = reports.iter().map(|r| r.events).sum::<u64>();
            (
                started.elapsed().as_secs_f64(),
                usize::try_from(events).expect("an in-memory count"),
            )
        }
        "open" => {
            let started = std::time::Instant::now();
            let store = Store::open(&path).expect("the store");
            let id = store
                .sessions()
                .expect("sessions")
                .pop()
                .expect("a session");
            let bytes = store.with_fold(&id, derive_messages).expect("the fold");
            (started.elapsed().as_secs_f64(), bytes)
        }
        "store-scratch" => {
            let started = std::time::Instant::now();
            let store = Store::open(&path).expect("the store");
            let id = store
                .sessions()
                .expect("sessions")
                .pop()
                .expect("a session");
            let fold = store.fold_from_start(&id, None).expect("the fold");
            (started.elapsed().as_secs_f64(), derive_messages(&fold))
        }
        name => {
            let baseline = Baseline::from_name(name).expect("a baseline name");
            let started = std::time::Instant::now();
            let bytes = derive_from_scratch(baseline, &path, 0, None);
            (started.elapsed().as_secs_f64(), bytes)
        }
    };
    json!({"seconds": seconds, "peakKiB": peak_rss_kib(), "bytes": bytes}).to_string()
}

/// Cold open + derive in fresh processes (the page cache stays warm, nothing else does),
/// against a from-scratch derive of each store. Returns the cell and the baselines' stats,
/// which the derive-after-append cell reuses.
fn cold_open_cell(built: &Built, shape: &SessionShape) -> (Cell, Vec<(&'static str, Stat)>) {
    let store = built.store.to_string_lossy().into_owned();
    let mut sides: Vec<(&'static str, Vec<String>)> = vec![
        ("sessionlog", vec!["open".into(), store.clone()]),
        ("sessionlog-scratch", vec!["store-scratch".into(), store]),
    ];
    for (b, dir) in &built.baselines {
        sides.push((
            b.name(),
            vec![b.name().into(), dir.to_string_lossy().into_owned()],
        ));
    }
    let mut samples = vec![Vec::new(); sides.len()];
    let mut peaks = vec![0u64; sides.len()];
    for _ in 0..shape.runs {
        for (i, (_, args)) in sides.iter().enumerate() {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (seconds, peak_kib) = child(&args);
            samples[i].push(seconds);
            peaks[i] = peaks[i].max(peak_kib);
        }
    }
    let stats: Vec<(&'static str, Stat)> = sides
        .iter()
        .enumerate()
        .map(|(i, (name, _))| (*name, Stat::new(samples[i].clone(), peaks[i])))
        .collect();
    let baselines = stats[1..].to_vec();
    let cell = Cell {
        workload: "cold-open-derive",
        params: params(&[("events", shape.n_events)]),
        unit: "s",
        higher_is_better: false,
        ours: stats[0].1.clone(),
        baselines: baselines.clone(),
        targets: vec![Target {
            against: "sessionlog-scratch",
            bound: Bound::AtLeast(20.0),
        }],
        note: "each run a fresh process (open, then the messages serialized); peak RSS is the \
               child's VmHWM; sessionlog-scratch is the store folded from its first record"
            .into(),
    };
    (cell, baselines)
}

fn derive_after_append_cell(
    built: &Built,
    shape: &SessionShape,
    scratch: &[(&'static str, Stat)],
) -> Cell {
    let store = Store::open(&built.store).expect("the store");
    let id = store
        .sessions()
        .expect("sessions")
        .pop()
        .expect("a session");
    store.with_fold(&id, derive_messages).expect("warm");
    // Each sample: one durable append (the fold update happens inside it, not timed), then
    // the timed derive: the derived messages as the warm fold hands them out, a vector of the
    // live nodes' messages with no content copied. Serializing them is measured apart, as the
    // consumer's cost in the log's current size.
    let (mut peak_kib, mut n_messages, mut json_bytes) = (0, 0, 0);
    let mut json_seconds = Vec::new();
    let samples: Vec<f64> = (0..21)
        .map(|_| {
            let next_seq = store.head(&id).expect("the head").next_seq;
            let event = Event::other(
                next_seq,
                0,
                EventType::SessionTitle,
                json!({"title": "t", "messageSeqs": [], "source": {"kind": "user"}}),
            );
            store
                .append(&id, next_seq, vec![event])
                .expect("one append");
            let run = measure(|| {
                store
                    .with_fold(&id, |fold| fold.messages().len())
                    .expect("the fold")
            });
            peak_kib = peak_kib.max(run.peak_kib);
            n_messages = run.value;
            let serialized = measure(|| store.with_fold(&id, derive_messages).expect("the fold"));
            json_bytes = serialized.value;
            json_seconds.push(serialized.seconds);
            run.seconds
        })
        .collect();
    let json_median = crate::measure::median(&json_seconds);
    Cell {
        workload: "derive-after-append",
        params: params(&[("events", shape.n_events)]),
        unit: "s",
        higher_is_better: false,
        ours: Stat::new(samples, peak_kib),
        baselines: scratch.to_vec(),
        targets: Vec::new(),
        note: format!(
            "median of 21 derives of the {n_messages} messages from the warm fold, each after \
             one durable append (the fold update is inside the append); serializing them as \
             `messages --json` takes a further {:.1} us for {json_bytes} bytes (O(live \
             bytes)); the baselines are the cold-open cell's from-scratch derives",
            json_median * 1e6
        ),
    }
}

/// Deterministic "random" seqs in `0..n`.
fn random_seqs(n: u64, count: usize) -> Vec<u64> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ n;
    (0..count)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) % n
        })
        .collect()
}

fn point_in_time_cell(built: &Built, shape: &SessionShape) -> Cell {
    let seqs = random_seqs(shape.n_events, shape.point_reads);
    let store = Store::open(&built.store).expect("the store");
    let id = store
        .sessions()
        .expect("sessions")
        .pop()
        .expect("a session");
    let n_sides = 1 + built.baselines.len();
    let mut samples = vec![Vec::new(); n_sides];
    let mut peaks = vec![0u64; n_sides];
    for &seq in &seqs {
        let run = measure(|| derive_messages(&store.fold_at(&id, Some(seq)).expect("the fold")));
        samples[0].push(run.seconds);
        peaks[0] = peaks[0].max(run.peak_kib);
        for (i, (b, dir)) in built.baselines.iter().enumerate() {
            let run = measure(|| derive_from_scratch(*b, dir, 0, Some(seq)));
            samples[i + 1].push(run.seconds);
            peaks[i + 1] = peaks[i + 1].max(run.peak_kib);
        }
    }
    Cell {
        workload: "point-in-time",
        params: params(&[("events", shape.n_events)]),
        unit: "s",
        higher_is_better: false,
        ours: Stat::new(samples[0].clone(), peaks[0]),
        baselines: built
            .baselines
            .iter()
            .enumerate()
            .map(|(i, (b, _))| (b.name(), Stat::new(samples[i + 1].clone(), peaks[i + 1])))
            .collect(),
        // #23: at 1M events a read folds from a kept checkpoint at most 16,384 + 1,024 events
        // and a batch below its seq; below a few kept intervals the distance is most of the
        // log, so the target is the 1M row's.
        targets: if shape.n_events >= 1_000_000 {
            vec![Target {
                against: "jsonl",
                bound: Bound::AtLeast(20.0),
            }]
        } else {
            Vec::new()
        },
        note: format!(
            "messages as of {} random seqs (the same for every store), median; sessionlog \
             folds from the nearest kept checkpoint below the seq (one per 16,384 events)",
            seqs.len()
        ),
    }
}

fn verify_cell(built: &Built, shape: &SessionShape) -> Cell {
    let runs = verify_runs(&built.store, shape.runs);
    let note = format!(
        "`sessionlog verify --db` (a read-only open, then Store::verify) over {:.1} MiB of \
         records, timed and its peak RSS taken in a fresh process, against blake3 alone over \
         the same record bytes in memory",
        runs.mib
    );
    runs.cell("verify", params(&[("events", shape.n_events)]), note)
}

/// `verify` of a store of `n_sessions` sessions of `events_per_session` events each (V3 logs
/// of seeds 1 and up, imported into one store under `dir`): what one session's cells cannot
/// show, the walk going on from one session to the next.
pub fn verify_sessions_cell(
    dir: &Path,
    n_sessions: u64,
    events_per_session: u64,
    runs: usize,
) -> Cell {
    let store_path = dir.join("store.redb");
    {
        let store =
            open_store(&Location::Redb(store_path.clone()), Access::Write).expect("the store");
        let source = dir.join("source.jsonl");
        for seed in 1..=n_sessions {
            write_generated_log(&source, FormatVersion::V3, events_per_session, seed);
            import_file(&*store, &source, SnapshotMode::Off, &mut |_| {}).expect("the import");
        }
        std::fs::remove_file(&source).expect("the last source");
    }
    let runs = verify_runs(&store_path, runs);
    let note = format!(
        "as verify, over a store of {n_sessions} sessions of {events_per_session} events \
         ({:.1} MiB of records)",
        runs.mib
    );
    let params = params(&[
        ("sessions", n_sessions),
        ("events", n_sessions * events_per_session),
    ]);
    runs.cell("verify-sessions", params, note)
}

/// What the verify cells measure, run by run.
struct VerifyRuns {
    /// `sessionlog verify --db`'s MiB of records per second.
    ours: Vec<f64>,
    /// blake3's, over the same bytes.
    hashes: Vec<f64>,
    peak_kib: u64,
    mib: f64,
}

impl VerifyRuns {
    /// The cell: MiB/s against blake3, #23's target of at least 0.5x.
    fn cell(self, workload: &'static str, params: Map<String, Value>, note: String) -> Cell {
        Cell {
            workload,
            params,
            unit: "MiB/s",
            higher_is_better: true,
            ours: Stat::new(self.ours, self.peak_kib),
            baselines: vec![("blake3", Stat::new(self.hashes, 0))],
            targets: vec![Target {
                against: "blake3",
                bound: Bound::AtLeast(0.5),
            }],
            note,
        }
    }
}

fn verify_runs(store_path: &Path, runs: usize) -> VerifyRuns {
    let mut out = VerifyRuns {
        ours: Vec::new(),
        hashes: Vec::new(),
        peak_kib: 0,
        mib: 0.0,
    };
    let store_arg = store_path.to_str().expect("a UTF-8 work path");
    for _ in 0..runs {
        quiet_disk();
        // blake3 over the same record bytes, in memory, a few thousand records at a time so
        // that a large store need not fit in memory; only the hashing is timed.
        let mut total_bytes = 0usize;
        let mut hash_seconds = 0.0;
        let mut hasher = blake3::Hasher::new();
        {
            let store = Store::open_read_only(store_path).expect("the store");
            for_each_record_chunk(&store, |records| {
                total_bytes += records.iter().map(Vec::len).sum::<usize>();
                hash_seconds += time(|| {
                    for record in records {
                        hasher.update(record);
                    }
                });
            });
        }
        std::hint::black_box(hasher.finalize());
        out.mib = total_bytes as f64 / f64::from(1 << 20);
        out.hashes.push(out.mib / hash_seconds);
        // `sessionlog verify --db`: a read-only open and verify, in a fresh process.
        let (seconds, peak) = child(&["verify", store_arg]);
        out.ours.push(out.mib / seconds);
        out.peak_kib = out.peak_kib.max(peak);
    }
    out
}

/// Every event record's bytes as the store keeps them (sealed blocks rebuilt), every session.
pub fn all_record_bytes(path: &Path) -> Vec<Vec<u8>> {
    let store = Store::open(path).expect("the store");
    let mut out = Vec::new();
    for_each_record_chunk(&store, |records| out.extend_from_slice(records));
    out
}

/// Calls `f` with the store's event records, every session, up to `READ_EVENTS_MAX` at a time.
fn for_each_record_chunk(store: &Store, mut f: impl FnMut(&[Vec<u8>])) {
    use sessionlog_engine::log_store::{LogStore, READ_EVENTS_MAX};
    for session in store.sessions().expect("sessions") {
        let next_seq = store.head(&session).expect("the head").next_seq;
        let mut from_seq = 0;
        while from_seq < next_seq {
            let to_seq = next_seq.min(from_seq + READ_EVENTS_MAX);
            let records =
                LogStore::read_records(store, &session, from_seq, to_seq).expect("records");
            let bytes: Vec<Vec<u8>> = records.into_iter().map(|r| r.bytes).collect();
            f(&bytes);
            from_seq = to_seq;
        }
    }
}

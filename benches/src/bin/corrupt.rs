//! Corruption campaign: damage a store file and exported logs at random, and count what is
//! detected.
//!
//! `cargo run --release -p sessionlog-benches --bin corrupt -- --trials N [--seed S]`
//!
//! Store file: each trial copies a clean store (three generated sessions, closed cleanly) and
//! flips a bit, overwrites a run of bytes, truncates the tail, or zero-fills the tail at a
//! random position; then opens it, runs `verify`, and reads every session back. A trial is
//! *detected* when the open, a read or `verify` reports it; *recovered* when everything reads
//! back equal to the original and `verify` is clean (the damage hit free or stale space);
//! *undetected* when `verify` is clean but some session reads back different. A panic is
//! counted apart. When the damage lies inside a live event record, `verify` must name that seq;
//! inside a part of a sealed block, the block's first seq (a block is reported as one fault).
//!
//! Exported files: the same damage to a `.jsonl.zstd` and a raw `.jsonl` export, read back
//! strictly; the sealed check (`verify FILE`) runs on the same damaged bytes.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::process::ExitCode;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use sessionlog_engine::files::open_log;
use sessionlog_engine::seal::{seal_export, verify_sealed};
use sessionlog_engine::store::Store;
use sessionlog_engine::transfer::{export_session, ExportTarget};
use sessionlog_format::gen::{GenOptions, Generator};
use sessionlog_format::{Event, ReadOptions};

const EVENTS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("events");
const BLOCKS: TableDefinition<(u64, u64, u32), &[u8]> = TableDefinition::new("blocks");
/// Sessions in the store and their sizes.
const SESSION_EVENTS: [u64; 3] = [3000, 1500, 600];
/// Leading bytes of a record used to find it in the file (crc and part of the chain).
const KEY_BYTES: usize = 16;

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[derive(Debug, Clone, Copy)]
enum Damage {
    FlipBit,
    Overwrite,
    Truncate,
    ZeroTail,
}

const DAMAGES: [Damage; 4] = [
    Damage::FlipBit,
    Damage::Overwrite,
    Damage::Truncate,
    Damage::ZeroTail,
];

/// Applies one damage to `bytes`; returns the first damaged offset and the damaged length.
fn damage(bytes: &mut Vec<u8>, kind: Damage, rng: &mut Rng) -> (usize, usize) {
    let len = bytes.len();
    let at = rng.below(len);
    match kind {
        Damage::FlipBit => {
            bytes[at] ^= 1 << rng.below(8);
            (at, 1)
        }
        Damage::Overwrite => {
            let n = (1 + rng.below(16)).min(len - at);
            for byte in &mut bytes[at..at + n] {
                let old = *byte;
                while *byte == old {
                    *byte = rng.next() as u8;
                }
            }
            (at, n)
        }
        Damage::Truncate => {
            bytes.truncate(at);
            (at, len - at)
        }
        Damage::ZeroTail => {
            for byte in &mut bytes[at..] {
                *byte = 0;
            }
            (at, len - at)
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    trials: u64,
    detected: u64,
    recovered: u64,
    undetected: u64,
    panics: u64,
    /// Trials whose damage lay inside a live record, and those where verify named its seq.
    in_record: u64,
    located: u64,
}

impl Counts {
    fn line(&self, what: &str) -> String {
        format!(
            "{what}: {} trials: {} detected, {} recovered, {} undetected, {} panics",
            self.trials, self.detected, self.recovered, self.undetected, self.panics
        )
    }
}

type Sessions = Vec<(String, Vec<Event>)>;
/// Where a live record, or a part of a sealed block, lies in the file: offset, length, and
/// the seq verify must name (the record's; a block's first seq for any of its parts).
type RecordSpans = Vec<(usize, usize, u64)>;

/// Builds the clean store; returns its bytes, its sessions' events, and where each live
/// record lies in the file (offset, length, seq).
fn clean_store(dir: &Path) -> Result<(Vec<u8>, Sessions, RecordSpans), String> {
    let path = dir.join("clean.redb");
    let store = Store::open(&path).map_err(|e| e.to_string())?;
    let mut sessions = Vec::new();
    for (idx, events) in SESSION_EVENTS.iter().enumerate() {
        let mut generator = Generator::new(GenOptions {
            events: *events,
            seed: 40 + idx as u64,
        });
        let header = generator.header();
        store.create_session(&header).map_err(|e| e.to_string())?;
        let mut all = Vec::new();
        while let Some(batch) = generator.next_batch() {
            store
                .append(&header.id, all.len() as u64, batch.clone())
                .map_err(|e| e.to_string())?;
            all.extend(batch);
        }
        sessions.push((header.id, all));
    }
    drop(store);
    let bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
    let records = locate_records(&path, &bytes)?;
    Ok((bytes, sessions, records))
}

fn locate_records(path: &Path, bytes: &[u8]) -> Result<RecordSpans, String> {
    let db = Database::create(path).map_err(|e| e.to_string())?;
    let txn = db.begin_read().map_err(|e| e.to_string())?;
    let table = txn.open_table(EVENTS).map_err(|e| e.to_string())?;
    let mut by_key: HashMap<[u8; KEY_BYTES], (Vec<u8>, u64)> = HashMap::new();
    let mut add = |bytes: Vec<u8>, seq: u64| {
        if bytes.len() >= KEY_BYTES {
            let mut prefix = [0u8; KEY_BYTES];
            prefix.copy_from_slice(&bytes[..KEY_BYTES]);
            by_key.insert(prefix, (bytes, seq));
        }
    };
    for row in table.iter().map_err(|e| e.to_string())? {
        let (key, value) = row.map_err(|e| e.to_string())?;
        add(value.value().to_vec(), key.value().1);
    }
    let blocks = txn.open_table(BLOCKS).map_err(|e| e.to_string())?;
    for row in blocks.iter().map_err(|e| e.to_string())? {
        let (key, value) = row.map_err(|e| e.to_string())?;
        add(value.value().to_vec(), key.value().1);
    }
    let mut found = Vec::new();
    let mut idx = 0;
    while idx + KEY_BYTES <= bytes.len() {
        let mut prefix = [0u8; KEY_BYTES];
        prefix.copy_from_slice(&bytes[idx..idx + KEY_BYTES]);
        if let Some((record, seq)) = by_key.get(&prefix) {
            if bytes[idx..].starts_with(record) {
                found.push((idx, record.len(), *seq));
                idx += record.len();
                continue;
            }
        }
        idx += 1;
    }
    Ok(found)
}

enum Outcome {
    Detected { seqs: Vec<u64> },
    Recovered,
    Undetected(String),
}

/// Opens a damaged store file and classifies what the engine made of it.
fn judge_store(path: &Path, sessions: &Sessions) -> Outcome {
    let detected = |seqs| Outcome::Detected { seqs };
    let Ok(store) = Store::open(path) else {
        return detected(vec![]);
    };
    let reports = match store.verify(&[]) {
        Ok(reports) => reports,
        Err(_) => return detected(vec![]),
    };
    let faulty: Vec<u64> = reports
        .iter()
        .flat_map(|r| r.faults.iter().filter_map(|f| f.seq))
        .collect();
    if reports.iter().any(|r| !r.ok()) {
        return detected(faulty);
    }
    let Ok(ids) = store.sessions() else {
        return detected(vec![]);
    };
    if ids.len() != sessions.len() {
        return Outcome::Undetected(format!("verify is clean but {} sessions", ids.len()));
    }
    for (id, events) in sessions {
        let Ok(head) = store.head(id) else {
            return detected(vec![]);
        };
        match store.read_range(id, 0, head.next_seq) {
            Ok(read) if read == *events => {}
            Ok(read) => {
                let first = read.iter().zip(events).position(|(a, b)| a != b);
                return Outcome::Undetected(format!(
                    "{id}: verify is clean, but {} events read of {}, first difference at {first:?}",
                    read.len(),
                    events.len()
                ));
            }
            Err(_) => return detected(vec![]),
        }
    }
    Outcome::Recovered
}

fn store_campaign(trials: u64, rng: &mut Rng, dir: &Path) -> Result<Counts, String> {
    let (clean, sessions, records) = clean_store(dir)?;
    let mut counts = Counts::default();
    for trial in 0..trials {
        let kind = DAMAGES[trial as usize % DAMAGES.len()];
        let mut bytes = clean.clone();
        let (at, n) = damage(&mut bytes, kind, rng);
        let hit = records
            .iter()
            .find(|(start, len, _)| {
                matches!(kind, Damage::FlipBit | Damage::Overwrite)
                    && at >= *start
                    && at < start + len
            })
            .map(|(_, _, seq)| *seq);
        let path = dir.join("trial.redb");
        let _ = std::fs::remove_file(path.with_extension("redb.wal"));
        std::fs::write(&path, &bytes).map_err(|e| e.to_string())?;
        counts.trials += 1;
        match catch_unwind(AssertUnwindSafe(|| judge_store(&path, &sessions))) {
            Err(_) => {
                counts.panics += 1;
                eprintln!("trial {trial}: {kind:?} at {at} (+{n}): PANIC");
            }
            Ok(Outcome::Detected { seqs }) => {
                counts.detected += 1;
                if let Some(seq) = hit {
                    counts.in_record += 1;
                    if seqs.contains(&seq) {
                        counts.located += 1;
                    }
                }
            }
            Ok(Outcome::Recovered) => counts.recovered += 1,
            Ok(Outcome::Undetected(what)) => {
                counts.undetected += 1;
                eprintln!("trial {trial}: {kind:?} at {at} (+{n}): UNDETECTED: {what}");
            }
        }
    }
    Ok(counts)
}

/// Counts for one exported file: strict read alone, and strict read plus the seal.
#[derive(Debug, Default)]
struct FileCounts {
    plain: Counts,
    sealed: Counts,
}

fn file_campaign(trials: u64, rng: &mut Rng, dir: &Path, name: &str) -> Result<FileCounts, String> {
    let store_path = dir.join(format!("{name}.redb"));
    let store = Store::open(&store_path).map_err(|e| e.to_string())?;
    let mut generator = Generator::new(GenOptions {
        events: 800,
        seed: 77,
    });
    let header = generator.header();
    store.create_session(&header).map_err(|e| e.to_string())?;
    let mut events = Vec::new();
    while let Some(batch) = generator.next_batch() {
        store
            .append(&header.id, events.len() as u64, batch.clone())
            .map_err(|e| e.to_string())?;
        events.extend(batch);
    }
    let clean_path = dir.join(format!("clean-{name}"));
    export_session(&store, &header.id, &ExportTarget::File(clean_path.clone()))
        .map_err(|e| e.to_string())?;
    let seal = seal_export(&store, &header.id, &clean_path).map_err(|e| e.to_string())?;
    let clean = std::fs::read(&clean_path).map_err(|e| e.to_string())?;
    let trial_path = dir.join(format!("trial-{name}"));
    let trial_seal = sessionlog_engine::seal::seal_path(&trial_path);
    std::fs::write(&trial_seal, seal.to_line()).map_err(|e| e.to_string())?;
    let mut counts = FileCounts::default();
    for trial in 0..trials {
        let kind = DAMAGES[trial as usize % DAMAGES.len()];
        let mut bytes = clean.clone();
        let (at, n) = damage(&mut bytes, kind, rng);
        std::fs::write(&trial_path, &bytes).map_err(|e| e.to_string())?;
        counts.plain.trials += 1;
        counts.sealed.trials += 1;
        let read = catch_unwind(AssertUnwindSafe(|| read_all(&trial_path)));
        let sealed = catch_unwind(AssertUnwindSafe(|| verify_sealed(&trial_path).ok()));
        match read {
            Err(_) => counts.plain.panics += 1,
            Ok(Err(_)) => counts.plain.detected += 1,
            Ok(Ok(read)) if read == events => counts.plain.recovered += 1,
            Ok(Ok(_)) => {
                counts.plain.undetected += 1;
                eprintln!("{name} trial {trial}: {kind:?} at {at} (+{n}): reads as valid");
            }
        }
        match sealed {
            Err(_) => counts.sealed.panics += 1,
            Ok(false) => counts.sealed.detected += 1,
            Ok(true) => {
                counts.sealed.undetected += 1;
                eprintln!("{name} trial {trial}: {kind:?} at {at} (+{n}): seal holds");
            }
        }
    }
    Ok(counts)
}

fn read_all(path: &Path) -> Result<Vec<Event>, String> {
    let mut reader = open_log(path, ReadOptions::default()).map_err(|e| e.to_string())?;
    let mut events = Vec::new();
    while let Some(event) = reader.next_event() {
        events.push(event.map_err(|e| e.to_string())?);
    }
    Ok(events)
}

fn parse_args() -> Result<(u64, u64), String> {
    let mut args = std::env::args().skip(1);
    let (mut trials, mut seed) = (10_000, 1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--trials" => trials = value()?.parse().map_err(|e| format!("--trials: {e}"))?,
            "--seed" => seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            other => {
                return Err(format!(
                    "unknown argument {other}; usage: corrupt --trials N [--seed S]"
                ))
            }
        }
    }
    Ok((trials, seed))
}

fn run(trials: u64, seed: u64) -> Result<bool, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut rng = Rng(seed);
    // Panics (caught by the engine or counted here) print one line each, not a backtrace.
    std::panic::set_hook(Box::new(|info| eprintln!("panic: {info}")));
    let store = store_campaign(trials, &mut rng, dir.path())?;
    println!("{}", store.line("store file"));
    println!(
        "store file: {} damaged live records or block parts, verify named the seq of {}",
        store.in_record, store.located
    );
    let file_trials = (trials / 4).max(40);
    let zstd = file_campaign(file_trials, &mut rng, dir.path(), "x.v3.jsonl.zstd")?;
    println!("{}", zstd.plain.line(".jsonl.zstd, strict read"));
    println!("{}", zstd.sealed.line(".jsonl.zstd, sealed verify"));
    let raw = file_campaign(file_trials, &mut rng, dir.path(), "x.v3.jsonl")?;
    println!(
        "{}",
        raw.plain
            .line(".jsonl, strict read (undetected: still valid rows)")
    );
    println!("{}", raw.sealed.line(".jsonl, sealed verify"));
    let ok = store.undetected == 0
        && store.panics == 0
        && store.located == store.in_record
        && zstd.sealed.undetected == 0
        && raw.sealed.undetected == 0
        && zstd.plain.panics + raw.plain.panics + zstd.sealed.panics + raw.sealed.panics == 0;
    Ok(ok)
}

fn main() -> ExitCode {
    let (trials, seed) = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("corrupt: {message}");
            return ExitCode::from(1);
        }
    };
    match run(trials, seed) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!(
                "corrupt: FAILED: a corruption went undetected, a seq was not named, or a panic"
            );
            ExitCode::from(1)
        }
        Err(message) => {
            eprintln!("corrupt: {message}");
            ExitCode::from(2)
        }
    }
}

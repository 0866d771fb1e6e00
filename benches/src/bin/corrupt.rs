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
//! *undetected* when `verify` is clean but some session reads back different. A trial that
//! `verify` calls clean and a read refuses is detected, and counted apart as *missed by
//! verify*: verify must find whatever a read refuses. A panic is counted apart. When the damage lies inside a live event record, `verify` must name that seq;
//! inside a part of a sealed block, the block's first seq (a block is reported as one fault).
//!
//! Exported files: the same damage to a `.jsonl.zstd` and a raw `.jsonl` export, read back
//! strictly; the sealed check (`verify FILE`) runs on the same damaged bytes.
//!
//! WAL: a crash image (both files copied while the writer is open, every acknowledged event
//! still in the WAL) gets a flipped bit or an overwritten run anywhere in the WAL's used
//! bytes. The store then opens read-only and verifies; every acknowledged event it no longer
//! holds must be *named*: a `wal` fault in its session's report (or, when the damage hides
//! which session a frame held, at least the store's damaged-frame report), and a writable open
//! must either refuse the store or hold every acknowledged event. An event lost with neither
//! is *silent*; an event read back different with a clean verify is *undetected*.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::process::ExitCode;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use sessionlog_engine::files::open_log;
use sessionlog_engine::seal::{seal_export, verify_sealed};
use sessionlog_engine::store::{AppendRequest, Store};
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
    /// Trials that verify called clean and a read refused (counted as detected too).
    missed_by_verify: u64,
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
    Detected {
        seqs: Vec<u64>,
    },
    /// Verify was clean; a read refused (what it said).
    MissedByVerify(String),
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
    let ids = match store.sessions() {
        Ok(ids) => ids,
        Err(error) => return Outcome::MissedByVerify(format!("sessions: {error}")),
    };
    if ids.len() != sessions.len() {
        return Outcome::Undetected(format!("verify is clean but {} sessions", ids.len()));
    }
    for (id, events) in sessions {
        let head = match store.head(id) {
            Ok(head) => head,
            Err(error) => return Outcome::MissedByVerify(format!("{id}: head: {error}")),
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
            Err(error) => return Outcome::MissedByVerify(format!("{id}: read: {error}")),
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
            Ok(Outcome::MissedByVerify(what)) => {
                counts.detected += 1;
                counts.missed_by_verify += 1;
                eprintln!("trial {trial}: {kind:?} at {at} (+{n}): MISSED BY VERIFY: {what}");
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

/// What the WAL campaign counted.
#[derive(Debug, Default)]
struct WalCounts {
    trials: u64,
    /// No acknowledged event lost and nothing reported: the damage hit stale or unused bytes.
    harmless: u64,
    /// Something reported (a damaged frame, a fault, a refused open), nothing lost.
    reported: u64,
    /// Acknowledged events lost, each lost session named by a `wal` fault.
    lost_named: u64,
    /// Acknowledged events lost, the session not named but the damaged frame reported.
    lost_frame_only: u64,
    /// The read-only open refused the store (it names the WAL).
    refused: u64,
    silent: u64,
    undetected: u64,
    panics: u64,
    lost_events: u64,
}

/// Sessions of the WAL campaign, and batches of this many events interleaved among them.
const WAL_SESSION_EVENTS: [u64; 3] = [900, 600, 300];
const WAL_BATCH_EVENTS: usize = 7;

/// Builds a crash image whose every acknowledged event is in the WAL only: returns the two
/// files' bytes and the sessions' events.
fn wal_crash_image(dir: &Path) -> Result<(Vec<u8>, Vec<u8>, Sessions), String> {
    let path = dir.join("wal-clean.redb");
    let store = Store::open(&path).map_err(|e| e.to_string())?;
    let mut pending = Vec::new();
    for (idx, events) in WAL_SESSION_EVENTS.iter().enumerate() {
        let mut generator = Generator::new(GenOptions {
            events: *events,
            seed: 60 + idx as u64,
        });
        let header = generator.header();
        store.create_session(&header).map_err(|e| e.to_string())?;
        let mut all = Vec::new();
        while let Some(batch) = generator.next_batch() {
            all.extend(batch);
        }
        pending.push((header.id, all));
    }
    // Groups of one batch per session with events left: most frames hold several sessions.
    let mut next = vec![0usize; pending.len()];
    loop {
        let requests: Vec<AppendRequest> = pending
            .iter()
            .zip(&next)
            .filter(|((_, all), at)| **at < all.len())
            .map(|((id, all), at)| AppendRequest {
                session: id.clone(),
                expected_next_seq: *at as u64,
                events: all[*at..(*at + WAL_BATCH_EVENTS).min(all.len())].to_vec(),
            })
            .collect();
        if requests.is_empty() {
            break;
        }
        for (request, result) in requests.iter().zip(store.append_group(requests.clone())) {
            result.map_err(|e| e.to_string())?;
            let idx = pending
                .iter()
                .position(|(id, _)| *id == request.session)
                .expect("a pending session");
            next[idx] += request.events.len();
        }
    }
    // The writer is open and idle: its files now are what a process crash would leave.
    let redb = std::fs::read(&path).map_err(|e| e.to_string())?;
    let wal = std::fs::read(path.with_extension("redb.wal")).map_err(|e| e.to_string())?;
    drop(store);
    Ok((redb, wal, pending))
}

enum WalOutcome {
    Harmless,
    Reported,
    Refused,
    Lost { events: u64, named: bool },
    Silent(String),
    Undetected(String),
}

/// Opens a damaged crash image and classifies what the engine made of it.
fn judge_wal(path: &Path, sessions: &Sessions) -> WalOutcome {
    let Ok(store) = Store::open_read_only(path) else {
        return WalOutcome::Refused;
    };
    let frames_damaged = !store.damaged_frames().is_empty();
    let Ok(reports) = store.verify(&[]) else {
        return WalOutcome::Refused;
    };
    let mut lost = 0;
    let mut all_named = true;
    for (id, events) in sessions {
        let report = reports.iter().find(|r| &r.session == id);
        let held = store.head(id).map(|h| h.next_seq).unwrap_or(0);
        if held < events.len() as u64 {
            lost += events.len() as u64 - held;
            let named = report.is_some_and(|r| {
                r.faults
                    .iter()
                    .any(|f| f.kind == sessionlog_engine::store::verify::FaultKind::Wal)
            });
            all_named &= named;
            if !named && !frames_damaged {
                return WalOutcome::Silent(format!("{id}: {held} of {} held", events.len()));
            }
        }
        if held > 0 && report.is_some_and(|r| r.ok()) {
            match store.read_range(id, 0, held) {
                Ok(read) if read[..] == events[..held as usize] => {}
                Ok(_) => return WalOutcome::Undetected(format!("{id}: read back different")),
                Err(_) => {}
            }
        }
    }
    let reported = frames_damaged || reports.iter().any(|r| !r.ok());
    drop(store);
    // A writable open either refuses the damaged WAL or holds every acknowledged event.
    if let Ok(store) = Store::open(path) {
        for (id, events) in sessions {
            let held = store.head(id).map(|h| h.next_seq).unwrap_or(0);
            if held < events.len() as u64 {
                return WalOutcome::Silent(format!(
                    "a writable open holds {held} of {} events of {id}",
                    events.len()
                ));
            }
        }
    }
    match (lost, reported) {
        (0, false) => WalOutcome::Harmless,
        (0, true) => WalOutcome::Reported,
        (events, _) => WalOutcome::Lost {
            events,
            named: all_named,
        },
    }
}

fn wal_campaign(trials: u64, rng: &mut Rng, dir: &Path) -> Result<WalCounts, String> {
    let (redb, wal, sessions) = wal_crash_image(dir)?;
    // The used bytes: up to the last nonzero byte (the rest is preallocated zeros).
    let used = wal
        .iter()
        .rposition(|b| *b != 0)
        .map_or(wal.len(), |i| i + 1);
    let mut counts = WalCounts::default();
    let path = dir.join("wal-trial.redb");
    for trial in 0..trials {
        let kind = [Damage::FlipBit, Damage::Overwrite][trial as usize % 2];
        let mut used_bytes = wal[..used].to_vec();
        let (at, n) = damage(&mut used_bytes, kind, rng);
        let mut bytes = used_bytes;
        bytes.extend_from_slice(&wal[used..]);
        std::fs::write(&path, &redb).map_err(|e| e.to_string())?;
        std::fs::write(path.with_extension("redb.wal"), &bytes).map_err(|e| e.to_string())?;
        counts.trials += 1;
        match catch_unwind(AssertUnwindSafe(|| judge_wal(&path, &sessions))) {
            Err(_) => {
                counts.panics += 1;
                eprintln!("wal trial {trial}: {kind:?} at {at} (+{n}): PANIC");
            }
            Ok(WalOutcome::Harmless) => counts.harmless += 1,
            Ok(WalOutcome::Reported) => counts.reported += 1,
            Ok(WalOutcome::Refused) => counts.refused += 1,
            Ok(WalOutcome::Lost { events, named }) => {
                counts.lost_events += events;
                if named {
                    counts.lost_named += 1;
                } else {
                    counts.lost_frame_only += 1;
                }
            }
            Ok(WalOutcome::Silent(what)) => {
                counts.silent += 1;
                eprintln!("wal trial {trial}: {kind:?} at {at} (+{n}): SILENT LOSS: {what}");
            }
            Ok(WalOutcome::Undetected(what)) => {
                counts.undetected += 1;
                eprintln!("wal trial {trial}: {kind:?} at {at} (+{n}): UNDETECTED: {what}");
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
        "store file: {} damaged live records or block parts, verify named the seq of {}; {} \
         clean to verify and refused by a read",
        store.in_record, store.located, store.missed_by_verify
    );
    let wal_trials = (trials / 4).max(40);
    let wal = wal_campaign(wal_trials, &mut rng, dir.path())?;
    println!(
        "wal: {} trials: {} harmless, {} reported with nothing lost, {} refused at open, {} lost events named by a wal fault, {} lost with only the damaged frame reported ({} acknowledged events lost in all), {} silent losses, {} undetected, {} panics",
        wal.trials,
        wal.harmless,
        wal.reported,
        wal.refused,
        wal.lost_named,
        wal.lost_frame_only,
        wal.lost_events,
        wal.silent,
        wal.undetected,
        wal.panics
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
        && store.missed_by_verify == 0
        && wal.silent == 0
        && wal.undetected == 0
        && wal.panics == 0
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

//! Crash soak: concurrent appenders and an exporter, SIGKILLed at random points, N times.
//!
//! `cargo run --release -p sessionlog-benches --bin crash -- --kills N [--seed S]`
//!
//! The parent re-runs this binary as a child (`--child STORE`). The child runs one appender
//! thread per session slot: each appends the batches of generated V3 sessions (with replaces
//! and compactions, about 6000 events each, so fold checkpoints are written) and prints
//! `ack SESSION NEXT_SEQ` after every durable append; one more thread exports finished
//! sessions. The parent kills the child after a random delay, then reopens the store and
//! checks that every acknowledged batch is present byte for byte, that each head lies on a
//! batch boundary (no partial batch), that the stored events are exactly the generator's, that
//! `verify` passes (which compares the fold checkpoints with a fold from scratch), and that
//! every published export reads back complete and equal to the store.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sessionlog_engine::files::open_log;
use sessionlog_engine::store::Store;
use sessionlog_engine::transfer::{export_session, ExportTarget};
use sessionlog_format::gen::{GenOptions, Generator};
use sessionlog_format::{Event, ReadOptions, SessionHeader};

/// Concurrent appender threads, one session slot each.
const SLOTS: u64 = 4;
/// Events of each generated session; above the checkpoint interval.
const SESSION_EVENTS: u64 = 6000;
/// Longest wait before a kill, in microseconds.
const KILL_DELAY_MICROS_MAX: u64 = 250_000;

/// The generated session of `slot` in `round`.
fn session_gen(slot: u64, round: u64) -> Generator {
    Generator::new(GenOptions {
        events: SESSION_EVENTS,
        seed: 0x5eed_0000 + slot * 10_000 + round,
    })
}

struct Script {
    header: SessionHeader,
    batches: Vec<Vec<Event>>,
}

fn script(slot: u64, round: u64) -> Script {
    let mut generator = session_gen(slot, round);
    let header = generator.header();
    let mut batches = Vec::new();
    while let Some(batch) = generator.next_batch() {
        batches.push(batch);
    }
    Script { header, batches }
}

fn fail(message: String) -> ! {
    eprintln!("crash: {message}");
    std::process::exit(2)
}

/// The child: appends until killed.
fn child(path: &Path) {
    let store = Arc::new(Store::open(path).unwrap_or_else(|e| fail(format!("open: {e}"))));
    let exports = path.with_file_name("exports");
    std::thread::scope(|scope| {
        for slot in 0..SLOTS {
            let store = Arc::clone(&store);
            scope.spawn(move || appender(&store, slot));
        }
        let store = Arc::clone(&store);
        scope.spawn(move || exporter(&store, &exports));
    });
}

fn appender(store: &Store, slot: u64) {
    for round in 0.. {
        // Batches are generated as they are needed, so that a child starts appending at once.
        let mut generator = session_gen(slot, round);
        let header = generator.header();
        let id = &header.id;
        let mut next_seq = match store.head(id) {
            Ok(head) => head.next_seq,
            Err(_) => {
                store
                    .create_session(&header)
                    .unwrap_or_else(|e| fail(format!("create {id}: {e}")));
                0
            }
        };
        let mut start = 0u64;
        while let Some(batch) = generator.next_batch() {
            let len = batch.len() as u64;
            if start >= next_seq {
                let ack = store
                    .append(id, next_seq, batch)
                    .unwrap_or_else(|e| fail(format!("append {id}@{next_seq}: {e}")));
                next_seq = ack.next_seq;
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "ack {id} {next_seq}");
                let _ = out.flush();
            }
            start += len;
        }
    }
}

/// Exports every session, over and over, to new files.
fn exporter(store: &Store, dir: &Path) {
    let _ = std::fs::create_dir_all(dir);
    for n in 0u64.. {
        let sessions = store.sessions().unwrap_or_default();
        for (idx, id) in sessions.iter().enumerate() {
            let suffix = if (n + idx as u64).is_multiple_of(2) {
                "jsonl"
            } else {
                "jsonl.zstd"
            };
            let file = dir.join(format!("{}-{n}-{idx}.v3.{suffix}", std::process::id()));
            if let Err(e) = export_session(store, id, &ExportTarget::File(file)) {
                fail(format!("export {id}: {e}"));
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

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
}

/// What the parent knows: per session, the generator's batches and the acknowledged head.
#[derive(Default)]
struct Ledger {
    scripts: HashMap<String, (Vec<Event>, Vec<u64>)>,
    acked: HashMap<String, u64>,
}

impl Ledger {
    fn new() -> Ledger {
        let mut ledger = Ledger::default();
        for slot in 0..SLOTS {
            ledger.add_round(slot, 0);
        }
        ledger
    }

    fn add_round(&mut self, slot: u64, round: u64) {
        let script = script(slot, round);
        let mut boundaries = vec![0];
        let mut events = Vec::new();
        for batch in script.batches {
            events.extend(batch);
            boundaries.push(events.len() as u64);
        }
        self.scripts
            .insert(script.header.id.clone(), (events, boundaries));
    }

    /// Makes sure the scripts of every round up to the stored sessions' are known.
    fn cover(&mut self, sessions: &[String]) {
        for slot in 0..SLOTS {
            let mut round = 0;
            loop {
                let id = session_gen(slot, round).header().id;
                if !self.scripts.contains_key(&id) {
                    self.add_round(slot, round);
                }
                if !sessions.contains(&id) {
                    break;
                }
                round += 1;
            }
        }
    }
}

#[derive(Default)]
struct Tally {
    kills: u64,
    acked_batches: u64,
    checked_events: u64,
    exports_checked: u64,
    temp_exports_left: u64,
}

/// Reopens and checks everything; returns an error naming the first broken promise.
fn check(path: &Path, ledger: &mut Ledger, tally: &mut Tally) -> Result<(), String> {
    let store = Store::open(path).map_err(|e| format!("reopen: {e}"))?;
    let sessions = store.sessions().map_err(|e| e.to_string())?;
    ledger.cover(&sessions);
    for (id, acked) in &ledger.acked {
        if *acked > 0 && !sessions.contains(id) {
            return Err(format!("{id}: an acknowledged session vanished"));
        }
    }
    let mut heads = HashMap::new();
    for id in &sessions {
        let (events, boundaries) = ledger
            .scripts
            .get(id)
            .ok_or_else(|| format!("{id}: a session nobody created"))?;
        let head = store.head(id).map_err(|e| e.to_string())?.next_seq;
        let acked = ledger.acked.get(id).copied().unwrap_or(0);
        if head < acked {
            return Err(format!("{id}: head {head} below the acknowledged {acked}"));
        }
        if !boundaries.contains(&head) {
            return Err(format!("{id}: head {head} splits a batch"));
        }
        let stored = store.read_range(id, 0, head).map_err(|e| e.to_string())?;
        if stored[..] != events[..head as usize] {
            return Err(format!("{id}: stored events differ from the acknowledged"));
        }
        tally.checked_events += head;
        heads.insert(id.clone(), head);
    }
    let reports = store.verify(&[]).map_err(|e| e.to_string())?;
    if let Some(bad) = reports.iter().find(|r| !r.ok()) {
        return Err(format!("verify: {bad:?}"));
    }
    drop(store);
    check_exports(&path.with_file_name("exports"), ledger, tally)
}

/// Every export under its final name is complete and equal to the generator's prefix; then
/// the directory is emptied (temporary files left by a kill are counted).
fn check_exports(dir: &Path, ledger: &Ledger, tally: &mut Tally) -> Result<(), String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let file = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            tally.temp_exports_left += 1;
        } else {
            let mut reader = open_log(&file, ReadOptions::default())
                .map_err(|e| format!("{name}: a published export does not open: {e}"))?;
            let id = reader.header().id.clone();
            let mut exported = Vec::new();
            while let Some(event) = reader.next_event() {
                exported.push(
                    event.map_err(|e| format!("{name}: a published export does not read: {e}"))?,
                );
            }
            let (events, _) = ledger
                .scripts
                .get(&id)
                .ok_or_else(|| format!("{name}: unknown session"))?;
            if exported.len() > events.len() || exported[..] != events[..exported.len()] {
                return Err(format!("{name}: exported events differ"));
            }
            tally.exports_checked += 1;
        }
        std::fs::remove_file(&file).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn parse_args() -> Result<(Option<PathBuf>, u64, u64), String> {
    let mut args = std::env::args().skip(1);
    let (mut child, mut kills, mut seed) = (None, 100, 1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--child" => child = Some(PathBuf::from(value()?)),
            "--kills" => kills = value()?.parse().map_err(|e| format!("--kills: {e}"))?,
            "--seed" => seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            other => {
                return Err(format!(
                    "unknown argument {other}; usage: crash --kills N [--seed S]"
                ))
            }
        }
    }
    Ok((child, kills, seed))
}

fn main() -> ExitCode {
    let (child_store, kills, seed) = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("crash: {message}");
            return ExitCode::from(1);
        }
    };
    if let Some(path) = child_store {
        child(&path);
        return ExitCode::SUCCESS;
    }
    match soak(kills, seed) {
        Ok(tally) => {
            println!(
                "crash: {} kills survived; {} acknowledged batches, {} events checked, {} exports \
                 checked, {} temporary exports left by kills (never under the final name)",
                tally.kills,
                tally.acked_batches,
                tally.checked_events,
                tally.exports_checked,
                tally.temp_exports_left
            );
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("crash: FAILED: {message}");
            ExitCode::from(1)
        }
    }
}

fn soak(kills: u64, seed: u64) -> Result<Tally, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let path = dir.path().join("crash.redb");
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut rng = Rng(seed);
    let mut ledger = Ledger::new();
    let mut tally = Tally::default();
    let started = Instant::now();
    for iteration in 0..kills {
        let mut child = Command::new(&exe)
            .arg("--child")
            .arg(&path)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        let delay = 5_000 + rng.next() % KILL_DELAY_MICROS_MAX;
        std::thread::sleep(Duration::from_micros(delay));
        // SIGKILL.
        child.kill().map_err(|e| e.to_string())?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let mut parts = line.split(' ');
            if let (Some("ack"), Some(id), Some(Ok(next_seq))) = (
                parts.next(),
                parts.next(),
                parts.next().map(str::parse::<u64>),
            ) {
                let acked = ledger.acked.entry(id.to_owned()).or_insert(0);
                *acked = (*acked).max(next_seq);
                tally.acked_batches += 1;
            }
        }
        let output = child.wait_with_output().map_err(|e| e.to_string())?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        if stderr.contains("crash:") {
            return Err(format!("iteration {iteration}: the child failed: {stderr}"));
        }
        check(&path, &mut ledger, &mut tally).map_err(|e| format!("iteration {iteration}: {e}"))?;
        tally.kills += 1;
    }
    if tally.acked_batches == 0 {
        return Err("the children made no progress".to_owned());
    }
    eprintln!("crash: {:.1?}", started.elapsed());
    Ok(tally)
}

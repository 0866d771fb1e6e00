//! The mutation test (issue #19): one structural change to a valid log is refused by `check`,
//! by every store backend's append and by `migrate` with the same rule, or by none of them.
//!
//! Goal: every entry point enforces the same rules, from the one place they live (`format`),
//! so a log that one of them refuses is refused by the others at the same seq with the same
//! rule and text; the unmutated logs pass all of them.
//! Method: valid V2 and V3 logs (dsh's accepted V2/V3 recordings, read in place and
//! materialized as plain logs, and `gen` output of several seeds and sizes) each give a fixed
//! number of mutants, drawn with a seeded generator: drop, swap with the next, duplicate or
//! move one row, or shift one integer member (turn, step, retry, a seq reference) by one; seqs
//! are then renumbered densely. Each mutant is written to a file and checked with
//! `check_file`; a V3 mutant is appended as one batch to every backend (`backends`: redb, and
//! PostgreSQL when `SESSIONLOG_TEST_POSTGRES` is set); a V2 mutant is migrated (`migrate_file`,
//! dry run, with the proof). The counts (mutants, refused, by rule) are printed; run with
//! `cargo test -p sessionlog-engine --test it mutants -- --nocapture` to see them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use sessionlog_format::gen::{GenOptions, Generator};
use sessionlog_format::row::{decode_row, Decoded, RowContext};
use sessionlog_format::{
    Compression, Event, FormatVersion, LogWriter, ReadOptions, SessionHeader, SnapshotMode,
};
use sessionlog_store::check::{check_file, CheckError, CheckOptions};
use sessionlog_store::embedded::{AppendRequest, StoreError};
use sessionlog_store::migrate::{migrate_file, MigrateOptions, Outcome};

use crate::harness::{backends, unique_id, Backend};

/// Mutants drawn from each source log; with the sources below, well over 1,000 in all.
const MUTANTS_PER_LOG: usize = 75;
/// The generated sources: (version, events, seed).
const GENERATED: &[(FormatVersion, u64, u64)] = &[
    (FormatVersion::V3, 120, 1),
    (FormatVersion::V3, 260, 2),
    (FormatVersion::V3, 400, 3),
    (FormatVersion::V2, 120, 4),
    (FormatVersion::V2, 260, 5),
    (FormatVersion::V2, 400, 6),
];

/// A plain (not normalized) log as JSON: the header line's object and one object per row.
#[derive(Debug, Clone)]
struct Plain {
    name: String,
    version: FormatVersion,
    header: Value,
    rows: Vec<Value>,
}

/// One structural change to a log's rows.
#[derive(Debug, Clone)]
enum Mutation {
    Drop(usize),
    SwapNext(usize),
    Duplicate(usize),
    Move {
        from: usize,
        to: usize,
    },
    /// Add `delta` to the integer at a JSON pointer inside row `row`.
    Shift {
        row: usize,
        pointer: String,
        delta: i64,
    },
}

/// splitmix64: the mutants are the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// `../shared/fixtures/dsh` beside the workspace, or the folder `SESSIONLOG_DSH_FIXTURES`
/// names (a git worktree elsewhere than beside `shared/` has no such neighbour).
fn fixtures_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("SESSIONLOG_DSH_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/dsh"),
    };
    if dir.join("MANIFEST.tsv").is_file() {
        return Some(dir);
    }
    eprintln!(
        "mutants: skipping the corpus: {} is missing (the dsh fixtures live beside the checkout)",
        dir.display()
    );
    None
}

/// dsh's accepted V2 and V3 recordings, materialized as plain logs (see [`materialize`]).
fn corpus_sources() -> Vec<Plain> {
    let Some(dir) = fixtures_dir() else {
        return Vec::new();
    };
    let manifest = std::fs::read_to_string(dir.join("MANIFEST.tsv")).unwrap();
    let mut out = Vec::new();
    for line in manifest.lines().skip(1) {
        let cells: Vec<&str> = line.split('\t').collect();
        let version = match cells.get(1) {
            Some(&"2") => FormatVersion::V2,
            Some(&"3") => FormatVersion::V3,
            _ => continue,
        };
        if cells.get(2) != Some(&"accept") {
            continue;
        }
        let text = std::fs::read_to_string(dir.join(cells[0])).unwrap();
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let header: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
        let rows = lines.map(|l| serde_json::from_str(l).unwrap()).collect();
        out.push(materialize(cells[0], version, header, rows));
    }
    out
}

/// A normalized recording as the plain log it stands for: the session id placeholder becomes
/// a real id everywhere it appears (delivery markers and feedback name the session), `cwd` an
/// absolute path, a `{{tools}}` placeholder no tools, and every row gets its seq (its
/// position) and time 0. Other placeholders are strings where strings are expected.
fn materialize(name: &str, version: FormatVersion, mut header: Value, rows: Vec<Value>) -> Plain {
    let old_id = header["id"].as_str().unwrap().to_owned();
    let new_id = format!("corpus-{}", name.len());
    replace_string(&mut header, &old_id, &new_id);
    header["cwd"] = Value::from("/work/corpus");
    let rows = rows
        .into_iter()
        .enumerate()
        .map(|(seq, mut row)| {
            replace_string(&mut row, &old_id, &new_id);
            if let Some(header) = row
                .pointer_mut("/data/header")
                .and_then(Value::as_object_mut)
            {
                if header.get("tools").is_some_and(Value::is_string) {
                    header.remove("tools");
                }
            }
            let object = row.as_object_mut().unwrap();
            let mut out = Map::new();
            out.insert("type".to_owned(), object.remove("type").unwrap());
            out.insert("seq".to_owned(), Value::from(seq as u64));
            out.insert(
                "time".to_owned(),
                object.remove("time").unwrap_or(Value::from(0)),
            );
            out.extend(std::mem::take(object));
            Value::Object(out)
        })
        .collect();
    Plain {
        name: name.to_owned(),
        version,
        header,
        rows,
    }
}

fn replace_string(value: &mut Value, from: &str, to: &str) {
    match value {
        Value::String(s) if s == from => *s = to.to_owned(),
        Value::Array(items) => items.iter_mut().for_each(|v| replace_string(v, from, to)),
        Value::Object(members) => members
            .values_mut()
            .for_each(|v| replace_string(v, from, to)),
        _ => {}
    }
}

/// A generated log, written by `LogWriter` and read back as JSON.
fn generated_source(version: FormatVersion, events: u64, seed: u64) -> Plain {
    let mut generator = Generator::for_version(GenOptions { events, seed }, version).unwrap();
    let header = generator.header();
    let mut writer = LogWriter::new(Vec::new(), &header, Compression::None).unwrap();
    while let Some(batch) = generator.next_batch() {
        writer.append_batch(&batch).unwrap();
    }
    let bytes = writer.into_inner().unwrap();
    let text = String::from_utf8(bytes).unwrap();
    let mut lines = text.lines();
    let header = serde_json::from_str(lines.next().unwrap()).unwrap();
    Plain {
        name: format!("gen {version} events={events} seed={seed}"),
        version,
        header,
        rows: lines.map(|l| serde_json::from_str(l).unwrap()).collect(),
    }
}

/// Every integer leaf under the members that hold turns, steps, retries and seq references,
/// as JSON pointers into the row.
fn integer_pointers(row: &Value) -> Vec<String> {
    const MEMBERS: &[&str] = &[
        "/data/turn",
        "/data/step",
        "/data/retry",
        "/data/sourceEventSeq",
        "/data/throughSeq",
        "/data/messageSeqs",
        "/data/shadowedRange",
        "/data/shadowedSeqs",
        "/data/targets",
        "/sourceEventSeqs",
        "/surfaceOp",
    ];
    let mut out = Vec::new();
    for member in MEMBERS {
        if let Some(value) = row.pointer(member) {
            leaves(value, member.to_string(), &mut out);
        }
    }
    out
}

fn leaves(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Number(n) if n.is_u64() => out.push(at),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                leaves(item, format!("{at}/{i}"), out);
            }
        }
        Value::Object(members) => {
            for (key, item) in members {
                leaves(item, format!("{at}/{key}"), out);
            }
        }
        _ => {}
    }
}

fn draw(rng: &mut Rng, rows: &[Value]) -> Mutation {
    let n = rows.len();
    let row = rng.below(n);
    match rng.below(5) {
        0 => Mutation::Drop(row),
        1 if n > 1 => Mutation::SwapNext(row.min(n - 2)),
        2 => Mutation::Duplicate(row),
        3 if n > 1 => Mutation::Move {
            from: row,
            to: rng.below(n),
        },
        _ => {
            // The row to shift: the drawn one, or the next that has an integer member.
            for k in 0..n {
                let candidate = (row + k) % n;
                let pointers = integer_pointers(&rows[candidate]);
                if !pointers.is_empty() {
                    let pointer = pointers[rng.below(pointers.len())].clone();
                    let current = rows[candidate].pointer(&pointer).unwrap().as_u64().unwrap();
                    let delta = if current == 0 || rng.below(2) == 0 {
                        1
                    } else {
                        -1
                    };
                    return Mutation::Shift {
                        row: candidate,
                        pointer,
                        delta,
                    };
                }
            }
            Mutation::Drop(row)
        }
    }
}

/// The rows after `mutation`, seqs renumbered densely.
fn apply(rows: &[Value], mutation: &Mutation) -> Vec<Value> {
    let mut out = rows.to_vec();
    match mutation {
        Mutation::Drop(i) => {
            out.remove(*i);
        }
        Mutation::SwapNext(i) => out.swap(*i, i + 1),
        Mutation::Duplicate(i) => out.insert(i + 1, out[*i].clone()),
        Mutation::Move { from, to } => {
            let row = out.remove(*from);
            out.insert((*to).min(out.len()), row);
        }
        Mutation::Shift {
            row,
            pointer,
            delta,
        } => {
            let slot = out[*row].pointer_mut(pointer).unwrap();
            let shifted = slot.as_u64().unwrap().checked_add_signed(*delta).unwrap();
            *slot = Value::from(shifted);
        }
    }
    for (seq, row) in out.iter_mut().enumerate() {
        row["seq"] = Value::from(seq as u64);
    }
    out
}

fn write_log(path: &Path, header: &Value, rows: &[Value]) {
    let mut text = header.to_string();
    text.push('\n');
    for row in rows {
        text.push_str(&row.to_string());
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

/// What `check` said of a file: `None` when it passed.
fn check(path: &Path) -> Option<CheckError> {
    let options = CheckOptions {
        snapshot: SnapshotMode::Off,
    };
    let report = check_file(path, options);
    assert_eq!(report.ok, report.errors.is_empty(), "{}", path.display());
    report.errors.into_iter().next()
}

/// The typed events of `rows` (stateless decoding only, no admission), for an append.
fn decode(rows: &[Value], version: FormatVersion) -> Option<Vec<Event>> {
    let ctx = RowContext {
        version,
        snapshot: false,
        skim: false,
    };
    let mut events = Vec::with_capacity(rows.len());
    for (seq, row) in rows.iter().enumerate() {
        match decode_row(row.to_string().as_bytes(), ctx, seq as u64) {
            Ok(Decoded::One(event)) => events.push(*event),
            Ok(Decoded::Packed(_)) => panic!("a V2/V3 row is one event"),
            Err(_) => return None,
        }
    }
    Some(events)
}

/// The store's verdict on `events` appended as one batch to a fresh session: `None` when
/// accepted, else the refused seq, rule name and message.
fn append(
    backend: &Backend,
    header: &SessionHeader,
    events: Vec<Event>,
) -> Option<(u64, String, String)> {
    let mut header = header.clone();
    let old_id = std::mem::replace(&mut header.id, unique_id("mutant"));
    backend.store.create_session(&header, false).unwrap();
    // The session is renamed so that backends can be shared between runs; a delivery marker
    // that named the old id names the new one, as the file's marker named the file's id.
    let mut events = events;
    for event in &mut events {
        if let sessionlog_format::EventData::Other(Value::Object(data)) = &mut event.data {
            if event.kind.as_str().ends_with("/delivery-accepted")
                && data.get("sessionId").and_then(Value::as_str) == Some(old_id.as_str())
            {
                data.insert("sessionId".to_owned(), Value::String(header.id.clone()));
            }
        }
    }
    let request = AppendRequest {
        session: header.id.clone(),
        expected_next_seq: 0,
        events,
    };
    match backend.store.append(request) {
        Ok(_) => None,
        Err(StoreError::Rejected { seq, violation, .. }) => {
            Some((seq, violation.rule.name().to_owned(), violation.message))
        }
        Err(other) => panic!("{}: the append failed: {other}", backend.name),
    }
}

/// `migrate`'s verdict on a V2 file (dry run, with the proof): `None` when converted.
fn migrate(path: &Path) -> Option<(Option<u64>, String)> {
    let options = MigrateOptions {
        dry_run: true,
        snapshot: SnapshotMode::Off,
        ..MigrateOptions::default()
    };
    let outcome = migrate_file(path, Path::new("session.v2.jsonl"), &options);
    match outcome.outcome {
        Outcome::Converted { .. } => None,
        Outcome::Refused { line, reason } => Some((line, reason)),
        Outcome::Current => panic!("{}: a V2 source is not current", path.display()),
    }
}

#[derive(Default)]
struct Tally {
    mutants: usize,
    refused: usize,
    by_rule: BTreeMap<String, usize>,
    appended: usize,
    migrated: usize,
    /// V2 mutants that `check` accepts and the V2 -> V3 edge refuses (its own audit).
    refused_by_migration_only: usize,
    /// V2 mutants that the V2 -> V3 edge refuses at an earlier line than `check` does.
    refused_earlier_by_migration: usize,
    /// Mutants whose refusal comes after the last event (no seq to compare at).
    refused_at_end: usize,
}

// Goal and method: see the module comment.
#[test]
fn mutants_are_refused_alike_everywhere() {
    let mut sources = corpus_sources();
    let from_corpus = !sources.is_empty();
    sources.extend(
        GENERATED
            .iter()
            .map(|&(version, events, seed)| generated_source(version, events, seed)),
    );
    let backends = backends("mutants_are_refused_alike_everywhere");
    let dir = tempfile::tempdir().unwrap();
    let mut tally = Tally::default();
    for (source_idx, source) in sources.iter().enumerate() {
        let header_ok = dir.path().join(format!("s{source_idx}.jsonl"));
        write_log(&header_ok, &source.header, &source.rows);
        let unmutated = check(&header_ok);
        assert!(unmutated.is_none(), "{}: {unmutated:?}", source.name);
        let options = ReadOptions {
            snapshot: SnapshotMode::Off,
            ..ReadOptions::default()
        };
        let log =
            sessionlog_format::read_log(std::fs::File::open(&header_ok).unwrap(), options).unwrap();
        if source.version == FormatVersion::V2 {
            assert_eq!(migrate(&header_ok), None, "{}", source.name);
        } else {
            let events = decode(&source.rows, source.version).unwrap();
            for backend in &backends {
                let verdict = append(backend, &log.header, events.clone());
                assert_eq!(verdict, None, "{} on {}", source.name, backend.name);
            }
        }
        let mut rng = Rng(0x6d75_7461_6e74 ^ source_idx as u64);
        let mut drawn = 0;
        while drawn < MUTANTS_PER_LOG {
            let mutation = draw(&mut rng, &source.rows);
            let rows = apply(&source.rows, &mutation);
            if rows == source.rows {
                continue;
            }
            drawn += 1;
            tally.mutants += 1;
            let what = format!("{} {mutation:?}", source.name);
            let path = dir.path().join(format!("m{source_idx}-{drawn}.jsonl"));
            write_log(&path, &source.header, &rows);
            let checked = check(&path);
            if let Some(error) = &checked {
                tally.refused += 1;
                *tally.by_rule.entry(error.rule.clone()).or_default() += 1;
                if error.seq.is_none() {
                    tally.refused_at_end += 1;
                }
            }
            if source.version == FormatVersion::V2 {
                let migrated = migrate(&path);
                tally.migrated += 1;
                match (&checked, &migrated) {
                    // The migration streams: its edge may refuse an earlier event than the one
                    // the reader refuses, and then that refusal comes first.
                    (Some(error), Some((Some(line), _))) if *line < error.line => {
                        tally.refused_earlier_by_migration += 1;
                    }
                    (Some(error), Some((line, reason))) => {
                        assert_eq!(
                            (Some(error.line), &error.message),
                            (*line, reason),
                            "{what}: migrate refuses at another place or for another reason"
                        );
                    }
                    (Some(error), None) => {
                        panic!("{what}: check refuses ({error:?}), migrate converts")
                    }
                    (None, Some(_)) => tally.refused_by_migration_only += 1,
                    (None, None) => {}
                }
                continue;
            }
            let Some(events) = decode(&rows, source.version) else {
                // A row that does not even decode never reaches an append as an event; the
                // service refuses it while parsing the request.
                assert!(
                    checked.is_some(),
                    "{what}: check accepts a row that does not decode"
                );
                continue;
            };
            for backend in &backends {
                let verdict = append(backend, &log.header, events.clone());
                tally.appended += 1;
                let expected = checked.as_ref().and_then(|error| {
                    let seq = error.seq?;
                    Some((seq, error.rule.clone(), error.message.clone()))
                });
                match &checked {
                    Some(error) if error.seq.is_none() => {}
                    _ => assert_eq!(
                        verdict, expected,
                        "{what}: {} and check disagree",
                        backend.name
                    ),
                }
            }
        }
    }
    println!(
        "mutants: {} over {} logs; refused by check: {}; accepted: {}; appended to a backend: \
         {}; migrated (V2): {}; accepted by check but refused by the V2 -> V3 edge: {}; \
         refused by the edge at an earlier line than check: {}; refused after the last event: {}",
        tally.mutants,
        sources.len(),
        tally.refused,
        tally.mutants - tally.refused,
        tally.appended,
        tally.migrated,
        tally.refused_by_migration_only,
        tally.refused_earlier_by_migration,
        tally.refused_at_end,
    );
    for (rule, n) in &tally.by_rule {
        println!("mutants refused with [{rule}]: {n}");
    }
    // The generated logs alone make about 450 mutants; the corpus, where it is beside the
    // checkout, more than doubles them.
    let floor = if from_corpus { 1_000 } else { 400 };
    assert!(tally.mutants >= floor, "only {} mutants", tally.mutants);
}

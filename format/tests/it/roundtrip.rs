//! Lossless round trips: decode then encode keeps every field, on the dsh corpus and on logs
//! written by our own writer, raw and compressed.

use std::fs::File;

use pretty_assertions::assert_eq;
use serde_json::{Map, Value};
use sessionlog_format::row::encode_row;
use sessionlog_format::seq_ranges::{self, SeqItem};
use sessionlog_format::{read_log, Compression, Log, ReadOptions, SnapshotMode};

use crate::support::{fixtures_dir, manifest, sample_batches, sample_header, write_log};

/// The V0/V1 row tags that stand for several `assistant/chunk` events.
const PACKED_TAGS: [&str; 3] = ["text-chunks", "reasoning-chunks", "tool-call-chunks"];

/// The accepted fixtures, read with the default options, with their names and original bytes.
fn accepted_fixtures() -> Vec<(String, Vec<u8>, Log)> {
    let Some(dir) = fixtures_dir() else {
        return Vec::new();
    };
    let mut fixtures = Vec::new();
    for row in manifest(&dir)
        .into_iter()
        .filter(|row| row.expect == "accept")
    {
        let name = row.path.strip_prefix(&dir).unwrap().display().to_string();
        let bytes = std::fs::read(&row.path).expect("fixture is readable");
        let file = File::open(&row.path).expect("fixture is readable");
        let log = read_log(file, ReadOptions::default())
            .unwrap_or_else(|e| panic!("{name}: an accepted fixture fails to read: {e}"));
        fixtures.push((name, bytes, log));
    }
    assert!(
        fixtures.len() >= 20,
        "the corpus has {} accepted files",
        fixtures.len()
    );
    fixtures
}

/// The log re-encoded by our writer's row codec: the header, then one row per event.
fn encode_log(log: &Log) -> Vec<u8> {
    let mut out = serde_json::to_vec(&log.header).expect("a header always serializes");
    out.push(b'\n');
    for event in &log.events {
        encode_row(event, log.version, &mut out);
        out.push(b'\n');
    }
    out
}

/// Reads `bytes` in the snapshot mode `log` was read in: our rows always carry `seq`, so
/// auto-detection by the first row would not find a normalized recording again.
fn reread(bytes: &[u8], log: &Log) -> Log {
    let snapshot = if log.snapshot {
        SnapshotMode::On
    } else {
        SnapshotMode::Off
    };
    read_log(
        bytes,
        ReadOptions {
            snapshot,
            ..ReadOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("the re-encoded log fails to read: {e}"))
}

// Goal: every accepted dsh recording survives decode -> encode -> decode unchanged, and our
// encoding is a fixed point.
// Method: read each accepted fixture, re-encode header and events with `encode_row`, read the
// output back and compare the whole `Log`; then encode the second reading and compare bytes.
#[test]
fn fixtures_round_trip_through_our_encoding() {
    for (name, _, log) in accepted_fixtures() {
        let encoded = encode_log(&log);
        let again = reread(&encoded, &log);
        assert_eq!(again, log, "{name}");
        let encoded_again = encode_log(&again);
        assert_eq!(
            String::from_utf8(encoded_again).unwrap(),
            String::from_utf8(encoded).unwrap(),
            "{name}: encode(decode(encode(x))) differs from encode(x)"
        );
    }
}

/// A row parsed for comparison: `sourceEventSeqs` expanded, and the `seq` and `time` that a
/// normalized recording omits filled in as the reader defines them (position and 0).
fn comparable_row(line: &[u8], seq: u64) -> Map<String, Value> {
    let Ok(Value::Object(mut row)) = serde_json::from_slice(line) else {
        panic!("row {seq} is not a JSON object");
    };
    if let Some(encoded) = row.get_mut("sourceEventSeqs") {
        let items: Vec<SeqItem> =
            serde_json::from_value(encoded.clone()).expect("sourceEventSeqs items decode");
        let expanded = seq_ranges::expand(&items, seq).expect("sourceEventSeqs expand");
        *encoded = Value::from(expanded);
    }
    row.entry("seq").or_insert(Value::from(seq));
    row.entry("time").or_insert(Value::from(0));
    row
}

/// How many events a packed row stands for, or `None` for an ordinary row.
fn packed_len(line: &[u8]) -> Option<u64> {
    let row: Value = serde_json::from_slice(line).expect("an accepted row is JSON");
    let tag = row["type"].as_str()?;
    if !PACKED_TAGS.contains(&tag) {
        return None;
    }
    let payload = row["data"].get("texts").or(row["data"].get("args"));
    Some(
        payload
            .and_then(Value::as_array)
            .expect("a packed row has a payload")
            .len() as u64,
    )
}

// Goal: decode then encode keeps every field of every dsh row: `data` (unknown members
// included), `surfaceOp`, `sourceEventSeqs`, `ignorable`, `type`, `seq` and `time`.
// Method: pair each original row with our encoding of the same event and compare the parsed
// rows as JSON values (key order carries no meaning, spec 3.4). Provenance is compared
// expanded, since dsh snapshots write it expanded and we write ranges; packed V0/V1 rows are
// skipped because they expand to several events; a normalized row's absent `seq` and `time`
// read as its position and 0.
#[test]
fn fixtures_keep_every_field() {
    for (name, bytes, log) in accepted_fixtures() {
        let mut original_lines = bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty());
        let header = original_lines.next().expect("a fixture has a header line");
        let original_header: Value = serde_json::from_slice(header).unwrap();
        assert_eq!(
            serde_json::to_value(&log.header).unwrap(),
            original_header,
            "{name} header"
        );
        let mut event_idx = 0;
        let mut n_compared = 0;
        for line in original_lines {
            if let Some(n_events) = packed_len(line) {
                event_idx += n_events as usize;
                continue;
            }
            let event = &log.events[event_idx];
            let mut ours = Vec::new();
            encode_row(event, log.version, &mut ours);
            let expected = comparable_row(line, event.seq);
            let actual = comparable_row(&ours, event.seq);
            assert_eq!(actual, expected, "{name}: seq {}", event.seq);
            event_idx += 1;
            n_compared += 1;
        }
        assert_eq!(
            event_idx,
            log.events.len(),
            "{name}: every event is accounted for"
        );
        assert!(n_compared > 0, "{name}: no row was compared");
    }
}

// Goal: a `.jsonl.zstd` log written in several batches reads back as exactly what was written,
// and is reported as compressed.
// Method: write the sample session with `Compression::Zstd`, one frame per batch, read it
// with the default options and compare the whole `Log` with the expected value; the same
// session written raw must read to the same log except for `compressed`.
#[test]
fn compressed_log_round_trips() {
    let header = sample_header();
    let batches = sample_batches();
    let events: Vec<_> = batches.iter().flatten().cloned().collect();
    let expected = Log {
        header: header.clone(),
        version: sessionlog_format::FormatVersion::V3,
        snapshot: false,
        compressed: true,
        events,
        withheld: None,
    };
    let zstd = write_log(&header, &batches, Compression::Zstd);
    assert_eq!(zstd.ends.len(), batches.len() + 1);
    let log = read_log(zstd.bytes.as_slice(), ReadOptions::default()).unwrap();
    assert_eq!(log, expected);
    assert!(log.compressed);

    let raw = write_log(&header, &batches, Compression::None);
    let log = read_log(raw.bytes.as_slice(), ReadOptions::default()).unwrap();
    assert_eq!(
        log,
        Log {
            compressed: false,
            ..expected
        }
    );
    assert_eq!(
        String::from_utf8(raw.bytes).unwrap(),
        String::from_utf8(encode_log(&log)).unwrap(),
        "the writer's rows are encode_row's rows"
    );
}

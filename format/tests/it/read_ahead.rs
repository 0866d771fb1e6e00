//! Reading ahead (`LogReader::read_ahead_in_parallel`, issue #23) yields exactly what the
//! line-at-a-time reader yields: the same events, the same faults with the same line, offset,
//! seq, rule and text, the same line after each event, and the same withheld fault.

use pretty_assertions::assert_eq;
use proptest::prelude::*;
use proptest::test_runner::Config;
use sessionlog_format::gen::{GenOptions, Generator};
use sessionlog_format::{
    Compression, FormatVersion, LogReader, LogWriter, ReadOptions, Recovery, SnapshotMode,
};

use crate::support::{fixtures_dir, manifest};

/// Everything a reader yields, in order: each event or error (as `Debug`) with the reader's
/// line after it, then the withheld fault; or the error that refused the header.
fn transcript(bytes: &[u8], options: ReadOptions, ahead: bool) -> Vec<String> {
    let mut reader = match LogReader::new(bytes, options) {
        Ok(reader) => reader,
        Err(error) => return vec![format!("open: {error:?}")],
    };
    if ahead {
        reader.read_ahead_in_parallel();
    }
    let mut out = Vec::new();
    while let Some(next) = reader.next_event() {
        out.push(format!("{} {next:?}", reader.line()));
    }
    out.push(format!("withheld {:?}", reader.withheld()));
    out
}

/// Compares the two readers on `bytes` under both recovery policies.
fn assert_same(bytes: &[u8], what: &str) {
    for recovery in [Recovery::Strict, Recovery::Recoverable] {
        let options = ReadOptions {
            recovery,
            snapshot: SnapshotMode::Auto,
        };
        let plain = transcript(bytes, options, false);
        let ahead = transcript(bytes, options, true);
        assert!(plain == ahead, "{what} ({recovery:?}): the readers differ");
    }
}

/// A generated log of `version` with `n_events`, written through `LogWriter`.
fn generated(version: FormatVersion, n_events: u64, seed: u64) -> Vec<u8> {
    let options = GenOptions {
        events: n_events,
        seed,
    };
    let mut generator = Generator::for_version(options, version).unwrap();
    let mut writer = LogWriter::new(Vec::new(), &generator.header(), Compression::None).unwrap();
    while let Some(batch) = generator.next_batch() {
        writer.append_batch(&batch).unwrap();
    }
    writer.into_inner().unwrap()
}

// Goal: on intact logs of every generated version, several batches long (a batch is 256 KiB),
// the two readers agree event for event.
#[test]
fn read_ahead_agrees_on_generated_logs() {
    for version in [
        FormatVersion::V0,
        FormatVersion::V2,
        FormatVersion::V3,
        FormatVersion::V4,
    ] {
        let bytes = generated(version, 1500, 3);
        assert!(bytes.len() > 1 << 20, "{version}: {} bytes", bytes.len());
        let options = ReadOptions::default();
        let plain = transcript(&bytes, options, false);
        assert!(plain.len() > 1500, "{version}: {}", plain.len());
        assert_eq!(plain, transcript(&bytes, options, true), "{version}");
    }
}

// Goal: on every recording of the dsh corpus, accepted or refused, the two readers agree.
#[test]
fn read_ahead_agrees_on_the_corpus() {
    let Some(dir) = fixtures_dir() else { return };
    let rows = manifest(&dir);
    assert!(rows.len() >= 20, "the corpus has {} rows", rows.len());
    for row in &rows {
        let bytes = std::fs::read(&row.path).expect("fixture is readable");
        assert_same(&bytes, &row.path.display().to_string());
    }
}

/// One damage to a log: where (a fraction of its length) and what.
#[derive(Debug, Clone)]
enum Damage {
    /// Overwrite one byte.
    Byte(f64, u8),
    /// Cut the log short.
    Truncate(f64),
    /// Insert a line (possibly invalid JSON or invalid UTF-8) at the line boundary after.
    Line(f64, Vec<u8>),
    /// Drop the line that holds the position.
    Drop(f64),
}

fn damage() -> impl Strategy<Value = Damage> {
    let at = 0.0f64..1.0;
    prop_oneof![
        (at.clone(), any::<u8>()).prop_map(|(at, b)| Damage::Byte(at, b)),
        at.clone().prop_map(Damage::Truncate),
        (
            at.clone(),
            prop_oneof![
                Just(b"{}".to_vec()),
                Just(b"not json".to_vec()),
                Just(vec![b'"', 0xff, b'"']),
                Just(br#"{"type":"turn/end","seq":1,"time":1,"data":{"turn":1}}"#.to_vec()),
                proptest::collection::vec(any::<u8>(), 0..16),
            ]
        )
            .prop_map(|(at, line)| Damage::Line(at, line)),
        at.prop_map(Damage::Drop),
    ]
}

fn apply(bytes: &mut Vec<u8>, damage: &Damage) {
    let position = |at: f64, len: usize| ((len as f64 * at) as usize).min(len.saturating_sub(1));
    match damage {
        Damage::Byte(at, b) => {
            let idx = position(*at, bytes.len());
            bytes[idx] = *b;
        }
        Damage::Truncate(at) => bytes.truncate(position(*at, bytes.len())),
        Damage::Line(at, line) => {
            let idx = position(*at, bytes.len());
            let end = memchr_at(bytes, idx).map_or(bytes.len(), |n| n + 1);
            let mut inserted = line.clone();
            inserted.push(b'\n');
            bytes.splice(end..end, inserted);
        }
        Damage::Drop(at) => {
            let idx = position(*at, bytes.len());
            let start = bytes[..idx]
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |n| n + 1);
            let end = memchr_at(bytes, idx).map_or(bytes.len(), |n| n + 1);
            bytes.drain(start..end);
        }
    }
}

fn memchr_at(bytes: &[u8], from: usize) -> Option<usize> {
    bytes[from..]
        .iter()
        .position(|b| *b == b'\n')
        .map(|n| from + n)
}

proptest! {
    #![proptest_config(Config { cases: 48, failure_persistence: None, ..Config::default() })]

    // Goal: on damaged logs (bytes overwritten, lines inserted or dropped, tails cut), under
    // the strict and the recoverable policy, the two readers agree.
    #[test]
    fn read_ahead_agrees_on_damaged_logs(
        v4 in any::<bool>(),
        damages in proptest::collection::vec(damage(), 1..4),
    ) {
        let version = if v4 { FormatVersion::V4 } else { FormatVersion::V3 };
        let mut bytes = generated(version, 400, 11);
        for damage in &damages {
            apply(&mut bytes, damage);
        }
        assert_same(&bytes, &format!("{version} {damages:?}"));
    }
}

//! No input crashes the reader: damaged versions of valid logs (raw and zstd, all versions'
//! shapes) and arbitrary bytes end in events or a fault, never a panic.

use proptest::prelude::*;
use sessionlog_format::gen::{GenOptions, Generator};
use sessionlog_format::{
    read_log, Compression, FormatVersion, LogWriter, ReadOptions, Recovery, SnapshotMode,
};

use crate::support::assert_staged_reads_agree;

fn generated(compression: Compression) -> Vec<u8> {
    generated_as(FormatVersion::V3, compression)
}

fn generated_as(version: FormatVersion, compression: Compression) -> Vec<u8> {
    let options = GenOptions {
        events: 300,
        seed: 3,
    };
    let mut generator = Generator::for_version(options, version).unwrap();
    let mut writer = LogWriter::new(Vec::new(), &generator.header(), compression).unwrap();
    while let Some(batch) = generator.next_batch() {
        writer.append_batch(&batch).unwrap();
    }
    writer.into_inner().unwrap()
}

#[derive(Debug, Clone)]
enum Damage {
    Flip(usize, u8),
    Truncate(usize),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<usize>(), 1..=255u8).prop_map(|(at, bits)| Damage::Flip(at, bits)),
        any::<usize>().prop_map(Damage::Truncate),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(at, b)| Damage::Insert(at, b)),
        (any::<usize>(), 1..64usize).prop_map(|(at, n)| Damage::Delete(at, n)),
    ]
}

fn apply(bytes: &mut Vec<u8>, damage: &Damage) {
    let len = bytes.len().max(1);
    match damage {
        Damage::Flip(at, bits) => {
            let at = at % len;
            if at < bytes.len() {
                bytes[at] ^= bits;
            }
        }
        Damage::Truncate(at) => bytes.truncate(at % len),
        Damage::Insert(at, extra) => {
            let at = at % len;
            bytes.splice(at..at, extra.iter().copied());
        }
        Damage::Delete(at, n) => {
            let at = at % len;
            let end = (at + n).min(bytes.len());
            bytes.drain(at..end);
        }
    }
}

fn read_every_way(bytes: &[u8]) {
    for recovery in [Recovery::Strict, Recovery::Recoverable] {
        for snapshot in [SnapshotMode::Auto, SnapshotMode::On, SnapshotMode::Off] {
            // Either outcome is fine; reaching this line without a panic is the property.
            let _ = read_log(bytes, ReadOptions { recovery, snapshot });
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    // Goal: damaged raw and compressed logs never panic the reader, in any mode.
    #[test]
    fn damaged_logs_never_panic(damages in proptest::collection::vec(damage(), 1..4), zstd in any::<bool>()) {
        let mut bytes = generated(if zstd { Compression::Zstd } else { Compression::None });
        for d in &damages {
            apply(&mut bytes, d);
        }
        read_every_way(&bytes);
    }

    // Goal: the row stage on a thread of its own (`LogReader::pipelined`) and the stage that
    // decodes beside a helper thread (`LogReader::parallel`) read every log as the inline one
    // does: the same events, faults, lines, snapshot mode and withheld fault.
    // Method: damaged logs of every generated version, raw and compressed, read every way
    // (the parallel one in chunks of one line and of a few lines) under
    // every recovery policy and snapshot mode.
    #[test]
    fn staged_reads_agree_with_inline_ones(
        damages in proptest::collection::vec(damage(), 0..4),
        zstd in any::<bool>(),
        version in prop_oneof![
            Just(FormatVersion::V0),
            Just(FormatVersion::V2),
            Just(FormatVersion::V3),
            Just(FormatVersion::V4)
        ],
    ) {
        let compression = if zstd { Compression::Zstd } else { Compression::None };
        let mut bytes = generated_as(version, compression);
        for d in &damages {
            apply(&mut bytes, d);
        }
        assert_staged_reads_agree(&bytes, &format!("{version:?} {damages:?}"));
    }

    // Goal: arbitrary bytes, and arbitrary lines after a valid header, never panic the reader.
    #[test]
    fn arbitrary_input_never_panics(noise in proptest::collection::vec(any::<u8>(), 0..512)) {
        read_every_way(&noise);
        let mut with_header = br#"{"type":"session","version":0,"id":"x","createdAt":0,"delegationDepth":0}"#.to_vec();
        with_header.push(b'\n');
        with_header.extend_from_slice(&noise);
        read_every_way(&with_header);
    }
}

// Goal: the parallel stage takes any chunk size a caller gives, the largest too (one chunk for
// the whole log, its buffer growing as it fills), and reads as the inline stage does.
// Method: a generated V4 log, raw and compressed, read inline and in chunks of `usize::MAX`.
#[test]
fn a_parallel_reader_takes_any_chunk_size() {
    use crate::support::{read_trace, Stage};
    for compression in [Compression::None, Compression::Zstd] {
        let bytes = generated_as(FormatVersion::V4, compression);
        let options = ReadOptions::default();
        let inline = read_trace(&bytes, options, Stage::Inline);
        assert!(inline.len() > 300, "{}", inline.len());
        assert_eq!(
            inline,
            read_trace(&bytes, options, Stage::Parallel(usize::MAX))
        );
    }
}

// Goal: a skimming reader's events are not the whole ones (the comparison of skimmed and whole
// reads in `staged_reads_agree_with_inline_ones` is about something), and nothing but their
// packed runs differs.
// Method: a generated V4 log read whole, whole through the skimmed view, and skimmed.
#[test]
fn a_skimming_reader_keeps_everything_but_the_packed_runs() {
    use crate::support::{read_trace_as, Read, Stage};
    let bytes = generated_as(FormatVersion::V4, Compression::None);
    let options = ReadOptions::default();
    let whole = read_trace_as(&bytes, options, Stage::Inline, Read::Whole);
    let viewed = read_trace_as(&bytes, options, Stage::Inline, Read::WholeSkimmedView);
    let skimmed = read_trace_as(&bytes, options, Stage::Inline, Read::Skimmed);
    assert_eq!(whole.len(), viewed.len());
    let n_differing = whole.iter().zip(&viewed).filter(|(a, b)| a != b).count();
    assert!(n_differing > 10, "{n_differing} events carry packed runs");
    assert_eq!(viewed, skimmed);
}

// Goal: a skimmed row of text whose packed runs are stripped before it is parsed (`strip`)
// reads as the whole decode does, event for event and refusal for refusal, also where a run
// must be left to the parser: a `\u` escape (a lone surrogate among them), a
// pair of escapes that is one character, `-0` (a float to serde_json), a fraction, an exponent,
// an integer of 19 digits (an `i64`) and one past `i64::MAX`, an element of the wrong type,
// a control character, and whitespace inside the array.
// Method: every row of generated V3 and V4 logs that carries a run, with its first `texts`,
// `args` or `dt` array rewritten each of these ways; each decoded skimmed and whole (then viewed
// as skimmed), compared.
#[test]
fn skimmed_rows_with_stripped_runs_read_as_whole_ones() {
    use sessionlog_format::row::{decode_row, Decoded, RowContext};
    use sessionlog_format::skim::as_skimmed;
    let rewrites: [(&str, &str); 15] = [
        (r#""texts":["#, "\"texts\":[\"\u{1}\","),
        (r#""texts":["#, r#""texts":["plain", "#),
        (r#""texts":["#, r#""texts":["\u00e9","#),
        (r#""texts":["#, r#""texts":["\ud800","#),
        (r#""texts":["#, r#""texts":["\"\\\n\/\t","#),
        (r#""texts":["#, r#""texts":[7,"#),
        (r#""texts":["#, r#""texts":[ "a" ,"b"	,"#),
        (r#""args":["#, r#""args":["\ud83d\ude00","#),
        (r#""args":["#, r#""args":[null,"#),
        (r#""dt":["#, r#""dt":[-0,"#),
        (r#""dt":["#, r#""dt":[1.5,"#),
        (r#""dt":["#, r#""dt":[1e3,"#),
        (r#""dt":["#, r#""dt":[1234567890123456789, -17 ,"#),
        (r#""dt":["#, r#""dt":[9223372036854775808,"#),
        (r#""dt":["#, r#""dt":["1","#),
    ];
    let whole_view = |decoded: Result<Decoded, sessionlog_format::Violation>| match decoded {
        Ok(Decoded::One(event)) => Ok(vec![as_skimmed(*event)]),
        Ok(Decoded::Packed(events)) => Ok(events.into_iter().map(as_skimmed).collect()),
        Err(violation) => Err(violation.to_string()),
    };
    let (mut compared, mut refused) = (0, 0);
    for version in [FormatVersion::V3, FormatVersion::V4] {
        let bytes = generated_as(version, Compression::None);
        let text = String::from_utf8(bytes).expect("a generated log is UTF-8");
        for (index, line) in text.lines().enumerate().skip(1) {
            let expected_seq = index as u64 - 1;
            for (pattern, rewritten) in rewrites {
                if !line.contains(pattern) {
                    continue;
                }
                let row = line.replacen(pattern, rewritten, 1);
                let ctx = |skim| RowContext {
                    version,
                    snapshot: false,
                    skim,
                };
                let whole = whole_view(decode_row(row.as_bytes(), ctx(false), expected_seq));
                let skimmed = whole_view(decode_row(row.as_bytes(), ctx(true), expected_seq));
                assert_eq!(skimmed, whole, "{version:?} row {index}, {rewritten}");
                compared += 1;
                refused += usize::from(whole.is_err());
            }
        }
    }
    assert!(compared > 100, "{compared} rows compared");
    assert!(
        refused > 20 && refused < compared,
        "{refused} of {compared} refused"
    );
}

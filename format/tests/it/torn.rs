//! Torn tails and faulty rows under the two recovery policies (spec 3.2, 3.5).

use pretty_assertions::assert_eq;
use sessionlog_format::row::encode_row;
use sessionlog_format::{
    read_log, Compression, Event, Fault, FormatVersion, Log, LogReader, ReadError, ReadOptions,
    Recovery, Rule,
};

use crate::support::{sample_batches, sample_header, write_log};

const STRICT: ReadOptions = ReadOptions {
    recovery: Recovery::Strict,
    snapshot: sessionlog_format::SnapshotMode::Off,
};
const RECOVERABLE: ReadOptions = ReadOptions {
    recovery: Recovery::Recoverable,
    snapshot: sessionlog_format::SnapshotMode::Off,
};

fn sample_events() -> Vec<Event> {
    sample_batches().into_iter().flatten().collect()
}

/// The log we expect from a read that kept `events` and withheld `withheld`.
fn expected_log(events: &[Event], compressed: bool, withheld: Option<Fault>) -> Log {
    Log {
        header: sample_header(),
        version: FormatVersion::V3,
        snapshot: false,
        compressed,
        events: events.to_vec(),
        withheld,
    }
}

/// The fault of a read, which must have failed with one.
fn fault_of(outcome: Result<Log, ReadError>) -> Fault {
    match outcome {
        Err(ReadError::Fault(fault)) => fault,
        other => panic!("expected a fault, got {other:?}"),
    }
}

/// Byte offsets where each physical line starts, plus the total length.
fn line_starts(bytes: &[u8]) -> Vec<usize> {
    let mut starts = vec![0];
    starts.extend(
        bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .map(|(i, _)| i + 1),
    );
    starts
}

// Goal: a raw log cut anywhere inside its last line keeps every complete record; recoverable
// mode withholds the torn tail, strict mode refuses it naming the byte offset, and a cut on
// the line boundary is a clean shorter log in both modes.
// Method: write the sample session raw and read every prefix that ends inside the last line.
#[test]
fn raw_log_cut_inside_the_last_line() {
    let events = sample_events();
    let written = write_log(&sample_header(), &sample_batches(), Compression::None);
    let bytes = &written.bytes;
    let starts = line_starts(bytes);
    let last_start = starts[starts.len() - 2];
    assert_eq!(starts[starts.len() - 1], bytes.len());
    let kept = &events[..events.len() - 1];
    let last_line_no = starts.len() as u64 - 1;
    for cut in last_start..bytes.len() {
        let prefix = &bytes[..cut];
        let recoverable = read_log(prefix, RECOVERABLE).unwrap();
        let strict = read_log(prefix, STRICT);
        if cut == last_start {
            assert_eq!(recoverable, expected_log(kept, false, None), "cut {cut}");
            assert_eq!(
                strict.unwrap(),
                expected_log(kept, false, None),
                "cut {cut}"
            );
            continue;
        }
        let fault = Fault {
            line: last_line_no,
            offset_bytes: last_start as u64,
            seq: None,
            rule: Rule::TornTail,
            message: format!("the last line is cut short at byte offset {cut} (no newline)"),
        };
        assert_eq!(
            recoverable,
            expected_log(kept, false, Some(fault.clone())),
            "cut {cut}"
        );
        assert_eq!(fault_of(strict), fault, "cut {cut}");
    }
}

// Goal: a `.jsonl.zstd` log cut anywhere inside its last frame keeps the records of every
// earlier frame and only complete records; recoverable mode withholds the tail, strict mode
// refuses it naming the zstd frame, and a cut on the frame boundary is a clean shorter log.
// Method: write the sample session with one frame per batch, note where the last frame
// starts, and read every prefix that ends inside it.
#[test]
fn zstd_log_cut_inside_the_last_frame() {
    let events = sample_events();
    let batches = sample_batches();
    let written = write_log(&sample_header(), &batches, Compression::Zstd);
    let bytes = &written.bytes;
    let last_frame_idx = batches.len();
    let last_start = written.ends[last_frame_idx - 1];
    assert_eq!(written.ends[last_frame_idx], bytes.len());
    let n_earlier = events.len() - batches[batches.len() - 1].len();
    let raw = write_log(&sample_header(), &batches, Compression::None).bytes;
    let raw_starts = line_starts(&raw);
    let message =
        format!("end of file inside zstd frame {last_frame_idx} (at byte offset {last_start})");
    for cut in last_start..bytes.len() {
        let prefix = &bytes[..cut];
        let recoverable = read_log(prefix, RECOVERABLE).unwrap();
        let strict = read_log(prefix, STRICT);
        if cut == last_start {
            let clean = expected_log(&events[..n_earlier], true, None);
            assert_eq!(recoverable, clean, "cut {cut}");
            assert_eq!(strict.unwrap(), clean, "cut {cut}");
            continue;
        }
        // Complete blocks of the torn frame may be released (flush semantics), so the read
        // may keep more than the earlier frames, but only whole records, in order.
        let n_kept = recoverable.events.len();
        assert!(
            n_earlier <= n_kept && n_kept <= events.len(),
            "cut {cut}: kept {n_kept}"
        );
        let fault = Fault {
            line: 1 + n_kept as u64,
            offset_bytes: raw_starts[1 + n_kept] as u64,
            seq: None,
            rule: Rule::TornTail,
            message: message.clone(),
        };
        let kept = &events[..n_kept];
        assert_eq!(
            recoverable,
            expected_log(kept, true, Some(fault.clone())),
            "cut {cut}"
        );
        assert_eq!(fault_of(strict), fault, "cut {cut}");
    }
}

// Goal: flush semantics on a torn frame larger than one zstd block (128 KiB): the blocks that
// arrived whole are decoded and every complete record in them is kept, never a partial one.
// Method: append a last batch of six ~60 KiB user messages of random text (so the frame spans
// several blocks), cut the file at sampled offsets inside that frame, and check that both
// policies report the same torn tail, the recoverable one keeping a prefix of the events; some
// cut must keep more than the earlier frames held.
#[test]
fn zstd_cut_inside_a_multi_block_frame_keeps_complete_records() {
    let mut batches = sample_batches();
    let n_earlier = batches.iter().map(Vec::len).sum::<usize>();
    let mut random = 0x9e37_79b9_7f4a_7c15_u64;
    let mut text = |n_chars: usize| -> String {
        let letters = (0..n_chars).map(|_| {
            random ^= random << 13;
            random ^= random >> 7;
            random ^= random << 17;
            char::from(b'a' + (random % 26) as u8)
        });
        letters.collect()
    };
    let big: Vec<Event> = (0..6)
        .map(|idx| {
            let seq = (n_earlier + idx) as u64;
            let source = crate::support::plain_source("user");
            let message =
                crate::support::text_message(&format!("m-{seq}"), "user", source, &text(60_000));
            Event::new(
                seq,
                0,
                sessionlog_format::EventData::UserMessage(Box::new(message)),
            )
            .with_surface_op(sessionlog_format::SurfaceOp::Append)
        })
        .collect();
    batches.push(big);
    let events: Vec<Event> = batches.iter().flatten().cloned().collect();
    let written = write_log(&sample_header(), &batches, Compression::Zstd);
    let last_start = written.ends[batches.len() - 1];
    let mut n_kept_max = 0;
    for cut in (last_start + 1..written.bytes.len()).step_by(1_009) {
        let prefix = &written.bytes[..cut];
        let recoverable = read_log(prefix, RECOVERABLE).unwrap();
        let n_kept = recoverable.events.len();
        assert!(n_kept >= n_earlier, "cut {cut}: kept {n_kept}");
        // `assert!`, not `assert_eq!`: a diff of 60 KiB messages would bury the cut offset.
        assert!(
            recoverable.events == events[..n_kept],
            "cut {cut}: not a prefix"
        );
        let withheld = recoverable.withheld.expect("a torn frame is withheld");
        assert_eq!(withheld.rule, Rule::TornTail, "cut {cut}");
        assert_eq!(fault_of(read_log(prefix, STRICT)), withheld, "cut {cut}");
        n_kept_max = n_kept_max.max(n_kept);
    }
    assert!(
        n_kept_max > n_earlier,
        "no cut kept a record of the torn frame"
    );
}

/// The sample session as raw bytes, with `line` (no newline) inserted after event `after`
/// and the events of `drop` left out.
fn raw_log_with(line: Option<&[u8]>, after: usize, drop: &[u64]) -> Vec<u8> {
    let header = sample_header();
    let mut out = serde_json::to_vec(&header).unwrap();
    out.push(b'\n');
    for event in sample_events().iter().filter(|e| !drop.contains(&e.seq)) {
        encode_row(event, FormatVersion::V3, &mut out);
        out.push(b'\n');
        if event.seq == after as u64 {
            if let Some(line) = line {
                out.extend_from_slice(line);
                out.push(b'\n');
            }
        }
    }
    out
}

// Goal: a garbage row withholds itself and its whole suffix under the recoverable policy,
// unless a later decodable turn/end proves the suffix was committed, which makes it fatal;
// the strict policy refuses it either way (spec 3.5).
// Method: insert a non-JSON line after seq 4 of the sample session (so at physical line 7),
// once with the turn/end (seq 7) left in the suffix and once with it left out.
#[test]
fn garbage_row_withholds_its_suffix() {
    let events = sample_events();
    let garbage = b"{\"type\":\"user/message\",\"seq\":5,";
    let offset_bytes = raw_log_with(None, 0, &[5, 6, 7]).len() as u64;
    let without_turn_end = raw_log_with(Some(garbage), 4, &[7]);
    let with_turn_end = raw_log_with(Some(garbage), 4, &[]);

    let recoverable = read_log(without_turn_end.as_slice(), RECOVERABLE).unwrap();
    let withheld = recoverable
        .withheld
        .clone()
        .expect("the garbage row is withheld");
    assert_eq!(
        recoverable,
        expected_log(&events[..5], false, Some(withheld.clone()))
    );
    assert_eq!(
        (withheld.line, withheld.offset_bytes, withheld.seq),
        (7, offset_bytes, None)
    );
    assert_eq!(withheld.rule, Rule::Json);

    let fatal = fault_of(read_log(with_turn_end.as_slice(), RECOVERABLE));
    let suffix = " (fatal: the turn/end at line 10 proves the suffix was committed)";
    assert_eq!(
        fatal,
        Fault {
            message: format!("{}{suffix}", withheld.message),
            ..withheld.clone()
        }
    );

    for bytes in [&without_turn_end, &with_turn_end] {
        assert_eq!(fault_of(read_log(bytes.as_slice(), STRICT)), withheld);
    }
}

// Goal: a seq gap is a faulty row like any other: recoverable withholds it and its suffix
// unless a later turn/end makes it fatal, and strict refuses it (spec 3.4 rule 4, 3.5).
// Method: leave seq 5 out of the sample session, so seq 6 sits at physical line 7, once with
// the turn/end (seq 7) in the suffix and once without it.
#[test]
fn seq_gap_withholds_its_suffix() {
    let events = sample_events();
    let offset_bytes = raw_log_with(None, 0, &[5, 6, 7]).len() as u64;
    let fault = Fault {
        line: 7,
        offset_bytes,
        seq: Some(6),
        rule: Rule::SeqGap,
        message: "session event seq 6 is not contiguous; expected 5".to_owned(),
    };
    let without_turn_end = raw_log_with(None, 0, &[5, 7]);
    let with_turn_end = raw_log_with(None, 0, &[5]);

    let recoverable = read_log(without_turn_end.as_slice(), RECOVERABLE).unwrap();
    assert_eq!(
        recoverable,
        expected_log(&events[..5], false, Some(fault.clone()))
    );

    let fatal = fault_of(read_log(with_turn_end.as_slice(), RECOVERABLE));
    let message = format!(
        "{} (fatal: the turn/end at line 8 proves the suffix was committed)",
        fault.message
    );
    assert_eq!(
        fatal,
        Fault {
            message,
            ..fault.clone()
        }
    );

    for bytes in [&without_turn_end, &with_turn_end] {
        assert_eq!(fault_of(read_log(bytes.as_slice(), STRICT)), fault);
    }
}

// Goal: corruption inside a complete zstd frame that is not the last is never forgiven, in
// either policy (spec 3.2 "Corruption", STYLE 18).
// Method: write the sample session with four frames (header and three batches), flip a byte
// in the middle of each middle frame in turn, and read under both policies.
#[test]
fn corrupt_middle_frame_is_fatal() {
    let batches = sample_batches();
    let written = write_log(&sample_header(), &batches, Compression::Zstd);
    assert_eq!(written.ends.len(), 4, "four frames");
    for frame_idx in 1..=2 {
        let (start, end) = (written.ends[frame_idx - 1], written.ends[frame_idx]);
        let mut bytes = written.bytes.clone();
        bytes[(start + end) / 2] ^= 0x40;
        for options in [STRICT, RECOVERABLE] {
            let fault = fault_of(read_log(bytes.as_slice(), options));
            assert_eq!(
                fault.rule,
                Rule::Frame,
                "frame {frame_idx}, {options:?}: {fault}"
            );
            let named = format!("zstd frame {frame_idx} at byte offset {start} is corrupt");
            assert!(fault.message.starts_with(&named), "{options:?}: {fault}");
        }
    }
}

// Goal: in `Auto` mode a log whose header names no placeholder is a normalized recording when
// its first row has no `seq`, and the reader says so from the open on, before any event is
// read (an import creates its session, a migration its target, in that mode first).
// Method: the same two rows with and without `seq` and `time`, read inline and pipelined.
#[test]
fn the_first_row_decides_the_snapshot_mode_at_the_open() {
    let header = r#"{"type":"session","version":3,"id":"s","createdAt":1,"isSeeded":false,"delegationDepth":0}"#;
    let normalized = r#"{"type":"permission/preset","data":{"preset":"danger-full-access"}}"#;
    let plain =
        r#"{"type":"permission/preset","seq":0,"time":5,"data":{"preset":"danger-full-access"}}"#;
    for (row, snapshot) in [(normalized, true), (plain, false)] {
        let bytes = format!("{header}\n{row}\n").into_bytes();
        for pipelined in [false, true] {
            let options = ReadOptions::default();
            let reader = LogReader::new(std::io::Cursor::new(bytes.clone()), options).unwrap();
            let mut reader = if pipelined {
                reader.pipelined()
            } else {
                reader
            };
            assert_eq!(reader.snapshot(), snapshot, "{row} at the open");
            assert_eq!(reader.line(), 1, "the header is the last line taken");
            let event = reader.next_event().unwrap().unwrap();
            assert_eq!((event.seq, event.time), (0, if snapshot { 0 } else { 5 }));
            assert_eq!(reader.line(), 2);
            assert!(reader.next_event().is_none());
            assert_eq!(reader.snapshot(), snapshot);
        }
    }
}

//! Tests of the event record: the pinned layout, round trips, damage detection, hostile input.

use std::sync::OnceLock;

use pretty_assertions::assert_eq;
use proptest::prelude::*;
use proptest::test_runner::Config;

use super::*;
use crate::gen::{GenOptions, Generator};
use crate::json::SAFE_INTEGER_MAX;
use crate::row::decode_row;

/// The record of `golden_record_bytes`: `turn/start {turn:1}` at seq 0, time 5, after the
/// genesis chain of `SessionHeader::new_v3("golden", 1)`.
const GOLDEN_HEX: &str = concat!(
    "a6d26ba8",                                                         // crc32
    "133d7c07c0c30594b04b14b21d736e0291d4d1fa518a0320de03b504111958dc", // chain
    "0000000000000000",                                                 // seq 0
    "01",                                                               // kind: event
    "00",                                                               // flags: raw body
    "0000",                                                             // reserved
    "2e000000",                                                         // body_len 46
    "2e000000",                                                         // raw_len 46
    "0804",                                                             // object, 4 members
    "0474797065060a7475726e2f7374617274",                               // "type": "turn/start"
    "03736571",                                                         // "seq":
    "0300",                                                             //   0
    "0474696d65",                                                       // "time":
    "0305",                                                             //   5
    "0464617461",                                                       // "data":
    "0801047475726e0301",                                               //   {"turn": 1}
);

fn golden_header() -> SessionHeader {
    SessionHeader::new_v3("golden", 1)
}

/// The event of a V3 JSONL row.
fn event_of(row: &str) -> Event {
    let ctx = RowContext {
        version: FormatVersion::V3,
        snapshot: false,
        skim: false,
    };
    match decode_row(row.as_bytes(), ctx, 0) {
        Ok(Decoded::One(event)) => *event,
        other => panic!("{row} is not one event: {other:?}"),
    }
}

fn turn_start() -> Event {
    event_of(r#"{"type":"turn/start","seq":0,"time":5,"data":{"turn":1}}"#)
}

/// An event whose body is `text_len` bytes of repetitive text and some framing.
fn blob(seq: u64, text_len: usize) -> Event {
    let text: String = "lorem ipsum dolor sit amet "
        .chars()
        .cycle()
        .take(text_len)
        .collect();
    event_of(&format!(
        r#"{{"type":"plugin/blob","seq":{seq},"time":6,"data":{{"text":"{text}"}}}}"#
    ))
}

/// Encodes `event` after `prev_chain` into a fresh buffer.
fn encode(event: &Event, prev_chain: &ChainHash) -> (Vec<u8>, ChainHash) {
    let mut record = Vec::new();
    let chain = encode_event(event, prev_chain, &mut record).unwrap();
    (record, chain)
}

/// Encodes `event` after `prev_chain` as store version 1 did, large bodies compressed.
fn encode_compressed(event: &Event, prev_chain: &ChainHash) -> (Vec<u8>, ChainHash) {
    let mut record = Vec::new();
    let chain =
        encode_event_with(event, prev_chain, &mut record, BodyEncoding::CompressLarge).unwrap();
    (record, chain)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn u32_at(record: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(record[offset..offset + 4].try_into().unwrap())
}

fn put_u32(record: &mut [u8], offset: usize, value: u32) {
    record[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
}

/// Recomputes the crc after an edit, as a writer that damaged its own record would.
fn fix_crc(record: &mut [u8]) {
    if record.len() < CRC_BYTES {
        return;
    }
    let crc = crc32fast::hash(&record[CRC_BYTES..]);
    record[..CRC_BYTES].copy_from_slice(&crc.to_le_bytes());
}

/// Recomputes the chain and then the crc, so that only the header and body checks stand
/// between an edited record and its decoding.
fn reseal(record: &mut [u8], prev_chain: &ChainHash) {
    if record.len() < CHAIN_END {
        return fix_crc(record);
    }
    let chain = chain_after(prev_chain, &record[CHAIN_END..]);
    record[CRC_BYTES..CHAIN_END].copy_from_slice(&chain);
    fix_crc(record);
}

// Goal: pin the on-disk layout of an event record byte for byte, and each header field at
// the offset the module doc gives it.
// Method: encode a fixed event after a fixed genesis, compare with committed hex, then read
// every field back by hand and recompute the crc and the chain independently.
#[test]
fn golden_record_bytes() {
    let genesis = genesis_chain(&golden_header());
    let (record, chain) = encode(&turn_start(), &genesis);
    assert_eq!(hex(&record), GOLDEN_HEX);

    // The offsets of the module doc.
    assert_eq!(
        (SEQ_OFFSET, KIND_OFFSET, FLAGS_OFFSET, RESERVED_OFFSET),
        (36, 44, 45, 46)
    );
    assert_eq!(
        (BODY_LEN_OFFSET, RAW_LEN_OFFSET, RECORD_HEADER_BYTES),
        (48, 52, 56)
    );
    #[rustfmt::skip]
    let body: Vec<u8> = [
        &[0x08, 0x04][..],
        &[0x04], b"type", &[0x06, 0x0a], b"turn/start",
        &[0x03], b"seq", &[0x03, 0x00],
        &[0x04], b"time", &[0x03, 0x05],
        &[0x04], b"data", &[0x08, 0x01, 0x04], b"turn", &[0x03, 0x01],
    ]
    .concat();
    assert_eq!(record.len(), 56 + body.len());
    assert_eq!(u32_at(&record, 0), crc32fast::hash(&record[4..]));
    let mut hasher = blake3::Hasher::new();
    hasher.update(&genesis);
    hasher.update(&record[36..]);
    assert_eq!(&record[4..36], hasher.finalize().as_bytes());
    assert_eq!(record[4..36], chain);
    assert_eq!(record[36..44], 0u64.to_le_bytes());
    assert_eq!(record[44], RECORD_KIND_EVENT);
    assert_eq!(record[45], 0, "a small body is stored raw");
    assert_eq!(record[46..48], [0, 0]);
    assert_eq!(u32_at(&record, 48), 46);
    assert_eq!(u32_at(&record, 52), 46);
    assert_eq!(record[56..], body);
    let mut row = Vec::new();
    binary::to_vec(
        &EventRow {
            event: &turn_start(),
            version: FormatVersion::V3,
        },
        &mut row,
    )
    .unwrap();
    assert_eq!(row, body);
}

// Goal: decoding gives back the event and the chain that encoding returned, for a raw small
// body and a compressed large one (as store version 1 wrote them), and the compressed flag
// tells them apart.
// Method: chain a small record and a large repetitive one after genesis, decode both, and
// read their flags and lengths.
#[test]
fn small_and_large_bodies_round_trip() {
    let genesis = genesis_chain(&golden_header());
    let small = turn_start();
    let large = blob(1, 3 * COMPRESS_BODY_BYTES_MIN);
    let (small_record, small_chain) = encode_compressed(&small, &genesis);
    let (large_record, large_chain) = encode_compressed(&large, &small_chain);

    assert_eq!(
        decode_event(&small_record, &genesis, 0).unwrap(),
        (small, small_chain)
    );
    assert_eq!(
        decode_event(&large_record, &small_chain, 1).unwrap(),
        (large, large_chain)
    );
    let small_header = check_record(&small_record, &genesis).unwrap();
    assert_eq!(small_header.flags & FLAG_ZSTD, 0);
    assert_eq!(small_header.body_len, small_header.raw_len);
    let large_header = check_record(&large_record, &small_chain).unwrap();
    assert_eq!(large_header.flags, FLAG_ZSTD);
    assert!(large_header.raw_len as usize >= COMPRESS_BODY_BYTES_MIN);
    assert!(large_header.body_len < large_header.raw_len);
    assert_eq!(
        large_record.len(),
        RECORD_HEADER_BYTES + large_header.body_len as usize
    );
}

// Goal: version 1 compression starts at exactly COMPRESS_BODY_BYTES_MIN bytes of raw body.
// Method: size a repetitive event so that its raw body is one byte below the limit, then at
// it, and read the flags of both records.
#[test]
fn compression_starts_at_the_threshold() {
    let raw_len_of = |event: &Event| {
        let (record, _) = encode_compressed(event, &[0; 32]);
        check_record_crc(&record).unwrap().raw_len as usize
    };
    // The framing around the text does not change size near the threshold.
    let framing_len = raw_len_of(&blob(0, 4000)) - 4000;
    let below = blob(0, COMPRESS_BODY_BYTES_MIN - 1 - framing_len);
    let at = blob(0, COMPRESS_BODY_BYTES_MIN - framing_len);
    assert_eq!(raw_len_of(&below), COMPRESS_BODY_BYTES_MIN - 1);
    assert_eq!(raw_len_of(&at), COMPRESS_BODY_BYTES_MIN);
    let flags_of = |event: &Event| {
        check_record_crc(&encode_compressed(event, &[0; 32]).0)
            .unwrap()
            .flags
    };
    assert_eq!(flags_of(&below), 0);
    assert_eq!(flags_of(&at), FLAG_ZSTD);
    for event in [below, at] {
        let (record, chain) = encode_compressed(&event, &[0; 32]);
        assert_eq!(decode_event(&record, &[0; 32], 0).unwrap(), (event, chain));
    }
}

// Goal: this build never compresses a body, however large and compressible: the bytes a
// chain covers are canonical, and the same event always gives the same record.
// Method: encode a large repetitive event plainly and as version 1 did; the plain record is
// uncompressed, decodes to the same event, and differs from the version 1 record.
#[test]
fn bodies_are_stored_plain() {
    let genesis = genesis_chain(&golden_header());
    let large = blob(0, 8 * COMPRESS_BODY_BYTES_MIN);
    let (plain, plain_chain) = encode(&large, &genesis);
    let header = check_record(&plain, &genesis).unwrap();
    assert_eq!(header.flags, 0);
    assert_eq!(header.body_len, header.raw_len);
    assert!(header.raw_len as usize > 8 * COMPRESS_BODY_BYTES_MIN);
    assert_eq!(
        decode_event(&plain, &genesis, 0).unwrap(),
        (large.clone(), plain_chain)
    );
    let (compressed, compressed_chain) = encode_compressed(&large, &genesis);
    assert!(compressed.len() < plain.len());
    assert_ne!(compressed_chain, plain_chain);
    assert_eq!(encode(&large, &genesis), (plain, plain_chain));
}

// Goal: every event of a realistic session survives a chain of records.
// Method: encode 600 generated events, each after the previous chain, then decode them in
// order from the genesis of the generator's header.
#[test]
fn generated_session_round_trips() {
    let mut generator = Generator::new(GenOptions {
        events: 600,
        seed: 5,
    });
    let genesis = genesis_chain(&generator.header());
    let mut events = Vec::new();
    while let Some(batch) = generator.next_batch() {
        events.extend(batch);
    }
    let mut records = Vec::new();
    let mut chain = genesis;
    for event in &events {
        let (record, next) = encode(event, &chain);
        records.push(record);
        chain = next;
    }
    let mut chain = genesis;
    for (event, record) in events.iter().zip(&records) {
        let (decoded, next) = decode_event(record, &chain, event.seq).unwrap();
        assert_eq!(&decoded, event);
        chain = next;
    }
    assert_eq!(events.len(), 600);
}

// Goal: the largest seq a V3 log can hold (a JSON safe integer) round-trips.
// Method: encode a turn/start at SAFE_INTEGER_MAX and decode it.
#[test]
fn largest_safe_seq_round_trips() {
    let mut event = turn_start();
    event.seq = SAFE_INTEGER_MAX;
    let (record, chain) = encode(&event, &[7; 32]);
    assert_eq!(
        decode_event(&record, &[7; 32], SAFE_INTEGER_MAX).unwrap(),
        (event, chain)
    );
}

// Goal: the crc catches any single damaged byte, the crc field's own included.
// Method: for every position of a small record and several masks, flip the byte and check
// with all three entry points; the crc error names the stored and the computed value.
#[test]
fn every_flipped_byte_is_detected() {
    let genesis = genesis_chain(&golden_header());
    let (record, _) = encode(&turn_start(), &genesis);
    for byte_idx in 0..record.len() {
        for mask in [0x01, 0x80, 0xff] {
            let mut damaged = record.clone();
            damaged[byte_idx] ^= mask;
            let expected = RecordError::ChecksumMismatch {
                expected: u32_at(&damaged, 0),
                got: crc32fast::hash(&damaged[CRC_BYTES..]),
            };
            let at = format!("byte {byte_idx}, mask {mask:#04x}");
            assert_eq!(
                check_record(&damaged, &genesis),
                Err(expected.clone()),
                "{at}"
            );
            assert_eq!(check_record_crc(&damaged), Err(expected.clone()), "{at}");
            assert_eq!(decode_event(&damaged, &genesis, 0), Err(expected), "{at}");
        }
    }
}

// Goal: a record cut anywhere is refused: by length inside the header, by the crc after it.
// Method: check every proper prefix of a small record.
#[test]
fn every_truncation_is_detected() {
    let (record, _) = encode(&turn_start(), &[0; 32]);
    for size_bytes in 0..record.len() {
        let result = check_record(&record[..size_bytes], &[0; 32]);
        if size_bytes < RECORD_HEADER_BYTES {
            assert_eq!(result, Err(RecordError::Truncated { size_bytes }));
        } else {
            assert!(
                matches!(result, Err(RecordError::ChecksumMismatch { .. })),
                "{size_bytes}: {result:?}"
            );
        }
    }
}

// Goal: a record altered together with its crc is caught by the chain, wherever the change
// is: in the chain itself, the seq, or the body.
// Method: flip each chain-covered byte that no header check reads, recompute the crc, and
// check against the right previous chain.
#[test]
fn an_altered_record_with_a_fixed_crc_breaks_the_chain() {
    let genesis = genesis_chain(&golden_header());
    let (record, _) = encode(&turn_start(), &genesis);
    let chain_seq_and_body = (CRC_BYTES..KIND_OFFSET).chain(RECORD_HEADER_BYTES..record.len());
    for byte_idx in chain_seq_and_body {
        let mut altered = record.clone();
        altered[byte_idx] ^= 0x01;
        fix_crc(&mut altered);
        assert_eq!(
            check_record(&altered, &genesis),
            Err(RecordError::ChainMismatch),
            "byte {byte_idx}"
        );
        assert_eq!(
            decode_event(&altered, &genesis, 0),
            Err(RecordError::ChainMismatch),
            "byte {byte_idx}"
        );
        // Without its chain link, the crc alone passes.
        assert!(check_record_crc(&altered).is_ok(), "byte {byte_idx}");
    }
    // The compressed flag is the one header bit whose flip passes the header checks.
    let mut altered = record.clone();
    altered[FLAGS_OFFSET] ^= FLAG_ZSTD;
    fix_crc(&mut altered);
    assert_eq!(
        check_record(&altered, &genesis),
        Err(RecordError::ChainMismatch)
    );
}

// Goal: a record read at the wrong place is refused: a seq other than the expected one, a
// previous chain other than the one it was written after, a dropped or a repeated record.
// Method: chain three records and decode them out of order or with the wrong expectations.
#[test]
fn misplaced_records_are_refused() {
    let genesis = genesis_chain(&golden_header());
    let (first, first_chain) = encode(&turn_start(), &genesis);
    let mut second_event = turn_start();
    second_event.seq = 1;
    let (second, second_chain) = encode(&second_event, &first_chain);
    let mut third_event = turn_start();
    third_event.seq = 2;
    let (third, _) = encode(&third_event, &second_chain);

    assert_eq!(
        decode_event(&first, &genesis, 1),
        Err(RecordError::SeqMismatch {
            expected: 1,
            got: 0,
        })
    );
    let other_genesis = genesis_chain(&SessionHeader::new_v3("other", 1));
    assert_eq!(
        decode_event(&first, &other_genesis, 0),
        Err(RecordError::ChainMismatch)
    );
    // The second record dropped: the third does not follow the first.
    assert_eq!(
        decode_event(&third, &first_chain, 2),
        Err(RecordError::ChainMismatch)
    );
    // The first record repeated in place of the second.
    assert_eq!(
        decode_event(&first, &first_chain, 0),
        Err(RecordError::ChainMismatch)
    );
    assert_eq!(
        decode_event(&second, &first_chain, 1).unwrap().1,
        second_chain
    );
}

// Goal: a record whose header seq and body seq disagree is refused even when its crc and
// chain are valid (a writer bug, not damage).
// Method: rewrite the header seq of a valid record, reseal it, and decode at that seq.
#[test]
fn header_and_body_seq_must_agree() {
    let genesis = genesis_chain(&golden_header());
    let (mut record, _) = encode(&turn_start(), &genesis);
    record[SEQ_OFFSET..KIND_OFFSET].copy_from_slice(&3u64.to_le_bytes());
    reseal(&mut record, &genesis);
    assert_eq!(check_record(&record, &genesis).unwrap().seq, 3);
    assert_eq!(
        decode_event(&record, &genesis, 3),
        Err(RecordError::SeqMismatch {
            expected: 3,
            got: 0,
        })
    );
}

/// Edits a valid record, fixes its crc but not its chain, and checks that every entry point
/// refuses it with `expected`: the header checks come before the chain.
#[track_caller]
fn check_edited_header(
    prev_chain: &ChainHash,
    record: &[u8],
    edit: &dyn Fn(&mut Vec<u8>),
    expected: RecordError,
) {
    let mut edited = record.to_vec();
    edit(&mut edited);
    fix_crc(&mut edited);
    assert_eq!(check_record_crc(&edited), Err(expected.clone()));
    assert_eq!(check_record(&edited, prev_chain), Err(expected.clone()));
    assert_eq!(decode_event(&edited, prev_chain, 0), Err(expected));
}

// Goal: each header rule refuses its own violation with `RecordError::Header` (or
// `TooLarge`), before the chain is looked at.
// Method: `check_edited_header` on one edited field per rule; each case names the error, and
// so the check, that it expects.
#[test]
fn invalid_headers_are_refused() {
    let genesis = genesis_chain(&golden_header());
    let (raw, _) = encode(&turn_start(), &genesis);
    let (compressed, _) = encode_compressed(&blob(0, 3 * COMPRESS_BODY_BYTES_MIN), &genesis);
    let body_len = u32_at(&raw, BODY_LEN_OFFSET);
    let check = check_edited_header;
    let header = |reason: &str| RecordError::Header {
        reason: reason.to_owned(),
    };

    check(
        &genesis,
        &raw,
        &|r| r[KIND_OFFSET] = 0,
        header("unknown record kind 0"),
    );
    check(
        &genesis,
        &raw,
        &|r| r[KIND_OFFSET] = 2,
        header("unknown record kind 2"),
    );
    let reserved_flags = header("reserved bits are set (flags 0x02)");
    check(&genesis, &raw, &|r| r[FLAGS_OFFSET] |= 0b10, reserved_flags);
    let reserved_flags = header("reserved bits are set (flags 0x81)");
    check(
        &genesis,
        &compressed,
        &|r| r[FLAGS_OFFSET] |= 0x80,
        reserved_flags,
    );
    let reserved_u16 = header("reserved bits are set (flags 0x00)");
    check(
        &genesis,
        &raw,
        &|r| r[RESERVED_OFFSET] = 1,
        reserved_u16.clone(),
    );
    check(
        &genesis,
        &raw,
        &|r| r[RESERVED_OFFSET + 1] = 0x80,
        reserved_u16,
    );

    // body_len one more than the body, and a byte appended after the body.
    let long = header(&format!(
        "body length {} does not match the record",
        body_len + 1
    ));
    check(
        &genesis,
        &raw,
        &|r| put_u32(r, BODY_LEN_OFFSET, body_len + 1),
        long,
    );
    let short = header(&format!("body length {body_len} does not match the record"));
    check(&genesis, &raw, &|r| r.push(0), short);

    let uncompressed = header("an uncompressed body must have raw_len == body_len");
    check(
        &genesis,
        &raw,
        &|r| put_u32(r, RAW_LEN_OFFSET, body_len + 1),
        uncompressed.clone(),
    );
    check(
        &genesis,
        &raw,
        &|r| put_u32(r, RAW_LEN_OFFSET, body_len - 1),
        uncompressed,
    );
    let too_large = RecordError::TooLarge {
        size_bytes: u32::MAX as usize,
    };
    check(
        &genesis,
        &compressed,
        &|r| put_u32(r, RAW_LEN_OFFSET, u32::MAX),
        too_large,
    );
}

// Goal: a compressed body that does not expand to exactly raw_len is refused, shorter or
// longer, even with a valid crc and chain.
// Method: reseal a compressed record with raw_len one below and one above the truth.
#[test]
fn compressed_raw_len_must_match() {
    let genesis = genesis_chain(&golden_header());
    let (record, _) = encode_compressed(&blob(0, 3 * COMPRESS_BODY_BYTES_MIN), &genesis);
    let raw_len = u32_at(&record, RAW_LEN_OFFSET);
    for wrong in [raw_len - 1, raw_len + 1, 0] {
        let mut edited = record.clone();
        put_u32(&mut edited, RAW_LEN_OFFSET, wrong);
        reseal(&mut edited, &genesis);
        let result = decode_event(&edited, &genesis, 0);
        assert!(
            matches!(result, Err(RecordError::Decompress { .. })),
            "raw_len {wrong}: {result:?}"
        );
    }
}

/// Valid records to damage, each with the chain it follows: a small raw one (index 0), a
/// large compressed one (index 1), and a few generated ones.
fn valid_records() -> &'static [(Vec<u8>, ChainHash)] {
    static RECORDS: OnceLock<Vec<(Vec<u8>, ChainHash)>> = OnceLock::new();
    RECORDS.get_or_init(|| {
        let mut generator = Generator::new(GenOptions {
            events: 40,
            seed: 9,
        });
        let mut events = vec![turn_start(), blob(0, 2 * COMPRESS_BODY_BYTES_MIN)];
        while let Some(batch) = generator.next_batch() {
            events.extend(batch);
        }
        events
            .iter()
            .enumerate()
            .map(|(index, event)| {
                let prev_chain = [event.seq as u8; 32];
                if index == 1 {
                    (encode_compressed(event, &prev_chain).0, prev_chain)
                } else {
                    (encode(event, &prev_chain).0, prev_chain)
                }
            })
            .collect()
    })
}

/// The index of a valid record: a third each the small one, the compressed one, and any.
fn record_idx() -> impl Strategy<Value = usize> {
    prop_oneof![Just(0), Just(1), 0..valid_records().len()]
}

/// Runs every entry point on `record` and checks that they agree with each other. Only a
/// panic or a disagreement fails; errors are expected. The body is decoded at the seq the
/// header names, so that it is reached whenever the header and chain pass.
fn check_entry_points_agree(record: &[u8], prev_chain: &ChainHash) {
    let crc_checked = check_record_crc(record);
    let checked = check_record(record, prev_chain);
    let expected_seq = crc_checked.as_ref().map_or(0, |header| header.seq);
    let decoded = decode_event(record, prev_chain, expected_seq);
    if let Ok(header) = &checked {
        assert_eq!(crc_checked.as_ref(), Ok(header));
    }
    if let Ok((event, chain)) = &decoded {
        let header = checked.expect("a decoded record passed its checks");
        assert_eq!((event.seq, *chain), (header.seq, header.chain));
    }
    // Skimmed (as `verify` decodes), the record decodes to the same event but for its packed
    // runs, or fails with the same text.
    let skimmed = crate::skim::skimming(true, || decode_event(record, prev_chain, expected_seq));
    match (&decoded, skimmed) {
        (Ok((whole, chain)), Ok((skimmed, skimmed_chain))) => {
            assert_eq!(*chain, skimmed_chain);
            assert_eq!(crate::skim::as_skimmed(whole.clone()), skimmed);
        }
        (Err(whole), Err(skimmed)) => assert_eq!(whole.to_string(), skimmed.to_string()),
        (whole, skimmed) => panic!("whole {whole:?}, skimmed {skimmed:?}"),
    }
}

// Goal: the records `prop_damaged_records_are_handled` damages carry packed runs, so that its
// comparison of skimmed and whole decodes is about something.
#[test]
fn some_valid_records_carry_packed_runs() {
    let with_runs = valid_records()
        .iter()
        .filter(|(record, prev_chain)| {
            let seq = check_record(record, prev_chain).unwrap().seq;
            let (event, _) = decode_event(record, prev_chain, seq).unwrap();
            crate::skim::as_skimmed(event.clone()) != event
        })
        .count();
    assert!(with_runs >= 3, "{with_runs}");
}

/// How to damage a record.
#[derive(Debug, Clone)]
enum Damage {
    Flip(prop::sample::Index, u8),
    Truncate(prop::sample::Index),
    Insert(prop::sample::Index, u8),
    /// Overwrite a header u32 field (body_len or raw_len) with an arbitrary value.
    Field(bool, u32),
    Flags(u8),
}

/// Mostly flips, which land in the body of all but the smallest records.
fn damage() -> impl Strategy<Value = Damage> {
    let index = any::<prop::sample::Index>;
    prop_oneof![
        6 => (index(), 1u8..).prop_map(|(at, mask)| Damage::Flip(at, mask)),
        1 => index().prop_map(Damage::Truncate),
        1 => (index(), any::<u8>()).prop_map(|(at, byte)| Damage::Insert(at, byte)),
        1 => (any::<bool>(), any::<u32>()).prop_map(|(raw, value)| Damage::Field(raw, value)),
        1 => any::<u8>().prop_map(Damage::Flags),
    ]
}

fn apply(record: &mut Vec<u8>, damage: &Damage) {
    match damage {
        Damage::Flip(at, mask) if !record.is_empty() => {
            let at = at.index(record.len());
            record[at] ^= mask;
        }
        Damage::Truncate(at) => record.truncate(at.index(record.len() + 1)),
        Damage::Insert(at, byte) => record.insert(at.index(record.len() + 1), *byte),
        Damage::Field(raw, value) if record.len() >= RECORD_HEADER_BYTES => {
            let offset = if *raw {
                RAW_LEN_OFFSET
            } else {
                BODY_LEN_OFFSET
            };
            put_u32(record, offset, *value);
        }
        Damage::Flags(flags) if record.len() > FLAGS_OFFSET => record[FLAGS_OFFSET] = *flags,
        Damage::Flip(..) | Damage::Field(..) | Damage::Flags(..) => {}
    }
}

/// What to repair after damaging a record: nothing, the crc, or the chain and the crc.
#[derive(Debug, Clone, Copy)]
enum Repair {
    Nothing,
    Crc,
    ChainAndCrc,
}

fn config() -> Config {
    Config {
        cases: 512,
        failure_persistence: None,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config())]

    // Goal: arbitrary bytes never panic any entry point, and the entry points agree.
    // Method: random byte strings of every length around the header size, against a random
    // previous chain.
    #[test]
    fn prop_arbitrary_bytes_are_handled(
        bytes in prop::collection::vec(any::<u8>(), 0..160),
        prev_chain in any::<[u8; 32]>(),
    ) {
        check_entry_points_agree(&bytes, &prev_chain);
    }

    // Goal: forged records that pass the crc, or the crc and the chain, reach the header,
    // decompression and body decoders, which refuse them without panicking.
    // Method: a header of plausible or arbitrary fields around an arbitrary (often
    // binary-looking) body, then the crc or the chain and crc recomputed.
    #[test]
    fn prop_forged_records_are_handled(
        kind in prop_oneof![Just(RECORD_KIND_EVENT), any::<u8>()],
        flags in prop_oneof![Just(0), Just(FLAG_ZSTD), any::<u8>()],
        raw_len in prop_oneof![Just(None), any::<u32>().prop_map(Some), (0u32..64).prop_map(Some)],
        seq in prop_oneof![Just(0u64), any::<u64>()],
        body in prop::collection::vec(prop_oneof![0u8..=10, any::<u8>()], 0..200),
        reseal_chain in any::<bool>(),
    ) {
        let prev_chain = [3; 32];
        let mut record = vec![0; RECORD_HEADER_BYTES];
        record[SEQ_OFFSET..KIND_OFFSET].copy_from_slice(&seq.to_le_bytes());
        record[KIND_OFFSET] = kind;
        record[FLAGS_OFFSET] = flags;
        let body_len = u32::try_from(body.len()).unwrap();
        put_u32(&mut record, BODY_LEN_OFFSET, body_len);
        put_u32(&mut record, RAW_LEN_OFFSET, raw_len.unwrap_or(body_len));
        record.extend(&body);
        if reseal_chain {
            reseal(&mut record, &prev_chain);
        } else {
            fix_crc(&mut record);
        }
        check_entry_points_agree(&record, &prev_chain);
    }

    // Goal: valid records, damaged and then repaired as a careless or hostile writer would,
    // never panic any entry point; undamaged, they decode.
    // Method: apply up to three damages to a valid record (raw, compressed or generated),
    // repair nothing, the crc, or the chain and the crc, and run every entry point.
    #[test]
    fn prop_damaged_records_are_handled(
        record_idx in record_idx(),
        damages in prop::collection::vec(damage(), 0..4),
        repair in prop_oneof![Just(Repair::Nothing), Just(Repair::Crc), Just(Repair::ChainAndCrc)],
    ) {
        let records = valid_records();
        let (record, prev_chain) = &records[record_idx];
        let mut damaged = record.clone();
        for damage in &damages {
            apply(&mut damaged, damage);
        }
        match repair {
            Repair::Nothing => {}
            Repair::Crc => fix_crc(&mut damaged),
            Repair::ChainAndCrc => reseal(&mut damaged, prev_chain),
        }
        check_entry_points_agree(&damaged, prev_chain);
        if damaged == *record {
            let seq = check_record(&damaged, prev_chain).unwrap().seq;
            prop_assert!(decode_event(&damaged, prev_chain, seq).is_ok());
        }
    }
}

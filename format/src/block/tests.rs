//! Tests of the block record: round trips, the pinned header, damage and forgery detection.

use pretty_assertions::assert_eq;
use proptest::prelude::*;

use super::*;
use crate::gen::{GenOptions, Generator};
use crate::record::{encode_event, genesis_chain};

/// `n` generated events encoded as chained records from the genesis of their header.
fn records(n: u64, seed: u64) -> (ChainHash, Vec<Vec<u8>>) {
    let mut generator = Generator::new(GenOptions { events: n, seed });
    let genesis = genesis_chain(&generator.header());
    let mut chain = genesis;
    let mut out = Vec::new();
    while let Some(batch) = generator.next_batch() {
        for event in batch {
            let mut record = Vec::new();
            chain = encode_event(&event, &chain, &mut record).unwrap();
            out.push(record);
        }
    }
    (genesis, out)
}

// Goal: a block's bytes do not depend on how its frame was made: one compression context
// kept by the thread (the sealer's) writes the same frame as a fresh context per block, the
// way blocks were written before it, for block after block of different sizes, also when
// the thread compresses at another level in between (record bodies: one context per level).
// Method: seal runs of three sizes on one thread, twice each, each after a level-1
// compression; check each block's payload frame against `zstd::bulk::compress` of the
// payload the decoder rebuilds, and the level-1 frame against a fresh level-1 context's.
#[test]
fn a_kept_compression_context_writes_the_frames_a_fresh_one_writes() {
    let (genesis, all) = records(700, 8);
    let mut chain_in = genesis;
    let mut first_seq = 0;
    for len in [300usize, 20, 380] {
        let body = &all[first_seq][CHAIN_END..];
        let level_one = crate::record::with_compressor(1, |c| c.compress(body)).unwrap();
        assert_eq!(level_one, zstd::bulk::compress(body, 1).unwrap());
        let run = &all[first_seq..first_seq + len];
        let bytes =
            encode_block(first_seq as u64, &chain_in, run.iter().map(Vec::as_slice)).unwrap();
        let again =
            encode_block(first_seq as u64, &chain_in, run.iter().map(Vec::as_slice)).unwrap();
        assert_eq!(bytes, again);
        let fresh = zstd::bulk::compress(&payload_of(run), BLOCK_ZSTD_LEVEL).unwrap();
        assert_eq!(&bytes[BLOCK_HEADER_BYTES..], fresh.as_slice());
        assert_eq!(decode_block(&bytes).unwrap().len(), len);
        chain_in = chain_of(&run[len - 1]);
        first_seq += len;
    }
}

fn chain_of(record: &[u8]) -> ChainHash {
    record[4..36].try_into().unwrap()
}

fn reseal(block: &mut [u8]) {
    let crc = crc32fast::hash(&block[4..]);
    block[..4].copy_from_slice(&crc.to_le_bytes());
}

/// The payload a block of `records` compresses: each record without its crc and chain,
/// behind its length.
fn payload_of(records: &[Vec<u8>]) -> Vec<u8> {
    let mut payload = Vec::new();
    for record in records {
        let tail = &record[CHAIN_END..];
        payload.extend_from_slice(&(tail.len() as u32).to_le_bytes());
        payload.extend_from_slice(tail);
    }
    payload
}

/// Two damaged copies of a sound block, their crcs resealed: a byte of the compressed payload
/// changed, and raw_len one byte short.
fn damaged_copies(sound: &[u8]) -> [Vec<u8>; 2] {
    let mut damaged = sound.to_vec();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x04;
    reseal(&mut damaged);
    let mut short = sound.to_vec();
    let raw_len = u32::from_le_bytes(short[20..24].try_into().unwrap());
    short[20..24].copy_from_slice(&(raw_len - 1).to_le_bytes());
    reseal(&mut short);
    [damaged, short]
}

// Goal: sealing keeps every record byte for byte, from any starting seq, and the header says
// where the block sits in its session's chain.
// Method: seal records 40..340 of a generated session, decode, and compare each rebuilt
// record, the header fields and the lookup by seq.
#[test]
fn records_round_trip_byte_for_byte() {
    let (_, all) = records(400, 3);
    let run = &all[40..340];
    let chain_in = chain_of(&all[39]);
    let bytes = encode_block(40, &chain_in, run.iter().map(Vec::as_slice)).unwrap();
    let block = decode_block(&bytes).unwrap();
    assert_eq!(
        block.header,
        BlockHeader {
            len: bytes.len() as u32,
            first_seq: 40,
            count: 300,
            raw_len: block.header.raw_len,
            chain_in,
            chain_out: chain_of(&all[339]),
        }
    );
    let rebuilt: Vec<(u64, Vec<u8>)> = block.records().map(|(s, r)| (s, r.to_vec())).collect();
    let expected: Vec<(u64, Vec<u8>)> = (40..).zip(run.iter().cloned()).collect();
    assert_eq!(rebuilt, expected);
    assert_eq!(block.record(40), Some(all[40].as_slice()));
    assert_eq!(block.record(339), Some(all[339].as_slice()));
    assert_eq!(block.record(39), None);
    assert_eq!(block.record(340), None);
    assert_eq!(block.header.end_seq(), 340);
    // The payload leaves out each record's crc and chain: 36 bytes less, plus a length.
    let stored: usize = run.iter().map(|r| r.len() - 36 + 4).sum();
    assert_eq!(block.header.raw_len as usize, stored);
}

// Goal: the fixed header sits where docs/format.md says.
// Method: seal two records and read each field at its documented offset.
#[test]
fn header_layout_is_pinned() {
    let (genesis, all) = records(20, 1);
    let bytes = encode_block(0, &genesis, all[..2].iter().map(Vec::as_slice)).unwrap();
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    assert_eq!(u32_at(0), crc32fast::hash(&bytes[4..]));
    assert_eq!(u32_at(4) as usize, bytes.len());
    assert_eq!(&bytes[8..16], &0u64.to_le_bytes());
    assert_eq!(u32_at(16), 2);
    assert_eq!(&bytes[24..56], &genesis);
    assert_eq!(&bytes[56..88], &chain_of(&all[1]));
    // The payload is one zstd frame (RFC 8878 magic).
    assert_eq!(&bytes[88..92], &[0x28, 0xb5, 0x2f, 0xfd]);
    let payload = zstd::bulk::decompress(&bytes[88..], u32_at(20) as usize).unwrap();
    let tail_len = u32::from_le_bytes(payload[..4].try_into().unwrap()) as usize;
    assert_eq!(tail_len, all[0].len() - 36);
    assert_eq!(&payload[4..4 + tail_len], &all[0][36..]);
}

// Goal: sealing refuses records that do not form a dense chain, an empty run and an
// oversized one, so a block never holds what the log did not.
// Method: seal a run with a gap, with a wrong chain_in, with a damaged record, with none and
// with BLOCK_EVENTS_MAX + 1.
#[test]
fn sealing_checks_what_it_seals() {
    let (genesis, all) = records(60, 2);
    let gap = [all[0].as_slice(), all[2].as_slice()];
    assert!(matches!(
        encode_block(0, &genesis, gap),
        Err(BlockError::Record {
            index: 1,
            seq: 1,
            ..
        })
    ));
    assert!(matches!(
        encode_block(0, &[7; 32], all[..3].iter().map(Vec::as_slice)),
        Err(BlockError::Record {
            index: 0,
            seq: 0,
            ..
        })
    ));
    let mut damaged = all[1].clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 1;
    assert!(matches!(
        encode_block(0, &genesis, [all[0].as_slice(), damaged.as_slice()]),
        Err(BlockError::Record {
            index: 1,
            seq: 1,
            ..
        })
    ));
    assert!(matches!(
        encode_block(5, &genesis, all[..1].iter().map(Vec::as_slice)),
        Err(BlockError::Record {
            index: 0,
            seq: 5,
            ..
        })
    ));
    assert!(matches!(
        encode_block(0, &genesis, std::iter::empty()),
        Err(BlockError::Header { .. })
    ));
    let (genesis, many) = records(BLOCK_EVENTS_MAX as u64 + 1, 4);
    assert!(matches!(
        encode_block(0, &genesis, many.iter().map(Vec::as_slice)),
        Err(BlockError::Header { .. })
    ));
    assert!(encode_block(
        0,
        &genesis,
        many[..BLOCK_EVENTS_MAX].iter().map(Vec::as_slice)
    )
    .is_ok());
}

/// `record` with its chain replaced by `chain` and its crc made to match: a record whose
/// link is wrong though its bytes are intact.
fn relinked(record: &[u8], chain: ChainHash) -> Vec<u8> {
    let mut out = record.to_vec();
    out[CRC_BYTES..CHAIN_END].copy_from_slice(&chain);
    let crc = crc32fast::hash(&out[CRC_BYTES..]);
    out[..CRC_BYTES].copy_from_slice(&crc.to_le_bytes());
    out
}

// Goal: a link the writer made (`Link::Written`) skips only the recomputed chain: a record's
// crc, header and seq are still checked, the first record's link always is, and a wrong
// written link that sealing took as written is refused by every read of the block.
// Method: seal a run with every link written and check it is the block `encode_block` makes;
// then seal runs with a relinked record (intact crc, wrong chain) at the front, in the
// middle and at the end, a damaged record, and a missing seq, each with written links.
#[test]
fn a_written_link_skips_only_the_recomputed_chain() {
    let (genesis, all) = records(6, 9);
    let written = |run: &[Vec<u8>]| -> Vec<(Vec<u8>, Link)> {
        run.iter().map(|r| (r.clone(), Link::Written)).collect()
    };
    let seal = |first_seq: u64, run: &[(Vec<u8>, Link)]| {
        encode_block_with(
            first_seq,
            &genesis,
            run.iter().map(|(r, l)| (r.as_slice(), *l)),
        )
    };
    let sound = seal(0, &written(&all)).unwrap();
    assert_eq!(
        sound,
        encode_block(0, &genesis, all.iter().map(Vec::as_slice)).unwrap()
    );

    let mut front = written(&all);
    front[0].0 = relinked(&all[0], [3; 32]);
    assert!(matches!(
        seal(0, &front),
        Err(BlockError::Record {
            index: 0,
            source: RecordError::ChainMismatch,
            ..
        })
    ));

    let mut middle = written(&all);
    middle[3].0 = relinked(&all[3], [3; 32]);
    let mut checked = middle.clone();
    checked[3].1 = Link::Check;
    assert!(matches!(
        seal(0, &checked),
        Err(BlockError::Record {
            index: 3,
            source: RecordError::ChainMismatch,
            ..
        })
    ));
    // Sealing keeps no record's chain but the last one's: a wrong link inside the run
    // leaves the block it should have been, and a wrong last link fails every read.
    assert_eq!(seal(0, &middle).unwrap(), sound);
    let mut last = written(&all);
    last[5].0 = relinked(&all[5], [3; 32]);
    let taken = seal(0, &last).expect("a written link is taken as written");
    assert!(matches!(decode_block(&taken), Err(BlockError::ChainOut)));

    let mut damaged = written(&all);
    let last = damaged[2].0.len() - 1;
    damaged[2].0[last] ^= 1;
    assert!(matches!(
        seal(0, &damaged),
        Err(BlockError::Record {
            index: 2,
            source: RecordError::ChecksumMismatch { .. },
            ..
        })
    ));

    let mut skipped = written(&all);
    skipped.remove(2);
    assert!(matches!(
        seal(0, &skipped),
        Err(BlockError::Record {
            index: 2,
            source: RecordError::SeqMismatch {
                expected: 2,
                got: 3
            },
            ..
        })
    ));
}

// Goal: any damaged byte of a block is detected, and so is any truncation.
// Method: flip one bit at every offset of a small block, then cut it at every length.
#[test]
fn every_flip_and_cut_is_detected() {
    let (genesis, all) = records(12, 5);
    let bytes = encode_block(0, &genesis, all.iter().map(Vec::as_slice)).unwrap();
    for offset in 0..bytes.len() {
        let mut damaged = bytes.clone();
        damaged[offset] ^= 0x10;
        assert!(decode_block(&damaged).is_err(), "flip at {offset}");
    }
    for len in 0..bytes.len() {
        assert!(decode_block(&bytes[..len]).is_err(), "cut at {len}");
    }
}

// Goal: a decoder reused across blocks (its buffers recycled, errors in between) gives what
// a fresh `decode_block` gives for each block, the same records and the same errors.
// Method: seal three runs of different sizes, make two damaged copies of each (a payload
// byte changed, raw_len one short, both resealed), and decode them all, forwards and back,
// through one decoder that recycles every block it returned.
#[test]
fn a_reused_decoder_decodes_as_a_fresh_one() {
    let (genesis, all) = records(500, 9);
    let runs = [(0usize, 300usize), (300, 320), (320, 500)];
    let mut blocks = Vec::new();
    for (start, end) in runs {
        let chain_in = if start == 0 {
            genesis
        } else {
            chain_of(&all[start - 1])
        };
        let sound = encode_block(
            start as u64,
            &chain_in,
            all[start..end].iter().map(Vec::as_slice),
        )
        .unwrap();
        let [damaged, short] = damaged_copies(&sound);
        assert!(decode_block(&damaged).is_err() && decode_block(&short).is_err());
        blocks.extend([sound, damaged, short]);
    }
    let mut decoder = BlockDecoder::default();
    for bytes in blocks.iter().chain(blocks.iter().rev()) {
        let fresh = decode_block(bytes);
        let reused = decoder.decode(bytes);
        assert_eq!(reused, fresh);
        if let Ok(block) = reused {
            decoder.recycle(block);
        }
    }
}

// Goal: a block altered with a recomputed crc still fails: the rebuilt chain does not reach
// chain_out, or a rebuilt record is refused.
// Method: change chain_in, then chain_out, then a byte inside the payload (recompressed), and
// reseal the crc each time.
#[test]
fn forged_blocks_fail_the_chain() {
    let (genesis, all) = records(30, 6);
    let bytes = encode_block(0, &genesis, all.iter().map(Vec::as_slice)).unwrap();
    let mut wrong_in = bytes.clone();
    wrong_in[24] ^= 1;
    reseal(&mut wrong_in);
    assert_eq!(decode_block(&wrong_in), Err(BlockError::ChainOut));
    let mut wrong_out = bytes.clone();
    wrong_out[87] ^= 1;
    reseal(&mut wrong_out);
    assert_eq!(decode_block(&wrong_out), Err(BlockError::ChainOut));

    let header = block_header(&bytes).unwrap();
    let mut payload = zstd::bulk::decompress(&bytes[88..], header.raw_len as usize).unwrap();
    let last = payload.len() - 1;
    payload[last] ^= 1;
    let frame = zstd::bulk::compress(&payload, 3).unwrap();
    let mut forged = bytes[..88].to_vec();
    forged.extend_from_slice(&frame);
    let len = forged.len() as u32;
    forged[4..8].copy_from_slice(&len.to_le_bytes());
    reseal(&mut forged);
    assert_eq!(decode_block(&forged), Err(BlockError::ChainOut));
}

// Goal: a header whose fields are out of range is refused before anything is decompressed.
// Method: reseal blocks with count 0, count over the maximum, raw_len over the maximum, and a
// first_seq whose end overflows.
#[test]
fn out_of_range_headers_are_refused() {
    let (genesis, all) = records(5, 7);
    let bytes = encode_block(0, &genesis, all.iter().map(Vec::as_slice)).unwrap();
    let edit = |offset: usize, value: &[u8]| {
        let mut edited = bytes.clone();
        edited[offset..offset + value.len()].copy_from_slice(value);
        reseal(&mut edited);
        decode_block(&edited)
    };
    let header_error = |r: Result<Block, BlockError>| matches!(r, Err(BlockError::Header { .. }));
    assert!(header_error(edit(16, &0u32.to_le_bytes())));
    assert!(header_error(edit(
        16,
        &(BLOCK_EVENTS_MAX as u32 + 1).to_le_bytes()
    )));
    assert!(header_error(edit(20, &u32::MAX.to_le_bytes())));
    assert!(header_error(edit(8, &(u64::MAX - 1).to_le_bytes())));
}

proptest! {
    // Goal: arbitrary bytes never panic the decoder.
    #[test]
    fn prop_arbitrary_bytes_are_handled(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = decode_block(&bytes);
        let _ = block_header(&bytes);
    }

    // Goal: a valid block with any one byte replaced is refused or decodes to the same
    // records (never to other records).
    #[test]
    fn prop_damaged_blocks_never_yield_other_records(offset in 0usize..4096, value in any::<u8>()) {
        let (genesis, all) = records(8, 8);
        let bytes = encode_block(0, &genesis, all.iter().map(Vec::as_slice)).unwrap();
        let mut damaged = bytes.clone();
        let offset = offset % bytes.len();
        damaged[offset] = value;
        if let Ok(block) = decode_block(&damaged) {
            let rebuilt: Vec<Vec<u8>> = block.records().map(|(_, r)| r.to_vec()).collect();
            prop_assert_eq!(rebuilt, all);
        }
    }
}

/// A block record around `payload` as given (compressed, its crc sealed), whatever the
/// payload holds: for payloads the sealer would never write.
fn block_around(
    first_seq: u64,
    count: u32,
    chain: (ChainHash, ChainHash),
    payload: &[u8],
) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&first_seq.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&chain.0);
    out.extend_from_slice(&chain.1);
    out.extend_from_slice(&zstd::bulk::compress(payload, BLOCK_ZSTD_LEVEL).unwrap());
    let len = out.len() as u32;
    out[4..8].copy_from_slice(&len.to_le_bytes());
    reseal(&mut out);
    out
}

// Goal: a rebuild gives what `decode_block` gives however its steps are split and on
// whichever thread it is finished (verify's block reader hands blocks over part way), for
// sound blocks and for blocks refused at every stage of the rebuild: a record's tail length,
// a record's header, bytes after the last record, the chain's end.
// Method: sound and damaged blocks of six records (the damaged ones built around payloads
// the sealer would never write, their crcs sealed); for every number of steps from none to
// past the end, step a rebuild on this thread, finish it on another, and compare with
// `decode_block`.
#[test]
fn a_rebuild_split_anywhere_gives_what_decode_gives() {
    let (genesis, all) = records(6, 12);
    let chain_out = chain_of(&all[5]);
    let sound = payload_of(&all);
    // Record 3's tail length past the payload's end.
    let mut long_tail = sound.clone();
    let third = 3 * 4 + all[..3].iter().map(|r| r.len() - CHAIN_END).sum::<usize>();
    long_tail[third..third + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    // Record 2's seq changed: its header is refused.
    let mut wrong_seq = all.clone();
    wrong_seq[2][CHAIN_END..CHAIN_END + 8].copy_from_slice(&99u64.to_le_bytes());
    let mut trailing = sound.clone();
    trailing.extend_from_slice(&[1, 2, 3]);
    let blocks = [
        encode_block(0, &genesis, all.iter().map(Vec::as_slice)).unwrap(),
        block_around(0, 6, (genesis, chain_out), &sound),
        block_around(0, 6, (genesis, chain_out), &long_tail),
        block_around(0, 6, (genesis, chain_out), &payload_of(&wrong_seq)),
        block_around(0, 6, (genesis, chain_out), &trailing),
        block_around(0, 6, (genesis, [9; 32]), &sound),
    ];
    let want: Vec<_> = blocks.iter().map(|bytes| decode_block(bytes)).collect();
    assert!(want[0].is_ok() && want[0] == want[1]);
    assert!(
        matches!(&want[2], Err(BlockError::Payload { reason }) if reason.starts_with("record 3 "))
    );
    assert!(matches!(
        &want[3],
        Err(BlockError::Record {
            index: 2,
            source: RecordError::SeqMismatch { .. },
            ..
        })
    ));
    assert!(
        matches!(&want[4], Err(BlockError::Payload { reason }) if reason == "3 bytes after the last record")
    );
    assert_eq!(want[5], Err(BlockError::ChainOut));
    let mut decoder = BlockDecoder::default();
    for (bytes, want) in blocks.iter().zip(&want) {
        for n_steps in 0..=8 {
            let mut rebuild = decoder.start(bytes).unwrap();
            for _ in 0..n_steps {
                rebuild.step();
            }
            let (got, payload) =
                std::thread::scope(|scope| scope.spawn(move || rebuild.finish()).join().unwrap());
            assert_eq!(&got, want, "after {n_steps} steps");
            decoder.recycle_payload(payload);
            if let Ok(block) = got {
                decoder.recycle(block);
            }
        }
    }
}

// Goal: a decoder without record crcs rebuilds every record byte for byte but its crc, which
// it leaves at zero, and refuses what a full decoder refuses, with the same errors.
// Method: the sound block of 300 records and damaged copies of it (a payload byte, raw_len),
// through both decoders.
#[test]
fn a_decoder_without_record_crcs_differs_only_in_the_crcs() {
    let (genesis, all) = records(300, 13);
    let sound = encode_block(0, &genesis, all.iter().map(Vec::as_slice)).unwrap();
    let [damaged, short] = damaged_copies(&sound);
    let mut plain = BlockDecoder::without_record_crcs();
    let block = plain.decode(&sound).unwrap();
    assert_eq!(block.len(), all.len());
    for ((_, rebuilt), record) in block.records().zip(&all) {
        assert_eq!(rebuilt[..4], [0; 4]);
        assert_eq!(rebuilt[4..], record[4..]);
    }
    for bytes in [&damaged, &short] {
        assert_eq!(plain.decode(bytes), decode_block(bytes));
        assert!(decode_block(bytes).is_err());
    }
}

//! The cargo-fuzz targets' entry functions (`fuzz/fuzz_targets/`) run as ordinary tests over
//! the committed seed corpus (`fuzz/seeds/`) and every truncation and single-bit flip of each
//! seed, so that the CI gate exercises them without the nightly fuzz build.

use std::io::{Cursor, Read};
use std::path::PathBuf;

use sessionlog_format::frame::FrameReader;
use sessionlog_format::record::{check_record, check_record_crc, decode_checked_body};
use sessionlog_format::{read_log, ReadOptions, Recovery};

const HEADER: &[u8] =
    b"{\"type\":\"session\",\"version\":3,\"id\":\"f\",\"createdAt\":1,\"isSeeded\":false,\"delegationDepth\":0}\n";

/// fuzz_targets/header.rs
fn header_target(line: &[u8]) {
    let mut input = line.to_vec();
    input.push(b'\n');
    let _ = read_log(Cursor::new(input), ReadOptions::default());
}

/// fuzz_targets/rows.rs
fn rows_target(rows: &[u8]) {
    let mut input = HEADER.to_vec();
    input.extend_from_slice(rows);
    for recovery in [Recovery::Strict, Recovery::Recoverable] {
        let options = ReadOptions {
            recovery,
            ..ReadOptions::default()
        };
        let _ = read_log(Cursor::new(&input), options);
    }
}

/// fuzz_targets/frames.rs
fn frames_target(bytes: &[u8]) {
    let mut out = Vec::new();
    let _ = FrameReader::new(bytes).take(64 << 20).read_to_end(&mut out);
}

/// fuzz_targets/record.rs
fn record_target(bytes: &[u8]) {
    let _ = check_record(bytes, &[0; 32]);
    let mut fixed = bytes.to_vec();
    if fixed.len() >= 4 {
        let crc = crc32fast::hash(&fixed[4..]);
        fixed[..4].copy_from_slice(&crc.to_le_bytes());
    }
    if let Ok(header) = check_record_crc(&fixed) {
        let _ = decode_checked_body(&fixed, &header, 0);
    }
}

/// A fuzz target's entry function.
type Target = fn(&[u8]);

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds")
        .join(target);
    let mut out: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| std::fs::read(entry.unwrap().path()).unwrap())
        .collect();
    out.sort();
    assert!(!out.is_empty(), "{}: no seeds", dir.display());
    out
}

/// Every seed, each of its truncations (up to 512 cut points), and single-bit flips at up to
/// 512 positions.
fn variants(seed: &[u8]) -> Vec<Vec<u8>> {
    let step = (seed.len() / 512).max(1);
    let mut out = vec![seed.to_vec()];
    for cut in (0..seed.len()).step_by(step) {
        out.push(seed[..cut].to_vec());
        let mut flipped = seed.to_vec();
        flipped[cut] ^= 1 << (cut % 8);
        out.push(flipped);
    }
    out
}

// Goal: no fuzz target's entry function panics on its seed corpus or on truncated and
// bit-flipped seeds.
// Method: run each target over every variant of every committed seed.
#[test]
fn fuzz_entry_points_survive_the_seed_corpus() {
    let targets: [(&str, Target); 4] = [
        ("header", header_target),
        ("rows", rows_target),
        ("frames", frames_target),
        ("record", record_target),
    ];
    for (name, target) in targets {
        let mut runs = 0;
        for seed in seeds(name) {
            for input in variants(&seed) {
                target(&input);
                runs += 1;
            }
        }
        assert!(runs > 0, "{name}");
    }
}

//! Fuzz target: the JSONL row decoder: a valid V3 header line, then arbitrary rows, read
//! strictly and recoverably.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sessionlog_format::{read_log, ReadOptions, Recovery};

const HEADER: &[u8] =
    b"{\"type\":\"session\",\"version\":3,\"id\":\"f\",\"createdAt\":1,\"isSeeded\":false,\"delegationDepth\":0}\n";

fuzz_target!(|rows: &[u8]| {
    let mut input = HEADER.to_vec();
    input.extend_from_slice(rows);
    for recovery in [Recovery::Strict, Recovery::Recoverable] {
        let options = ReadOptions {
            recovery,
            ..ReadOptions::default()
        };
        let _ = read_log(std::io::Cursor::new(&input), options);
    }
});

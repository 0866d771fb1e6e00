//! Fuzz target: zstd frame walking on arbitrary bytes.
#![no_main]

use std::io::Read;

use libfuzzer_sys::fuzz_target;
use sessionlog_format::frame::FrameReader;

fuzz_target!(|bytes: &[u8]| {
    let mut out = Vec::new();
    let _ = FrameReader::new(bytes).take(64 << 20).read_to_end(&mut out);
});

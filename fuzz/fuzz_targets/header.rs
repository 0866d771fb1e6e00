//! Fuzz target: the header decoder, through the reader, on one arbitrary first line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sessionlog_format::{read_log, ReadOptions};

fuzz_target!(|line: &[u8]| {
    let mut input = line.to_vec();
    input.push(b'\n');
    let _ = read_log(std::io::Cursor::new(input), ReadOptions::default());
});

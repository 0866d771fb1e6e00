//! Fuzz target: the V4 reader: a valid V4 header line, then arbitrary rows, read strictly and
//! recoverably under the native V4 rules.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|rows: &[u8]| {
    sessionlog_fuzz::read_v4(rows);
});

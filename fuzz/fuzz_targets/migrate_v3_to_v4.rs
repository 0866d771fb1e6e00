//! Fuzz target: the V3 -> V4 migration edge. A valid V3 header, then arbitrary rows, read
//! recoverably (so every event the stage sees passed the V3 rules), pushed through the edge's
//! stage and finished. A panic is a finding; a refusal is an answer.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|rows: &[u8]| {
    sessionlog_fuzz::migrate_edge(3, rows);
});

//! Fuzz target: the V1 -> V2 migration edge. A valid V1 header, then arbitrary rows, read
//! recoverably (so every event the stage sees passed the V1 rules), pushed through the edge's
//! stage and finished. A panic is a finding; a refusal is an answer.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|rows: &[u8]| {
    sessionlog_fuzz::migrate_edge(1, rows);
});

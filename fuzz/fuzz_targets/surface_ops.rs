//! Fuzz target: random operation sequences (append, replace of a run, head rewrite, prune;
//! decoded from the input, three bytes an operation)
//! written as a V3 log and read strictly, compared after the read with a naive `Vec` model of
//! the surface: the reader must accept exactly the sequences the model accepts, and end with
//! the model's nodes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|ops: &[u8]| {
    sessionlog_fuzz::surface_ops(ops);
});

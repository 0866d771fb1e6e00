//! Shared inputs for the sessionlog benchmarks (`benches/`) and comparison binaries.

pub mod backends;
pub mod compare;
pub mod data;
pub mod measure;

use sessionlog_format::gen::{GenOptions, Generator};
use sessionlog_format::{Compression, LogWriter};

/// A generated V3 log of at least `size_bytes_min` bytes of JSONL (before compression), as
/// written by [`LogWriter`]: one zstd frame per batch when compressed. Deterministic (seed 1).
pub fn generated_log(size_bytes_min: usize, compression: Compression) -> Vec<u8> {
    // Generate generously, then stop at the first batch boundary past the size.
    let mut generator = Generator::new(GenOptions {
        events: u64::MAX >> 12,
        seed: 1,
    });
    let mut raw_size_bytes = 0;
    let mut writer = LogWriter::new(Vec::new(), &generator.header(), compression)
        .expect("writing to memory cannot fail");
    while raw_size_bytes < size_bytes_min {
        let batch = generator
            .next_batch()
            .expect("the generator is far from its end");
        raw_size_bytes += batch_size_bytes(&batch);
        writer
            .append_batch(&batch)
            .expect("generated batches are valid");
    }
    writer.into_inner().expect("writing to memory cannot fail")
}

fn batch_size_bytes(batch: &[sessionlog_format::Event]) -> usize {
    let mut buf = Vec::new();
    for event in batch {
        sessionlog_format::row::encode_row(event, sessionlog_format::FormatVersion::V3, &mut buf);
        buf.push(b'\n');
    }
    buf.len()
}

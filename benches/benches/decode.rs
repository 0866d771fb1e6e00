//! Decode throughput of a generated V3 log of at least 100 MB (issue #2 target).
//!
//! Goal: the typed decode (rows into typed events, with every admission rule checked) is at
//! least as fast as parsing the same lines into `serde_json::Value`, and reading the
//! `.jsonl.zstd` form costs at most 1.3x the raw form. Everything runs in one process on the
//! same bytes, so the ratios are meaningful on a noisy machine. The `file_` rows read files
//! the way the CLI does, with decompression on a second thread.
//!
//! Run: `cargo bench -p sessionlog-benches --bench decode`
//! (`DECODE_BENCH_MB=20` shrinks the input for a quick look).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sessionlog_benches::generated_log;
use sessionlog_format::{Compression, LogReader, ReadOptions};

fn typed_decode(bytes: &[u8]) -> u64 {
    let mut reader = LogReader::new(bytes, ReadOptions::default()).expect("generated logs open");
    let mut n_events = 0;
    while let Some(event) = reader.next_event() {
        black_box(event.expect("generated logs are valid"));
        n_events += 1;
    }
    n_events
}

/// Decodes a file the way the CLI does (`engine::files::open_log`): a compressed file is
/// decompressed on a second thread while this one decodes rows.
fn typed_decode_file(path: &std::path::Path) -> u64 {
    let options = ReadOptions::default();
    let mut reader =
        sessionlog_engine::files::open_log(path, options).expect("generated logs open");
    let mut n_events = 0;
    while let Some(event) = reader.next_event() {
        black_box(event.expect("generated logs are valid"));
        n_events += 1;
    }
    n_events
}

fn value_parse(bytes: &[u8]) -> u64 {
    let mut n_lines = 0;
    for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let value: serde_json::Value = serde_json::from_slice(line).expect("generated rows parse");
        black_box(value);
        n_lines += 1;
    }
    n_lines
}

fn decode(c: &mut Criterion) {
    let size_mb: usize = std::env::var("DECODE_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let raw = generated_log(size_mb << 20, Compression::None);
    let zstd = generated_log(size_mb << 20, Compression::Zstd);
    let mut group = c.benchmark_group("decode");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    group.throughput(Throughput::Bytes(raw.len() as u64));
    group.bench_function("value_parse_raw", |b| b.iter(|| value_parse(&raw)));
    group.bench_function("typed_decode_raw", |b| b.iter(|| typed_decode(&raw)));
    // Throughput is stated in decompressed bytes, so the zstd row compares directly.
    group.bench_function("typed_decode_zstd", |b| b.iter(|| typed_decode(&zstd)));
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (raw_path, zstd_path) = (
        dir.path().join("g.v3.jsonl"),
        dir.path().join("g.v3.jsonl.zstd"),
    );
    std::fs::write(&raw_path, &raw).expect("write the raw file");
    std::fs::write(&zstd_path, &zstd).expect("write the zstd file");
    group.bench_function("file_typed_decode_raw", |b| {
        b.iter(|| typed_decode_file(&raw_path))
    });
    group.bench_function("file_typed_decode_zstd", |b| {
        b.iter(|| typed_decode_file(&zstd_path))
    });
    group.finish();
}

criterion_group!(benches, decode);
criterion_main!(benches);

//! Migration throughput (issues #4 and #5) against a `serde_json::Value` parse-and-reserialize
//! of the same file, measured in the same run so that the ratio means something on a noisy
//! machine.
//!
//! ```text
//! cargo run --release -p sessionlog-benches --bin migrate_bench -- [--events N] [--version V]
//!     [--runs R] [--json]
//! ```
//!
//! The source is a generated log of version V (default 2, `sessionlog gen --version V`). The
//! migration is `sessionlog migrate` itself (`engine::migrate::migrate_file`): read, convert,
//! admit as V3, prove every request, write, fsync and publish. The baseline reads the same
//! file line by line, parses each line into a `Value`, serializes it again into a file, and
//! fsyncs it. Runs alternate between the two; the medians are reported. Target: ratio >= 0.5.

use std::path::Path;
use std::time::Instant;

use serde_json::json;
use sessionlog_benches::data::{reserialize, write_generated_log};
use sessionlog_benches::measure::median;
use sessionlog_engine::migrate::{migrate_file, MigrateOptions, Outcome};
use sessionlog_format::FormatVersion;

/// mimalloc instead of the system allocator: decoding JSON builds many small strings and
/// vectors, and glibc's malloc spent about half of `migrate`'s time in its free-list upkeep.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Args {
    events: u64,
    version: u64,
    runs: usize,
    json: bool,
}

fn parse_args() -> Args {
    let mut args = Args {
        events: 200_000,
        version: 2,
        runs: 3,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut number = || it.next().and_then(|v| v.parse().ok());
        match arg.as_str() {
            "--events" => args.events = number().expect("--events N"),
            "--version" => args.version = number().expect("--version V"),
            "--runs" => args.runs = number().map(|n| n as usize).expect("--runs R"),
            "--json" => args.json = true,
            other => panic!("unknown argument {other}; see the module docs"),
        }
    }
    args
}

fn main() {
    let args = parse_args();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let version = FormatVersion::from_number(args.version).expect("a known version");
    let source_dir = dir.path().join("source");
    std::fs::create_dir(&source_dir).expect("the source directory");
    let source = source_dir.join(format!("session.v{}.jsonl", args.version));
    write_generated_log(&source, version, args.events, 1);
    let bytes = std::fs::metadata(&source).expect("the source").len();
    let mib = bytes as f64 / (1024.0 * 1024.0);
    eprintln!(
        "source: {} events of v{}, {mib:.1} MiB",
        args.events, args.version
    );

    let mut baseline = Vec::new();
    let mut migrate = Vec::new();
    let mut requests = 0;
    for run in 0..args.runs {
        let out = dir.path().join(format!("reserialized-{run}.jsonl"));
        let started = Instant::now();
        reserialize(&source, &out);
        baseline.push(started.elapsed().as_secs_f64());
        std::fs::remove_file(&out).expect("the baseline output");

        let out_dir = dir.path().join(format!("migrated-{run}"));
        let options = MigrateOptions {
            out_dir: Some(out_dir.clone()),
            ..MigrateOptions::default()
        };
        let relative = Path::new(source.file_name().expect("a file name"));
        let started = Instant::now();
        let outcome = migrate_file(&source, relative, &options);
        migrate.push(started.elapsed().as_secs_f64());
        match outcome.outcome {
            Outcome::Converted {
                requests_proved: Some(proved),
            } => requests = proved,
            other => panic!("the generated log did not convert and prove: {other:?}"),
        }
        std::fs::remove_dir_all(&out_dir).expect("the migrated output");
        eprintln!(
            "run {run}: reserialize {:.3} s, migrate {:.3} s",
            baseline[run], migrate[run]
        );
    }
    let baseline_s = median(&baseline);
    let migrate_s = median(&migrate);
    let baseline_mibs = mib / baseline_s;
    let migrate_mibs = mib / migrate_s;
    let ratio = migrate_mibs / baseline_mibs;
    if args.json {
        let report = json!({
            "events": args.events,
            "version": args.version,
            "bytes": bytes,
            "requestsProved": requests,
            "reserializeMiBs": baseline_mibs,
            "migrateMiBs": migrate_mibs,
            "ratio": ratio,
        });
        println!("{report}");
    } else {
        println!(
            "migrate v{} -> v3: {migrate_mibs:.1} MiB/s ({requests} requests proved)",
            args.version
        );
        println!("Value parse + reserialize: {baseline_mibs:.1} MiB/s");
        println!("ratio: {ratio:.2}x (target >= 0.5x)");
    }
}

//! `check` of a generated log (`sessionlog check FILE`: decode, every rule, the fold, and for
//! a log older than V4 the in-memory migration that tells whether it has a V4 successor)
//! against `serde_json` into `IgnoredAny` over the same lines, read the same way (issue #23).
//!
//! Both sides run in fresh child processes, so each peak RSS is the operation's own. The
//! baseline reads the file through a 64 KiB buffer, splits it at newlines and parses each line
//! (the header too) into `serde::de::IgnoredAny`: the parser's limit on these bytes, which
//! validates the JSON and builds nothing.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use sessionlog_engine::check::{check_file, CheckOptions};
use sessionlog_format::FormatVersion;

use crate::compare::report::{params, Bound, Cell, Stat, Target};
use crate::compare::session::child;
use crate::data::write_generated_log;

/// The seed of the generated logs (the reference log is seed 1).
const CHECK_SEED: u64 = 1;

/// The versions measured: V3 (read, then migrated to V4 in memory) and V4 (read only).
pub const CHECK_VERSIONS: [FormatVersion; 2] = [FormatVersion::V3, FormatVersion::V4];

/// Measures `check` of a generated `version` log of `n_events` under `dir`, alternating with
/// the baseline for `runs` runs.
pub fn check_cell(dir: &Path, version: FormatVersion, n_events: u64, runs: usize) -> Cell {
    let source = dir.join(format!("check-v{}.jsonl", version.number()));
    write_generated_log(&source, version, n_events, CHECK_SEED);
    let size_bytes = std::fs::metadata(&source).expect("the source").len();
    let mib = size_bytes as f64 / f64::from(1 << 20);
    let path = source.to_str().expect("a UTF-8 work path");
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let (mut ours_peak, mut theirs_peak) = (0, 0);
    for _ in 0..runs {
        let (seconds, peak_kib) = child(&["ignored-any", path]);
        theirs.push(mib / seconds);
        theirs_peak = u64::max(theirs_peak, peak_kib);
        let (seconds, peak_kib) = child(&["check", path]);
        ours.push(mib / seconds);
        ours_peak = u64::max(ours_peak, peak_kib);
    }
    std::fs::remove_file(&source).expect("the source");
    let what = if version < FormatVersion::V4 {
        "decode, every rule, the fold, then the in-memory migration to V4 with its proof"
    } else {
        "decode, every rule, the fold"
    };
    Cell {
        workload: "check",
        params: params(&[("version", version.number()), ("events", n_events)]),
        unit: "MiB/s",
        higher_is_better: true,
        ours: Stat::new(ours, ours_peak),
        baselines: vec![("ignored-any", Stat::new(theirs, theirs_peak))],
        targets: vec![Target {
            against: "ignored-any",
            bound: Bound::AtLeast(0.5),
        }],
        note: format!(
            "a {mib:.1} MiB generated v{} log (seed {CHECK_SEED}); check_file ({what}) vs \
             serde_json into IgnoredAny per line; each side in a fresh process",
            version.number()
        ),
    }
}

/// The child side: `check PATH` or `ignored-any PATH`, timed; the events or lines seen.
pub fn run_child(kind: &str, path: &Path) -> (f64, usize) {
    let started = std::time::Instant::now();
    let count = match kind {
        "check" => {
            let report = check_file(path, CheckOptions::default());
            assert!(
                report.ok && report.migration.is_none(),
                "the generated log checks clean: {:?} {:?}",
                report.errors,
                report.migration
            );
            usize::try_from(report.events).expect("an in-memory count")
        }
        "ignored-any" => parse_lines_ignored(path),
        other => panic!("unknown check child {other}"),
    };
    (started.elapsed().as_secs_f64(), count)
}

/// Parses every line of `path` into `IgnoredAny`; the number of lines.
fn parse_lines_ignored(path: &Path) -> usize {
    let mut input = BufReader::with_capacity(1 << 16, File::open(path).expect("the source"));
    let mut line = Vec::new();
    let mut n_lines = 0;
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line).expect("a line") == 0 {
            return n_lines;
        }
        let row = line.strip_suffix(b"\n").unwrap_or(&line);
        serde_json::from_slice::<serde::de::IgnoredAny>(row).expect("a JSON line");
        n_lines += 1;
    }
}

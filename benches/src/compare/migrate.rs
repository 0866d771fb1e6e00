//! Migrating a generated V0 or V2 log to V3 (`sessionlog migrate`, proof included) against
//! a `serde_json::Value` parse and reserialize of the same file, as `migrate_bench` measures.

use std::path::Path;

use sessionlog_engine::migrate::{migrate_file, MigrateOptions, Outcome};
use sessionlog_format::FormatVersion;

use crate::compare::report::{params, Bound, Cell, Stat, Target};
use crate::data::{reserialize, write_generated_log};
use crate::measure::measure;

/// Measures one migration of a `version` log of `n_events` (before V0's expansion) under
/// `dir`, alternating with the baseline for `runs` runs.
pub fn migrate_cell(dir: &Path, version: FormatVersion, n_events: u64, runs: usize) -> Cell {
    let source_dir = dir.join(format!("migrate-v{}", version.number()));
    std::fs::create_dir_all(&source_dir).expect("the source directory");
    let source = source_dir.join(format!("session.v{}.jsonl", version.number()));
    write_generated_log(&source, version, n_events, 1);
    let mib = std::fs::metadata(&source).expect("the source").len() as f64 / f64::from(1 << 20);
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let (mut ours_peak, mut theirs_peak) = (0, 0);
    for run in 0..runs {
        let out = dir.join(format!("reserialized-{run}.jsonl"));
        let baseline = measure(|| reserialize(&source, &out));
        std::fs::remove_file(&out).expect("the baseline output");
        theirs.push(mib / baseline.seconds);
        theirs_peak = u64::max(theirs_peak, baseline.peak_kib);

        let out_dir = dir.join(format!("migrated-{run}"));
        let options = MigrateOptions {
            out_dir: Some(out_dir.clone()),
            ..MigrateOptions::default()
        };
        let relative = Path::new(source.file_name().expect("a file name"));
        let migrated = measure(|| migrate_file(&source, relative, &options));
        assert!(
            matches!(
                migrated.value.outcome,
                Outcome::Converted {
                    requests_proved: Some(_)
                }
            ),
            "the generated log converts and proves: {:?}",
            migrated.value.outcome
        );
        std::fs::remove_dir_all(&out_dir).expect("the migrated output");
        ours.push(mib / migrated.seconds);
        ours_peak = u64::max(ours_peak, migrated.peak_kib);
    }
    std::fs::remove_dir_all(&source_dir).expect("the source directory");
    let target = (version == FormatVersion::V2).then_some(Target {
        against: "value-reserialize",
        bound: Bound::AtLeast(0.5),
    });
    Cell {
        workload: if version == FormatVersion::V0 {
            "migrate-v0"
        } else {
            "migrate-v2"
        },
        params: params(&[("events", n_events)]),
        unit: "MiB/s",
        higher_is_better: true,
        ours: Stat::new(ours, ours_peak),
        baselines: vec![("value-reserialize", Stat::new(theirs, theirs_peak))],
        targets: target.into_iter().collect(),
        note: format!(
            "a {mib:.1} MiB generated v{} log; migrate_file (read, convert, admit, prove, write, \
             fsync, link) vs Value parse + reserialize + fsync",
            version.number()
        ),
    }
}

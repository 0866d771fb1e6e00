//! The comparison harness behind `compare` (issue #12): every workload against sessionlog
//! and each baseline in one run, at several scales, with the cross-cell targets.

pub mod append;
pub mod check;
pub mod migrate;
pub mod plot;
pub mod report;
pub mod session;

use std::path::Path;

use serde_json::{json, Value};
use sessionlog_format::FormatVersion;

use self::append::{append_cells, AppendShape};
use self::report::{Bound, Cell, Summary};
use self::session::{session_cells, verify_sessions_cell, SessionShape};

/// Every workload name that a complete report carries.
pub const WORKLOADS: [&str; 11] = [
    "append",
    "import",
    "size",
    "cold-open-derive",
    "derive-after-append",
    "point-in-time",
    "verify",
    "verify-sessions",
    "migrate-v0",
    "migrate-v2",
    "check",
];

/// The groups of workloads, for `--only`.
pub const GROUPS: [&str; 4] = ["append", "session", "migrate", "check"];

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    pub quick: bool,
    /// Events of the single-session workloads, one cell each.
    pub scales: Vec<u64>,
    /// Stores of many sessions that `verify` reads (in the `session` group): sessions, and
    /// events in each; one cell each.
    pub verify_sessions: Vec<(u64, u64)>,
    /// Events of the migration sources (V0: before its stream expansion).
    pub migrate_scales: Vec<u64>,
    /// Events of the generated logs that `check` reads, one cell per version and scale.
    pub check_scales: Vec<u64>,
    pub runs: usize,
    /// Runs at scales of a million events and more (each run there takes minutes).
    pub runs_large: usize,
    pub point_reads: usize,
    pub append_rounds: usize,
    pub append_batches_per_round: usize,
    /// Which groups run: `append`, `session` (import, size, opens, reads, verify, verify of
    /// many sessions), `migrate`, `check`.
    pub groups: Vec<String>,
    /// The baselines of the session workloads (all by default); a very large scale can be
    /// run against fewer of them.
    pub session_baselines: Vec<crate::backends::Baseline>,
}

impl Config {
    /// The full run: 1k to 100k events, five append rounds of 32 batches per session.
    pub fn full() -> Config {
        Config {
            quick: false,
            scales: vec![1_000, 10_000, 100_000],
            verify_sessions: vec![(200, 200), (50, 1_000)],
            migrate_scales: vec![1_000, 10_000, 100_000],
            // The reference log: 70,000 events, 96 MB of V3.
            check_scales: vec![70_000],
            runs: 3,
            runs_large: 1,
            point_reads: 5,
            append_rounds: 5,
            append_batches_per_round: 32,
            groups: GROUPS.iter().map(|g| (*g).to_owned()).collect(),
            session_baselines: crate::backends::BASELINES.to_vec(),
        }
    }

    /// A smoke run, small enough for CI in the test profile: every workload, tiny inputs.
    pub fn quick() -> Config {
        Config {
            quick: true,
            scales: vec![300],
            verify_sessions: vec![(3, 100)],
            migrate_scales: vec![200],
            check_scales: vec![300],
            runs: 1,
            runs_large: 1,
            point_reads: 1,
            append_rounds: 1,
            append_batches_per_round: 2,
            groups: GROUPS.iter().map(|g| (*g).to_owned()).collect(),
            session_baselines: crate::backends::BASELINES.to_vec(),
        }
    }

    fn runs_at(&self, n_events: u64) -> usize {
        if n_events >= 1_000_000 {
            self.runs_large
        } else {
            self.runs
        }
    }
}

/// Runs every workload under `dir`, printing progress to stderr.
pub fn run(config: &Config, dir: &Path) -> Vec<Cell> {
    let mut cells = Vec::new();
    let runs_group = |g: &str| config.groups.iter().any(|x| x == g);
    for batch_events in [1, 10, 100].into_iter().filter(|_| runs_group("append")) {
        eprintln!("append: batches of {batch_events}, 1, 4 and 16 sessions in turns");
        let shapes: Vec<AppendShape> = [1, 4, 16]
            .into_iter()
            .map(|n_sessions| AppendShape {
                batch_events,
                n_sessions,
                rounds: config.append_rounds,
                batches_per_round: config.append_batches_per_round,
            })
            .collect();
        cells.extend(append_cells(dir, &shapes));
    }
    for &n_events in config.scales.iter().filter(|_| runs_group("session")) {
        eprintln!("session workloads: {n_events} events");
        let sub = dir.join(format!("session-{n_events}"));
        std::fs::create_dir_all(&sub).expect("a scale directory");
        let shape = SessionShape {
            n_events,
            runs: config.runs_at(n_events),
            baselines: config.session_baselines.clone(),
            point_reads: if n_events >= 1_000_000 {
                1
            } else {
                config.point_reads
            },
        };
        cells.extend(session_cells(&sub, shape));
        remove(&sub);
    }
    for &(n_sessions, per) in config
        .verify_sessions
        .iter()
        .filter(|_| runs_group("session"))
    {
        eprintln!("verify: {n_sessions} sessions of {per} events");
        let sub = dir.join(format!("sessions-{n_sessions}x{per}"));
        std::fs::create_dir_all(&sub).expect("a store directory");
        cells.push(verify_sessions_cell(&sub, n_sessions, per, config.runs));
        remove(&sub);
    }
    let versions = [FormatVersion::V0, FormatVersion::V2];
    for version in versions.into_iter().filter(|_| runs_group("migrate")) {
        for &n_events in &config.migrate_scales {
            eprintln!("migrate: v{} of {n_events} events", version.number());
            let runs = config.runs_at(n_events);
            cells.push(migrate::migrate_cell(dir, version, n_events, runs));
        }
    }
    for version in check::CHECK_VERSIONS
        .into_iter()
        .filter(|_| runs_group("check"))
    {
        for &n_events in &config.check_scales {
            eprintln!("check: v{} of {n_events} events", version.number());
            let runs = config.runs_at(n_events);
            cells.push(check::check_cell(dir, version, n_events, runs));
        }
    }
    cells.sort_by_key(|c| WORKLOADS.iter().position(|w| *w == c.workload));
    cells
}

fn remove(dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(dir) {
        eprintln!("note: could not remove {}: {e}", dir.display());
    }
}

/// The targets that span cells.
pub fn summaries(cells: &[Cell]) -> Vec<Summary> {
    let mut out = Vec::new();
    for batch_events in [1, 10, 100] {
        let rate = |sessions: u64| {
            cells
                .iter()
                .find(|c| {
                    c.workload == "append"
                        && c.param("batchEvents") == Some(batch_events)
                        && c.param("sessions") == Some(sessions)
                })
                .map(|c| c.ours.median())
        };
        out.push(Summary {
            name: match batch_events {
                1 => "group commit, batches of 1: 16 sessions / 1 session",
                10 => "group commit, batches of 10: 16 sessions / 1 session",
                _ => "group commit, batches of 100: 16 sessions / 1 session",
            },
            value: rate(16).zip(rate(1)).map(|(many, one)| many / one),
            bound: Bound::AtLeast(4.0),
            note: "sessionlog's total durable batches/s".into(),
        });
    }
    let scaled = |workload: &str| -> Vec<&Cell> {
        cells.iter().filter(|c| c.workload == workload).collect()
    };
    let derive: Vec<f64> = scaled("derive-after-append")
        .iter()
        .map(|c| c.ours.median())
        .collect();
    let spread = |values: &[f64]| {
        let lo = values.iter().copied().fold(f64::MAX, f64::min);
        let hi = values.iter().copied().fold(f64::MIN, f64::max);
        (values.len() >= 2).then(|| hi / lo)
    };
    out.push(Summary {
        name: "derive after one append: slowest / fastest across scales",
        value: spread(&derive),
        bound: Bound::AtMost(2.0),
        note: "flat means O(1) in the log's length".into(),
    });
    let opens = scaled("cold-open-derive");
    let open_peaks: Vec<f64> = opens.iter().map(|c| c.ours.peak_kib as f64).collect();
    let growth = opens.first().zip(opens.last()).map(|(a, b)| {
        b.param("events").unwrap_or(1) as f64 / a.param("events").unwrap_or(1) as f64
    });
    out.push(Summary {
        name: "cold open peak RSS: largest / smallest scale",
        value: open_peaks
            .first()
            .zip(open_peaks.last())
            .map(|(a, b)| b / a),
        bound: Bound::AtMost(2.0),
        note: format!(
            "the log grows {}x between them; bounded by checkpoint + tail, not the log",
            growth.map_or("-".into(), |g| format!("{g:.0}"))
        ),
    });
    // #23's absolute bounds, at the largest figure over the scales run.
    let largest = |workload: &str, of: &dyn Fn(&Cell) -> f64| {
        let most = scaled(workload)
            .into_iter()
            .max_by(|a, b| of(a).total_cmp(&of(b)));
        let at = most
            .and_then(|c| c.param("events"))
            .map_or("-".to_owned(), |n| n.to_string());
        (most.map(of), at)
    };
    let peak_mib = |c: &Cell| c.ours.peak_kib as f64 / 1024.0;
    for (name, workload, max_mib) in [
        (
            "import peak RSS (MiB), largest over the scales",
            "import",
            256.0,
        ),
        (
            "verify peak RSS (MiB), largest over the scales",
            "verify",
            64.0,
        ),
    ] {
        let (value, at) = largest(workload, &peak_mib);
        out.push(Summary {
            name,
            value,
            bound: Bound::AtMost(max_mib),
            note: format!("at {at} events; the operation's own process"),
        });
    }
    let (value, at) = largest("cold-open-derive", &|c: &Cell| c.ours.median() * 1e3);
    out.push(Summary {
        name: "cold open + derive (ms), slowest over the scales",
        value,
        bound: Bound::AtMost(50.0),
        note: format!("at {at} events; median of the runs"),
    });
    out
}

/// Facts about the machine for the report.
pub fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
    json!({
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "cpuModel": model,
        "memoryMiB": mem_kib.map(|k| k / 1024),
        "os": std::env::consts::OS,
        "allocator": "mimalloc",
        "debugAssertions": cfg!(debug_assertions),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::report::{params, Stat};

    fn cell(workload: &'static str, n_events: u64, median: f64, peak_mib: u64) -> Cell {
        Cell {
            workload,
            params: params(&[("events", n_events)]),
            unit: "s",
            higher_is_better: false,
            ours: Stat::new(vec![median], peak_mib * 1024),
            baselines: Vec::new(),
            targets: Vec::new(),
            note: String::new(),
        }
    }

    fn summary<'s>(summaries: &'s [Summary], name: &str) -> &'s Summary {
        summaries
            .iter()
            .find(|s| s.name.starts_with(name))
            .unwrap_or_else(|| panic!("no summary {name}"))
    }

    #[test]
    fn the_absolute_bounds_take_the_largest_figure_over_the_scales() {
        let cells = [
            cell("import", 1_000, 0.1, 300),
            cell("import", 1_000_000, 9.0, 200),
            cell("verify", 1_000, 0.1, 20),
            cell("verify", 1_000_000, 3.0, 60),
            cell("cold-open-derive", 1_000, 0.004, 20),
            cell("cold-open-derive", 1_000_000, 0.051, 30),
        ];
        let found = summaries(&cells);
        let import = summary(&found, "import peak RSS");
        assert_eq!(import.value, Some(300.0));
        assert_eq!(import.met(), Some(false));
        assert!(import.note.starts_with("at 1000 events"), "{}", import.note);
        let verify = summary(&found, "verify peak RSS");
        assert_eq!((verify.value, verify.met()), (Some(60.0), Some(true)));
        let open = summary(&found, "cold open + derive");
        assert_eq!(open.met(), Some(false));
        assert!(open.note.starts_with("at 1000000 events"), "{}", open.note);
        let none = summaries(&[]);
        assert_eq!(summary(&none, "verify peak RSS").met(), None);
    }
}

//! The side-by-side comparison (issue #12): sessionlog against JSONL + fsync, `.jsonl.zstd`,
//! SQLite (WAL, `synchronous=FULL`) and raw redb, on the same workloads in one run.
//!
//! ```text
//! cargo run --release -p sessionlog-benches --bin compare -- [--quick] [--json]
//!     [--scales 1000,10000,100000] [--migrate-scales N,..] [--check-scales N,..] [--runs R]
//!     [--verify-sessions 200x200,50x1000|none]
//!     [--plots DIR] [--only append,session,migrate,check] [--session-baselines jsonl,..] [--markdown FILE]
//!     [--dir DIR]
//! cargo run --release -p sessionlog-benches --bin compare -- --write-log VERSION EVENTS SEED PATH
//! ```
//!
//! Without `--json` it prints markdown tables; with it, one JSON document with every workload,
//! its medians, peak memory and ratios to every baseline. `--plots DIR` writes the SVG scaling
//! curves there, and `--markdown FILE` the tables. `--session-baselines` limits the baselines
//! of the session workloads (for a scale too large to build every store at). Work files go to a temporary directory under `--dir` (default: the current
//! directory, so that fsync hits a real disk rather than a tmpfs). BENCHMARKS.md explains the
//! workloads and how memory is measured. `--write-log` writes one generated log and exits: the
//! inputs the profiles in BENCHMARKS.md name (the `check` cells' log is `3 70000 1` or `4 70000 1`).
//! `--verify-sessions` names the stores of many sessions that the `session` group verifies
//! (SESSIONSxEVENTS each, the sessions the logs of seeds 1 and up; `none` for none).

use std::path::PathBuf;

use sessionlog_benches::backends::Baseline;
use sessionlog_benches::compare::{self, plot, report, Config};
use sessionlog_benches::data::write_generated_log;
use sessionlog_format::FormatVersion;

/// The CLI's allocator, so the figures are the ones users get.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Args {
    config: Config,
    json: bool,
    plots: Option<PathBuf>,
    markdown: Option<PathBuf>,
    dir: PathBuf,
}

fn numbers(value: Option<String>, flag: &str) -> Vec<u64> {
    let value = value.unwrap_or_else(|| usage(&format!("{flag} needs a value")));
    value
        .split(',')
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| usage(&format!("{flag}: bad number {v}")))
        })
        .collect()
}

/// `SESSIONSxEVENTS,..` (`none` for no store).
fn session_stores(value: Option<String>, flag: &str) -> Vec<(u64, u64)> {
    let value = value.unwrap_or_else(|| usage(&format!("{flag} needs a value")));
    if value == "none" {
        return Vec::new();
    }
    value
        .split(',')
        .map(|store| {
            let parsed = store.trim().split_once('x').and_then(|(sessions, events)| {
                Some((sessions.parse().ok()?, events.parse().ok()?))
            });
            match parsed {
                Some((sessions, events)) if sessions > 0 && events > 0 => (sessions, events),
                _ => usage(&format!("{flag}: bad store {store} (SESSIONSxEVENTS)")),
            }
        })
        .collect()
}

fn usage(message: &str) -> ! {
    eprintln!("compare: {message}; see the module docs (benches/src/bin/compare.rs)");
    std::process::exit(2)
}

fn parse_args(raw: Vec<String>) -> Args {
    let quick = raw.iter().any(|a| a == "--quick");
    let mut args = Args {
        config: if quick {
            Config::quick()
        } else {
            Config::full()
        },
        json: false,
        plots: None,
        markdown: None,
        dir: PathBuf::from("."),
    };
    let mut it = raw.into_iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => {}
            "--json" => args.json = true,
            "--scales" => args.config.scales = numbers(it.next(), "--scales"),
            "--migrate-scales" => {
                args.config.migrate_scales = numbers(it.next(), "--migrate-scales")
            }
            "--check-scales" => args.config.check_scales = numbers(it.next(), "--check-scales"),
            "--verify-sessions" => {
                args.config.verify_sessions = session_stores(it.next(), "--verify-sessions")
            }
            "--runs" => {
                let runs = numbers(it.next(), "--runs");
                args.config.runs = runs.first().map_or(1, |&r| r.max(1) as usize);
            }
            "--only" => {
                let groups = it.next().unwrap_or_else(|| usage("--only GROUP,.."));
                args.config.groups = groups.split(',').map(str::to_owned).collect();
                if let Some(bad) = args
                    .config
                    .groups
                    .iter()
                    .find(|g| !compare::GROUPS.contains(&g.as_str()))
                {
                    usage(&format!(
                        "--only: unknown group {bad} (append, session, migrate, check)"
                    ));
                }
            }
            "--session-baselines" => {
                let names = it
                    .next()
                    .unwrap_or_else(|| usage("--session-baselines NAME,.."));
                args.config.session_baselines = names
                    .split(',')
                    .map(|name| {
                        Baseline::from_name(name).unwrap_or_else(|| {
                            usage(&format!(
                                "--session-baselines: unknown baseline {name} (jsonl, \
                                 jsonl.zstd, sqlite, redb)"
                            ))
                        })
                    })
                    .collect();
            }
            "--plots" => args.plots = it.next().map(PathBuf::from),
            "--markdown" => args.markdown = it.next().map(PathBuf::from),
            "--dir" => {
                args.dir = it
                    .next()
                    .map(PathBuf::from)
                    .unwrap_or_else(|| usage("--dir DIR"))
            }
            other => usage(&format!("unknown argument {other}")),
        }
    }
    args
}

/// `--write-log VERSION EVENTS SEED PATH`: the generated log the cells would write.
fn write_log(args: &[String]) {
    let [version, events, seed, path] = args else {
        usage("--write-log VERSION EVENTS SEED PATH")
    };
    let number = |v: &String| {
        v.parse::<u64>()
            .unwrap_or_else(|_| usage(&format!("--write-log: bad number {v}")))
    };
    let version = FormatVersion::from_number(number(version))
        .unwrap_or_else(|| usage("--write-log: no such format version"));
    write_generated_log(&PathBuf::from(path), version, number(events), number(seed));
}

fn main() {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    if raw.first().map(String::as_str) == Some("--child") {
        println!("{}", compare::session::child_main(&raw[1..]));
        return;
    }
    if raw.first().map(String::as_str) == Some("--write-log") {
        write_log(&raw[1..]);
        return;
    }
    let command = raw.join(" ");
    let args = parse_args(raw);
    std::fs::create_dir_all(&args.dir).expect("the work directory");
    let dir = tempfile::Builder::new()
        .prefix(".compare-")
        .tempdir_in(&args.dir)
        .expect("a work directory");
    let cells = compare::run(&args.config, dir.path());
    let summaries = compare::summaries(&cells);
    if let Some(plots) = &args.plots {
        match plot::write_plots(plots, &cells) {
            Ok(files) => eprintln!("plots: {} in {}", files.join(", "), plots.display()),
            Err(e) => {
                eprintln!("compare: plotting failed: {e}");
                std::process::exit(1);
            }
        }
    }
    let tables = report::markdown(&cells, &summaries);
    if let Some(path) = &args.markdown {
        if let Err(e) = std::fs::write(path, &tables) {
            eprintln!("compare: {}: {e}", path.display());
            std::process::exit(1);
        }
    }
    if args.json {
        let meta = serde_json::json!({
            "command": format!("compare {command}"),
            "quick": args.config.quick,
            "scales": args.config.scales,
            "migrateScales": args.config.migrate_scales,
            "checkScales": args.config.check_scales,
            "verifySessions": args.config.verify_sessions,
            "runs": args.config.runs,
            "machine": compare::machine(),
        });
        let document = report::json_document(meta, &cells, &summaries);
        println!(
            "{}",
            serde_json::to_string_pretty(&document).expect("JSON serializes")
        );
    } else {
        println!("{tables}");
    }
}

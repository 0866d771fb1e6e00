//! `demo`: the README's main job: generate a dsh-like root of every layout, migrate it, import
//! it into a fresh store, verify the store, audit the root, and show one session's requests.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::Args;
use serde_json::json;

use sessionlog_engine::demo::{run, DemoStep};

use crate::commands::Global;
use crate::output::{hex, print_json, EXIT_FAULT, EXIT_OK};

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// A new directory to write into; default: a fresh one under the system temp directory.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Events of the base session (the largest session has twice as many).
    #[arg(long, default_value_t = 1500)]
    events: u64,
}

/// Runs the engine's main job and prints each step as it ends.
pub(crate) fn demo(global: Global, args: DemoArgs) -> anyhow::Result<ExitCode> {
    let dir = match &args.dir {
        Some(dir) => dir.clone(),
        None => fresh_dir(),
    };
    let root = dir.join("root");
    let talk = !global.json && !global.quiet;
    if talk {
        println!("== generate a dsh session root under {}", root.display());
    }
    let mut on_step = |step: DemoStep<'_>| {
        if talk {
            // A failed print of a progress line is not the demo failing.
            let _ = print_step(&root, &dir, step);
        }
    };
    let report = run(&dir, args.events, &mut on_step)?;
    let session = &report.shown_session;
    if talk {
        println!("== requests and cache prefixes of {session}");
        // The whole table is `sessionlog requests`; the demo keeps the first request and
        // every request whose prefix broke, which is where the story is.
        let mut shown = report.requests.clone();
        shown
            .requests
            .retain(|row| row.index == 0 || row.prefix.broken_by.is_some());
        let omitted = report.requests.requests.len() - shown.requests.len();
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        crate::requests_command::write_table(&mut out, &shown)?;
        std::io::Write::flush(&mut out)?;
        println!(
            "({omitted} requests that kept the whole previous prefix are not shown; \
             `sessionlog requests --db {} {session}` lists all)",
            report.store.display()
        );
    }
    let ok = report.ok();
    if global.json {
        let totals = &report.totals;
        print_json(&json!({
            "dir": dir.display().to_string(),
            "root": report.root.display().to_string(),
            "store": report.store.display().to_string(),
            "files": report.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
            "sessions": report.verified.len(),
            "verified": report.verified.iter().all(|r| r.ok()),
            "audit": {
                "sessions": totals.sessions,
                "ok": totals.ok,
                "requests": totals.requests,
                "predictedReuse": totals.predicted_reuse_ratio,
            },
            "shownSession": session,
            "ok": ok,
        }))?;
    } else {
        println!();
        println!("store written to {}", report.store.display());
        println!("session root at  {}", report.root.display());
        println!(
            "explore: sessionlog show --db {} {session}",
            report.store.display()
        );
    }
    Ok(ExitCode::from(if ok { EXIT_OK } else { EXIT_FAULT }))
}

/// One step's lines, with the tables of `migrate` and `audit`.
fn print_step(root: &Path, dir: &Path, step: DemoStep<'_>) -> anyhow::Result<()> {
    match step {
        DemoStep::Wrote(path) => println!("  wrote {}", relative(root, path)),
        DemoStep::Migrated(outcomes) => {
            println!("== migrate every older log to a proven V3 successor beside it");
            crate::migrate_command::print_table(outcomes, false);
            println!(
                "== import into the store {}",
                dir.join("sessions.redb").display()
            );
        }
        DemoStep::Imported(report) => {
            println!("  imported {} ({} events)", report.session, report.events)
        }
        DemoStep::Verified(reports) => {
            println!("== verify the store");
            for report in reports {
                let status = if report.ok() { "ok" } else { "FAULT" };
                println!(
                    "  {}: {status} ({} events, head {})",
                    report.session,
                    report.events,
                    hex(&report.head_chain)
                );
            }
        }
        DemoStep::Audited(rows, totals) => {
            println!("== audit the root");
            crate::audit_command::print_table(rows)?;
            println!("{}", crate::audit_command::totals_line(totals));
        }
    }
    Ok(())
}

/// A new, uniquely named directory under the system temp directory (not created yet).
fn fresh_dir() -> PathBuf {
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    std::env::temp_dir().join(format!("sessionlog-demo-{}-{stamp}", std::process::id()))
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

//! `demo`: the README's main job: generate a dsh-like root of every layout, migrate it, import
//! it into a fresh store, verify the store, audit the root, and show one session's requests.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::Args;
use serde_json::json;

use sessionlog_engine::audit::{audit_file, session_files, totals};
use sessionlog_engine::demo::{current_files, write_root};
use sessionlog_engine::migrate::{migrate_file, MigrateOptions, Outcome};
use sessionlog_engine::replay::SessionSource;
use sessionlog_engine::requests::{requests, RequestOptions};
use sessionlog_engine::store::Store;
use sessionlog_engine::transfer::import_file;
use sessionlog_format::SnapshotMode;

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

/// The session whose requests the demo shows.
const SHOWN_SESSION_DIR: &str = "demo-v3-raw";

pub(crate) fn demo(global: Global, args: DemoArgs) -> anyhow::Result<ExitCode> {
    let dir = match &args.dir {
        Some(dir) => dir.clone(),
        None => fresh_dir()?,
    };
    if dir.exists() && dir.read_dir()?.next().is_some() {
        anyhow::bail!(
            "{} is not empty; the demo writes only into a new directory",
            dir.display()
        );
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let root = dir.join("root");
    let store_path = dir.join("sessions.redb");
    let say = |text: &str| {
        if !global.json && !global.quiet {
            println!("{text}");
        }
    };

    say(&format!(
        "== generate a dsh session root under {}",
        root.display()
    ));
    let files = write_root(&root, args.events, &mut |path| {
        say(&format!("  wrote {}", relative(&root, path)));
    })?;

    say("== migrate every older log to a proven V3 successor beside it");
    let mut outcomes = Vec::new();
    for file in &files {
        let name = PathBuf::from(relative(&root, file));
        outcomes.push(migrate_file(file, &name, &MigrateOptions::default()));
    }
    if !global.json && !global.quiet {
        crate::migrate_command::print_table(&outcomes, false);
    }
    let refused = outcomes
        .iter()
        .any(|o| matches!(o.outcome, Outcome::Refused { .. }));

    say(&format!(
        "== import into the store {}",
        store_path.display()
    ));
    let store = Store::open(&store_path)
        .with_context(|| format!("cannot open the store {}", store_path.display()))?;
    let mut shown = None;
    for file in current_files(&files) {
        let report = import_file(&store, &file, SnapshotMode::Auto, &mut |_| {})
            .with_context(|| format!("cannot import {}", file.display()))?;
        say(&format!(
            "  imported {} ({} events)",
            report.session, report.events
        ));
        if file
            .parent()
            .is_some_and(|p| p.ends_with(SHOWN_SESSION_DIR))
        {
            shown = Some(report.session.clone());
        }
    }

    say("== verify the store");
    let verified = store.verify(&[])?;
    for report in &verified {
        let status = if report.ok() { "ok" } else { "FAULT" };
        say(&format!(
            "  {}: {status} ({} events, head {})",
            report.session,
            report.events,
            hex(&report.head_chain)
        ));
    }
    let store_ok = verified.iter().all(|r| r.ok());

    say("== audit the root");
    let rows: Vec<_> = session_files(&root)?
        .files
        .iter()
        .map(|(file, relative)| audit_file(file, relative, SnapshotMode::Auto))
        .collect();
    let totals = totals(&rows);
    if !global.json && !global.quiet {
        crate::audit_command::print_table(&rows)?;
        println!("{}", crate::audit_command::totals_line(&totals));
    }

    let session = shown.context("the demo root has its V3 session")?;
    say(&format!("== requests and cache prefixes of {session}"));
    let report = requests(
        SessionSource::Store {
            store: &store,
            session: &session,
        },
        RequestOptions::default(),
    )?;
    if !global.json && !global.quiet {
        // The whole table is `sessionlog requests`; the demo keeps the first request and
        // every request whose prefix broke, which is where the story is.
        let mut shown_report = report.clone();
        shown_report
            .requests
            .retain(|row| row.index == 0 || row.prefix.broken_by.is_some());
        let omitted = report.requests.len() - shown_report.requests.len();
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        crate::requests_command::write_table(&mut out, &shown_report)?;
        std::io::Write::flush(&mut out)?;
        println!(
            "({omitted} requests that kept the whole previous prefix are not shown; \
             `sessionlog --db {} requests {session}` lists all)",
            store_path.display()
        );
    }

    let ok = !refused && store_ok && totals.corrupt == 0 && totals.refused == 0;
    if global.json {
        print_json(&json!({
            "dir": dir.display().to_string(),
            "root": root.display().to_string(),
            "store": store_path.display().to_string(),
            "files": files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
            "sessions": verified.len(),
            "verified": store_ok,
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
        println!("store written to {}", store_path.display());
        println!("session root at  {}", root.display());
        println!(
            "explore: sessionlog --db {} show {session}",
            store_path.display()
        );
    }
    Ok(ExitCode::from(if ok { EXIT_OK } else { EXIT_FAULT }))
}

/// A new, uniquely named directory under the system temp directory (not created yet).
fn fresh_dir() -> anyhow::Result<PathBuf> {
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("sessionlog-demo-{}-{stamp}", std::process::id()));
    Ok(dir)
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

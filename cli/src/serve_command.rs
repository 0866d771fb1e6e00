//! `serve` (the store over HTTP) and `copy` (every session to another backend, verified).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, Context};
use clap::Args;
use serde_json::json;

use sessionlog_engine::log_store::copy_sessions;
use sessionlog_engine::open::{open_store, Access, Location};
use sessionlog_engine::salvage::SKIPPED_IMPORT_REASON;
use sessionlog_engine::store::default_path;
use sessionlog_server::{self as server, ServeConfig};

use crate::commands::Global;
use crate::output::{hex, print_json, EXIT_FAULT, EXIT_OK};

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The store: a redb file (default: $SESSIONLOG_DB, else the path in the README) or a
    /// postgres:// URL.
    #[arg(long, env = "SESSIONLOG_DB")]
    db: Option<String>,
    /// The address to listen on (port 0 picks a free port; the bound address is printed).
    #[arg(long, default_value = "127.0.0.1:7412")]
    listen: SocketAddr,
    /// A file holding the bearer token every endpoint but /health then requires.
    #[arg(long)]
    token_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct CopyArgs {
    /// The source: a redb file or a postgres:// URL.
    #[arg(long)]
    from: String,
    /// The target: a postgres:// URL or a redb file.
    #[arg(long)]
    to: String,
    /// Sessions to copy (all when none).
    sessions: Vec<String>,
}

fn db_or_default(db: Option<String>) -> anyhow::Result<String> {
    match db {
        Some(db) => Ok(db),
        None => default_path()
            .map(|p| p.display().to_string())
            .ok_or_else(|| anyhow!("no --db, no SESSIONLOG_DB and no HOME")),
    }
}

pub(crate) fn serve(global: Global, args: ServeArgs) -> anyhow::Result<ExitCode> {
    let config = ServeConfig {
        db: db_or_default(args.db)?,
        listen: args.listen,
        token_file: args.token_file,
    };
    server::init_logging();
    server::run(&config, |addr| {
        if global.json {
            let _ = print_json(&json!({ "listening": addr.to_string() }));
        } else {
            println!("listening on {addr}");
        }
    })
    .with_context(|| format!("serving {}", config.db))?;
    Ok(ExitCode::from(EXIT_OK))
}

pub(crate) fn copy(global: Global, args: CopyArgs) -> anyhow::Result<ExitCode> {
    // The source is only read: a copy never creates or writes it.
    let open = |location: &str, access| -> anyhow::Result<_> {
        let location = Location::parse(location)?;
        open_store(&location, access)
            .with_context(|| format!("cannot open the store {}", location.display()))
    };
    let from = open(&args.from, Access::Read)?;
    let to = open(&args.to, Access::Write)?;
    let quiet = global.quiet || global.json;
    let mut progress = |session: &str, next_seq: u64| {
        if !quiet {
            eprintln!("{session}: {next_seq} events copied");
        }
    };
    let copied = copy_sessions(from.as_ref(), to.as_ref(), &args.sessions, &mut progress)?;
    // Named sessions are copied or refused one by one; a copy of all says what it left out.
    let skipped = if args.sessions.is_empty() {
        from.interrupted_imports()?
    } else {
        Vec::new()
    };
    for session in &skipped {
        eprintln!("{session}: skipped: {SKIPPED_IMPORT_REASON}");
    }
    let ok = copied.iter().all(|c| c.report.ok());
    if global.json {
        let sessions: Vec<_> = copied
            .iter()
            .map(|c| {
                json!({
                    "session": c.session,
                    "copied": c.copied_events,
                    "events": c.events,
                    "headHash": hex(&c.head_chain),
                    "ok": c.report.ok(),
                    "faults": c.report.faults.iter().map(|f| json!({
                        "seq": f.seq, "kind": f.kind.name(), "message": f.message,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let skipped: Vec<_> = skipped
            .iter()
            .map(|s| json!({ "session": s, "reason": SKIPPED_IMPORT_REASON }))
            .collect();
        print_json(&json!({ "sessions": sessions, "skipped": skipped }))?;
    } else {
        for c in &copied {
            let state = if c.report.ok() { "ok" } else { "FAULTS" };
            println!(
                "{}: {} events ({} copied), head {}, verify {state}",
                c.session,
                c.events,
                c.copied_events,
                hex(&c.head_chain)
            );
            for fault in &c.report.faults {
                let seq = fault.seq.map(|s| s.to_string()).unwrap_or_default();
                eprintln!(
                    "{}@{seq}: {} [{}]",
                    c.session,
                    fault.message,
                    fault.kind.name()
                );
            }
        }
    }
    Ok(ExitCode::from(if ok { EXIT_OK } else { EXIT_FAULT }))
}

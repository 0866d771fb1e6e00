//! `salvage` and `backup`: getting everything intact out of a store, read-only.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::json;

use sessionlog_engine::salvage::{
    backup as backup_store, salvage as salvage_store, SKIPPED_IMPORT_REASON,
};

use crate::commands::Global;
use crate::output::{hex, print_json, EXIT_FAULT, EXIT_OK};
use crate::store_commands::DbArgs;

#[derive(Debug, Args)]
pub(crate) struct SalvageArgs {
    #[command(flatten)]
    db: DbArgs,
    /// The directory to write `<session>.v3.jsonl` files to (created if missing; existing
    /// files are never overwritten).
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct BackupArgs {
    #[command(flatten)]
    db: DbArgs,
    /// The new store file (never overwritten).
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
}

pub(crate) fn salvage(global: Global, args: SalvageArgs) -> anyhow::Result<ExitCode> {
    let store = args.db.open_read_only()?;
    let report = salvage_store(&*store, &args.output)?;
    crate::store_commands::print_damaged_frames(&*store, &args.db);
    for loss in &report.lost {
        let from = loss
            .from_seq
            .map(|s| format!("lost from seq {s}"))
            .unwrap_or_else(|| "not written".into());
        eprintln!("{}: {from}", loss.session);
        for reason in &loss.reasons {
            eprintln!("  {reason}");
        }
    }
    for skipped in &report.skipped {
        eprintln!(
            "{}: skipped ({} events): {}",
            skipped.session, skipped.events, skipped.reason
        );
    }
    if global.json {
        let written: Vec<_> = report
            .written
            .iter()
            .map(|w| json!({ "session": w.session, "file": w.file.display().to_string(), "events": w.events }))
            .collect();
        let lost: Vec<_> = report
            .lost
            .iter()
            .map(|l| json!({ "session": l.session, "fromSeq": l.from_seq, "reasons": l.reasons }))
            .collect();
        let frames: Vec<_> = report
            .damaged_frames
            .iter()
            .map(|f| {
                json!({
                    "frame": f.frame_idx,
                    "offset": f.offset_bytes,
                    "reason": f.reason,
                    "events": f.events.iter().map(|(key, seq)| json!({ "sessionKey": key, "seq": seq })).collect::<Vec<_>>(),
                    "entriesComplete": f.entries_complete,
                })
            })
            .collect();
        let skipped: Vec<_> = report
            .skipped
            .iter()
            .map(|s| json!({ "session": s.session, "events": s.events, "reason": s.reason }))
            .collect();
        print_json(&json!({
            "written": written,
            "lost": lost,
            "skipped": skipped,
            "damagedWalFrames": frames,
        }))?;
    } else if !global.quiet {
        for w in &report.written {
            println!("{}: {} events to {}", w.session, w.events, w.file.display());
        }
    }
    let code = if report.complete() {
        EXIT_OK
    } else {
        EXIT_FAULT
    };
    Ok(ExitCode::from(code))
}

pub(crate) fn backup(global: Global, args: BackupArgs) -> anyhow::Result<ExitCode> {
    let store = args.db.open_read_only()?;
    let report = backup_store(&*store, &args.output)?;
    let copied = &report.copied;
    for session in &report.skipped {
        eprintln!("{session}: skipped: {SKIPPED_IMPORT_REASON}");
    }
    if global.json {
        let sessions: Vec<_> = copied
            .iter()
            .map(|c| json!({ "session": c.session, "events": c.events, "headHash": hex(&c.head_chain) }))
            .collect();
        let skipped: Vec<_> = report
            .skipped
            .iter()
            .map(|s| json!({ "session": s, "reason": SKIPPED_IMPORT_REASON }))
            .collect();
        print_json(&json!({
            "file": args.output.display().to_string(),
            "sessions": sessions,
            "skipped": skipped,
        }))?;
    } else if !global.quiet {
        println!(
            "{}: {} sessions, {} events",
            args.output.display(),
            copied.len(),
            copied.iter().map(|c| c.events).sum::<u64>()
        );
    }
    Ok(ExitCode::from(EXIT_OK))
}

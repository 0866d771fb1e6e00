//! `audit`: one row per session file or stored session, a totals line, exit 1 on any fault.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::json;

use sessionlog_engine::audit::{
    audit_file, audit_store, session_files, totals, AuditRow, AuditTotals, Integrity,
};
use sessionlog_engine::walk::Walk;

use crate::commands::{Global, InputArgs};
use crate::output::{note_skipped, print_json, progress, skipped_json, EXIT_FAULT, EXIT_OK};
use crate::store_commands::DbArgs;

#[derive(Debug, Args)]
pub(crate) struct AuditArgs {
    #[command(flatten)]
    db: DbArgs,
    #[command(flatten)]
    input: InputArgs,
    /// Files or dsh session roots to walk; when none exist on disk, session ids in the store
    /// (all of its sessions when none are given).
    sources: Vec<String>,
}

pub(crate) fn audit(global: Global, args: AuditArgs) -> anyhow::Result<ExitCode> {
    let on_disk = !args.sources.is_empty()
        && args
            .sources
            .iter()
            .all(|s| std::path::Path::new(s).exists());
    let mut walk = Walk::default();
    let rows = if on_disk {
        for source in &args.sources {
            let found = session_files(source.as_ref())?;
            walk.files.extend(found.files);
            walk.skipped.extend(found.skipped);
        }
        note_skipped(&walk, global.quiet);
        audit_files(&global, &walk.files, args.input.snapshot.into())
    } else {
        let store = args.db.open_read_only()?;
        audit_store(&*store, &args.sources)?
    };
    let totals = totals(&rows);
    if global.json {
        let sessions: Vec<_> = rows
            .iter()
            .map(sessionlog_engine::documents::audit_row)
            .collect();
        print_json(&json!({
            "sessions": sessions,
            "skipped": skipped_json(&walk),
            "totals": {
                "sessions": totals.sessions,
                "ok": totals.ok,
                "corrupt": totals.corrupt,
                "refused": totals.refused,
                "events": totals.events,
                "requests": totals.requests,
                "predictedReuse": totals.predicted_reuse_ratio,
            },
        }))?;
    } else {
        for row in rows.iter().filter(|r| !r.integrity.is_ok()) {
            eprintln!("{}", diagnostic(row));
        }
        if !global.quiet {
            print_table(&rows)?;
            println!("{}", totals_line(&totals));
        }
    }
    let all_ok = totals.corrupt == 0 && totals.refused == 0 && !walk.has_fault();
    Ok(ExitCode::from(if all_ok { EXIT_OK } else { EXIT_FAULT }))
}

/// The totals line under the table.
pub(crate) fn totals_line(totals: &AuditTotals) -> String {
    format!(
        "{} sessions: {} ok, {} corrupt, {} refused; {} events, {} requests, predicted cache \
         reuse {:.1}%",
        totals.sessions,
        totals.ok,
        totals.corrupt,
        totals.refused,
        totals.events,
        totals.requests,
        totals.predicted_reuse_ratio * 100.0
    )
}

fn audit_files(
    global: &Global,
    files: &[(PathBuf, PathBuf)],
    snapshot: sessionlog_format::SnapshotMode,
) -> Vec<AuditRow> {
    let bar = progress(files.len() as u64, global.quiet || global.json, "auditing");
    let rows = files
        .iter()
        .map(|(file, relative)| {
            let row = audit_file(file, relative, snapshot);
            bar.inc(1);
            row
        })
        .collect();
    bar.finish_and_clear();
    rows
}

/// The row's key in the table: its path under the walked root for a file, its session id for
/// a stored session.
fn key(row: &AuditRow) -> String {
    match (&row.relative, &row.path, &row.session) {
        (Some(relative), _, _) => relative.display().to_string(),
        (None, Some(path), _) => path.display().to_string(),
        (None, None, Some(session)) => session.clone(),
        (None, None, None) => String::new(),
    }
}

/// `FILE:LINE: message` or `SESSION@SEQ: message` (CLI.md diagnostics).
fn diagnostic(row: &AuditRow) -> String {
    let place = |line: Option<u64>, seq: Option<u64>| match (&row.path, line, seq) {
        (Some(path), Some(line), _) => format!("{}:{line}", path.display()),
        (Some(path), None, Some(seq)) => format!("{}: seq {seq}", path.display()),
        (Some(path), None, None) => path.display().to_string(),
        (None, _, Some(seq)) => format!("{}@{seq}", key(row)),
        (None, _, None) => key(row),
    };
    match &row.integrity {
        Integrity::Ok => format!("{}: ok", key(row)),
        Integrity::Corrupt { line, seq, message } => {
            format!("{}: {message}", place(*line, *seq))
        }
        Integrity::Refused { line, message } => format!("{}: {message}", place(*line, None)),
    }
}

fn status(row: &AuditRow) -> String {
    let name = row.integrity.name();
    match &row.integrity {
        Integrity::Corrupt {
            line: Some(line), ..
        }
        | Integrity::Refused {
            line: Some(line), ..
        } => format!("{name} line {line}"),
        Integrity::Corrupt { seq: Some(seq), .. } => format!("{name} seq {seq}"),
        _ => name.to_owned(),
    }
}

pub(crate) fn print_table(rows: &[AuditRow]) -> io::Result<()> {
    let header = [
        "session log",
        "ver",
        "events",
        "turns",
        "requests",
        "prompts",
        "compactions",
        "reuse",
        "status",
    ];
    let cells: Vec<[String; 9]> = rows
        .iter()
        .map(|row| {
            let reuse = if row.requests.requests > 0 {
                format!("{:.1}%", row.requests.predicted_reuse_ratio * 100.0)
            } else {
                "-".to_owned()
            };
            let prompts = format!(
                "{} (+{} ~{})",
                row.prompt_versions, row.requests.prompt_appends, row.requests.prompt_rewrites
            );
            [
                key(row),
                row.version.map(|v| format!("v{v}")).unwrap_or_default(),
                row.events.to_string(),
                row.turns.to_string(),
                row.requests.requests.to_string(),
                prompts,
                row.compactions.to_string(),
                reuse,
                status(row),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &cells {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut out = io::BufWriter::new(io::stdout().lock());
    let line = |out: &mut dyn Write, cells: &[&str]| -> io::Result<()> {
        let mut text = String::new();
        for (idx, (cell, width)) in cells.iter().zip(widths).enumerate() {
            // The key is left-aligned, the counts right-aligned.
            if idx == 0 || idx == cells.len() - 1 {
                text.push_str(&format!("{cell:<width$}  "));
            } else {
                text.push_str(&format!("{cell:>width$}  "));
            }
        }
        writeln!(out, "{}", text.trim_end())
    };
    line(&mut out, &header)?;
    for row in &cells {
        let row: Vec<&str> = row.iter().map(String::as_str).collect();
        line(&mut out, &row)?;
    }
    out.flush()
}

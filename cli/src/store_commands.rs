//! The commands that read or write a store: import, export, verify, messages, surface.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{anyhow, Context};
use clap::Args;
use serde_json::json;

use sessionlog_engine::documents;
use sessionlog_engine::files::names_a_file;
use sessionlog_engine::inspect::{fold_session, FoldedSession};
use sessionlog_engine::log_store::LogStore;
use sessionlog_engine::open::{open_store, Access, Location};
use sessionlog_engine::replay::SessionSource;
use sessionlog_engine::seal::{seal_export, verify_sealed, SealReport};
use sessionlog_engine::store::default_path;
use sessionlog_engine::store::verify::SessionReport;
use sessionlog_engine::transfer::{export_session, import_file, ExportTarget};

use crate::commands::{Global, InputArgs};
use crate::output::{hex, is_broken_pipe, print_json, progress, EXIT_FAULT, EXIT_OK};

/// Which store to use.
#[derive(Debug, Args)]
pub(crate) struct DbArgs {
    /// The store: a redb file or a postgres:// URL (default: $SESSIONLOG_DB, else the path in
    /// the README).
    #[arg(long, env = "SESSIONLOG_DB")]
    pub(crate) db: Option<String>,
}

impl DbArgs {
    /// The store's location, and whether it is the default one.
    pub(crate) fn location(&self) -> anyhow::Result<(Location, bool)> {
        match &self.db {
            Some(db) => Ok((Location::parse(db)?, false)),
            None => {
                let path = default_path()
                    .ok_or_else(|| anyhow!("no --db, no SESSIONLOG_DB and no HOME"))?;
                Ok((Location::Redb(path), true))
            }
        }
    }

    /// Opens the store for a command that writes: it may create the store (in an existing
    /// directory; the default path's directories are created).
    pub(crate) fn open(&self) -> anyhow::Result<Arc<dyn LogStore>> {
        self.open_as(Access::Write)
    }

    /// Opens the store for a command that only reads: nothing is created or written, and a
    /// missing store is an error (exit 2, see the README's CLI additions).
    pub(crate) fn open_read_only(&self) -> anyhow::Result<Arc<dyn LogStore>> {
        self.open_as(Access::Read)
    }

    /// The store's location for messages (a URL without its password).
    pub(crate) fn display(&self) -> String {
        match self.location() {
            Ok((location, _)) => location.display(),
            Err(_) => self.db.clone().unwrap_or_default(),
        }
    }

    fn open_as(&self, access: Access) -> anyhow::Result<Arc<dyn LogStore>> {
        let (location, default) = self.location()?;
        if let (Location::Redb(path), true, Access::Write) = (&location, default, access) {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("cannot create {}", parent.display()))?;
            }
        }
        open_store(&location, access)
            .with_context(|| format!("cannot open the store {}", location.display()))
    }
}

/// Opens for reading the store `db` names, else `$SESSIONLOG_DB`, else the default path: for
/// the commands whose `--db` does not read the environment, so that a file argument is
/// never taken for a session of the environment's store.
pub(crate) fn open_named_read_only(db: Option<&str>) -> anyhow::Result<Arc<dyn LogStore>> {
    let db = db.map(str::to_owned).or_else(|| {
        std::env::var("SESSIONLOG_DB")
            .ok()
            .filter(|v| !v.is_empty())
    });
    DbArgs { db }.open_read_only()
}

#[derive(Debug, Args)]
pub(crate) struct ImportArgs {
    #[command(flatten)]
    db: DbArgs,
    #[command(flatten)]
    input: InputArgs,
    /// Print `committed SESSION SEQ` after each durable commit.
    #[arg(long)]
    acks: bool,
    /// V3 session logs, raw or .jsonl.zstd.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    #[command(flatten)]
    db: DbArgs,
    /// The session to export.
    session: String,
    /// A new file (`.zstd` for compression), or `-` for stdout.
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
    /// Also write `<output>.seal`: the chain head, event count and file hash (docs/format.md).
    #[arg(long)]
    seal: bool,
}

#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    #[command(flatten)]
    db: DbArgs,
    /// Sessions to verify (all when none); an argument naming an existing file verifies that
    /// exported log against its `.seal` instead.
    sessions: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct ViewArgs {
    #[command(flatten)]
    db: DbArgs,
    #[command(flatten)]
    input: InputArgs,
    /// The view as of this seq (inclusive); the head when absent.
    #[arg(long)]
    at: Option<u64>,
    /// A log file, or a session id in the store.
    source: String,
}

pub(crate) fn import(global: Global, args: ImportArgs) -> anyhow::Result<ExitCode> {
    let store = args.db.open()?;
    let mut reports = Vec::new();
    let mut failed = false;
    let bar = progress(
        args.files.len() as u64,
        global.quiet || global.json,
        "importing",
    );
    for file in &args.files {
        let mut on_commit = |ack: &sessionlog_engine::store::AppendAck| {
            if args.acks {
                let mut out = io::stdout().lock();
                // The acknowledgement is only useful if it is seen right away.
                let _ = writeln!(out, "committed {} {}", ack.session, ack.next_seq - 1);
                let _ = out.flush();
            }
        };
        match import_file(&*store, file, args.input.snapshot.into(), &mut on_commit) {
            Ok(report) => reports.push(report),
            // A store's refusal does not know the file; the line names it.
            Err(sessionlog_engine::Error::Store(error)) => {
                failed = true;
                eprintln!("{}: {error}", file.display());
            }
            Err(error) => {
                failed = true;
                eprintln!("{error:#}");
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    if global.json {
        let imports: Vec<_> = reports
            .iter()
            .map(|r| {
                json!({
                    "file": r.file.display().to_string(),
                    "session": r.session,
                    "events": r.events,
                    "headHash": hex(&r.head_chain),
                })
            })
            .collect();
        print_json(&json!({ "db": args.db.display(), "imports": imports }))?;
    } else if !global.quiet && !args.acks {
        for r in &reports {
            println!(
                "{}: imported {} ({} events)",
                r.file.display(),
                r.session,
                r.events
            );
        }
    }
    Ok(ExitCode::from(if failed { EXIT_FAULT } else { EXIT_OK }))
}

pub(crate) fn export(global: Global, args: ExportArgs) -> anyhow::Result<ExitCode> {
    let store = args.db.open_read_only()?;
    let target = if args.output == Path::new("-") {
        ExportTarget::Stdout
    } else {
        ExportTarget::File(args.output.clone())
    };
    if args.seal && target == ExportTarget::Stdout {
        return Err(anyhow!("--seal needs a file output, not stdout"));
    }
    let n_events =
        match export_session(&*store, &args.session, &target).map_err(anyhow::Error::from) {
            // Unlike a read command's view, an export cut short is not a whole log: a closed
            // pipe is a failure (exit 1), never success.
            Err(error) if is_broken_pipe(&error) => {
                return Err(anyhow!(
                    "{}: the export to stdout was cut short: the reader closed the pipe",
                    args.session
                ))
            }
            other => other?,
        };
    if args.seal {
        seal_export(&*store, &args.session, &args.output)?;
    }
    if target != ExportTarget::Stdout && !global.quiet {
        if global.json {
            let file = args.output.display().to_string();
            print_json(&json!({ "session": args.session, "file": file, "events": n_events }))?;
        } else {
            println!(
                "{}: exported {} events to {}",
                args.session,
                n_events,
                args.output.display()
            );
        }
    }
    Ok(ExitCode::from(EXIT_OK))
}

pub(crate) fn verify(global: Global, args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let (files, sessions): (Vec<&String>, Vec<&String>) =
        args.sessions.iter().partition(|a| Path::new(a).is_file());
    if !files.is_empty() {
        if !sessions.is_empty() {
            return Err(anyhow!(
                "verify takes either sessions or files; {} is not a file",
                sessions[0]
            ));
        }
        return verify_files(global, &files);
    }
    let store = args.db.open_read_only()?;
    let reports = store.verify(&args.sessions)?;
    print_damaged_frames(&*store, &args.db);
    for report in &reports {
        for fault in &report.faults {
            let place = fault
                .seq
                .map(|s| s.to_string())
                .unwrap_or_else(|| "-".to_owned());
            eprintln!(
                "{}@{place}: {} [{}]",
                report.session,
                fault.message,
                fault.kind.name()
            );
        }
    }
    if global.json {
        let sessions: Vec<_> = reports.iter().map(documents::verify_session).collect();
        print_json(&json!({ "sessions": sessions }))?;
    } else if !global.quiet {
        for report in reports.iter().filter(|r| r.ok()) {
            let hash = hex(&report.head_chain);
            println!(
                "{}: ok ({} events, head {hash})",
                report.session, report.events
            );
        }
    }
    let ok = reports.iter().all(SessionReport::ok) && store.damaged_frames().is_empty();
    Ok(ExitCode::from(if ok { EXIT_OK } else { EXIT_FAULT }))
}

/// `verify FILE...`: each exported log against its `.seal`.
fn verify_files(global: Global, files: &[&String]) -> anyhow::Result<ExitCode> {
    let reports: Vec<SealReport> = files
        .iter()
        .map(|f| verify_sealed(Path::new(f.as_str())))
        .collect();
    for fault in reports.iter().flat_map(|r| &r.faults) {
        eprintln!("{fault} [seal]");
    }
    if global.json {
        let files: Vec<_> = reports
            .iter()
            .map(|r| {
                json!({
                    "file": r.file.display().to_string(),
                    "session": r.digest.as_ref().map(|d| d.session.clone()),
                    "events": r.digest.as_ref().map(|d| d.events),
                    "headHash": r.digest.as_ref().map(|d| hex(&d.chain_head)),
                    "ok": r.ok(),
                    "faults": r.faults,
                })
            })
            .collect();
        print_json(&json!({ "files": files }))?;
    } else if !global.quiet {
        for report in reports.iter().filter(|r| r.ok()) {
            if let Some(d) = &report.digest {
                let hash = hex(&d.chain_head);
                println!(
                    "{}: sealed ok ({} events of {}, head {hash})",
                    report.file.display(),
                    d.events,
                    d.session
                );
            }
        }
    }
    let ok = reports.iter().all(SealReport::ok);
    Ok(ExitCode::from(if ok { EXIT_OK } else { EXIT_FAULT }))
}

/// Folds the view's source: a file when `--db` is absent and the argument names an existing
/// file, else a session in the store.
fn folded(args: &ViewArgs) -> anyhow::Result<FoldedSession> {
    let path = Path::new(&args.source);
    if args.db.db.is_none() && names_a_file(path) {
        let source = SessionSource::File {
            path,
            snapshot: args.input.snapshot.into(),
        };
        return Ok(fold_session(source, args.at)?);
    }
    let store = args.db.open_read_only()?;
    let source = SessionSource::Store {
        store: &*store,
        session: &args.source,
    };
    Ok(fold_session(source, args.at)?)
}

pub(crate) fn messages(global: Global, args: ViewArgs) -> anyhow::Result<ExitCode> {
    let folded = folded(&args)?;
    let messages = folded.messages();
    if global.json {
        // Streamed: the document of a large session is never built as a value tree.
        let mut out = io::BufWriter::new(io::stdout().lock());
        documents::write_messages(&folded, &mut out)?;
        out.write_all(b"\n")?;
        out.flush()?;
        return Ok(ExitCode::from(EXIT_OK));
    }
    let mut out = io::BufWriter::new(io::stdout().lock());
    for (idx, message) in messages.iter().enumerate() {
        let role = message.role.as_deref().unwrap_or("?");
        let text = message_text(message);
        writeln!(out, "[{idx}] {role}: {text}")?;
    }
    out.flush()?;
    Ok(ExitCode::from(EXIT_OK))
}

/// A one-line summary of a message's content for the human view.
fn message_text(message: &sessionlog_format::Message) -> String {
    use sessionlog_format::ContentBlock;
    let parts: Vec<String> = message
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(b) => b.text.clone(),
            ContentBlock::Reasoning(b) => format!("(reasoning) {}", b.text),
            ContentBlock::ToolCall(b) => format!("(tool-call {} {})", b.name, b.arguments),
            ContentBlock::ToolResult(b) => format!("(tool-result {})", b.tool_call_id),
            other => format!("({})", other.tag()),
        })
        .collect();
    let text = parts.join(" ").replace('\n', " ");
    match text.char_indices().nth(160) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

pub(crate) fn surface(global: Global, args: ViewArgs) -> anyhow::Result<ExitCode> {
    let folded = folded(&args)?;
    let nodes = folded.nodes();
    let generation = folded.fold.replace_generation();
    if global.json {
        print_json(&documents::surface(&folded))?;
    } else {
        let nodes: Vec<String> = nodes.iter().map(u64::to_string).collect();
        println!(
            "{} nodes, replaceGeneration {generation}: [{}]",
            nodes.len(),
            nodes.join(", ")
        );
    }
    Ok(ExitCode::from(EXIT_OK))
}

/// One diagnostic line per damaged WAL frame of `store` (`verify`, `salvage`).
pub(crate) fn print_damaged_frames(store: &dyn LogStore, db: &DbArgs) {
    for frame in store.damaged_frames() {
        eprintln!(
            "{}: WAL frame {} at byte offset {} is damaged: {} [wal]",
            db.display(),
            frame.frame_idx,
            frame.offset_bytes,
            frame.reason
        );
    }
}

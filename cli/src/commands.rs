//! The command grammar and one small function per command.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::json;

use sessionlog_engine::check::{check_file, CheckOptions, FileReport};
use sessionlog_engine::inspect::{check_session, SessionCheck};
use sessionlog_format::gen::GenOptions;
use sessionlog_format::{Compression, FormatVersion, ReadOptions, Recovery, SnapshotMode};

use crate::migrate_command;
use crate::output::{print_json, progress, EXIT_FAULT, EXIT_OK};
use crate::requests_command;
use crate::store_commands;

/// sessionlog: a storage engine and toolkit for dsh agent session logs.
#[derive(Debug, Parser)]
#[command(name = "sessionlog", version, about)]
pub(crate) struct Cli {
    /// Print exactly one JSON document on stdout.
    #[arg(long, global = true)]
    json: bool,
    /// No progress bars and no notes.
    #[arg(long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Decode files and check every rule; exit 1 when any file is invalid.
    Check(CheckArgs),
    /// Print a log's events as canonical JSONL of its own version.
    Cat(CatArgs),
    /// Write a deterministic, valid synthetic session (V3 by default; `--version` 0 to 4).
    Gen(GenArgs),
    /// Import dsh log files into the store, one session each: V3 and V4 as they are, older
    /// versions migrated to V3 with the proof.
    Import(store_commands::ImportArgs),
    /// Export a session from the store as a canonical log of its own version (V3 or V4).
    Export(store_commands::ExportArgs),
    /// Re-read every record and check checksums, the chain, every rule and the checkpoints.
    Verify(store_commands::VerifyArgs),
    /// The derived messages (what the model sees) of a log file or a stored session.
    Messages(store_commands::ViewArgs),
    /// The live surface nodes of a log file or a stored session.
    Surface(store_commands::ViewArgs),
    /// Write proven, request-equivalent V3 or V4 successors of older logs or stored sessions
    /// (never overwriting, never in place).
    Migrate(migrate_command::MigrateArgs),
    /// Every request the model was sent: messages, estimated tokens, the prefix shared with
    /// the previous request and why it broke.
    Requests(requests_command::RequestsArgs),
    /// Drives agent turns (replay or DeepSeek), writing everything to the store.
    Run(crate::run_command::RunArgs),
    /// A readable transcript of a log file or a stored session: its appended messages, and
    /// one-line markers for turns, prompt changes, compactions, prunes and retries.
    Show(crate::show_command::ShowArgs),
    /// One row per session file (walking dsh roots) or stored session: integrity, requests,
    /// prompt versions, compactions and predicted cache reuse; exit 1 on any fault.
    Audit(crate::audit_command::AuditArgs),
    /// The first request (or, with @SEQ, message) where two logs or two points differ.
    Diff(crate::diff_command::DiffArgs),
    /// The main job: generate a dsh root of every layout, migrate, import, verify, audit, and
    /// report one session's requests; prints where the store was written.
    Demo(crate::demo_command::DemoArgs),
    /// The prompt history of a session: each version, append or head rewrite, and which one
    /// is effective now.
    Prompt(crate::prompt_command::PromptArgs),
    /// The context breakdown at each request: system, message and tools tokens (spec 14).
    Tokens(crate::tokens_command::TokensArgs),
    /// One manual compaction over a stored session's head: the summariser replays the
    /// conversation prefix and a checkpoint replaces the span.
    Compact(crate::compact_command::CompactArgs),
    /// The store over HTTP: appends with optimistic concurrency, tails over SSE, the derived
    /// views (docs/openapi.json); stops on SIGINT or SIGTERM after the requests in flight.
    Serve(crate::serve_command::ServeArgs),
    /// Copies every session (or those named) to another backend, e.g. a postgres:// URL,
    /// and verifies each on arrival.
    Copy(crate::serve_command::CopyArgs),
    /// Writes every intact session of a store (read-only, a damaged WAL included) to a
    /// directory as logs of their own version (`<id>.v3.jsonl`, `<id>.v4.jsonl`) and names
    /// exactly what was lost; exit 1 when something was.
    Salvage(crate::salvage_command::SalvageArgs),
    /// Writes a consistent single-file copy of a store (its WAL included) that opens and
    /// verifies with the same heads.
    Backup(crate::salvage_command::BackupArgs),
}

#[derive(Debug, Args)]
pub(crate) struct InputArgs {
    /// Read normalized snapshot recordings (seq = row index, time = 0).
    #[arg(long, value_enum, default_value_t = SnapshotArg::Auto, num_args = 0..=1, require_equals = true, default_missing_value = "on")]
    pub snapshot: SnapshotArg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SnapshotArg {
    /// Detect from header placeholders or a first row without `seq`.
    Auto,
    On,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RecoveryArg {
    /// Any fault is an error.
    Strict,
    /// Withhold a faulty row and its suffix, unless a later turn/end proves it committed.
    Recoverable,
}

#[derive(Debug, Args)]
struct CheckArgs {
    #[command(flatten)]
    input: InputArgs,
    /// Check stored sessions of this store (a redb file or a postgres:// URL) instead of
    /// files: every record read back and every rule applied from the first event.
    #[arg(long)]
    db: Option<String>,
    /// dsh session logs of any version, raw or .jsonl.zstd (with --db: session ids).
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

#[derive(Debug, Args)]
struct CatArgs {
    #[command(flatten)]
    input: InputArgs,
    /// What to do with a faulty row.
    #[arg(long, value_enum, default_value_t = RecoveryArg::Strict)]
    recovery: RecoveryArg,
    /// Print the log migrated (in memory) to this version; only 3.
    #[arg(long, value_parser = clap::value_parser!(u64).range(3..=3))]
    to: Option<u64>,
    /// A dsh session log of any version, raw or .jsonl.zstd.
    file: PathBuf,
}

#[derive(Debug, Args)]
struct GenArgs {
    /// Number of events to write.
    #[arg(long)]
    events: u64,
    /// Seed of the deterministic generator.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Write .jsonl.zstd, one frame per batch.
    #[arg(long)]
    zstd: bool,
    /// The format version to write: 3; 4 (dsh's V4 shapes: tool messages, producer-owned
    /// sources, developer messages); 2 (the prompt in request headers); or 0 (also streams
    /// as top-level chunk events, which come on top of --events), for migration benchmarks.
    #[arg(
        long = "version",
        default_value = "3",
        value_parser = clap::builder::TypedValueParser::map(
            clap::builder::PossibleValuesParser::new(["0", "2", "3", "4"]),
            |v| v.parse::<u64>().unwrap_or(3),
        )
    )]
    format_version: u64,
    /// The file to create; an existing file is never overwritten.
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
}

impl From<SnapshotArg> for SnapshotMode {
    fn from(arg: SnapshotArg) -> SnapshotMode {
        match arg {
            SnapshotArg::Auto => SnapshotMode::Auto,
            SnapshotArg::On => SnapshotMode::On,
            SnapshotArg::Off => SnapshotMode::Off,
        }
    }
}

impl From<RecoveryArg> for Recovery {
    fn from(arg: RecoveryArg) -> Recovery {
        match arg {
            RecoveryArg::Strict => Recovery::Strict,
            RecoveryArg::Recoverable => Recovery::Recoverable,
        }
    }
}

/// Output settings every command shares.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Global {
    pub json: bool,
    pub quiet: bool,
}

/// Runs the parsed command line.
pub(crate) fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let global = Global {
        json: cli.json,
        quiet: cli.quiet,
    };
    match cli.command {
        Command::Check(args) => check(global, args),
        Command::Cat(args) => cat(args),
        Command::Gen(args) => gen(global, args),
        Command::Import(args) => store_commands::import(global, args),
        Command::Export(args) => store_commands::export(global, args),
        Command::Verify(args) => store_commands::verify(global, args),
        Command::Messages(args) => store_commands::messages(global, args),
        Command::Surface(args) => store_commands::surface(global, args),
        Command::Migrate(args) => migrate_command::migrate(global, args),
        Command::Requests(args) => requests_command::run(global, args),
        Command::Run(args) => crate::run_command::run(global, args),
        Command::Show(args) => crate::show_command::show(global, args),
        Command::Audit(args) => crate::audit_command::audit(global, args),
        Command::Diff(args) => crate::diff_command::diff(global, args),
        Command::Demo(args) => crate::demo_command::demo(global, args),
        Command::Prompt(args) => crate::prompt_command::prompt(global, args),
        Command::Tokens(args) => crate::tokens_command::run(global, args),
        Command::Compact(args) => crate::compact_command::run(global, args),
        Command::Serve(args) => crate::serve_command::serve(global, args),
        Command::Copy(args) => crate::serve_command::copy(global, args),
        Command::Salvage(args) => crate::salvage_command::salvage(global, args),
        Command::Backup(args) => crate::salvage_command::backup(global, args),
    }
}

fn check(global: Global, args: CheckArgs) -> anyhow::Result<ExitCode> {
    if let Some(db) = &args.db {
        return check_stored(global, db, &args.files);
    }
    let options = CheckOptions {
        snapshot: args.input.snapshot.into(),
    };
    let reports: Vec<FileReport> = args.files.iter().map(|f| check_file(f, options)).collect();
    for report in &reports {
        let file = report.file.display();
        if report.snapshot && !global.quiet {
            eprintln!(
                "{file}: note: read as a normalized snapshot recording (seq = row index, time = 0)"
            );
        }
        for error in &report.errors {
            let seq = error.seq.map(|s| format!("seq {s}: ")).unwrap_or_default();
            eprintln!(
                "{file}:{}: {seq}{} [{}]",
                error.line, error.message, error.rule
            );
        }
        if let Some(refusal) = &report.migration {
            eprintln!(
                "{file}:{}: note: no v{} successor: {}",
                refusal.line, report.migration_to, refusal.message
            );
        }
    }
    if global.json {
        print_json(&json!({ "files": reports.iter().map(report_json).collect::<Vec<_>>() }))?;
    } else if !global.quiet {
        let mut out = io::stdout().lock();
        for report in reports.iter().filter(|r| r.ok) {
            let version = report.version.map(|v| format!("v{v}")).unwrap_or_default();
            writeln!(
                out,
                "{}: ok ({version}, {} events)",
                report.file.display(),
                report.events
            )?;
        }
    }
    let all_ok = reports.iter().all(|r| r.ok);
    Ok(ExitCode::from(if all_ok { EXIT_OK } else { EXIT_FAULT }))
}

/// `check --db DB SESSION...`: `SESSION: ok (N events)`, or `SESSION@SEQ: reason` on stderr;
/// `--json` is `{"files":[],"sessions":[{"session","ok","events","error"}]}`.
fn check_stored(global: Global, db: &str, sessions: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let store = crate::store_commands::open_named_read_only(Some(db))?;
    let checks: Vec<SessionCheck> = sessions
        .iter()
        .map(|s| check_session(&*store, &s.to_string_lossy()))
        .collect();
    for check in &checks {
        if let Some(error) = &check.error {
            eprintln!("{error}");
        }
    }
    if global.json {
        let sessions: Vec<_> = checks
            .iter()
            .map(|c| json!({ "session": c.session, "ok": c.ok, "events": c.events, "error": c.error }))
            .collect();
        print_json(&json!({ "files": [], "sessions": sessions }))?;
    } else if !global.quiet {
        for check in checks.iter().filter(|c| c.ok) {
            println!("{}: ok (v3, {} events)", check.session, check.events);
        }
    }
    let all_ok = checks.iter().all(|c| c.ok);
    Ok(ExitCode::from(if all_ok { EXIT_OK } else { EXIT_FAULT }))
}

fn report_json(report: &FileReport) -> serde_json::Value {
    let errors: Vec<_> = report
        .errors
        .iter()
        .map(|e| json!({ "line": e.line, "seq": e.seq, "rule": e.rule, "message": e.message }))
        .collect();
    json!({
        "file": report.file.display().to_string(),
        "version": report.version,
        "ok": report.ok,
        "events": report.events,
        "compressed": report.compressed,
        "snapshot": report.snapshot,
        "errors": errors,
        // Older versions only: whether the in-memory migration succeeded (V0 to V2: to V3,
        // then to V4; V3: to V4). `to` names the successor a refusal is about.
        "migration": (report.version.is_some_and(|v| v < 4) && report.ok).then(|| {
            let to = report.migration_to;
            match &report.migration {
                None => json!({ "to": to, "ok": true }),
                Some(r) => json!({ "to": to, "ok": false, "line": r.line, "message": r.message }),
            }
        }),
    })
}

fn cat(args: CatArgs) -> anyhow::Result<ExitCode> {
    let options = ReadOptions {
        recovery: args.recovery.into(),
        snapshot: args.input.snapshot.into(),
    };
    let mut out = io::BufWriter::with_capacity(1 << 16, io::stdout().lock());
    if args.to.is_some() {
        sessionlog_engine::cat::cat_file_as_v3(&args.file, options.snapshot, &mut out)?;
    } else {
        sessionlog_engine::cat::cat_file(&args.file, options, &mut out)?;
    }
    Ok(ExitCode::from(EXIT_OK))
}

fn gen(global: Global, args: GenArgs) -> anyhow::Result<ExitCode> {
    let options = GenOptions {
        events: args.events,
        seed: args.seed,
    };
    let compression = if args.zstd {
        Compression::Zstd
    } else {
        Compression::None
    };
    let bar = progress(args.events, global.quiet || global.json, "generating");
    let version =
        FormatVersion::from_number(args.format_version).context("a version clap checked")?;
    let written = sessionlog_engine::generate::generate_file(
        &args.output,
        options,
        version,
        compression,
        &mut |n| bar.set_position(n),
    )
    .with_context(|| format!("cannot generate {}", args.output.display()))?;
    bar.finish_and_clear();
    let file = args.output.display().to_string();
    if global.json {
        print_json(&json!({
            "file": file,
            "events": written.events,
            "batches": written.batches,
            "bytes": written.size_bytes,
            "seed": args.seed,
            "version": args.format_version,
        }))?;
    } else if !global.quiet {
        println!(
            "{file}: {} events in {} batches, {} bytes",
            written.events, written.batches, written.size_bytes
        );
    }
    Ok(ExitCode::from(EXIT_OK))
}

//! `migrate`: V3 or V4 successors for dsh logs, files or whole session roots, and for stored
//! sessions (`--db`: a new session of the same store).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::json;

use sessionlog_engine::migrate::{migrate_file_observed, FileOutcome, MigrateOptions, Outcome};
use sessionlog_engine::migrate_stored::{default_target_id, migrate_stored, SessionOutcome};
use sessionlog_engine::walk::walk_all;

use crate::commands::{Global, InputArgs};
use crate::output::{note_skipped, print_json, progress, skipped_json, EXIT_FAULT, EXIT_OK};
use crate::store_commands::DbArgs;

#[derive(Debug, Args)]
pub(crate) struct MigrateArgs {
    #[command(flatten)]
    input: InputArgs,
    /// The target version: 3 (the default, for now) or 4.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(3..=4))]
    to: u64,
    /// Convert and prove, but write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Skip the request-equivalence proof (it runs on every conversion by default).
    #[arg(long)]
    no_verify: bool,
    /// Write successors under DIR (created if missing) instead of beside their sources.
    #[arg(short = 'o', long = "output", conflicts_with = "db")]
    out_dir: Option<PathBuf>,
    /// Migrate stored sessions instead of files: the arguments are session ids of this store
    /// (a redb file or a postgres:// URL; $SESSIONLOG_DB is not read here), and each successor
    /// is a new session of the same store, `ID.v<N>` unless `--as` names it.
    #[arg(long)]
    db: Option<String>,
    /// The successor's session id (`--db`, one session only).
    #[arg(long = "as", value_name = "ID", requires = "db")]
    target_id: Option<String>,
    /// Session log files, or directories to walk for session[.vN].jsonl[.zstd] (links inside
    /// a walk are not followed; each is reported); with `--db`, session ids.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
}

pub(crate) fn migrate(global: Global, args: MigrateArgs) -> anyhow::Result<ExitCode> {
    let options = MigrateOptions {
        out_dir: args.out_dir.clone(),
        dry_run: args.dry_run,
        snapshot: args.input.snapshot.into(),
        skip_proof: args.no_verify,
        to: sessionlog_format::FormatVersion::from_number(args.to),
    };
    if let Some(db) = &args.db {
        return migrate_stored_sessions(global, &args, db, &options);
    }
    let walk = walk_all(&args.paths)?;
    note_skipped(&walk, global.quiet);
    let files = &walk.files;
    let bar = progress(files.len() as u64, global.quiet || global.json, "migrating");
    let mut outcomes = Vec::with_capacity(files.len());
    for (source, relative) in files {
        let name = source.display().to_string();
        let outcome = migrate_file_observed(source, relative, &options, &mut |events| {
            bar.set_message(format!("migrating {name}: {events} events"))
        });
        bar.set_message("migrating");
        if let Outcome::Refused { line, reason } = &outcome.outcome {
            let line = line.map(|l| format!(":{l}")).unwrap_or_default();
            bar.suspend(|| eprintln!("{}{line}: {reason}", source.display()));
        }
        outcomes.push(outcome);
        bar.inc(1);
    }
    bar.finish_and_clear();
    if global.json {
        let files: Vec<_> = outcomes.iter().map(outcome_json).collect();
        print_json(&json!({
            "files": files,
            "skipped": skipped_json(&walk),
            "dryRun": args.dry_run,
        }))?;
    } else if !global.quiet {
        print_table(&outcomes, args.dry_run);
    }
    let refused = outcomes
        .iter()
        .any(|o| matches!(o.outcome, Outcome::Refused { .. }));
    let failed = refused || walk.has_fault();
    Ok(ExitCode::from(if failed { EXIT_FAULT } else { EXIT_OK }))
}

fn outcome_json(outcome: &FileOutcome) -> serde_json::Value {
    let (name, reason, proved) = match &outcome.outcome {
        Outcome::Converted { requests_proved } => ("converted", None, *requests_proved),
        Outcome::Current => ("current", None, None),
        Outcome::Refused { reason, .. } => ("refused", Some(reason.clone()), None),
    };
    json!({
        "source": outcome.source.display().to_string(),
        "target": outcome.target.as_ref().map(|t| t.display().to_string()),
        "from": outcome.from,
        "to": outcome.to,
        "outcome": name,
        "reason": reason,
        "requestsProved": proved,
    })
}

pub(crate) fn print_table(outcomes: &[FileOutcome], dry_run: bool) {
    for outcome in outcomes {
        let target = outcome
            .target
            .as_ref()
            .map(|t| t.display().to_string())
            .unwrap_or_default();
        let from = outcome
            .from
            .map(|v| format!("v{v}"))
            .unwrap_or_else(|| "?".to_owned());
        let what = match &outcome.outcome {
            Outcome::Converted { requests_proved } => format!(
                "{} {from} -> v{} ({}) {target}",
                converted_verb(dry_run),
                outcome.to,
                proof_text(*requests_proved)
            ),
            Outcome::Current => format!("current ({from}) {target}"),
            Outcome::Refused { reason, .. } => format!("refused ({from}): {reason}"),
        };
        println!("{}: {what}", outcome.source.display());
    }
    print_counts(outcomes.iter().map(|o| &o.outcome));
}

/// `migrate --db DB SESSION... --to N`: each session's successor as a new session of the same
/// store.
fn migrate_stored_sessions(
    global: Global,
    args: &MigrateArgs,
    db: &str,
    options: &MigrateOptions,
) -> anyhow::Result<ExitCode> {
    if args.target_id.is_some() && args.paths.len() != 1 {
        anyhow::bail!("--as names one successor: give exactly one session");
    }
    let store = if args.dry_run {
        DbArgs {
            db: Some(db.to_owned()),
        }
        .open_read_only()?
    } else {
        DbArgs {
            db: Some(db.to_owned()),
        }
        .open()?
    };
    let bar = progress(
        args.paths.len() as u64,
        global.quiet || global.json,
        "migrating",
    );
    let mut outcomes = Vec::with_capacity(args.paths.len());
    let mut failed = false;
    for path in &args.paths {
        let session = path.to_string_lossy().into_owned();
        let target = args
            .target_id
            .clone()
            .unwrap_or_else(|| default_target_id(&session, options.target()));
        let observed = migrate_stored(&*store, &session, &target, options, &mut |events| {
            bar.set_message(format!("migrating {session}: {events} events"))
        });
        bar.set_message("migrating");
        match observed {
            Ok(outcome) => {
                if let Outcome::Refused { reason, .. } = &outcome.outcome {
                    failed = true;
                    bar.suspend(|| eprintln!("{reason}"));
                }
                outcomes.push(outcome);
            }
            Err(error) => {
                failed = true;
                bar.suspend(|| eprintln!("{session}: {error:#}"));
                outcomes.push(SessionOutcome {
                    session: session.clone(),
                    target: None,
                    from: 0,
                    to: options.target().number(),
                    outcome: Outcome::Refused {
                        line: None,
                        reason: format!("{error:#}"),
                    },
                });
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    if global.json {
        let sessions: Vec<_> = outcomes.iter().map(session_outcome_json).collect();
        print_json(&json!({ "sessions": sessions, "dryRun": args.dry_run }))?;
    } else if !global.quiet {
        print_session_table(&outcomes, args.dry_run);
    }
    Ok(ExitCode::from(if failed { EXIT_FAULT } else { EXIT_OK }))
}

fn session_outcome_json(outcome: &SessionOutcome) -> serde_json::Value {
    let (name, reason, proved) = match &outcome.outcome {
        Outcome::Converted { requests_proved } => ("converted", None, *requests_proved),
        Outcome::Current => ("current", None, None),
        Outcome::Refused { reason, .. } => ("refused", Some(reason.clone()), None),
    };
    json!({
        "session": outcome.session,
        "target": outcome.target,
        "from": outcome.from,
        "to": outcome.to,
        "outcome": name,
        "reason": reason,
        "requestsProved": proved,
    })
}

fn print_session_table(outcomes: &[SessionOutcome], dry_run: bool) {
    for outcome in outcomes {
        let target = outcome.target.clone().unwrap_or_default();
        let from = outcome.from;
        let what = match &outcome.outcome {
            Outcome::Converted { requests_proved } => format!(
                "{} v{from} -> v{} ({}) as {target}",
                converted_verb(dry_run),
                outcome.to,
                proof_text(*requests_proved)
            ),
            Outcome::Current if target.is_empty() => format!("current (v{from})"),
            Outcome::Current => format!("current (v{from}): {target} exists"),
            // A session that could not be read has no version to show (`from` is 0).
            Outcome::Refused { reason, .. } if from == 0 => format!("refused: {reason}"),
            Outcome::Refused { reason, .. } => format!("refused (v{from}): {reason}"),
        };
        println!("{}: {what}", outcome.session);
    }
    print_counts(outcomes.iter().map(|o| &o.outcome));
}

fn converted_verb(dry_run: bool) -> &'static str {
    if dry_run {
        "would convert"
    } else {
        "converted"
    }
}

fn proof_text(requests_proved: Option<u64>) -> String {
    match requests_proved {
        Some(n) => format!("{n} requests proved"),
        None => "not proved: --no-verify".to_owned(),
    }
}

/// The table's last line, for files and stored sessions alike.
fn print_counts<'a>(outcomes: impl Iterator<Item = &'a Outcome> + Clone) {
    let count = |f: fn(&Outcome) -> bool| outcomes.clone().filter(|o| f(o)).count();
    println!(
        "{} converted, {} already current, {} refused",
        count(|o| matches!(o, Outcome::Converted { .. })),
        count(|o| matches!(o, Outcome::Current)),
        count(|o| matches!(o, Outcome::Refused { .. })),
    );
}

//! `diff A B`: the first request (or message) where two logs, or two points of one session,
//! send the model something different. Exit 0 when they agree, 1 when they differ.

use std::path::Path;
use std::process::ExitCode;

use clap::Args;
use serde_json::json;

use sessionlog_engine::diff::{diff_points, diff_requests, DiffOptions, Difference, Divergence};
use sessionlog_engine::log_store::LogStore;
use sessionlog_engine::replay::SessionSource;
use sessionlog_format::Message;

use crate::commands::{Global, InputArgs};
use crate::output::{print_json, EXIT_FAULT, EXIT_OK};
use crate::store_commands::DbArgs;

#[derive(Debug, Args)]
pub(crate) struct DiffArgs {
    #[command(flatten)]
    db: DbArgs,
    #[command(flatten)]
    input: InputArgs,
    /// Compare message ids too (a migrated log's generated system ids differ by design).
    #[arg(long)]
    ids: bool,
    /// A log file or a stored session id, optionally `@SEQ` to compare the messages derived
    /// at that seq instead of every request.
    left: String,
    /// The other side, in the same form.
    right: String,
}

/// One side: a file or a stored session, and an optional point.
struct Side<'a> {
    name: &'a str,
    seq: Option<u64>,
}

fn side(arg: &str) -> Side<'_> {
    if Path::new(arg).exists() {
        return Side {
            name: arg,
            seq: None,
        };
    }
    match arg.rsplit_once('@') {
        Some((name, seq)) if seq.parse::<u64>().is_ok() => Side {
            name,
            seq: seq.parse().ok(),
        },
        _ => Side {
            name: arg,
            seq: None,
        },
    }
}

pub(crate) fn diff(global: Global, args: DiffArgs) -> anyhow::Result<ExitCode> {
    let (left, right) = (side(&args.left), side(&args.right));
    let needs_store = [&left, &right].iter().any(|s| !Path::new(s.name).exists());
    let store: Option<std::sync::Arc<dyn LogStore>> = if needs_store {
        Some(args.db.open_read_only()?)
    } else {
        None
    };
    let snapshot = args.input.snapshot.into();
    let options = DiffOptions { ids: args.ids };
    let divergence = if left.seq.is_some() || right.seq.is_some() {
        diff_points(
            (source_of(store.as_deref(), left.name, snapshot), left.seq),
            (source_of(store.as_deref(), right.name, snapshot), right.seq),
            options,
        )?
    } else {
        diff_requests(
            source_of(store.as_deref(), left.name, snapshot),
            source_of(store.as_deref(), right.name, snapshot),
            options,
        )?
    };
    let same = matches!(divergence, Divergence::Same { .. });
    if global.json {
        print_json(&divergence_json(&divergence))?;
    } else if !global.quiet {
        print_divergence(&divergence, &args.left, &args.right);
    }
    Ok(ExitCode::from(if same { EXIT_OK } else { EXIT_FAULT }))
}

/// A file when `name` exists on disk, else a session of the store.
fn source_of<'a>(
    store: Option<&'a dyn LogStore>,
    name: &'a str,
    snapshot: sessionlog_format::SnapshotMode,
) -> SessionSource<'a> {
    match store {
        Some(store) if !Path::new(name).exists() => SessionSource::Store {
            store,
            session: name,
        },
        _ => SessionSource::File {
            path: Path::new(name),
            snapshot,
        },
    }
}

fn print_divergence(divergence: &Divergence, a: &str, b: &str) {
    match divergence {
        Divergence::Same { requests } => println!("same: {requests} requests agree"),
        Divergence::Count { left, right } => println!(
            "the first {} requests agree; {a} has {left} requests, {b} has {right}",
            left.min(right)
        ),
        Divergence::Request { index, what } => {
            let request = match index {
                Some(index) => format!("request {index}"),
                None => "the derived messages".to_owned(),
            };
            match what {
                Difference::Config { left, right } => {
                    println!("{request}: the call configuration differs");
                    println!("  {a}: {left}");
                    println!("  {b}: {right}");
                }
                Difference::Tools => println!("{request}: the tools differ"),
                Difference::Message { index, left, right } => {
                    println!("{request} diverges at message {index}");
                    println!("  {a}: {}", summary(left.as_deref()));
                    println!("  {b}: {}", summary(right.as_deref()));
                }
            }
        }
    }
}

/// `role: text` of a message, on one line and cut at 200 characters.
fn summary(message: Option<&Message>) -> String {
    let Some(message) = message else {
        return "(no message)".to_owned();
    };
    let text = serde_json::to_string(&message.content).unwrap_or_default();
    let text = match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    };
    let id = message.id.as_deref().unwrap_or("-");
    format!(
        "{} (id {id}): {text}",
        message.role.as_deref().unwrap_or("?")
    )
}

fn divergence_json(divergence: &Divergence) -> serde_json::Value {
    match divergence {
        Divergence::Same { requests } => json!({ "same": true, "requests": requests }),
        Divergence::Count { left, right } => {
            json!({ "same": false, "kind": "count", "left": left, "right": right })
        }
        Divergence::Request { index, what } => match what {
            Difference::Config { left, right } => json!({
                "same": false, "kind": "config", "request": index, "left": left, "right": right,
            }),
            Difference::Tools => json!({ "same": false, "kind": "tools", "request": index }),
            Difference::Message {
                index: message,
                left,
                right,
            } => json!({
                "same": false, "kind": "message", "request": index, "message": message,
                "left": left, "right": right,
            }),
        },
    }
}

//! `sessionlog prompt`: the prompt history of a session: each version, whether it was the
//! initial head, an in-history append, a head rewrite or a clear, and which one is effective.

use std::io::{self, Write};
use std::path::Path;
use std::process::ExitCode;

use clap::Args;
use serde_json::json;

use sessionlog_agent::prompt::history::{history, PromptHistory};
use sessionlog_engine::files::names_a_file;
use sessionlog_engine::replay::SessionSource;

use crate::commands::{Global, InputArgs};
use crate::output::{print_json, EXIT_OK};
use crate::store_commands::DbArgs;

/// Longest prompt excerpt the human view prints, in characters.
const EXCERPT_CHARS_MAX: usize = 100;

#[derive(Debug, Args)]
pub(crate) struct PromptArgs {
    #[command(flatten)]
    db: DbArgs,
    #[command(flatten)]
    input: InputArgs,
    /// A log file of any version, or a session id in the store.
    source: String,
}

pub(crate) fn prompt(global: Global, args: PromptArgs) -> anyhow::Result<ExitCode> {
    let path = Path::new(&args.source);
    let history = if names_a_file(path) {
        history(SessionSource::File {
            path,
            snapshot: args.input.snapshot.into(),
        })?
    } else {
        let store = args.db.open_read_only()?;
        history(SessionSource::Store {
            store: &*store,
            session: &args.source,
        })?
    };
    if global.json {
        print_json(&history_json(&history))?;
    } else if !global.quiet {
        print_human(&history)?;
    }
    Ok(ExitCode::from(EXIT_OK))
}

fn history_json(history: &PromptHistory) -> serde_json::Value {
    let versions: Vec<_> = history
        .versions
        .iter()
        .map(|v| {
            json!({
                "seq": v.seq,
                "kind": v.kind.as_str(),
                "text": v.text,
                "effective": v.effective,
                "turn": v.turn,
                "step": v.step,
                "replaces": v.replaces,
            })
        })
        .collect();
    json!({ "session": history.session, "versions": versions })
}

fn print_human(history: &PromptHistory) -> io::Result<()> {
    let mut out = io::BufWriter::new(io::stdout().lock());
    let effective = match history.effective() {
        Some(v) => format!("effective: seq {}", v.seq),
        None => "no effective prompt".to_owned(),
    };
    writeln!(
        out,
        "{}: {} prompt versions, {effective}",
        history.session,
        history.versions.len()
    )?;
    for v in &history.versions {
        let mark = if v.effective { "*" } else { " " };
        let target = v.replaces.map(|s| format!(" of {s}")).unwrap_or_default();
        writeln!(
            out,
            "{mark} seq {:<6} turn {} step {}  {}{target}: {}",
            v.seq,
            v.turn,
            v.step,
            v.kind.as_str(),
            excerpt(&v.text)
        )?;
    }
    out.flush()
}

/// The first characters of a prompt on one line.
fn excerpt(text: &str) -> String {
    if text.is_empty() {
        return "(empty)".to_owned();
    }
    let line = text.replace('\n', " ");
    match line.char_indices().nth(EXCERPT_CHARS_MAX) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line,
    }
}

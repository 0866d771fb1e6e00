//! `sessionlog tokens`: the context breakdown (system, message and tools tokens) at each request.

use std::io::{self, Write};
use std::path::Path;
use std::process::ExitCode;

use clap::Args;

use sessionlog_engine::files::names_a_file;
use sessionlog_engine::meter::{tokens, TokensReport};
use sessionlog_engine::replay::SessionSource;

use crate::commands::{Global, InputArgs};
use crate::output::{print_json, EXIT_OK};
use crate::store_commands::DbArgs;

#[derive(Debug, Args)]
pub(crate) struct TokensArgs {
    #[command(flatten)]
    db: DbArgs,
    #[command(flatten)]
    input: InputArgs,
    /// A log file of any version, or a session id in the store.
    source: String,
}

pub(crate) fn run(global: Global, args: TokensArgs) -> anyhow::Result<ExitCode> {
    let path = Path::new(&args.source);
    let report = if names_a_file(path) {
        tokens(SessionSource::File {
            path,
            snapshot: args.input.snapshot.into(),
        })?
    } else {
        let store = args.db.open_read_only()?;
        tokens(SessionSource::Store {
            store: &*store,
            session: &args.source,
        })?
    };
    if global.json {
        print_json(&sessionlog_engine::documents::tokens(&report))?;
    } else if !global.quiet {
        print_human(&report)?;
    }
    Ok(ExitCode::from(EXIT_OK))
}

fn print_human(report: &TokensReport) -> io::Result<()> {
    let mut out = io::BufWriter::new(io::stdout().lock());
    writeln!(
        out,
        "{}: {} requests",
        report.session,
        report.requests.len()
    )?;
    writeln!(
        out,
        "{:>6} {:>8} {:>10} {:>8} {:>10} {:>8} {:>10}",
        "index", "seq", "turn.step", "system", "messages", "tools", "total"
    )?;
    for r in &report.requests {
        let b = &r.breakdown;
        writeln!(
            out,
            "{:>6} {:>8} {:>10} {:>8} {:>10} {:>8} {:>10}",
            r.index,
            r.seq,
            format!("{}.{}", r.turn, r.step),
            b.system_tokens,
            b.message_tokens,
            b.tools_tokens,
            b.total()
        )?;
    }
    let b = &report.head;
    writeln!(
        out,
        "head: system {} + messages {} + tools {} = {}",
        b.system_tokens,
        b.message_tokens,
        b.tools_tokens,
        b.total()
    )?;
    out.flush()
}

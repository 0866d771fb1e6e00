//! `requests`: every request the model was sent, with its shared prefix, as a table or JSON.

use std::io::{self, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::bail;
use clap::Args;
use serde_json::Value;

use sessionlog_engine::files::names_a_file;
use sessionlog_engine::replay::SessionSource;
use sessionlog_engine::requests::{
    requests, PrefixBreak, RequestOptions, RequestReport, RequestRow, RequestSummary,
};

use crate::commands::{Global, InputArgs};
use crate::output::{print_json, EXIT_OK};

/// Estimated tokens follow the token meter's heuristic (4 characters per token, 4 per block
/// and per message) and include the header's tools. The shared prefix is what a prompt cache
/// could reuse from the previous request: nothing after a header change, else the tools and
/// the longest common run of leading messages.
#[derive(Debug, Args)]
pub(crate) struct RequestsArgs {
    /// The store file. Without it, an existing FILE is read as a log; otherwise SESSION is
    /// looked up in $SESSIONLOG_DB, else the default store of the README.
    #[arg(long)]
    db: Option<String>,
    #[command(flatten)]
    input: InputArgs,
    /// A log file of any version, or a session id in the store.
    source: String,
}

pub(crate) fn run(global: Global, args: RequestsArgs) -> anyhow::Result<ExitCode> {
    // The bodies are only printed in JSON; the table needs none.
    let options = RequestOptions {
        bodies: global.json,
    };
    let report = report(&args, options)?;
    if report.snapshot && !global.quiet {
        eprintln!(
            "{}: note: read as a normalized snapshot recording (seq = row index, time = 0)",
            args.source
        );
    }
    if global.json {
        print_json(&report_json(&report)?)?;
    } else {
        let mut out = io::BufWriter::new(io::stdout().lock());
        write_table(&mut out, &report)?;
        out.flush()?;
    }
    Ok(ExitCode::from(EXIT_OK))
}

fn report(args: &RequestsArgs, options: RequestOptions) -> anyhow::Result<RequestReport> {
    let path = Path::new(&args.source);
    if args.db.is_none() && names_a_file(path) {
        let source = SessionSource::File {
            path,
            snapshot: args.input.snapshot.into(),
        };
        return Ok(requests(source, options)?);
    }
    if args.db.is_none() && looks_like_a_file(path) {
        // Without this, a mistyped file name would open (and create) the default store.
        bail!("{}: no such file", args.source);
    }
    let store = crate::store_commands::open_named_read_only(args.db.as_deref())?;
    let source = SessionSource::Store {
        store: &*store,
        session: &args.source,
    };
    Ok(requests(source, options)?)
}

/// A path rather than a session id: it names a directory or a log file suffix.
fn looks_like_a_file(path: &Path) -> bool {
    let name = path.to_string_lossy();
    name.contains(std::path::MAIN_SEPARATOR) || name.ends_with(".jsonl") || name.ends_with(".zstd")
}

/// The CLI.md document: `{"session","requests":[...],"summary":{...}}`.
pub(crate) fn report_json(report: &RequestReport) -> anyhow::Result<Value> {
    Ok(sessionlog_engine::documents::requests(report)?)
}

const COLUMNS: [&str; N_COLUMNS] = [
    "REQ",
    "SEQ",
    "TURN",
    "STEP",
    "SETTLED",
    "REASON",
    "MSGS",
    "TOKENS",
    "PREFIX",
    "PREFIX_TOKENS",
    "INPUT",
    "CACHE_READ",
    "BROKEN_BY",
];
/// The last column is left-aligned and not padded; the text columns are left-aligned too.
const LEFT_ALIGNED: [bool; N_COLUMNS] = [
    false, false, false, false, true, true, false, false, false, false, false, false, true,
];
const N_COLUMNS: usize = 13;

/// One row per request, columns aligned, then the summary block.
pub(crate) fn write_table(out: &mut impl Write, report: &RequestReport) -> io::Result<()> {
    let n = report.requests.len();
    writeln!(out, "session {}: {n} requests", report.session)?;
    let mut cells: Vec<[String; N_COLUMNS]> = vec![COLUMNS.map(str::to_owned)];
    cells.extend(report.requests.iter().map(row_cells));
    let mut widths = [0usize; N_COLUMNS];
    for row in &cells {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    for row in &cells {
        let mut line = String::new();
        for (col_idx, cell) in row.iter().enumerate() {
            if col_idx > 0 {
                line.push_str("  ");
            }
            let width = widths[col_idx];
            if col_idx == COLUMNS.len() - 1 {
                line.push_str(cell);
            } else if LEFT_ALIGNED[col_idx] {
                line.push_str(&format!("{cell:<width$}"));
            } else {
                line.push_str(&format!("{cell:>width$}"));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    write_injected(out, report)?;
    write_summary(out, &report.summary)
}

fn row_cells(row: &RequestRow) -> [String; N_COLUMNS] {
    let optional = |value: Option<u64>| value.map_or_else(|| "-".to_owned(), |v| v.to_string());
    let input = row.usage.as_ref().map(|u| u.input_tokens);
    let cache_read = row.usage.as_ref().and_then(|u| u.cache_read_tokens);
    [
        row.index.to_string(),
        row.seq.to_string(),
        row.turn.to_string(),
        row.step.to_string(),
        row.settled.to_owned(),
        row.reason.clone().unwrap_or_else(|| "-".to_owned()),
        row.message_count.to_string(),
        row.estimated_tokens.to_string(),
        row.prefix.messages.to_string(),
        row.prefix.estimated_tokens.to_string(),
        optional(input),
        optional(cache_read),
        row.prefix
            .broken_by
            .as_ref()
            .map_or_else(|| "-".to_owned(), break_cell),
    ]
}

/// One line per request that adds injected messages: each new one's position and source.
fn write_injected(out: &mut impl Write, report: &RequestReport) -> io::Result<()> {
    for row in &report.requests {
        let added: Vec<String> = row
            .injected
            .iter()
            .filter(|i| i.message_idx >= row.prefix.messages)
            .map(|i| format!("#{} {}", i.message_idx, i.source))
            .collect();
        if !added.is_empty() {
            writeln!(out, "request {} injects: {}", row.index, added.join(", "))?;
        }
    }
    Ok(())
}

fn break_cell(cause: &PrefixBreak) -> String {
    format!("{}@{}", cause.name(), cause.seq())
}

fn write_summary(out: &mut impl Write, summary: &RequestSummary) -> io::Result<()> {
    let optional = |value: Option<u64>| value.map_or_else(|| "-".to_owned(), |v| v.to_string());
    let reuse = format!(
        "{} ({:.1}%)",
        summary.predicted_reused_tokens,
        summary.predicted_reuse_ratio * 100.0
    );
    let lines = [
        ("estimated tokens", summary.estimated_tokens.to_string()),
        ("predicted reuse", reuse),
        ("recorded input", optional(summary.recorded_input_tokens)),
        (
            "recorded cache reads",
            optional(summary.recorded_cache_read_tokens),
        ),
        ("prefix breaks", summary.prefix_breaks.to_string()),
        ("prompt appends", summary.prompt_appends.to_string()),
        ("prompt rewrites", summary.prompt_rewrites.to_string()),
        ("prompt clears", summary.prompt_clears.to_string()),
        (
            "prompt history rewrites",
            summary.prompt_history_rewrites.to_string(),
        ),
    ];
    writeln!(out)?;
    for (name, value) in lines {
        writeln!(out, "{name:<24}{value}")?;
    }
    Ok(())
}

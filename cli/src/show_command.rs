//! `show`: print a session's transcript, through a pager when stdout is a terminal.

use std::env;
use std::ffi::OsString;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

use anyhow::Context;
use clap::Args;

use sessionlog_engine::files::names_a_file;
use sessionlog_engine::replay::SessionSource;
use sessionlog_engine::show::{
    show as build_transcript, Block, Body, Entry, EntryBody, Marker, MessageEntry, ShowOptions,
    Transcript, BODY_BYTES_MAX_DEFAULT,
};

use crate::commands::{Global, InputArgs};
use crate::output::{print_json, EXIT_OK};

/// The pager when `$PAGER` is unset: quit if one screen, pass raw control codes, keep the
/// screen on exit.
const PAGER_DEFAULT: &str = "less -FRX";
/// Body lines of a message are indented this much, nested bodies twice as much.
const INDENT: &str = "    ";
const INDENT_NESTED: &str = "      ";

#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// The store holding SESSION. Without it, SOURCE is a file when one exists at that path
    /// (or it looks like a path), else a session in $SESSIONLOG_DB or the default store.
    #[arg(long)]
    db: Option<String>,
    #[command(flatten)]
    input: InputArgs,
    /// Cut each text, reasoning, tool-call argument or tool-result body after this many
    /// bytes; 0 never cuts.
    #[arg(long, value_name = "BYTES", default_value_t = BODY_BYTES_MAX_DEFAULT)]
    max_body_bytes: usize,
    /// Print directly, even when stdout is a terminal.
    #[arg(long)]
    no_pager: bool,
    /// A log file of any version, or a session id in the store.
    #[arg(value_name = "FILE|SESSION")]
    source: String,
}

pub(crate) fn show(global: Global, args: ShowArgs) -> anyhow::Result<ExitCode> {
    let options = ShowOptions {
        body_bytes_max: (args.max_body_bytes > 0).then_some(args.max_body_bytes),
    };
    let transcript = transcript(&args, options)?;
    if transcript.snapshot && !global.quiet {
        eprintln!(
            "{}: note: read as a normalized snapshot recording (seq = row index, time = 0)",
            args.source
        );
    }
    if global.json {
        print_json(&sessionlog_engine::documents::transcript(&transcript))?;
        return Ok(ExitCode::from(EXIT_OK));
    }
    if !args.no_pager && io::stdout().is_terminal() {
        if let Some(pager) = pager_command(env::var_os("PAGER")) {
            if page(&pager, &transcript)? {
                return Ok(ExitCode::from(EXIT_OK));
            }
        }
    }
    let mut out = BufWriter::new(io::stdout().lock());
    render(&transcript, &mut out)?;
    out.flush()?;
    Ok(ExitCode::from(EXIT_OK))
}

/// Reads the source: the store with `--db`; else a file when the argument is one or looks
/// like a path; else a session in the store named by `$SESSIONLOG_DB` or the default path.
fn transcript(args: &ShowArgs, options: ShowOptions) -> anyhow::Result<Transcript> {
    let path = Path::new(&args.source);
    if args.db.is_none() && (names_a_file(path) || looks_like_path(&args.source)) {
        let source = SessionSource::File {
            path,
            snapshot: args.input.snapshot.into(),
        };
        return Ok(build_transcript(source, options)?);
    }
    let store = crate::store_commands::open_named_read_only(args.db.as_deref())?;
    let source = SessionSource::Store {
        store: &*store,
        session: &args.source,
    };
    Ok(build_transcript(source, options)?)
}

/// A session id never holds a path separator, and log files end in `.jsonl[.zstd]`.
fn looks_like_path(source: &str) -> bool {
    source.contains(std::path::MAIN_SEPARATOR)
        || source.contains('/')
        || source.ends_with(".jsonl")
        || source.ends_with(".zstd")
}

/// The pager's program and arguments: `$PAGER` split at whitespace, or [`PAGER_DEFAULT`] when
/// it is unset; `None` when it is empty or `cat` (print directly).
fn pager_command(pager: Option<OsString>) -> Option<Vec<String>> {
    let pager = match pager {
        None => PAGER_DEFAULT.to_owned(),
        Some(value) => value.into_string().ok()?,
    };
    let words: Vec<String> = pager.split_whitespace().map(str::to_owned).collect();
    match words.first().map(String::as_str) {
        None | Some("cat") => None,
        Some(_) => Some(words),
    }
}

/// Renders into the pager's stdin and waits for it. `Ok(false)` when the pager cannot be
/// started, so that the caller prints directly; quitting the pager early is success.
fn page(command: &[String], transcript: &Transcript) -> anyhow::Result<bool> {
    let Some((program, pager_args)) = command.split_first() else {
        return Ok(false);
    };
    let Ok(mut child) = Command::new(program)
        .args(pager_args)
        .stdin(Stdio::piped())
        .spawn()
    else {
        return Ok(false);
    };
    let written = match child.stdin.take() {
        Some(stdin) => {
            let mut out = BufWriter::new(stdin);
            render(transcript, &mut out).and_then(|()| out.flush())
        }
        None => Ok(()),
    };
    // The pager's stdin is closed here (the writer was dropped), so it sees the end.
    child
        .wait()
        .with_context(|| format!("cannot wait for the pager {program}"))?;
    match written {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(true),
    }
}

/// The human transcript: a title line, then the entries; each message is set off by blank
/// lines, and each marker is one line (`==` for turn boundaries, `--` for the others).
fn render(transcript: &Transcript, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "session {}", clean(&transcript.session))?;
    let mut after_message = true;
    for entry in &transcript.entries {
        match &entry.body {
            EntryBody::Message(message) => {
                writeln!(out)?;
                render_message(entry, message, out)?;
                after_message = true;
            }
            EntryBody::Marker(marker) => {
                if after_message {
                    writeln!(out)?;
                }
                let sigil = match marker {
                    Marker::TurnStart { .. } | Marker::TurnEnd { .. } => "==",
                    _ => "--",
                };
                let text = clean(&marker.describe());
                writeln!(out, "{sigil} #{} {text}", entry.seq)?;
                after_message = false;
            }
        }
    }
    Ok(())
}

/// `#9 assistant (turn 1, step 1)`, then the blocks.
fn render_message(entry: &Entry, message: &MessageEntry, out: &mut dyn Write) -> io::Result<()> {
    let mut title = format!("#{} {}", entry.seq, message.role);
    if let [Block::ToolResult {
        tool_call_id,
        name,
        is_error,
        ..
    }] = message.blocks.as_slice()
    {
        let name = name.as_deref().unwrap_or("?");
        title.push_str(&format!(" {name} {tool_call_id}"));
        if *is_error {
            title.push_str(" [error]");
        }
    }
    let default_source = matches!(message.source.as_str(), "" | "user" | "model" | "tool");
    if !default_source {
        title.push_str(&format!(" from {}", message.source));
    }
    if message.interrupted {
        title.push_str(" [interrupted]");
    }
    match (entry.turn, entry.step) {
        (Some(turn), Some(step)) => title.push_str(&format!(" (turn {turn}, step {step})")),
        (Some(turn), None) => title.push_str(&format!(" (turn {turn})")),
        _ => {}
    }
    writeln!(out, "{}", clean(&title))?;
    if message.blocks.is_empty() {
        writeln!(out, "{INDENT}(no content)")?;
    }
    for block in &message.blocks {
        render_block(block, out)?;
    }
    Ok(())
}

fn render_block(block: &Block, out: &mut dyn Write) -> io::Result<()> {
    match block {
        Block::Text(body) => render_body(body, INDENT, out),
        Block::Reasoning(body) => {
            writeln!(out, "{INDENT}[reasoning]")?;
            render_body(body, INDENT_NESTED, out)
        }
        Block::ToolCall {
            id,
            name,
            arguments,
        } => {
            writeln!(out, "{INDENT}[tool call] {} {}", clean(name), clean(id))?;
            render_body(arguments, INDENT_NESTED, out)
        }
        Block::ToolResult { content, .. } => render_body(content, INDENT, out),
        Block::Attachment { description, .. } => {
            writeln!(out, "{INDENT}[{}]", clean(description))
        }
        Block::Other { tag } => writeln!(out, "{INDENT}[{} block]", clean(tag)),
    }
}

/// The body's lines, indented, then how many bytes were cut. Leading and trailing newlines
/// are dropped and blank lines carry no indentation, so the output has no trailing spaces.
fn render_body(body: &Body, indent: &str, out: &mut dyn Write) -> io::Result<()> {
    let text = body.text.replace("\r\n", "\n");
    let text = text.trim_matches('\n');
    if text.is_empty() && body.cut_bytes == 0 {
        return writeln!(out, "{indent}(empty)");
    }
    for line in text.split('\n') {
        let line = clean(line);
        let line = line.trim_end();
        if line.is_empty() {
            writeln!(out)?;
        } else {
            writeln!(out, "{indent}{line}")?;
        }
    }
    if body.cut_bytes > 0 {
        writeln!(out, "{indent}[... {} bytes cut]", body.cut_bytes)?;
    }
    Ok(())
}

/// Control characters other than newline and tab, escaped (`\u{1b}`), so that a log cannot
/// drive the terminal.
fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

//! The synthetic tools: their schemas, the calls the model makes and the output they return.

use serde_json::{json, Value};

use super::rng::Rng;
use super::text::{file_path, identifier, prose, DIRS, TYPE_NAMES};

/// A tool invocation: what the model asks for and what the tool answers.
pub(super) struct ToolUse {
    pub(super) name: &'static str,
    pub(super) arguments: String,
    pub(super) output: String,
}

/// The tool list of a request header; the optional tool is what a tool change toggles.
/// The tool that tool changes add and remove.
pub(super) const EXTRA_TOOL: &str = "web_search";

pub(super) fn tool_schemas(with_web_search: bool) -> Value {
    let text = |description: &str| json!({ "type": "string", "description": description });
    let mut tools = vec![
        schema(
            "bash",
            "Run a shell command in the workspace and return its combined output.",
            json!({
                "command": text("The command line to run."),
                "description": text("What the command does, in five to ten words."),
                "timeoutMs": { "type": "integer", "description": "Kill the command after this." },
            }),
            &["command"],
        ),
        schema(
            "read_file",
            "Read a file of the workspace, with line numbers.",
            json!({
                "path": text("The file to read, relative to the workspace."),
                "offset": { "type": "integer", "description": "The first line to read." },
                "limit": { "type": "integer", "description": "How many lines to read." },
            }),
            &["path"],
        ),
        schema(
            "grep",
            "Search file contents with a regular expression.",
            json!({ "pattern": text("The regular expression."), "path": text("Where to search.") }),
            &["pattern"],
        ),
        schema(
            "edit_file",
            "Replace an exact string in a file by another.",
            json!({
                "path": text("The file to edit."),
                "old_string": text("The text to replace; it must occur exactly once."),
                "new_string": text("The replacement."),
            }),
            &["path", "old_string", "new_string"],
        ),
        schema(
            "list_dir",
            "List the entries of a directory.",
            json!({ "path": text("The directory to list.") }),
            &["path"],
        ),
    ];
    if with_web_search {
        let properties = json!({ "query": text("What to search for.") });
        tools.push(schema(
            EXTRA_TOOL,
            "Search the web.",
            properties,
            &["query"],
        ));
    }
    Value::Array(tools)
}

fn schema(name: &str, description: &str, properties: Value, required: &[&str]) -> Value {
    json!({
        "name": name,
        "description": description,
        "parameters": { "type": "object", "properties": properties, "required": required },
    })
}

pub(super) fn tool_use(rng: &mut Rng) -> ToolUse {
    match rng.range(0, 9) {
        0..=3 => bash(rng),
        4 | 5 => {
            let path = file_path(rng);
            let offset = rng.range(1, 400);
            let lines = rng.range(5, 70);
            let output = lines_of(rng, lines, |rng, n| {
                format!("{:>6}\t{}", offset + n, code_line(rng))
            });
            let arguments = json!({ "path": path, "offset": offset, "limit": lines }).to_string();
            ToolUse {
                name: "read_file",
                arguments,
                output,
            }
        }
        6 | 7 => {
            let pattern = identifier(rng);
            let lines = rng.range(2, 40);
            let output = lines_of(rng, lines, grep_line);
            let arguments = json!({ "pattern": pattern, "path": rng.pick(DIRS) }).to_string();
            ToolUse {
                name: "grep",
                arguments,
                output,
            }
        }
        8 => {
            let path = file_path(rng);
            let old = code_line(rng);
            let new = code_line(rng);
            let arguments =
                json!({ "path": path, "old_string": old, "new_string": new }).to_string();
            let output = format!("Applied 1 edit to {path}.\n");
            ToolUse {
                name: "edit_file",
                arguments,
                output,
            }
        }
        _ => {
            let dir = *rng.pick(DIRS);
            let lines = rng.range(3, 40);
            let output = lines_of(rng, lines, ls_line);
            ToolUse {
                name: "list_dir",
                arguments: json!({ "path": dir }).to_string(),
                output,
            }
        }
    }
}

fn bash(rng: &mut Rng) -> ToolUse {
    let lines = rng.range(4, 60);
    let (command, output) = match rng.range(0, 3) {
        0 => {
            let filter = identifier(rng);
            let crate_name = *rng.pick(&["sessionlog-format", "sessionlog-engine", "sessionlog"]);
            let mut output = format!("\nrunning {lines} tests\n");
            output.push_str(&lines_of(rng, lines, |rng, _| {
                let status = if rng.permille(970) { "ok" } else { "FAILED" };
                format!("test {}::{} ... {status}", identifier(rng), identifier(rng))
            }));
            output.push_str(&format!("\ntest result: ok. {lines} passed; 0 failed\n"));
            (format!("cargo test -p {crate_name} {filter}"), output)
        }
        1 => (
            format!("ls -la {}", rng.pick(DIRS)),
            lines_of(rng, lines, ls_line),
        ),
        2 => {
            let output = lines_of(rng, lines, |rng, _| format!(" M {}", file_path(rng)));
            ("git status --short".to_owned(), output)
        }
        _ => {
            let command = format!("rg -n {} {}", identifier(rng), rng.pick(DIRS));
            (command, lines_of(rng, lines, grep_line))
        }
    };
    let words = rng.range(3, 9);
    let description = prose(rng, words);
    let arguments = json!({ "command": command, "description": description }).to_string();
    ToolUse {
        name: "bash",
        arguments,
        output,
    }
}

/// `count` lines made by `line`, each ending in a newline.
fn lines_of(rng: &mut Rng, count: u64, mut line: impl FnMut(&mut Rng, u64) -> String) -> String {
    let mut out = String::new();
    for line_idx in 0..count {
        out.push_str(&line(rng, line_idx));
        out.push('\n');
    }
    out
}

fn grep_line(rng: &mut Rng, _line_idx: u64) -> String {
    let line = rng.range(1, 900);
    format!("{}:{line}:    {}", file_path(rng), code_line(rng))
}

fn ls_line(rng: &mut Rng, _line_idx: u64) -> String {
    let size = rng.range(120, 90_000);
    let (day, minute) = (rng.range(1, 28), rng.range(0, 59));
    format!(
        "-rw-r--r--  1 dev dev {size:>7} Mar {day:>2} 12:{minute:02} {}.rs",
        identifier(rng)
    )
}

fn code_line(rng: &mut Rng) -> String {
    let (a, b, c) = (identifier(rng), identifier(rng), identifier(rng));
    let type_name = *rng.pick(TYPE_NAMES);
    match rng.range(0, 7) {
        0 => format!("    let {a} = {b}(&{c})?;"),
        1 => format!("fn {a}(&self, {b}: u64) -> Result<{type_name}, Error> {{"),
        2 => {
            let words = rng.range(4, 12);
            format!("    // {}", prose(rng, words))
        }
        3 => format!("    assert_eq!({a}.{b}(), {});", rng.range(0, 4096)),
        4 => "}".to_owned(),
        5 => format!("        self.{a} += {};", rng.range(1, 64)),
        6 => format!("use crate::{a}::{{{type_name}, {}}};", rng.pick(TYPE_NAMES)),
        _ => format!("    {a}.push({c});"),
    }
}

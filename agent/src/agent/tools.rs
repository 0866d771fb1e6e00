//! The built-in tools for demos and tests: `read` and `write` (a file under the working
//! directory, path-checked; `write` is refused in plan mode), `echo`, and `plan_mode` (a
//! toggle that adds a prompt section). Each tool
//! contributes its own prompt section through the registry; the tool schemas come from one
//! tool provider.

use std::path::{Component, Path, PathBuf};

use serde_json::{json, Value};

use crate::prompt::registry::{Item, Layer, PromptRegistry, Registration};
use crate::prompt::tools::ToolSchema;

/// The plan-mode section, present while plan mode is active.
pub const PLAN_SECTION: &str = "Plan mode is active: investigate and propose a plan; do not \
change files. The write tools stay listed so that the tool table, and with it the cached \
prefix, does not change.";
/// The name of the plan-mode section in the registry.
pub const PLAN_SECTION_NAME: &str = "plan-mode";
/// The name of the plan-mode tool.
pub const PLAN_TOOL: &str = "plan_mode";
/// Most bytes `read` returns.
pub const READ_BYTES_MAX: u64 = 64 * 1024;
/// Most bytes `write` writes.
pub const WRITE_BYTES_MAX: usize = 64 * 1024;

/// What a tool returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub text: String,
    pub is_error: bool,
}

fn ok(text: impl Into<String>) -> ToolOutput {
    ToolOutput {
        text: text.into(),
        is_error: false,
    }
}

fn err(text: impl Into<String>) -> ToolOutput {
    ToolOutput {
        text: text.into(),
        is_error: true,
    }
}

/// The built-in tool set over one working directory.
#[derive(Debug)]
pub struct BuiltinTools {
    root: PathBuf,
    plan: Option<Registration>,
}

/// The schemas of the built-in tools, in their registry order.
pub fn schemas() -> Vec<ToolSchema> {
    let schema = |name: &str, description: &str, parameters: Value| ToolSchema {
        name: name.to_owned(),
        schema: json!({ "name": name, "description": description, "parameters": parameters }),
    };
    vec![
        schema(
            "echo",
            "Returns its text unchanged.",
            json!({ "type": "object", "properties": { "text": { "type": "string" } }, "required": ["text"] }),
        ),
        schema(
            "plan_mode",
            "Turns plan mode on or off.",
            json!({ "type": "object", "properties": { "active": { "type": "boolean" } }, "required": ["active"] }),
        ),
        schema(
            "read",
            "Reads a text file under the working directory.",
            json!({ "type": "object", "properties": { "path": { "type": "string" } }, "required": ["path"] }),
        ),
        schema(
            "write",
            "Creates or replaces a text file under the working directory.",
            json!({ "type": "object", "properties": { "path": { "type": "string" },
                    "text": { "type": "string" } }, "required": ["path", "text"] }),
        ),
    ]
}

impl BuiltinTools {
    /// Registers the tools' schemas and their prompt sections in `registry`.
    pub fn install(registry: &PromptRegistry, root: &Path) -> Result<BuiltinTools, String> {
        let sections = [
            ("tool:echo", 100, "Use `echo` to repeat a text verbatim."),
            (
                "tool:plan_mode",
                101,
                "Use `plan_mode` with `active: true` before planning a larger change.",
            ),
            (
                "tool:read",
                102,
                "Use `read` with a relative path to read a file of the working directory.",
            ),
            (
                "tool:write",
                103,
                "Use `write` with a relative path and the whole text to create or replace a \
                 file of the working directory; it is refused while plan mode is active.",
            ),
        ];
        for (name, order, text) in sections {
            let item = Item::section(name, order, move |_| text.to_owned());
            registry
                .register(Layer::Global, item)
                .map_err(|e| e.to_string())?;
        }
        registry
            .register(Layer::Global, Item::tools("builtin", |_| schemas()))
            .map_err(|e| e.to_string())?;
        Ok(BuiltinTools {
            root: root.to_owned(),
            plan: None,
        })
    }

    pub fn plan_mode(&self) -> bool {
        self.plan.is_some()
    }

    /// Moves the working directory `read` resolves paths under.
    pub fn set_root(&mut self, root: &Path) {
        self.root = root.to_owned();
    }

    /// Runs tool `name` with its JSON `arguments`.
    pub fn run(&mut self, registry: &PromptRegistry, name: &str, arguments: &str) -> ToolOutput {
        let args: Value = match serde_json::from_str(arguments) {
            Ok(v) => v,
            Err(e) => return err(format!("invalid arguments: {e}")),
        };
        match name {
            "echo" => match args.get("text").and_then(Value::as_str) {
                Some(text) => ok(text),
                None => err("echo needs a string `text`"),
            },
            "read" => match args.get("path").and_then(Value::as_str) {
                Some(path) => self.read(path),
                None => err("read needs a string `path`"),
            },
            "write" => match (
                args.get("path").and_then(Value::as_str),
                args.get("text").and_then(Value::as_str),
            ) {
                _ if self.plan_mode() => err("plan mode is active: write changes no file"),
                (Some(path), Some(text)) => self.write(path, text),
                _ => err("write needs a string `path` and a string `text`"),
            },
            PLAN_TOOL => match args.get("active").and_then(Value::as_bool) {
                Some(active) => self.set_plan(registry, active),
                None => err("plan_mode needs a boolean `active`"),
            },
            other => err(format!("unknown tool {other:?}")),
        }
    }

    /// Turns plan mode on or off: registers or releases the plan section (the tool table
    /// never changes).
    pub fn set_plan(&mut self, registry: &PromptRegistry, active: bool) -> ToolOutput {
        match (active, self.plan.take()) {
            (true, None) => {
                let item = Item::section(PLAN_SECTION_NAME, 900, |_| PLAN_SECTION.to_owned());
                match registry.register(Layer::Global, item) {
                    Ok(reg) => self.plan = Some(reg),
                    Err(e) => return err(e.to_string()),
                }
            }
            (false, Some(reg)) => {
                registry.release(&reg);
            }
            (_, kept) => self.plan = kept,
        }
        ok(format!("plan mode {}", if active { "on" } else { "off" }))
    }

    /// Writes a relative path whose directory exists under the root, even through symlinks.
    fn write(&self, path: &str, text: &str) -> ToolOutput {
        if let Some(refused) = not_plain(path) {
            return refused;
        }
        if text.len() > WRITE_BYTES_MAX {
            return err(format!("{path}: more than {WRITE_BYTES_MAX} bytes"));
        }
        let target = self.root.join(path);
        let (Some(parent), Some(name)) = (target.parent(), target.file_name()) else {
            return err(format!("{path:?} names no file"));
        };
        let (Ok(root), Ok(dir)) = (self.root.canonicalize(), parent.canonicalize()) else {
            return err(format!("{path}: its directory does not exist"));
        };
        if !dir.starts_with(&root) {
            return err(format!("{path:?} leaves the working directory"));
        }
        let full = dir.join(name);
        if full.is_symlink() {
            return err(format!("{path:?} is a symbolic link"));
        }
        match std::fs::write(&full, text) {
            Ok(()) => ok(format!("wrote {} bytes to {path}", text.len())),
            Err(e) => err(format!("{path}: {e}")),
        }
    }

    /// Reads a relative path that stays under the root, even through symlinks.
    fn read(&self, path: &str) -> ToolOutput {
        if let Some(refused) = not_plain(path) {
            return refused;
        }
        let relative = Path::new(path);
        let (Ok(root), Ok(full)) = (
            self.root.canonicalize(),
            self.root.join(relative).canonicalize(),
        ) else {
            return err(format!("{path}: not found"));
        };
        if !full.starts_with(&root) {
            return err(format!("{path:?} leaves the working directory"));
        }
        let bytes = match std::fs::read(&full) {
            Ok(b) => b,
            Err(e) => return err(format!("{path}: {e}")),
        };
        let end = bytes.len().min(READ_BYTES_MAX as usize);
        ok(String::from_utf8_lossy(&bytes[..end]).into_owned())
    }
}

/// The refusal of a path that is not a plain relative path, or `None`.
fn not_plain(path: &str) -> Option<ToolOutput> {
    let plain = Path::new(path)
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    (path.is_empty() || !plain).then(|| {
        err(format!(
            "{path:?} is not a relative path under the working directory"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::registry::AssemblyContext;

    fn prompt(registry: &PromptRegistry) -> String {
        let ctx = AssemblyContext::agent("main");
        let assembly = registry.assemble(&ctx).map_err(|e| e.to_string());
        assembly
            .and_then(|a| a.render_prompt().map_err(|e| e.to_string()))
            .unwrap_or_default()
    }

    // Goal: the plan-mode tool adds and removes its prompt section; the tools are offered.
    // Method: install, toggle plan mode on and off, render the prompt each time.
    #[test]
    fn plan_mode_adds_a_section() {
        let registry = PromptRegistry::new();
        let dir = std::env::temp_dir();
        let mut tools = BuiltinTools::install(&registry, &dir).unwrap_or_else(|e| panic!("{e}"));
        assert!(!prompt(&registry).contains(PLAN_SECTION));
        let on = tools.run(&registry, "plan_mode", r#"{"active":true}"#);
        assert!(!on.is_error);
        assert!(prompt(&registry).contains(PLAN_SECTION));
        tools.run(&registry, "plan_mode", r#"{"active":false}"#);
        assert!(!prompt(&registry).contains(PLAN_SECTION));
        let ctx = AssemblyContext::agent("main");
        let names: Vec<String> = registry
            .assemble(&ctx)
            .map(|a| a.tools.into_iter().map(|t| t.name).collect())
            .unwrap_or_default();
        assert_eq!(names, ["echo", "plan_mode", "read", "write"]);
    }

    // Goal: read refuses paths that leave the working directory and reads those inside.
    // Method: a temp dir with one file; read it, then `..`, an absolute path and a missing file.
    #[test]
    fn read_is_path_checked() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.path().join("a.txt"), "hello").unwrap_or_else(|e| panic!("{e}"));
        let registry = PromptRegistry::new();
        let mut tools =
            BuiltinTools::install(&registry, dir.path()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            tools.run(&registry, "read", r#"{"path":"a.txt"}"#),
            ok("hello")
        );
        assert!(
            tools
                .run(&registry, "read", r#"{"path":"../a.txt"}"#)
                .is_error
        );
        assert!(
            tools
                .run(&registry, "read", r#"{"path":"/etc/passwd"}"#)
                .is_error
        );
        assert!(
            tools
                .run(&registry, "read", r#"{"path":"missing"}"#)
                .is_error
        );
        assert_eq!(tools.run(&registry, "echo", r#"{"text":"x"}"#), ok("x"));
    }

    // Goal: write creates a file under the root, refuses paths that leave it or whose
    // directory is missing, and changes nothing in plan mode. Method: a temp dir.
    #[test]
    fn write_is_path_checked_and_refused_in_plan_mode() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let registry = PromptRegistry::new();
        let mut tools =
            BuiltinTools::install(&registry, dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let wrote = tools.run(&registry, "write", r#"{"path":"b.txt","text":"hi"}"#);
        assert_eq!(wrote, ok("wrote 2 bytes to b.txt"));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("b.txt"))
                .ok()
                .as_deref(),
            Some("hi")
        );
        for args in [
            r#"{"path":"../b.txt","text":"x"}"#,
            r#"{"path":"/tmp/b.txt","text":"x"}"#,
            r#"{"path":"missing/b.txt","text":"x"}"#,
            r#"{"path":"b.txt"}"#,
        ] {
            assert!(tools.run(&registry, "write", args).is_error, "{args}");
        }
        tools.set_plan(&registry, true);
        let refused = tools.run(&registry, "write", r#"{"path":"b.txt","text":"changed"}"#);
        assert!(refused.is_error);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("b.txt"))
                .ok()
                .as_deref(),
            Some("hi")
        );
    }
}

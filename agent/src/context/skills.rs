//! Skills: folders holding a `SKILL.md`, discovered from skill directories. The catalog lists
//! each by name and one-line description, with the rule that a skill is not followed before
//! it is loaded; the `skill` tool loads one; a `/skill-name` in a user message places that
//! skill's full text after every other injection of the step.
//!
//! A `SKILL.md` may open with a front matter block (`---` lines around `name:` and
//! `description:`); without it the folder names the skill and the first text line describes
//! it.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sessionlog_format::Message;

use super::instructions::escape;
use super::{framed, injected, source_of};
use crate::prompt::tools::ToolSchema;

/// The file that makes a folder a skill.
pub const SKILL_FILE: &str = "SKILL.md";
/// The name of the tool that loads a skill.
pub const SKILL_TOOL: &str = "skill";
/// Most bytes read from one skill file.
pub const SKILL_FILE_BYTES_MAX: u64 = 256 * 1024;
/// Most skills one catalog lists.
pub const CATALOG_SKILLS_MAX: usize = 512;
/// The `source.kind` of the catalog message.
pub const CATALOG_SOURCE: &str = "skill-catalog";
/// The `source.kind` of an invocation message.
pub const INVOCATION_SOURCE: &str = "skill-invocation";
/// The rule that heads the catalog.
pub const CATALOG_RULE: &str = "Skills are available, each listed by name with a one-line \
description. Do not follow a skill before it is loaded: call the `skill` tool with its name to \
load its full text first.";

/// One discovered skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    pub path: PathBuf,
    /// The whole `SKILL.md`.
    pub text: String,
}

/// The skills of a session, in catalog order (by name, in code-unit order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkillCatalog {
    skills: Vec<Skill>,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Splits a front matter block off `text`: its `key: value` lines and the rest.
fn front_matter(text: &str) -> (Vec<(String, String)>, &str) {
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return (Vec::new(), text);
    };
    let Some(end) = rest.find("\n---") else {
        return (Vec::new(), text);
    };
    let pairs = rest[..end]
        .lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(':')?;
            let value = value.trim().trim_matches('"').trim_matches('\'');
            Some((key.trim().to_owned(), value.to_owned()))
        })
        .collect();
    let body = rest[end + 4..].trim_start_matches(['-', '\r', '\n']);
    (pairs, body)
}

/// Parses one skill file; `folder` names it when the front matter does not.
pub fn parse_skill(folder: &str, path: &Path, text: &str) -> Option<Skill> {
    let (pairs, body) = front_matter(text);
    let get = |key: &str| pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    let name = get("name").unwrap_or_else(|| folder.to_owned());
    if !valid_name(&name) {
        return None;
    }
    let description = get("description").unwrap_or_else(|| {
        body.lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'))
            .unwrap_or_default()
            .to_owned()
    });
    let description = description.lines().next().unwrap_or_default().to_owned();
    Some(Skill {
        name,
        description,
        path: path.to_path_buf(),
        text: text.to_owned(),
    })
}

fn read_capped(path: &Path) -> Option<String> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    let mut bytes = Vec::new();
    file.take(SKILL_FILE_BYTES_MAX)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

impl SkillCatalog {
    /// Discovers the skills under `dirs`: every sub-folder with a `SKILL.md`. A name found
    /// twice keeps its first directory's skill.
    pub fn discover(dirs: &[PathBuf]) -> SkillCatalog {
        let mut skills: Vec<Skill> = Vec::new();
        for dir in dirs {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut folders: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.join(SKILL_FILE).is_file())
                .collect();
            folders.sort();
            for folder in folders {
                let file = folder.join(SKILL_FILE);
                let name = folder
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default()
                    .to_owned();
                let Some(text) = read_capped(&file) else {
                    continue;
                };
                let Some(skill) = parse_skill(&name, &file, &text) else {
                    continue;
                };
                if skills.len() < CATALOG_SKILLS_MAX && !skills.iter().any(|s| s.name == skill.name)
                {
                    skills.push(skill);
                }
            }
        }
        skills.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        SkillCatalog { skills }
    }

    pub fn from_skills(mut skills: Vec<Skill>) -> SkillCatalog {
        skills.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        skills.dedup_by(|a, b| a.name == b.name);
        SkillCatalog { skills }
    }

    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    pub fn skills(&self) -> &[Skill] {
        &self.skills
    }

    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }

    /// The catalog text: the rule, then one `- name: description` line per skill.
    pub fn text(&self) -> String {
        let mut body = String::from(CATALOG_RULE);
        body.push('\n');
        for skill in &self.skills {
            body.push_str(&format!(
                "\n- {}: {}",
                skill.name,
                escape(&skill.description)
            ));
        }
        framed(&body)
    }

    /// The catalog message.
    pub fn message(&self, id: String) -> Message {
        let names: Vec<&str> = self.skills.iter().map(|s| s.name.as_str()).collect();
        let source = source_of(CATALOG_SOURCE, &[("skills", json!(names))]);
        injected(id, self.text(), source)
    }

    /// The `skill` tool's schema.
    pub fn tool_schema() -> ToolSchema {
        ToolSchema {
            name: SKILL_TOOL.to_owned(),
            schema: json!({
                "name": SKILL_TOOL,
                "description": "Loads a skill of the catalog by name and returns its full text.",
                "parameters": { "type": "object",
                    "properties": { "name": { "type": "string" } }, "required": ["name"] }
            }),
        }
    }

    /// Runs the `skill` tool: the named skill's full text, or an error text.
    pub fn load(&self, arguments: &str) -> Result<String, String> {
        let args: Value =
            serde_json::from_str(arguments).map_err(|e| format!("invalid arguments: {e}"))?;
        let name = args
            .get("name")
            .and_then(Value::as_str)
            .ok_or("skill needs a string `name`")?;
        let name = name.trim_start_matches('/');
        self.get(name)
            .map(|s| s.text.clone())
            .ok_or_else(|| format!("no skill named {name:?}"))
    }

    /// The skills a user text names as `/skill-name` (at the start or after whitespace,
    /// trailing punctuation ignored), each once, in order of first mention.
    pub fn invoked(&self, text: &str) -> Vec<&Skill> {
        let mut out: Vec<&Skill> = Vec::new();
        for word in text.split_whitespace() {
            let Some(name) = word.strip_prefix('/') else {
                continue;
            };
            let name = name.trim_end_matches(['.', ',', ';', ':', '!', '?', ')', '"', '\'']);
            if let Some(skill) = self.get(name) {
                if !out.iter().any(|s| s.name == skill.name) {
                    out.push(skill);
                }
            }
        }
        out
    }
}

/// The invocation message of `skill`: its full text, framed.
pub fn invocation_message(id: String, skill: &Skill) -> Message {
    let body = format!(
        "The user invoked the skill {name} (/{name}). Its full text follows; it is loaded, so \
         follow it for this request.\n\n{}",
        escape(skill.text.trim_end()),
        name = skill.name
    );
    let source = source_of(INVOCATION_SOURCE, &[("skill", json!(skill.name))]);
    injected(id, framed(&body), source)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn skill(name: &str, description: &str) -> Skill {
        Skill {
            name: name.to_owned(),
            description: description.to_owned(),
            path: PathBuf::from(format!("/s/{name}/SKILL.md")),
            text: format!("# {name}\n{description}\nsteps"),
        }
    }

    // Goal: the front matter names and describes a skill; without it the folder and the
    // first text line do. Method: parse both forms and a bad name.
    #[test]
    fn skill_files_parse() {
        let text = "---\nname: review\ndescription: Reviews a change.\n---\n# Review\nDo it.\n";
        let parsed = parse_skill("folder", Path::new("/s/SKILL.md"), text).unwrap();
        assert_eq!(
            (parsed.name.as_str(), parsed.description.as_str()),
            ("review", "Reviews a change.")
        );
        let plain = parse_skill("deploy", Path::new("/s/SKILL.md"), "# Deploy\nShips it.\n");
        assert_eq!(
            plain.map(|s| (s.name, s.description)),
            Some(("deploy".to_owned(), "Ships it.".to_owned()))
        );
        assert_eq!(parse_skill("bad name", Path::new("/s"), "x"), None);
    }

    // Goal: the catalog lists names and descriptions under the load-first rule; the tool
    // loads one; invocations are found once each, in order. Method: a two-skill catalog.
    #[test]
    fn catalog_tool_and_invocations() {
        let catalog = SkillCatalog::from_skills(vec![
            skill("review", "Reviews a change."),
            skill("deploy", "Ships it."),
        ]);
        assert_eq!(
            catalog.text(),
            format!(
                "<system-reminder>\n{CATALOG_RULE}\n\n- deploy: Ships it.\n- review: Reviews a \
                 change.\n</system-reminder>"
            )
        );
        assert_eq!(
            catalog.load(r#"{"name":"deploy"}"#),
            Ok("# deploy\nShips it.\nsteps".to_owned())
        );
        assert!(catalog.load(r#"{"name":"nope"}"#).is_err());
        let names: Vec<&str> = catalog
            .invoked("please /review, then /deploy and /review again; /nope a/review")
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(names, vec!["review", "deploy"]);
    }
}

//! The session header, the first record of every log (spec 3.3).

use crate::json::json_object;
use crate::version::FormatVersion;

json_object! {
    /// The header line `{"type":"session","version":N,...}`. Decoding keeps every member;
    /// [`SessionHeader::check`] applies the rules of the header's version.
    pub struct SessionHeader {
        req kind: String = "type",
        opt version: u64 = "version",
        req id: String = "id",
        req created_at: u64 = "createdAt",
        opt cwd: String = "cwd",
        opt parent_session: String = "parentSession",
        opt seed_length: u64 = "seedLength",
        opt is_seeded: bool = "isSeeded",
        opt origin: String = "origin",
        req delegation_depth: u64 = "delegationDepth",
        opt agent_preset: String = "agentPreset",
    }
}

/// Longest session id, in bytes of UTF-8.
pub const SESSION_ID_BYTES_MAX: usize = 256;

/// The session-id rule, the one every entry point applies (`check`, `import`, `migrate`, the
/// stores' creation, `serve`, `copy`): non-empty, at most [`SESSION_ID_BYTES_MAX`] bytes, not
/// only whitespace, no control character, no line or paragraph separator, no bidirectional
/// formatting character (U+200E, U+200F, U+061C, U+202A to U+202E, U+2066 to U+2069), and one
/// plain path segment (no `/` or `\`, not `.` or `..`). Ids are printed in `SESSION@SEQ`
/// diagnostics and become file names in operator scripts (`export -o "$id.v3.jsonl"`), so an
/// id that could hide text, reorder a terminal line or traverse paths is refused at the door.
/// The error is the reason, a sentence fragment ("it holds a control character (U+0007)").
pub fn check_session_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("it is empty".to_owned());
    }
    if id.len() > SESSION_ID_BYTES_MAX {
        return Err(format!(
            "it is {} bytes long, at most {SESSION_ID_BYTES_MAX}",
            id.len()
        ));
    }
    if let Some(c) = id.chars().find(|c| c.is_control()) {
        return Err(format!(
            "it holds a control character (U+{:04X})",
            u32::from(c)
        ));
    }
    if let Some(c) = id.chars().find(|c| is_bidi_or_separator(*c)) {
        return Err(format!(
            "it holds a bidirectional formatting or separator character (U+{:04X})",
            u32::from(c)
        ));
    }
    if id.chars().all(char::is_whitespace) {
        return Err("it is only whitespace".to_owned());
    }
    if id.contains(['/', '\\']) || id == "." || id == ".." {
        return Err("it is not one plain path segment".to_owned());
    }
    Ok(())
}

/// Bidirectional marks, embeddings, overrides and isolates, and the line and paragraph
/// separators: characters that change how the text around them is displayed.
fn is_bidi_or_separator(c: char) -> bool {
    matches!(
        c,
        '\u{200E}' | '\u{200F}' | '\u{061C}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
            | '\u{2028}' | '\u{2029}'
    )
}

/// True for the `{{name}}` placeholders of normalized recordings (spec 18).
pub fn is_placeholder(text: &str) -> bool {
    text.len() >= 4 && text.starts_with("{{") && text.ends_with("}}")
}

impl SessionHeader {
    /// A fresh, unseeded V3 header.
    pub fn new_v3(id: impl Into<String>, created_at: u64) -> SessionHeader {
        SessionHeader {
            kind: "session".to_owned(),
            version: Some(3),
            id: id.into(),
            created_at,
            cwd: None,
            parent_session: None,
            seed_length: None,
            is_seeded: Some(false),
            origin: None,
            delegation_depth: 0,
            agent_preset: None,
            extra: Default::default(),
        }
    }

    /// Checks the header rules of `version`; `snapshot` admits placeholders where a path is
    /// expected.
    pub fn check(&self, version: FormatVersion, snapshot: bool) -> Result<(), String> {
        if version == FormatVersion::V4 {
            return self.check_v4(snapshot);
        }
        if self.kind != "session" {
            return Err(format!(
                "header type must be \"session\", found \"{}\"",
                self.kind
            ));
        }
        if let Some(key) = self.extra.keys().next() {
            return Err(format!("header has unexpected field `{key}`"));
        }
        if self.created_at > crate::json::SAFE_INTEGER_MAX {
            return Err("header createdAt must be a safe integer".to_owned());
        }
        if self.id.is_empty() {
            return Err("header id must be a non-empty string".to_owned());
        }
        if let Err(reason) = check_session_id(&self.id) {
            return Err(format!("header id {:?} is refused: {reason}", self.id));
        }
        if let Some(cwd) = &self.cwd {
            let placeholder = snapshot && is_placeholder(cwd);
            if !placeholder && !is_absolute_path(cwd) {
                return Err(format!(
                    "header cwd must be an absolute path, found \"{cwd}\""
                ));
            }
        }
        if let Some(origin) = &self.origin {
            if origin != "subagent" {
                return Err(format!(
                    "header origin must be \"subagent\", found \"{origin}\""
                ));
            }
        }
        if version.has_packed_rows() {
            if self.is_seeded.is_some() {
                return Err(format!(
                    "header field isSeeded is not part of format {version}"
                ));
            }
        } else {
            if self.seed_length.is_some() {
                return Err(format!(
                    "header field seedLength is forbidden in format {version}"
                ));
            }
            if self.is_seeded.is_none() {
                return Err(format!("header of format {version} requires isSeeded"));
            }
        }
        Ok(())
    }

    /// The V4 header rules with dsh's texts (`assertReleasedV4Header`, dsh-v4.md 3): the V3
    /// key set, every other key refused by name, then our session-id rule.
    fn check_v4(&self, snapshot: bool) -> Result<(), String> {
        if self.kind != "session" {
            return Err("expected format v4 physical header".to_owned());
        }
        if self.seed_length.is_some() {
            return Err("format v4 header has unexpected field seedLength".to_owned());
        }
        if let Some(key) = self.extra.keys().next() {
            return Err(format!("format v4 header has unexpected field {key}"));
        }
        if self.is_seeded.is_none() {
            return Err("format v4 header lacks required field isSeeded".to_owned());
        }
        for (name, value) in [
            ("createdAt", self.created_at),
            ("delegationDepth", self.delegation_depth),
        ] {
            if value > crate::json::SAFE_INTEGER_MAX {
                return Err(format!(
                    "format v4 header {name} must be a non-negative safe integer"
                ));
            }
        }
        if let Some(cwd) = &self.cwd {
            if !(is_absolute_path(cwd) || snapshot && is_placeholder(cwd)) {
                return Err("format v4 header cwd must be absolute".to_owned());
            }
        }
        if self.origin.as_deref().is_some_and(|o| o != "subagent") {
            return Err("format v4 header origin must be \"subagent\"".to_owned());
        }
        if let Err(reason) = check_session_id(&self.id) {
            return Err(format!("header id {:?} is refused: {reason}", self.id));
        }
        Ok(())
    }

    /// Whether the log was forked from a parent (V0/V1 derive it from `seedLength`).
    pub fn seeded(&self) -> bool {
        self.is_seeded.unwrap_or(self.seed_length.is_some())
    }
}

/// POSIX absolute paths, and Windows drive or UNC paths.
fn is_absolute_path(path: &str) -> bool {
    let bytes = path.as_bytes();
    path.starts_with('/')
        || path.starts_with("\\\\")
        || (bytes.len() >= 3
            && bytes[0].is_ascii_alphabetic()
            && bytes[1] == b':'
            && (bytes[2] == b'\\' || bytes[2] == b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(text: &str) -> SessionHeader {
        serde_json::from_str(text).unwrap()
    }

    // Goal: each version's header rules, one accepted and one refused case.
    #[test]
    fn version_rules() {
        let v3 = header(
            r#"{"type":"session","version":3,"id":"a","createdAt":1,"cwd":"/w","isSeeded":false,"delegationDepth":0}"#,
        );
        assert_eq!(v3.check(FormatVersion::V3, false), Ok(()));
        assert_eq!(
            v3.check(FormatVersion::V0, false).unwrap_err(),
            "header field isSeeded is not part of format v0"
        );
        let v0 = header(
            r#"{"type":"session","version":0,"id":"a","createdAt":1,"seedLength":4,"delegationDepth":1}"#,
        );
        assert_eq!(v0.check(FormatVersion::V0, false), Ok(()));
        assert!(v0.seeded());
        assert_eq!(
            v0.check(FormatVersion::V2, false).unwrap_err(),
            "header field seedLength is forbidden in format v2"
        );
        let extra = header(
            r#"{"type":"session","version":3,"id":"a","createdAt":1,"isSeeded":false,"delegationDepth":0,"sandboxMode":"x"}"#,
        );
        assert_eq!(
            extra.check(FormatVersion::V3, false).unwrap_err(),
            "header has unexpected field `sandboxMode`"
        );
        let placeholder = header(
            r#"{"type":"session","version":3,"id":"a","createdAt":1,"cwd":"{{cwd}}","isSeeded":false,"delegationDepth":0}"#,
        );
        assert!(placeholder.check(FormatVersion::V3, false).is_err());
        assert_eq!(placeholder.check(FormatVersion::V3, true), Ok(()));
    }

    // Goal: the V4 header rules with dsh's texts (dsh-v4.md 3), one accepted and one refused
    // case each.
    #[test]
    fn v4_rules() {
        let base = r#""type":"session","version":4,"id":"a","createdAt":1"#;
        let ok = header(&format!(
            r#"{{{base},"cwd":"/w","parentSession":"p","isSeeded":true,"origin":"subagent","delegationDepth":1,"agentPreset":"x"}}"#
        ));
        assert_eq!(ok.check(FormatVersion::V4, false), Ok(()));
        let refused = [
            (
                r#","isSeeded":false,"delegationDepth":0,"x":1"#,
                "format v4 header has unexpected field x",
            ),
            (
                r#","seedLength":2,"isSeeded":false,"delegationDepth":0"#,
                "format v4 header has unexpected field seedLength",
            ),
            (
                r#","delegationDepth":0"#,
                "format v4 header lacks required field isSeeded",
            ),
            (
                r#","cwd":"w","isSeeded":false,"delegationDepth":0"#,
                "format v4 header cwd must be absolute",
            ),
            (
                r#","origin":"user","isSeeded":false,"delegationDepth":0"#,
                "format v4 header origin must be \"subagent\"",
            ),
            (
                r#","isSeeded":false,"delegationDepth":9007199254740992"#,
                "format v4 header delegationDepth must be a non-negative safe integer",
            ),
        ];
        for (rest, text) in refused {
            let h = header(&format!("{{{base}{rest}}}"));
            assert_eq!(
                h.check(FormatVersion::V4, false).unwrap_err(),
                text,
                "{rest}"
            );
        }
    }

    // Goal: the session-id rule (issue #20: a space, a right-to-left override and other ids
    // that `import` refused were accepted by `check`). Method: each refused class once, the
    // header check carries the reason, and ordinary ids (uuids, placeholders) pass.
    #[test]
    fn session_id_rule() {
        for id in [
            "ff1c1e99-3bd4-4ef8-a954-80d607d628ba",
            "{{session:1}}",
            "a b",
            "\u{e9}",
        ] {
            assert_eq!(check_session_id(id), Ok(()), "{id:?}");
        }
        let refused = [
            ("", "it is empty"),
            (" ", "it is only whitespace"),
            ("\u{3000}\t", "it holds a control character (U+0009)"),
            ("\u{3000}", "it is only whitespace"),
            ("a\u{7}b", "it holds a control character (U+0007)"),
            (
                "abc\u{202E}fdp",
                "it holds a bidirectional formatting or separator character (U+202E)",
            ),
            (
                "a\u{2066}b",
                "it holds a bidirectional formatting or separator character (U+2066)",
            ),
            (
                "a\u{200F}",
                "it holds a bidirectional formatting or separator character (U+200F)",
            ),
            (
                "\u{061C}",
                "it holds a bidirectional formatting or separator character (U+061C)",
            ),
            (
                "a\u{2028}b",
                "it holds a bidirectional formatting or separator character (U+2028)",
            ),
            ("a/b", "it is not one plain path segment"),
            ("a\\b", "it is not one plain path segment"),
            ("..", "it is not one plain path segment"),
        ];
        for (id, reason) in refused {
            assert_eq!(check_session_id(id), Err(reason.to_owned()), "{id:?}");
        }
        let long = "x".repeat(SESSION_ID_BYTES_MAX + 1);
        assert_eq!(
            check_session_id(&long),
            Err("it is 257 bytes long, at most 256".to_owned())
        );
        assert_eq!(check_session_id(&long[1..]), Ok(()));
        let header = SessionHeader::new_v3("abc\u{202E}fdp", 1);
        assert_eq!(
            header.check(FormatVersion::V3, false).unwrap_err(),
            "header id \"abc\\u{202e}fdp\" is refused: it holds a bidirectional formatting or \
             separator character (U+202E)"
        );
    }
}

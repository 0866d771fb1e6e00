//! Format versions (spec 2, 9; dsh-v4.md 2): one monotonic integer, V0 to V4.

use std::fmt;

/// The version this build writes by default: the target of `migrate` without `--to`, of the
/// stores and of `gen` without `--version`. V4 is read natively and written on request; the
/// default moves to V4 once the stores record a session's version (issue #22 item 4).
pub const FORMAT_VERSION_CURRENT: u64 = 3;

/// The newest version this build reads natively; a log with a higher number is refused before
/// anything else as written by a newer harness.
pub const FORMAT_VERSION_NEWEST: u64 = 4;

/// A released dsh session-log format version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FormatVersion {
    /// Alpha releases: packed chunk rows, `seedLength`, no `.v0` file tag.
    V0,
    /// V0's layout with a normalized vocabulary.
    V1,
    /// One event per row; streams embedded in assistant settlements; `isSeeded`.
    V2,
    /// The system prompt as surface node 0; canonical envelopes.
    V3,
    /// Tool results as `role:"tool"` messages, producer-owned sources, `developer/message`
    /// (dsh 0.1.7 / 0.2.0, dsh-v4.md).
    V4,
}

impl FormatVersion {
    /// Every released version, oldest first.
    pub const ALL: [FormatVersion; 5] = [
        FormatVersion::V0,
        FormatVersion::V1,
        FormatVersion::V2,
        FormatVersion::V3,
        FormatVersion::V4,
    ];

    /// The version number as written in the header.
    pub fn number(self) -> u64 {
        match self {
            FormatVersion::V0 => 0,
            FormatVersion::V1 => 1,
            FormatVersion::V2 => 2,
            FormatVersion::V3 => 3,
            FormatVersion::V4 => 4,
        }
    }

    /// The version for a header number, if this build knows it.
    pub fn from_number(n: u64) -> Option<FormatVersion> {
        FormatVersion::ALL.into_iter().find(|v| v.number() == n)
    }

    /// V3 and later: the system prompt is surface node 0 (the protected head), envelopes are
    /// canonical (`startSeq`/`endSeq`), `system/message` and `tool/ptc-dispatch*` exist.
    pub fn has_system_head(self) -> bool {
        self >= FormatVersion::V3
    }

    /// V0 and V1 share the packed-row layout and `seedLength`.
    pub fn has_packed_rows(self) -> bool {
        self <= FormatVersion::V1
    }

    /// The canonical file name of this generation (spec 3.1 rule 1).
    pub fn file_name(self, compressed: bool) -> String {
        let base = match self {
            FormatVersion::V0 => "session.jsonl".to_owned(),
            v => format!("session.v{}.jsonl", v.number()),
        };
        if compressed {
            base + ".zstd"
        } else {
            base
        }
    }
}

impl fmt::Display for FormatVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.number())
    }
}

/// The refusal for a log written by a newer harness (spec 9, `SessionFormatUnsupportedError`).
pub fn newer_version_refusal(id: &str, found: u64) -> String {
    format!(
        "session \"{id}\" uses log format v{found}, but this harness reads only \
         v{FORMAT_VERSION_NEWEST}: the log was written by a newer harness \u{2014} upgrade the \
         harness to open it"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_follow_the_generation_grammar() {
        assert_eq!(FormatVersion::V0.file_name(false), "session.jsonl");
        assert_eq!(FormatVersion::V3.file_name(true), "session.v3.jsonl.zstd");
        assert_eq!(FormatVersion::V4.file_name(false), "session.v4.jsonl");
        assert_eq!(FormatVersion::from_number(4), Some(FormatVersion::V4));
        assert_eq!(FormatVersion::from_number(5), None);
    }

    #[test]
    fn newer_refusal_uses_the_spec_text() {
        assert_eq!(
            newer_version_refusal("s1", 9),
            "session \"s1\" uses log format v9, but this harness reads only v4: the log was \
             written by a newer harness \u{2014} upgrade the harness to open it"
        );
    }
}

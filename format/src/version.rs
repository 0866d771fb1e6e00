//! Format versions (spec 2, 9): one monotonic integer, V0 to V3.

use std::fmt;

/// The version this build writes and reads natively.
pub const FORMAT_VERSION_CURRENT: u64 = 3;

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
}

impl FormatVersion {
    /// Every released version, oldest first.
    pub const ALL: [FormatVersion; 4] = [
        FormatVersion::V0,
        FormatVersion::V1,
        FormatVersion::V2,
        FormatVersion::V3,
    ];

    /// The version number as written in the header.
    pub fn number(self) -> u64 {
        match self {
            FormatVersion::V0 => 0,
            FormatVersion::V1 => 1,
            FormatVersion::V2 => 2,
            FormatVersion::V3 => 3,
        }
    }

    /// The version for a header number, if this build knows it.
    pub fn from_number(n: u64) -> Option<FormatVersion> {
        FormatVersion::ALL.into_iter().find(|v| v.number() == n)
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
         v{FORMAT_VERSION_CURRENT}: the log was written by a newer harness \u{2014} upgrade the \
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
        assert_eq!(FormatVersion::from_number(4), None);
    }

    #[test]
    fn newer_refusal_uses_the_spec_text() {
        assert_eq!(
            newer_version_refusal("s1", 9),
            "session \"s1\" uses log format v9, but this harness reads only v3: the log was \
             written by a newer harness \u{2014} upgrade the harness to open it"
        );
    }
}

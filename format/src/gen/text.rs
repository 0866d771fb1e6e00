//! Synthetic prose, identifiers and paths drawn from a small vocabulary.

use super::rng::Rng;

#[rustfmt::skip]
const WORDS: &[&str] = &[
    "the", "a", "to", "of", "and", "in", "is", "that", "it", "for", "this", "with", "we", "on",
    "be", "as", "not", "file", "test", "function", "error", "value", "module", "crate", "type",
    "struct", "field", "return", "call", "read", "write", "check", "build", "change", "update",
    "fix", "add", "remove", "path", "line", "buffer", "index", "offset", "length", "batch",
    "event", "log", "session", "surface", "node", "seq", "step", "turn", "header", "stream",
    "chunk", "token", "config", "option", "result", "output", "input", "state", "cache", "frame",
    "record", "reader", "writer", "parser", "decode", "encode", "version", "format", "schema",
    "rule", "admission", "replace", "append", "compaction", "summary", "range", "span", "tail",
    "head", "system", "prompt", "message", "assistant", "user", "tool", "arguments", "command",
    "workspace", "directory", "cargo", "rust", "compile", "warning", "lint", "assert", "invariant",
    "expected", "actual", "now", "then", "first", "next", "last", "before", "after", "because",
    "so", "but", "also", "only", "each", "every", "all", "some", "should", "must", "can", "will",
    "would", "need", "looks", "seems", "run", "passes", "fails", "works", "let", "me", "I", "see",
    "think", "maybe", "probably", "instead", "again", "here", "there", "which", "where", "when",
    "into", "from", "by", "at", "or", "if", "new", "old", "same", "different", "small", "large",
    "empty", "missing", "current", "previous", "bytes", "lines", "count", "number", "string",
    "vector", "map", "key", "order",
];

#[rustfmt::skip]
pub(super) const TYPE_NAMES: &[&str] = &[
    "Event", "Surface", "Batch", "Reader", "Writer", "Header", "Frame", "Record", "Node", "Plan",
    "Stream", "Config", "Session", "Violation",
];

pub(super) const DIRS: &[&str] = &[
    "src",
    "format/src",
    "engine/src",
    "engine/src/store",
    "cli/src",
    "tests",
];

/// Sentences of words from [`WORDS`], with a few identifiers in backticks; ASCII only.
pub(super) fn prose(rng: &mut Rng, words: u64) -> String {
    let mut out = String::with_capacity(usize::try_from(words).expect("a small count") * 7);
    let mut left = words;
    while left > 0 {
        let len = rng.range(4, 18).min(left);
        if !out.is_empty() {
            out.push_str(if rng.permille(200) { "\n\n" } else { " " });
        }
        for word_idx in 0..len {
            if word_idx > 0 {
                out.push(' ');
            }
            if rng.permille(40) {
                out.push('`');
                out.push_str(&identifier(rng));
                out.push('`');
            } else {
                let word = *rng.pick(WORDS);
                if word_idx == 0 {
                    out.push(word.as_bytes()[0].to_ascii_uppercase() as char);
                    out.push_str(&word[1..]);
                } else {
                    out.push_str(word);
                }
            }
            if word_idx + 1 < len && rng.permille(60) {
                out.push(',');
            }
        }
        out.push('.');
        left -= len;
    }
    out
}

pub(super) fn identifier(rng: &mut Rng) -> String {
    format!(
        "{}_{}",
        rng.pick(WORDS).to_ascii_lowercase(),
        rng.pick(WORDS).to_ascii_lowercase()
    )
}

pub(super) fn file_path(rng: &mut Rng) -> String {
    format!("{}/{}.rs", rng.pick(DIRS), identifier(rng))
}

pub(super) fn base62(rng: &mut Rng, len: usize) -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    (0..len).map(|_| *rng.pick(ALPHABET) as char).collect()
}

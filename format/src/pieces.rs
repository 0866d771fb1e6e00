//! [`Pieces`]: the text pieces of a packed stream run, held in one buffer.
//!
//! A packed run (`texts` of text and reasoning chunks, `args` of tool-call chunks, spec 6.2)
//! is an array of a few hundred short strings, often one token each. Held as `Vec<String>`,
//! every piece cost an allocation on decode and a free on drop, the largest part of decoding a
//! log after the JSON scanning itself. `Pieces` keeps the pieces back to back in one `String`
//! with the end offset of each, and decodes and encodes exactly as `Vec<String>` does: the
//! same JSON array, the same binary array, the same error texts ("expected a sequence",
//! "expected a string").

use std::fmt;

use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An ordered list of strings stored as one buffer and the end offset of each string.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Pieces {
    /// Every piece, back to back.
    text: String,
    /// The byte offset in `text` where each piece ends, nondecreasing.
    ends: Vec<usize>,
}

impl Pieces {
    /// No pieces.
    pub fn new() -> Pieces {
        Pieces::default()
    }

    /// Appends one piece.
    pub fn push(&mut self, piece: &str) {
        self.text.push_str(piece);
        self.ends.push(self.text.len());
    }

    /// The number of pieces (an empty string counts as a piece).
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are no pieces.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Piece `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<&str> {
        let end = *self.ends.get(index)?;
        let start = index.checked_sub(1).map_or(0, |i| self.ends[i]);
        Some(&self.text[start..end])
    }

    /// The pieces in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            pieces: self,
            front: 0,
            back: self.ends.len(),
        }
    }

    /// Every piece joined, without a copy: what `Vec<String>::concat` would build.
    pub fn joined(&self) -> &str {
        &self.text
    }

    /// Every piece joined, as an owned string.
    pub fn concat(&self) -> String {
        self.text.clone()
    }
}

impl fmt::Debug for Pieces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<S: AsRef<str>> FromIterator<S> for Pieces {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Pieces {
        let mut pieces = Pieces::new();
        for piece in iter {
            pieces.push(piece.as_ref());
        }
        pieces
    }
}

impl From<Vec<String>> for Pieces {
    fn from(pieces: Vec<String>) -> Pieces {
        pieces.iter().collect()
    }
}

impl<'a> IntoIterator for &'a Pieces {
    type Item = &'a str;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// The pieces of a [`Pieces`], in order.
#[derive(Clone)]
pub struct Iter<'a> {
    pieces: &'a Pieces,
    front: usize,
    back: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.front == self.back {
            return None;
        }
        let piece = self.pieces.get(self.front);
        self.front += 1;
        piece
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.back - self.front;
        (n, Some(n))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.front == self.back {
            return None;
        }
        self.back -= 1;
        self.pieces.get(self.back)
    }
}

impl ExactSizeIterator for Iter<'_> {}

/// The newtype name `Pieces` serializes its array under. Every serializer of the project
/// (serde_json, `serde_json::Value`, the binary encoder) writes a newtype struct as its inner
/// value, so the bytes are those of the bare array; the lossless-JSON audit
/// (`json::check_serialize_lossless`) knows from the name that the value holds strings only,
/// so it skips walking a few hundred pieces it could find no number in.
pub(crate) const PIECES_NEWTYPE: &str = "$sessionlog::Pieces";

impl Serialize for Pieces {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_newtype_struct(PIECES_NEWTYPE, &Array(self))
    }
}

/// The pieces as the JSON array of strings.
struct Array<'a>(&'a Pieces);

impl Serialize for Array<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for piece in self.0 {
            seq.serialize_element(piece)?;
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for Pieces {
    /// While the thread skims ([`crate::skim`]) the array is checked and no piece is kept:
    /// in one pass by a deserializer that knows `SKIMMED_STRINGS`
    /// (the binary decoder, for a run of plain elements), else element by element as always.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Pieces, D::Error> {
        if crate::skim::is_skimming() {
            return deserializer
                .deserialize_newtype_struct(crate::skim::SKIMMED_STRINGS, SkimmedRun);
        }
        deserializer.deserialize_seq(SeqVisitor { keep: true })
    }
}

/// A skimmed run asked for as `SKIMMED_STRINGS`: checked
/// whole by the deserializer (`visit_unit`), or read as the skimming [`SeqVisitor`] reads it.
struct SkimmedRun;

impl<'de> Visitor<'de> for SkimmedRun {
    type Value = Pieces;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence")
    }

    /// The deserializer checked an array of strings.
    fn visit_unit<E: de::Error>(self) -> Result<Pieces, E> {
        Ok(Pieces::new())
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Pieces, D::Error> {
        deserializer.deserialize_seq(SeqVisitor { keep: false })
    }
}

/// Reads the array, each element straight into the buffer (or, when not `keep`, nowhere).
struct SeqVisitor {
    keep: bool,
}

impl<'de> Visitor<'de> for SeqVisitor {
    type Value = Pieces;

    /// As serde's `Vec` visitor, so that a wrong type reads exactly as before.
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Pieces, A::Error> {
        let mut pieces = Pieces::new();
        if !self.keep {
            while seq.next_element_seed(SkimmedPiece)?.is_some() {}
            return Ok(pieces);
        }
        // Bounded as serde bounds a `Vec`'s preallocation: a hint is not trusted far.
        pieces.ends.reserve(seq.size_hint().unwrap_or(0).min(4096));
        while seq
            .next_element_seed(PieceSeed(Some(&mut pieces.text)))?
            .is_some()
        {
            pieces.ends.push(pieces.text.len());
        }
        Ok(pieces)
    }
}

/// Appends one string element to the buffer (or only checks it is a string).
struct PieceSeed<'a>(Option<&'a mut String>);

impl<'de> DeserializeSeed<'de> for PieceSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_string(self)
    }
}

/// Checks one string element and keeps nothing: asked for as a
/// [`SKIMMED_STRING`](crate::skim::SKIMMED_STRING), which the binary decoder checks without
/// decoding; elsewhere (and for anything but a string) as [`PieceSeed`] would.
struct SkimmedPiece;

impl<'de> DeserializeSeed<'de> for SkimmedPiece {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_newtype_struct(crate::skim::SKIMMED_STRING, self)
    }
}

impl<'de> Visitor<'de> for SkimmedPiece {
    type Value = ();

    /// As serde's `String` visitor.
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    /// The deserializer checked a string.
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_string(PieceSeed(None))
    }
}

impl Visitor<'_> for PieceSeed<'_> {
    type Value = ();

    /// As serde's `String` visitor.
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, piece: &str) -> Result<(), E> {
        if let Some(text) = self.0 {
            text.push_str(piece);
        }
        Ok(())
    }

    /// As serde's `String` visitor: bytes that are UTF-8 are a string.
    fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<(), E> {
        match std::str::from_utf8(bytes) {
            Ok(piece) => self.visit_str(piece),
            Err(_) => Err(E::invalid_value(de::Unexpected::Bytes(bytes), &self)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary;

    fn sample() -> Pieces {
        ["He", "llo", "", " w\u{f6}rld"].into_iter().collect()
    }

    #[test]
    fn pieces_keep_their_boundaries() {
        let pieces = sample();
        assert_eq!(pieces.len(), 4);
        assert_eq!(pieces.get(0), Some("He"));
        assert_eq!(pieces.get(2), Some(""));
        assert_eq!(pieces.get(3), Some(" w\u{f6}rld"));
        assert_eq!(pieces.get(4), None);
        assert_eq!(
            pieces.iter().collect::<Vec<_>>(),
            ["He", "llo", "", " w\u{f6}rld"]
        );
        assert_eq!(
            pieces.iter().rev().collect::<Vec<_>>(),
            ["He", "llo", "", " w\u{f6}rld"]
                .iter()
                .rev()
                .copied()
                .collect::<Vec<_>>()
        );
        assert_eq!(pieces.joined(), "Hello w\u{f6}rld");
        assert_eq!(
            format!("{pieces:?}"),
            "[\"He\", \"llo\", \"\", \" w\u{f6}rld\"]"
        );
        // The same text cut elsewhere is other pieces.
        let other: Pieces = ["Hel", "lo", "", " w\u{f6}rld"].into_iter().collect();
        assert_ne!(pieces, other);
        assert!(Pieces::new().is_empty());
    }

    #[test]
    fn json_and_binary_are_those_of_a_vec_of_strings() {
        let vec: Vec<String> = ["He", "llo", "", " w\u{f6}rld"].map(String::from).to_vec();
        let pieces = sample();
        let json = serde_json::to_string(&pieces).unwrap();
        assert_eq!(json, serde_json::to_string(&vec).unwrap());
        assert_eq!(serde_json::from_str::<Pieces>(&json).unwrap(), pieces);
        let escaped = r#"["a\"b","\u00e9\n"]"#;
        let want: Vec<String> = serde_json::from_str(escaped).unwrap();
        assert_eq!(
            serde_json::from_str::<Pieces>(escaped).unwrap(),
            Pieces::from(want)
        );

        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        binary::to_vec(&pieces, &mut ours).unwrap();
        binary::to_vec(&vec, &mut theirs).unwrap();
        assert_eq!(ours, theirs);
        assert_eq!(binary::from_slice::<Pieces>(&ours).unwrap(), pieces);
    }

    #[test]
    fn refusals_read_as_those_of_a_vec_of_strings() {
        for bad in [
            r#"["a", 5]"#,
            r#"{"a": 1}"#,
            r#""abc""#,
            r#"["a", null]"#,
            "[\"a\",",
            "7",
            "[[\"a\"]]",
        ] {
            let ours = serde_json::from_str::<Pieces>(bad).unwrap_err().to_string();
            let theirs = serde_json::from_str::<Vec<String>>(bad)
                .unwrap_err()
                .to_string();
            assert_eq!(ours, theirs, "{bad}");
            let skimmed = crate::skim::skimming(true, || serde_json::from_str::<Pieces>(bad))
                .unwrap_err()
                .to_string();
            assert_eq!(skimmed, theirs, "skimmed: {bad}");
        }
        let mut bytes = Vec::new();
        binary::to_vec(&serde_json::json!(["a", 1]), &mut bytes).unwrap();
        let ours = binary::from_slice::<Pieces>(&bytes)
            .unwrap_err()
            .to_string();
        let theirs = binary::from_slice::<Vec<String>>(&bytes)
            .unwrap_err()
            .to_string();
        assert_eq!(ours, theirs);
        let skimmed = crate::skim::skimming(true, || binary::from_slice::<Pieces>(&bytes))
            .unwrap_err()
            .to_string();
        assert_eq!(skimmed, theirs);
    }

    #[test]
    fn skimmed_pieces_are_checked_and_not_kept() {
        let escaped = r#"["a\"b","\u00e9\n"]"#;
        let skimmed = crate::skim::skimming(true, || serde_json::from_str::<Pieces>(escaped));
        assert_eq!(skimmed.unwrap(), Pieces::new());
        // A lone surrogate is refused skimmed as whole.
        let lone = r#"["a","\ud800"]"#;
        let whole = serde_json::from_str::<Pieces>(lone)
            .unwrap_err()
            .to_string();
        let skimmed = crate::skim::skimming(true, || serde_json::from_str::<Pieces>(lone))
            .unwrap_err()
            .to_string();
        assert_eq!(skimmed, whole);
        let mut bytes = Vec::new();
        binary::to_vec(&sample(), &mut bytes).unwrap();
        let skimmed = crate::skim::skimming(true, || binary::from_slice::<Pieces>(&bytes));
        assert_eq!(skimmed.unwrap(), Pieces::new());
        // Bytes that are not UTF-8 are refused skimmed as whole.
        let at = bytes.iter().position(|&b| b == b'H').unwrap();
        bytes[at] = 0xff;
        let whole = binary::from_slice::<Pieces>(&bytes)
            .unwrap_err()
            .to_string();
        let skimmed = crate::skim::skimming(true, || binary::from_slice::<Pieces>(&bytes))
            .unwrap_err()
            .to_string();
        assert_eq!(skimmed, whole);
    }
}

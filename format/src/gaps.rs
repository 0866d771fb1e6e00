//! [`Gaps`]: the time gaps (`dt`) of a packed stream run.
//!
//! A `Vec<i64>` in every way that shows (it derefs to one, and encodes and decodes as one: the
//! same JSON array, the same binary array, the same error texts), except that while the thread
//! skims ([`crate::skim`]) its elements are checked and not kept.

use std::fmt;
use std::ops::{Deref, DerefMut};

use serde::de::{SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The gap in milliseconds before each member of a packed run but the first.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Gaps(pub Vec<i64>);

impl Deref for Gaps {
    type Target = Vec<i64>;

    fn deref(&self) -> &Vec<i64> {
        &self.0
    }
}

impl DerefMut for Gaps {
    fn deref_mut(&mut self) -> &mut Vec<i64> {
        &mut self.0
    }
}

impl From<Vec<i64>> for Gaps {
    fn from(gaps: Vec<i64>) -> Gaps {
        Gaps(gaps)
    }
}

impl PartialEq<Vec<i64>> for Gaps {
    fn eq(&self, other: &Vec<i64>) -> bool {
        &self.0 == other
    }
}

impl fmt::Debug for Gaps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for Gaps {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Gaps {
    /// Whole, serde's own `Vec<i64>`; while the thread skims, the same array checked and not
    /// kept: in one pass by a deserializer that knows
    /// `SKIMMED_INTEGERS` (the binary decoder, for a run of
    /// plain elements), else element by element.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Gaps, D::Error> {
        if !crate::skim::is_skimming() {
            return Vec::deserialize(deserializer).map(Gaps);
        }
        deserializer.deserialize_newtype_struct(crate::skim::SKIMMED_INTEGERS, SkimmedRun)
    }
}

/// A skimmed run asked for as `SKIMMED_INTEGERS`: checked
/// whole by the deserializer (`visit_unit`), or read as [`Skimmed`] reads it.
struct SkimmedRun;

impl<'de> Visitor<'de> for SkimmedRun {
    type Value = Gaps;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence")
    }

    /// The deserializer checked an array of integers that fit an `i64`.
    fn visit_unit<E: serde::de::Error>(self) -> Result<Gaps, E> {
        Ok(Gaps::default())
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, deserializer: D) -> Result<Gaps, D::Error> {
        deserializer.deserialize_seq(Skimmed)
    }
}

/// Checks the array as serde reads a `Vec<i64>`, keeping nothing.
struct Skimmed;

impl<'de> Visitor<'de> for Skimmed {
    type Value = Gaps;

    /// As serde's `Vec` visitor, so that a wrong type reads exactly as whole.
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Gaps, A::Error> {
        while seq.next_element::<i64>()?.is_some() {}
        Ok(Gaps::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary;

    #[test]
    fn json_and_binary_are_those_of_a_vec() {
        let vec = vec![0i64, 3, -1, i64::MAX, i64::MIN];
        let gaps = Gaps::from(vec.clone());
        let json = serde_json::to_string(&gaps).unwrap();
        assert_eq!(json, serde_json::to_string(&vec).unwrap());
        assert_eq!(serde_json::from_str::<Gaps>(&json).unwrap(), gaps);
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        binary::to_vec(&gaps, &mut ours).unwrap();
        binary::to_vec(&vec, &mut theirs).unwrap();
        assert_eq!(ours, theirs);
        assert_eq!(binary::from_slice::<Gaps>(&ours).unwrap(), gaps);
        assert_eq!(format!("{gaps:?}"), format!("{vec:?}"));
    }

    #[test]
    fn refusals_read_as_those_of_a_vec_kept_or_skimmed() {
        for bad in [
            "[1, \"a\"]",
            "[1, 1.5]",
            "[9223372036854775808]",
            "{\"a\": 1}",
            "\"abc\"",
            "[1, null]",
            "[1,",
            "7",
            "[[1]]",
        ] {
            let theirs = serde_json::from_str::<Vec<i64>>(bad)
                .unwrap_err()
                .to_string();
            let kept = serde_json::from_str::<Gaps>(bad).unwrap_err().to_string();
            let skimmed = crate::skim::skimming(true, || serde_json::from_str::<Gaps>(bad))
                .unwrap_err()
                .to_string();
            assert_eq!(kept, theirs, "{bad}");
            assert_eq!(skimmed, theirs, "{bad}");
        }
    }

    #[test]
    fn a_skimmed_array_keeps_nothing() {
        let skimmed = crate::skim::skimming(true, || serde_json::from_str::<Gaps>("[1, 2, 3]"));
        assert_eq!(skimmed.unwrap(), Gaps::default());
    }
}

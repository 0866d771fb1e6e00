//! The range encoding of `sourceEventSeqs` (spec 3.4), the same in every version.
//!
//! A strictly increasing list is written with runs of three or more consecutive seqs as
//! `[start, end]` pairs; any other list is written verbatim.

use serde::ser::{SerializeSeq, Serializer};
use serde_json::Value;

/// Runs this long or longer become a `[start, end]` pair.
const RUN_LEN_MIN: usize = 3;

/// Writes `seqs` in range-encoded form.
pub fn serialize<S: Serializer>(seqs: &[u64], serializer: S) -> Result<S::Ok, S::Error> {
    let increasing = seqs.windows(2).all(|w| w[0] < w[1]);
    if !increasing {
        return serializer.collect_seq(seqs);
    }
    let mut seq = serializer.serialize_seq(None)?;
    let mut run_idx = 0;
    while run_idx < seqs.len() {
        let mut end_idx = run_idx;
        while end_idx + 1 < seqs.len() && seqs[end_idx + 1] == seqs[end_idx] + 1 {
            end_idx += 1;
        }
        let run_len = end_idx - run_idx + 1;
        if run_len >= RUN_LEN_MIN {
            seq.serialize_element(&[seqs[run_idx], seqs[end_idx]])?;
        } else {
            for s in &seqs[run_idx..=end_idx] {
                seq.serialize_element(s)?;
            }
        }
        run_idx = end_idx + 1;
    }
    seq.end()
}

/// Encodes `seqs` to a JSON value (for tests and diagnostics).
pub fn encode(seqs: &[u64]) -> Value {
    serialize(seqs, serde_json::value::Serializer)
        .expect("serializing integers to a JSON value cannot fail")
}

/// One element of an encoded list: a seq, or an inclusive `[start, end]` pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqItem {
    One(u64),
    Range(u64, u64),
}

impl<'de> serde::Deserialize<'de> for SeqItem {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ItemVisitor;
        impl<'de> serde::de::Visitor<'de> for ItemVisitor {
            type Value = SeqItem;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a seq or a [start, end] pair")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<SeqItem, E> {
                crate::json::visit_safe_u64(v).map(SeqItem::One)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<SeqItem, A::Error> {
                use serde::de::Error;
                let pair_error = || A::Error::custom("a range must be a [start, end] pair of seqs");
                let start: u64 = seq.next_element()?.ok_or_else(pair_error)?;
                let end: u64 = seq.next_element()?.ok_or_else(pair_error)?;
                if seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    return Err(pair_error());
                }
                Ok(SeqItem::Range(
                    crate::json::visit_safe_u64(start)?,
                    crate::json::visit_safe_u64(end)?,
                ))
            }
        }
        deserializer.deserialize_any(ItemVisitor)
    }
}

/// Expands an encoded list for the event at `seq`, checking the rules of `decodeSeqRanges`:
/// pairs have `start <= end < seq`; with any pair present the expansion is strictly
/// increasing; all entries are unique and `< seq`.
pub fn expand(items: &[SeqItem], seq: u64) -> Result<Vec<u64>, String> {
    let mut seqs = Vec::with_capacity(items.len());
    let mut has_range = false;
    for item in items {
        match *item {
            SeqItem::One(s) => seqs.push(s),
            SeqItem::Range(start, end) => {
                if start > end {
                    return Err(format!("range [{start},{end}] has start after end"));
                }
                if end >= seq {
                    return Err(format!("range [{start},{end}] must end before seq {seq}"));
                }
                has_range = true;
                seqs.extend(start..=end);
            }
        }
    }
    if has_range && !seqs.windows(2).all(|w| w[0] < w[1]) {
        return Err("a range-encoded list must expand to strictly increasing seqs".to_owned());
    }
    if let Some(&late) = seqs.iter().find(|&&s| s >= seq) {
        return Err(format!("source seq {late} is not earlier than seq {seq}"));
    }
    let mut sorted = seqs.clone();
    sorted.sort_unstable();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("source seq {} is listed twice", w[0]));
    }
    Ok(seqs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decode(text: &str, seq: u64) -> Result<Vec<u64>, String> {
        let items: Vec<SeqItem> = serde_json::from_str(text).map_err(|e| e.to_string())?;
        expand(&items, seq)
    }

    // Goal: pin the encoder's output on the spec's examples and the run-length boundaries.
    #[test]
    fn golden_encodings() {
        let run: Vec<u64> = (9..=36).collect();
        assert_eq!(encode(&run), json!([[9, 36]]));
        assert_eq!(encode(&[14]), json!([14]));
        assert_eq!(encode(&[19, 21, 8]), json!([19, 21, 8]));
        assert_eq!(encode(&[4, 5]), json!([4, 5]));
        assert_eq!(encode(&[4, 5, 6]), json!([[4, 6]]));
        assert_eq!(encode(&[1, 3, 4, 5, 7, 8]), json!([1, [3, 5], 7, 8]));
        assert_eq!(encode(&[]), json!([]));
        assert_eq!(encode(&[5, 5]), json!([5, 5]));
    }

    // Goal: decoding accepts what the encoder writes plus verbatim lists, and refuses what
    // decodeSeqRanges refuses.
    #[test]
    fn decode_rules() {
        assert_eq!(decode("[[9,12],14]", 20).unwrap(), vec![9, 10, 11, 12, 14]);
        assert_eq!(decode("[19,21,8]", 22).unwrap(), vec![19, 21, 8]);
        assert!(decode("[[3,2]]", 9)
            .unwrap_err()
            .contains("start after end"));
        assert!(decode("[[3,9]]", 9)
            .unwrap_err()
            .contains("must end before seq 9"));
        assert!(decode("[8,[1,3]]", 9)
            .unwrap_err()
            .contains("strictly increasing"));
        assert!(decode("[4,4]", 9).unwrap_err().contains("listed twice"));
        assert!(decode("[9]", 9).unwrap_err().contains("not earlier"));
        assert!(decode("[[1,2,3]]", 9).unwrap_err().contains("pair"));
        assert!(decode("[-1]", 9).is_err());
    }

    // Goal: encode then decode is the identity for any list of distinct earlier seqs.
    #[test]
    fn round_trip_small_lists() {
        let lists: [&[u64]; 5] = [
            &[0, 1, 2, 3],
            &[7, 2, 9],
            &[1, 2, 4, 5, 6, 10],
            &[3],
            &[0, 2],
        ];
        for list in lists {
            let text = encode(list).to_string();
            assert_eq!(decode(&text, 100).unwrap(), list.to_vec(), "{text}");
        }
    }
}

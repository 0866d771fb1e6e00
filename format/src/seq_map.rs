//! A hash map keyed by seq, with a hash that costs one multiply.
//!
//! Seqs are dense event numbers chosen by the log, not by an adversary, so the default
//! SipHash (built to resist crafted keys) only adds cost on the hottest lookups: deriving
//! messages walks every live node and finds its event by seq.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` from seq to `V`.
pub type SeqMap<V> = HashMap<u64, V, BuildHasherDefault<SeqHasher>>;

/// Fibonacci hashing of a u64: the multiply spreads consecutive seqs over the high bits,
/// which the map's control bytes use.
#[derive(Debug, Default, Clone, Copy)]
pub struct SeqHasher(u64);

const GOLDEN_RATIO_64: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for SeqHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*byte)).wrapping_mul(GOLDEN_RATIO_64);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(GOLDEN_RATIO_64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the map behaves as a map, and consecutive seqs hash to distinct values.
    #[test]
    fn dense_seqs_spread() {
        let mut map: SeqMap<u64> = SeqMap::default();
        for seq in 0..10_000 {
            map.insert(seq, seq * 2);
        }
        assert_eq!(map.get(&4321), Some(&8642));
        let mut hashes: Vec<u64> = (0..1000u64)
            .map(|seq| {
                let mut hasher = SeqHasher::default();
                hasher.write_u64(seq);
                hasher.finish() >> 57
            })
            .collect();
        hashes.sort_unstable();
        hashes.dedup();
        assert!(hashes.len() > 100, "top bits vary: {}", hashes.len());
    }
}

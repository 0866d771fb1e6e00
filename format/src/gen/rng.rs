//! The generator's only source of variation: a seeded splitmix64 stream.

/// splitmix64 (Steele, Lea and Flood): tiny, fast, and good enough for synthetic data.
#[derive(Debug, Clone)]
pub(super) struct Rng {
    state: u64,
}

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    pub(super) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`; the modulo bias is negligible at these ranges.
    pub(super) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo <= hi, "range bounds are ordered");
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// True with probability `p / 1000`.
    pub(super) fn permille(&mut self, p: u64) -> bool {
        self.next_u64() % 1000 < p
    }

    pub(super) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        assert!(!items.is_empty(), "pick from a non-empty list");
        let idx = self.next_u64() % items.len() as u64;
        &items[usize::try_from(idx).expect("an index below a slice length")]
    }
}

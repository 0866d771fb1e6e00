//! [`SeqList`]: the ascending seqs of one kind of event (command runs and completions, human
//! user messages), which the validator keeps for the whole log, at four bytes a seq.
//!
//! A `Vec<u64>` spends eight bytes on a seq whose high half is zero in any log that fits a
//! machine. The list keeps the low halves in one array and, beside it, where each run of one
//! high half starts, so a lookup is one binary search over the runs (one run in practice) and
//! one over that run's low halves.

/// Ascending seqs, each held as its low 32 bits; `highs` names the high half of each run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct SeqList {
    lows: Vec<u32>,
    /// `(high half, index in lows of the run's first seq)`, ascending; every run holds at
    /// least one seq, so equal lists are equal values.
    highs: Vec<(u32, usize)>,
}

fn split(seq: u64) -> (u32, u32) {
    // Both halves fit: the high one is a u64 shifted by 32, the low one masked to 32 bits.
    ((seq >> 32) as u32, seq as u32)
}

fn join(high: u32, low: u32) -> u64 {
    (u64::from(high) << 32) | u64::from(low)
}

impl SeqList {
    pub(super) fn is_empty(&self) -> bool {
        self.lows.is_empty()
    }

    /// The last (largest) seq.
    pub(super) fn last(&self) -> Option<u64> {
        let (high, _) = *self.highs.last()?;
        Some(join(high, *self.lows.last()?))
    }

    /// Appends `seq`, which follows every seq held.
    ///
    /// # Panics
    ///
    /// When `seq` does not follow the last seq (the validator pushes the seqs of the events it
    /// commits, in order).
    pub(super) fn push(&mut self, seq: u64) {
        assert!(
            self.last().is_none_or(|last| last < seq),
            "seqs are pushed in ascending order"
        );
        let (high, low) = split(seq);
        if self.highs.last().is_none_or(|(last, _)| *last != high) {
            self.highs.push((high, self.lows.len()));
        }
        self.lows.push(low);
    }

    /// Removes the last seq.
    pub(super) fn pop(&mut self) -> Option<u64> {
        let seq = self.last()?;
        self.lows.pop();
        if self
            .highs
            .last()
            .is_some_and(|(_, start)| *start == self.lows.len())
        {
            self.highs.pop();
        }
        Some(seq)
    }

    /// Whether `seq` is held.
    pub(super) fn contains(&self, seq: u64) -> bool {
        let (high, low) = split(seq);
        let Ok(run) = self.highs.binary_search_by_key(&high, |(h, _)| *h) else {
            return false;
        };
        let start = self.highs[run].1;
        let end = self.highs.get(run + 1).map_or(self.lows.len(), |(_, s)| *s);
        self.lows[start..end].binary_search(&low).is_ok()
    }

    pub(super) fn clear(&mut self) {
        self.lows.clear();
        self.highs.clear();
    }

    /// Room for `additional` more seqs, exactly.
    pub(super) fn reserve_exact(&mut self, additional: usize) {
        self.lows.reserve_exact(additional);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the list holds, finds and gives back exactly what an ascending `Vec<u64>` does,
    // across high halves, and equal contents are equal lists whatever was pushed and popped.
    // Method: seqs around the 2^32 boundaries pushed, looked up (held, between, beyond) and
    // popped one by one against a Vec; a list popped back to a prefix equals one built to it.
    #[test]
    fn it_holds_what_an_ascending_vec_holds() {
        let seqs = [
            0,
            1,
            7,
            u64::from(u32::MAX) - 1,
            u64::from(u32::MAX),
            1 << 32,
            (1 << 32) + 5,
            3 << 32,
            (1 << 53) - 1,
            u64::MAX,
        ];
        let mut list = SeqList::default();
        let mut vec = Vec::new();
        for seq in seqs {
            list.push(seq);
            vec.push(seq);
            assert_eq!(
                (list.lows.len(), list.last()),
                (vec.len(), vec.last().copied())
            );
        }
        let probes = seqs
            .iter()
            .flat_map(|s| [s.wrapping_sub(1), *s, s.wrapping_add(1)])
            .chain([2 << 32, 1 << 40]);
        for probe in probes {
            assert_eq!(list.contains(probe), vec.contains(&probe), "seq {probe}");
        }
        for cut in (0..seqs.len()).rev() {
            assert_eq!(list.pop(), vec.pop());
            let mut built = SeqList::default();
            seqs[..cut].iter().for_each(|seq| built.push(*seq));
            assert_eq!(list, built, "popped to {cut} seqs");
            assert_eq!(list.is_empty(), cut == 0);
        }
        assert_eq!(list.pop(), None);
        list.push(9);
        list.clear();
        assert_eq!(list, SeqList::default());
    }

    #[test]
    fn a_seq_out_of_order_is_a_caller_bug() {
        let mut list = SeqList::default();
        list.push(5);
        let caught = std::panic::catch_unwind(move || list.push(5)).unwrap_err();
        let message = caught.downcast_ref::<&str>().map(|m| m.to_string());
        let message = message.or_else(|| caught.downcast_ref::<String>().cloned());
        assert_eq!(
            message.as_deref(),
            Some("seqs are pushed in ascending order")
        );
    }
}

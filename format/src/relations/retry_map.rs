//! [`RetryMap`]: every retry id of the log with its scheduled attempts, which the validator
//! keeps for the whole log (a new chain must take an unused id; a start pairs any earlier
//! attempt).
//!
//! A `HashMap<Box<str>, Attempts>` spent about 140 bytes an id: a 48-byte bucket at the load
//! a doubling leaves (half the buckets empty just after one), and an allocation for each id.
//! Here the ids sit back to back in one string and the attempts in one vector, both in the
//! order the ids came, and the hash table holds only each entry's index: about 80 bytes an id
//! at the same load (a 40-byte entry, the id's bytes, and 9 bytes for each of the table's
//! buckets).
//! Ids leave only in the reverse order they came (an undo reverts the newest commit first), so
//! both stay dense.

use std::fmt;
use std::hash::BuildHasher;

use hashbrown::HashTable;

use super::Attempts;

/// Every retry id with its attempts; see the module documentation.
#[derive(Clone, Default)]
pub(super) struct RetryMap {
    /// Every id, back to back, in the order they came.
    ids: String,
    /// Per id, in the same order: where it ends in `ids`, and its attempts.
    entries: Vec<Entry>,
    /// The index in `entries` of each id, by the id's hash.
    index: HashTable<usize>,
    state: foldhash::fast::RandomState,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    end: usize,
    attempts: Attempts,
}

// The 40 bytes an id the module documentation counts.
const _: () = assert!(std::mem::size_of::<Entry>() <= 40);

/// The id of entry `i`.
fn id_of<'a>(ids: &'a str, entries: &[Entry], i: usize) -> &'a str {
    let start = i.checked_sub(1).map_or(0, |before| entries[before].end);
    &ids[start..entries[i].end]
}

impl RetryMap {
    fn find(&self, id: &str) -> Option<usize> {
        let hash = self.state.hash_one(id);
        let found = self
            .index
            .find(hash, |&i| id_of(&self.ids, &self.entries, i) == id);
        found.copied()
    }

    pub(super) fn get(&self, id: &str) -> Option<&Attempts> {
        Some(&self.entries[self.find(id)?].attempts)
    }

    pub(super) fn get_mut(&mut self, id: &str) -> Option<&mut Attempts> {
        let i = self.find(id)?;
        Some(&mut self.entries[i].attempts)
    }

    pub(super) fn contains_key(&self, id: &str) -> bool {
        self.find(id).is_some()
    }

    /// Adds `id`, which is not held, with its `attempts`.
    pub(super) fn insert_new(&mut self, id: &str, attempts: Attempts) {
        debug_assert!(!self.contains_key(id), "a new retry id");
        let hash = self.state.hash_one(id);
        self.ids.push_str(id);
        self.entries.push(Entry {
            end: self.ids.len(),
            attempts,
        });
        let (ids, entries, state) = (&self.ids, &self.entries, &self.state);
        let rehash = |&i: &usize| state.hash_one(id_of(ids, entries, i));
        self.index.insert_unique(hash, entries.len() - 1, rehash);
    }

    /// Removes `id`, the id added last (an undo of the commit that added it).
    ///
    /// # Panics
    ///
    /// When `id` is not the id added last.
    pub(super) fn remove_last(&mut self, id: &str) {
        let last = self.entries.len().checked_sub(1);
        let last = last.filter(|&i| id_of(&self.ids, &self.entries, i) == id);
        let last = last.expect("an undo removes the retry id added last");
        let hash = self.state.hash_one(id);
        let slot = self.index.find_entry(hash, |&i| i == last);
        slot.expect("every entry is indexed").remove();
        self.entries.pop();
        let start = self.entries.last().map_or(0, |entry| entry.end);
        self.ids.truncate(start);
    }

    pub(super) fn clear(&mut self) {
        self.ids.clear();
        self.entries.clear();
        self.index.clear();
    }

    /// Room for `additional` more ids without growing the table or the attempts.
    pub(super) fn reserve(&mut self, additional: usize) {
        self.entries.reserve_exact(additional);
        let (ids, entries, state) = (&self.ids, &self.entries, &self.state);
        let rehash = |&i: &usize| state.hash_one(id_of(ids, entries, i));
        self.index.reserve(additional, rehash);
    }

    fn iter(&self) -> impl Iterator<Item = (&str, &Attempts)> + '_ {
        (0..self.entries.len()).map(|i| {
            let id = id_of(&self.ids, &self.entries, i);
            (id, &self.entries[i].attempts)
        })
    }
}

/// Equal as maps: the same ids with the same attempts, whatever order they came in.
impl PartialEq for RetryMap {
    fn eq(&self, other: &RetryMap) -> bool {
        self.entries.len() == other.entries.len()
            && self
                .iter()
                .all(|(id, attempts)| other.get(id) == Some(attempts))
    }
}

impl fmt::Debug for RetryMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::super::Scheduled;
    use super::*;

    fn attempts(turn: u64) -> Attempts {
        Attempts::new(Scheduled {
            turn,
            step: 1,
            started: false,
        })
    }

    // Goal: the map finds, changes and removes exactly what a `HashMap` does, through table
    // growth, with ids that share prefixes and the empty id; an undo that removes the newest
    // id leaves a map equal to one that never held it; equality ignores the order of arrival.
    // Method: 2,000 ids against a HashMap, looked up after every insert and removal.
    #[test]
    fn it_holds_what_a_hash_map_holds() {
        let ids: Vec<String> = (0..2_000)
            .map(|i| match i {
                0 => String::new(),
                i => format!("retry_{}", "ab".repeat(i % 7)) + &i.to_string(),
            })
            .collect();
        let mut map = RetryMap::default();
        let mut reference = std::collections::HashMap::new();
        for (turn, id) in ids.iter().enumerate() {
            assert!(!map.contains_key(id));
            map.insert_new(id, attempts(turn as u64));
            reference.insert(id.clone(), attempts(turn as u64));
            map.get_mut(id).unwrap().first.started = true;
            reference.get_mut(id).unwrap().first.started = true;
        }
        for id in &ids {
            assert_eq!(map.get(id), reference.get(id), "{id:?}");
        }
        assert_eq!(map.get("retry_"), None);
        assert!(!map.contains_key("retry_ab"));

        let mut built = RetryMap::default();
        for (turn, id) in ids.iter().enumerate().rev() {
            built.insert_new(id, attempts(turn as u64));
            built.get_mut(id).unwrap().first.started = true;
        }
        assert_eq!(map, built, "the same ids in another order");

        for cut in (1_000..ids.len()).rev() {
            map.remove_last(&ids[cut]);
            reference.remove(&ids[cut]);
            assert_eq!(map.get(&ids[cut]), None);
            assert_eq!(map.get(&ids[cut - 1]), reference.get(&ids[cut - 1]));
        }
        let mut prefix = RetryMap::default();
        prefix.reserve(1_000);
        for (turn, id) in ids[..1_000].iter().enumerate() {
            prefix.insert_new(id, attempts(turn as u64));
            prefix.get_mut(id).unwrap().first.started = true;
        }
        assert_eq!(map, prefix);
        assert_eq!(
            map.entries, prefix.entries,
            "removals leave the entries dense"
        );
        assert_eq!(map.ids, prefix.ids);
        map.clear();
        assert_eq!(map, RetryMap::default());
        assert!(!map.contains_key(""));
    }

    #[test]
    fn removing_another_id_is_a_caller_bug() {
        let mut map = RetryMap::default();
        map.insert_new("a", attempts(1));
        map.insert_new("b", attempts(2));
        let caught = std::panic::catch_unwind(move || map.remove_last("a")).unwrap_err();
        let message = caught.downcast_ref::<&str>().map(|m| m.to_string());
        let message = message.or_else(|| caught.downcast_ref::<String>().cloned());
        assert_eq!(
            message.as_deref(),
            Some("an undo removes the retry id added last")
        );
    }
}

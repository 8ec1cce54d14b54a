//! [`KeySet`]: a small ordered set of keys as one sorted vector.
//!
//! An index entry per cluster (its Syncs) usually holds one key, two or three at most. A
//! `BTreeSet` allocates a whole leaf node for it (about 290 bytes for `String` keys); a sorted
//! vector allocates the keys' slots only. Lookups are binary searches, inserts shift the tail:
//! right for sets of a few keys, wrong for large ones (keep those in a `BTreeSet`). Serialised
//! as the sorted sequence, exactly as a `BTreeSet` is.

use serde::{Deserialize, Deserializer, Serialize};

use super::Key;

/// A sorted, duplicate-free vector of keys (see the module documentation).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct KeySet(Vec<Key>);

impl KeySet {
    /// Adds `key`; returns whether it was new.
    pub fn insert(&mut self, key: Key) -> bool {
        match self.0.binary_search(&key) {
            Ok(_) => false,
            Err(at) => {
                self.0.insert(at, key);
                self.0.shrink_to_fit();
                true
            }
        }
    }

    /// Removes `key`; returns whether it was there.
    pub fn remove(&mut self, key: &str) -> bool {
        match self.0.binary_search_by(|probe| probe.as_str().cmp(key)) {
            Ok(at) => {
                self.0.remove(at);
                self.0.shrink_to_fit();
                true
            }
            Err(_) => false,
        }
    }

    pub fn contains(&self, key: &str) -> bool {
        self.0
            .binary_search_by(|probe| probe.as_str().cmp(key))
            .is_ok()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The keys in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Key> {
        self.0.iter()
    }
}

impl<'a> IntoIterator for &'a KeySet {
    type Item = &'a Key;
    type IntoIter = std::slice::Iter<'a, Key>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl FromIterator<Key> for KeySet {
    fn from_iter<I: IntoIterator<Item = Key>>(keys: I) -> KeySet {
        let mut keys: Vec<Key> = keys.into_iter().collect();
        keys.sort_unstable();
        keys.dedup();
        keys.shrink_to_fit();
        KeySet(keys)
    }
}

impl<'de> Deserialize<'de> for KeySet {
    /// Sorts and deduplicates what it reads: the set's order is never taken on trust.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<KeySet, D::Error> {
        Vec::<Key>::deserialize(deserializer).map(KeySet::from_iter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_keys_sorted_and_unique_and_reads_as_a_btreeset_does() {
        let mut set = KeySet::default();
        assert!(set.insert("b".into()));
        assert!(set.insert("a".into()));
        assert!(!set.insert("b".into()));
        assert!(set.contains("a") && !set.contains("c"));
        assert_eq!(set.iter().collect::<Vec<_>>(), ["a", "b"]);
        let json = serde_json::to_string(&set).unwrap();
        let btree: std::collections::BTreeSet<Key> = ["b".into(), "a".into()].into();
        assert_eq!(json, serde_json::to_string(&btree).unwrap());
        let read: KeySet = serde_json::from_str(r#"["c","a","c"]"#).unwrap();
        assert_eq!(read.iter().collect::<Vec<_>>(), ["a", "c"]);
        assert!(set.remove("a") && !set.remove("a"));
        assert_eq!(set.len(), 1);
    }
}

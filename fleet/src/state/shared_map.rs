//! [`SharedMap`]: an ordered map from state keys to values shared, copy-on-write, between
//! clones of the map.
//!
//! A snapshot of the fleet state is a clone taken under the read lock and serialised after it
//! is released. With plain maps that clone copies every object (tens of megabytes at 10,000
//! clusters, on top of the encoding); here it copies keys and reference counts, and a value is
//! copied only if it changes while a clone still holds it. Reads look exactly like a
//! `BTreeMap`'s; `get_mut` is where the copy-on-write happens.

use std::collections::BTreeMap;
use std::collections::btree_map;
use std::fmt;
use std::ops::Index;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Key;

/// A `BTreeMap<Key, V>` whose values are reference-counted (see the module documentation).
/// Serialised exactly as the plain map.
pub struct SharedMap<V>(BTreeMap<Key, Arc<V>>);

impl<V> Default for SharedMap<V> {
    fn default() -> SharedMap<V> {
        SharedMap(BTreeMap::new())
    }
}

impl<V> Clone for SharedMap<V> {
    /// Copies keys and pointers; the values stay shared.
    fn clone(&self) -> SharedMap<V> {
        SharedMap(self.0.clone())
    }
}

impl<V: fmt::Debug> fmt::Debug for SharedMap<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<V: PartialEq> PartialEq for SharedMap<V> {
    fn eq(&self, other: &SharedMap<V>) -> bool {
        self.0 == other.0
    }
}

/// The values of a [`SharedMap`], by reference.
pub type Values<'a, V> = std::iter::Map<btree_map::Values<'a, Key, Arc<V>>, fn(&Arc<V>) -> &V>;
/// The entries of a [`SharedMap`], by reference.
pub type Iter<'a, V> =
    std::iter::Map<btree_map::Iter<'a, Key, Arc<V>>, fn((&'a Key, &'a Arc<V>)) -> (&'a Key, &'a V)>;

impl<V> SharedMap<V> {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, key: &str) -> Option<&V> {
        self.0.get(key).map(Arc::as_ref)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    pub fn keys(&self) -> btree_map::Keys<'_, Key, Arc<V>> {
        self.0.keys()
    }

    pub fn values(&self) -> Values<'_, V> {
        self.0.values().map(Arc::as_ref)
    }

    pub fn iter(&self) -> Iter<'_, V> {
        self.0.iter().map(|(key, value)| (key, value.as_ref()))
    }

    /// Entries with keys from `from` on, in order.
    pub fn range_from(&self, from: &str) -> impl DoubleEndedIterator<Item = (&Key, &V)> {
        self.0
            .range::<str, _>((std::ops::Bound::Included(from), std::ops::Bound::Unbounded))
            .map(|(key, value)| (key, value.as_ref()))
    }

    pub fn insert(&mut self, key: Key, value: V) {
        self.0.insert(key, Arc::new(value));
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }
}

impl<V: Clone> SharedMap<V> {
    /// The value for `key`, to change: copied first if a clone of the map still shares it.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.0.get_mut(key).map(Arc::make_mut)
    }

    pub fn remove(&mut self, key: &str) -> Option<V> {
        self.0.remove(key).map(Arc::unwrap_or_clone)
    }
}

impl<V> Index<&str> for SharedMap<V> {
    type Output = V;

    fn index(&self, key: &str) -> &V {
        self.get(key).expect("no entry for this key in the map")
    }
}

impl<V> Index<&Key> for SharedMap<V> {
    type Output = V;

    fn index(&self, key: &Key) -> &V {
        &self[key.as_str()]
    }
}

impl<'a, V> IntoIterator for &'a SharedMap<V> {
    type Item = (&'a Key, &'a V);
    type IntoIter = Iter<'a, V>;

    fn into_iter(self) -> Iter<'a, V> {
        self.iter()
    }
}

impl<V> FromIterator<(Key, V)> for SharedMap<V> {
    fn from_iter<I: IntoIterator<Item = (Key, V)>>(entries: I) -> SharedMap<V> {
        SharedMap(
            entries
                .into_iter()
                .map(|(key, value)| (key, Arc::new(value)))
                .collect(),
        )
    }
}

impl<V: Serialize> Serialize for SharedMap<V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for SharedMap<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<SharedMap<V>, D::Error> {
        let plain = BTreeMap::<Key, V>::deserialize(deserializer)?;
        Ok(plain.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clone_shares_values_until_one_side_changes() {
        let mut map: SharedMap<Vec<u32>> = [("a".to_string(), vec![1]), ("b".to_string(), vec![2])]
            .into_iter()
            .collect();
        let snapshot = map.clone();
        assert!(std::ptr::eq(
            map.get("a").unwrap(),
            snapshot.get("a").unwrap()
        ));

        map.get_mut("a").expect("present").push(10);
        assert_eq!(map["a"], vec![1, 10]);
        assert_eq!(snapshot["a"], vec![1], "the clone keeps the old value");
        assert!(std::ptr::eq(
            map.get("b").unwrap(),
            snapshot.get("b").unwrap()
        ));

        drop(snapshot);
        let before: *const Vec<u32> = map.get("b").unwrap();
        map.get_mut("b").expect("present").push(20);
        assert!(
            std::ptr::eq(before, map.get("b").unwrap()),
            "unshared: changed in place"
        );
        assert_eq!(map.remove("b"), Some(vec![2, 20]));
    }

    #[test]
    fn serialises_as_a_plain_map() {
        let map: SharedMap<u32> = [("x".to_string(), 1), ("y".to_string(), 2)]
            .into_iter()
            .collect();
        let json = serde_json::to_string(&map).expect("serialise");
        assert_eq!(json, r#"{"x":1,"y":2}"#);
        let back: SharedMap<u32> = serde_json::from_str(&json).expect("deserialise");
        assert_eq!(back, map);
    }
}

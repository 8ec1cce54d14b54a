//! [`StoredLabels`]: a Cluster's labels as the replicated state keeps them, one sorted boxed
//! slice instead of a `BTreeMap`.
//!
//! Every replica holds every Cluster, and nearly every Cluster has a few labels (region, tier,
//! environment) that selectors read. In `ObjectMeta` they are a `BTreeMap<String, String>`,
//! which allocates a whole leaf node (544 bytes, room for eleven pairs) for the first label.
//! Kept here they take the bytes of their text and two words per label. A [`ClusterEntry`]
//! holds its object without `metadata.labels` and these beside it; `ClusterEntry::cluster`
//! gives the object whole again, and snapshots carry it whole (the encoding is unchanged).
//!
//! [`ClusterEntry`]: super::ClusterEntry

use std::collections::BTreeMap;

use crate::selector::Labels;

/// Labels as a slice sorted by key, each key once; `None` when the object had no `labels`
/// field at all (kept apart from an empty map, so the object comes back exactly as written).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoredLabels(Option<Pairs>);

/// Key and value of each label, sorted by key.
type Pairs = Box<[(Box<str>, Box<str>)]>;

impl StoredLabels {
    /// Takes the labels out of `labels`, leaving `None`.
    pub fn take(labels: &mut Option<BTreeMap<String, String>>) -> StoredLabels {
        StoredLabels(labels.take().map(|map| {
            // A BTreeMap iterates in key order: the slice is sorted.
            map.into_iter()
                .map(|(key, value)| (key.into_boxed_str(), value.into_boxed_str()))
                .collect()
        }))
    }

    /// The labels as `ObjectMeta` holds them.
    pub fn to_map(&self) -> Option<BTreeMap<String, String>> {
        self.0.as_ref().map(|pairs| {
            pairs
                .iter()
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect()
        })
    }

    /// The labels, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0
            .iter()
            .flat_map(|pairs| pairs.iter())
            .map(|(key, value)| (&**key, &**value))
    }
}

impl Labels for StoredLabels {
    fn label(&self, key: &str) -> Option<&str> {
        let pairs = self.0.as_deref()?;
        let at = pairs.binary_search_by(|(k, _)| (**k).cmp(key)).ok()?;
        Some(&pairs[at].1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_come_back_as_they_were_written() {
        let map: BTreeMap<String, String> = [("tier", "web"), ("region", "eu"), ("a", "")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut field = Some(map.clone());
        let stored = StoredLabels::take(&mut field);
        assert_eq!(field, None);
        assert_eq!(stored.to_map(), Some(map));
        assert_eq!(stored.label("region"), Some("eu"));
        assert_eq!(stored.label("a"), Some(""));
        assert_eq!(stored.label("zone"), None);
        let keys: Vec<&str> = stored.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["a", "region", "tier"]);

        // No field and an empty map stay apart.
        assert_eq!(StoredLabels::take(&mut None).to_map(), None);
        assert_eq!(
            StoredLabels::take(&mut Some(BTreeMap::new())).to_map(),
            Some(BTreeMap::new())
        );
    }
}

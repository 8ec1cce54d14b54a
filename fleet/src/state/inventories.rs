//! One copy of each distinct inventory in the state: the Syncs of a group mostly applied the
//! same objects (3 to 30 per cluster, about 120 bytes each), and a copy per Sync made them the
//! largest part of a Sync's status. Sharing changes no value, only where it is kept, so every
//! replica still reaches the same state; it is redone after a snapshot is decoded.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use crate::resources::Inventory;

use super::{FleetState, Key};

/// The inventories recorded last, newest first: a result is compared with these, and a
/// rollout's results arrive one after another, so a few are enough to find the copy.
const RECENT: usize = 32;

/// The recent distinct inventories ([`FleetState::share_inventory`]). Derived: never
/// serialised.
#[derive(Clone, Default)]
pub struct Inventories(VecDeque<Inventory>);

impl fmt::Debug for Inventories {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Inventories({} recent)", self.0.len())
    }
}

impl Inventories {
    /// The copy of an inventory equal to `inventory`, if one is known and is not already it;
    /// otherwise `inventory` becomes the newest known copy.
    fn shared(&mut self, inventory: &Inventory) -> Option<Inventory> {
        if inventory.is_empty() {
            return None;
        }
        if let Some(known) = self.0.iter().find(|known| *known == inventory) {
            return (!known.shares(inventory)).then(|| known.clone());
        }
        if self.0.len() == RECENT {
            self.0.pop_back();
        }
        self.0.push_front(inventory.clone());
        None
    }
}

impl FleetState {
    /// Makes the inventory of `sync` the state's copy of those objects, when an equal one is
    /// recorded already (after every command that records an inventory).
    pub(super) fn share_inventory(&mut self, sync: &str) {
        let Some(status) = self.syncs.get(sync).and_then(|e| e.object.status.as_ref()) else {
            return;
        };
        let Some(shared) = self.inventories.shared(&status.inventory) else {
            return;
        };
        if let Some(status) = self
            .syncs
            .get_mut(sync)
            .and_then(|e| e.object.status.as_mut())
        {
            status.inventory = shared;
        }
    }

    /// Shares equal inventories again after a snapshot was decoded (decoding gives every Sync
    /// a copy of its own).
    pub(super) fn share_inventories(&mut self) {
        let mut seen: BTreeMap<Inventory, Inventory> = BTreeMap::new();
        let mut unshared: Vec<(Key, Inventory)> = Vec::new();
        for (key, entry) in &self.syncs {
            let Some(status) = entry.object.status.as_ref() else {
                continue;
            };
            if status.inventory.is_empty() {
                continue;
            }
            match seen.get(&status.inventory) {
                Some(known) if !known.shares(&status.inventory) => {
                    unshared.push((key.clone(), known.clone()));
                }
                Some(_) => {}
                None => {
                    seen.insert(status.inventory.clone(), status.inventory.clone());
                }
            }
        }
        for (key, shared) in unshared {
            if let Some(status) = self
                .syncs
                .get_mut(&key)
                .and_then(|e| e.object.status.as_mut())
            {
                status.inventory = shared;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::ObjectRef;

    fn inventory(names: &[&str]) -> Inventory {
        names
            .iter()
            .map(|name| ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: Some("demo".into()),
                name: (*name).into(),
            })
            .collect()
    }

    #[test]
    fn an_equal_inventory_gets_the_known_copy_and_a_new_one_is_remembered() {
        let mut known = Inventories::default();
        let first = inventory(&["a", "b"]);
        assert!(known.shared(&first).is_none(), "the first is remembered");
        let equal = inventory(&["a", "b"]);
        let shared = known.shared(&equal).expect("an equal one gets the copy");
        assert!(shared.shares(&first));
        assert!(known.shared(&first).is_none(), "already the copy");
        assert!(known.shared(&inventory(&[])).is_none());
        for i in 0..RECENT {
            known.shared(&inventory(&[&format!("n{i}")]));
        }
        assert_eq!(known.0.len(), RECENT, "bounded");
        assert!(
            known.shared(&inventory(&["a", "b"])).is_none(),
            "the oldest was forgotten"
        );
    }
}

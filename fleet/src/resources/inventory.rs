//! [`Inventory`]: the objects a Sync applied, as its status keeps them, shared between Syncs
//! that applied the same ones (`fleet::state`'s `inventories` keeps one copy of each).

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ObjectRef;

/// The objects the Sync applied to its cluster: what prune compares the next render with.
// Immutable and shared: the replicated state keeps one copy of each distinct inventory (most
// Syncs of a group apply the same objects), not one per Sync. Serialised as the list.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(transparent)]
pub struct Inventory(Arc<[ObjectRef]>);

impl Inventory {
    /// No object (a method, for serde's `skip_serializing_if`).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `self` and `other` are the same copy, not only equal.
    pub fn shares(&self, other: &Inventory) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// These objects and `more`, sorted, each once.
    pub fn merged(&self, more: impl IntoIterator<Item = ObjectRef>) -> Inventory {
        let merged: std::collections::BTreeSet<ObjectRef> =
            self.iter().cloned().chain(more).collect();
        merged.into_iter().collect()
    }
}

impl std::ops::Deref for Inventory {
    type Target = [ObjectRef];

    fn deref(&self) -> &[ObjectRef] {
        &self.0
    }
}

impl From<Vec<ObjectRef>> for Inventory {
    fn from(objects: Vec<ObjectRef>) -> Inventory {
        Inventory(objects.into())
    }
}

impl FromIterator<ObjectRef> for Inventory {
    fn from_iter<I: IntoIterator<Item = ObjectRef>>(objects: I) -> Inventory {
        Inventory(objects.into_iter().collect())
    }
}

impl PartialEq<Vec<ObjectRef>> for Inventory {
    fn eq(&self, other: &Vec<ObjectRef>) -> bool {
        *self.0 == **other
    }
}

//! [`Strings`]: the revisions and times a rollout writes into every Sync's status, and the
//! group key of every Sync a group makes, kept once.
//!
//! A rollout records the same revision in the status of every Sync of a group (last attempted,
//! last applied, the head of the revision history), and the Syncs that finish within one
//! second record the same time. As `String`s each Sync held its own copies, 40 bytes a
//! revision and 20 a time, five times over once the history is full. The status holds them as
//! `Arc<str>`, and the state hands out the copy it made last for an equal string. Derived:
//! never serialised; after a snapshot is decoded, [`FleetState::share_strings`] shares them
//! again.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use super::FleetState;
use crate::resources::SyncStatus;

/// The strings shared last, newest first: a rollout's results arrive one after another, so a
/// few are enough to find the copy.
const RECENT: usize = 16;

/// The recent shared strings (see the module documentation).
#[derive(Clone, Debug, Default)]
pub(crate) struct Strings(VecDeque<Arc<str>>);

impl Strings {
    /// The state's copy of `text`: a recent equal one, or a new one that becomes the newest.
    pub(crate) fn share(&mut self, text: &str) -> Arc<str> {
        if let Some(known) = self.0.iter().find(|known| ***known == *text) {
            return known.clone();
        }
        if self.0.len() == RECENT {
            self.0.pop_back();
        }
        let copy: Arc<str> = text.into();
        self.0.push_front(copy.clone());
        copy
    }
}

/// Every shared string of a Sync's status, for [`FleetState::share_strings`] (which adds the
/// Sync's group).
fn strings_of(status: &mut SyncStatus) -> impl Iterator<Item = &mut Arc<str>> {
    let history = status
        .revision_history
        .iter_mut()
        .flat_map(|applied| [&mut applied.revision, &mut applied.applied_at]);
    [
        status.last_applied_revision.as_mut(),
        status.last_attempted_revision.as_mut(),
        status.last_apply_time.as_mut(),
    ]
    .into_iter()
    .flatten()
    .chain(history)
}

impl FleetState {
    /// Shares equal revisions, times and group keys again after a snapshot was decoded
    /// (decoding gives every Sync copies of its own).
    pub(super) fn share_strings(&mut self) {
        let mut known: BTreeSet<Arc<str>> = BTreeSet::new();
        let keys: Vec<super::Key> = self.syncs.keys().cloned().collect();
        for key in keys {
            let Some(entry) = self.syncs.get_mut(&key) else {
                continue;
            };
            let status = entry
                .object
                .status
                .as_mut()
                .into_iter()
                .flat_map(strings_of);
            for text in entry.group.as_mut().into_iter().chain(status) {
                match known.get(&**text) {
                    Some(copy) => *text = copy.clone(),
                    None => {
                        known.insert(text.clone());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_equal_recent_string_is_the_same_copy() {
        let mut strings = Strings::default();
        let first = strings.share("0123abcd");
        let again = strings.share("0123abcd");
        assert!(Arc::ptr_eq(&first, &again));
        // Pushed out by RECENT newer ones: a new copy, equal.
        for n in 0..RECENT {
            strings.share(&n.to_string());
        }
        let later = strings.share("0123abcd");
        assert_eq!(later, first);
        assert!(!Arc::ptr_eq(&later, &first));
    }
}

//! The plan journal: the Syncs whose standing for the planners may have changed, in the order
//! the changes were applied. A replica's planner reads the keys noted since its last plan
//! instead of walking all of its node's actionable Syncs on every burst of applied entries
//! (`replica/src/worker/plan.rs`).
//!
//! A key is noted when it becomes (or stays) actionable or retiring with an owner, when its
//! cluster's spec, owner or adoption changes (asked for or done), and when its cluster is read
//! back by recovery.
//! Keys that stop being actionable are not noted: a planner drops them when it looks at them.
//! Changes that touch everything (recovery turned off or finished) start a new epoch, which
//! tells every reader to look at all of its Syncs again.
//!
//! Keys are kept by the owner of their cluster at the time, so that a planner reads only its
//! own; a key whose owner changes is noted again under the new one.
//!
//! Bounded: at most [`CAPACITY`] keys are kept per node. A reader that fell further behind (or that
//! reads a state decoded from a snapshot, which starts a new epoch) is told to look at
//! everything, which is what a plan did before this journal. Derived and local: never
//! serialised, never compared.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Key, NodeId};

/// Keys kept per node: a planner that lags further than this looks at all of its Syncs once.
pub const CAPACITY: usize = 4096;

/// Epochs are unique in the process, so a reader never mistakes one state's journal for
/// another's (after a snapshot is installed, or in a simulation of several replicas).
static EPOCHS: AtomicU64 = AtomicU64::new(1);

fn next_epoch() -> u64 {
    EPOCHS.fetch_add(1, Ordering::Relaxed)
}

/// The journal; see the module documentation. One list of keys per owner, so that a planner
/// reads only its own node's.
#[derive(Clone)]
pub struct PlanJournal {
    epoch: u64,
    nodes: BTreeMap<NodeId, Keys>,
}

/// One node's keys.
#[derive(Clone, Default)]
struct Keys {
    /// Sequence number of `keys[0]`.
    first: u64,
    keys: VecDeque<Key>,
}

impl Default for PlanJournal {
    fn default() -> Self {
        PlanJournal {
            epoch: next_epoch(),
            nodes: BTreeMap::new(),
        }
    }
}

impl std::fmt::Debug for PlanJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lengths: BTreeMap<NodeId, usize> = self
            .nodes
            .iter()
            .map(|(node, keys)| (*node, keys.keys.len()))
            .collect();
        f.debug_struct("PlanJournal")
            .field("epoch", &self.epoch)
            .field("keys", &lengths)
            .finish()
    }
}

/// Where a reader is in a journal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    epoch: u64,
    node: NodeId,
    next: u64,
}

/// What changed since a reader's cursor.
pub enum Since<'a> {
    /// These keys (possibly repeated), oldest first.
    Keys(std::collections::vec_deque::Iter<'a, Key>),
    /// Anything may have changed: the reader looks at everything.
    Everything,
}

impl PlanJournal {
    /// Notes `key` for its owner `node`. (Not even a key noted twice in a row is kept once:
    /// a reader may have read the first between the two.)
    pub(super) fn note(&mut self, node: NodeId, key: &str) {
        let keys = self.nodes.entry(node).or_default();
        if keys.keys.len() == CAPACITY {
            keys.keys.pop_front();
            keys.first += 1;
        }
        keys.keys.push_back(key.to_string());
    }

    /// Everything may have changed: every reader looks at all of its Syncs again.
    pub(super) fn note_everything(&mut self) {
        *self = PlanJournal::default();
    }

    /// What changed for `node` since `cursor` (`None`: a reader's first look), and the cursor
    /// for its next look.
    pub fn since(&self, node: NodeId, cursor: Option<Cursor>) -> (Since<'_>, Cursor) {
        static NONE: Keys = Keys {
            first: 0,
            keys: VecDeque::new(),
        };
        let keys = self.nodes.get(&node).unwrap_or(&NONE);
        let now = Cursor {
            epoch: self.epoch,
            node,
            next: keys.first + keys.keys.len() as u64,
        };
        let since = match cursor {
            Some(cursor)
                if cursor.epoch == self.epoch
                    && cursor.node == node
                    && cursor.next >= keys.first
                    && cursor.next <= now.next =>
            {
                Since::Keys(keys.keys.range((cursor.next - keys.first) as usize..))
            }
            _ => Since::Everything,
        };
        (since, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(since: Since<'_>) -> Option<Vec<String>> {
        match since {
            Since::Keys(keys) => Some(keys.cloned().collect()),
            Since::Everything => None,
        }
    }

    #[test]
    fn a_reader_sees_what_was_noted_since_its_last_look_or_everything() {
        let mut changes = PlanJournal::default();
        let (first, cursor) = changes.since(1, None);
        assert!(keys(first).is_none(), "a first look sees everything");
        changes.note(1, "a/x");
        changes.note(1, "a/y");
        let (since, cursor) = changes.since(1, Some(cursor));
        assert_eq!(keys(since), Some(vec!["a/x".into(), "a/y".into()]));
        changes.note(1, "a/y");
        let (since, cursor) = changes.since(1, Some(cursor));
        assert_eq!(
            keys(since),
            Some(vec!["a/y".into()]),
            "noted again after a read"
        );
        let (since, cursor) = changes.since(1, Some(cursor));
        assert_eq!(keys(since), Some(vec![]));

        // Fallen behind the bound: everything.
        for i in 0..=CAPACITY {
            changes.note(1, &format!("a/{i}"));
        }
        assert_eq!(changes.nodes[&1].keys.len(), CAPACITY);
        let (since, cursor) = changes.since(1, Some(cursor));
        assert!(keys(since).is_none());
        changes.note(1, "a/z");
        let (since, cursor) = changes.since(1, Some(cursor));
        assert_eq!(keys(since), Some(vec!["a/z".into()]));

        // A new epoch (recovery, a snapshot, another state): everything.
        changes.note_everything();
        let (since, cursor) = changes.since(1, Some(cursor));
        assert!(keys(since).is_none());
        assert!(keys(PlanJournal::default().since(1, Some(cursor)).0).is_none());

        // Another node's keys are not this one's.
        let (_, cursor) = changes.since(1, None);
        changes.note(2, "a/other");
        let (since, _) = changes.since(1, Some(cursor));
        assert_eq!(keys(since), Some(vec![]));
    }
}

//! The hash ring: each item's deterministic preference order over the live nodes.
//!
//! The ring is the `consistent_hash` crate's `StaticHashRing` with `virtual_nodes` points per
//! node. Its default hash is SipHash over `std::hash::Hash`, whose output Rust does not promise
//! to keep across versions or platforms, so replicas built differently could disagree about
//! ownership. This module plugs in a hash with a specified output instead:
//!
//! - an item hashes to `xxh3_64(item as UTF-8 bytes)`;
//! - virtual node `seq` of node `id` hashes to
//!   `xxh3_64(id as 8 little-endian bytes ‖ seq as 8 little-endian bytes)`.
//!
//! The keys handed to the ring write exactly those bytes and nothing else (no length prefix, no
//! `str` terminator), and every integer write of the hasher is little-endian, so the hash is the
//! same on every platform and Rust version. Golden values in the tests pin it.
//!
//! The ring is derived data: it is rebuilt from the node set whenever that changes and after a
//! placement is deserialized, and it is never stored.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use consistent_hash::{Node, RingHash, StaticHashRing};
use xxhash_rust::xxh3::Xxh3Default;

use crate::NodeId;

/// Streams the bytes written to it into xxh3-64; integers are written little-endian.
struct SpecifiedHasher(Xxh3Default);

impl SpecifiedHasher {
    fn new() -> Self {
        Self(Xxh3Default::new())
    }
}

impl Hasher for SpecifiedHasher {
    fn finish(&self) -> u64 {
        self.0.digest()
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    fn write_u8(&mut self, value: u8) {
        self.write(&[value]);
    }
    fn write_u16(&mut self, value: u16) {
        self.write(&value.to_le_bytes());
    }
    fn write_u32(&mut self, value: u32) {
        self.write(&value.to_le_bytes());
    }
    fn write_u64(&mut self, value: u64) {
        self.write(&value.to_le_bytes());
    }
    fn write_u128(&mut self, value: u128) {
        self.write(&value.to_le_bytes());
    }
    fn write_usize(&mut self, value: usize) {
        self.write(&(value as u64).to_le_bytes());
    }
    fn write_i8(&mut self, value: i8) {
        self.write(&value.to_le_bytes());
    }
    fn write_i16(&mut self, value: i16) {
        self.write(&value.to_le_bytes());
    }
    fn write_i32(&mut self, value: i32) {
        self.write(&value.to_le_bytes());
    }
    fn write_i64(&mut self, value: i64) {
        self.write(&value.to_le_bytes());
    }
    fn write_i128(&mut self, value: i128) {
        self.write(&value.to_le_bytes());
    }
    fn write_isize(&mut self, value: isize) {
        self.write(&(value as i64).to_le_bytes());
    }
}

/// The ring's `RingHash`: xxh3-64 over the bytes the keys below write.
#[derive(Clone, Copy, Debug, Default)]
struct SpecifiedHash;

impl RingHash for SpecifiedHash {
    fn hash_item<T: Hash>(&self, item: &T) -> u64 {
        let mut hasher = SpecifiedHasher::new();
        item.hash(&mut hasher);
        hasher.finish()
    }

    fn hash_vnode<K: Hash>(&self, node_key: &K, vnode_seq: usize) -> u64 {
        let mut hasher = SpecifiedHasher::new();
        node_key.hash(&mut hasher);
        hasher.write(&(vnode_seq as u64).to_le_bytes());
        hasher.finish()
    }
}

/// An item as the ring sees it: exactly its UTF-8 bytes.
struct ItemKey<'a>(&'a str);

impl Hash for ItemKey<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.0.as_bytes());
    }
}

/// A node as the ring sees it: exactly its id's 8 little-endian bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct NodeKey(NodeId);

impl Hash for NodeKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(&self.0.to_le_bytes());
    }
}

/// The hash of an item on the ring (exposed for tests and documentation of the format).
pub fn item_hash(item: &str) -> u64 {
    SpecifiedHash.hash_item(&ItemKey(item))
}

/// The hash of virtual node `seq` of `node` on the ring.
pub fn virtual_node_hash(node: NodeId, seq: u32) -> u64 {
    SpecifiedHash.hash_vnode(&NodeKey(node), seq as usize)
}

type InnerRing = StaticHashRing<'static, NodeKey, (), SpecifiedHash>;

/// An immutable ring over a set of nodes; cheap to clone (shared).
#[derive(Clone)]
pub(crate) struct Ring {
    inner: Arc<InnerRing>,
    node_count: usize,
}

impl Ring {
    /// Builds the ring for `nodes`, each with `virtual_nodes` points (at least one).
    pub(crate) fn build(nodes: impl IntoIterator<Item = NodeId>, virtual_nodes: u32) -> Self {
        let quantity = virtual_nodes.max(1) as usize;
        let ring_nodes: Vec<Node<NodeKey, ()>> = nodes
            .into_iter()
            .map(|node| Node::new(NodeKey(node)).quantity(quantity))
            .collect();
        let inner = StaticHashRing::new(SpecifiedHash, ring_nodes.into_iter());
        let node_count = inner.nodes().len();
        Self {
            inner: Arc::new(inner),
            node_count,
        }
    }

    /// The nodes in `item`'s preference order, most preferred first.
    pub(crate) fn candidates<'r>(&'r self, item: &str) -> impl Iterator<Item = NodeId> + 'r {
        self.inner
            .calc_candidates(&ItemKey(item))
            .map(|node| node.key.0)
    }

    /// The position of `node` in `item`'s preference order (0 = first); the node count when
    /// `node` is not on the ring.
    pub(crate) fn rank_of(&self, item: &str, node: NodeId) -> usize {
        self.candidates(item)
            .position(|candidate| candidate == node)
            .unwrap_or(self.node_count)
    }
}

impl Default for Ring {
    fn default() -> Self {
        Self::build(std::iter::empty(), 1)
    }
}

impl fmt::Debug for Ring {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Ring")
            .field("nodes", &self.node_count)
            .field("points", &self.inner.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xxhash_rust::xxh3::xxh3_64;

    #[test]
    fn item_hash_is_xxh3_of_the_bytes() {
        for item in ["", "a", "cluster-1", "fleet/prod-eu-west-1", "é✓"] {
            assert_eq!(item_hash(item), xxh3_64(item.as_bytes()), "item {item:?}");
        }
    }

    #[test]
    fn virtual_node_hash_is_xxh3_of_little_endian_id_and_seq() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&7u64.to_le_bytes());
        bytes.extend_from_slice(&3u64.to_le_bytes());
        assert_eq!(virtual_node_hash(7, 3), xxh3_64(&bytes));
    }

    const GOLDEN_ITEM: u64 = 0x4c52_bbef_0bae_3e6d;
    const GOLDEN_VNODE: u64 = 0x26f2_a114_8cf5_2011;
    const GOLDEN_ORDER: [NodeId; 5] = [2, 5, 4, 3, 1];

    #[test]
    fn golden_hashes_never_change() {
        // Replicas of different builds must agree: these values are part of the format.
        // xxh3-64 of the empty input, from the xxHash specification's test vectors.
        assert_eq!(item_hash(""), 0x2d06_8005_38d3_94c2);
        // Recorded from this implementation; a change here re-shuffles every fleet.
        assert_eq!(item_hash("cluster-1"), GOLDEN_ITEM);
        assert_eq!(virtual_node_hash(1, 0), GOLDEN_VNODE);
        let ring = Ring::build(1..=5, 1000);
        let order: Vec<NodeId> = ring.candidates("cluster-1").collect();
        assert_eq!(order, GOLDEN_ORDER);
    }

    #[test]
    fn candidates_list_every_node_once() {
        let ring = Ring::build([5, 1, 9, 3], 16);
        let mut order: Vec<NodeId> = ring.candidates("cluster-42").collect();
        assert_eq!(order.len(), 4);
        order.sort_unstable();
        assert_eq!(order, vec![1, 3, 5, 9]);
    }

    #[test]
    fn empty_ring_has_no_candidates() {
        let ring = Ring::default();
        assert_eq!(ring.candidates("anything").next(), None);
        assert_eq!(ring.rank_of("anything", 1), 0);
    }

    #[test]
    fn rank_of_matches_candidate_position() {
        let ring = Ring::build(1..=6, 8);
        let order: Vec<NodeId> = ring.candidates("item").collect();
        for (position, node) in order.iter().enumerate() {
            assert_eq!(ring.rank_of("item", *node), position);
        }
        assert_eq!(ring.rank_of("item", 99), 6);
    }
}

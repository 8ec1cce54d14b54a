//! What the simulation observes, shared by the simulated hosts and the harness. Everything runs
//! on one thread, so it is an `Rc<RefCell<World>>`.
//!
//! The target side of the invariants is checked as each write lands (the simulated clusters
//! are this log: a write is instantaneous, so "at a time" is exact):
//! - a generation of ownership belongs to one node;
//! - no write lands after a write of a newer generation (the zombie owner that fencing and the
//!   lease exist for);
//! - a cluster's revision never goes backwards;
//! - the clusters in rollout are never more than the SyncGroup's `maxUnavailable`. A cluster
//!   is in rollout from a write of a new revision until that sync's wait for readiness ended
//!   (ready, cancelled, or its replica crashed): a lower bound of the time its ticket holds a
//!   budget slot. A write of the revision the cluster already has (a drift check re-applying
//!   it) is outside the budget and not counted, and so is a cluster once the client has taken
//!   it out of the group (as a Deployment's budget counts only the pods it selects);
//! - a write that takes a cluster over from another installation was asked for (the client
//!   proposed `AdoptCluster` for that cluster first).
//!
//! A retire (the objects of a Sync deleted: its cluster deselected or deleted) lands as a
//! write too, fenced like one; the convergence check then asks that no cluster without a Sync
//! still holds objects. The simulated targets also remember which installation fenced them
//! last ([`Landed::fence_of`]), and refuse another one unless it adopts, as the engine does;
//! each refusal is counted, so a Sync stalled by another installation that is tried again
//! without backoff shows.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use starling_raft::NodeId;
use starling_replica::Replica;

/// One write to a simulated cluster.
#[derive(Clone, Debug)]
pub struct Write {
    pub at: Duration,
    pub node: NodeId,
    pub generation: u64,
    pub revision: String,
    /// A retire: the Sync's objects were deleted.
    pub retire: bool,
    /// The write took the cluster over from another installation.
    pub adopt: bool,
}

/// What happens on the simulated clusters, in order, until the harness takes it into the
/// [`World`] after the step (the replicas' sync workers need a `Send` handle).
#[derive(Clone, Default)]
pub struct Landed {
    landings: Arc<Mutex<(u64, Vec<Landing>)>>,
    /// The installation each simulated cluster's fence names (none: never written).
    fences: Arc<Mutex<BTreeMap<String, String>>>,
}

pub enum Landing {
    /// Write number `id` lands on `cluster`.
    Write {
        id: u64,
        cluster: String,
        write: Write,
    },
    /// The sync that sent write `id` stopped waiting for its objects to become ready.
    Settled { id: u64 },
    /// A sync was refused: `cluster` is fenced by another installation.
    Refused { cluster: String },
}

impl Landed {
    /// Records one write landing on `cluster`; returns a guard that records, when dropped,
    /// that the sync stopped waiting for it.
    pub fn write(&self, cluster: String, write: Write) -> Settle {
        let mut landed = self.landings.lock().unwrap_or_else(|e| e.into_inner());
        landed.0 += 1;
        let id = landed.0;
        landed.1.push(Landing::Write { id, cluster, write });
        Settle {
            landed: self.clone(),
            id,
        }
    }

    /// Records a sync refused because another installation fences `cluster`.
    pub fn refused(&self, cluster: String) {
        let mut landed = self.landings.lock().unwrap_or_else(|e| e.into_inner());
        landed.1.push(Landing::Refused { cluster });
    }

    fn take(&self) -> Vec<Landing> {
        std::mem::take(&mut self.landings.lock().unwrap_or_else(|e| e.into_inner()).1)
    }

    /// The installation `cluster`'s fence names.
    pub fn fence_of(&self, cluster: &str) -> Option<String> {
        let fences = self.fences.lock().unwrap_or_else(|e| e.into_inner());
        fences.get(cluster).cloned()
    }

    /// `installation` writes `cluster`'s fence.
    pub fn fence(&self, cluster: &str, installation: &str) {
        let mut fences = self.fences.lock().unwrap_or_else(|e| e.into_inner());
        fences.insert(cluster.to_owned(), installation.to_owned());
    }
}

/// Dropped when the sync that sent a write stops waiting for it (also when its replica
/// crashes and its tasks are dropped).
pub struct Settle {
    landed: Landed,
    id: u64,
}

impl Drop for Settle {
    fn drop(&mut self) {
        let mut landed = self
            .landed
            .landings
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        landed.1.push(Landing::Settled { id: self.id });
    }
}

#[derive(Default)]
pub struct World {
    /// The replicas of the hosts that are running.
    pub nodes: BTreeMap<NodeId, Arc<Replica>>,
    /// Writes landed and not yet checked ([`World::absorb`]).
    pub landed: Landed,
    /// The SyncGroup's `maxUnavailable`, once the client set it.
    pub budget: Option<u32>,
    /// Writes whose clusters are in rollout now: write id → cluster.
    in_rollout: BTreeMap<u64, String>,
    /// The clusters of [`World::in_rollout`], each with its count of writes there: the
    /// budget check reads its length instead of collecting the clusters at every write.
    rolling: BTreeMap<String, u32>,
    /// The most clusters in rollout at once.
    pub most_in_rollout: usize,
    /// Every (term, node) that led, as the nodes reported it.
    pub leaders: BTreeSet<(u64, NodeId)>,
    /// Clusters whose creation a client saw acknowledged: they must survive everything.
    pub acked: Vec<String>,
    /// Every write to every simulated cluster, in order.
    pub writes: BTreeMap<String, Vec<Write>>,
    /// Owner of each (cluster, generation) as written.
    owners: BTreeMap<(String, u64), NodeId>,
    /// Broken invariants, with their evidence.
    pub violations: Vec<String>,
    /// Time from proposing a client write to its acknowledgement.
    pub commit_latencies: Vec<Duration>,
    /// Everything noteworthy, in order: the replay of a seed compares it.
    pub trace: Vec<String>,
    /// Clusters the client proposed to adopt.
    pub adopt_requested: BTreeSet<String>,
    /// Clusters the client proposed to take out of the SyncGroup (deselected or deleted):
    /// from then on the group's budget does not count them.
    pub left_group: BTreeSet<String>,
    /// Syncs refused per cluster because another installation fenced it.
    pub refusals: BTreeMap<String, usize>,
    /// Moments a client marked, by name (the scale runs' phases).
    pub marks: BTreeMap<&'static str, Duration>,
}

impl World {
    /// A node reports that it leads `term`. openraft 0.9 identifies a leader by term *and*
    /// node (its default "advanced" leader id), so two nodes may each lead in one term, with
    /// at most one able to commit; what must hold is that committed entries agree, which the
    /// final checks compare.
    pub fn leading(&mut self, term: u64, node: NodeId) {
        if self.leaders.insert((term, node)) {
            self.trace.push(format!(
                "{:?} term {term}: node {node} leads",
                turmoil::sim_elapsed().unwrap_or_default()
            ));
        }
    }

    /// Checks and logs the writes that landed since the last call, in the order they landed.
    pub fn absorb(&mut self) {
        for landing in self.landed.take() {
            match landing {
                Landing::Refused { cluster } => {
                    self.trace.push(format!(
                        "{:?} {cluster} refused: another installation's fence",
                        turmoil::sim_elapsed().unwrap_or_default()
                    ));
                    *self.refusals.entry(cluster).or_default() += 1;
                }
                Landing::Write { id, cluster, write } => {
                    if write.adopt && !self.adopt_requested.contains(&cluster) {
                        self.violations.push(format!(
                            "node {} took {cluster} over from another installation at {:?}, \
                             but nobody asked to adopt it",
                            write.node, write.at
                        ));
                    }
                    let reapply =
                        write.retire || self.revision_of(&cluster) == Some(write.revision.as_str());
                    let at = write.at;
                    self.write(&cluster, write);
                    if !reapply {
                        *self.rolling.entry(cluster.clone()).or_default() += 1;
                        self.in_rollout.insert(id, cluster);
                        self.check_budget(at);
                    }
                }
                Landing::Settled { id } => {
                    if let Some(cluster) = self.in_rollout.remove(&id)
                        && let Some(count) = self.rolling.get_mut(&cluster)
                    {
                        *count -= 1;
                        if *count == 0 {
                            self.rolling.remove(&cluster);
                        }
                    }
                }
            }
        }
    }

    fn check_budget(&mut self, at: Duration) {
        let left = self
            .left_group
            .iter()
            .filter(|cluster| self.rolling.contains_key(*cluster))
            .count();
        let in_rollout = self.rolling.len() - left;
        self.most_in_rollout = self.most_in_rollout.max(in_rollout);
        if let Some(budget) = self.budget
            && in_rollout > budget as usize
        {
            let clusters: Vec<&String> = self
                .rolling
                .keys()
                .filter(|cluster| !self.left_group.contains(*cluster))
                .collect();
            self.violations.push(format!(
                "{in_rollout} clusters in rollout at {at:?}, budget {budget}: {clusters:?}"
            ));
        }
    }

    /// A write of `revision` by `node`, owner generation `generation`, lands on `cluster`.
    fn write(&mut self, cluster: &str, write: Write) {
        let writes = self.writes.entry(cluster.to_owned()).or_default();
        if let Some(newest) = writes.iter().max_by_key(|w| w.generation)
            && newest.generation > write.generation
        {
            self.violations.push(format!(
                "zombie write on {cluster}: node {} (generation {}) wrote {} at {:?}, after node {} \
                 (generation {}) wrote {} at {:?}",
                write.node,
                write.generation,
                write.revision,
                write.at,
                newest.node,
                newest.generation,
                newest.revision,
                newest.at
            ));
        }
        if let Some(last) = writes.iter().rev().find(|w| !w.retire)
            && !write.retire
            && last.revision > write.revision
        {
            self.violations.push(format!(
                "revision went backwards on {cluster}: {} (node {}) after {} (node {}) at {:?}",
                write.revision, write.node, last.revision, last.node, write.at
            ));
        }
        match self
            .owners
            .insert((cluster.to_owned(), write.generation), write.node)
        {
            Some(other) if other != write.node => self.violations.push(format!(
                "two writers with generation {} on {cluster}: nodes {other} and {}",
                write.generation, write.node
            )),
            _ => {}
        }
        self.trace.push(format!(
            "{:?} {cluster} <- {} by node {} gen {}",
            write.at,
            if write.retire {
                "retire"
            } else {
                write.revision.as_str()
            },
            write.node,
            write.generation
        ));
        writes.push(write);
    }

    /// The revision a cluster last received (a retire leaves it, with no objects).
    /// Clusters in rollout now, on the targets (a write applied, its readiness not settled).
    pub fn in_rollout_now(&self) -> usize {
        self.rolling.len()
    }

    pub fn revision_of(&self, cluster: &str) -> Option<&str> {
        self.writes
            .get(cluster)
            .and_then(|w| w.iter().rev().find(|w| !w.retire))
            .map(|w| w.revision.as_str())
    }

    /// Whether a cluster holds objects a Sync applied: written to, and not retired since.
    pub fn holds_objects(&self, cluster: &str) -> bool {
        self.writes
            .get(cluster)
            .and_then(|w| w.last())
            .is_some_and(|w| !w.retire)
    }
}

//! The shard worker's decisions, without I/O: which Syncs to start now, and how a finished
//! one's report moves its backoff and its next drift check. The worker ([`super::syncs`]) reads
//! the state, the clock and a little entropy and hands them in; nothing here reads a clock,
//! the network or the disk, so the decisions are property-tested below.
//!
//! ```text
//!  applied burst / tick ─► Planner::plan(state, node, busy, now) ─► [Work] (actionable, not
//!                          busy, not backing off, dependencies met, start jitter passed;
//!                          drift re-applies that are due)
//!  finished sync ───────► Planner::record(report, now) ─► backoff or next drift check
//! ```
//!
//! A plan looks only at the Syncs that may have become startable since the last one, not at
//! all of the node's actionable Syncs (most of which are running during a rollout):
//! - the keys the state's plan journal noted since ([`fleet::state::planning`]): admitted,
//!   failed, retiring, moved, their cluster changed; everything when the journal says so
//!   (the first plan, a snapshot installed, recovery, a planner that fell behind its bound);
//! - the Syncs reported finished ([`Planner::record`]);
//! - the Syncs whose backoff or start jitter ends now (`wakeups`);
//! - the Syncs waiting for their dependencies (`blocked`, looked at on every plan: a
//!   dependency's readiness is not journaled);
//! - the Syncs planned last time, which a full node may not have started.
//!
//! A Sync left out of a plan because it is running, or because the state says its node may not
//! start it, is dropped: its report, or the journal, brings it back. So a plan starts exactly
//! what a walk over all of the node's actionable Syncs would start, which the property test
//! `the_incremental_plan_is_the_full_plan` checks against that walk (kept in the tests).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fleet::state::planning::{Cursor, Since};
use fleet::state::{FleetState, Key, SyncState};
use starling_sync::{ErrorClass, RetryPolicy};
use tokio::time::Instant;

/// How often owned Syncs are scanned for due drift corrections.
pub(crate) const DRIFT_SCAN: Duration = Duration::from_secs(1);
/// How often the drift checks and backoffs of Syncs this node no longer owns are forgotten.
const PRUNE: Duration = Duration::from_secs(30);
/// Retry delay of a failure whose class is not retried automatically (invalid manifests,
/// forbidden…): a new revision retries at once; otherwise an operator's fix (credentials, a
/// resume) is picked up within this delay.
pub(crate) const PERMANENT_FAILURE_RETRY: Duration = Duration::from_secs(30);
/// How soon a sync given back by this node (its lease lapsed) is tried again.
const CANCELLED_RETRY: Duration = Duration::from_secs(1);
/// Start-jitter first sightings kept before the table is cleared.
const MAX_FIRST_SEEN: usize = 100_000;

/// One piece of work: a Sync to start, for its rollout or as a drift re-apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Work {
    pub(crate) sync: Key,
    pub(crate) drift: bool,
}

/// What a finished task reports to the planner.
#[derive(Clone, Debug)]
pub(crate) enum Done {
    /// Not granted; try again after the delay.
    Denied {
        sync: Key,
        revision: String,
        retry_in: Duration,
    },
    Finished {
        sync: Key,
        revision: String,
        failure: Option<ErrorClass>,
        drift_interval: Duration,
    },
}

/// The worker's memory between plans: backoffs, drift checks, start-jitter sightings.
pub(crate) struct Planner {
    /// Backoff per Sync: until when, after how many attempts, for which target revision (a
    /// new revision ends the backoff).
    retry_at: BTreeMap<Key, (Instant, u32, String)>,
    drift_at: BTreeMap<Key, Instant>,
    first_seen: BTreeMap<(Key, String), Instant>,
    last_drift_scan: Instant,
    last_prune: Instant,
    /// When this process started (whole seconds, as the status times are written).
    started: std::time::SystemTime,
    /// Successful syncs recorded: varies the jitter of a Sync's successive drift checks.
    succeeded: u64,
    /// Where this planner is in the state's plan journal (`None`: it looks at everything).
    journal: Option<Cursor>,
    /// The Syncs the next plan looks at (see the module documentation).
    candidates: BTreeSet<Key>,
    /// Syncs whose backoff or start jitter ends at a time, by that time.
    wakeups: BTreeSet<(Instant, Key)>,
    /// Syncs waiting for their dependencies.
    blocked: BTreeSet<Key>,
    /// A cluster key's room while the state is asked whether a Sync may start.
    buffer: String,
}

impl Planner {
    /// A planner of a process started at `started` (wall clock), made at `now`.
    pub(crate) fn new(started: std::time::SystemTime, now: Instant) -> Planner {
        Planner {
            retry_at: BTreeMap::new(),
            drift_at: BTreeMap::new(),
            first_seen: BTreeMap::new(),
            last_drift_scan: now,
            last_prune: now,
            started,
            succeeded: 0,
            journal: None,
            candidates: BTreeSet::new(),
            wakeups: BTreeSet::new(),
            blocked: BTreeSet::new(),
            buffer: String::new(),
        }
    }

    /// Records a finished task at `now`.
    pub(crate) fn record(&mut self, report: Done, now: Instant) {
        // Whatever happened, the next plan looks at it again.
        let (Done::Denied { sync, .. } | Done::Finished { sync, .. }) = &report;
        self.candidates.insert(sync.clone());
        match report {
            Done::Denied {
                sync,
                revision,
                retry_in,
            } => {
                let attempts = self.retry_at.get(&sync).map_or(0, |(_, a, _)| *a);
                self.retry_at
                    .insert(sync, (now + retry_in, attempts, revision));
            }
            Done::Finished {
                sync,
                failure: None,
                drift_interval,
                ..
            } => {
                self.retry_at.remove(&sync);
                self.succeeded = self.succeeded.wrapping_add(1);
                let seed = starling_sync::retry::jitter_key(&sync) ^ self.succeeded;
                self.drift_at
                    .insert(sync, now + source::jittered_interval(drift_interval, seed));
            }
            Done::Finished {
                sync,
                revision,
                failure: Some(ErrorClass::Cancelled),
                ..
            } => {
                // Given back by this node (lease lapsed): try again as soon as it can.
                self.retry_at
                    .insert(sync, (now + CANCELLED_RETRY, 0, revision));
            }
            Done::Finished {
                sync,
                revision,
                failure: Some(class),
                ..
            } => {
                let attempts = self.retry_at.get(&sync).map_or(0, |(_, a, _)| *a) + 1;
                let delay = retry_delay(&sync, class, attempts);
                self.retry_at
                    .insert(sync, (now + delay, attempts, revision));
            }
        }
    }

    /// The Syncs of `node` to start at `now`: the actionable ones that are not `busy`, not
    /// backing off for their target revision, whose dependencies are met and whose start
    /// jitter has passed; then, once per [`DRIFT_SCAN`], the drift re-applies that are due.
    /// Looks only at the Syncs that may have become startable (see the module documentation).
    pub(crate) fn plan(
        &mut self,
        state: &FleetState,
        node: u64,
        busy: &BTreeSet<Key>,
        now: Instant,
    ) -> Vec<Work> {
        let (since, cursor) = state.plan_journal.since(node, self.journal);
        self.journal = Some(cursor);
        match since {
            // The running Syncs are left out: their reports bring them back.
            Since::Everything => self.candidates.extend(
                state
                    .actionable_keys_for(node, |key| busy.contains(key))
                    .cloned(),
            ),
            // Noted under this node: looked at below.
            Since::Keys(keys) => {
                for key in keys {
                    if !busy.contains(key) && !self.candidates.contains(key) {
                        self.candidates.insert(key.clone());
                    }
                }
            }
        }
        while let Some(first) = self.wakeups.first()
            && first.0 <= now
        {
            let (_, key) = self.wakeups.pop_first().expect("a first wakeup");
            self.candidates.insert(key);
        }
        self.candidates.append(&mut self.blocked);
        let mut plan = Vec::new();
        for sync in std::mem::take(&mut self.candidates) {
            if busy.contains(&sync) || !state.may_start(node, &sync, &mut self.buffer) {
                continue;
            }
            if self.consider(state, &sync, now) {
                plan.push(Work {
                    sync: sync.clone(),
                    drift: false,
                });
                // Looked at again next time: a full node may not start it now.
                self.candidates.insert(sync);
            }
        }
        if self.first_seen.len() > MAX_FIRST_SEEN {
            self.first_seen.clear();
        }
        if now.duration_since(self.last_drift_scan) >= DRIFT_SCAN {
            self.last_drift_scan = now;
            plan.extend(self.due_drift(state, node, busy, now));
        }
        plan
    }

    /// Whether Sync `sync`, which `node` may start and is not running, starts at `now`: not
    /// backing off for its target revision, its dependencies met, its start jitter passed.
    /// When not, files it where the next look comes from (`wakeups`, `blocked`).
    fn consider(&mut self, state: &FleetState, sync: &Key, now: Instant) -> bool {
        let revision = || {
            let revision = state
                .target_of(sync)
                .map(|t| t.revision)
                .unwrap_or_default();
            backoff_key(revision, adopting(state, sync))
        };
        // A backoff recorded without a revision (nothing could be prepared: not the owner,
        // or no installation identity yet) holds whatever the revision.
        if let Some((at, _, for_revision)) = self.retry_at.get(sync)
            && *at > now
            && (for_revision.is_empty() || *for_revision == revision())
        {
            self.wakeups.insert((*at, sync.clone()));
            return false;
        }
        // Deleting with prune waits for no dependency and no jitter.
        if state.retiring.contains(sync) {
            return true;
        }
        // Unmet dependencies (or a cycle) are read locally: no BeginSync is proposed until
        // they are met. The Sync's status names them.
        if !state.pending_dependencies(sync).is_ok_and(|p| p.is_empty()) {
            self.blocked.insert(sync.clone());
            return false;
        }
        if let Some(delay) = start_jitter(state, sync) {
            let revision = revision();
            let seen = *self
                .first_seen
                .entry((sync.clone(), revision.clone()))
                .or_insert(now);
            let offset = delay.mul_f64(
                (starling_sync::retry::jitter_key(&format!("{sync}@{revision}")) % 10_000) as f64
                    / 10_000.0,
            );
            if seen + offset > now {
                self.wakeups.insert((seen + offset, sync.clone()));
                return false;
            }
        }
        true
    }

    /// Updated Syncs on owned clusters whose drift correction is due.
    fn due_drift(
        &mut self,
        state: &FleetState,
        node: u64,
        busy: &BTreeSet<Key>,
        now: Instant,
    ) -> Vec<Work> {
        let mut due = Vec::new();
        if state.recovering {
            // Nothing writes until `starling recover` is done.
            return due;
        }
        for cluster in state.cluster_keys_of(node) {
            for sync in state.cluster_syncs.get(cluster).into_iter().flatten() {
                let Some(entry) = state.syncs.get(sync) else {
                    continue;
                };
                if !matches!(entry.rollout.state, SyncState::Updated | SyncState::Unready)
                    || busy.contains(sync)
                {
                    continue;
                }
                let interval = fleet::validate::sync_interval(&entry.object.spec.template);
                // Looked up before it is copied: most Syncs have their time already.
                let at = match self.drift_at.get(sync) {
                    Some(at) => *at,
                    None => {
                        let last_apply = entry
                            .object
                            .status
                            .as_ref()
                            .and_then(|s| s.last_apply_time.as_deref());
                        let at = now
                            + super::drift::first_drift_check(
                                last_apply,
                                self.started,
                                interval,
                                starling_sync::retry::jitter_key(sync),
                            );
                        self.drift_at.insert(sync.clone(), at);
                        at
                    }
                };
                if at <= now {
                    due.push(Work {
                        sync: sync.clone(),
                        drift: true,
                    });
                }
            }
        }
        // The Syncs of clusters this node no longer owns (or gone) are forgotten, now and
        // then: until then their entries are only memory (nothing above reads them, and a
        // backoff kept for a cluster that comes back runs out by itself).
        if now.duration_since(self.last_prune) >= PRUNE {
            self.last_prune = now;
            let owned = |sync: &str| state.sync_owner(sync) == Some(node);
            self.drift_at.retain(|sync, _| owned(sync));
            self.retry_at
                .retain(|sync, _| owned(sync) || state.actionable.contains(sync));
        }
        due
    }
}

/// What a Sync's backoff is for: its target revision, and whether its cluster is being adopted
/// (`starling cluster adopt` ends the backoff of a Sync that met another installation's fence).
pub(super) fn backoff_key(revision: String, adopting: bool) -> String {
    if adopting {
        format!("{revision} (adopting)")
    } else {
        revision
    }
}

/// Whether the cluster of `sync` is being adopted from another installation.
pub(super) fn adopting(state: &FleetState, sync: &str) -> bool {
    state
        .syncs
        .get(sync)
        .and_then(|entry| {
            state
                .clusters
                .get(&fleet::state::cluster_key_of(&entry.object))
        })
        .is_some_and(|cluster| cluster.adopt)
}

/// How long a Sync waits after its `attempts`-th failure of `class`: the retry policy's
/// backoff, at most [`PERMANENT_FAILURE_RETRY`] (which is also the delay of the classes the
/// policy does not retry).
fn retry_delay(sync: &str, class: ErrorClass, attempts: u32) -> Duration {
    let key = starling_sync::retry::jitter_key(sync);
    RetryPolicy::sync_default()
        .delay(class, attempts, key)
        .map_or(PERMANENT_FAILURE_RETRY, |d| d.min(PERMANENT_FAILURE_RETRY))
}

/// The start delay window of a Sync whose group has no budget (`maxUnavailable: 100%`) and
/// a `jitter`.
fn start_jitter(state: &FleetState, sync: &str) -> Option<Duration> {
    let group = state.syncs.get(sync)?.group.as_ref()?;
    let entry = state.groups.get(group)?;
    let policy = &entry.object.spec.rollout;
    let total = entry.members.len() as u32;
    let jitter = fleet::validate::rollout_jitter(policy);
    (!jitter.is_zero() && fleet::validate::max_unavailable(policy, total) >= total)
        .then_some(jitter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const AT: &str = "2026-01-01T00:00:00Z";

    /// One replica owning `clusters` clusters in one SyncGroup with no budget, its source
    /// resolved: every Sync is admitted and actionable on node 1.
    fn fleet(clusters: usize, jitter: bool) -> FleetState {
        let mut state = FleetState::default();
        state.apply(fleet::Command::AddMember {
            id: 1,
            address: "127.0.0.1:7001".into(),
            at: AT.into(),
        });
        let jitter = if jitter { "\n    jitter: 1h" } else { "" };
        let mut manifests = format!(
            "apiVersion: starling.dev/v1alpha1\nkind: Source\nmetadata: {{name: repo}}\nspec: {{git: {{url: \"git://127.0.0.1:9/r\", ref: {{branch: main}}}}}}\n---\napiVersion: starling.dev/v1alpha1\nkind: SyncGroup\nmetadata: {{name: web}}\nspec:\n  sourceRef: {{name: repo}}\n  clusterSelector: {{}}\n  template: {{path: app}}\n  rollout:\n    maxUnavailable: 100%{jitter}\n"
        );
        for i in 0..clusters {
            manifests.push_str(&format!(
                "---\napiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: c{i}}}\nspec: {{}}\n"
            ));
        }
        for resource in fleet::manifest::parse_manifests(&manifests).expect("manifests") {
            state.apply(fleet::Command::UpsertSpec {
                resource: Box::new(resource),
                at: AT.into(),
            });
        }
        resolve(&mut state, "main@sha1:aaa");
        state
    }

    fn resolve(state: &mut FleetState, revision: &str) {
        state.apply(fleet::Command::SourceResolved {
            source: "default/repo".into(),
            revision: revision.into(),
            artifact: None,
            expected: fleet::ExpectedRevision::Any,
            inputs: Default::default(),
            at: AT.into(),
        });
    }

    fn sync(i: usize) -> Key {
        format!("default/web-c{i}")
    }

    /// A report for Sync `i`: 0 succeeded, 1 denied, 2 cancelled, 3 and up failed.
    fn report(i: usize, kind: u8, revision: &str) -> Done {
        let finished = |failure| Done::Finished {
            sync: sync(i),
            revision: revision.into(),
            failure,
            drift_interval: Duration::from_secs(600),
        };
        match kind {
            0 => finished(None),
            1 => Done::Denied {
                sync: sync(i),
                revision: revision.into(),
                retry_in: Duration::from_secs(1),
            },
            2 => finished(Some(ErrorClass::Cancelled)),
            3 => finished(Some(ErrorClass::Unreachable)),
            4 => finished(Some(ErrorClass::Invalid)),
            _ => finished(Some(ErrorClass::Timeout)),
        }
    }

    fn planned(plan: &[Work]) -> BTreeSet<Key> {
        plan.iter().map(|work| work.sync.clone()).collect()
    }

    #[test]
    fn every_admitted_sync_is_planned_once() {
        let state = fleet(5, false);
        let now = Instant::now();
        let mut planner = Planner::new(std::time::SystemTime::UNIX_EPOCH, now);
        let plan = planner.plan(&state, 1, &BTreeSet::new(), now);
        assert_eq!(planned(&plan), (0..5).map(sync).collect());
        assert_eq!(plan.len(), 5);
        assert!(plan.iter().all(|work| !work.drift));
        assert!(planner.plan(&state, 2, &BTreeSet::new(), now).is_empty());
    }

    #[test]
    fn a_start_jitter_spreads_the_starts_over_its_window() {
        let state = fleet(40, true);
        let now = Instant::now();
        let mut planner = Planner::new(std::time::SystemTime::UNIX_EPOCH, now);
        let first = planner.plan(&state, 1, &BTreeSet::new(), now).len();
        let half = planner
            .plan(&state, 1, &BTreeSet::new(), now + Duration::from_secs(1800))
            .len();
        let all = planner
            .plan(&state, 1, &BTreeSet::new(), now + Duration::from_secs(3600))
            .len();
        assert!(first < 5, "{first} of 40 started at once");
        assert!(first < half && half < all, "{first} {half} {all}");
        assert_eq!(all, 40);
    }

    /// The plan as it was made before the plan journal: a walk over all of the node's
    /// actionable Syncs that are not running, each looked at in full. The reference the
    /// incremental plan must equal.
    fn plan_by_walk(
        planner: &mut Planner,
        state: &FleetState,
        node: u64,
        busy: &BTreeSet<Key>,
        now: Instant,
    ) -> Vec<Work> {
        let keys: Vec<Key> = state
            .actionable_keys_for(node, |key| busy.contains(key))
            .cloned()
            .collect();
        let mut plan: Vec<Work> = keys
            .into_iter()
            .filter(|sync| planner.consider(state, sync, now))
            .map(|sync| Work { sync, drift: false })
            .collect();
        if now.duration_since(planner.last_drift_scan) >= DRIFT_SCAN {
            planner.last_drift_scan = now;
            plan.extend(planner.due_drift(state, node, busy, now));
        }
        plan
    }

    /// Sync `i` granted and finished in the state, as its owner would (nothing when the state
    /// does not grant it).
    fn run_in_state(state: &mut FleetState, i: usize, succeeded: bool) {
        let key = sync(i);
        let Some((node, generation)) = state.cluster_owner(&format!("default/c{i}")) else {
            return;
        };
        let revision = state
            .target_of(&key)
            .map(|t| t.revision)
            .unwrap_or_default();
        let fleet::Outcome::Granted { ticket } = state.apply(fleet::Command::BeginSync {
            sync: key,
            node,
            generation,
            revision,
            spec_generation: None,
        }) else {
            return;
        };
        let outcome = if succeeded {
            fleet::state::SyncOutcome::Succeeded {
                inventory: Vec::new(),
                health: fleet::resources::ResourceStatus::Current,
                drift: None,
            }
        } else {
            fleet::state::SyncOutcome::Failed {
                class: "unreachable".into(),
                message: "connection refused".into(),
                inventory: None,
            }
        };
        state.apply(fleet::Command::FinishSync {
            ticket: ticket.id,
            outcome,
            at: AT.into(),
        });
    }

    fn cluster_manifest(i: usize) -> fleet::manifest::Resource {
        let text = format!(
            "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: c{i}}}\nspec: {{}}\n"
        );
        fleet::manifest::parse_manifests(&text)
            .expect("a cluster")
            .remove(0)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        /// Through any sequence of state changes, reports, starts and the clock moving, the
        /// plan made from the journal (and the planner's own wakeups) starts exactly what the
        /// walk over every actionable Sync starts.
        #[test]
        fn the_incremental_plan_is_the_full_plan(
            clusters in 1usize..6,
            jitter in any::<bool>(),
            steps in proptest::collection::vec((0u8..13, 0usize..6, 0u8..6), 1..40),
        ) {
            let mut state = fleet(clusters, jitter);
            let start = Instant::now();
            let mut now = start;
            let mut incremental = Planner::new(std::time::SystemTime::UNIX_EPOCH, start);
            let mut reference = Planner::new(std::time::SystemTime::UNIX_EPOCH, start);
            let mut busy: BTreeSet<Key> = BTreeSet::new();
            let mut revisions = 0u32;
            let mut held = BTreeSet::new();
            let mut second_member = false;
            let mut deleted = BTreeSet::new();
            let mut recovering = false;
            for (step, (op, i, kind)) in steps.into_iter().enumerate() {
                let i = i % clusters;
                match op {
                    // A plan; the worker starts the first `kind` of it.
                    0..=2 => {
                        let mut mine = incremental.plan(&state, 1, &busy, now);
                        let mut walked = plan_by_walk(&mut reference, &state, 1, &busy, now);
                        let key = |w: &Work| (w.sync.clone(), w.drift);
                        prop_assert_eq!(
                            mine.iter().map(key).collect::<BTreeSet<_>>().len(),
                            mine.len(),
                            "a Sync planned twice: {:?}", mine
                        );
                        mine.sort_by_key(key);
                        walked.sort_by_key(key);
                        walked.dedup();
                        prop_assert_eq!(&mine, &walked, "step {}", step);
                        for work in mine.iter().take(usize::from(kind)) {
                            busy.insert(work.sync.clone());
                        }
                    }
                    // A running sync ends: the state hears of it (unless it was denied or
                    // given back before it began), then the planner.
                    3..=5 => {
                        if busy.remove(&sync(i)) {
                            // As the worker prepares it: the target, and the adoption.
                            let revision = backoff_key(
                                state
                                    .target_of(&sync(i))
                                    .map(|t| t.revision)
                                    .unwrap_or_default(),
                                adopting(&state, &sync(i)),
                            );
                            if kind == 0 || kind >= 3 {
                                run_in_state(&mut state, i, kind == 0);
                            }
                            for planner in [&mut incremental, &mut reference] {
                                planner.record(report(i, kind, &revision), now);
                            }
                        }
                    }
                    6 => {
                        revisions += 1;
                        resolve(&mut state, &format!("main@sha1:{revisions:03}"));
                    }
                    7 => {
                        let hold = held.insert(i) || !held.remove(&i);
                        state.apply(fleet::Command::HoldCluster {
                            cluster: format!("default/c{i}"),
                            hold,
                            at: AT.into(),
                        });
                    }
                    8 | 9 => {
                        now += [0, 1, 2, 31, 1200][usize::from(kind) % 5] * Duration::from_secs(1);
                    }
                    10 => {
                        second_member = !second_member;
                        state.apply(if second_member {
                            fleet::Command::AddMember {
                                id: 2,
                                address: "127.0.0.1:7002".into(),
                                at: AT.into(),
                            }
                        } else {
                            fleet::Command::RemoveMember { id: 2 }
                        });
                    }
                    11 => {
                        if deleted.remove(&i) {
                            state.apply(fleet::Command::UpsertSpec {
                                resource: Box::new(cluster_manifest(i)),
                                at: AT.into(),
                            });
                        } else if !busy.contains(&sync(i)) {
                            deleted.insert(i);
                            state.apply(fleet::Command::DeleteSpec {
                                key: cluster_manifest(i).key(),
                            });
                        }
                    }
                    _ if kind % 3 == 0 => {
                        state = FleetState::decode_snapshot(&state.encode_snapshot())
                            .expect("a snapshot round trip");
                    }
                    _ if kind % 3 == 1 => {
                        state.apply(fleet::Command::AdoptCluster {
                            cluster: format!("default/c{i}"),
                            at: AT.into(),
                        });
                    }
                    _ => {
                        recovering = !recovering;
                        state.apply(fleet::Command::SetRecovery { active: recovering });
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Whatever was reported and whatever is running: the plan names each Sync at most
        /// once, only Syncs the state makes actionable here, none that is running, and none
        /// backing off for the revision it would apply; once every backoff has run out,
        /// every idle actionable Sync is planned again.
        #[test]
        fn the_plan_starts_each_idle_actionable_sync_once_its_backoff_ends(
            clusters in 1usize..8,
            busy in proptest::collection::btree_set(0usize..8, 0..4),
            reports in proptest::collection::vec((0usize..8, 0u8..6), 0..12),
            later in 0u64..40,
            new_revision in any::<bool>(),
        ) {
            let mut state = fleet(clusters, false);
            let start = Instant::now();
            let mut planner = Planner::new(std::time::SystemTime::UNIX_EPOCH, start);
            let busy: BTreeSet<Key> = busy.into_iter().filter(|i| *i < clusters).map(sync).collect();
            let mut backing_off = BTreeSet::new();
            for (i, kind) in reports.iter().copied().filter(|(i, _)| *i < clusters) {
                planner.record(report(i, kind, "main@sha1:aaa"), start);
                if kind == 0 {
                    backing_off.remove(&sync(i));
                } else {
                    backing_off.insert(sync(i));
                }
            }
            if new_revision {
                resolve(&mut state, "main@sha1:bbb");
                backing_off.clear();
            }
            let actionable: BTreeSet<Key> = state.actionable_for(1).into_iter().collect();

            let now = start + Duration::from_secs(later);
            let plan = planner.plan(&state, 1, &busy, now);
            let names = planned(&plan);
            prop_assert_eq!(names.len(), plan.len(), "a Sync planned twice: {:?}", plan);
            for work in &plan {
                prop_assert!(!busy.contains(&work.sync), "{} is running", work.sync);
                if !work.drift {
                    prop_assert!(actionable.contains(&work.sync));
                }
            }
            if later == 0 {
                for sync in &backing_off {
                    prop_assert!(!names.contains(sync), "{} planned while backing off", sync);
                }
            }

            let after = start + PERMANENT_FAILURE_RETRY + Duration::from_secs(1);
            let names = planned(&planner.plan(&state, 1, &busy, after));
            for sync in actionable.iter().filter(|s| !busy.contains(*s)) {
                prop_assert!(names.contains(sync), "{} not planned after its backoff", sync);
            }
        }

        /// A retry never waits longer than the permanent-failure delay, and never waits less
        /// for a later attempt of the same class.
        #[test]
        fn retry_delays_grow_and_are_bounded(
            class in prop::sample::select(ErrorClass::ALL.to_vec()),
            attempts in 1u32..20,
        ) {
            let first = retry_delay("default/web-c0", class, attempts);
            let next = retry_delay("default/web-c0", class, attempts + 1);
            prop_assert!(first <= PERMANENT_FAILURE_RETRY && next <= PERMANENT_FAILURE_RETRY);
            prop_assert!(!first.is_zero());
            prop_assert!(next + Duration::from_secs(1) >= first, "{:?} then {:?}", first, next);
        }
    }
}

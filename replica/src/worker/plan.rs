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

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fleet::state::{FleetState, Key, SyncState};
use starling_sync::{ErrorClass, RetryPolicy};
use tokio::time::Instant;

/// How often owned Syncs are scanned for due drift corrections.
pub(crate) const DRIFT_SCAN: Duration = Duration::from_secs(1);
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
    /// When this process started (whole seconds, as the status times are written).
    started: std::time::SystemTime,
    /// Successful syncs recorded: varies the jitter of a Sync's successive drift checks.
    succeeded: u64,
}

impl Planner {
    /// A planner of a process started at `started` (wall clock), made at `now`.
    pub(crate) fn new(started: std::time::SystemTime, now: Instant) -> Planner {
        Planner {
            retry_at: BTreeMap::new(),
            drift_at: BTreeMap::new(),
            first_seen: BTreeMap::new(),
            last_drift_scan: now,
            started,
            succeeded: 0,
        }
    }

    /// Records a finished task at `now`.
    pub(crate) fn record(&mut self, report: Done, now: Instant) {
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
    pub(crate) fn plan(
        &mut self,
        state: &FleetState,
        node: u64,
        busy: &BTreeSet<Key>,
        now: Instant,
    ) -> Vec<Work> {
        let mut plan = Vec::new();
        // The running Syncs are left out first: in a rollout they are most of the actionable.
        for sync in state.actionable_keys_for(node, |key| busy.contains(key)) {
            let revision = || {
                let revision = state
                    .target_of(sync)
                    .map(|t| t.revision)
                    .unwrap_or_default();
                backoff_key(revision, adopting(state, sync))
            };
            // A backoff recorded without a revision (nothing could be prepared: not the owner,
            // or no installation identity yet) holds whatever the revision.
            let backing_off = self
                .retry_at
                .get(sync)
                .is_some_and(|(at, _, for_revision)| {
                    *at > now && (for_revision.is_empty() || *for_revision == revision())
                });
            if backing_off {
                continue;
            }
            // Deleting with prune waits for no dependency and no jitter.
            if state.retiring.contains(sync) {
                plan.push(Work {
                    sync: sync.clone(),
                    drift: false,
                });
                continue;
            }
            // Unmet dependencies (or a cycle) are read locally: no BeginSync is proposed until
            // they are met, and every applied entry plans again. The Sync's status names them.
            if !state.pending_dependencies(sync).is_ok_and(|p| p.is_empty()) {
                continue;
            }
            if let Some(delay) = start_jitter(state, sync) {
                let revision = revision();
                let seen = *self
                    .first_seen
                    .entry((sync.clone(), revision.clone()))
                    .or_insert(now);
                let offset = delay.mul_f64(
                    (starling_sync::retry::jitter_key(&format!("{sync}@{revision}")) % 10_000)
                        as f64
                        / 10_000.0,
                );
                if seen + offset > now {
                    continue;
                }
            }
            plan.push(Work {
                sync: sync.clone(),
                drift: false,
            });
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
        let mut owned = BTreeSet::new();
        for cluster in state.clusters_of(node) {
            for sync in state.cluster_syncs.get(&cluster).into_iter().flatten() {
                owned.insert(sync.clone());
                let Some(entry) = state.syncs.get(sync) else {
                    continue;
                };
                if !matches!(entry.rollout.state, SyncState::Updated | SyncState::Unready)
                    || busy.contains(sync)
                {
                    continue;
                }
                let interval = fleet::validate::sync_interval(&entry.object.spec.template);
                let at = *self.drift_at.entry(sync.clone()).or_insert_with(|| {
                    let last_apply = entry
                        .object
                        .status
                        .as_ref()
                        .and_then(|s| s.last_apply_time.as_deref());
                    now + super::drift::first_drift_check(
                        last_apply,
                        self.started,
                        interval,
                        starling_sync::retry::jitter_key(sync),
                    )
                });
                if at <= now {
                    due.push(Work {
                        sync: sync.clone(),
                        drift: true,
                    });
                }
            }
        }
        self.drift_at.retain(|sync, _| owned.contains(sync));
        self.retry_at
            .retain(|sync, _| owned.contains(sync) || state.actionable.contains(sync));
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

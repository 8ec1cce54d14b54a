//! Prometheus metrics of a replica, served on `/metrics`. Counters are bumped where things
//! happen; gauges about Raft and ownership are refreshed from the current state at each scrape
//! (cheap: a few numbers per node), so nothing has to keep them in step.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use fleet::state::MemberState;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct NodeLabel {
    pub node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StateLabel {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

/// A notification Provider (`namespace/name`) and how a delivery went: `delivered`,
/// `retrying` (the receiver failed every try; the events stay queued) or `refused` (a 4xx).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderOutcome {
    pub provider: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ProviderLabel {
    pub provider: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct KindLabel {
    pub kind: String,
}

/// The process allocator's own figures, in bytes (jemalloc's `stats.*`): what the program
/// holds (`allocated`), the pages that holds spans (`active`), what is resident of the
/// allocator's memory (`resident`, including its `metadata`), and what it keeps mapped but
/// returned to the system (`retained`). Resident against allocated is the allocator's price.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocatorStats {
    pub allocated: u64,
    pub active: u64,
    pub resident: u64,
    pub metadata: u64,
    pub retained: u64,
}

/// Reads the allocator's figures; the binary that chose the allocator installs it
/// ([`set_allocator_probe`]).
pub type AllocatorProbe = fn() -> Option<AllocatorStats>;

static ALLOCATOR_PROBE: std::sync::OnceLock<AllocatorProbe> = std::sync::OnceLock::new();

/// Makes `/metrics` report the process allocator's figures (`starling_allocator_bytes`). The
/// allocator is the binary's choice, so the binary installs its reader, once.
pub fn set_allocator_probe(probe: AllocatorProbe) {
    let _ = ALLOCATOR_PROBE.set(probe);
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct GroupLabel {
    pub group: String,
    pub state: String,
}

pub struct Metrics {
    registry: Registry,
    raft_term: Gauge,
    raft_leader: Gauge,
    raft_commit_index: Gauge,
    raft_applied_index: Gauge,
    members: Family<StateLabel, Gauge>,
    clusters_owned: Family<NodeLabel, Gauge>,
    sources_owned: Family<NodeLabel, Gauge>,
    rollout_clusters: Family<GroupLabel, Gauge>,
    pub grants: Counter,
    pub denials: Family<ReasonLabel, Counter>,
    pub syncs: Family<ResultLabel, Counter>,
    /// Webhook events received, accepted or refused.
    pub webhooks: Family<ResultLabel, Counter>,
    pub sync_duration: Histogram,
    /// Time of each plan: the worker's look at the state after a burst of applied entries,
    /// for the Syncs it may start (under the state's read lock, no I/O: CPU time).
    pub plan_duration: Histogram,
    pub source_fetch_duration: Histogram,
    /// Artifacts this node copied from a peer, and built from its own git mirror (a git fetch).
    pub artifacts_from_peers: Counter,
    pub artifacts_from_git: Counter,
    pub lease_lapses: Counter,
    /// Renders answered from the node's render cache, and engine runs (cache misses).
    render_cache_hits: Counter,
    render_engine_runs: Counter,
    render_cache_bytes: Gauge,
    in_flight: Gauge,
    /// Agents of pull clusters whose stream this replica serves (as their clusters' owner).
    agents_connected: Gauge,
    /// Agents' streams this replica forwards to their clusters' owners now.
    pub agents_forwarded: Gauge,
    /// Attaches held now for agents that could not reach their cluster's owner.
    pub agents_held: Gauge,
    /// Held attaches of agents that could not reach their cluster's owner, by how the hold
    /// ended: `moved` (the state named another owner), `answered` (the owner answered this
    /// replica again) or `expired`.
    pub agent_holds: Family<ResultLabel, Counter>,
    allocator: Family<KindLabel, Gauge>,
    /// Notification messages (and commit statuses) sent, by Provider and outcome.
    pub notifications_sent: Family<ProviderOutcome, Counter>,
    /// Notifications waiting per Provider, and dropped because the queue was full (from the
    /// state at each scrape).
    notifications_pending: Family<ProviderLabel, Gauge>,
    notifications_dropped: Family<ProviderLabel, Gauge>,
    in_flight_count: AtomicI64,
    sync_totals: Totals,
    plan_totals: Totals,
}

/// A running total of durations and their count, read by benchmarks (histograms keep only
/// buckets).
#[derive(Default)]
struct Totals {
    nanos: AtomicU64,
    count: AtomicU64,
}

impl Totals {
    fn add(&self, took: Duration) {
        self.nanos
            .fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self) -> (Duration, u64) {
        (
            Duration::from_nanos(self.nanos.load(Ordering::Relaxed)),
            self.count.load(Ordering::Relaxed),
        )
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("starling");
        let metrics = Metrics {
            raft_term: Gauge::default(),
            raft_leader: Gauge::default(),
            raft_commit_index: Gauge::default(),
            raft_applied_index: Gauge::default(),
            members: Family::default(),
            clusters_owned: Family::default(),
            sources_owned: Family::default(),
            rollout_clusters: Family::default(),
            grants: Counter::default(),
            denials: Family::default(),
            syncs: Family::default(),
            webhooks: Family::default(),
            sync_duration: Histogram::new(exponential_buckets(0.01, 2.0, 14)),
            plan_duration: Histogram::new(exponential_buckets(0.000_01, 2.0, 20)),
            source_fetch_duration: Histogram::new(exponential_buckets(0.01, 2.0, 14)),
            artifacts_from_peers: Counter::default(),
            artifacts_from_git: Counter::default(),
            lease_lapses: Counter::default(),
            render_cache_hits: Counter::default(),
            render_engine_runs: Counter::default(),
            render_cache_bytes: Gauge::default(),
            in_flight: Gauge::default(),
            allocator: Family::default(),
            notifications_sent: Family::default(),
            notifications_pending: Family::default(),
            notifications_dropped: Family::default(),
            agents_connected: Gauge::default(),
            agents_forwarded: Gauge::default(),
            agents_held: Gauge::default(),
            agent_holds: Family::default(),
            in_flight_count: AtomicI64::new(0),
            sync_totals: Totals::default(),
            plan_totals: Totals::default(),
            registry: Registry::default(),
        };
        registry.register("raft_term", "Current Raft term", metrics.raft_term.clone());
        registry.register(
            "raft_leader",
            "Id of the Raft leader as seen by this node (-1: none)",
            metrics.raft_leader.clone(),
        );
        registry.register(
            "raft_commit_index",
            "Highest log index known committed",
            metrics.raft_commit_index.clone(),
        );
        registry.register(
            "raft_applied_index",
            "Highest log index applied to the fleet state",
            metrics.raft_applied_index.clone(),
        );
        registry.register("members", "Members by state", metrics.members.clone());
        registry.register(
            "render_cache_hits",
            "Renders answered from this node's render cache (Kustomize and Helm)",
            metrics.render_cache_hits.clone(),
        );
        registry.register(
            "render_engine_runs",
            "Kustomize and Helm engine runs on this node (render cache misses)",
            metrics.render_engine_runs.clone(),
        );
        registry.register(
            "render_cache_bytes",
            "Bytes of engine output held in this node's render cache",
            metrics.render_cache_bytes.clone(),
        );
        registry.register(
            "agents_connected",
            "Agents of pull clusters this replica serves as their owner",
            metrics.agents_connected.clone(),
        );
        registry.register(
            "agents_forwarded",
            "Agents' streams this replica forwards to their clusters' owners (agents that \
             cannot reach the owners themselves)",
            metrics.agents_forwarded.clone(),
        );
        registry.register(
            "agents_held",
            "Attaches this replica holds now for agents that could not reach their cluster's \
             owner, until it moves or answers again",
            metrics.agents_held.clone(),
        );
        registry.register(
            "agent_holds",
            "Attaches held for agents that could not reach their cluster's owner, by how the \
             hold ended (moved: another owner named; answered: the owner answers again; \
             expired)",
            metrics.agent_holds.clone(),
        );
        registry.register(
            "clusters_owned",
            "Clusters owned per node",
            metrics.clusters_owned.clone(),
        );
        registry.register(
            "sources_owned",
            "Sources polled per node",
            metrics.sources_owned.clone(),
        );
        registry.register(
            "rollout_clusters",
            "SyncGroup members by rollout state",
            metrics.rollout_clusters.clone(),
        );
        registry.register(
            "grants",
            "BeginSync grants received by this node",
            metrics.grants.clone(),
        );
        registry.register(
            "denials",
            "BeginSync denials received by this node, by reason",
            metrics.denials.clone(),
        );
        registry.register(
            "syncs",
            "Syncs finished by this node, by result",
            metrics.syncs.clone(),
        );
        registry.register(
            "webhooks",
            "Webhook events received by this node, accepted or refused",
            metrics.webhooks.clone(),
        );
        registry.register(
            "sync_duration_seconds",
            "Duration of syncs run by this node",
            metrics.sync_duration.clone(),
        );
        registry.register(
            "plan_duration_seconds",
            "Duration of each plan of the Syncs to start, one per burst of applied entries",
            metrics.plan_duration.clone(),
        );
        registry.register(
            "source_fetch_duration_seconds",
            "Duration of source fetches by this node",
            metrics.source_fetch_duration.clone(),
        );
        registry.register(
            "artifacts_from_peers",
            "Artifacts this node copied from a peer by digest",
            metrics.artifacts_from_peers.clone(),
        );
        registry.register(
            "artifacts_from_git",
            "Artifacts this node built from its own git mirror, each after a git fetch",
            metrics.artifacts_from_git.clone(),
        );
        registry.register(
            "lease_lapses",
            "Heartbeat rounds that ended with the node lease lapsed",
            metrics.lease_lapses.clone(),
        );
        registry.register(
            "syncs_in_flight",
            "Syncs running on this node",
            metrics.in_flight.clone(),
        );
        registry.register(
            "allocator_bytes",
            "The process allocator's figures: allocated, active, resident, metadata, retained",
            metrics.allocator.clone(),
        );
        registry.register(
            "notifications_sent",
            "Notification messages and commit statuses sent, by Provider and outcome (delivered, retrying, refused)",
            metrics.notifications_sent.clone(),
        );
        registry.register(
            "notifications_pending",
            "Notifications queued in the state for each Provider, not yet delivered",
            metrics.notifications_pending.clone(),
        );
        registry.register(
            "notifications_dropped",
            "Notifications dropped for each Provider because its queue was full",
            metrics.notifications_dropped.clone(),
        );
        Metrics {
            registry,
            ..metrics
        }
    }

    /// Records how long one sync took (histogram, and the running mean `starling dev` uses).
    pub fn record_sync_duration(&self, took: Duration) {
        self.sync_duration.observe(took.as_secs_f64());
        self.sync_totals.add(took);
    }

    /// Total time and count of the syncs this node ran.
    pub fn sync_totals(&self) -> (Duration, u64) {
        self.sync_totals.get()
    }

    /// Records how long one plan took (histogram, and the totals [`Metrics::plan_totals`]).
    pub fn record_plan(&self, took: Duration) {
        self.plan_duration.observe(took.as_secs_f64());
        self.plan_totals.add(took);
    }

    /// Total time and count of this node's plans.
    pub fn plan_totals(&self) -> (Duration, u64) {
        self.plan_totals.get()
    }

    pub fn lease_lapsed(&self) {
        self.lease_lapses.inc();
    }

    pub fn sync_started(&self) {
        let now = self.in_flight_count.fetch_add(1, Ordering::Relaxed) + 1;
        self.in_flight.set(now);
    }

    pub fn sync_ended(&self) {
        let now = self.in_flight_count.fetch_sub(1, Ordering::Relaxed) - 1;
        self.in_flight.set(now);
    }

    pub fn syncs_in_flight(&self) -> i64 {
        self.in_flight_count.load(Ordering::Relaxed)
    }

    /// Refreshes the gauges from Raft and the fleet state, then encodes everything. `raft`
    /// is the node whose gauges these are, `leader_commit` the leader's commit index this
    /// replica last heard of.
    pub fn render(
        &self,
        raft: &starling_raft::RaftNode,
        leader_commit: u64,
        agents_connected: usize,
        render: starling_sync::render::CacheStats,
    ) -> String {
        let metrics = raft.metrics().borrow().clone();
        // The cache counts by itself; the counters catch up with it at each scrape.
        let catch_up = |counter: &Counter, total: u64| {
            counter.inc_by(total.saturating_sub(counter.get()));
        };
        catch_up(&self.render_cache_hits, render.hits);
        catch_up(&self.render_engine_runs, render.renders);
        self.render_cache_bytes.set(render.bytes as i64);
        self.agents_connected.set(agents_connected as i64);
        self.raft_term.set(metrics.current_term as i64);
        self.raft_leader
            .set(metrics.current_leader.map_or(-1, |id| id as i64));
        self.raft_applied_index
            .set(metrics.last_applied.map_or(0, |l| l.index) as i64);
        let committed = metrics.last_log_index.unwrap_or(0).max(leader_commit);
        self.raft_commit_index.set(committed as i64);
        self.members.clear();
        self.clusters_owned.clear();
        self.sources_owned.clear();
        self.rollout_clusters.clear();
        self.notifications_pending.clear();
        self.notifications_dropped.clear();
        raft.reader().read(|state| {
            for (provider, queue) in &state.notifications {
                let label = ProviderLabel {
                    provider: provider.clone(),
                };
                self.notifications_pending
                    .get_or_create(&label)
                    .set(queue.pending.len() as i64);
                self.notifications_dropped
                    .get_or_create(&label)
                    .set(queue.dropped as i64);
            }
            for state_name in [MemberState::Live, MemberState::Down, MemberState::Draining] {
                let count = state
                    .members
                    .values()
                    .filter(|m| m.state == state_name)
                    .count();
                self.members
                    .get_or_create(&StateLabel {
                        state: format!("{state_name:?}"),
                    })
                    .set(count as i64);
            }
            for node in state.members.keys() {
                let label = NodeLabel {
                    node: node.to_string(),
                };
                self.clusters_owned
                    .get_or_create(&label)
                    .set(state.cluster_placement.count_of(*node) as i64);
                self.sources_owned
                    .get_or_create(&label)
                    .set(state.source_placement.count_of(*node) as i64);
            }
            for (key, group) in &state.groups {
                let c = &group.ledger.counts;
                for (name, value) in [
                    ("pending", c.pending + c.idle),
                    ("in_progress", c.admitted + c.applying + c.unready),
                    ("updated", c.updated),
                    ("failed", c.failed),
                ] {
                    self.rollout_clusters
                        .get_or_create(&GroupLabel {
                            group: key.clone(),
                            state: name.to_string(),
                        })
                        .set(value as i64);
                }
            }
        });
        if let Some(stats) = ALLOCATOR_PROBE.get().and_then(|probe| probe()) {
            for (kind, value) in [
                ("allocated", stats.allocated),
                ("active", stats.active),
                ("resident", stats.resident),
                ("metadata", stats.metadata),
                ("retained", stats.retained),
            ] {
                self.allocator
                    .get_or_create(&KindLabel {
                        kind: kind.to_owned(),
                    })
                    .set(value as i64);
            }
        }
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.push_str("# error: metrics could not be encoded\n");
        }
        out
    }
}

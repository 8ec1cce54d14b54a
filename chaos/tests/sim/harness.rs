//! One simulated run: a seed picks the layout (3 or 5 replicas, in one region or three), the
//! timing and a fault schedule; the run injects the faults, heals everything, waits for the
//! fleet to converge and checks the invariants. The same seed replays the same run.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::rc::Rc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use starling_raft::{NodeId, RaftConfig};

use crate::client::{self, Script};
use crate::replica::{self, Host, Timing};
use crate::world::World;

/// Where the replicas run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One region: 1–2 ms between replicas.
    Local,
    /// Three regions, 30–150 ms round trip between them, 1–2 ms inside one.
    Regions,
}

/// What a run is allowed and asked to do.
#[derive(Clone, Debug)]
pub struct Options {
    pub layout: Layout,
    /// How long faults are injected.
    pub fault_window: Duration,
    /// How long the healed fleet may take to converge.
    pub converge_within: Duration,
    /// The simulation's step.
    pub tick: Duration,
    pub faults: Plan,
}

/// Which faults a run injects.
#[derive(Clone, Debug)]
pub enum Plan {
    /// A seeded random schedule over the fault window.
    Random,
    /// These faults at these times (the figures: one leader crash, for example).
    Fixed(Vec<(Duration, Fault)>),
}

impl Options {
    /// The short form CI runs per seed.
    pub fn short(layout: Layout) -> Options {
        Options {
            layout,
            fault_window: Duration::from_secs(8),
            converge_within: Duration::from_secs(40),
            tick: Duration::from_millis(2),
            faults: Plan::Random,
        }
    }
}

/// One injected fault.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Cut a replica off from all others, both ways.
    Isolate(NodeId),
    /// Cut the current leader and one other replica off from the rest (a minority).
    IsolateLeaderWithMinority,
    /// Drop everything from `from` to `to`, but not back.
    OneWay { from: NodeId, to: NodeId },
    /// Random message loss on every link for a while.
    Lossy(f64),
    /// Up to this much extra latency per message (delay and reordering).
    Slow(Duration),
    /// kill -9 and a power cut: the disk keeps what was synced and some of the rest.
    Crash(NodeId),
    /// Crash whichever replica leads now.
    CrashLeader,
    /// Repair every link and restart every crashed replica.
    Heal,
}

/// What a run found.
#[derive(Debug)]
pub struct Report {
    pub seed: u64,
    pub replicas: usize,
    pub schedule: Vec<(Duration, Fault)>,
    pub violations: Vec<String>,
    pub trace: Vec<String>,
    pub converged_after: Option<Duration>,
    /// The SyncGroup's budget, and the most clusters the targets saw in rollout at once.
    pub budget: u32,
    pub most_in_rollout: usize,
    pub commit_latencies: Vec<Duration>,
    /// After the first crash of a leader: how long until another replica led, and until none
    /// of the crashed replica's clusters was owned by it any more.
    pub failover: Option<Failover>,
    /// What the client's moves led to on the targets.
    pub moves: Moves,
}

/// Whether the client's moves were exercised: the deselected and the deleted cluster pruned
/// (retires landed), the foreign cluster refused and then taken over.
#[derive(Clone, Copy, Debug, Default)]
pub struct Moves {
    pub pruned: usize,
    pub refused: usize,
    pub adopted: bool,
}

impl Moves {
    fn of(world: &World) -> Moves {
        let retired = |cluster: &str| {
            world
                .writes
                .get(cluster)
                .is_some_and(|writes| writes.iter().any(|w| w.retire))
        };
        Moves {
            pruned: [client::DESELECTED, client::DELETED]
                .into_iter()
                .filter(|c| retired(c))
                .count(),
            refused: world.refusals.values().sum(),
            adopted: world
                .writes
                .get(client::FOREIGN)
                .is_some_and(|writes| writes.iter().any(|w| w.adopt)),
        }
    }

    /// Every move was exercised.
    pub fn all(&self) -> bool {
        self.pruned == 2 && self.refused > 0 && self.adopted
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Failover {
    pub elected: Option<Duration>,
    pub owned_again: Option<Duration>,
}

/// Watches a leader crash until both figures are known.
struct FailoverWatch {
    crashed: NodeId,
    at: Duration,
    figures: Failover,
}

impl FailoverWatch {
    fn observe(&mut self, now: Duration, world: &World) {
        let since = now - self.at;
        let Some(leader) = world.nodes.values().find(|node| node.raft.is_leader()) else {
            return;
        };
        if self.figures.elected.is_none() && leader.id() != self.crashed {
            self.figures.elected = Some(since);
        }
        if self.figures.owned_again.is_none() && leader.id() != self.crashed {
            let moved = leader.raft.reader().read(|state| {
                state
                    .clusters
                    .values()
                    .all(|c| c.owner != Some(self.crashed))
            });
            if moved {
                self.figures.owned_again = Some(since);
            }
        }
    }
}

impl Report {
    pub fn describe(&self) -> String {
        let mut text = format!(
            "seed {} ({} replicas): {} violation(s), converged {:?} after healing\n",
            self.seed,
            self.replicas,
            self.violations.len(),
            self.converged_after
        );
        for violation in &self.violations {
            let _ = writeln!(text, "  violation: {violation}");
        }
        let _ = writeln!(text, "  schedule:");
        for (at, fault) in &self.schedule {
            let _ = writeln!(text, "    {at:?} {fault:?}");
        }
        // `SIM_TRACE=<text>`: every event that mentions it, instead of the last 30.
        match std::env::var("SIM_TRACE") {
            Ok(grep) => {
                let _ = writeln!(text, "  events with {grep:?}:");
                for line in self
                    .trace
                    .iter()
                    .filter(|l| grep.split('|').any(|g| l.contains(g)))
                {
                    let _ = writeln!(text, "    {line}");
                }
            }
            Err(_) => {
                let _ = writeln!(text, "  last events:");
                for line in self.trace.iter().rev().take(30).rev() {
                    let _ = writeln!(text, "    {line}");
                }
            }
        }
        text
    }
}

pub(crate) fn name(id: NodeId) -> String {
    format!("n{id}")
}

/// The seeded schedule: a fault every 0.5–2 s of the window, each lasting until the next
/// heal; at most a minority of replicas is crashed at once.
fn schedule(rng: &mut StdRng, replicas: usize, options: &Options) -> Vec<(Duration, Fault)> {
    let mut schedule = Vec::new();
    if let Plan::Fixed(faults) = &options.faults {
        return faults.clone();
    }
    let mut at = Duration::from_millis(rng.random_range(1000..3000));
    while at < options.fault_window {
        let node = rng.random_range(1..=replicas as NodeId);
        let fault = match rng.random_range(0..9) {
            0 => Fault::Isolate(node),
            1 => Fault::IsolateLeaderWithMinority,
            2 => {
                let mut to = rng.random_range(1..=replicas as NodeId);
                if to == node {
                    to = to % replicas as NodeId + 1;
                }
                Fault::OneWay { from: node, to }
            }
            3 => Fault::Lossy(rng.random_range(0.01..0.1)),
            4 => Fault::Slow(Duration::from_millis(rng.random_range(20..300))),
            5 => Fault::Crash(node),
            6 => Fault::CrashLeader,
            _ => Fault::Heal,
        };
        schedule.push((at, fault));
        at += Duration::from_millis(rng.random_range(500..2000));
    }
    schedule
}

/// A simulation of `duration` in steps of `tick`: 1–2 ms between any two hosts, messages
/// reordered, everything random drawn from `seed`.
pub(crate) fn simulation<'a>(seed: u64, tick: Duration, duration: Duration) -> turmoil::Sim<'a> {
    turmoil::Builder::new()
        .rng_seed(seed)
        .tick_duration(tick)
        .simulation_duration(duration)
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(2))
        .enable_random_order()
        .build()
}

/// A replica's timing, scaled like the node's defaults: its election timeout drawn first, then
/// how long its syncs take to apply and to become ready (`sync`).
pub(crate) fn timing(
    rng: &mut StdRng,
    raft: &RaftConfig,
    sync: impl FnOnce(&mut StdRng) -> (Duration, Duration),
) -> Timing {
    let election_timeout = rng.random_range(raft.election_timeout_min..raft.election_timeout_max);
    let (apply, ready) = sync(rng);
    Timing {
        down_after: Duration::from_secs(3),
        lease: Duration::from_millis(1500),
        beat: Duration::from_millis(300),
        raft_heartbeat: raft.heartbeat_interval,
        election_timeout,
        longest_vote_lease: raft.election_timeout_max + Duration::from_millis(1),
        apply,
        ready,
    }
}

/// Runs one seed.
pub fn run(seed: u64, options: &Options) -> Report {
    let mut rng = StdRng::seed_from_u64(seed);
    let replicas: usize = if rng.random_bool(0.5) { 3 } else { 5 };
    let voters: Vec<NodeId> = (1..=replicas as NodeId).collect();
    let schedule = schedule(&mut rng, replicas, options);
    let script = Script {
        clusters: rng.random_range(6..16),
        max_unavailable: rng.random_range(1..4),
        commits: rng.random_range(1..4),
        added_clusters: rng.random_range(1..4),
        every: Duration::from_millis(rng.random_range(1000..2500)),
    };
    let mut sim = simulation(
        seed,
        options.tick,
        options.fault_window + options.converge_within + Duration::from_secs(30),
    );
    let world = Rc::new(RefCell::new(World::default()));
    world.borrow_mut().budget = Some(script.max_unavailable);
    let root = tempfile::tempdir().expect("a temporary directory");
    starling_replica::testing::set_clock(replica::clock);
    let artifacts = root.path().join("artifacts");
    client::store_artifacts(&artifacts, &script);
    let one_way = match options.layout {
        Layout::Local => None,
        Layout::Regions => Some(region_latencies(&mut rng)),
    };
    let max_rtt = one_way.map_or(Duration::from_millis(4), |between| {
        between.iter().flatten().max().copied().unwrap_or_default() * 2
    });
    let raft = RaftConfig::new(0, "", "").with_round_trip(max_rtt);
    let mut hosts = Vec::new();
    for &id in &voters {
        let timing = timing(&mut rng, &raft, |rng| {
            (
                Duration::from_millis(rng.random_range(10..60)),
                Duration::from_millis(rng.random_range(50..300)),
            )
        });
        let host = Rc::new(Host::new(
            id,
            voters.clone(),
            timing,
            root.path(),
            artifacts.clone(),
            world.clone(),
        ));
        hosts.push(host.clone());
        sim.host(name(id), move || replica::run(host.clone()));
    }
    {
        let world = world.clone();
        sim.client("client", async move { client::run(world, script).await });
    }
    if let Some(between) = one_way {
        place_in_regions(&sim, &voters, &between);
    }

    let mut violations = Vec::new();
    let mut crashed = BTreeSet::new();
    let mut pending = schedule.clone().into_iter().peekable();
    let mut failed = None;
    let mut failover: Option<FailoverWatch> = None;
    while sim.elapsed() < options.fault_window {
        while let Some((_, fault)) = pending.next_if(|(at, _)| *at <= sim.elapsed()) {
            let leader = current_leader(&world.borrow());
            inject(&mut sim, &world, &hosts, &mut crashed, &fault, &mut rng);
            if let (Fault::CrashLeader, Some(leader), None) = (&fault, leader, &failover)
                && crashed.contains(&leader)
            {
                failover = Some(FailoverWatch {
                    crashed: leader,
                    at: sim.elapsed(),
                    figures: Failover::default(),
                });
            }
        }
        if let Some(watch) = &mut failover {
            watch.observe(sim.elapsed(), &world.borrow());
        }
        if let Err(error) = sim.step() {
            failed = Some(format!("the simulation failed: {error}"));
            break;
        }
        world.borrow_mut().absorb();
        watch_sync(&world, sim.elapsed());
        if std::env::var("SIM_DEBUG_STEPS").is_ok() && sim.elapsed() < Duration::from_millis(300) {
            eprintln!(
                "elapsed {:?} since epoch {:?}",
                sim.elapsed(),
                sim.since_epoch()
            );
        }
        if !world.borrow().violations.is_empty() {
            break;
        }
    }
    inject(
        &mut sim,
        &world,
        &hosts,
        &mut crashed,
        &Fault::Heal,
        &mut rng,
    );
    let healed = sim.elapsed();
    {
        let mut world = world.borrow_mut();
        let summary: Vec<String> = world
            .nodes
            .iter()
            .map(|(id, node)| {
                let m = node.raft.metrics().borrow().clone();
                format!(
                    "node {id}: term {} leader {:?} last log {:?} applied {:?} {:?} repl {:?}",
                    m.current_term,
                    m.current_leader,
                    m.last_log_index,
                    m.last_applied,
                    m.state,
                    m.replication
                )
            })
            .collect();
        world.trace.extend(summary);
    }
    let mut converged_after = None;
    if failed.is_none() && world.borrow().violations.is_empty() {
        let deadline = healed + options.converge_within;
        while sim.elapsed() < deadline {
            for _ in 0..50 {
                if let Err(error) = sim.step() {
                    failed = Some(format!("the simulation failed: {error}"));
                    break;
                }
                world.borrow_mut().absorb();
                watch_sync(&world, sim.elapsed());
            }
            if failed.is_some() || !world.borrow().violations.is_empty() {
                break;
            }
            if converged(&world.borrow(), replicas).is_ok() {
                converged_after = Some(sim.elapsed() - healed);
                break;
            }
        }
        if converged_after.is_none() && failed.is_none() && world.borrow().violations.is_empty() {
            let why = converged(&world.borrow(), replicas)
                .err()
                .unwrap_or_default();
            violations.push(format!(
                "no convergence within {:?} of healing: {why}",
                options.converge_within
            ));
        }
    }
    violations.extend(failed);
    let mut world = world.borrow_mut();
    violations.append(&mut world.violations);
    if converged_after.is_some() {
        violations.extend(final_checks(&world));
    }
    let report = Report {
        seed,
        replicas,
        schedule,
        violations,
        trace: std::mem::take(&mut world.trace),
        converged_after,
        budget: world.budget.unwrap_or_default(),
        most_in_rollout: world.most_in_rollout,
        commit_latencies: std::mem::take(&mut world.commit_latencies),
        failover: failover.map(|watch| watch.figures),
        moves: Moves::of(&world),
    };
    // The replicas' Raft nodes are dropped with their runtimes, inside the simulation.
    world.nodes.clear();
    drop(world);
    drop(sim);
    report
}

/// One-way latency between three regions: 15–75 ms (30–150 ms round trip).
fn region_latencies(rng: &mut StdRng) -> [[Duration; 3]; 3] {
    let mut between = [[Duration::ZERO; 3]; 3];
    for (a, b) in [(0, 1), (0, 2), (1, 2)] {
        let one_way = Duration::from_millis(rng.random_range(15..=75));
        between[a][b] = one_way;
        between[b][a] = one_way;
    }
    between
}

/// Replica `id` runs in region `(id - 1) % 3`; the client sits in region 0.
fn region_of(host: &str) -> usize {
    host.strip_prefix('n')
        .and_then(|id| id.parse::<usize>().ok())
        .map_or(0, |id| (id - 1) % 3)
}

fn place_in_regions(sim: &turmoil::Sim<'_>, voters: &[NodeId], between: &[[Duration; 3]; 3]) {
    let mut names: Vec<String> = voters.iter().map(|&id| name(id)).collect();
    names.push("client".into());
    for (i, a) in names.iter().enumerate() {
        for b in &names[i + 1..] {
            let (ra, rb) = (region_of(a), region_of(b));
            if ra != rb {
                let one_way = between[ra][rb];
                sim.set_link_latency(a.as_str(), b.as_str(), one_way);
                sim.set_link_max_message_latency(
                    a.as_str(),
                    b.as_str(),
                    one_way + Duration::from_millis(2),
                );
            }
        }
    }
}

fn inject(
    sim: &mut turmoil::Sim<'_>,
    world: &Rc<RefCell<World>>,
    hosts: &[Rc<Host>],
    crashed: &mut BTreeSet<NodeId>,
    fault: &Fault,
    rng: &mut StdRng,
) {
    let replicas = hosts.len() as NodeId;
    let others = |of: &[NodeId]| -> Vec<String> {
        (1..=replicas)
            .filter(|id| !of.contains(id))
            .map(name)
            .collect()
    };
    let leader = || current_leader(&world.borrow());
    world
        .borrow_mut()
        .trace
        .push(format!("{:?} fault {fault:?}", sim.elapsed()));
    match fault {
        Fault::Isolate(node) => {
            for other in others(&[*node]) {
                sim.partition(name(*node).as_str(), other.as_str());
            }
        }
        Fault::IsolateLeaderWithMinority => {
            let Some(leader) = leader() else { return };
            let mut minority = vec![leader];
            if replicas == 5 {
                minority.push(leader % replicas + 1);
            }
            for inside in &minority {
                for other in others(&minority) {
                    sim.partition(name(*inside).as_str(), other.as_str());
                }
            }
        }
        Fault::OneWay { from, to } => {
            sim.partition_oneway(name(*from).as_str(), name(*to).as_str());
        }
        Fault::Lossy(rate) => sim.set_fail_rate(*rate),
        Fault::Slow(extra) => sim.set_max_message_latency(*extra),
        Fault::Crash(node) => crash(sim, world, hosts, crashed, *node, rng),
        Fault::CrashLeader => {
            if let Some(leader) = leader() {
                crash(sim, world, hosts, crashed, leader, rng);
            }
        }
        Fault::Heal => {
            sim.set_fail_rate(0.0);
            sim.set_max_message_latency(Duration::from_millis(2));
            let mut names: Vec<String> = (1..=replicas).map(name).collect();
            names.push("client".into());
            for (i, a) in names.iter().enumerate() {
                for b in &names[i + 1..] {
                    sim.repair(a.as_str(), b.as_str());
                }
            }
            for node in std::mem::take(crashed) {
                sim.bounce(name(node).as_str());
            }
        }
    }
}

/// The replica that believes it leads (with the highest term, should two believe so).
pub(crate) fn current_leader(world: &World) -> Option<NodeId> {
    world
        .nodes
        .values()
        .filter(|node| node.raft.is_leader())
        .max_by_key(|node| node.raft.metrics().borrow().current_term)
        .map(|node| node.id())
}

/// Crashes `node` unless that would leave no majority running; its disk keeps what a power
/// cut leaves.
fn crash(
    sim: &mut turmoil::Sim<'_>,
    world: &Rc<RefCell<World>>,
    hosts: &[Rc<Host>],
    crashed: &mut BTreeSet<NodeId>,
    node: NodeId,
    rng: &mut StdRng,
) {
    let majority = hosts.len() / 2 + 1;
    if crashed.contains(&node) || hosts.len() - crashed.len() - 1 < majority {
        return;
    }
    sim.crash(name(node).as_str());
    world.borrow_mut().nodes.remove(&node);
    let host = &hosts[(node - 1) as usize];
    let survived = host.disk.borrow().crash(rng.random());
    *host.disk.borrow_mut() = survived;
    crashed.insert(node);
}

/// Whether every replica runs, agrees, and every cluster got the newest revision.
fn converged(world: &World, replicas: usize) -> Result<(), String> {
    if world.nodes.len() < replicas {
        return Err(format!(
            "{} of {replicas} replicas running",
            world.nodes.len()
        ));
    }
    let mut applied = BTreeSet::new();
    let mut leaders = BTreeSet::new();
    for node in world.nodes.values() {
        applied.insert(node.raft.reader().applied_index());
        leaders.insert(node.raft.current_leader().map(|(id, _)| id));
    }
    if applied.len() > 1 || leaders.len() > 1 {
        return Err(format!(
            "replicas differ: applied {applied:?}, leaders {leaders:?}"
        ));
    }
    let node = world.nodes.values().next().expect("a replica");
    node.raft.reader().read(|state| {
        if !state.tickets.is_empty() {
            return Err(format!("{} tickets still held", state.tickets.len()));
        }
        if state.clusters.contains_key(client::DELETED) {
            return Err(format!(
                "the deleted cluster {} is still retiring",
                client::DELETED
            ));
        }
        // Once a retire has finished, nothing of the retired Sync is left on its target.
        for cluster in world.writes.keys() {
            let synced = state.cluster_syncs.get(cluster).is_some_and(|syncs| {
                syncs
                    .iter()
                    .any(|sync| state.syncs.get(sync).is_some_and(|entry| !entry.retiring))
            });
            if !synced && world.holds_objects(cluster) {
                return Err(format!(
                    "cluster {cluster} holds the objects of a Sync that no longer targets it"
                ));
            }
        }
        if state.syncs.is_empty() {
            return Err("no syncs yet".into());
        }
        for (key, cluster) in &state.clusters {
            if cluster.owner.is_none() {
                return Err(format!("cluster {key} has no owner"));
            }
        }
        for (key, entry) in &state.syncs {
            let target = state
                .target_of(key)
                .ok_or("a sync has no revision to reach")?;
            let cluster = fleet::state::cluster_key_of(&entry.object);
            if world.revision_of(&cluster) != Some(target.revision.as_str()) {
                return Err(format!(
                    "cluster {cluster} is at {:?}, not {}",
                    world.revision_of(&cluster),
                    target.revision
                ));
            }
        }
        Ok(())
    })
}

/// The most syncs a cluster another installation fences may be refused in a run.
const MOST_REFUSALS: usize = 30;

/// After convergence: identical states, the state machine's invariants on each, and every
/// acknowledged write present.
fn final_checks(world: &World) -> Vec<String> {
    let mut violations = Vec::new();
    let mut digests = BTreeSet::new();
    for (id, node) in &world.nodes {
        node.raft.reader().read(|state| {
            if let Err(error) = state.check_invariants() {
                violations.push(format!("replica {id}: {error}"));
            }
            for cluster in &world.acked {
                if !state.clusters.contains_key(cluster) {
                    violations.push(format!(
                        "replica {id} lost the acknowledged cluster {cluster}"
                    ));
                }
            }
            digests.insert(serde_json::to_string(state).expect("the state encodes"));
        });
    }
    // A Sync stalled by another installation's fence is tried again with backoff, not in a
    // loop (tens of tries at most before it is adopted, across owners and failovers).
    for (cluster, refusals) in &world.refusals {
        if *refusals > MOST_REFUSALS {
            violations.push(format!(
                "{cluster}, fenced by another installation, was tried {refusals} times"
            ));
        }
    }
    if digests.len() > 1 {
        violations.push(format!(
            "replicas applied the same log into {} different states",
            digests.len()
        ));
    }
    violations
}

/// `SIM_WATCH=<sync key>` (`fleet/app-c002`): every change of that Sync and its cluster, as the
/// most advanced replica holds them, goes into the trace (for replaying one seed).
fn watch_sync(world: &Rc<RefCell<World>>, at: Duration) {
    // Read once: it is looked at every simulated step.
    static WATCHED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let Some(sync) = WATCHED.get_or_init(|| std::env::var("SIM_WATCH").ok()) else {
        return;
    };
    let sync = sync.clone();
    let mut world = world.borrow_mut();
    let Some(node) = world
        .nodes
        .values()
        .max_by_key(|n| n.raft.reader().applied_index())
    else {
        return;
    };
    let seen = node.raft.reader().read(|state| {
        let entry = state.syncs.get(&sync);
        let cluster = entry.map(|e| fleet::state::cluster_key_of(&e.object));
        let tickets: Vec<_> = state
            .tickets
            .values()
            .filter(|t| t.sync == sync)
            .map(|t| (t.id, t.kind, t.node, t.revision.clone()))
            .collect();
        let revoked: Vec<_> = state
            .revoked
            .values()
            .filter(|r| r.ticket.sync == sync)
            .map(|r| (r.ticket.id, r.ticket.kind))
            .collect();
        format!(
            "watch {sync}: exists {} retiring {:?} state {:?} inventory {:?} tickets {tickets:?} \
             revoked {revoked:?} cluster deleting {:?}",
            entry.is_some(),
            entry.map(|e| e.retiring),
            entry.map(|e| e.rollout.state),
            entry.and_then(|e| e.object.status.as_ref().map(|s| s.inventory.len())),
            cluster.and_then(|c| state.clusters.get(&c).map(|c| c.deleting.clone())),
        )
    });
    let last = world.trace.iter().rev().find(|l| l.contains("watch "));
    if !last.is_some_and(|l| l.ends_with(&seen)) {
        world.trace.push(format!("{at:?} {seen}"));
    }
}

//! A rollout at scale in the simulation (issue 36, part 4): tens of thousands of clusters on
//! several replicas, running the node's own code as the fault runs do (`harness.rs`), with no
//! fault. The simulated clock does not move while a replica computes, so the time a rollout
//! takes against its physical limit measures Starling's own scheduling (Raft commits, the
//! planners, admission, the workers' slots), not the machine the simulation runs on.
//!
//! The physical limit of a rollout of N clusters with a budget of B: `ceil(N / B)` waves, each
//! as long as one sync, `apply` (rendering and reaching the cluster) then `ready` (the objects
//! becoming ready). The replicas' slots are sized so that the budget bounds the rollout, not
//! the slots (`--max-waiting-syncs` at least twice the budget's share of a replica).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use starling_raft::{NodeId, RaftConfig};

use crate::client::{self, Script};
use crate::harness::{name, simulation, timing};
use crate::replica::{self, Host};
use crate::world::World;

/// What a scale run sets up.
#[derive(Clone, Debug)]
pub struct Scale {
    pub seed: u64,
    pub clusters: usize,
    pub replicas: usize,
    /// The SyncGroup's `maxUnavailable`, in clusters.
    pub max_unavailable: u32,
    pub apply: Duration,
    pub ready: Duration,
    /// Most simulated time the whole run may take.
    pub within: Duration,
}

/// What a scale run measured, in simulated time.
#[derive(Debug)]
pub struct ScaleReport {
    /// The client's moments: clusters set up, first revision resolved, first rollout
    /// complete, second revision resolved.
    pub marks: BTreeMap<&'static str, Duration>,
    /// From the second revision's resolution to every cluster updated, in the leader's state
    /// and on the targets.
    pub rollout: Option<Duration>,
    /// The physical limit of that rollout.
    pub limit: Duration,
    /// The most clusters in rollout at once, on the targets.
    pub most_in_rollout: usize,
    /// Clusters whose last write is not the second revision when the run ended.
    pub behind: usize,
    pub violations: Vec<String>,
    /// Wall-clock time the run took.
    pub real: Duration,
    /// The second rollout on the targets, every [`SAMPLE`] of simulated time from its
    /// revision's resolution: (seconds, clusters at the revision, clusters in rollout).
    pub samples: Vec<(f64, usize, usize)>,
    /// The replicas' plans during the second rollout (each a look at the state after a burst
    /// of applied entries) and the host time they took, all replicas together.
    pub plans: u64,
    pub planning: Duration,
}

impl ScaleReport {
    /// Host time per plan.
    pub fn per_plan(&self) -> Option<Duration> {
        (self.plans > 0).then(|| self.planning / self.plans as u32)
    }
}

/// The replicas' plan totals: host time and count.
fn plan_totals(world: &World) -> (Duration, u64) {
    world
        .nodes
        .values()
        .map(|node| node.metrics.plan_totals())
        .fold((Duration::ZERO, 0), |(time, count), (t, c)| {
            (time + t, count + c)
        })
}

/// How often a scale run samples the rollout for its chart, in simulated time.
const SAMPLE: Duration = Duration::from_millis(100);

impl ScaleReport {
    /// The physical limit over the rollout's time (1: at the limit).
    pub fn limit_ratio(&self) -> Option<f64> {
        self.rollout
            .map(|rollout| self.limit.as_secs_f64() / rollout.as_secs_f64())
    }

    /// The first rollout's time, from its revision's resolution.
    pub fn cold(&self) -> Option<Duration> {
        Some(*self.marks.get("first rollout")? - *self.marks.get("first revision")?)
    }
}

/// The physical limit of a rollout (see the module documentation).
pub fn physical_limit(scale: &Scale) -> Duration {
    let waves = scale
        .clusters
        .div_ceil(scale.max_unavailable.max(1) as usize) as u32;
    (scale.apply + scale.ready) * waves
}

/// Runs one scale run.
pub fn run(scale: &Scale) -> ScaleReport {
    let started = std::time::Instant::now();
    let mut rng = StdRng::seed_from_u64(scale.seed);
    let voters: Vec<NodeId> = (1..=scale.replicas as NodeId).collect();
    let tick = Duration::from_millis(2);
    let mut sim = simulation(scale.seed, tick, scale.within + Duration::from_secs(60));
    let world = Rc::new(RefCell::new(World::default()));
    world.borrow_mut().budget = Some(scale.max_unavailable);
    let root = tempfile::tempdir().expect("a temporary directory");
    starling_replica::testing::set_clock(replica::clock);
    let artifacts = root.path().join("artifacts");
    let revisions = Script {
        clusters: 0,
        max_unavailable: scale.max_unavailable,
        commits: 1,
        added_clusters: 0,
        every: Duration::ZERO,
    };
    client::store_artifacts(&artifacts, &revisions);
    let raft = RaftConfig::new(0, "", "").with_round_trip(Duration::from_millis(4));
    // Slots: every apply of a wave at once, and twice the budget's share of syncs under way.
    let share = (scale.max_unavailable as usize).div_ceil(scale.replicas);
    for &id in &voters {
        let timing = timing(&mut rng, &raft, |_| (scale.apply, scale.ready));
        let host = Rc::new(Host {
            apply_slots: share.clamp(16, 4096),
            sync_slots: (2 * share).clamp(512, 65_536),
            ..Host::new(
                id,
                voters.clone(),
                timing,
                root.path(),
                artifacts.clone(),
                world.clone(),
            )
        });
        sim.host(name(id), move || replica::run(host.clone()));
    }
    {
        let world = world.clone();
        let (clusters, budget) = (scale.clusters, scale.max_unavailable);
        sim.client("client", async move {
            client::run_scale(world, clusters, budget).await
        });
    }

    let second = client::revision(2);
    let mut violations = Vec::new();
    let mut rollout = None;
    let mut samples = Vec::new();
    let mut plans_before = None;
    let mut plans_after = (Duration::ZERO, 0);
    while sim.elapsed() < scale.within {
        if let Err(error) = sim.step() {
            violations.push(format!("the simulation failed: {error}"));
            break;
        }
        let mut world = world.borrow_mut();
        world.absorb();
        if !world.violations.is_empty() {
            break;
        }
        let Some(&resolved) = world.marks.get("second revision") else {
            continue;
        };
        let plans_now = plan_totals(&world);
        let before = *plans_before.get_or_insert(plans_now);
        plans_after = (plans_now.0 - before.0, plans_now.1 - before.1);
        let since = sim.elapsed() - resolved;
        if since >= SAMPLE * samples.len() as u32 {
            let at = scale.clusters - behind(&world, &second, scale.clusters);
            samples.push((since.as_secs_f64(), at, world.in_rollout_now()));
        }
        if client::rolled_out(&world, &second, scale.clusters)
            && behind(&world, &second, scale.clusters) == 0
        {
            rollout = Some(sim.elapsed() - resolved);
            break;
        }
    }
    if rollout.is_none() && violations.is_empty() {
        violations.push(format!(
            "the second rollout did not complete within {:?} of simulated time (marks: {:?})",
            scale.within,
            world.borrow().marks
        ));
    }
    let mut world = world.borrow_mut();
    violations.append(&mut world.violations);
    let report = ScaleReport {
        marks: world.marks.clone(),
        rollout,
        limit: physical_limit(scale),
        most_in_rollout: world.most_in_rollout,
        behind: behind(&world, &second, scale.clusters),
        violations,
        real: started.elapsed(),
        samples,
        plans: plans_after.1,
        planning: plans_after.0,
    };
    // The replicas' Raft nodes are dropped with their runtimes, inside the simulation.
    world.nodes.clear();
    drop(world);
    drop(sim);
    report
}

/// How many of the `clusters` simulated clusters did not last receive `revision`.
fn behind(world: &World, revision: &str, clusters: usize) -> usize {
    let at_revision = world
        .writes
        .keys()
        .filter(|cluster| world.revision_of(cluster) == Some(revision))
        .count();
    clusters.saturating_sub(at_revision)
}

/// The second rollout as a chart: clusters at the new revision and in rollout on the targets
/// over simulated time, against the physical limit's pace (a budget's wave every
/// `apply + ready`) and the budget.
pub fn chart(scale: &Scale, report: &ScaleReport) -> String {
    use chaos::chart::{Series, line_chart};

    let wave = (scale.apply + scale.ready).as_secs_f64();
    let waves = scale
        .clusters
        .div_ceil(scale.max_unavailable.max(1) as usize);
    let mut limit = vec![(0.0, 0.0)];
    for index in 1..=waves {
        let done = (index * scale.max_unavailable as usize).min(scale.clusters) as f64;
        limit.push((index as f64 * wave, limit[limit.len() - 1].1));
        limit.push((index as f64 * wave, done));
    }
    let end = report.samples.last().map_or(0.0, |s| s.0);
    let series = [
        Series {
            name: "updated (on the targets)",
            color: "#1f77b4",
            dashed: false,
            points: report.samples.iter().map(|s| (s.0, s.1 as f64)).collect(),
        },
        Series {
            name: "in rollout (on the targets)",
            color: "#ff7f0e",
            dashed: false,
            points: report.samples.iter().map(|s| (s.0, s.2 as f64)).collect(),
        },
        Series {
            name: "physical limit",
            color: "#2ca02c",
            dashed: true,
            points: limit,
        },
        Series {
            name: "budget",
            color: "#d62728",
            dashed: true,
            points: vec![
                (0.0, f64::from(scale.max_unavailable)),
                (end, f64::from(scale.max_unavailable)),
            ],
        },
    ];
    let title = format!(
        "A new revision to {} clusters on {} replicas in the simulation: {}",
        scale.clusters,
        scale.replicas,
        report
            .rollout
            .map_or("incomplete".into(), |d| format!("{:.2} s", d.as_secs_f64()))
    );
    line_chart(
        &title,
        "simulated seconds since the revision",
        "clusters",
        &series,
    )
}

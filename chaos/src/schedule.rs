//! Seeded fault schedules. A schedule is a list of timed faults drawn from one seed, so the same
//! seed gives the same schedule; which process "the leader" is gets resolved when the fault
//! fires. The generator keeps every schedule survivable: at most a minority of replicas is
//! unavailable at any moment, counting a settling time after each restart.

use std::fmt;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// What a schedule runs against.
#[derive(Clone, Debug, Serialize)]
pub struct Shape {
    /// Replicas (3 or 5).
    pub replicas: u64,
    /// Clusters at the start.
    pub clusters: usize,
    /// How long faults are injected.
    pub window: Duration,
    /// How many faults are drawn.
    pub faults: usize,
    /// The replicas' `--down-after`.
    pub down_after: Duration,
    /// Pull clusters besides `clusters`, each served by its own `starling agent`.
    pub pull: usize,
}

/// Which replica a node fault hits, resolved when it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Target {
    /// The current Raft leader.
    Leader,
    /// A running follower, the `n`-th modulo the followers.
    Follower(u8),
}

/// A fault on some target clusters.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum TargetFault {
    Latency { ms: u64 },
    Errors { rate: f64, code: u16 },
    Hang { rate: f64 },
    Down,
}

/// One fault or disturbance.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Fault {
    /// `kill -9`, then a restart from the same data directory.
    Kill { target: Target, down_for: Duration },
    /// `kill -9`, the data directory deleted, a restart (a replacement pod with a new disk).
    Wipe { target: Target, down_for: Duration },
    /// SIGSTOP for longer than `--down-after`, then SIGCONT: the zombie owner.
    Stop {
        target: Target,
        stopped_for: Duration,
    },
    /// Two replicas killed one after the other; with 3 replicas the first is back before the
    /// second goes.
    KillTwo {
        first: Target,
        second: Target,
        down_for: Duration,
    },
    /// Target-cluster faults on a few clusters (indices into the initial fleet).
    Clusters {
        clusters: Vec<usize>,
        fault: TargetFault,
        duration: Duration,
    },
    /// The git host down.
    GitDown { duration: Duration },
    /// A new commit of the app.
    Commit,
    /// The SyncGroup edited: a new greeting variable and budget (percent of the fleet).
    EditGroup {
        greeting: String,
        budget_percent: u32,
    },
    /// `rollout pause`, then `rollout resume`.
    Pause { duration: Duration },
    /// A new cluster joins the fleet.
    AddCluster,
    /// A cluster of the initial fleet leaves it.
    RemoveCluster { cluster: usize },
    /// The agent of a pull cluster (an index into the pull clusters) killed, then started
    /// again.
    KillAgent { agent: usize, down_for: Duration },
    /// `starling recover` on the running fleet: refused with nothing pending, and never
    /// a frozen fleet.
    RecoverAgain,
    /// Every replica and its disk lost at once. From a backup taken just before: fresh
    /// replicas with `--recovery`, `starling import`, `starling recover`, while one push
    /// cluster is down and one agent is killed (an index into each); both come back
    /// `pending_for` after the recovery, and are read back then.
    Disaster {
        down: usize,
        away: usize,
        pending_for: Duration,
    },
    /// A cluster of the initial fleet relabelled out of the SyncGroup's selector (its objects
    /// are pruned through the budget), then back in after `out_for`.
    Deselect { cluster: usize, out_for: Duration },
    /// A second installation (one replica) pointed at a few clusters the first holds, for the
    /// rest of the schedule: it must never write to them.
    Shadow { clusters: Vec<usize> },
}

impl Fault {
    /// Replicas this fault makes unavailable at once, and for how long (with settling time).
    fn node_load(&self, replicas: u64) -> Option<(u64, Duration)> {
        let settle = Duration::from_secs(3);
        match self {
            Fault::Kill { down_for, .. } => Some((1, *down_for + settle)),
            Fault::Wipe { down_for, .. } => Some((1, *down_for + settle * 2)),
            Fault::Stop { stopped_for, .. } => Some((1, *stopped_for + settle)),
            Fault::KillTwo { down_for, .. } if replicas >= 5 => Some((2, *down_for * 2 + settle)),
            Fault::KillTwo { down_for, .. } => Some((1, *down_for * 2 + settle * 2)),
            _ => None,
        }
    }
}

/// A fault at an offset from the start of the fault window.
#[derive(Clone, Debug, Serialize)]
pub struct Step {
    pub at: Duration,
    pub fault: Fault,
}

/// A seeded schedule.
#[derive(Clone, Debug, Serialize)]
pub struct Schedule {
    pub seed: u64,
    pub shape: Shape,
    pub steps: Vec<Step>,
    /// Push clusters (indices into the initial fleet) down from before the fault window to
    /// its end: unreachable for every rollout of the window.
    pub down_throughout: Vec<usize>,
    /// Pull clusters (indices into the pull clusters) whose agent is away for the whole
    /// window.
    pub away_throughout: Vec<usize>,
}

const GREETINGS: [&str; 5] = ["hello", "hola", "salut", "ciao", "hallo"];

fn millis(rng: &mut StdRng, low: u64, high: u64) -> Duration {
    Duration::from_millis(rng.random_range(low..=high))
}

fn target(rng: &mut StdRng) -> Target {
    if rng.random_bool(0.4) {
        Target::Leader
    } else {
        Target::Follower(rng.random_range(0..4))
    }
}

impl Schedule {
    /// The schedule of `seed`: always one commit, then `faults` draws of every kind.
    pub fn generate(seed: u64, shape: Shape) -> Schedule {
        let mut rng = StdRng::seed_from_u64(seed);
        let window = shape.window.as_millis() as u64;
        let minority = (shape.replicas - 1) / 2;
        let mut node_busy: Vec<(Duration, Duration, u64)> = Vec::new();
        let mut removed = Vec::new();
        let mut steps = vec![Step {
            at: millis(&mut rng, 0, window / 2),
            fault: Fault::Commit,
        }];
        for _ in 0..shape.faults {
            let at = millis(&mut rng, 0, window);
            let fault = match rng.random_range(0..110) {
                0..=14 => Fault::Kill {
                    target: target(&mut rng),
                    down_for: millis(&mut rng, 200, 4_000),
                },
                15..=21 => Fault::Wipe {
                    target: target(&mut rng),
                    down_for: millis(&mut rng, 200, 2_000),
                },
                22..=31 => Fault::Stop {
                    target: target(&mut rng),
                    stopped_for: shape.down_after + millis(&mut rng, 500, 3_000),
                },
                32..=37 => Fault::KillTwo {
                    first: target(&mut rng),
                    second: target(&mut rng),
                    down_for: millis(&mut rng, 300, 2_500),
                },
                38..=55 => {
                    let count = rng.random_range(1..=5.min(shape.clusters));
                    let clusters = (0..count)
                        .map(|_| rng.random_range(0..shape.clusters))
                        .collect();
                    let fault = match rng.random_range(0..4) {
                        0 => TargetFault::Latency {
                            ms: rng.random_range(200..=2_500),
                        },
                        1 => TargetFault::Errors {
                            rate: rng.random_range(3..=10) as f64 / 10.0,
                            code: [500, 503, 429][rng.random_range(0..3)],
                        },
                        2 => TargetFault::Hang {
                            rate: rng.random_range(2..=10) as f64 / 10.0,
                        },
                        _ => TargetFault::Down,
                    };
                    Fault::Clusters {
                        clusters,
                        fault,
                        duration: millis(&mut rng, 1_000, 6_000),
                    }
                }
                56..=62 => Fault::GitDown {
                    duration: millis(&mut rng, 1_000, 5_000),
                },
                63..=71 => Fault::Commit,
                72..=79 => Fault::EditGroup {
                    greeting: GREETINGS[rng.random_range(0..GREETINGS.len())].to_string(),
                    budget_percent: [5, 10, 20][rng.random_range(0..3)],
                },
                80..=87 => Fault::Pause {
                    duration: millis(&mut rng, 500, 4_000),
                },
                88..=93 => Fault::AddCluster,
                100..=104 if shape.pull > 0 => Fault::KillAgent {
                    agent: rng.random_range(0..shape.pull),
                    down_for: millis(&mut rng, 500, 5_000),
                },
                100..=104 => continue,
                105..=109 => Fault::RecoverAgain,
                _ => {
                    let cluster = rng.random_range(0..shape.clusters);
                    if removed.contains(&cluster) {
                        continue;
                    }
                    removed.push(cluster);
                    Fault::RemoveCluster { cluster }
                }
            };
            if let Some((load, length)) = fault.node_load(shape.replicas) {
                // Move the fault after the busy spans until it fits beside the others.
                let mut start = at;
                loop {
                    let end = start + length;
                    let overlapping: Vec<_> = node_busy
                        .iter()
                        .filter(|(s, e, _)| *s < end && start < *e)
                        .collect();
                    let used: u64 = overlapping.iter().map(|(_, _, l)| l).sum();
                    if used + load <= minority {
                        break;
                    }
                    start = overlapping.iter().map(|(_, e, _)| *e).min().unwrap_or(end);
                }
                if start > shape.window {
                    continue;
                }
                node_busy.push((start, start + length, load));
                steps.push(Step { at: start, fault });
            } else {
                steps.push(Step { at, fault });
            }
        }
        steps.sort_by_key(|s| s.at);
        // Every other schedule keeps one or two push clusters down throughout, and one agent
        // away throughout when there are pull clusters.
        let mut down_throughout = Vec::new();
        if rng.random_bool(0.5) {
            for _ in 0..rng.random_range(1..=2) {
                let cluster = rng.random_range(0..shape.clusters);
                if !down_throughout.contains(&cluster) && !removed.contains(&cluster) {
                    down_throughout.push(cluster);
                }
            }
        }
        let away_throughout = if shape.pull > 0 && rng.random_bool(0.5) {
            vec![rng.random_range(0..shape.pull)]
        } else {
            Vec::new()
        };
        // One schedule in four loses every replica in the middle of its window.
        if rng.random_bool(0.25) {
            let at = shape.window / 3 + millis(&mut rng, 0, window / 3);
            steps.push(Step {
                at,
                fault: Fault::Disaster {
                    down: rng.random_range(0..shape.clusters),
                    away: rng.random_range(0..shape.pull.max(1)),
                    pending_for: millis(&mut rng, 1_000, 5_000),
                },
            });
            steps.sort_by_key(|s| s.at);
        }
        // Drawn after every other fault, so that each seed's earlier faults stay as they were.
        if rng.random_bool(0.3) {
            let cluster = rng.random_range(0..shape.clusters);
            if !removed.contains(&cluster) && !down_throughout.contains(&cluster) {
                steps.push(Step {
                    at: millis(&mut rng, 0, window * 2 / 3),
                    fault: Fault::Deselect {
                        cluster,
                        out_for: millis(&mut rng, 1_000, 5_000),
                    },
                });
            }
        }
        if rng.random_bool(0.25) {
            let clusters = (0..2)
                .map(|_| rng.random_range(0..shape.clusters))
                .collect();
            steps.push(Step {
                at: millis(&mut rng, window / 4, window / 2),
                fault: Fault::Shadow { clusters },
            });
        }
        steps.sort_by_key(|s| s.at);
        Schedule {
            seed,
            shape,
            steps,
            down_throughout,
            away_throughout,
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seed {}: {} replicas, {} clusters and {} pull clusters, {:?} window",
            self.seed, self.shape.replicas, self.shape.clusters, self.shape.pull, self.shape.window
        )?;
        if !self.down_throughout.is_empty() {
            writeln!(f, "  down throughout: clusters {:?}", self.down_throughout)?;
        }
        if !self.away_throughout.is_empty() {
            writeln!(f, "  away throughout: agents {:?}", self.away_throughout)?;
        }
        for step in &self.steps {
            writeln!(f, "  +{:>6.2}s {:?}", step.at.as_secs_f64(), step.fault)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(replicas: u64) -> Shape {
        Shape {
            replicas,
            clusters: 60,
            window: Duration::from_secs(20),
            faults: 30,
            down_after: Duration::from_secs(3),
            pull: 4,
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        let a = Schedule::generate(7, shape(3)).to_string();
        let b = Schedule::generate(7, shape(3)).to_string();
        let c = Schedule::generate(8, shape(3)).to_string();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn never_a_majority_of_replicas_is_faulted_at_once() {
        for replicas in [3, 5] {
            for seed in 0..200 {
                let schedule = Schedule::generate(seed, shape(replicas));
                let spans: Vec<_> = schedule
                    .steps
                    .iter()
                    .filter_map(|s| {
                        let (load, length) = s.fault.node_load(replicas)?;
                        Some((s.at, s.at + length, load))
                    })
                    .collect();
                for (start, _, _) in &spans {
                    let used: u64 = spans
                        .iter()
                        .filter(|(s, e, _)| s <= start && start < e)
                        .map(|(_, _, l)| l)
                        .sum();
                    assert!(used <= (replicas - 1) / 2, "seed {seed}: {schedule}");
                }
                assert!(
                    schedule.steps.iter().any(|s| s.fault == Fault::Commit),
                    "seed {seed} has a commit"
                );
            }
        }
    }
}

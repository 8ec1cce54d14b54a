//! Property tests of the fleet state machine over random command sequences: specs, membership
//! changes, grants, finishes, new revisions, pauses. After every command they check the
//! invariants of design section 5 that the state machine alone can break:
//! - never a grant to a non-owner or at a stale generation (checked on every ticket),
//! - never more than `maxUnavailable` unavailable per group because of an admission,
//! - never an applied revision going backwards,
//! - every cluster owned by exactly one live node while any node is live,
//!
//! and that replaying the same commands (from a snapshot or from scratch) gives the same state.

use std::collections::BTreeMap;

use fleet::manifest::{Kind, ObjectKey, Resource, parse_manifests};
use fleet::resources::ResourceStatus;
use fleet::state::{Key, MemberState, RecoveredSync, SyncKind, SyncOutcome};
use fleet::{Command, FleetState, Outcome};
use proptest::prelude::*;

const AT: &str = "2026-01-01T00:00:00Z";

fn manifest(yaml: &str) -> Resource {
    parse_manifests(yaml)
        .expect("generated manifest parses")
        .remove(0)
}

fn cluster(index: u8, tier: u8, paused: bool) -> Command {
    // c6 and c7 are pull clusters, which agents register and claim.
    let mode = if index >= 6 { "pull" } else { "push" };
    Command::UpsertSpec {
        resource: Box::new(manifest(&format!(
            "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: c{index}\n  namespace: fleet\n  labels:\n    tier: t{tier}\nspec:\n  paused: {paused}\n  mode: {mode}\n"
        ))),
        at: AT.into(),
    }
}

fn group(index: u8, budget: u8, max_failures: u8, canary: bool) -> Command {
    let mut partitions = if canary {
        "    partitions:\n      - matchLabels:\n          tier: t0\n".to_string()
    } else {
        String::new()
    };
    // Group 2 counts unreachable clusters against its budget; group 1 skips them. Group 2's
    // values come from a file of Source `config`.
    let mut values = "";
    if index == 2 {
        partitions.push_str("    unreachable: Count\n");
        values = "    render:\n      helm:\n        valuesFrom:\n          - {kind: Source, name: config, path: envs/values.yaml}\n";
    }
    Command::UpsertSpec {
        resource: Box::new(manifest(&format!(
            "apiVersion: starling.dev/v1alpha1\nkind: SyncGroup\nmetadata:\n  name: g{index}\n  namespace: fleet\nspec:\n  sourceRef:\n    name: repo\n  clusterSelector:\n    matchExpressions:\n      - key: tier\n        operator: In\n        values: [t0, t{index}]\n  template:\n    path: apps\n{values}  rollout:\n    maxUnavailable: {budget}\n    maxFailures: {max_failures}\n{partitions}"
        ))),
        at: AT.into(),
    }
}

fn source(name: &str) -> Command {
    Command::UpsertSpec {
        resource: Box::new(manifest(&format!(
            "apiVersion: starling.dev/v1alpha1\nkind: Source\nmetadata:\n  name: {name}\n  namespace: fleet\nspec:\n  git:\n    url: https://git.example/{name}.git\n    ref:\n      branch: main\n",
        ))),
        at: AT.into(),
    }
}

/// An abstract step, turned into a concrete command against the current state (so grants can
/// target real Syncs and owners most of the time).
#[derive(Clone, Debug)]
enum Step {
    AddMember(u8),
    MemberState(u8, u8),
    UpsertCluster(u8, u8, bool),
    DeleteCluster(u8),
    UpsertGroup(u8, u8, u8, bool),
    Resolve(u8),
    /// Begin a sync: which actionable/any sync, and whether to use the true owner.
    Begin(u8, bool, bool),
    Finish(u8, bool, u8),
    Health(u8, bool),
    Pause(u8, bool),
    /// The leader revokes a held ticket (no worker runs it).
    Revoke(u8),
    /// The leader releases a revoked ticket (its holder's lease ran out).
    Release(u8),
    /// `starling cluster hold|release`.
    Hold(u8, bool),
    /// `starling rollout undo` to a revision of the group's history, or `unpin`.
    Pin(u8, u8, bool),
    /// Disaster recovery turned on or off.
    Recovery(bool),
    /// `starling recover` reads a target back: what its Syncs' statuses say, behind a fence.
    Recover(u8, u8),
    /// A cluster's owner reports whether it answers.
    Reach(u8, bool),
    /// The leader's progress check, this many minutes after the start.
    Progress(u8),
    /// `starling recover` ends, the clusters of this bit mask not read back.
    FinishRecovery(u8),
    /// Deleted with prune: a Cluster (0) or a SyncGroup (1).
    Retire(u8, u8),
    /// The deletion timeout passed: pruning given up for a Cluster (0), a Sync (1) or a
    /// SyncGroup (2).
    Abandon(u8, u8),
    /// `starling apply` of a Cluster (0) or a SyncGroup (1) manifest that says nothing of the
    /// hold or the pin, interleaved with `Hold` and `Pin`: both are kept.
    Apply(u8, u8, u8),
    /// Agent `token a|b|c` registers pull cluster c6..c9 with one of a few label sets, in
    /// standalone mode (it may create) or operator mode (the cluster must name it).
    Register(u8, u8, u8, bool),
    /// Agent token a|b|c is created (true) or revoked (false).
    AgentToken(u8, bool),
    /// The leader's deletion-timeout check, this many minutes after the start, with a
    /// timeout of this many minutes.
    AbandonOverdue(u8, u8),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        1 => (1u8..=4).prop_map(Step::AddMember),
        2 => (1u8..=4, 0u8..3).prop_map(|(n, s)| Step::MemberState(n, s)),
        2 => (0u8..8, 0u8..3, proptest::bool::weighted(0.1)).prop_map(|(c, t, p)| Step::UpsertCluster(c, t, p)),
        1 => (0u8..8).prop_map(Step::DeleteCluster),
        1 => (1u8..=2, 1u8..=3, 0u8..3, any::<bool>()).prop_map(|(g, b, f, c)| Step::UpsertGroup(g, b, f, c)),
        2 => (0u8..4).prop_map(Step::Resolve),
        8 => (any::<u8>(), proptest::bool::weighted(0.9), proptest::bool::weighted(0.8)).prop_map(|(i, o, a)| Step::Begin(i, o, a)),
        6 => (any::<u8>(), proptest::bool::weighted(0.8), 0u8..4).prop_map(|(i, ok, h)| Step::Finish(i, ok, h)),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(i, ready)| Step::Health(i, ready)),
        1 => (1u8..=2, any::<bool>()).prop_map(|(g, p)| Step::Pause(g, p)),
        1 => any::<u8>().prop_map(Step::Revoke),
        2 => any::<u8>().prop_map(Step::Release),
        1 => (0u8..8, any::<bool>()).prop_map(|(c, h)| Step::Hold(c, h)),
        1 => (1u8..=2, any::<u8>(), proptest::bool::weighted(0.3)).prop_map(|(g, r, u)| Step::Pin(g, r, u)),
        1 => any::<bool>().prop_map(Step::Recovery),
        1 => (0u8..8, 0u8..4).prop_map(|(c, f)| Step::Recover(c, f)),
        2 => (0u8..8, any::<bool>()).prop_map(|(c, r)| Step::Reach(c, r)),
        1 => (0u8..60).prop_map(Step::Progress),
        1 => any::<u8>().prop_map(Step::FinishRecovery),
        1 => (0u8..2, any::<u8>()).prop_map(|(k, i)| Step::Retire(k, i)),
        1 => (0u8..3, any::<u8>()).prop_map(|(k, i)| Step::Abandon(k, i)),
        2 => (0u8..2, any::<u8>(), 0u8..3).prop_map(|(k, i, t)| Step::Apply(k, i, t)),
        3 => (0u8..3, 6u8..10, 0u8..3, proptest::bool::weighted(0.8)).prop_map(|(a, c, l, s)| Step::Register(a, c, l, s)),
        1 => (0u8..3, proptest::bool::weighted(0.7)).prop_map(|(a, c)| Step::AgentToken(a, c)),
        1 => (0u8..60, 0u8..30).prop_map(|(m, t)| Step::AbandonOverdue(m, t)),
    ]
}

fn agent_id(agent: u8) -> String {
    ["a", "b", "c"][usize::from(agent % 3)].to_string()
}

fn agent_name(agent: u8) -> String {
    format!("token {}", agent_id(agent))
}

/// What a registration must keep: the cluster's claim holder (when its token is valid), its
/// hold, its generation, and the labels its agent does not own.
#[derive(Debug)]
struct BeforeRegister {
    holder: Option<String>,
    hold: bool,
    generation: Option<i64>,
    user_labels: BTreeMap<String, String>,
}

fn before_register(state: &FleetState, cluster: &str) -> Option<BeforeRegister> {
    let entry = state.clusters.get(cluster)?;
    let object = entry.cluster();
    let owned: Vec<String> = object
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(fleet::state::AGENT_LABELS_ANNOTATION))
        .map(|keys| keys.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    Some(BeforeRegister {
        holder: state.pull_claim(cluster).map(str::to_string),
        hold: object.spec.hold,
        generation: object.metadata.generation,
        user_labels: object
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|(key, _)| !owned.contains(key))
            .collect(),
    })
}

/// When each pruning object began pruning, before a command: deleted Clusters and retiring
/// Syncs (by key), and retiring SyncGroups by their earliest retiring member.
fn pruning_since(state: &FleetState) -> BTreeMap<ObjectKey, Option<i64>> {
    let seconds = |at: Option<&str>| at.and_then(fleet::duration::unix_seconds);
    let key = |kind, key: &str| {
        let (namespace, name) = key.split_once('/').unwrap_or(("fleet", key));
        ObjectKey::new(kind, namespace, name)
    };
    let mut since = BTreeMap::new();
    for cluster in &state.deleting_clusters {
        let at = state
            .clusters
            .get(cluster)
            .and_then(|c| c.deleting.as_deref());
        since.insert(key(Kind::Cluster, cluster), seconds(at));
    }
    for sync in &state.retiring {
        let Some(entry) = state.syncs.get(sync) else {
            continue;
        };
        let at = seconds(entry.retiring_since.as_deref());
        let object = match &entry.group {
            Some(group) => key(Kind::SyncGroup, group),
            None => key(Kind::Sync, sync),
        };
        let earliest = since.entry(object).or_insert(at);
        if let (Some(at), Some(current)) = (at, *earliest) {
            *earliest = Some(at.min(current));
        }
    }
    since
}

fn pick<T: Clone>(items: &[T], index: u8) -> Option<T> {
    if items.is_empty() {
        None
    } else {
        Some(items[index as usize % items.len()].clone())
    }
}

fn concretise(state: &FleetState, step: &Step, revisions: &mut u32) -> Command {
    match *step {
        Step::AddMember(id) => Command::AddMember {
            id: id as u64,
            address: format!("127.0.0.1:{}", 7000 + id as u32),
            at: AT.into(),
        },
        Step::MemberState(id, s) => Command::SetMemberState {
            id: id as u64,
            state: [MemberState::Live, MemberState::Down, MemberState::Draining][s as usize],
            at: AT.into(),
        },
        Step::UpsertCluster(c, t, p) => cluster(c, t, p),
        Step::DeleteCluster(c) => Command::DeleteSpec {
            key: ObjectKey {
                kind: Kind::Cluster,
                namespace: "fleet".into(),
                name: format!("c{c}"),
            },
        },
        Step::UpsertGroup(g, b, f, canary) => group(g, b, f, canary),
        Step::Resolve(r) => {
            // Mostly new revisions; sometimes the current one again.
            if r > 0 {
                *revisions += 1;
            }
            // 3: the values Source, whose file changes every other revision (the others are
            // carried forward).
            let (source, inputs) = if r == 3 {
                let file = (
                    "envs/values.yaml".to_string(),
                    format!("sha256:v{}", *revisions / 2),
                );
                ("fleet/config", BTreeMap::from([file]))
            } else {
                ("fleet/repo", BTreeMap::new())
            };
            Command::SourceResolved {
                source: source.into(),
                revision: format!("main@sha1:{:04}", *revisions),
                artifact: Some(fleet::resources::ArtifactRef {
                    digest: format!("sha256:{:04}", *revisions),
                    size: 1,
                }),
                expected: fleet::ExpectedRevision::Any,
                inputs,
                at: AT.into(),
            }
        }
        Step::Begin(index, true_owner, actionable) => {
            let candidates: Vec<Key> = if actionable {
                state
                    .actionable
                    .iter()
                    .chain(&state.retiring)
                    .cloned()
                    .collect()
            } else {
                state.syncs.keys().cloned().collect()
            };
            let Some(sync) = pick(&candidates, index) else {
                return Command::Batch(vec![]);
            };
            let cluster = format!("fleet/{}", state.syncs[&sync].object.spec.cluster_ref.name);
            let (node, generation) = state.cluster_owner(&cluster).unwrap_or((1, 1));
            let (node, generation) = if true_owner {
                (node, generation)
            } else {
                (node % 4 + 1, generation.saturating_sub(index as u64 % 2))
            };
            let revision = state
                .target_of(&sync)
                .map(|t| t.revision)
                .unwrap_or_else(|| "main@sha1:none".into());
            Command::BeginSync {
                sync,
                node,
                generation,
                revision,
                spec_generation: None,
            }
        }
        Step::Finish(index, ok, health) => {
            // Results also arrive for revoked tickets (their holders stop and report).
            let tickets: Vec<u64> = state
                .tickets
                .keys()
                .chain(state.revoked.keys())
                .copied()
                .collect();
            let ticket = pick(&tickets, index).unwrap_or(u64::MAX);
            let outcome = if ok {
                let health = [
                    ResourceStatus::Current,
                    ResourceStatus::Current,
                    ResourceStatus::InProgress,
                    ResourceStatus::Failed,
                ][health as usize];
                // Mostly something applied, so that there is something to prune.
                let inventory = if health == ResourceStatus::Failed {
                    vec![]
                } else {
                    vec![fleet::resources::ObjectRef {
                        api_version: "v1".into(),
                        kind: "ConfigMap".into(),
                        namespace: Some("app".into()),
                        name: "app".into(),
                    }]
                };
                SyncOutcome::Succeeded {
                    inventory,
                    health,
                    drift: None,
                }
            } else {
                // Unreachable before any write, unreachable after writing, a timeout, or the
                // source side (the artifact could not be had: nothing was written).
                let (class, inventory) = match health {
                    0 => ("unreachable", None),
                    1 => ("unreachable", Some(vec![])),
                    2 => ("timeout", Some(vec![])),
                    _ => (fleet::state::SOURCE_UNAVAILABLE_CLASS, None),
                };
                SyncOutcome::Failed {
                    class: class.into(),
                    message: "down".into(),
                    inventory,
                }
            };
            Command::FinishSync {
                ticket,
                outcome,
                at: AT.into(),
            }
        }
        Step::Health(index, ready) => {
            let syncs: Vec<Key> = state.syncs.keys().cloned().collect();
            let Some(sync) = pick(&syncs, index) else {
                return Command::Batch(vec![]);
            };
            let cluster = format!("fleet/{}", state.syncs[&sync].object.spec.cluster_ref.name);
            let (node, generation) = state.cluster_owner(&cluster).unwrap_or((1, 1));
            let health = if ready {
                ResourceStatus::Current
            } else {
                ResourceStatus::InProgress
            };
            Command::ReportHealth {
                sync,
                node,
                generation,
                health,
            }
        }
        Step::Pause(g, true) => Command::PauseRollout {
            group: format!("fleet/g{g}"),
        },
        Step::Pause(g, false) => Command::ResumeRollout {
            group: format!("fleet/g{g}"),
        },
        Step::Revoke(index) => {
            let tickets: Vec<u64> = state.tickets.keys().copied().collect();
            Command::RevokeTickets {
                tickets: pick(&tickets, index).into_iter().collect(),
            }
        }
        Step::Release(index) => {
            let revoked: Vec<u64> = state.revoked.keys().copied().collect();
            Command::ReleaseTickets {
                tickets: pick(&revoked, index).into_iter().collect(),
            }
        }
        Step::Apply(kind, index, tier) => {
            let upsert = if kind == 0 {
                cluster(index % 8, tier, false)
            } else {
                group(index % 2 + 1, 1, 3, false)
            };
            match upsert {
                Command::UpsertSpec { resource, at } => Command::ApplySpec {
                    resource,
                    at,
                    quota: None,
                },
                other => other,
            }
        }
        Step::Hold(c, hold) => Command::HoldCluster {
            cluster: format!("fleet/c{c}"),
            hold,
            at: AT.into(),
        },
        Step::Pin(g, index, unpin) => {
            let group = format!("fleet/g{g}");
            let revisions: Vec<String> = state
                .groups
                .get(&group)
                .map(|entry| entry.history.iter().map(|r| r.revision.clone()).collect())
                .unwrap_or_default();
            Command::PinRollout {
                group,
                revision: if unpin { None } else { pick(&revisions, index) },
                at: AT.into(),
            }
        }
        Step::Recovery(active) => Command::SetRecovery { active },
        Step::Reach(c, reachable) => {
            let cluster = format!("fleet/c{c}");
            let (node, generation) = state.cluster_owner(&cluster).unwrap_or((1, 1));
            Command::ReportReachability {
                cluster,
                node,
                generation,
                reachable,
                at: AT.into(),
            }
        }
        Step::FinishRecovery(mask) => Command::FinishRecovery {
            pending: (0..8u8)
                .filter(|bit| mask & (1 << bit) != 0)
                .map(|c| format!("fleet/c{c}"))
                .collect(),
        },
        Step::Retire(kind, index) => Command::RetireSpec {
            key: ObjectKey {
                kind: if kind == 0 {
                    Kind::Cluster
                } else {
                    Kind::SyncGroup
                },
                namespace: "fleet".into(),
                name: if kind == 0 {
                    format!("c{}", index % 8)
                } else {
                    format!("g{}", index % 2 + 1)
                },
            },
        },
        Step::Abandon(kind, index) => {
            let (kind, name) = match kind {
                0 => (Kind::Cluster, format!("c{}", index % 8)),
                1 => {
                    let retiring: Vec<Key> = state.retiring.iter().cloned().collect();
                    let Some(sync) = pick(&retiring, index) else {
                        return Command::Batch(vec![]);
                    };
                    let name = sync
                        .split_once('/')
                        .map_or(sync.clone(), |(_, n)| n.to_string());
                    (Kind::Sync, name)
                }
                _ => (Kind::SyncGroup, format!("g{}", index % 2 + 1)),
            };
            Command::AbandonPrune {
                key: ObjectKey {
                    kind,
                    namespace: "fleet".into(),
                    name,
                },
                at: AT.into(),
            }
        }
        Step::Register(agent, cluster, labels, standalone) => {
            let labels: BTreeMap<String, String> = match labels {
                0 => BTreeMap::new(),
                1 => [("site".to_string(), format!("s{agent}"))].into(),
                // `tier` is the user's on clusters made from manifests: never taken.
                _ => [
                    ("site".to_string(), "edge".to_string()),
                    ("tier".to_string(), format!("agent{agent}")),
                ]
                .into(),
            };
            Command::RegisterPullCluster {
                cluster: format!("fleet/c{cluster}"),
                agent: agent_name(agent),
                labels,
                policy: fleet::state::RegisterPolicy {
                    may_create: standalone,
                    must_be_named: !standalone,
                },
                at: AT.into(),
            }
        }
        Step::AgentToken(agent, true) => Command::CreateToken {
            id: agent_id(agent),
            entry: fleet::state::TokenEntry {
                digest: String::new(),
                role: fleet::state::Role::Agent,
                tenants: vec!["fleet".into()],
                description: String::new(),
                created: String::new(),
                expires: None,
                last_used: None,
            },
        },
        Step::AgentToken(agent, false) => Command::RevokeToken {
            id: agent_id(agent),
        },
        Step::AbandonOverdue(minutes, timeout) => Command::AbandonOverduePrunes {
            at: format!("2026-01-01T00:{minutes:02}:00Z"),
            timeout_seconds: u64::from(timeout) * 60,
        },
        Step::Progress(minutes) => Command::CheckProgress {
            at: format!("2026-01-01T00:{minutes:02}:00Z"),
        },
        Step::Recover(c, fence) => {
            let cluster = format!("fleet/c{c}");
            let owner_generation = state
                .clusters
                .get(&cluster)
                .map_or(0, |c| c.owner_generation);
            let syncs = state
                .cluster_syncs
                .get(&cluster)
                .into_iter()
                .flatten()
                .map(|sync| {
                    let status = state.syncs[sync].object.status.clone().unwrap_or_default();
                    RecoveredSync {
                        sync: sync.clone(),
                        inventory: status.inventory.to_vec(),
                        revision: status.last_applied_revision.as_deref().map(String::from),
                        digest: state.render_digest(sync),
                        health: ResourceStatus::Current,
                    }
                })
                .collect();
            Command::RecoverCluster {
                cluster,
                fence: owner_generation + u64::from(fence),
                syncs,
                at: AT.into(),
            }
        }
    }
}

/// Whether a command can legitimately make a group less available without any admission:
/// readiness dropping, a drift re-apply failing, or a cluster that comes back unhealthy (a
/// paused one resumed, a held one released, a RecoveryPending one read back holding objects
/// that are not ready).
fn may_degrade(state: &FleetState, command: &Command) -> bool {
    match command {
        Command::ReportHealth { .. } => true,
        Command::HoldCluster { hold: false, .. } => true,
        Command::RecoverCluster { .. } => !state.recovering,
        // Unpausing a cluster, or lifting its hold by replacing its spec (as `HoldCluster`
        // with `hold: false` does): an unready cluster that stood aside counts again. Nothing
        // was admitted; the budget admits no one else until it is back within.
        Command::UpsertSpec { resource, .. } | Command::ApplySpec { resource, .. } => {
            match resource.as_ref() {
                Resource::Cluster(cluster) => state
                    .clusters
                    .get(&format!(
                        "fleet/{}",
                        cluster.metadata.name.as_deref().unwrap_or_default()
                    ))
                    .is_some_and(|c| {
                        c.object().spec.paused || (c.object().spec.hold && !cluster.spec.hold)
                    }),
                _ => false,
            }
        }
        Command::FinishSync { ticket, .. } => state
            .tickets
            .get(ticket)
            .is_some_and(|t| t.kind == SyncKind::Drift),
        _ => false,
    }
}

fn budgets(state: &FleetState) -> BTreeMap<String, (u32, u32)> {
    state
        .groups
        .keys()
        .filter_map(|g| Some((g.clone(), state.group_budget(g)?)))
        .collect()
}

/// Per live group: the Syncs that left it and prune now, and its budget for them.
fn retire_budgets(state: &FleetState) -> BTreeMap<String, (usize, u32)> {
    state
        .groups
        .iter()
        .filter(|(_, g)| !g.retiring && !g.retiring_members.is_empty())
        .map(|(key, g)| {
            let total = g.members.len() + g.retire_queue.len() + g.retiring_members.len();
            let budget = fleet::validate::max_unavailable(&g.object.spec.rollout, total as u32);
            (key.clone(), (g.retiring_members.len(), budget))
        })
        .collect()
}

fn applied_seqs(state: &FleetState) -> BTreeMap<Key, u64> {
    state
        .syncs
        .iter()
        .filter_map(|(k, s)| Some((k.clone(), s.rollout.applied?.0)))
        .collect()
}

fn run(steps: &[Step]) -> Result<(Vec<Command>, FleetState), TestCaseError> {
    let mut state = FleetState::default();
    state.apply(source("repo"));
    state.apply(source("config"));
    let mut revisions = 0;
    let mut commands = Vec::new();
    for step in steps {
        let command = concretise(&state, step, &mut revisions);
        let before_budgets = budgets(&state);
        let before_retires = retire_budgets(&state);
        let before_applied = applied_seqs(&state);
        let degrade = may_degrade(&state, &command);
        let holds: BTreeMap<Key, bool> = state
            .clusters
            .iter()
            .map(|(k, c)| (k.clone(), c.object().spec.hold))
            .collect();
        let pins: BTreeMap<Key, Option<String>> = state
            .groups
            .iter()
            .map(|(k, g)| (k.clone(), g.object.spec.rollout.pinned_revision.clone()))
            .collect();
        let reachability: BTreeMap<Key, Option<bool>> = state
            .clusters
            .iter()
            .map(|(k, c)| {
                (
                    k.clone(),
                    c.object().status.as_ref().and_then(|s| s.reachable),
                )
            })
            .collect();
        let registering = match &command {
            Command::RegisterPullCluster { cluster, agent, .. } => Some((
                cluster.clone(),
                agent.clone(),
                before_register(&state, cluster),
            )),
            _ => None,
        };
        let pruning =
            matches!(command, Command::AbandonOverduePrunes { .. }).then(|| pruning_since(&state));
        let source_side = match &command {
            Command::FinishSync {
                ticket,
                outcome: SyncOutcome::Failed { class, .. },
                ..
            } if class == fleet::state::SOURCE_UNAVAILABLE_CLASS => {
                state.tickets.get(ticket).map(|t| {
                    (
                        t.sync.clone(),
                        state.sync_state(&t.sync),
                        state.syncs[&t.sync].rollout.failed,
                    )
                })
            }
            _ => None,
        };
        let outcome = state.apply(command.clone());
        commands.push(command.clone());

        // A registration never gives a cluster a second agent, and keeps what the agent does
        // not own: the hold, the generation, the user's labels.
        if let Some((cluster, agent, before)) = registering
            && let Outcome::Registered { .. } = &outcome
        {
            let after = state.clusters.get(&cluster).map(|c| c.cluster());
            prop_assert!(after.is_some(), "{} registered but absent", cluster);
            let after = after.unwrap();
            prop_assert_eq!(
                after
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(fleet::state::AGENT_ANNOTATION)),
                Some(&agent)
            );
            if let Some(before) = before {
                prop_assert!(
                    before.holder.as_ref().is_none_or(|holder| *holder == agent),
                    "{} taken by {} from {:?}",
                    cluster,
                    agent,
                    before.holder
                );
                prop_assert_eq!(after.spec.hold, before.hold, "hold of {} lost", cluster);
                prop_assert_eq!(
                    after.metadata.generation,
                    before.generation,
                    "generation of {} moved",
                    cluster
                );
                let labels = after.metadata.labels.clone().unwrap_or_default();
                for (key, value) in &before.user_labels {
                    prop_assert_eq!(
                        labels.get(key),
                        Some(value),
                        "label {} of {} overwritten",
                        key,
                        cluster
                    );
                }
            }
        }
        // A prune is never given up before its timeout.
        if let (
            Some(since),
            Command::AbandonOverduePrunes {
                at,
                timeout_seconds,
            },
        ) = (&pruning, &command)
            && let Outcome::PrunesAbandoned { keys } = &outcome
        {
            let now = fleet::duration::unix_seconds(at).expect("time");
            for key in keys {
                let began = since.get(key).copied().flatten();
                prop_assert!(
                    began.is_some_and(|began| now - began > *timeout_seconds as i64),
                    "{} given up at {} after {}s, began {:?}",
                    key,
                    at,
                    timeout_seconds,
                    began
                );
            }
        }
        // A source-side failure is no verdict on the cluster: its reachability stays, no
        // failure is counted, and the rollout does not skip it.
        if let Some((sync, before, failed_before)) = source_side {
            for (cluster, reachable) in &reachability {
                let now = state
                    .clusters
                    .get(cluster)
                    .map(|c| c.object().status.as_ref().and_then(|s| s.reachable));
                prop_assert_eq!(
                    now.unwrap_or(*reachable),
                    *reachable,
                    "reachability of {} changed by {:?}",
                    cluster,
                    command
                );
            }
            // No failure of its own: a failure mark recorded before (a write that failed) stays
            // as it was, and none is added.
            let failed_after = state.syncs.get(&sync).and_then(|s| s.rollout.failed);
            prop_assert!(
                failed_after.is_none() || failed_after == failed_before,
                "{} counted a failure for {:?}",
                sync,
                command
            );
            // Skipped only for what was already so: a cluster known unreachable before, or
            // one recovery has not read back.
            let after = state.sync_state(&sync);
            let excused = state.syncs.get(&sync).is_some_and(|entry| {
                let cluster = fleet::state::cluster_key_of(&entry.object);
                state.recovery_pending.contains(&cluster) || state.cluster_unreachable(&cluster)
            });
            prop_assert!(
                after != Some(fleet::state::SyncState::Unreachable) || before == after || excused,
                "{} skipped as unreachable by {:?}",
                sync,
                command
            );
        }

        if let Err(violation) = state.check_invariants() {
            return Err(TestCaseError::fail(format!(
                "{violation} after {command:?}"
            )));
        }
        // An apply that says nothing of them keeps a hold and a pin.
        if let Command::ApplySpec { resource, .. } = &command {
            let key = resource.key();
            let key = format!("{}/{}", key.namespace, key.name);
            if let Some(held) = holds.get(&key) {
                let now = state.clusters.get(&key).map(|c| c.object().spec.hold);
                prop_assert_eq!(now, Some(*held), "hold of {} lost by {:?}", key, command);
            }
            if let Some(pin) = pins.get(&key)
                && let Some(group) = state.groups.get(&key)
            {
                prop_assert_eq!(
                    &group.object.spec.rollout.pinned_revision,
                    pin,
                    "pin of {} lost by {:?}",
                    key,
                    command
                );
            }
        }
        if let Outcome::Granted { ticket } = &outcome {
            prop_assert!(!state.recovering, "granted while recovering: {:?}", ticket);
            prop_assert_eq!(
                state.cluster_owner(&ticket.cluster),
                Some((ticket.node, ticket.generation))
            );
            if ticket.kind != SyncKind::Retire {
                prop_assert_eq!(
                    state.target_of(&ticket.sync).map(|t| t.revision),
                    Some(ticket.revision.clone())
                );
            }
        }
        if !degrade {
            for (group, (unavailable, budget)) in budgets(&state) {
                let before = before_budgets.get(&group).map_or(0, |b| b.0);
                prop_assert!(
                    unavailable <= budget.max(before),
                    "group {} has {} unavailable, budget {}, was {} before {:?}",
                    group,
                    unavailable,
                    budget,
                    before,
                    command
                );
            }
        }
        // Clusters a group leaves prune within its budget (or no more than before, when the
        // budget shrank).
        for (group, (pruning, budget)) in retire_budgets(&state) {
            let before = before_retires.get(&group).map_or(0, |b| b.0);
            prop_assert!(
                pruning <= (budget as usize).max(before),
                "group {} prunes {} clusters at once, budget {}, was {} before {:?}",
                group,
                pruning,
                budget,
                before,
                command
            );
        }
        for (sync, seq) in applied_seqs(&state) {
            if let Some(previous) = before_applied.get(&sync) {
                prop_assert!(
                    seq >= *previous,
                    "sync {} went back from seq {} to {}",
                    sync,
                    previous,
                    seq
                );
            }
        }
    }
    Ok((commands, state))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn random_command_sequences_keep_the_invariants(steps in proptest::collection::vec(step(), 1..80)) {
        run(&steps)?;
    }

    #[test]
    fn replay_and_snapshot_restore_give_the_same_state(steps in proptest::collection::vec(step(), 1..60), cut in any::<prop::sample::Index>()) {
        let (commands, state) = run(&steps)?;
        // Replaying the log from scratch.
        let mut replayed = FleetState::default();
        replayed.apply(source("repo"));
        replayed.apply(source("config"));
        for command in &commands {
            replayed.apply(command.clone());
        }
        prop_assert_eq!(replayed.encode_snapshot(), state.encode_snapshot());
        // Restoring a snapshot taken part-way, then applying the rest.
        let cut = cut.index(commands.len() + 1);
        let mut prefix = FleetState::default();
        prefix.apply(source("repo"));
        prefix.apply(source("config"));
        for command in &commands[..cut] {
            prefix.apply(command.clone());
        }
        let mut restored = FleetState::decode_snapshot(&prefix.encode_snapshot()).expect("snapshot decodes");
        for command in &commands[cut..] {
            restored.apply(command.clone());
        }
        prop_assert_eq!(restored.encode_snapshot(), state.encode_snapshot());
    }
}

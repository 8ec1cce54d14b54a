//! The random steps of the property tests, and how each becomes a concrete command against
//! the current state (so that grants target real Syncs and owners most of the time).

use std::collections::BTreeMap;

use fleet::manifest::{Kind, ObjectKey, Resource, parse_manifests};
use fleet::resources::ResourceStatus;
use fleet::state::{Key, MemberState, RecoveredSync, SyncOutcome};
use fleet::{Command, FleetState};
use proptest::prelude::*;

pub(crate) const AT: &str = "2026-01-01T00:00:00Z";

pub(crate) fn manifest(yaml: &str) -> Resource {
    parse_manifests(yaml)
        .expect("generated manifest parses")
        .remove(0)
}

pub(crate) fn cluster(index: u8, tier: u8, paused: bool) -> Command {
    // c6 and c7 are pull clusters, which agents register and claim.
    let mode = if index >= 6 { "pull" } else { "push" };
    Command::UpsertSpec {
        resource: Box::new(manifest(&format!(
            "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: c{index}\n  namespace: fleet\n  labels:\n    tier: t{tier}\nspec:\n  paused: {paused}\n  mode: {mode}\n"
        ))),
        at: AT.into(),
    }
}

pub(crate) fn group(index: u8, budget: u8, max_failures: u8, canary: bool) -> Command {
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

pub(crate) fn source(name: &str) -> Command {
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
pub(crate) enum Step {
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

pub(crate) fn step() -> impl Strategy<Value = Step> {
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

pub(crate) fn agent_id(agent: u8) -> String {
    ["a", "b", "c"][usize::from(agent % 3)].to_string()
}

pub(crate) fn agent_name(agent: u8) -> String {
    format!("token {}", agent_id(agent))
}

pub(crate) fn pick<T: Clone>(items: &[T], index: u8) -> Option<T> {
    if items.is_empty() {
        None
    } else {
        Some(items[index as usize % items.len()].clone())
    }
}

pub(crate) fn concretise(state: &FleetState, step: &Step, revisions: &mut u32) -> Command {
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

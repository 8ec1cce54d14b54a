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

use fleet::manifest::{Kind, ObjectKey, Resource};
use fleet::state::{Key, SyncKind, SyncOutcome};
use fleet::{Command, FleetState, Outcome};
use proptest::prelude::*;

mod steps;

use steps::*;

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

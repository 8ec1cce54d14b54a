//! One schedule from start to verdict: start everything, inject the faults in order, heal,
//! wait for convergence, check the invariants, and keep the evidence when one fails.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use fleetsim::checks::{Check, check};

use crate::invariants;
use crate::schedule::{Fault, Schedule, Target, TargetFault};
use crate::world::World;

/// How a schedule is run.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// `--max-concurrent-syncs` of every replica.
    pub workers: usize,
    /// How long the fleet may take to converge once healed.
    pub converge_timeout: Duration,
    /// Where the evidence of a failed schedule goes (`DIR/seed-S/`).
    pub evidence_dir: PathBuf,
}

/// The verdict on one schedule.
#[derive(Debug)]
pub struct Outcome {
    pub seed: u64,
    pub checks: Vec<Check>,
    /// Seconds from the healing to convergence, when it converged.
    pub converged_after: Option<f64>,
    pub elapsed: Duration,
    /// Where the evidence was kept, when a check failed.
    pub evidence: Option<PathBuf>,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }
}

/// The end of a fault, due at a time.
#[derive(Debug)]
enum Undo {
    Restart(u64),
    Continue(u64),
    /// The second kill of a [`Fault::KillTwo`], then its restart.
    KillSecond(Target, Duration),
    ClearClusters(Vec<String>),
    GitUp,
    Resume,
    /// A killed agent started again.
    AgentBack(String),
    /// A cluster relabelled back into the SyncGroup's selector.
    Reselect(String),
    /// The clusters a disaster left pending reachable again: the push cluster up, the agent
    /// started.
    EndPending {
        down: Option<String>,
        away: Option<String>,
    },
}

/// Runs `schedule` and judges it.
pub async fn run(schedule: &Schedule, config: &RunConfig) -> anyhow::Result<Outcome> {
    let began = Instant::now();
    let mut world = World::start(schedule, config.workers).await?;
    let addresses: Vec<String> = world.group.nodes.values().map(|n| n.grpc.clone()).collect();
    let (stop_sampling, stopped) = tokio::sync::watch::channel(false);
    let sampler = tokio::spawn(most_unavailable(addresses, stopped));
    world.begin();
    if let Err(error) = drive(&mut world, schedule).await {
        // A fault that could not be injected or undone (a write nobody acknowledged, a
        // replica that did not come back) is a failure of its own: keep the evidence too.
        world.log(format!("schedule stopped: {error:#}"));
        let _ = stop_sampling.send(true);
        let _ = sampler.await;
        let records = world.fixture.sim.audit(&fleetsim::AuditFilter::default());
        let mut outcome = Outcome {
            seed: schedule.seed,
            checks: vec![check(
                "the schedule ran to its end",
                &[format!("{error:#}")],
                "",
            )],
            converged_after: None,
            elapsed: began.elapsed(),
            evidence: None,
        };
        let dir = config.evidence_dir.join(format!("seed-{}", schedule.seed));
        keep_evidence(&world, schedule, &outcome, &records, &dir)
            .await
            .with_context(|| format!("cannot keep the evidence in {}", dir.display()))?;
        outcome.evidence = Some(dir);
        return Ok(outcome);
    }
    // The window is over and its faults undone, but the clusters unreachable throughout are
    // still away: the rollout must complete for every other cluster (or halt with a reason).
    let reachable = settle_reachable(&world, config.converge_timeout).await;
    world.log(match &reachable {
        Ok(how) => format!("without the clusters away throughout: {how}"),
        Err(stall) => format!("without the clusters away throughout, stalled: {stall}"),
    });
    if let Err(error) = world.heal().await {
        world.log(format!("healing failed: {error:#}"));
    }
    let healed = Instant::now();
    let converged = converge(&world, config.converge_timeout).await;
    let converged_after = converged.is_ok().then(|| healed.elapsed().as_secs_f64());
    world.log(match &converged {
        Ok(()) => "converged".to_string(),
        Err(stall) => format!("did not converge: {stall}"),
    });

    let mut checks = vec![check(
        "every cluster converged to the newest revision",
        converged
            .as_ref()
            .err()
            .map(|e| vec![e.clone()])
            .as_deref()
            .unwrap_or_default(),
        &format!(
            "v{} with greeting {:?} on all {} clusters, rollout Complete",
            world.ledger.version,
            world.ledger.greeting,
            world.ledger.clusters.len()
        ),
    )];
    let _ = stop_sampling.send(true);
    let sampled = sampler.await.unwrap_or_default();
    checks.push(check(
        "rollout ledger never above maxUnavailable",
        &if sampled.0 > world.ledger.largest_budget {
            vec![format!(
                "{} clusters unavailable (in progress + failed) at once: {}; largest budget {}",
                sampled.0, sampled.1, world.ledger.largest_budget
            )]
        } else {
            Vec::new()
        },
        &format!(
            "at most {} unavailable in the replicas' rollout status, budget {}",
            sampled.0, world.ledger.largest_budget
        ),
    ));
    checks.push(check(
        "a rollout completes for every reachable cluster or halts with a reason",
        reachable
            .as_ref()
            .err()
            .map(|e| vec![e.clone()])
            .as_deref()
            .unwrap_or_default(),
        &format!(
            "{} cluster(s) unreachable throughout: {}",
            world.unreachable_throughout.len(),
            reachable.as_deref().unwrap_or("stalled")
        ),
    ));
    checks.push(check(
        "a recover on a running fleet is refused and freezes nothing",
        &world.recover_violations,
        "every recover on the running fleet was refused or limited to pending clusters",
    ));
    checks.push(invariants::removed_pruned(&world, Duration::from_secs(60)).await);
    let records = world.fixture.sim.audit(&fleetsim::AuditFilter::default());
    if !world.disasters.is_empty() {
        checks.push(invariants::no_write_before_recovery(
            &records,
            &world.disasters,
        ));
    }
    checks.extend(fleetsim::checks::writer_checks(&records));
    checks.push(invariants::revisions_forward(&records));
    checks.push(invariants::within_budget(
        &records,
        world.ledger.largest_budget,
    ));
    let left: Vec<(String, u64)> = world
        .removed
        .iter()
        .chain(&world.deselected)
        .cloned()
        .collect();
    checks.push(invariants::prunes_within_budget(
        &records,
        &left,
        world.ledger.largest_budget,
    ));
    checks.push(invariants::installations_keep_out(
        &records,
        world.shadow.as_ref().map(|s| s.installation.as_str()),
    ));
    checks.extend(invariants::replicas_agree(&world).await);

    let mut outcome = Outcome {
        seed: schedule.seed,
        checks,
        converged_after,
        elapsed: began.elapsed(),
        evidence: None,
    };
    if !outcome.ok() {
        let dir = config.evidence_dir.join(format!("seed-{}", schedule.seed));
        keep_evidence(&world, schedule, &outcome, &records, &dir)
            .await
            .with_context(|| format!("cannot keep the evidence in {}", dir.display()))?;
        outcome.evidence = Some(dir);
    }
    Ok(outcome)
}

/// Samples the rollout status (from any replica that answers) until told to stop: the most
/// clusters in progress plus failed at once, and the summary where it was seen.
async fn most_unavailable(
    addresses: Vec<String>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> (u32, String) {
    let mut most = (0, String::new());
    let clients: Vec<_> = addresses
        .iter()
        .map(|a| proto::fleet_client::FleetClient::new(crate::harness::channel(a)))
        .collect();
    let mut next = 0;
    while !*stop.borrow() {
        let mut client = clients[next % clients.len()].clone();
        next += 1;
        let answer = tokio::time::timeout(
            Duration::from_millis(300),
            client.status(proto::StatusRequest {}),
        )
        .await;
        if let Ok(Ok(status)) = answer {
            for rollout in status.into_inner().rollouts {
                let summary = rollout.summary.unwrap_or_default();
                let unavailable = summary.in_progress + summary.failed;
                if unavailable > most.0 {
                    most = (unavailable, format!("{summary:?}"));
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = stop.changed() => {}
        }
    }
    most
}

/// Starts one fault, and queues its end.
async fn inject(
    world: &mut World,
    fault: &Fault,
    undos: &mut Vec<(Duration, Undo)>,
) -> anyhow::Result<()> {
    let now = world.elapsed();
    match fault {
        Fault::Kill { target, down_for } | Fault::Wipe { target, down_for } => {
            let Some(id) = world.resolve(*target).await else {
                world.log(format!("{fault:?}: no such node now, skipped"));
                return Ok(());
            };
            world.group.kill(id);
            if matches!(fault, Fault::Wipe { .. }) {
                let dir = world.group.nodes[&id].data_dir.clone();
                if dir.exists() {
                    std::fs::remove_dir_all(&dir)?;
                }
                world.log(format!("kill -9 node {id} ({target:?}), disk wiped"));
            } else {
                world.log(format!("kill -9 node {id} ({target:?})"));
            }
            undos.push((now + *down_for, Undo::Restart(id)));
        }
        Fault::Stop {
            target,
            stopped_for,
        } => {
            let Some(id) = world.resolve(*target).await else {
                world.log(format!("{fault:?}: no such node now, skipped"));
                return Ok(());
            };
            world.group.signal(id, "-STOP");
            world.stopped.insert(id);
            world.log(format!("SIGSTOP node {id} ({target:?})"));
            undos.push((now + *stopped_for, Undo::Continue(id)));
        }
        Fault::KillTwo {
            first,
            second,
            down_for,
        } => {
            let Some(id) = world.resolve(*first).await else {
                world.log(format!("{fault:?}: no such node now, skipped"));
                return Ok(());
            };
            world.group.kill(id);
            world.log(format!("kill -9 node {id} ({first:?}), the first of two"));
            if schedule_allows_two(world) {
                undos.push((now + *down_for / 2, Undo::KillSecond(*second, *down_for)));
                undos.push((now + *down_for, Undo::Restart(id)));
            } else {
                // With 3 replicas the first is back (and settled) before the second goes.
                undos.push((now + *down_for, Undo::Restart(id)));
                undos.push((
                    now + *down_for + Duration::from_secs(3),
                    Undo::KillSecond(*second, *down_for),
                ));
            }
        }
        Fault::Clusters {
            clusters,
            fault,
            duration,
        } => {
            // Clusters down throughout stay down: clearing their faults would end that early.
            let names: Vec<String> = clusters
                .iter()
                .map(|i| world.initial[i % world.initial.len()].clone())
                .filter(|name| !world.unreachable_throughout.contains(name))
                .collect();
            let injected = match fault {
                TargetFault::Latency { ms } => fleetsim::Fault::Latency { ms: *ms },
                TargetFault::Errors { rate, code } => fleetsim::Fault::errors(*rate, *code),
                TargetFault::Hang { rate } => fleetsim::Fault::Hang { rate: *rate },
                TargetFault::Down => fleetsim::Fault::Down,
            };
            for name in &names {
                world.fixture.sim.set_fault(name, injected.clone())?;
            }
            world.log(format!("target fault {fault:?} on {names:?}"));
            undos.push((now + *duration, Undo::ClearClusters(names)));
        }
        Fault::GitDown { duration } => {
            world.fixture.stop_git();
            world.log("git host down");
            undos.push((now + *duration, Undo::GitUp));
        }
        Fault::Commit => {
            world.commit()?;
            world.log(format!(
                "commit v{} ({})",
                world.ledger.version, world.ledger.commit
            ));
        }
        Fault::EditGroup {
            greeting,
            budget_percent,
        } => {
            world.edit_group(greeting, *budget_percent).await?;
            world.log(format!(
                "SyncGroup edited: greeting {greeting}, maxUnavailable {budget_percent}%"
            ));
        }
        Fault::Pause { duration } => {
            if !world.ledger.paused {
                world.pause(true).await?;
                world.ledger.paused = true;
                world.log("rollout paused");
                undos.push((now + *duration, Undo::Resume));
            }
        }
        Fault::AddCluster => {
            let name = world.add_cluster().await?;
            world.log(format!("cluster {name} added"));
        }
        Fault::RemoveCluster { cluster } => {
            let name = world.remove_cluster(*cluster).await?;
            world.log(format!("cluster {name} removed"));
        }
        Fault::KillAgent { agent, down_for } => {
            if world.pull.is_empty() {
                return Ok(());
            }
            let name = world.pull[agent % world.pull.len()].clone();
            if world.unreachable_throughout.contains(&name) || !world.agents.is_running(&name) {
                world.log(format!("{fault:?}: agent of {name} not running, skipped"));
                return Ok(());
            }
            world.agents.kill(&name);
            world.log(format!("agent of {name} killed"));
            undos.push((now + *down_for, Undo::AgentBack(name)));
        }
        Fault::RecoverAgain => recover_again(world).await,
        Fault::Disaster {
            down,
            away,
            pending_for,
        } => {
            // Clusters away throughout stay away: they are not the ones brought back.
            let down = Some(world.initial[down % world.initial.len()].clone())
                .filter(|name| !world.unreachable_throughout.contains(name));
            let away = (!world.pull.is_empty())
                .then(|| world.pull[away % world.pull.len()].clone())
                .filter(|name| !world.unreachable_throughout.contains(name));
            let said = world.disaster(down.as_deref(), away.as_deref()).await?;
            world.log(format!("recovered: {}", said.trim()));
            undos.push((
                world.elapsed() + *pending_for,
                Undo::EndPending { down, away },
            ));
        }
        Fault::Deselect { cluster, out_for } => {
            let name = world.initial[cluster % world.initial.len()].clone();
            if !world.ledger.clusters.contains(&name)
                || world.unreachable_throughout.contains(&name)
                || world.out.contains(&name)
            {
                world.log(format!(
                    "{fault:?}: {name} removed, away or out already, skipped"
                ));
                return Ok(());
            }
            world.relabel(&name, true).await?;
            world.log(format!("{name} relabelled out of the selector"));
            undos.push((now + *out_for, Undo::Reselect(name)));
        }
        Fault::Shadow { clusters } => {
            let names = world.start_shadow(clusters).await?;
            world.log(match names.is_empty() {
                true => "second installation: no cluster held yet, skipped".to_string(),
                false => format!("second installation pointed at {}", names.join(", ")),
            });
        }
    }
    Ok(())
}

/// `starling recover` on the running fleet. Nothing is pending in these schedules, so it
/// must be refused, saying the installation is not recovering; an answer that cannot be had
/// (no leader during a kill) is no verdict. Either way the fleet must not be left recovering.
async fn recover_again(world: &mut World) {
    let Some(node) = world.answering().first().copied() else {
        world.log("recover on the running fleet: no node answers, skipped");
        return;
    };
    let address = world.group.nodes[&node].grpc.clone();
    let output = match tokio::process::Command::new(crate::harness::binary())
        .args(["--server", &address, "--timeout", "5s", "recover"])
        .output()
        .await
    {
        Ok(output) => output,
        Err(error) => {
            world.log(format!(
                "recover on the running fleet: cannot run the CLI: {error}"
            ));
            return;
        }
    };
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let said = said.trim().to_string();
    world.log(format!("recover on the running fleet: {said}"));
    if output.status.success() {
        world.recover_violations.push(format!(
            "a recover with nothing pending was accepted: {said}"
        ));
    } else if !["not recovering", "no leader", "timed out", "unavailable"]
        .iter()
        .any(|allowed| said.contains(allowed))
    {
        world
            .recover_violations
            .push(format!("a recover was refused for another reason: {said}"));
    }
    if let Some(leader) = world.leader().await
        && world
            .status_of(leader)
            .await
            .is_some_and(|status| status.recovering)
    {
        world.recovery_left_on(&said);
    }
}

fn schedule_allows_two(world: &World) -> bool {
    world.group.nodes.len() >= 5
}

/// Ends one fault.
async fn finish(
    world: &mut World,
    undo: Undo,
    undos: &mut Vec<(Duration, Undo)>,
) -> anyhow::Result<()> {
    match undo {
        Undo::Restart(id) => {
            world.revive(id);
            world.log(format!("node {id} restarted"));
        }
        Undo::Continue(id) => {
            world.revive(id);
            world.log(format!("SIGCONT node {id}"));
        }
        Undo::KillSecond(target, down_for) => {
            if let Some(id) = world.resolve(target).await {
                world.group.kill(id);
                world.log(format!("kill -9 node {id} ({target:?}), the second of two"));
                undos.push((world.elapsed() + down_for, Undo::Restart(id)));
            }
        }
        Undo::ClearClusters(names) => {
            for name in &names {
                world.fixture.sim.clear_faults(name)?;
            }
            world.log(format!("target faults cleared on {names:?}"));
        }
        Undo::GitUp => {
            world.fixture.start_git();
            world.log("git host up");
        }
        Undo::Resume => {
            world.pause(false).await?;
            world.ledger.paused = false;
            world.log("rollout resumed");
        }
        Undo::EndPending { down, away } => {
            if let Some(name) = &down {
                world.fixture.sim.set_down(name, false)?;
            }
            if let Some(name) = &away
                && !world.agents.is_running(name)
            {
                world.agents.spawn(name);
            }
            world.log(format!("pending clusters back: {down:?} {away:?}"));
        }
        Undo::AgentBack(name) => {
            if !world.agents.is_running(&name) {
                world.agents.spawn(&name);
            }
            world.log(format!("agent of {name} started again"));
        }
        Undo::Reselect(name) => {
            if world.ledger.clusters.contains(&name) {
                world.relabel(&name, false).await?;
                world.log(format!("{name} relabelled back into the selector"));
            } else {
                world.out.remove(&name);
            }
        }
    }
    Ok(())
}

/// Waits until the newest version runs on every cluster of the ledger but those unreachable
/// throughout, and the rollout is Complete (counting those as unreachable); or until the
/// rollout halts with a reason. Says which, or what is missing at the time-out.
async fn settle_reachable(world: &World, timeout: Duration) -> Result<String, String> {
    let deadline = Instant::now() + timeout;
    let want_version = format!("v{}", world.ledger.version);
    loop {
        let behind = clusters_behind(world, &want_version, true);
        let rollout = rollout_state(world).await;
        let complete = rollout.as_ref().is_some_and(|r| {
            let summary = r.summary.unwrap_or_default();
            r.phase == "Complete"
                && r.target_revision.contains(&world.ledger.commit)
                && summary.total as usize == world.ledger.clusters.len()
                && (summary.updated + summary.unreachable) as usize == summary.total as usize
        });
        if behind.is_empty() && complete {
            let unreachable = rollout
                .and_then(|r| r.summary)
                .map_or(0, |summary| summary.unreachable);
            return Ok(format!("Complete, {unreachable} unreachable"));
        }
        if rollout.as_ref().is_some_and(|r| r.phase == "Halted") {
            return match halt_reason(world).await {
                Some(reason) if !reason.is_empty() => Ok(format!("Halted: {reason}")),
                _ => Err(format!("Halted without a reason: {rollout:?}")),
            };
        }
        if Instant::now() > deadline {
            let shown: Vec<_> = behind.iter().take(10).cloned().collect();
            return Err(format!(
                "after {timeout:?}: {} reachable cluster(s) behind {want_version} ({}); rollout {:?}",
                behind.len(),
                shown.join(", "),
                rollout
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The clusters of the ledger not at `want_version` with the newest greeting, said for a
/// report; with `reachable_only`, those away throughout are left out.
fn clusters_behind(world: &World, want_version: &str, reachable_only: bool) -> Vec<String> {
    world
        .deployed()
        .into_iter()
        .filter(|(name, _)| !reachable_only || !world.unreachable_throughout.contains(name))
        .filter(|(_, (version, greeting))| {
            version != want_version || *greeting != world.ledger.greeting
        })
        .map(|(name, (version, greeting))| format!("{name} has {version:?}/{greeting:?}"))
        .collect()
}

/// The halt reason of the newest rollout, from the leader's copy of the SyncGroup.
async fn halt_reason(world: &World) -> Option<String> {
    let leader = world.leader().await?;
    let objects = world.objects(leader).await?;
    objects
        .get("SyncGroup/default/demo")?
        .pointer("/status/history/0/haltReason")?
        .as_str()
        .map(String::from)
}

/// Waits until every cluster of the ledger runs the newest version with the newest greeting
/// and the leader reports the rollout Complete; on a time-out, says what is missing.
async fn converge(world: &World, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let want_version = format!("v{}", world.ledger.version);
    loop {
        let behind = clusters_behind(world, &want_version, false);
        let rollout = rollout_state(world).await;
        let complete = rollout.as_ref().is_some_and(|r| {
            let summary = r.summary.unwrap_or_default();
            r.phase == "Complete"
                && r.target_revision.contains(&world.ledger.commit)
                && summary.updated as usize == world.ledger.clusters.len()
                && summary.total as usize == world.ledger.clusters.len()
        });
        if behind.is_empty() && complete {
            return Ok(());
        }
        if Instant::now() > deadline {
            let shown: Vec<_> = behind.iter().take(10).cloned().collect();
            return Err(format!(
                "after {timeout:?}: {} cluster(s) behind {want_version} ({}); rollout {:?}",
                behind.len(),
                shown.join(", "),
                rollout
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn rollout_state(world: &World) -> Option<proto::Rollout> {
    let leader = world.leader().await?;
    world
        .status_of(leader)
        .await?
        .rollouts
        .into_iter()
        .find(|r| r.name == "demo")
}

/// Injects the schedule's faults at their times and undoes them; the clusters unreachable
/// throughout stay so ([`World::heal`] ends that).
async fn drive(world: &mut World, schedule: &Schedule) -> anyhow::Result<()> {
    let mut undos: Vec<(Duration, Undo)> = Vec::new();
    for step in &schedule.steps {
        loop {
            let next_undo = undos.iter().map(|(at, _)| *at).min();
            let next = next_undo.filter(|at| *at <= step.at);
            let due = next.unwrap_or(step.at);
            tokio::time::sleep(due.saturating_sub(world.elapsed())).await;
            let Some(at) = next else { break };
            let index = undos.iter().position(|(t, _)| *t == at).expect("found");
            let (_, undo) = undos.remove(index);
            finish(world, undo, &mut undos).await?;
        }
        inject(world, &step.fault, &mut undos).await?;
    }
    // The window's end: the remaining undos in order, then everything healed.
    tokio::time::sleep(schedule.shape.window.saturating_sub(world.elapsed())).await;
    undos.sort_by_key(|(at, _)| *at);
    while !undos.is_empty() {
        let (_, undo) = undos.remove(0);
        finish(world, undo, &mut undos).await?;
    }
    Ok(())
}

/// Writes what explains a failure: the schedule, the timeline, the checks, each replica's
/// state, members and metrics, the node logs and the audit log.
async fn keep_evidence(
    world: &World,
    schedule: &Schedule,
    outcome: &Outcome,
    records: &[fleetsim::AuditRecord],
    dir: &Path,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("schedule.txt"), schedule.to_string())?;
    std::fs::write(dir.join("timeline.txt"), world.timeline.join("\n") + "\n")?;
    let checks: Vec<String> = outcome
        .checks
        .iter()
        .map(|c| {
            format!(
                "[{}] {}: {}",
                if c.ok { "ok" } else { "FAILED" },
                c.name,
                c.detail
            )
        })
        .collect();
    std::fs::write(dir.join("checks.txt"), checks.join("\n") + "\n")?;
    for id in world.group.nodes.keys().copied() {
        let log = world.group.log_path(id);
        if log.exists() {
            std::fs::copy(&log, dir.join(format!("node-{id}.log")))?;
        }
        if let Some(objects) = world.objects(id).await {
            std::fs::write(
                dir.join(format!("node-{id}-state.json")),
                serde_json::to_vec_pretty(&objects)?,
            )?;
        }
        if let Some(status) = world.status_of(id).await {
            std::fs::write(
                dir.join(format!("node-{id}-status.txt")),
                format!("{status:#?}\n"),
            )?;
        }
        if let Some(metrics) = crate::harness::http_get(&world.group.nodes[&id].http, "/metrics") {
            std::fs::write(dir.join(format!("node-{id}-metrics.txt")), metrics)?;
        }
    }
    for name in &world.pull {
        let log = world.agents.log_path(name);
        if log.exists() {
            std::fs::copy(&log, dir.join(format!("agent-{name}.log")))?;
        }
    }
    std::fs::write(dir.join("audit.json"), serde_json::to_vec_pretty(records)?)?;
    Ok(())
}

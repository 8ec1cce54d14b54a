//! Watching the demo's rollouts converge: waits on the replicated state with the demo's time
//! limit, times each rollout against the commit that started it, and stops a replica in the
//! middle of one when asked (`--kill-node-mid-rollout`).

use std::time::{Duration, Instant};

use anyhow::Context as _;

use fleet::resources::RolloutPhase;
use fleet::state::FleetState;

use super::report::RolloutTiming;
use super::{Dev, GROUP, short, unix_micros};

impl Dev {
    pub(crate) async fn wait(
        &self,
        what: &str,
        condition: impl Fn(&FleetState) -> bool,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + self.args.wait_limit();
        while !self.read(&condition) {
            if Instant::now() > deadline {
                anyhow::bail!(
                    "timed out after {:?} waiting for {what}",
                    self.args.wait_limit()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// Waits for a rollout of a revision other than `previous` to start and complete.
    pub(crate) async fn wait_rollout(
        &mut self,
        previous: Option<String>,
        kill_midway: bool,
    ) -> anyhow::Result<RolloutTiming> {
        let previous_clone = previous.clone();
        self.wait("the source to resolve a new revision", move |state| {
            state
                .group_status(GROUP)
                .and_then(|s| s.target_revision)
                .is_some_and(|r| Some(r) != previous_clone)
        })
        .await?;
        let started = Instant::now();
        let since_micros = unix_micros();
        let deadline = started + self.args.wait_limit();
        let mut max_unavailable_seen = 0;
        let mut killed = false;
        let total = self.args.clusters as u64;
        let bar = self.progress.bar(total);
        let revision = loop {
            let status = self
                .read(|state| state.group_status(GROUP))
                .context("the demo syncgroup is gone")?;
            let summary = &status.summary;
            max_unavailable_seen = max_unavailable_seen.max(summary.in_progress + summary.failed);
            let revision = status.target_revision.clone().unwrap_or_default();
            self.progress.update(
                &bar,
                summary.updated as u64,
                &format!(
                    "{}  updated {}/{}  in progress {}  failed {}",
                    short(&revision),
                    summary.updated,
                    summary.total,
                    summary.in_progress,
                    summary.failed
                ),
            );
            if status.phase == Some(RolloutPhase::Complete)
                && summary.updated as usize == self.args.clusters
            {
                break revision;
            }
            if kill_midway && !killed && summary.updated as u64 * 10 >= total * 3 {
                killed = true;
                self.kill_one().await;
            }
            if Instant::now() > deadline {
                anyhow::bail!(
                    "timed out after {:?}: rollout of {revision} stuck at {}/{} updated",
                    self.args.wait_limit(),
                    summary.updated,
                    summary.total
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        self.progress.finish(
            bar,
            &format!(
                "rolled out {} to {} clusters in {:.1}s",
                short(&revision),
                self.args.clusters,
                started.elapsed().as_secs_f64()
            ),
        );
        Ok(RolloutTiming {
            revision,
            seconds: started.elapsed().as_secs_f64(),
            bound_seconds: 0.0,
            efficiency: 0.0,
            max_unavailable_seen,
            max_concurrent_writes: 0,
            window_micros: (since_micros, unix_micros()),
        })
    }

    /// Stops the replica (not the leader) that owns the most clusters.
    pub(crate) async fn kill_one(&mut self) {
        let leader = self
            .nodes
            .values()
            .next()
            .and_then(|n| n.replica.raft.current_leader())
            .map(|(id, _)| id);
        let victim = self.read(|state| {
            state
                .live_members()
                .filter(|m| Some(m.id) != leader)
                .max_by_key(|m| state.clusters_of(m.id).len())
                .map(|m| m.id)
        });
        let Some(victim) = victim.filter(|v| self.nodes.len() > 1 && self.nodes.contains_key(v))
        else {
            return;
        };
        if let Some(node) = self.nodes.remove(&victim) {
            self.progress.say(&format!("stopping node {victim} mid-rollout: its clusters move to the survivors after down_after"));
            self.stopped.push(node.replica.clone());
            node.stop().await;
        }
    }
}

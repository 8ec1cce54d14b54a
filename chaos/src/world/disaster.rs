//! A disaster and its recovery, as a schedule makes one ([`World::disaster`]): every replica
//! lost with its disk, fresh ones started with `--recovery`, the backup imported, `starling
//! recover`; and what the targets' audit log said around it ([`Disaster`]), which
//! `invariants::no_write_before_recovery` checks.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;

use super::World;

/// A disaster as the targets saw it: the audit sequence numbers around the recovery and the
/// fence each target held before it.
#[derive(Debug)]
pub struct Disaster {
    /// The last audit record before the replicas were killed.
    pub since: u64,
    /// The last audit record when `starling recover` was run. Until then nothing may write.
    /// From there on, writes above the target's fence are allowed: recovery raises a
    /// target's generation above its fence once it read it back, and replicas sync again as
    /// soon as recovery has finished in the state, before the command's answer reaches the
    /// harness (a sync of 250 ms landed in that gap in a CI run).
    pub recovering: u64,
    /// Each target's fence generation before the disaster.
    pub fences: BTreeMap<String, u64>,
}

impl World {
    /// Loses every replica with its disk, then recovers as an operator would: fresh replicas
    /// with `--recovery` from the backup taken just before, `starling import`, `starling
    /// recover`. Meanwhile push cluster `down` is down and the agent of pull cluster `away`
    /// is killed (both stay so: the caller brings them back).
    pub async fn disaster(
        &mut self,
        down: Option<&str>,
        away: Option<&str>,
    ) -> anyhow::Result<String> {
        let backup = self
            .backups
            .path()
            .join(format!("backup-{}", self.disasters.len()));
        let backup = backup.to_str().context("a UTF-8 temp path")?.to_owned();
        self.cli(&["export", "--unencrypted", "-f", &backup])
            .await?;
        let ids: Vec<u64> = self.group.nodes.keys().copied().collect();
        for id in &ids {
            self.group.kill(*id);
            let dir = self.group.nodes[id].data_dir.clone();
            if dir.exists() {
                std::fs::remove_dir_all(&dir)?;
            }
        }
        // What the old installation was writing when it died lands (agents stop their jobs
        // when their stream ends); from here on nothing may write until recovered.
        let since = self.quiet_audit_seq().await;
        let fences = self.fences();
        self.stopped.clear();
        if let Some(name) = away {
            self.agents.kill(name);
        }
        if let Some(name) = down {
            self.fixture.sim.set_down(name, true)?;
        }
        self.log(format!(
            "every replica and disk lost; pending: {}",
            [down, away]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(", ")
        ));
        let recovery = "--recovery".to_string();
        if !self.group.options.extra_args.contains(&recovery) {
            self.group.options.extra_args.push(recovery);
        }
        self.group.spawn_all();
        self.wait_formed(ids.len()).await?;
        self.cli(&["import", &backup]).await?;
        let recovering = self.last_audit_seq();
        let said = self.cli(&["recover"]).await?;
        self.disasters.push(Disaster {
            since,
            recovering,
            fences,
        });
        Ok(said)
    }

    /// The fence generation each target holds now.
    fn fences(&self) -> BTreeMap<String, u64> {
        self.fixture
            .sim
            .cluster_names()
            .into_iter()
            .filter_map(|name| {
                let fence = crate::invariants::fence_of(&self.fixture.sim, &name)?;
                let generation = fence["data"]["generation"].as_str()?.parse().ok()?;
                Some((name, generation))
            })
            .collect()
    }

    /// The last audit record once no write has come for a moment (at most a few seconds).
    async fn quiet_audit_seq(&self) -> u64 {
        let mut last = self.last_audit_seq();
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let now = self.last_audit_seq();
            if now == last {
                break;
            }
            last = now;
        }
        last
    }

    pub fn last_audit_seq(&self) -> u64 {
        self.fixture
            .sim
            .audit(&fleetsim::AuditFilter::default())
            .last()
            .map_or(0, |record| record.seq)
    }
}

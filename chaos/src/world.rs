//! The system under a schedule: fleetsim, the demo repository behind a `git daemon`, a group of
//! `starling node` processes, and the ledger of every change the schedule made and had
//! acknowledged (what must survive every crash).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use proto::fleet_client::FleetClient;

use crate::harness::{self, DemoFixture, Group, Options};
use crate::schedule::{Schedule, Target};

/// How long one change (an apply, a pause) is retried across leader changes before the run
/// gives up.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one replica may take to answer a read.
const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a parallel start may take to form a group with every replica.
const FORM_TIMEOUT: Duration = Duration::from_secs(60);
/// `starling node --max-voters` default.
const MAX_VOTERS: usize = 5;

/// The workers log at debug, so that a stall can be explained from the logs.
const NODE_LOG: &str = "info,starling_replica::worker=debug,starling_sync=debug,openraft=warn";

/// Every change the schedule made that a replica acknowledged.
#[derive(Clone, Debug)]
pub struct Ledger {
    /// The app version last committed (`v1`, `v2`, ...), as a number.
    pub version: u32,
    /// The commit of that version.
    pub commit: String,
    pub greeting: String,
    pub budget_percent: u32,
    /// The largest budget in force at any time, in clusters.
    pub largest_budget: u32,
    /// The clusters in the fleet (Starling `Cluster` names).
    pub clusters: BTreeSet<String>,
    pub paused: bool,
    /// Clusters added so far (to name the next one).
    pub added: u32,
}

impl Ledger {
    /// `maxUnavailable` as Starling resolves a percentage of the fleet (rounded up, at least 1).
    pub fn budget_of(percent: u32, clusters: usize) -> u32 {
        ((percent as usize * clusters).div_ceil(100)).max(1) as u32
    }

    fn note_budget(&mut self) {
        let budget = Ledger::budget_of(self.budget_percent, self.clusters.len());
        self.largest_budget = self.largest_budget.max(budget);
    }
}

pub struct World {
    pub fixture: DemoFixture,
    pub group: Group,
    pub ledger: Ledger,
    /// Nodes stopped with SIGSTOP.
    pub stopped: BTreeSet<u64>,
    /// Initial cluster names, in order (schedules name clusters by index).
    pub initial: Vec<String>,
    /// What happened, with times from the start of the fault window.
    pub timeline: Vec<String>,
    started: Instant,
}

impl World {
    /// Starts fleetsim, the git host and every replica at once (as a StatefulSet does), and
    /// applies the demo specs.
    pub async fn start(schedule: &Schedule, workers: usize) -> anyhow::Result<World> {
        let shape = &schedule.shape;
        let fixture = harness::demo_fixture(fleetsim::Config {
            clusters: shape.clusters,
            ready_delay: Duration::from_millis(200),
            latency: Duration::from_millis(2),
            audit_level: fleetsim::AuditLevel::Request,
            ..fleetsim::Config::default()
        })
        .await;
        let group = Group::start_together(
            shape.replicas,
            Options {
                down_after: shape.down_after,
                extra_args: vec!["--max-concurrent-syncs".into(), workers.to_string()],
                log: Some(NODE_LOG.into()),
                ..Options::default()
            },
        );
        let initial = fixture.sim.cluster_names();
        let ledger = Ledger {
            version: 1,
            commit: String::new(),
            greeting: "hello".into(),
            budget_percent: 10,
            largest_budget: 0,
            clusters: initial.iter().cloned().collect(),
            paused: false,
            added: 0,
        };
        let mut world = World {
            fixture,
            group,
            ledger,
            stopped: BTreeSet::new(),
            initial,
            timeline: Vec::new(),
            started: Instant::now(),
        };
        world.ledger.note_budget();
        // The fault window opens on a formed group. Right after a parallel start the lowest
        // replica leads a group of one until the others have joined; faults in that moment
        // (the bootstrap) are the membership tests' subject, not the schedules'.
        world.wait_formed(shape.replicas as usize).await?;
        let mut manifests = world.source_manifest();
        manifests.push_str(&world.group_manifest());
        for name in world.initial.clone() {
            manifests.push_str(&world.cluster_manifest(&name)?);
        }
        world.apply(&manifests).await.context("the demo specs")?;
        Ok(world)
    }

    /// Waits until every replica is a Live member and the voters are as many as they can be.
    async fn wait_formed(&self, replicas: usize) -> anyhow::Result<()> {
        let voters = replicas.min(MAX_VOTERS);
        let deadline = Instant::now() + FORM_TIMEOUT;
        loop {
            if let Some(status) = self.group.status().await {
                let live = status.members.iter().filter(|m| m.state == "Live").count();
                let voting = status.members.iter().filter(|m| m.voter).count();
                if live == replicas && voting == voters {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "the {replicas} replicas did not form a group with {voters} voters within {FORM_TIMEOUT:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Marks the start of the fault window.
    pub fn begin(&mut self) {
        self.started = Instant::now();
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    pub fn log(&mut self, what: impl Into<String>) {
        let line = format!("+{:>7.2}s {}", self.elapsed().as_secs_f64(), what.into());
        if std::env::var_os("CHAOS_VERBOSE").is_some() {
            eprintln!("{line}");
        }
        self.timeline.push(line);
    }

    fn source_manifest(&self) -> String {
        format!(
            "apiVersion: starling.dev/v1alpha1\nkind: Source\nmetadata: {{name: demo}}\nspec:\n  interval: 1s\n  git: {{url: \"{}\", ref: {{branch: main}}}}\n---\n",
            self.fixture.url
        )
    }

    /// The SyncGroup as the ledger says it is.
    pub fn group_manifest(&self) -> String {
        format!(
            "apiVersion: starling.dev/v1alpha1\nkind: SyncGroup\nmetadata: {{name: demo}}\nspec:\n  sourceRef: {{name: demo}}\n  clusterSelector: {{}}\n  template:\n    path: app\n    substitute:\n      REGION: \"${{cluster.labels.region}}\"\n      GREETING: \"{}\"\n  rollout:\n    maxUnavailable: \"{}%\"\n---\n",
            self.ledger.greeting, self.ledger.budget_percent
        )
    }

    /// A cluster's kubeconfig Secret and `Cluster`.
    pub fn cluster_manifest(&self, name: &str) -> anyhow::Result<String> {
        let secret = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("{name}-kubeconfig"), "namespace": "default"},
            "stringData": {"value": self.fixture.sim.kubeconfig(name)?},
        });
        Ok(format!(
            "{secret}\n---\napiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: {name}, labels: {{region: r{}}}}}\nspec: {{}}\n---\n",
            name.len() % 3
        ))
    }

    /// Nodes that run and answer (not stopped).
    pub fn answering(&self) -> Vec<u64> {
        self.group
            .running()
            .map(|n| n.id)
            .filter(|id| !self.stopped.contains(id))
            .collect()
    }

    async fn fleet(&self, id: u64) -> FleetClient<tonic::transport::Channel> {
        self.group.fleet(id).await
    }

    /// Status from one answering node, with a short time limit.
    pub async fn status_of(&self, id: u64) -> Option<proto::StatusResponse> {
        let mut client = self.fleet(id).await;
        let reply = tokio::time::timeout(READ_TIMEOUT, client.status(proto::StatusRequest {}))
            .await
            .ok()?
            .ok()?;
        Some(reply.into_inner())
    }

    /// The leader: of the answering nodes that name themselves leader (a restarted one may
    /// still believe it leads), the one with the highest term.
    pub async fn leader(&self) -> Option<u64> {
        let mut claims = Vec::new();
        for id in self.answering() {
            if let Some(status) = self.status_of(id).await
                && status.leader_id == id
            {
                claims.push((status.term, id));
            }
        }
        claims.into_iter().max().map(|(_, id)| id)
    }

    /// Resolves a node fault's target among the answering nodes.
    pub async fn resolve(&self, target: Target) -> Option<u64> {
        let leader = self.leader().await;
        match target {
            Target::Leader => leader,
            Target::Follower(n) => {
                let followers: Vec<u64> = self
                    .answering()
                    .into_iter()
                    .filter(|id| Some(*id) != leader)
                    .collect();
                (!followers.is_empty()).then(|| followers[n as usize % followers.len()])
            }
        }
    }

    /// Runs `change` against each answering node in turn until one acknowledges it.
    async fn retry<T, F, Fut>(&self, what: &str, mut change: F) -> anyhow::Result<T>
    where
        F: FnMut(FleetClient<tonic::transport::Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<T, tonic::Status>>,
    {
        let deadline = Instant::now() + CHANGE_TIMEOUT;
        let mut last = String::from("no node answers");
        loop {
            for id in self.answering() {
                let client = self.fleet(id).await;
                match tokio::time::timeout(Duration::from_secs(10), change(client)).await {
                    Ok(Ok(value)) => return Ok(value),
                    Ok(Err(status)) => last = format!("node {id}: {}", status.message()),
                    Err(_) => last = format!("node {id}: no answer in 10s"),
                }
            }
            if Instant::now() > deadline {
                bail!("{what}: not acknowledged in {CHANGE_TIMEOUT:?}; last error: {last}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Applies manifests through any node, retrying until acknowledged.
    pub async fn apply(&self, manifests: &str) -> anyhow::Result<()> {
        self.retry("apply", |mut client| async move {
            client
                .apply(proto::ApplyRequest {
                    manifests: manifests.as_bytes().to_vec(),
                    origin: "chaos".into(),
                    dry_run: false,
                })
                .await
                .map(|_| ())
        })
        .await
    }

    pub async fn delete_cluster(&self, name: &str) -> anyhow::Result<()> {
        self.retry("delete", |mut client| async move {
            client
                .delete(proto::DeleteRequest {
                    objects: vec![proto::ObjectRef {
                        kind: "Cluster".into(),
                        namespace: "default".into(),
                        name: name.into(),
                    }],
                })
                .await
                .map(|_| ())
        })
        .await
    }

    pub async fn pause(&self, pause: bool) -> anyhow::Result<()> {
        self.retry("pause", |mut client| async move {
            let request = proto::RolloutRequest {
                namespace: "default".into(),
                name: "demo".into(),
            };
            if pause {
                client.rollout_pause(request).await.map(|_| ())
            } else {
                client.rollout_resume(request).await.map(|_| ())
            }
        })
        .await
    }

    /// Commits the next app version.
    pub fn commit(&mut self) -> anyhow::Result<()> {
        let version = self.ledger.version + 1;
        let commit = self.fixture.repo.commit(
            &format!("v{version}"),
            &format!("nginx:1.{version}"),
            &format!("version {version}"),
        )?;
        self.ledger.version = version;
        self.ledger.commit = commit;
        Ok(())
    }

    pub async fn edit_group(&mut self, greeting: &str, budget_percent: u32) -> anyhow::Result<()> {
        let mut edited = self.ledger.clone();
        edited.greeting = greeting.into();
        edited.budget_percent = budget_percent;
        let before = std::mem::replace(&mut self.ledger, edited);
        // Counted before the apply: the new budget may be in force before the answer comes.
        self.ledger.note_budget();
        if let Err(error) = self.apply(&self.group_manifest()).await {
            let largest = self.ledger.largest_budget;
            self.ledger = before;
            self.ledger.largest_budget = largest;
            return Err(error);
        }
        Ok(())
    }

    pub async fn add_cluster(&mut self) -> anyhow::Result<String> {
        self.ledger.added += 1;
        let name = format!("n{:03}", self.ledger.added);
        self.fixture.sim.add_cluster(&name)?;
        self.ledger.clusters.insert(name.clone());
        self.ledger.note_budget();
        self.apply(&self.cluster_manifest(&name)?).await?;
        Ok(name)
    }

    pub async fn remove_cluster(&mut self, index: usize) -> anyhow::Result<String> {
        let name = self.initial[index % self.initial.len()].clone();
        self.delete_cluster(&name).await?;
        self.ledger.clusters.remove(&name);
        Ok(name)
    }

    /// Restarts node `id` from its data directory when it is not running, and continues it
    /// when it is stopped.
    pub fn revive(&mut self, id: u64) {
        if self.stopped.remove(&id) {
            self.group.signal(id, "-CONT");
        }
        if !self.group.is_running(id) {
            self.group.spawn(id);
        }
    }

    /// Everything healed: every node running, no target fault, the git host up.
    pub async fn heal(&mut self) -> anyhow::Result<()> {
        for id in self.group.nodes.keys().copied().collect::<Vec<_>>() {
            self.revive(id);
        }
        for name in self.fixture.sim.cluster_names() {
            self.fixture.sim.clear_faults(&name)?;
        }
        self.fixture.start_git();
        if self.ledger.paused {
            self.pause(false).await?;
            self.ledger.paused = false;
        }
        self.log("healed");
        Ok(())
    }

    /// The demo ConfigMap's `version` and `greeting` on every cluster of the ledger.
    pub fn deployed(&self) -> BTreeMap<String, (String, String)> {
        self.ledger
            .clusters
            .iter()
            .map(|name| {
                let data = self
                    .fixture
                    .sim
                    .get_object(name, "v1", "ConfigMap", Some("demo"), "demo-config")
                    .ok()
                    .flatten()
                    .map(|o| o["data"].clone())
                    .unwrap_or_default();
                let text = |key: &str| data[key].as_str().unwrap_or_default().to_string();
                (name.clone(), (text("version"), text("greeting")))
            })
            .collect()
    }

    /// Every object of the four kinds as node `id` holds them, by kind and key.
    pub async fn objects(&self, id: u64) -> Option<BTreeMap<String, serde_json::Value>> {
        let mut client = self.fleet(id).await;
        let mut out = BTreeMap::new();
        for kind in ["Source", "SyncGroup", "Cluster", "Sync"] {
            let reply = tokio::time::timeout(
                READ_TIMEOUT,
                client.list(proto::ListRequest {
                    kind: kind.into(),
                    ..Default::default()
                }),
            )
            .await
            .ok()?
            .ok()?
            .into_inner();
            for object in reply.objects {
                let reference = object.r#ref.unwrap_or_default();
                let value: serde_json::Value = serde_json::from_slice(&object.json).ok()?;
                out.insert(
                    format!("{kind}/{}/{}", reference.namespace, reference.name),
                    value,
                );
            }
        }
        Some(out)
    }
}

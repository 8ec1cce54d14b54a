//! The system under a schedule: fleetsim, the demo repository behind a `git daemon`, a group of
//! `starling node` processes, and the ledger of every change the schedule made and had
//! acknowledged (what must survive every crash). A disaster and its recovery: [`disaster`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use proto::fleet_client::FleetClient;

use crate::harness::pull::{Agents, enrol};
use crate::harness::{self, DemoFixture, Group, Options};
use crate::schedule::{Schedule, Target};

mod disaster;

pub use disaster::Disaster;

/// How long one change (an apply, a pause) is retried across leader changes before the run
/// gives up.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one replica may take to answer a read.
const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a parallel start may take to form a group with every replica.
const FORM_TIMEOUT: Duration = Duration::from_secs(60);
/// `starling node --max-voters` default.
const MAX_VOTERS: usize = 5;
/// The replicas' `--agent-grace`: how soon an agent that went away leaves its cluster
/// unreachable.
const AGENT_GRACE: &str = "3s";

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

/// The label that takes a cluster out of the SyncGroup's selector ([`Fault::Deselect`]).
pub const OUT_LABEL: &str = "chaos-out";
/// The greeting the second installation's SyncGroup writes: any write carrying it on a
/// target is a write by an installation that does not hold it.
pub const SHADOW_GREETING: &str = "second-installation";

/// A second installation (one replica) pointed at clusters the first one holds.
pub struct Shadow {
    pub group: Group,
    /// Its identity (`starling status`).
    pub installation: String,
    pub clusters: Vec<String>,
}

pub struct World {
    pub fixture: DemoFixture,
    pub group: Group,
    pub ledger: Ledger,
    /// Nodes stopped with SIGSTOP.
    pub stopped: BTreeSet<u64>,
    /// Initial push cluster names, in order (schedules name clusters by index).
    pub initial: Vec<String>,
    /// Pull cluster names, in order (schedules name agents by index).
    pub pull: Vec<String>,
    /// The agents of the pull clusters.
    pub agents: Agents,
    /// Clusters unreachable for the whole fault window: push clusters down, pull clusters
    /// whose agent is away.
    pub unreachable_throughout: BTreeSet<String>,
    /// What a `recover` on the running fleet did wrong (it must be refused, or limited to
    /// pending clusters, and never freeze the fleet).
    pub recover_violations: Vec<String>,
    /// Every replica lost so far ([`World::disaster`]).
    pub disasters: Vec<Disaster>,
    /// The clusters deleted so far, each with the last audit sequence before its deletion:
    /// what Starling applied to them must be pruned.
    pub removed: Vec<(String, u64)>,
    /// Clusters relabelled out of the SyncGroup's selector now ([`Fault::Deselect`]).
    pub out: BTreeSet<String>,
    /// Clusters relabelled out so far, each with the last audit sequence before: their prunes
    /// go through the budget too.
    pub deselected: Vec<(String, u64)>,
    /// A second installation pointed at a few of the clusters ([`Fault::Shadow`]).
    pub shadow: Option<Shadow>,
    /// Where the backups of the disasters go.
    backups: tempfile::TempDir,
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
            clusters: shape.clusters + shape.pull,
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
                extra_args: vec![
                    "--max-concurrent-syncs".into(),
                    workers.to_string(),
                    format!("--agent-grace={AGENT_GRACE}"),
                ],
                log: Some(NODE_LOG.into()),
                ..Options::default()
            },
        );
        let mut initial = fixture.sim.cluster_names();
        let pull = initial.split_off(shape.clusters);
        let ledger = Ledger {
            version: 1,
            commit: String::new(),
            greeting: "hello".into(),
            budget_percent: 10,
            largest_budget: 0,
            clusters: initial.iter().chain(&pull).cloned().collect(),
            paused: false,
            added: 0,
        };
        let mut world = World {
            fixture,
            group,
            ledger,
            stopped: BTreeSet::new(),
            initial,
            pull,
            agents: Agents::quiet(),
            unreachable_throughout: BTreeSet::new(),
            recover_violations: Vec::new(),
            removed: Vec::new(),
            out: BTreeSet::new(),
            deselected: Vec::new(),
            shadow: None,
            disasters: Vec::new(),
            backups: tempfile::tempdir()?,
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
        world.enrol_agents().await?;
        // Unreachable for the whole window: push clusters down, agents killed once their
        // cluster is registered.
        for index in &schedule.down_throughout {
            let name = world.initial[index % world.initial.len()].clone();
            world.fixture.sim.set_down(&name, true)?;
            world.unreachable_throughout.insert(name);
        }
        for index in &schedule.away_throughout {
            let name = world.pull[index % world.pull.len()].clone();
            world.agents.kill(&name);
            world.unreachable_throughout.insert(name);
        }
        Ok(world)
    }

    /// Enrols every pull cluster (its Upstream and capability Secret, as the agent chart
    /// installs them) and starts its agent; waits until each has registered its Cluster. The
    /// installation is open, so the agents present no token.
    async fn enrol_agents(&mut self) -> anyhow::Result<()> {
        if self.pull.is_empty() {
            return Ok(());
        }
        let addresses: Vec<String> = self.group.nodes.values().map(|n| n.grpc.clone()).collect();
        let addresses = addresses.join(",");
        for (index, name) in self.pull.clone().iter().enumerate() {
            std::fs::write(
                self.agents.kubeconfig(name),
                self.fixture.sim.kubeconfig(name)?,
            )?;
            enrol(
                &self.agents.kubeconfig(name),
                name,
                &addresses,
                "",
                None,
                index,
            )
            .await;
            self.agents.spawn(name);
        }
        let deadline = Instant::now() + FORM_TIMEOUT;
        loop {
            let registered = match self.objects_of_any().await {
                Some(objects) => self
                    .pull
                    .iter()
                    .filter(|name| objects.contains_key(&format!("Cluster/default/{name}")))
                    .count(),
                None => 0,
            };
            if registered == self.pull.len() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "{registered} of {} agents registered their cluster within {FORM_TIMEOUT:?}",
                    self.pull.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The objects as the first answering node holds them.
    async fn objects_of_any(&self) -> Option<BTreeMap<String, serde_json::Value>> {
        for id in self.answering() {
            if let Some(objects) = self.objects(id).await {
                return Some(objects);
            }
        }
        None
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
            "apiVersion: starling.dev/v1alpha1\nkind: SyncGroup\nmetadata: {{name: demo}}\nspec:\n  sourceRef: {{name: demo}}\n  clusterSelector: {{matchExpressions: [{{key: {OUT_LABEL}, operator: DoesNotExist}}]}}\n  template:\n    path: app\n    substitute:\n      REGION: \"${{cluster.labels.region}}\"\n      GREETING: \"{}\"\n  rollout:\n    maxUnavailable: \"{}%\"\n---\n",
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
        let out = if self.out.contains(name) {
            format!(", {OUT_LABEL}: \"yes\"")
        } else {
            String::new()
        };
        Ok(format!(
            "{secret}\n---\napiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: {name}, labels: {{region: r{}{out}}}}}\nspec: {{}}\n---\n",
            name.len() % 3
        ))
    }

    /// Relabels a cluster out of the SyncGroup's selector, or back in.
    pub async fn relabel(&mut self, name: &str, out: bool) -> anyhow::Result<()> {
        if out {
            let since = self
                .fixture
                .sim
                .audit(&fleetsim::AuditFilter::default())
                .last()
                .map_or(0, |record| record.seq);
            self.out.insert(name.to_string());
            self.deselected.push((name.to_string(), since));
        } else {
            self.out.remove(name);
        }
        let manifest = self.cluster_manifest(name)?;
        self.apply(&manifest).await
    }

    /// This installation's identity, from any answering replica.
    pub async fn installation(&self) -> Option<String> {
        for id in self.answering() {
            let mut client = self.fleet(id).await;
            let request = tonic::Request::new(proto::StatusRequest {});
            if let Ok(Ok(status)) =
                tokio::time::timeout(Duration::from_secs(2), client.status(request)).await
            {
                let installation = status.into_inner().installation;
                if !installation.is_empty() {
                    return Some(installation);
                }
            }
        }
        None
    }

    /// Starts a second installation (one replica) with its own SyncGroup over the clusters of
    /// `indexes` this installation has fenced already (a target nobody fenced yet goes to
    /// whichever writes first, which is not what this fault is about). Returns them.
    pub async fn start_shadow(&mut self, indexes: &[usize]) -> anyhow::Result<Vec<String>> {
        if self.shadow.is_some() {
            return Ok(Vec::new());
        }
        let main = self
            .installation()
            .await
            .context("the installation's identity")?;
        let mut clusters: Vec<String> = Vec::new();
        for index in indexes {
            let name = self.initial[index % self.initial.len()].clone();
            let fence = crate::invariants::fence_of(&self.fixture.sim, &name);
            let ours = fence
                .as_ref()
                .and_then(|f| f["data"]["installation"].as_str())
                == Some(main.as_str());
            if ours
                && self.ledger.clusters.contains(&name)
                && !self.unreachable_throughout.contains(&name)
                && !clusters.contains(&name)
            {
                clusters.push(name);
            }
        }
        if clusters.is_empty() {
            return Ok(clusters);
        }
        let group = Group::start(1, Options::default()).await;
        let mut manifests = self.source_manifest();
        manifests.push_str(&format!(
            "apiVersion: starling.dev/v1alpha1\nkind: SyncGroup\nmetadata: {{name: demo}}\nspec:\n  sourceRef: {{name: demo}}\n  clusterSelector: {{}}\n  template:\n    path: app\n    substitute:\n      REGION: \"${{cluster.labels.region}}\"\n      GREETING: \"{SHADOW_GREETING}\"\n  rollout:\n    maxUnavailable: 1\n---\n"
        ));
        for name in &clusters {
            manifests.push_str(&self.cluster_manifest(name)?);
        }
        group
            .apply(1, &manifests)
            .await
            .map_err(|status| anyhow::anyhow!("the second installation's specs: {status}"))?;
        let deadline = Instant::now() + Duration::from_secs(20);
        let installation = loop {
            let mut client = group.fleet(1).await;
            if let Ok(status) = client
                .status(tonic::Request::new(proto::StatusRequest {}))
                .await
                && !status.get_ref().installation.is_empty()
            {
                break status.into_inner().installation;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the second installation has no identity after 20 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        self.shadow = Some(Shadow {
            group,
            installation,
            clusters: clusters.clone(),
        });
        Ok(clusters)
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
                    ..Default::default()
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
                    orphan: false,
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
        let since = self
            .fixture
            .sim
            .audit(&fleetsim::AuditFilter::default())
            .last()
            .map_or(0, |record| record.seq);
        self.delete_cluster(&name).await?;
        self.removed.push((name.clone(), since));
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

    /// Runs the `starling` CLI against each answering node in turn until one succeeds;
    /// returns its output. A `recover` whose answer was lost counts as done when the retry
    /// says the installation is no longer recovering.
    async fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        let deadline = Instant::now() + CHANGE_TIMEOUT;
        let mut last = String::from("no node answers");
        let mut attempts = 0;
        loop {
            for id in self.answering() {
                attempts += 1;
                let address = self.group.nodes[&id].grpc.clone();
                let output = tokio::process::Command::new(harness::binary())
                    .args(["--server", &address, "--timeout", "20s"])
                    .args(args)
                    .output()
                    .await
                    .context("run the starling CLI")?;
                let said = String::from_utf8_lossy(&output.stdout).into_owned();
                let error = String::from_utf8_lossy(&output.stderr).into_owned();
                if output.status.success() {
                    return Ok(said);
                }
                if args == ["recover"] && error.contains("not recovering") && attempts > 1 {
                    return Ok(format!("(an earlier attempt finished it) {error}"));
                }
                last = format!("node {id}: {}", error.trim());
            }
            if Instant::now() > deadline {
                bail!("starling {args:?}: no success in {CHANGE_TIMEOUT:?}; last: {last}");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Notes that a `recover` on the running fleet left it recovering (every rollout frozen).
    pub fn recovery_left_on(&mut self, answer: &str) {
        self.recover_violations.push(format!(
            "the fleet is recovering after a recover on a running fleet (it said: {answer})"
        ));
    }

    /// Everything healed: every node running, no target fault, the git host up.
    pub async fn heal(&mut self) -> anyhow::Result<()> {
        for id in self.group.nodes.keys().copied().collect::<Vec<_>>() {
            self.revive(id);
        }
        for name in self.fixture.sim.cluster_names() {
            self.fixture.sim.clear_faults(&name)?;
        }
        for name in &self.pull {
            if !self.agents.is_running(name) {
                self.agents.spawn(name);
            }
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

//! The control plane of a simulated run: a client host that sets up a fleet (a source, clusters
//! and a SyncGroup with a budget), then commits new revisions and adds clusters while the faults
//! run. Mid-rollout it also relabels [`DESELECTED`] out of the group's selector, deletes
//! [`DELETED`] (with prune), and has another installation fence [`FOREIGN`], which it adopts
//! once the changes are done. It writes through the real Raft forwarding client (`starling_raft::write::Forwarder`)
//! over the simulated network, to whichever replica leads; a write counts as acknowledged
//! only when the leader answered.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use fleet::Command;
use fleet::manifest::{Kind, ObjectKey};
use fleet::state::ExpectedRevision;
use starling_raft::write::Forwarder;
use starling_raft::{NetworkConfig, codec};
use tokio::time::Instant;

use crate::net;
use crate::replica::{AT, address};
use crate::world::World;

/// What the client does, and when.
#[derive(Clone, Debug)]
pub struct Script {
    pub clusters: usize,
    pub max_unavailable: u32,
    /// New revisions committed during the fault window, and clusters added.
    pub commits: usize,
    pub added_clusters: usize,
    /// Time between two changes.
    pub every: Duration,
}

pub const SOURCE: &str = "fleet/repo";
/// The cluster whose labels stop matching the SyncGroup's selector mid-rollout.
pub const DESELECTED: &str = "fleet/c001";
/// The cluster deleted mid-rollout.
pub const DELETED: &str = "fleet/c002";
/// The cluster another installation fences mid-rollout, adopted at the end.
pub const FOREIGN: &str = "fleet/c003";
/// The other installation's identity.
const OTHER_INSTALLATION: &str = "inst-elsewhere";

pub fn revision(n: usize) -> String {
    format!("r{n:04}")
}

fn resource(yaml: &str) -> Box<fleet::manifest::Resource> {
    let mut parsed = fleet::manifest::parse_manifests(yaml).expect("simulation manifest parses");
    Box::new(parsed.remove(0))
}

/// A cluster and its kubeconfig Secret (the worker needs one; the simulated target does not
/// read it).
fn cluster(name: &str) -> [Command; 2] {
    let [secret, cluster] = labelled_cluster(name, "yes");
    [secret, cluster]
}

/// [`cluster`] with label `all` (the SyncGroup selects `all: "yes"`).
fn labelled_cluster(name: &str, all: &str) -> [Command; 2] {
    [
        Command::UpsertSpec {
            resource: resource(&format!(
                "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}-kubeconfig\n  namespace: fleet\nstringData:\n  value: simulated\n"
            )),
            at: AT.into(),
        },
        Command::UpsertSpec {
            resource: resource(&format!(
                "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: {name}\n  namespace: fleet\n  labels:\n    all: \"{all}\"\nspec: {{}}\n"
            )),
            at: AT.into(),
        },
    ]
}

/// The artifact of revision `n`: a few bytes, content-addressed like a real one (the
/// simulated target never reads it).
pub fn artifact(n: usize) -> (Vec<u8>, fleet::resources::ArtifactRef) {
    use sha2::Digest as _;
    let bytes = format!("simulated artifact of {}", revision(n)).into_bytes();
    let digest = source::Digest::from_bytes(sha2::Sha256::digest(&bytes).into());
    let reference = fleet::resources::ArtifactRef {
        digest: digest.to_string(),
        size: bytes.len() as u64,
    };
    (bytes, reference)
}

/// Puts the artifacts of every revision the script commits into the store at `root`.
pub fn store_artifacts(root: &std::path::Path, script: &Script) {
    let store = source::ArtifactStore::open(root).expect("the simulation's artifact store opens");
    for n in 1..=script.commits + 1 {
        let (bytes, reference) = artifact(n);
        let digest = reference.digest.parse().expect("a digest parses");
        store
            .import_verified(digest, 1 << 20, [Ok::<_, String>(bytes)])
            .expect("an artifact is stored");
    }
}

fn resolved(n: usize) -> Command {
    Command::SourceResolved {
        source: SOURCE.into(),
        revision: revision(n),
        artifact: Some(artifact(n).1),
        expected: ExpectedRevision::Any,
        inputs: Default::default(),
        at: AT.into(),
    }
}

fn setup(script: &Script) -> Vec<Command> {
    let mut commands = vec![source()];
    commands.extend((0..script.clusters).flat_map(|i| cluster(&format!("c{i:03}"))));
    commands.push(group(script.max_unavailable));
    commands.push(resolved(1));
    commands
}

fn source() -> Command {
    Command::UpsertSpec {
        resource: resource(
            "apiVersion: starling.dev/v1alpha1\nkind: Source\nmetadata:\n  name: repo\n  namespace: fleet\nspec:\n  git:\n    url: https://git.example/repo.git\n    ref:\n      branch: main\n",
        ),
        at: AT.into(),
    }
}

/// The SyncGroup: every cluster labelled `all: "yes"`, `maxUnavailable` clusters at once.
fn group(max_unavailable: u32) -> Command {
    Command::UpsertSpec {
        resource: resource(&format!(
            "apiVersion: starling.dev/v1alpha1\nkind: SyncGroup\nmetadata:\n  name: app\n  namespace: fleet\nspec:\n  sourceRef:\n    name: repo\n  clusterSelector:\n    matchLabels:\n      all: \"yes\"\n  template:\n    path: apps\n  rollout:\n    maxUnavailable: {}\n",
            max_unavailable
        )),
        at: AT.into(),
    }
}

/// A command's name in the trace.
fn command_name(command: &Command) -> &'static str {
    match command {
        Command::UpsertSpec { .. } => "UpsertSpec",
        Command::RetireSpec { .. } => "RetireSpec",
        Command::SourceResolved { .. } => "SourceResolved",
        Command::AdoptCluster { .. } => "AdoptCluster",
        _ => "a command",
    }
}

/// Sends `commands` to the leader until one attempt is acknowledged or `attempts` ran out.
async fn write(
    world: &Rc<RefCell<World>>,
    forwarder: &Forwarder,
    commands: &[Command],
    attempts: u32,
) -> bool {
    let encoded: Vec<Vec<u8>> = commands
        .iter()
        .map(|c| codec::encode("command", c).expect("a command encodes"))
        .collect();
    for _ in 0..attempts {
        let leader = world
            .borrow()
            .nodes
            .values()
            .find_map(|node| node.raft.current_leader().map(|(id, _)| id));
        if let Some(leader) = leader {
            let started = Instant::now();
            let sent = forwarder
                .forward(&address(leader), encoded.clone(), Duration::from_secs(2))
                .await;
            match sent {
                Ok(_) => {
                    let mut world = world.borrow_mut();
                    world.commit_latencies.push(started.elapsed());
                    let names: Vec<&str> = commands.iter().map(command_name).collect();
                    world.trace.push(format!(
                        "{:?} client: {} acknowledged",
                        turmoil::sim_elapsed().unwrap_or_default(),
                        names.join(", ")
                    ));
                    return true;
                }
                Err(error) => world
                    .borrow_mut()
                    .trace
                    .push(format!("client write to node {leader} failed: {error}")),
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// Runs the script; the harness ends the run, so this only returns early if set-up failed.
pub async fn run(world: Rc<RefCell<World>>, script: Script) -> turmoil::Result {
    let forwarder = Forwarder::new(NetworkConfig {
        connector: Some(net::connector()),
        ..NetworkConfig::default()
    });
    if !write(&world, &forwarder, &setup(&script), 200).await {
        return Err("the fleet could not be set up within 200 attempts".into());
    }
    world.borrow_mut().trace.push("set up".into());
    let mut added = 0;
    for n in 0..script.commits.max(script.added_clusters).max(2) {
        tokio::time::sleep(script.every).await;
        if n < script.commits {
            write(&world, &forwarder, &[resolved(n + 2)], 5).await;
        }
        if added < script.added_clusters {
            let name = format!("a{added:03}");
            if write(&world, &forwarder, &cluster(&name), 5).await {
                world.borrow_mut().acked.push(format!("fleet/{name}"));
            }
            added += 1;
        }
        let name = |key: &'static str| key.split_once('/').map_or(key, |(_, name)| name);
        match n {
            0 => {
                // A second installation pointed at part of the fleet writes its fence.
                world.borrow().landed.fence(FOREIGN, OTHER_INSTALLATION);
                world
                    .borrow_mut()
                    .trace
                    .push(format!("{FOREIGN} fenced by another installation"));
                world.borrow_mut().left_group.insert(DESELECTED.into());
                write(
                    &world,
                    &forwarder,
                    &labelled_cluster(name(DESELECTED), "no"),
                    200,
                )
                .await;
            }
            1 => {
                world.borrow_mut().left_group.insert(DELETED.into());
                let key = ObjectKey::new(Kind::Cluster, "fleet", name(DELETED));
                write(&world, &forwarder, &[Command::RetireSpec { key }], 200).await;
            }
            _ => {}
        }
    }
    tokio::time::sleep(script.every).await;
    world.borrow_mut().adopt_requested.insert(FOREIGN.into());
    let adopt = Command::AdoptCluster {
        cluster: FOREIGN.into(),
        at: AT.into(),
    };
    write(&world, &forwarder, &[adopt], 200).await;
    std::future::pending::<()>().await;
    Ok(())
}

/// Clusters set up per write in a scale run (two commands each).
const CLUSTERS_PER_WRITE: usize = 250;

/// The client of a scale run ([`crate::scale`]): sets up `clusters` clusters and the group
/// with a budget of `max_unavailable`, resolves the first revision, waits for the cold
/// rollout to complete, then resolves the second. It marks each moment in the world.
pub async fn run_scale(
    world: Rc<RefCell<World>>,
    clusters: usize,
    max_unavailable: u32,
) -> turmoil::Result {
    let forwarder = Forwarder::new(NetworkConfig {
        connector: Some(net::connector()),
        ..NetworkConfig::default()
    });
    let now = || turmoil::sim_elapsed().unwrap_or_default();
    if !write(&world, &forwarder, &[source()], 200).await {
        return Err("the source could not be set up within 200 attempts".into());
    }
    for first in (0..clusters).step_by(CLUSTERS_PER_WRITE) {
        let batch: Vec<Command> = (first..clusters.min(first + CLUSTERS_PER_WRITE))
            .flat_map(|i| cluster(&format!("c{i:06}")))
            .collect();
        if !write(&world, &forwarder, &batch, 200).await {
            return Err(format!("clusters from {first} could not be set up").into());
        }
    }
    world.borrow_mut().marks.insert("clusters", now());
    if !write(
        &world,
        &forwarder,
        &[group(max_unavailable), resolved(1)],
        200,
    )
    .await
    {
        return Err("the group could not be set up within 200 attempts".into());
    }
    world.borrow_mut().marks.insert("first revision", now());
    while !rolled_out(&world.borrow(), &revision(1), clusters) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    world.borrow_mut().marks.insert("first rollout", now());
    if !write(&world, &forwarder, &[resolved(2)], 200).await {
        return Err("the second revision could not be resolved within 200 attempts".into());
    }
    world.borrow_mut().marks.insert("second revision", now());
    std::future::pending::<()>().await;
    Ok(())
}

/// The group's rollout of `revision` is complete on every one of `clusters` clusters, as the
/// leader's state says (the scale harness checks the targets too).
pub fn rolled_out(world: &World, revision: &str, clusters: usize) -> bool {
    let Some(leader) = crate::harness::current_leader(world) else {
        return false;
    };
    let Some(node) = world.nodes.get(&leader) else {
        return false;
    };
    let status = node.raft.reader().read(|state| state.group_status(GROUP));
    status.is_some_and(|status| {
        status.target_revision.as_deref() == Some(revision)
            && status.summary.total as usize == clusters
            && status.summary.updated as usize == clusters
    })
}

/// The SyncGroup's key.
pub const GROUP: &str = "fleet/app";

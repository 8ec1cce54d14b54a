//! The voter set with real `starling node` processes on loopback (issue 12, section 2): replicas
//! started all at once end up as voters and survive losing the leader, on a busy machine; with
//! more replicas than `--max-voters` the voter set stays full, refilled from the learners after
//! a voter is lost or removed; a replica back with an empty disk under the same id rejoins,
//! catches up and votes again, counted once (also when it is the lowest id, which must not
//! start a second group); a write acknowledged right after a parallel start survives the loss
//! of the first replica's disk; and `starling dev` ends with every replica a voter.

mod harness;

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use harness::{CpuBurners, Group, Options, Roles, binary, fleet_manifests, wait_until};

fn ids(ids: &[u64]) -> BTreeSet<u64> {
    ids.iter().copied().collect()
}

/// Each id once in the member list.
fn listed_once(roles: &Roles) -> bool {
    let unique: BTreeSet<u64> = roles.listed.iter().copied().collect();
    unique.len() == roles.listed.len()
}

/// Waits until the leader's settled roles satisfy `ok` and returns them; on time-out, fails
/// with the last roles seen (and whether they were settled).
async fn wait_for_roles(
    group: &Group,
    within: Duration,
    what: &str,
    ok: impl Fn(&Roles) -> bool,
) -> Roles {
    let deadline = Instant::now() + within;
    let mut last = None;
    loop {
        match group.settled_roles().await {
            Some(roles) if ok(&roles) => return roles,
            Some(roles) => last = Some(("settled", roles)),
            None => {
                if let Some(roles) = group.leader_roles().await {
                    last = Some(("not settled", roles));
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}; last seen: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until a running node other than `old` names itself leader; returns it.
async fn wait_for_new_leader(group: &Group, old: u64, within: Duration) -> u64 {
    let leader = Cell::new(0);
    wait_until(within, "a new leader", || async {
        leader.set(group.leader_roles().await.map_or(0, |roles| roles.leader));
        leader.get() != 0 && leader.get() != old
    })
    .await;
    leader.get()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_started_at_once_all_become_voters_and_survive_losing_the_leader_on_a_busy_machine()
 {
    for round in 1..=10 {
        // Busy while this group runs (and only then: other tests wait for the harness lock).
        let mut group = Group::prepare(3, Options::default());
        let burners = CpuBurners::start(2);
        let started = Instant::now();
        group.spawn_all();
        wait_for_roles(
            &group,
            Duration::from_secs(10).saturating_sub(started.elapsed()),
            "all 3 replicas are voters",
            |roles| roles.voters == ids(&[1, 2, 3]),
        )
        .await;
        let converged = started.elapsed();
        let leader = group.leader_roles().await.expect("a leader").leader;
        group.kill(leader);
        let killed = Instant::now();
        let successor = wait_for_new_leader(&group, leader, Duration::from_secs(5)).await;
        eprintln!(
            "round {round}: 3 voters after {converged:?}; leader {leader} killed, node {successor} leads after {:?}",
            killed.elapsed()
        );
        drop(burners);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_replicas_with_three_voters_keep_the_voter_set_full_after_a_loss_and_a_removal() {
    let options = Options {
        down_after: Duration::from_secs(1),
        extra_args: vec!["--max-voters".into(), "3".into()],
        ..Options::default()
    };
    let mut group = Group::prepare(5, options);
    let _busy = CpuBurners::start(2);
    let started = Instant::now();
    group.spawn_all();
    wait_for_roles(
        &group,
        Duration::from_secs(15),
        "3 voters and 2 learners",
        |roles| roles.voters.len() == 3 && roles.learners.len() == 2 && listed_once(roles),
    )
    .await;
    eprintln!("3 voters and 2 learners after {:?}", started.elapsed());

    // The leader is killed: the two other voters elect a new one.
    let leader = group.leader_roles().await.expect("a leader").leader;
    group.kill(leader);
    let killed = Instant::now();
    let successor = wait_for_new_leader(&group, leader, Duration::from_secs(5)).await;
    eprintln!(
        "leader {leader} killed; node {successor} leads after {:?}",
        killed.elapsed()
    );

    // It stays Down: after ten `--down-after` periods a live learner takes its vote, and it
    // stays a member as a learner.
    wait_for_roles(
        &group,
        Duration::from_secs(25),
        "the dead voter replaced by a learner",
        |roles| {
            roles.voters.len() == 3
                && !roles.voters.contains(&leader)
                && roles.learners.contains(&leader)
        },
    )
    .await;
    eprintln!("dead voter replaced after {:?}", killed.elapsed());

    // An operator removes a live voter: the remaining live learner is promoted.
    let roles = group.leader_roles().await.expect("a leader");
    let removed = *roles
        .voters
        .iter()
        .find(|id| **id != roles.leader)
        .expect("a follower voter");
    let mut admin = group.admin(roles.leader).await;
    admin
        .remove_node(proto::RemoveNodeRequest { id: removed })
        .await
        .expect("members remove");
    group.kill(removed);
    let removed_at = Instant::now();
    wait_for_roles(
        &group,
        Duration::from_secs(10),
        "the voter set refilled from the learners",
        |roles| {
            roles.voters.len() == 3
                && !roles.listed.contains(&removed)
                && !roles.voters.contains(&leader)
                && listed_once(roles)
        },
    )
    .await;
    eprintln!(
        "voter {removed} removed; refilled after {:?}",
        removed_at.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_back_with_an_empty_disk_rejoins_catches_up_and_votes_again_counted_once() {
    let mut group = Group::start(3, Options::default()).await;
    wait_for_roles(&group, Duration::from_secs(10), "3 voters", |roles| {
        roles.voters == ids(&[1, 2, 3])
    })
    .await;
    group.apply(1, &fleet_manifests(20)).await.expect("apply");

    // A follower other than the lowest id first, then the lowest id (which initialised the
    // group, and must join the existing one rather than start a second).
    let leader = group.leader_roles().await.expect("a leader").leader;
    let follower = [2, 3]
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    for (round, wiped) in [follower, 1].into_iter().enumerate() {
        group.wipe_and_restart(wiped);
        let restarted = Instant::now();
        let extra = format!(
            "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: extra-{round}}}\nspec: {{}}\n"
        );
        wait_until(
            Duration::from_secs(15),
            "a write after the restart",
            || async {
                let via = group.running().map(|n| n.id).find(|id| *id != wiped);
                group.apply(via.unwrap_or(wiped), &extra).await.is_ok()
            },
        )
        .await;
        // Caught up: its applied index reaches the leader's, and it holds every cluster.
        let leader = group.leader_roles().await.expect("a leader").leader;
        let target = group
            .metric(leader, "starling_raft_applied_index")
            .expect("leader metrics");
        wait_until(
            Duration::from_secs(10),
            "the wiped replica's applied index reaches the leader's",
            || async {
                group
                    .metric(wiped, "starling_raft_applied_index")
                    .is_some_and(|applied| applied >= target)
            },
        )
        .await;
        let mut fleet = group.fleet(wiped).await;
        let clusters = fleet
            .list(proto::ListRequest {
                kind: "clusters".into(),
                ..Default::default()
            })
            .await
            .expect("list clusters on the wiped replica")
            .into_inner();
        assert_eq!(
            clusters.objects.len(),
            21 + round,
            "clusters on node {wiped}"
        );
        let caught_up = restarted.elapsed();
        wait_until(
            Duration::from_secs(15),
            "the wiped replica admitted by the leader",
            || async { group.join_finished(wiped) },
        )
        .await;
        // Not left a learner (it was demoted when its join reached the leader), counted once.
        wait_for_roles(
            &group,
            Duration::from_secs(15),
            "the wiped replica a voter again, listed once",
            |roles| {
                roles.voters == ids(&[1, 2, 3])
                    && roles.learners.is_empty()
                    && roles.listed == vec![1, 2, 3]
            },
        )
        .await;
        // One group: every replica names the same leader and the same voters.
        let leader = group.leader_roles().await.expect("a leader").leader;
        for id in 1..=3 {
            let roles = group.roles_of(id).await.expect("every replica answers");
            assert_eq!(roles.leader, leader, "node {id} follows another leader");
            assert_eq!(roles.voters, ids(&[1, 2, 3]), "as node {id} sees it");
        }
        eprintln!(
            "node {wiped} wiped and restarted: caught up after {caught_up:?}, admitted and a voter after {:?}",
            restarted.elapsed()
        );
    }
}

// The harness lock serialises whole tests (each on its own runtime), as `Group` does; holding
// it across awaits is the point.
#[allow(clippy::await_holding_lock)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starling_dev_makes_every_replica_a_voter() {
    let _serial = harness::serial();
    let mut dev = KillOnDrop(
        Command::new(binary())
            .args(["dev", "--clusters", "3", "--port", "0", "-o", "json"])
            .args([
                "--ready-delay",
                "100ms",
                "--latency",
                "1ms",
                "--timeout",
                "60s",
            ])
            .env("STARLING_LOG", "warn,openraft=error")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starling dev starts"),
    );
    let stdout = dev.0.stdout.take().expect("piped stdout");
    // The JSON summary is printed once both rollouts converged; it names a replica. The
    // reader keeps draining stdout afterwards, so dev's hints do not hit a closed pipe.
    let (sender, receiver) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut sender = Some(sender);
        let mut text = String::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if sender.is_none() {
                continue;
            }
            text.push_str(&line);
            text.push('\n');
            if line == "}"
                && let Some(sender) = sender.take()
            {
                let _ = sender.send(std::mem::take(&mut text));
            }
        }
    });
    let summary = tokio::time::timeout(Duration::from_secs(120), receiver)
        .await
        .expect("dev converges")
        .expect("dev prints a summary");
    let summary: serde_json::Value = serde_json::from_str(&summary)
        .unwrap_or_else(|error| panic!("dev summary is JSON ({error}): {summary}"));
    let server = summary["server"]
        .as_str()
        .expect("summary names a server")
        .to_string();
    let roles = RefCell::new(None);
    wait_until(
        Duration::from_secs(10),
        "every dev replica a voter",
        || async {
            let mut client = proto::admin_client::AdminClient::new(harness::channel(&server));
            let Ok(reply) = client.members(proto::MembersRequest {}).await else {
                return false;
            };
            let members = reply.into_inner().members;
            *roles.borrow_mut() = Some(members.iter().map(|m| (m.id, m.voter)).collect::<Vec<_>>());
            members.len() == 3 && members.iter().all(|m| m.voter)
        },
    )
    .await;
    eprintln!("dev members (id, voter): {:?}", roles.borrow());
}

/// A child process killed when the test ends, whether it passed or not.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_acknowledged_right_after_a_parallel_start_survives_losing_the_first_disk() {
    // Right after a parallel start the lowest replica leads a group of one until the others
    // join. A write it acknowledged then would live on its disk only.
    let mut group = Group::start_together(3, Options::default());
    let applied = group
        .apply(1, &fleet_manifests(2))
        .await
        .expect("the write is acknowledged once the group has formed");
    assert!(!applied.results.is_empty());
    // The disk of the replica that took the write is lost at once; it comes back empty, as a
    // StatefulSet's replacement pod with a new volume does.
    group.wipe_and_restart(1);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut held = Vec::new();
        for id in 1..=3 {
            let mut fleet = group.fleet(id).await;
            let count = fleet
                .list(proto::ListRequest {
                    kind: "clusters".into(),
                    ..Default::default()
                })
                .await
                .map(|r| r.into_inner().objects.len())
                .unwrap_or(0);
            held.push(count);
        }
        if held.iter().all(|count| *count == 2) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the write was lost with the first disk: clusters held per replica {held:?}, roles {:?}",
            group.leader_roles().await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

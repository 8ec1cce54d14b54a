//! Clusters that are down, end to end, with real processes: three replicas, fleetsim targets
//! (push) and `starling agent` processes (pull), every effect checked on fleetsim's audit log.
//! Regression: with `maxUnavailable: 2` and two clusters down, a rollout froze for as long as
//! they stayed away, flipping between "2 in progress" and "2 failed", never `Halted`.
//! - `unreachable: Skip` (the default): a push cluster set down in fleetsim and a pull cluster
//!   whose agent is gone take no place in the budget; the rollout completes for every other
//!   cluster, counts them apart, writes nothing to them, and catches them up once they answer.
//! - `rollout status --watch`, started right after a commit, does not report the previous
//!   rollout complete: it asks the Source to poll first.
//! - `unreachable: Count` with a `progressDeadline`: the two down clusters hold the whole
//!   budget, and the rollout halts naming them; `rollout status --watch` exits non-zero with
//!   that reason.

mod harness;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use fleetsim::AuditFilter;
use harness::pull::Agents;
use harness::{Group, Options, binary, config_versions, demo_fixture, demo_manifests, wait_until};

const PUSH: usize = 8;
const PULL: usize = 2;
const BUDGET: u32 = 2;

fn cli(group: &Group, args: &[&str]) -> Output {
    let node = group.running().next().expect("a running node");
    Command::new(binary())
        .args(["--server", &node.grpc])
        .args(args)
        .output()
        .expect("run starling")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// (revision, phase, updated, unreachable) of SyncGroup `demo`.
async fn rollout(group: &Group) -> Option<(String, String, u32, u32)> {
    let rollout = group.rollout("demo").await?;
    let summary = rollout.summary?;
    Some((
        rollout.target_revision,
        rollout.phase,
        summary.updated,
        summary.unreachable,
    ))
}

/// The application writes (not Starling's fence and inventory) to `cluster` after `since`.
fn app_writes_since(records: &[fleetsim::AuditRecord], cluster: &str, since: u64) -> usize {
    records
        .iter()
        .filter(|r| r.cluster == cluster && r.seq > since && r.namespace.as_deref() == Some("demo"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollouts_go_on_without_clusters_that_are_down_and_catch_them_up() {
    let fixture = demo_fixture(fleetsim::Config {
        clusters: PUSH + PULL,
        ready_delay: Duration::from_millis(20),
        ..fleetsim::Config::default()
    })
    .await;
    let sim = &fixture.sim;
    let group = Group::start_together(
        3,
        Options {
            extra_args: vec!["--agent-grace=2s".into()],
            ..Options::default()
        },
    );
    group.wait_for_members(3).await;
    let names = sim.cluster_names();
    let pull = &names[PUSH..];
    let manifests = demo_manifests(
        sim,
        &fixture.url,
        "",
        &format!("    maxUnavailable: {BUDGET}\n"),
    );
    let manifests: Vec<&str> = manifests
        .split("---\n")
        .filter(|doc| {
            !pull.iter().any(|name| {
                doc.contains(&format!("\"{name}-kubeconfig\""))
                    || doc.contains(&format!("{{name: {name},"))
            })
        })
        .collect();
    group
        .apply(1, &manifests.join("---\n"))
        .await
        .expect("specs applied");
    let addresses: Vec<String> = group.running().map(|n| n.grpc.clone()).collect();
    let addresses = addresses.join(",");
    let mut agents = Agents::new();
    for (index, name) in pull.iter().enumerate() {
        agents
            .enrol_and_spawn(sim, name, &addresses, "", index)
            .await;
    }
    let first = group
        .wait_complete("demo", "", (PUSH + PULL) as u32, 0)
        .await;

    // One push cluster down in fleetsim, one pull cluster's agent gone; then a commit.
    let (push_down, pull_down) = (names[0].clone(), pull[0].clone());
    sim.set_down(&push_down, true).expect("down");
    agents.kill(&pull_down);
    let before = sim
        .audit(&AuditFilter::default())
        .iter()
        .map(|r| r.seq)
        .max()
        .unwrap_or(0);
    fixture
        .repo
        .commit("v2", "nginx:1.28", "v2")
        .expect("commit");

    // Watched right away: the watch asks for a poll, so v1's rollout does not count.
    let watched = cli(
        &group,
        &["rollout", "status", "demo", "--watch", "--timeout", "120s"],
    );
    assert!(watched.status.success(), "{}", text(&watched));
    let (second, phase, updated, unreachable) = rollout(&group).await.expect("rollout");
    assert_ne!(
        second,
        first,
        "the watch reported the previous rollout: {}",
        text(&watched)
    );
    assert_eq!(
        (phase.as_str(), updated, unreachable),
        ("Complete", (PUSH + PULL - 2) as u32, 2)
    );
    let described = text(&cli(
        &group,
        &["describe", "sync", &format!("demo-{push_down}")],
    ));
    assert!(
        described.contains("could not be reached when the rollout came to it"),
        "{described}"
    );
    let records = sim.audit(&AuditFilter::default());
    for cluster in [&push_down, &pull_down] {
        assert_eq!(
            app_writes_since(&records, cluster, before),
            0,
            "{cluster} was written"
        );
    }

    // Back: both caught up through admission.
    sim.set_down(&push_down, false).expect("up");
    agents.spawn(&pull_down);
    wait_until(
        Duration::from_secs(60),
        "the clusters that were down caught up",
        || async {
            config_versions(sim)
                .iter()
                .all(|(_, version)| version == "v2")
                && rollout(&group).await.is_some_and(|(_, phase, updated, _)| {
                    phase == "Complete" && updated == (PUSH + PULL) as u32
                })
        },
    )
    .await;

    let records = sim.audit(&AuditFilter::default());
    for check in fleetsim::checks::writer_checks(&records) {
        assert!(check.ok, "{}: {}", check.name, check.detail);
    }
    for check in [
        chaos::invariants::revisions_forward(&records),
        chaos::invariants::within_budget(&records, BUDGET),
    ] {
        assert!(check.ok, "{}: {}", check.name, check.detail);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counted_unreachable_clusters_halt_the_rollout_at_its_deadline_naming_them() {
    let fixture = demo_fixture(fleetsim::Config {
        clusters: PUSH,
        ready_delay: Duration::from_millis(20),
        ..fleetsim::Config::default()
    })
    .await;
    let sim = &fixture.sim;
    let group = Group::start(3, Options::default()).await;
    group
        .apply(
            1,
            &demo_manifests(
                sim,
                &fixture.url,
                "    timeout: 10s\n",
                &format!(
                    "    maxUnavailable: {BUDGET}\n    unreachable: Count\n    progressDeadline: 5s\n"
                ),
            ),
        )
        .await
        .expect("specs applied");
    let first = group.wait_complete("demo", "", PUSH as u32, 0).await;
    let names = sim.cluster_names();
    let down = [names[2].clone(), names[5].clone()];
    for cluster in &down {
        sim.set_down(cluster, true).expect("down");
    }
    fixture
        .repo
        .commit("v2", "nginx:1.28", "v2")
        .expect("commit");
    let started = Instant::now();
    let watched = cli(
        &group,
        &["rollout", "status", "demo", "--watch", "--timeout", "120s"],
    );
    assert!(
        !watched.status.success(),
        "the watch must fail: {}",
        text(&watched)
    );
    let said = text(&watched);
    let expected = format!(
        "2 clusters unreachable hold the whole budget of {BUDGET}: {}, {}",
        down[0], down[1]
    );
    assert!(
        said.contains("halted") && said.contains(&expected),
        "{said}"
    );
    let (revision, phase, updated, _) = rollout(&group).await.expect("rollout");
    assert_ne!(revision, first);
    // The healthy clusters admitted before the two down ones took the budget were updated.
    assert_eq!(phase, "Halted");
    assert!(updated <= (PUSH - 2) as u32, "{updated}");
    assert!(started.elapsed() < Duration::from_secs(100));
    let history = text(&cli(&group, &["rollout", "history", "demo"]));
    assert!(history.contains(&expected), "{history}");
}

//! Notifications end to end with real processes: three replicas, fleetsim targets, `git
//! daemon`, and receivers on loopback standing in for a webhook and for GitHub's statuses API.
//! An Alert on a SyncGroup gets the rollout's start, progress and completion; the leader is
//! killed mid-rollout and every event still arrives (the queue is in the replicated state);
//! the commit's status goes pending → success; a third Provider whose receiver never answers
//! holds up neither the rollout nor the other two. Then a bad revision (clusters refusing
//! every write) halts the rollout: the webhook hears `RolloutHalted` with the failing
//! clusters and their messages, and the commit's status is failure.

mod harness;

use std::collections::BTreeMap;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, Uri};
use harness::{Group, Options, demo_fixture, demo_manifests, wait_until};
use serde_json::Value;

const CLUSTERS: usize = 50;

/// What a receiver got: path, headers and the JSON body of each request.
#[derive(Clone, Default)]
struct Receiver {
    got: Arc<Mutex<Vec<(String, HeaderMap, Value)>>>,
}

impl Receiver {
    async fn start() -> (Receiver, String) {
        let receiver = Receiver::default();
        let got = receiver.got.clone();
        let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: Bytes| {
            let got = got.clone();
            async move {
                let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                got.lock()
                    .unwrap()
                    .push((uri.path().to_string(), headers, body));
                "ok"
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (receiver, address)
    }

    fn requests(&self, prefix: &str) -> Vec<(String, HeaderMap, Value)> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|(path, _, _)| path.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// Every event the webhook got, in arrival order.
    fn events(&self) -> Vec<Value> {
        self.requests("/hook")
            .into_iter()
            .flat_map(|(_, _, body)| body["events"].as_array().cloned().unwrap_or_default())
            .collect()
    }

    /// How often each event id arrived.
    fn id_counts(&self) -> BTreeMap<u64, usize> {
        let mut counts = BTreeMap::new();
        for (_, _, body) in self.requests("/hook") {
            for id in body["eventIds"].as_array().into_iter().flatten() {
                let number = id
                    .as_str()
                    .and_then(|id| id.rsplit_once('-'))
                    .and_then(|(_, n)| n.parse().ok())
                    .expect("ids end in the state's number");
                *counts.entry(number).or_insert(0) += 1;
            }
        }
        counts
    }

    fn event(&self, reason: &str, revision: &str) -> Option<Value> {
        self.events()
            .into_iter()
            .find(|e| e["reason"] == reason && e["revision"].as_str() == Some(revision))
    }

    fn has(&self, reason: &str, revision: &str) -> bool {
        self.events()
            .iter()
            .any(|e| e["reason"] == reason && e["revision"].as_str() == Some(revision))
    }
}

/// A Provider whose receiver hangs, and an Alert that sends it everything of the group.
fn stuck_manifests(address: &str) -> String {
    format!(
        "---\napiVersion: starling.dev/v1alpha1\nkind: Provider\nmetadata: {{name: stuck}}\nspec: {{type: generic, address: \"{address}/hook\", timeout: 5s}}\n---\napiVersion: starling.dev/v1alpha1\nkind: Alert\nmetadata: {{name: stuck}}\nspec:\n  providerRef: {{name: stuck}}\n  eventSources: [{{kind: \"*\"}}]\n"
    )
}

fn notification_manifests(address: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: hook}}\nstringData: {{address: \"{address}/hook\"}}\n---\napiVersion: starling.dev/v1alpha1\nkind: Provider\nmetadata: {{name: hook}}\nspec: {{type: generic, secretRef: {{name: hook}}}}\n---\napiVersion: starling.dev/v1alpha1\nkind: Alert\nmetadata: {{name: demo}}\nspec:\n  providerRef: {{name: hook}}\n  eventSources: [{{kind: SyncGroup, name: demo}}]\n  eventMetadata: {{env: test}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: github}}\nstringData: {{token: ghp-test-token}}\n---\napiVersion: starling.dev/v1alpha1\nkind: Provider\nmetadata: {{name: github}}\nspec: {{type: github, address: \"{address}/gh\", repository: acme/fleet, secretRef: {{name: github}}}}\n---\napiVersion: starling.dev/v1alpha1\nkind: Alert\nmetadata: {{name: commit}}\nspec:\n  providerRef: {{name: github}}\n  eventSources: [{{kind: SyncGroup, name: demo}}]\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_follows_a_rollout_through_a_leader_kill_and_the_commit_shows_the_fleet() {
    let fixture = demo_fixture(fleetsim::Config {
        clusters: CLUSTERS,
        ready_delay: Duration::from_millis(150),
        ..fleetsim::Config::default()
    })
    .await;
    let (receiver, address) = Receiver::start().await;
    let hanging = harness::HangingReceiver::start().await.expect("a receiver");
    let hanging = format!("http://{}", hanging.address);
    let mut group = Group::start_together(3, Options::default());
    group.wait_for_members(3).await;
    group
        .apply(
            1,
            &demo_manifests(
                &fixture.sim,
                &fixture.url,
                "",
                "    maxUnavailable: 5\n    maxFailures: 2\n",
            ),
        )
        .await
        .expect("specs applied");
    let first = group.wait_complete("demo", "", CLUSTERS as u32, 0).await;
    group
        .apply(
            1,
            &(notification_manifests(&address) + &stuck_manifests(&hanging)),
        )
        .await
        .expect("the Providers and Alerts are accepted");

    fixture
        .repo
        .commit("v2", "nginx:1.28", "v2")
        .expect("commit");
    wait_until(
        Duration::from_secs(60),
        "the webhook hears the rollout start",
        || async {
            receiver.events().iter().any(|e| {
                e["reason"] == "RolloutStarted" && e["revision"].as_str() != Some(first.as_str())
            })
        },
    )
    .await;
    let leader = group.status().await.expect("a leader").leader_id;
    group.kill(leader);

    let second = group
        .wait_complete("demo", &first, CLUSTERS as u32, 0)
        .await;
    wait_until(
        Duration::from_secs(60),
        "the webhook hears the rollout complete",
        || async { receiver.has("RolloutComplete", &second) },
    )
    .await;
    assert!(receiver.has("RolloutStarted", &second));
    assert!(
        receiver.has("RolloutProgress", &second),
        "no progress: {:#?}",
        receiver.events()
    );
    let complete = receiver
        .events()
        .into_iter()
        .find(|e| e["reason"] == "RolloutComplete" && e["revision"] == second.as_str())
        .unwrap();
    assert_eq!(complete["counts"]["total"], CLUSTERS as u64);
    assert_eq!(complete["metadata"]["env"], "test");

    // Nothing lost across the kill. Each event matches the three Alerts, and the state numbers
    // them in the Alerts' order (`commit`, `demo`, `stuck`): the webhook's ids are every third
    // number, without a gap. A duplicate (a delivery the dead leader never settled) is the
    // rare case the idempotency key is for.
    let counts = receiver.id_counts();
    let low = *counts.keys().next().unwrap();
    let high = *counts.keys().last().unwrap();
    let missing: Vec<u64> = (low..=high)
        .step_by(3)
        .filter(|n| !counts.contains_key(n))
        .collect();
    assert!(missing.is_empty(), "events lost: {missing:?} of {counts:?}");
    let duplicated: Vec<(&u64, &usize)> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        duplicated.len() <= 3,
        "more than an in-flight delivery sent twice: {duplicated:?}"
    );
    for (_, headers, body) in receiver.requests("/hook") {
        assert_eq!(
            headers
                .get("x-starling-event-id")
                .and_then(|v| v.to_str().ok()),
            body["id"].as_str()
        );
    }

    // The commit shows the fleet: pending while it rolled out, success once complete.
    let sha = second
        .rsplit_once("sha1:")
        .map_or(second.as_str(), |(_, s)| s);
    wait_until(
        Duration::from_secs(60),
        "the commit status is success",
        || async {
            receiver
                .requests("/gh")
                .last()
                .is_some_and(|(_, _, body)| body["state"] == "success")
        },
    )
    .await;
    let statuses = receiver.requests("/gh");
    for (path, headers, body) in &statuses {
        assert_eq!(path, &format!("/gh/repos/acme/fleet/statuses/{sha}"));
        assert_eq!(
            headers.get("authorization").and_then(|v| v.to_str().ok()),
            Some("Bearer ghp-test-token")
        );
        assert_eq!(body["context"], "starling/default/demo");
    }
    assert!(
        statuses
            .iter()
            .any(|(_, _, body)| body["state"] == "pending"),
        "{statuses:?}"
    );
    let last = &statuses.last().unwrap().2;
    assert_eq!(
        last["description"],
        format!(
            "{CLUSTERS} of {CLUSTERS} clusters at {} (0 failed)",
            &sha[..7]
        )
    );

    // Queues drain: nothing waits for either Provider.
    let survivor = group.running().next().unwrap().id;
    wait_until(Duration::from_secs(30), "the queues drain", || async {
        ["default/hook", "default/github"].iter().all(|provider| {
            group
                .metric(
                    survivor,
                    &format!("starling_notifications_pending{{provider=\"{provider}\"}}"),
                )
                .unwrap_or(0.0)
                == 0.0
        })
    })
    .await;
    // The token never shows.
    let shown = group.cli(&["get", "providers", "-o", "yaml"]);
    assert!(!shown.contains("ghp-test-token"), "{shown}");
    let described = group.cli(&["describe", "provider", "github"]);
    assert!(!described.contains("ghp-test-token"), "{described}");
    // A bad revision: six clusters refuse every write, past maxFailures (2). The rollout
    // halts, and the webhook hears it with the failing clusters and the API server's message.
    let failing: Vec<String> = fixture.sim.cluster_names().into_iter().take(6).collect();
    harness::refuse_writes(&fixture.sim, &failing);
    fixture
        .repo
        .commit("v3", "nginx:1.29", "v3")
        .expect("commit");
    wait_until(
        Duration::from_secs(90),
        "the webhook hears the rollout halt",
        || async {
            receiver
                .events()
                .iter()
                .any(|e| e["reason"] == "RolloutHalted" && e["revision"] != second.as_str())
        },
    )
    .await;
    let halted = receiver
        .events()
        .into_iter()
        .find(|e| e["reason"] == "RolloutHalted" && e["revision"] != second.as_str())
        .unwrap();
    let third = halted["revision"].as_str().unwrap().to_string();
    assert_eq!(halted["severity"], "error", "{halted:#}");
    assert!(
        halted["counts"]["failed"].as_u64().unwrap() > 2,
        "{halted:#}"
    );
    let named = halted["failing"].as_array().expect("failing clusters");
    assert!(!named.is_empty(), "{halted:#}");
    for entry in named {
        let entry = entry.as_str().unwrap();
        assert!(
            failing
                .iter()
                .any(|name| entry.starts_with(&format!("{name}: "))),
            "{entry} is not one of the refusing clusters {failing:?}"
        );
        assert!(
            entry.contains("403") || entry.to_lowercase().contains("forbidden"),
            "{entry}"
        );
    }
    assert!(
        receiver.event("SyncFailed", &third).is_some(),
        "{:#?}",
        receiver.events()
    );
    // The commit shows the halt.
    let sha3 = third
        .rsplit_once("sha1:")
        .map_or(third.as_str(), |(_, s)| s)
        .to_string();
    wait_until(
        Duration::from_secs(60),
        "the commit status is failure",
        || async {
            receiver
                .requests("/gh")
                .last()
                .is_some_and(|(path, _, body)| path.ends_with(&sha3) && body["state"] == "failure")
        },
    )
    .await;
}

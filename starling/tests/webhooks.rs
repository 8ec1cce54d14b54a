//! Webhooks end to end, with real `starling node` processes, fleetsim and `git daemon`: a
//! Source polled only hourly gets a signed GitHub push event on a replica's HTTP port (any
//! replica, not necessarily the one polling it), and the new commit rolls out at once. A
//! replayed delivery (on any replica, under any delivery id), a wrong signature and an
//! oversized body are refused; a burst of pushes makes a poll or two, not one per push.

mod harness;

use std::time::{Duration, Instant};

use fleetsim::AuditFilter;
use harness::{Group, Options, demo_fixture, demo_manifests, http_post, wait_until};
use hmac::{Hmac, Mac};
use sha2::Sha256;

const CLUSTERS: usize = 6;
const SECRET: &str = "a webhook secret no log may show";

fn github_event(delivery: &str, body: &[u8], secret: &str) -> Vec<(&'static str, String)> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("hmac key");
    mac.update(body);
    let signature = hex::encode(mac.finalize().into_bytes());
    vec![
        ("X-GitHub-Event", "push".to_owned()),
        ("X-GitHub-Delivery", delivery.to_owned()),
        ("X-Hub-Signature-256", format!("sha256={signature}")),
        ("Content-Type", "application/json".to_owned()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_push_rolls_a_commit_out_at_once_and_replays_are_refused() {
    let fixture = demo_fixture(fleetsim::Config {
        clusters: CLUSTERS,
        ready_delay: Duration::from_millis(20),
        ..Default::default()
    })
    .await;
    let (sim, demo, url) = (&fixture.sim, &fixture.repo, fixture.url.clone());
    let group = Group::start(3, Options::default()).await;
    let manifests = demo_manifests(sim, &url, "", "    maxUnavailable: 100%\n").replacen(
        "  interval: 1s\n",
        "  interval: 1h\n  webhook: {provider: github, secretRef: {name: demo-hook}}\n",
        1,
    );
    let secret = format!(
        "---\napiVersion: v1\nkind: Secret\nmetadata: {{name: demo-hook}}\nstringData: {{token: \"{SECRET}\"}}\n"
    );
    group
        .apply(1, &format!("{manifests}{secret}"))
        .await
        .expect("specs applied");
    wait_until(Duration::from_secs(60), "v1 everywhere", || async {
        harness::config_versions(sim).iter().all(|(_, v)| v == "v1")
    })
    .await;

    // The replica that does not poll the source takes the event.
    let owner = group
        .shards(1)
        .await
        .and_then(|s| {
            s.shards
                .iter()
                .find(|shard| shard.sources.iter().any(|k| k == "default/demo"))
                .map(|shard| shard.node_id)
        })
        .unwrap_or(1);
    let receiver = group
        .running()
        .find(|n| n.id != owner)
        .expect("another replica")
        .http
        .clone();
    let hook = "/hooks/default/demo";
    let body = br#"{"ref":"refs/heads/main"}"#;

    demo.commit("v2", "nginx:1.28", "v2").expect("commit");
    let since = sim
        .audit(&AuditFilter::default())
        .last()
        .map_or(0, |r| r.seq);
    let sent = Instant::now();
    let answer = http_post(&receiver, hook, &github_event("d-1", body, SECRET), body);
    assert_eq!(answer.as_ref().map(|a| a.0), Some(202), "{answer:?}");
    wait_until(Duration::from_secs(30), "v2 everywhere", || async {
        harness::config_versions(sim).iter().all(|(_, v)| v == "v2")
    })
    .await;
    // The first write of the new revision (the bench `loadtest webhook` measures this).
    let first_write = sim
        .audit(&AuditFilter {
            since: Some(since),
            success_only: true,
            limit: Some(1),
            ..Default::default()
        })
        .first()
        .map(|r| r.time.clone());
    eprintln!(
        "webhook to v2 everywhere: {:?}; first write at {first_write:?}",
        sent.elapsed()
    );

    // The same delivery again is a replay; an oversized body is refused with its own code. A
    // wrong secret and an unknown source get the same answer (issue 32, part 4): a caller
    // without the secret cannot tell which Sources have a webhook.
    let replay = http_post(&receiver, hook, &github_event("d-1", body, SECRET), body);
    assert_eq!(replay.map(|a| a.0), Some(409));
    // Replay protection is replicated (issue 32, part 4): the same delivery on every other
    // replica, and the same signed body under fresh delivery ids, are replays too.
    for (index, node) in group.running().enumerate() {
        let again = http_post(&node.http, hook, &github_event("d-1", body, SECRET), body);
        assert_eq!(again.map(|a| a.0), Some(409), "node {}", node.id);
        let fresh = format!("fresh-{index}");
        let renamed = http_post(&node.http, hook, &github_event(&fresh, body, SECRET), body);
        assert_eq!(
            renamed.map(|a| a.0),
            Some(409),
            "node {}: a new id",
            node.id
        );
    }
    let forged = http_post(&receiver, hook, &github_event("d-2", body, "guess"), body);
    let unknown = http_post(
        &receiver,
        "/hooks/default/nothing",
        &github_event("d-3", body, SECRET),
        body,
    );
    let unsigned = http_post(&receiver, "/hooks/default/nothing", &[], body);
    assert_eq!(forged.as_ref().map(|a| a.0), Some(401));
    assert_eq!(
        forged, unknown,
        "a forged delivery and an unknown source differ"
    );
    assert_eq!(
        forged, unsigned,
        "an unsigned call to an unknown source differs"
    );
    let huge = vec![b'x'; 2 * 1024 * 1024];
    let oversized = http_post(&receiver, hook, &github_event("d-4", &huge, SECRET), &huge);
    assert_eq!(oversized.map(|a| a.0), Some(413));

    // A burst of distinct pushes, at once on every replica: each is taken, and the owner
    // polls git one at a time plus one more after, not once per push.
    let fetches = "starling_source_fetch_duration_seconds_count";
    let polls_before = group.metric(owner, fetches).unwrap_or(0.0);
    let pushes: usize = 24;
    let addresses: Vec<String> = group.running().map(|n| n.http.clone()).collect();
    let taken = std::thread::scope(|scope| {
        let sent: Vec<_> = (0..pushes)
            .map(|index| {
                let address = addresses[index % addresses.len()].clone();
                scope.spawn(move || {
                    let body = format!(r#"{{"ref":"refs/heads/main","after":"{index:040}"}}"#);
                    let event = github_event(&format!("burst-{index}"), body.as_bytes(), SECRET);
                    http_post(&address, hook, &event, body.as_bytes()).map(|a| a.0)
                })
            })
            .collect();
        sent.into_iter()
            .map(|push| push.join().ok().flatten())
            .filter(|status| *status == Some(202))
            .count()
    });
    assert_eq!(taken, pushes, "every distinct push is taken");
    // Every request so far (the burst's, and this one) is served once a poll that started
    // after it finished: `status.observedPollRequest` says so.
    let mut fleet = group.fleet(1).await;
    let requested = fleet
        .source_poll(group.request(proto::SourcePollRequest {
            namespace: "default".into(),
            name: "demo".into(),
        }))
        .await
        .expect("source poll")
        .into_inner()
        .request;
    wait_until(Duration::from_secs(30), "the pushes served", || async {
        let source: serde_json::Value =
            serde_json::from_str(&group.cli(&["get", "source", "demo", "-o", "json"]))
                .unwrap_or_default();
        source
            .pointer("/status/observedPollRequest")
            .and_then(serde_json::Value::as_u64)
            .is_some_and(|observed| observed >= requested)
    })
    .await;
    let polls = group.metric(owner, fetches).unwrap_or(0.0) - polls_before;
    eprintln!("{pushes} pushes at once: {polls} polls by the owner");
    // The burst's polls, and the one asked for above.
    assert!(
        polls >= 1.0 && polls <= (pushes / 3) as f64,
        "{pushes} pushes made {polls} polls"
    );

    // The secret appears in no replica's log.
    for node in group.running() {
        let log = std::fs::read_to_string(group.log_path(node.id)).unwrap_or_default();
        assert!(!log.contains(SECRET), "node {} logged the secret", node.id);
    }
}

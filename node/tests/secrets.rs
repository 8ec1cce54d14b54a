//! Secrets never leak: a rollout over real processes (three replicas requiring tokens,
//! fleetsim targets, a git daemon) with distinctive values in every kind of secret Starling
//! holds (kubeconfig bearer tokens, git credentials, the admin token, a tenant token), then
//! every node log (at debug level) and every output a user sees (`get`, `describe`, `status`,
//! `/metrics`, the fleet view, error messages) is searched for them.

mod harness;

use std::process::Command;

use harness::{Group, Options, binary, demo_fixture, demo_manifests, http_get};

const ADMIN: &str = "admin-token-of-the-secrets-test-a7c3e91f05";
const KUBE_MARK: &str = "kubesecret-9e4c1a";
const GIT_PASSWORD: &str = "gitpass-5b7f3d2e";
const CLUSTERS: usize = 6;

fn cli(group: &Group, token: &str, args: &[&str]) -> String {
    let node = group.running().next().expect("a running node");
    let output = Command::new(binary())
        .args(["--server", &node.grpc, "--timeout", "30s"])
        .args(args)
        .env("STARLING_TOKEN", token)
        .output()
        .expect("run starling");
    // Both streams: a refusal's message counts as output too.
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_appears_in_logs_or_output() {
    let fixture = demo_fixture(fleetsim::Config {
        clusters: CLUSTERS,
        ..fleetsim::Config::default()
    })
    .await;
    let group = Group::start_together(
        3,
        Options {
            admin_token: Some(ADMIN.into()),
            log: Some(
                "info,starling=debug,starling_sync=debug,source=debug,fleet=debug,kube=debug"
                    .into(),
            ),
            ..Options::default()
        },
    );
    group.wait_for_members(3).await;

    // fleetsim takes any bearer token: each kubeconfig carries a distinctive one.
    let manifests = demo_manifests(&fixture.sim, &fixture.url, "", "    maxUnavailable: 2\n")
        .replace("token: fleetsim-", &format!("token: {KUBE_MARK}-"))
        .replace(
            "ref: {branch: main}}",
            "ref: {branch: main}}\n  secretRef: {name: git-creds}",
        );
    assert!(manifests.contains(KUBE_MARK) && manifests.contains("git-creds"));
    let git_secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: git-creds, namespace: default}}\nstringData:\n  username: deploy\n  password: {GIT_PASSWORD}\n---\n"
    );
    group
        .apply(1, &format!("{git_secret}{manifests}"))
        .await
        .expect("specs applied");
    let tenant = cli(
        &group,
        ADMIN,
        &["token", "create", "--tenant", "default", "--role", "reader"],
    );
    let tenant = tenant.lines().last().expect("a token").trim().to_string();
    assert!(tenant.starts_with("stl_"), "{tenant}");
    group.wait_complete("demo", "", CLUSTERS as u32, 0).await;

    let mut seen = String::new();
    for args in [
        &["get", "secrets", "-o", "yaml"][..],
        &["get", "secrets", "-o", "json"],
        &["get", "clusters", "-o", "yaml"],
        &["get", "sources", "-o", "yaml"],
        &["get", "syncs", "-o", "json"],
        &["describe", "source", "demo"],
        &["describe", "cluster", "c000"],
        &["status", "-o", "json"],
        &["token", "list", "-o", "json"],
        &["rollout", "history", "demo"],
    ] {
        seen.push_str(&cli(&group, ADMIN, args));
        seen.push_str(&cli(&group, &tenant, args));
    }
    // A wrong token's refusal does not echo it.
    seen.push_str(&cli(&group, &format!("{tenant}x"), &["get", "secrets"]));
    for node in group.running() {
        seen.push_str(&http_get(&node.http, "/metrics").expect("metrics"));
    }
    assert!(seen.contains("git-creds"), "the outputs name the Secret");

    let tenant_tail = &tenant[tenant.len() - 16..];
    for (what, text) in
        std::iter::once(("the outputs".to_string(), seen)).chain((1..=3).map(|id| {
            let log = std::fs::read_to_string(group.log_path(id)).unwrap_or_default();
            assert!(!log.is_empty(), "node {id} logged nothing");
            (format!("node {id}'s log"), log)
        }))
    {
        for secret in [KUBE_MARK, GIT_PASSWORD, ADMIN, tenant_tail] {
            assert!(
                !text.contains(secret),
                "{what} hold a secret ({} bytes)",
                text.len()
            );
        }
    }
}

//! Secrets never leak: a rollout over real processes (three replicas requiring tokens,
//! fleetsim targets, a git daemon) with distinctive values in every kind of secret Starling
//! holds (kubeconfig bearer tokens, git credentials, a notification Provider's token, the
//! admin token, a tenant token), then
//! every node log (at debug level) and every output a user sees (`get`, `describe`, `status`,
//! `/metrics`, the fleet view, error messages) is searched for them.
//!
//! Long because each test is one end-to-end scenario whose set-up (every kind of Secret, in
//! every malformed shape) is what it asserts about; splitting it would spread one scenario.

mod harness;

use std::process::Command;
use std::time::Duration;

use harness::{Group, Options, binary, demo_fixture, demo_manifests, http_get};

const ADMIN: &str = "admin-token-of-the-secrets-test-a7c3e91f05";
const KUBE_MARK: &str = "kubesecret-9e4c1a";
const GIT_PASSWORD: &str = "gitpass-5b7f3d2e";
const HOOK_TOKEN: &str = "hooktoken-3c8a61d4";
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
                "info,starling_replica=debug,starling_sync=debug,source=debug,fleet=debug,kube=debug"
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
    // A notification Provider whose Secret holds a token, and an Alert sending to it.
    let notifications = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: chat-webhook, namespace: default}}\nstringData:\n  token: {HOOK_TOKEN}\n---\napiVersion: starling.dev/v1alpha1\nkind: Provider\nmetadata: {{name: chat, namespace: default}}\nspec: {{type: generic-hmac, address: \"http://127.0.0.1:9/hook\", secretRef: {{name: chat-webhook}}}}\n---\napiVersion: starling.dev/v1alpha1\nkind: Alert\nmetadata: {{name: rollouts, namespace: default}}\nspec: {{providerRef: {{name: chat}}, eventSources: [{{kind: SyncGroup}}]}}\n---\n"
    );
    group
        .apply(1, &format!("{git_secret}{notifications}{manifests}"))
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
        &["get", "providers", "-o", "yaml"],
        &["get", "alerts", "-o", "json"],
        &["describe", "provider", "chat"],
        &["describe", "alert", "rollouts"],
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
    assert!(
        seen.contains("chat-webhook"),
        "the outputs name the Provider's Secret"
    );

    let tenant_tail = &tenant[tenant.len() - 16..];
    for (what, text) in
        std::iter::once(("the outputs".to_string(), seen)).chain((1..=3).map(|id| {
            let log = std::fs::read_to_string(group.log_path(id)).unwrap_or_default();
            assert!(!log.is_empty(), "node {id} logged nothing");
            (format!("node {id}'s log"), log)
        }))
    {
        for secret in [KUBE_MARK, GIT_PASSWORD, HOOK_TOKEN, ADMIN, tenant_tail] {
            assert!(
                !text.contains(secret),
                "{what} hold a secret ({} bytes)",
                text.len()
            );
        }
    }
}

/// Every planted value starts with this; no output or log line may hold it.
const MARK: &str = "zqxmark";

/// A valid kubeconfig for `server` with `user` (the lines under `user:`, indented 4).
fn kubeconfig(server: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: edge\nclusters:\n- name: edge\n  cluster:\n    server: {server}\ncontexts:\n- name: edge\n  context: {{cluster: edge, user: admin}}\nusers:\n- name: admin\n  user:\n{user}"
    )
}

fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A Secret in `namespace` whose `data` holds `pairs` (raw bytes, so values need not be text).
fn secret(namespace: &str, name: &str, pairs: &[(&str, &[u8])]) -> String {
    let data: serde_json::Map<String, serde_json::Value> = pairs
        .iter()
        .map(|(key, value)| ((*key).to_owned(), base64(value).into()))
        .collect();
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    });
    format!("{secret}\n---\n")
}

/// A `starling agent` process for one fleetsim cluster, logging at trace level into `log`.
fn spawn_agent(
    kubeconfig: &std::path::Path,
    cache: &std::path::Path,
    log: &std::path::Path,
) -> std::process::Child {
    let log = std::fs::File::create(log).expect("agent log");
    Command::new(binary())
        .args([
            "agent",
            "--namespace",
            "starling-system",
            "--upstream",
            "starling",
        ])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .env("STARLING_LOG", "trace")
        .stdout(log.try_clone().expect("log handle"))
        .stderr(log)
        .spawn()
        .expect("starling agent starts")
}

/// Regression (issue 32, part 1): a kubeconfig Secret that did not parse had its lines quoted
/// in the Sync's status and in a WARN log line, so a reader of one tenant could read another
/// tenant's database password with `describe sync`. Here a marker is planted in every kind of
/// Secret Starling reads (kubeconfigs, git tokens and passwords, ssh keys and passphrases,
/// known_hosts, webhook secrets, agent tokens), in every malformed shape, syncs and polls run,
/// and every status, `describe`, the rollout history, the fleet view's snapshot and Sync
/// views, `/metrics`, and every log line at trace level of the replicas and the agents are
/// searched: no marker anywhere. (The servers' addresses are not secret: the HTTP client logs
/// the host it resolves. No marker is planted there.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_value_reaches_a_status_event_or_log_line() {
    let fixture = demo_fixture(fleetsim::Config {
        clusters: 3,
        ..fleetsim::Config::default()
    })
    .await;
    let sim = &fixture.sim;
    let group = Group::start_together(
        3,
        Options {
            admin_token: Some(ADMIN.into()),
            log: Some("trace".into()),
            ..Options::default()
        },
    );
    group.wait_for_members(3).await;
    let closed = format!("127.0.0.1:{}", harness::free_port());
    let https = format!("https://{closed}");
    let http = format!("http://{closed}");

    // Push clusters in `default`, one per kubeconfig shape.
    let shapes: Vec<(&str, Vec<u8>)> = vec![
        ("not-yaml", format!("{MARK}-k1 is a password = not a kubeconfig").into_bytes()),
        ("scalar-users", format!("apiVersion: v1\nkind: Config\nusers: {MARK}-k2\n").into_bytes()),
        ("unterminated", format!("clusters: [{MARK}-k3\n  - {{").into_bytes()),
        ("token-unreachable", kubeconfig(&http, &format!("    token: {MARK}-k4\n")).into_bytes()),
        (
            "bad-ca",
            kubeconfig(&https, "    token: t\n")
                .replace("    server:", &format!("    certificate-authority-data: {MARK}-k5\n    server:"))
                .into_bytes(),
        ),
        (
            "bad-identity",
            kubeconfig(
                &https,
                &format!(
                    "    client-certificate-data: {}\n    client-key-data: {}\n",
                    base64(format!("{MARK}-k6 is no certificate").as_bytes()),
                    base64(format!("-----BEGIN PRIVATE KEY-----\n{MARK}-k6b\n-----END PRIVATE KEY-----\n").as_bytes())
                ),
            )
            .into_bytes(),
        ),
        (
            "no-context",
            kubeconfig(&http, "    token: t\n")
                .replace("current-context: edge", &format!("current-context: {MARK}-k7"))
                .into_bytes(),
        ),
        (
            "exec",
            kubeconfig(&http, &format!("    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: {MARK}-k8\n      args: [{MARK}-k8b]\n")).into_bytes(),
        ),
        ("not-utf8", [&[0xff, 0xfe][..], format!("{MARK}-k9").as_bytes()].concat()),
        (
            "basic-auth",
            kubeconfig(&http, &format!("    username: {MARK}-k10u\n    password: {MARK}-k10p\n")).into_bytes(),
        ),
        (
            "json-truncated",
            format!("{{\"apiVersion\": \"v1\", \"users\": [{{\"name\": \"{MARK}-k11\", \"user\": {{\"token\": \"{MARK}-k11t\"").into_bytes(),
        ),
        ("two-kinds", format!("kind: Config\n---\nkind: {MARK}-k12\napiVersion: {MARK}-k12b\n").into_bytes()),
        ("tab-indent", format!("users:\n\t- name: {MARK}-k13\n").into_bytes()),
    ];
    let mut manifests = String::new();
    for (shape, value) in &shapes {
        manifests.push_str(&secret(
            "default",
            &format!("{shape}-kubeconfig"),
            &[("value", value)],
        ));
        manifests.push_str(&format!(
            "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: {shape}, labels: {{leak: \"yes\"}}}}\nspec: {{}}\n---\n"
        ));
    }
    // A cluster that works, whose token is a marker (fleetsim takes any bearer token).
    let working = sim
        .kubeconfig("c0")
        .expect("kubeconfig")
        .replace("token: fleetsim-", &format!("token: {MARK}-k14-"));
    assert!(working.contains(MARK));
    manifests.push_str(&secret(
        "default",
        "c0-kubeconfig",
        &[("value", working.as_bytes())],
    ));
    manifests.push_str("apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {name: c0, labels: {leak: \"yes\"}}\nspec: {}\n---\n");

    // Sources: one that works with credentials git:// never asks for, and broken ones.
    let url = &fixture.url;
    let source = |name: &str, url: &str, secret: &str| {
        format!(
            "apiVersion: starling.dev/v1alpha1\nkind: Source\nmetadata: {{name: {name}}}\nspec:\n  interval: 1s\n  git: {{url: \"{url}\", ref: {{branch: main}}}}\n  secretRef: {{name: {secret}}}\n---\n"
        )
    };
    manifests.push_str(&source("demo", url, "git-basic"));
    manifests.push_str(&secret(
        "default",
        "git-basic",
        &[
            ("username", b"deploy"),
            ("password", format!("{MARK}-g1").as_bytes()),
        ],
    ));
    manifests.push_str(&source(
        "http-token",
        &format!("{http}/repo.git"),
        "http-token",
    ));
    manifests.push_str(&secret(
        "default",
        "http-token",
        &[("token", format!("{MARK}-g2").as_bytes())],
    ));
    manifests.push_str(&source(
        "ssh-key",
        &format!("ssh://git@{closed}/repo.git"),
        "ssh-key",
    ));
    manifests.push_str(&secret(
        "default",
        "ssh-key",
        &[
            ("identity", format!("-----BEGIN OPENSSH PRIVATE KEY-----\n{MARK}-g3\n-----END OPENSSH PRIVATE KEY-----").as_bytes()),
            ("known_hosts", b"127.0.0.1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"),
            ("password", format!("{MARK}-g4").as_bytes()),
        ],
    ));
    manifests.push_str(&source("half", url, "half"));
    manifests.push_str(&secret(
        "default",
        "half",
        &[("password", format!("{MARK}-g5").as_bytes())],
    ));
    manifests.push_str(&source("bad-hosts", url, "bad-hosts"));
    manifests.push_str(&secret(
        "default",
        "bad-hosts",
        &[
            ("identity", format!("{MARK}-g6").as_bytes()),
            ("known_hosts", format!("{MARK}-g7 @@ {MARK}-g7b").as_bytes()),
        ],
    ));
    manifests.push_str(&source("bad-utf8", url, "bad-utf8"));
    manifests.push_str(&secret(
        "default",
        "bad-utf8",
        &[(
            "token",
            &[&[0xc3, 0x28][..], format!("{MARK}-g8").as_bytes()].concat(),
        )],
    ));
    // A webhook whose secret is a marker, and one whose secret is not text.
    manifests.push_str(&source("hooked", url, "git-basic").replacen(
        "  interval: 1s\n",
        "  interval: 1h\n  webhook: {provider: github, secretRef: {name: hook}}\n",
        1,
    ));
    manifests.push_str(&secret(
        "default",
        "hook",
        &[("token", format!("{MARK}-w1").as_bytes())],
    ));
    manifests.push_str(&source("hooked-bad", url, "git-basic").replacen(
        "  interval: 1s\n",
        "  interval: 1h\n  webhook: {provider: gitlab, secretRef: {name: hook-bad}}\n",
        1,
    ));
    manifests.push_str(&secret(
        "default",
        "hook-bad",
        &[(
            "token",
            &[&[0xff][..], format!("{MARK}-w2").as_bytes()].concat(),
        )],
    ));
    manifests.push_str(
        "apiVersion: starling.dev/v1alpha1\nkind: SyncGroup\nmetadata: {name: leaks}\nspec:\n  sourceRef: {name: demo}\n  clusterSelector: {matchLabels: {leak: \"yes\"}}\n  template: {path: app, substitute: {REGION: r0}}\n  rollout: {maxUnavailable: 100%}\n---\napiVersion: starling.dev/v1alpha1\nkind: SyncGroup\nmetadata: {name: pulled}\nspec:\n  sourceRef: {name: demo}\n  clusterSelector: {matchLabels: {site: edge}}\n  template: {path: app, substitute: {REGION: r1}}\n---\n",
    );
    group.apply(1, &manifests).await.expect("specs applied");

    // The reproduction: team-b's database password, named as a kubeconfig by a Cluster that
    // admits team-a, and team-a's SyncGroup over it.
    let tenant_token = |tenant: &str, role: &str| {
        let text = cli(
            &group,
            ADMIN,
            &["token", "create", "--tenant", tenant, "--role", role],
        );
        text.lines().last().unwrap_or_default().trim().to_owned()
    };
    let b_writer = tenant_token("team-b", "writer");
    let a_writer = tenant_token("team-a", "writer");
    let a_reader = tenant_token("team-a", "reader");
    let agent_token = tenant_token("default", "agent");
    let apply_as = |token: &str, manifests: &str| {
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(file.path(), manifests).expect("manifests");
        let out = cli(
            &group,
            token,
            &["apply", "-f", file.path().to_str().expect("utf-8 path")],
        );
        assert!(!out.contains("rror"), "{out}");
    };
    apply_as(
        &b_writer,
        &format!(
            "{}apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: db, namespace: team-b, labels: {{env: prod}}}}\nspec:\n  allowedNamespaces: [team-a]\n  kubeconfigSecretRef: {{name: db-creds, key: password}}\n",
            secret(
                "team-b",
                "db-creds",
                &[("password", format!("{MARK}-db-s3cr3t").as_bytes())]
            )
        ),
    );
    apply_as(
        &a_writer,
        &format!(
            "apiVersion: starling.dev/v1alpha1\nkind: Source\nmetadata: {{name: repo, namespace: team-a}}\nspec:\n  interval: 1s\n  git: {{url: \"{url}\", ref: {{branch: main}}}}\n---\napiVersion: starling.dev/v1alpha1\nkind: SyncGroup\nmetadata: {{name: web, namespace: team-a}}\nspec:\n  sourceRef: {{name: repo}}\n  clusterNamespaces: [team-b]\n  clusterSelector: {{matchLabels: {{env: prod}}}}\n  template: {{path: app, substitute: {{REGION: r0}}}}\n"
        ),
    );

    // Agents: one with a valid token (a pull cluster that syncs), one whose token is a marker.
    let addresses: Vec<String> = group.running().map(|n| n.grpc.clone()).collect();
    let addresses = addresses.join(",");
    let work = tempfile::tempdir().expect("agent dir");
    let mut children = Vec::new();
    for (cluster, token) in [
        ("c1", agent_token.clone()),
        ("c2", format!("stl_0a1b2c3d4e5f_{MARK}-a1")),
    ] {
        let kubeconfig = work.path().join(format!("{cluster}.kubeconfig"));
        std::fs::write(&kubeconfig, sim.kubeconfig(cluster).expect("kubeconfig")).expect("write");
        harness::pull::enrol(&kubeconfig, cluster, &addresses, &token, None, 0).await;
        children.push(KillOnDrop(spawn_agent(
            &kubeconfig,
            &work.path().join(format!("{cluster}-cache")),
            &work.path().join(format!("{cluster}.log")),
        )));
    }

    // Wait until every shape has been tried and refused, and the working ones synced.
    let sync_message = |namespace: &str, name: &str| -> String {
        let out = cli(
            &group,
            ADMIN,
            &["get", "sync", name, "-n", namespace, "-o", "json"],
        );
        serde_json::from_str::<serde_json::Value>(&out)
            .ok()
            .and_then(|v| v["status"]["message"].as_str().map(str::to_owned))
            .unwrap_or_default()
    };
    harness::wait_until(
        Duration::from_secs(90),
        "every kubeconfig shape refused",
        || async {
            shapes
                .iter()
                .all(|(shape, _)| !sync_message("default", &format!("leaks-{shape}")).is_empty())
                && sync_message("team-a", "web-db.team-b").contains("kubeconfig")
        },
    )
    .await;
    harness::wait_until(
        Duration::from_secs(60),
        "the working cluster and the pull cluster synced",
        || async {
            harness::config_versions(sim)
                .iter()
                .filter(|(name, version)| (name == "c0" || name == "c1") && version == "v1")
                .count()
                == 2
        },
    )
    .await;
    let source_failed = |name: &str| {
        let out = cli(&group, ADMIN, &["get", "source", name, "-o", "json"]);
        out.contains("\"False\"") && out.contains("message")
    };
    harness::wait_until(
        Duration::from_secs(60),
        "the broken sources failed",
        || async {
            ["http-token", "ssh-key", "half", "bad-hosts", "bad-utf8"]
                .iter()
                .all(|s| source_failed(s))
        },
    )
    .await;

    // The webhooks: a forged signature, and a secret that is not text.
    let node = group.running().next().expect("a node");
    for (path, headers) in [
        (
            "/hooks/default/hooked",
            vec![
                ("X-GitHub-Event", "push".to_owned()),
                ("X-GitHub-Delivery", "d1".to_owned()),
                ("X-Hub-Signature-256", format!("sha256={}", "0".repeat(64))),
            ],
        ),
        (
            "/hooks/default/hooked-bad",
            vec![
                ("X-Gitlab-Event", "Push Hook".to_owned()),
                ("X-Gitlab-Token", format!("{MARK}-w3")),
            ],
        ),
    ] {
        let answer = harness::http_post(&node.http, path, &headers, b"{}");
        let (code, body) = answer.expect("the webhook answers");
        assert!(code >= 400, "{path}: {code} {body}");
        assert!(!body.contains(MARK), "{path}: {body}");
    }

    // The agent with the marker token is refused, and says so in its log.
    let refused_log = work.path().join("c2.log");
    harness::wait_until(
        Duration::from_secs(30),
        "the agent with a wrong token is refused",
        || async {
            std::fs::read_to_string(&refused_log)
                .unwrap_or_default()
                .contains("registration failed")
        },
    )
    .await;

    // The reproduction, as team-a's reader sees it.
    let described = cli(
        &group,
        &a_reader,
        &["describe", "sync", "web-db.team-b", "-n", "team-a"],
    );
    assert!(
        described.contains("secret team-b/db-creds key \"password\" is not a valid kubeconfig"),
        "the status says what is wrong, naming the Secret and key: {described}"
    );

    // Everything a user or an operator sees.
    let mut seen = described;
    for token in [ADMIN, a_reader.as_str()] {
        for args in [
            &["get", "syncs", "-A", "-o", "yaml"][..],
            &["get", "clusters", "-A", "-o", "yaml"],
            &["get", "sources", "-A", "-o", "yaml"],
            &["get", "secrets", "-A", "-o", "yaml"],
            &["get", "syncgroups", "-A", "-o", "yaml"],
            &["status", "-o", "json"],
            &["rollout", "history", "leaks"],
            &["rollout", "status", "leaks"],
            &["describe", "syncgroup", "leaks"],
            &["describe", "cluster", "not-yaml"],
            &["describe", "source", "ssh-key"],
            &["describe", "sync", "web-db.team-b", "-n", "team-a"],
        ] {
            seen.push_str(&cli(&group, token, args));
        }
    }
    for (shape, _) in &shapes {
        seen.push_str(&cli(
            &group,
            ADMIN,
            &["describe", "sync", &format!("leaks-{shape}")],
        ));
    }
    let bearer = [("Authorization", format!("Bearer {ADMIN}"))];
    for node in group.running() {
        seen.push_str(&http_get(&node.http, "/metrics").expect("metrics"));
        seen.push_str(
            &harness::http_get_with(&node.http, "/ui/api/snapshot", &bearer).expect("snapshot"),
        );
        for (namespace, name) in [
            ("default", "leaks-not-yaml"),
            ("team-a", "web-db.team-b"),
            ("default", "leaks-token-unreachable"),
        ] {
            seen.push_str(
                &harness::http_get_with(
                    &node.http,
                    &format!("/ui/api/sync/{namespace}/{name}"),
                    &bearer,
                )
                .unwrap_or_default(),
            );
        }
    }
    assert!(
        seen.contains("is not a valid kubeconfig"),
        "the outputs say what failed"
    );
    assert!(
        !seen.contains(MARK),
        "an output holds a planted secret: {}",
        around(&seen, MARK)
    );

    drop(children);
    for id in 1..=3 {
        let log = std::fs::read_to_string(group.log_path(id)).unwrap_or_default();
        assert!(
            log.contains("TRACE") || log.contains("\"level\":\"TRACE\""),
            "node {id} logged at trace level"
        );
        assert!(
            !log.contains(MARK),
            "node {id}'s log holds a planted secret: {}",
            around(&log, MARK)
        );
        for token in [&agent_token, &a_reader, &b_writer] {
            assert!(
                !log.contains(&token[token.len() - 16..]),
                "node {id}'s log holds a token"
            );
        }
    }
    for cluster in ["c1", "c2"] {
        let log =
            std::fs::read_to_string(work.path().join(format!("{cluster}.log"))).unwrap_or_default();
        assert!(!log.is_empty(), "agent {cluster} logged");
        assert!(
            !log.contains(MARK),
            "agent {cluster}'s log holds a planted secret: {}",
            around(&log, MARK)
        );
        assert!(
            !log.contains(&agent_token[agent_token.len() - 16..]),
            "agent {cluster}'s log holds its token"
        );
    }
}

/// The text around the first occurrence of `needle`, for a failure message.
fn around(text: &str, needle: &str) -> String {
    let at = text.find(needle).unwrap_or(0);
    let start = text[..at]
        .char_indices()
        .rev()
        .nth(300)
        .map_or(0, |(i, _)| i);
    let end = text[at..]
        .char_indices()
        .nth(300)
        .map_or(text.len(), |(i, _)| at + i);
    text[start..end].to_owned()
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

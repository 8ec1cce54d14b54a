//! Tenants and tokens end to end, with three real `starling node` processes started at once
//! as a StatefulSet starts them, all requiring tokens (`--admin-token-file`):
//! - without a token, or with a wrong or revoked one, every call is refused;
//! - the admin makes per-tenant tokens; a tenant's writer applies in its namespace only, its
//!   reader only reads it, and an agent token cannot use the Fleet API at all;
//! - a tenant's SyncGroup selects another tenant's Cluster only when that Cluster admits it
//!   (`spec.allowedNamespaces`), and says which it could not select;
//! - a Source in another namespace is refused at apply;
//! - tokens are replicated: after the leader is killed, the others still know them;
//! - no token and no Secret value appears in any node log or CLI output;
//! - the audit log records each change once with its actor, across the leader's kill, and a
//!   tenant reads only its own namespaces' entries.

mod harness;

use std::process::{Command, Output};
use std::time::Duration;

use harness::{Group, Options, binary, wait_until};

const ADMIN: &str = "admin-token-for-the-tenancy-test-0123456789";
const SECRET_VALUE: &str = "distinctive-secret-value-4f2a9c";

/// Runs the CLI against node `id` with `token`.
fn starling(group: &Group, id: u64, token: Option<&str>, args: &[&str]) -> Output {
    let node = group.running().find(|n| n.id == id).expect("running node");
    let mut command = Command::new(binary());
    command
        .args(["--server", &node.grpc, "--timeout", "30s"])
        .args(args)
        .env_remove("STARLING_TOKEN");
    if let Some(token) = token {
        command.env("STARLING_TOKEN", token);
    }
    command.output().expect("run starling")
}

/// Stdout of a call that must succeed.
fn ok(output: Output, what: &str) -> String {
    assert!(
        output.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Stderr of a call that must fail.
fn refused(output: Output, what: &str) -> String {
    assert!(!output.status.success(), "{what} was not refused");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Writes manifests to a file and applies them with `token`.
fn apply(group: &Group, id: u64, token: &str, manifests: &str) -> Output {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), manifests).expect("write manifests");
    let path = file.path().to_str().expect("utf-8 path").to_string();
    starling(group, id, Some(token), &["apply", "-f", &path])
}

/// A token's id (`stl_<id>_<secret>`).
fn token_id(token: &str) -> String {
    token
        .strip_prefix("stl_")
        .and_then(|rest| rest.split_once('_'))
        .map(|(id, _)| id.to_string())
        .expect("token id")
}

/// How long a revoked token's `/ui/events` stream may stay open in the test (the replica
/// looks every 100 ms; the revocation must first be applied).
const STREAM_LIMIT: Duration = Duration::from_secs(5);

/// Opens `/ui/events` with a token and reads until its first event; the stream, with a read
/// limit of [`STREAM_LIMIT`].
fn open_events(http: &str, token: &str) -> std::net::TcpStream {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(http).expect("connect");
    stream
        .set_read_timeout(Some(STREAM_LIMIT))
        .expect("read limit");
    write!(
        stream,
        "GET /ui/events HTTP/1.1\r\nHost: {http}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("event: snapshot") {
        let read = stream.read(&mut buffer).expect("the first event");
        assert!(read > 0, "the stream ended before its first event");
        seen.extend_from_slice(&buffer[..read]);
    }
    assert!(
        String::from_utf8_lossy(&seen).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&seen)
    );
    stream
}

/// `starling token create`: the token printed on the last line.
fn create_token(group: &Group, tenant: &str, role: &str) -> String {
    let text = ok(
        starling(
            group,
            1,
            Some(ADMIN),
            &["token", "create", "--tenant", tenant, "--role", role],
        ),
        "token create",
    );
    let token = text
        .lines()
        .last()
        .expect("a token line")
        .trim()
        .to_string();
    assert!(token.starts_with("stl_"), "{text}");
    token
}

fn cluster(name: &str, namespace: &str, allowed: &[&str]) -> String {
    let allowed = if allowed.is_empty() {
        String::new()
    } else {
        format!("\n  allowedNamespaces: [{}]", allowed.join(", "))
    };
    format!(
        "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: {name}\n  namespace: {namespace}\n  labels:\n    env: prod\nspec:\n  paused: false{allowed}\n---\n"
    )
}

const TEAM_A: &str = "apiVersion: starling.dev/v1alpha1
kind: SyncGroup
metadata:
  name: web
  namespace: team-a
spec:
  sourceRef:
    name: repo
  clusterNamespaces: [team-b]
  clusterSelector:
    matchLabels:
      env: prod
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_act_only_in_their_namespaces_with_their_tokens() {
    let mut group = Group::start_together(
        3,
        Options {
            admin_token: Some(ADMIN.into()),
            log: Some("info".into()),
            extra_args: vec!["--metrics-auth".into()],
            ..Options::default()
        },
    );
    group.wait_for_members(3).await;

    // No token, a wrong one: refused, saying what to do.
    let none = refused(
        starling(&group, 1, None, &["get", "clusters", "-A"]),
        "no token",
    );
    assert!(
        none.contains("unauthenticated") && none.contains("STARLING_TOKEN"),
        "{none}"
    );
    let wrong = refused(
        starling(&group, 2, Some("stl_0000_nothing"), &["status"]),
        "a wrong token",
    );
    assert!(wrong.contains("invalid or revoked token"), "{wrong}");

    let writer_a = create_token(&group, "team-a", "writer");
    // A token made through one replica works on every replica at once: a follower that has
    // not applied it yet waits for it rather than refusing it (regression: an agent token used
    // on a follower right after `token create` was "invalid or revoked").
    for id in [2, 3, 1] {
        ok(
            starling(
                &group,
                id,
                Some(&writer_a),
                &["get", "clusters", "-n", "team-a"],
            ),
            "a new token on another replica",
        );
    }
    let reader_a = create_token(&group, "team-a", "reader");
    let writer_b = create_token(&group, "team-b", "writer");
    let agent_a = create_token(&group, "team-a", "agent");
    let listed = ok(
        starling(&group, 2, Some(ADMIN), &["token", "list"]),
        "token list",
    );
    assert_eq!(listed.lines().count(), 5, "{listed}");
    assert!(
        !listed.contains("stl_"),
        "a listing shows no token: {listed}"
    );

    // Each tenant writes its own namespace.
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\n  namespace: team-a\nstringData:\n  password: {SECRET_VALUE}\n---\n"
    );
    let team_a = format!(
        "{}{}{secret}{TEAM_A}",
        cluster("a1", "team-a", &[]),
        cluster("a2", "team-a", &[])
    );
    ok(apply(&group, 1, &writer_a, &team_a), "team-a applies");
    let team_b = format!(
        "{}{}",
        cluster("b1", "team-b", &[]),
        cluster("b2", "team-b", &["team-a"])
    );
    ok(apply(&group, 2, &writer_b, &team_b), "team-b applies");

    // A tenant cannot write another's namespace, nor a reader write its own.
    let across = refused(
        apply(&group, 1, &writer_a, &cluster("x", "team-b", &[])),
        "team-a writing team-b",
    );
    assert!(
        across.contains("permission denied") && across.contains("namespace team-b"),
        "{across}"
    );
    let reader_writes = refused(
        apply(&group, 1, &reader_a, &cluster("x", "team-a", &[])),
        "a reader writing",
    );
    assert!(
        reader_writes.contains("needs the writer role"),
        "{reader_writes}"
    );
    let foreign_source = refused(
        apply(
            &group,
            1,
            &writer_a,
            &TEAM_A.replace("    name: repo", "    name: repo\n    namespace: team-b"),
        ),
        "a Source in another namespace",
    );
    assert!(
        foreign_source.contains("only use Sources in its own namespace"),
        "{foreign_source}"
    );

    // Reading: only the tenant's own objects.
    let other = refused(
        starling(
            &group,
            3,
            Some(&reader_a),
            &["get", "clusters", "-n", "team-b"],
        ),
        "team-a reading team-b",
    );
    assert!(other.contains("namespace team-b"), "{other}");
    let all = ok(
        starling(
            &group,
            3,
            Some(&reader_a),
            &["get", "clusters", "-A", "-o", "name"],
        ),
        "team-a listing everything",
    );
    assert!(all.contains("a1") && all.contains("a2"), "{all}");
    assert!(!all.contains("b1") && !all.contains("b2"), "{all}");
    let members = refused(
        starling(&group, 3, Some(&writer_a), &["members"]),
        "a tenant listing members",
    );
    assert!(members.contains("every namespace"), "{members}");
    let tokens = refused(
        starling(&group, 3, Some(&writer_a), &["token", "list"]),
        "a tenant listing tokens",
    );
    assert!(tokens.contains("needs the admin role"), "{tokens}");
    let agent = refused(
        starling(
            &group,
            3,
            Some(&agent_a),
            &["get", "clusters", "-n", "team-a"],
        ),
        "an agent token on the Fleet API",
    );
    assert!(agent.contains("needs the reader role"), "{agent}");

    // Selection across tenants: b2 admits team-a, b1 does not.
    let syncs = ok(
        starling(
            &group,
            1,
            Some(&reader_a),
            &["get", "syncs", "-n", "team-a", "-o", "name"],
        ),
        "team-a's syncs",
    );
    assert!(
        syncs.contains("web-a1") && syncs.contains("web-a2"),
        "{syncs}"
    );
    assert!(syncs.contains("web-b2.team-b"), "{syncs}");
    assert!(!syncs.contains("b1"), "{syncs}");
    let described = ok(
        starling(
            &group,
            1,
            Some(&reader_a),
            &["get", "syncgroup", "web", "-n", "team-a", "-o", "yaml"],
        ),
        "the group",
    );
    assert!(
        described.contains("CrossNamespaceDenied") && described.contains("team-b/b1"),
        "{described}"
    );
    let secret_view = ok(
        starling(
            &group,
            1,
            Some(&reader_a),
            &["get", "secret", "creds", "-n", "team-a", "-o", "yaml"],
        ),
        "the Secret",
    );
    assert!(!secret_view.contains(SECRET_VALUE), "{secret_view}");

    // A token for two tenants (`--tenant a,b`) acts in both, and nowhere else.
    let reader_ab = create_token(&group, "team-a,team-b", "reader");
    for namespace in ["team-a", "team-b"] {
        ok(
            starling(
                &group,
                1,
                Some(&reader_ab),
                &["get", "clusters", "-n", namespace],
            ),
            "a two-tenant reader in one of its namespaces",
        );
    }
    let elsewhere = refused(
        starling(
            &group,
            1,
            Some(&reader_ab),
            &["get", "clusters", "-n", "team-c"],
        ),
        "a two-tenant reader in a third namespace",
    );
    assert!(
        elsewhere.contains("team-a") && elsewhere.contains("team-b"),
        "{elsewhere}"
    );

    // The fleet view shows every namespace: it takes a token that reads them all.
    let http = group.running().next().expect("a node").http.clone();
    assert_eq!(harness::http_status(&http, "/ui/api/snapshot"), 401);
    let bearer = |token: &str| [("Authorization", format!("Bearer {token}"))];
    assert_eq!(
        harness::http_status_with(&http, "/ui/api/snapshot", &bearer(&reader_a)),
        401
    );
    assert_eq!(
        harness::http_status_with(&http, "/ui/api/snapshot", &bearer(ADMIN)),
        200
    );
    assert_eq!(harness::http_status(&http, "/healthz"), 200);
    // `--metrics-auth`: /metrics takes the same token as the fleet view (issue 32, part 2).
    assert_eq!(harness::http_status(&http, "/metrics"), 401);
    assert_eq!(
        harness::http_status_with(&http, "/metrics", &bearer(&reader_a)),
        401
    );
    assert_eq!(
        harness::http_status_with(&http, "/metrics", &bearer(ADMIN)),
        200
    );

    // A fleet view stream lives no longer than its token (issue 32, part 3): revoked, the
    // open `/ui/events` stream ends.
    let viewer = create_token(&group, "*", "reader");
    let mut stream = open_events(&http, &viewer);
    let viewer_id = token_id(&viewer);
    ok(
        starling(&group, 1, Some(ADMIN), &["token", "revoke", &viewer_id]),
        "revoke the viewer",
    );
    let ended = tokio::task::spawn_blocking(move || {
        use std::io::Read as _;
        let mut rest = Vec::new();
        stream.read_to_end(&mut rest).is_ok()
    })
    .await
    .expect("reader task");
    assert!(
        ended,
        "the stream of a revoked token was still open after {STREAM_LIMIT:?}"
    );

    // Tokens are replicated: the leader goes, the others still know every token.
    let leader = group.status().await.expect("status").leader_id;
    group.kill(leader);
    let survivor = group.running().next().expect("a survivor").id;
    wait_until(Duration::from_secs(30), "a new leader", || async {
        group
            .status()
            .await
            .is_some_and(|s| s.leader_id != 0 && s.leader_id != leader)
    })
    .await;
    ok(
        starling(
            &group,
            survivor,
            Some(&reader_a),
            &["get", "clusters", "-n", "team-a"],
        ),
        "the reader after the leader is gone",
    );

    // Revoked: refused at once, on every replica.
    let id = token_id(&writer_a);
    ok(
        starling(&group, survivor, Some(ADMIN), &["token", "revoke", &id]),
        "revoke",
    );
    for node in group.running().map(|n| n.id).collect::<Vec<_>>() {
        wait_until(
            Duration::from_secs(10),
            "the revocation applied",
            || async {
                !starling(
                    &group,
                    node,
                    Some(&writer_a),
                    &["get", "clusters", "-n", "team-a"],
                )
                .status
                .success()
            },
        )
        .await;
    }
    let revoked = refused(
        starling(
            &group,
            survivor,
            Some(&writer_a),
            &["get", "clusters", "-n", "team-a"],
        ),
        "a revoked token",
    );
    assert!(revoked.contains("invalid or revoked token"), "{revoked}");

    // Issue 54, the audit: every change above left exactly one entry naming who made it and
    // through which replica, across the leader's kill; a refused write left none; a tenant
    // reads only its own namespaces' entries; no token or Secret value is recorded.
    for args in [
        ["rollout", "pause", "web", "-n", "team-a"],
        ["cluster", "hold", "a1", "-n", "team-a"],
    ] {
        ok(
            starling(&group, survivor, Some(ADMIN), &args),
            "an operation",
        );
    }
    let audit = |token: &str, args: &[&str]| -> Vec<serde_json::Value> {
        let mut all = vec!["audit", "-o", "json"];
        all.extend_from_slice(args);
        let text = ok(starling(&group, survivor, Some(token), &all), "audit");
        let parsed: serde_json::Value = serde_json::from_str(&text).expect("audit json");
        parsed["entries"].as_array().expect("entries").clone()
    };
    let entries = audit(ADMIN, &[]);
    let field =
        |entry: &serde_json::Value, name: &str| entry[name].as_str().unwrap_or("").to_owned();
    let matching = |action: &str, kind: &str, name: &str| -> Vec<serde_json::Value> {
        entries
            .iter()
            .filter(|e| {
                field(e, "action") == action && field(e, "kind") == kind && field(e, "name") == name
            })
            .cloned()
            .collect()
    };
    let creates = entries
        .iter()
        .filter(|e| field(e, "action") == "token create");
    assert!(
        creates
            .clone()
            .all(|e| field(e, "actor") == "the admin token" && e["replica"] == 1),
        "{entries:?}"
    );
    assert_eq!(creates.count(), 6, "one entry per token made: {entries:?}");
    let writer_a_actor = format!("token {}", token_id(&writer_a));
    for (kind, name) in [
        ("Cluster", "a1"),
        ("Cluster", "a2"),
        ("Secret", "creds"),
        ("SyncGroup", "web"),
    ] {
        let applied = matching("apply", kind, name);
        assert_eq!(applied.len(), 1, "{kind} {name}: {entries:?}");
        let entry = &applied[0];
        assert_eq!(field(entry, "actor"), writer_a_actor);
        assert_eq!(
            (field(entry, "namespace"), field(entry, "detail")),
            ("team-a".into(), "created".into())
        );
        assert_eq!(entry["replica"], 1);
        assert!(field(entry, "address").starts_with("127.0.0.1:"), "{entry}");
        assert_eq!(entry["generationAfter"], 1);
    }
    assert_eq!(matching("apply", "Secret", "creds")[0]["specDigest"], "");
    let writer_b_actor = format!("token {}", token_id(&writer_b));
    for name in ["b1", "b2"] {
        let applied = matching("apply", "Cluster", name);
        assert_eq!(applied.len(), 1, "{name}: {entries:?}");
        assert_eq!(
            (field(&applied[0], "actor"), applied[0]["replica"].clone()),
            (writer_b_actor.clone(), 2.into())
        );
    }
    assert!(
        entries.iter().all(|e| field(e, "name") != "x"),
        "a refused write was recorded"
    );
    let revoked = matching("token revoke", "Token", &token_id(&writer_a));
    assert_eq!(revoked.len(), 1, "{entries:?}");
    assert_eq!(
        revoked[0]["replica"], survivor,
        "taken by the replica the client called"
    );
    for (action, kind, name) in [
        ("rollout pause", "SyncGroup", "web"),
        ("cluster hold", "Cluster", "a1"),
    ] {
        let done = matching(action, kind, name);
        assert_eq!(done.len(), 1, "{action}: {entries:?}");
        assert_eq!(field(&done[0], "actor"), "the admin token");
    }
    // A tenant's reader sees team-a's entries and nothing else (no tokens, no team-b).
    let seen = audit(&reader_ab, &["-n", "team-a"]);
    assert!(
        seen.len() >= 6 && seen.iter().all(|e| field(e, "namespace") == "team-a"),
        "{seen:?}"
    );
    let refused_b = refused(
        starling(
            &group,
            survivor,
            Some(&reader_a),
            &["audit", "-n", "team-b"],
        ),
        "another tenant's audit",
    );
    assert!(
        refused_b.contains("may not read in namespace team-b"),
        "{refused_b}"
    );
    let own = audit(&reader_a, &[]);
    assert!(
        !own.is_empty() && own.iter().all(|e| field(e, "namespace") == "team-a"),
        "{own:?}"
    );
    // Filters, and the per-object history of `describe`.
    let by_b = audit(ADMIN, &["--who", &token_id(&writer_b)]);
    assert_eq!(by_b.len(), 2, "{by_b:?}");
    let described = ok(
        starling(
            &group,
            survivor,
            Some(ADMIN),
            &["describe", "syncgroup", "web", "-n", "team-a"],
        ),
        "describe",
    );
    assert!(
        described.contains("History (starling audit):") && described.contains("rollout pause"),
        "{described}"
    );
    let recorded = serde_json::to_string(&entries).expect("json");
    for secret in [
        ADMIN,
        SECRET_VALUE,
        &writer_a,
        &reader_a,
        &writer_b,
        &agent_a,
    ] {
        assert!(
            !recorded.contains(&secret[secret.len() - 16..]),
            "the audit log holds a secret"
        );
    }

    // No secret in any log.
    for id in 1..=3 {
        let log = std::fs::read_to_string(group.log_path(id)).unwrap_or_default();
        assert!(!log.is_empty(), "node {id} logged nothing");
        for secret in [
            ADMIN,
            SECRET_VALUE,
            &writer_a,
            &reader_a,
            &writer_b,
            &agent_a,
        ] {
            let tail = &secret[secret.len() - 16..];
            assert!(!log.contains(tail), "node {id}'s log holds a secret");
        }
    }
}

/// Issue 32, part 3: a token made with `--ttl` is refused once expired and listed as such;
/// `token list` shows when tokens were last used (reported every `--token-use-interval`); the
/// admin token rotates by rewriting its file, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_expire_show_their_last_use_and_the_admin_token_rotates() {
    let group = Group::start_together(
        3,
        Options {
            admin_token: Some(ADMIN.into()),
            extra_args: vec!["--token-use-interval=1s".into()],
            ..Options::default()
        },
    );
    group.wait_for_members(3).await;

    // A token for two tenants that lives six seconds.
    let text = ok(
        starling(
            &group,
            1,
            Some(ADMIN),
            &[
                "token",
                "create",
                "--tenant",
                "team-a,team-b",
                "--role",
                "reader",
                "--ttl",
                "6s",
            ],
        ),
        "token create --ttl",
    );
    assert!(text.contains("for 6s"), "{text}");
    let short_lived = text.lines().last().expect("a token line").trim().to_owned();
    let id = token_id(&short_lived);
    // Another replica takes it once it has applied the token's creation (a follower may be a
    // moment behind the write).
    wait_until(
        Duration::from_secs(5),
        "a fresh token reads on another replica",
        || async {
            starling(
                &group,
                2,
                Some(&short_lived),
                &["get", "clusters", "-n", "team-b"],
            )
            .status
            .success()
        },
    )
    .await;
    // Its use reaches the replicated state within the report interval.
    wait_until(
        Duration::from_secs(30),
        "the token's last use listed",
        || async {
            let list = ok(
                starling(&group, 1, Some(ADMIN), &["token", "list", "-o", "json"]),
                "token list",
            );
            let list: serde_json::Value = serde_json::from_str(&list).expect("json");
            list["tokens"].as_array().into_iter().flatten().any(|t| {
                t["id"] == id.as_str() && t["lastUsed"].is_string() && t["expires"].is_string()
            })
        },
    )
    .await;
    wait_until(
        Duration::from_secs(30),
        "the token refused as expired",
        || async {
            let output = starling(
                &group,
                3,
                Some(&short_lived),
                &["get", "clusters", "-n", "team-b"],
            );
            !output.status.success() && String::from_utf8_lossy(&output.stderr).contains("expired")
        },
    )
    .await;
    let list = ok(
        starling(&group, 1, Some(ADMIN), &["token", "list"]),
        "token list",
    );
    assert!(
        list.lines()
            .any(|l| l.starts_with(&id) && l.contains("(expired)")),
        "{list}"
    );

    // The admin token rotates: the file is rewritten, every replica refuses the old one and
    // takes the new one, with no restart.
    let rotated = "rotated-admin-token-for-the-tenancy-test-9876543210";
    std::fs::write(group.admin_token_file(), rotated).expect("rewrite the admin token");
    wait_until(
        Duration::from_secs(30),
        "every replica on the new admin token",
        || async {
            (1..=3).all(|node| {
                let old = starling(&group, node, Some(ADMIN), &["members", "list"]);
                let new = starling(&group, node, Some(rotated), &["members", "list"]);
                !old.status.success() && new.status.success()
            })
        },
    )
    .await;
    // The replicas still reach each other's Admin API with it: a write through a follower
    // is forwarded to the leader.
    let created = ok(
        starling(
            &group,
            3,
            Some(rotated),
            &["token", "create", "--tenant", "team-a"],
        ),
        "token create with the rotated admin token",
    );
    assert!(created.contains("stl_"), "{created}");
}

/// Issue 32, part 3: `starling node --validate-config` reads the admin token file as a start
/// does: a missing, blank or short one is refused, saying why, once.
#[test]
fn validate_config_checks_the_admin_token_file_as_a_start_does() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = |name: &str, content: Option<&str>| {
        let path = dir.path().join(name);
        if let Some(content) = content {
            std::fs::write(&path, content).expect("write the token file");
        }
        path.to_str().expect("utf-8 path").to_owned()
    };
    let validate = |token_file: &str| {
        Command::new(binary())
            .args(["node", "--id", "1", "--insecure", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(["--admin-token-file", token_file, "--validate-config"])
            .env_remove("STARLING_ADMIN_TOKEN_FILE")
            .output()
            .expect("run starling node --validate-config")
    };
    for (name, content, says) in [
        ("missing", None, "cannot read the admin token file"),
        ("blank", Some("\n"), "too short"),
        ("short", Some("0123456789"), "too short"),
    ] {
        let output = validate(&file(name, content));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success(),
            "a {name} admin token file was accepted"
        );
        assert!(stderr.contains(says), "{name}: {stderr}");
        assert_eq!(
            stderr.matches(says).count(),
            1,
            "{name}: said twice: {stderr}"
        );
    }
    let output = validate(&file("good", Some(ADMIN)));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains(" auth tokens "));
}

//! Rollout order end to end, with real `starling node` processes, fleetsim and a git
//! repository served by `git daemon`:
//!
//! - a revision superseded in the middle of its rollout is never applied to the clusters that
//!   had not started it: they go straight to the newest. "Started" is read from the fleet's own
//!   watch stream (a granted `BeginSync` sets the Sync's `lastAttemptedRevision`); "applied"
//!   from the request bodies in fleetsim's audit log;
//! - `dependsOn` across two SyncGroups: on every cluster, the dependent group writes nothing
//!   before the dependency's workload is ready, for the first rollout and for a new commit of
//!   the shared source.

mod harness;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fleetsim::{AuditFilter, AuditLevel, AuditRecord, FleetSim, Origin};
use harness::{Group, Options, demo_fixture, demo_manifests, start_demo_group, wait_until};
use serde_json::Value;

/// Waits until SyncGroup `name` targets a revision other than `previous` and has updated all
/// `clusters`; returns that revision.
async fn wait_complete(group: &Group, name: &str, previous: &str, clusters: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let status = group.rollout(name).await;
        if let Some(current) = &status
            && current.target_revision != previous
            && current.phase == "Complete"
            && current
                .summary
                .is_some_and(|s| s.updated as usize == clusters)
        {
            return current.target_revision.clone();
        }
        assert!(
            Instant::now() < deadline,
            "rollout of {name} did not complete: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The fleet's watch stream (every kind), collected in order by a background task.
struct Watch {
    events: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Watch {
    async fn start(address: &str) -> Watch {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
            .expect("valid address")
            .connect()
            .await
            .expect("node reachable");
        let mut client = proto::fleet_client::FleetClient::new(channel);
        let mut stream = client
            .watch(proto::WatchRequest::default())
            .await
            .expect("watch starts")
            .into_inner();
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        let task = tokio::spawn(async move {
            while let Some(event) = stream.message().await.expect("watch keeps up") {
                if let Some(object) = event.object
                    && let Ok(value) = serde_json::from_slice::<Value>(&object.json)
                {
                    sink.lock().expect("events").push(value);
                }
            }
        });
        Watch { events, task }
    }

    fn snapshot(&self) -> Vec<Value> {
        self.events.lock().expect("events").clone()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn is(value: &Value, kind: &str, name: &str) -> bool {
    value["kind"] == kind && value["metadata"]["name"] == name
}

/// Successful API writes since `since`, oldest first.
fn writes_since(sim: &FleetSim, since: u64) -> Vec<AuditRecord> {
    let mut records = sim.audit(&AuditFilter {
        since: Some(since),
        success_only: true,
        ..AuditFilter::default()
    });
    records.sort_by_key(|r| r.seq);
    records
}

const CLUSTERS: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_superseded_revision_is_never_applied_to_clusters_that_had_not_started_it() {
    let fixture = demo_fixture(fleetsim::Config {
        clusters: CLUSTERS,
        ready_delay: Duration::from_millis(400),
        audit_level: AuditLevel::Request,
        ..Default::default()
    })
    .await;
    let (sim, demo, url) = (&fixture.sim, &fixture.repo, fixture.url.clone());
    let group = start_demo_group(sim, &url).await;
    let v1 = wait_complete(&group, "demo", "", CLUSTERS).await;

    let watch = Watch::start(&group.nodes[&1].grpc).await;
    let since = sim.audit_stats().recorded;
    demo.commit("v2", "nginx:1.28", "v2").expect("commit v2");
    // v3 lands while v2 is mid-rollout: some clusters have it, most have not started.
    let deadline = Instant::now() + Duration::from_secs(60);
    let v2 = loop {
        match group.rollout("demo").await {
            Some(s) if s.target_revision != v1 && s.summary.is_some_and(|m| m.updated >= 30) => {
                break s.target_revision;
            }
            status => assert!(Instant::now() < deadline, "v2 not under way: {status:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    demo.commit("v3", "nginx:1.29", "v3").expect("commit v3");
    let v3 = wait_complete(&group, "demo", &v2, CLUSTERS).await;
    wait_until(
        Duration::from_secs(20),
        "the watch has every Sync at v3",
        || async {
            let done: BTreeSet<String> = watch
                .snapshot()
                .iter()
                .filter(|e| {
                    e["kind"] == "Sync" && e["status"]["lastAppliedRevision"] == v3.as_str()
                })
                .filter_map(|e| e["metadata"]["name"].as_str().map(str::to_string))
                .collect();
            done.len() == CLUSTERS
        },
    )
    .await;

    // Started v2 before v3 was resolved, as the watch saw it (events in log order).
    let events = watch.snapshot();
    let resolved_v3 = events
        .iter()
        .position(|e| is(e, "Source", "demo") && e["status"]["revision"] == v3.as_str())
        .expect("the watch saw v3 resolved");
    // Watchers of the SyncGroup learn its new target when the source resolves it, before
    // any Sync starts it.
    let group_moved = events
        .iter()
        .position(|e| is(e, "SyncGroup", "demo") && e["status"]["targetRevision"] == v3.as_str())
        .expect("a SyncGroup event with the new target");
    let first_v3_start = events
        .iter()
        .position(|e| e["kind"] == "Sync" && e["status"]["lastAttemptedRevision"] == v3.as_str())
        .expect("a Sync started v3");
    assert!(group_moved <= first_v3_start);
    let cluster_of = |e: &Value| e["spec"]["clusterRef"]["name"].as_str().map(str::to_string);
    let started_v2: BTreeSet<String> = events[..resolved_v3]
        .iter()
        .filter(|e| e["kind"] == "Sync" && e["status"]["lastAttemptedRevision"] == v2.as_str())
        .filter_map(cluster_of)
        .collect();
    let late_v2: BTreeSet<String> = events[resolved_v3..]
        .iter()
        .filter(|e| e["kind"] == "Sync" && e["status"]["lastAttemptedRevision"] == v2.as_str())
        .filter_map(cluster_of)
        .filter(|c| !started_v2.contains(c))
        .collect();
    assert!(
        late_v2.is_empty(),
        "clusters started v2 after v3 was resolved: {late_v2:?}"
    );

    // Applied, per fleetsim: the config map versions each cluster was sent.
    let mut sent: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for record in writes_since(sim, since) {
        if record.origin == Origin::Api
            && record.name.as_deref() == Some("demo-config")
            && let Some(version) = record
                .request_object
                .as_ref()
                .and_then(|o| o["data"]["version"].as_str())
        {
            sent.entry(record.cluster.clone())
                .or_default()
                .push(version.to_string());
        }
    }
    let got_v2: BTreeSet<String> = sent
        .iter()
        .filter(|(_, versions)| versions.iter().any(|v| v == "v2"))
        .map(|(cluster, _)| cluster.clone())
        .collect();
    let not_started: Vec<String> = sim
        .cluster_names()
        .into_iter()
        .filter(|c| !started_v2.contains(c))
        .collect();
    assert!(
        !not_started.is_empty(),
        "v3 came too late to supersede anything ({} started v2)",
        started_v2.len()
    );
    let wrongly: Vec<&String> = got_v2.difference(&started_v2).collect();
    assert!(
        wrongly.is_empty(),
        "v2 applied to clusters that had not started it: {wrongly:?}"
    );
    for cluster in &not_started {
        assert_eq!(
            sent.get(cluster).and_then(|v| v.last()).map(String::as_str),
            Some("v3"),
            "{cluster} went straight to v3"
        );
    }
    eprintln!(
        "superseded: {} clusters started v2, {} received it, {} went straight to v3",
        started_v2.len(),
        got_v2.len(),
        not_started.len()
    );
}

/// The infrastructure the app depends on: a namespace, a config map and a deployment whose
/// readiness takes fleetsim's ready delay.
fn infra_files(version: &str) -> Vec<(&'static str, String)> {
    vec![
        (
            "infra/namespace.yaml",
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo-infra\n".to_string(),
        ),
        (
            "infra/config.yaml",
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: infra-config\n  namespace: demo-infra\ndata:\n  version: \"{version}\"\n"
            ),
        ),
        (
            "infra/deployment.yaml",
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: infra-proxy\n  namespace: demo-infra\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: infra-proxy}}\n  template:\n    metadata:\n      labels: {{app: infra-proxy}}\n    spec:\n      containers:\n        - name: proxy\n          image: envoy:{version}\n"
            ),
        ),
    ]
}

/// For every cluster: the dependent app's first write since `since` comes after the last
/// status write that made the infra deployment ready. Returns how many clusters were checked.
fn check_order(sim: &FleetSim, since: u64) -> usize {
    let mut infra_ready: BTreeMap<String, u64> = BTreeMap::new();
    let mut app_first: BTreeMap<String, u64> = BTreeMap::new();
    for record in writes_since(sim, since) {
        let app = record.origin == Origin::Api
            && (record.namespace.as_deref() == Some("demo")
                || (record.kind == "Namespace" && record.name.as_deref() == Some("demo")));
        if record.origin == Origin::Controller
            && record.kind == "Deployment"
            && record.name.as_deref() == Some("infra-proxy")
        {
            infra_ready.insert(record.cluster.clone(), record.seq);
        } else if app && !record.dry_run {
            app_first
                .entry(record.cluster.clone())
                .or_insert(record.seq);
        }
    }
    for cluster in sim.cluster_names() {
        let ready = infra_ready
            .get(&cluster)
            .unwrap_or_else(|| panic!("{cluster}: infra deployment never got ready"));
        let first = app_first
            .get(&cluster)
            .unwrap_or_else(|| panic!("{cluster}: the app was never written"));
        assert!(
            first > ready,
            "{cluster}: the app was written (audit #{first}) before its dependency was ready (#{ready})"
        );
    }
    infra_ready.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn depends_on_orders_two_sync_groups_on_every_cluster() {
    let fixture = demo_fixture(fleetsim::Config {
        clusters: CLUSTERS,
        ready_delay: Duration::from_millis(300),
        ..Default::default()
    })
    .await;
    let (sim, demo, url) = (&fixture.sim, &fixture.repo, fixture.url.clone());
    demo.commit_files(&infra_files("v1"), "infra v1")
        .expect("infra committed");
    let group = Group::start(
        3,
        Options {
            extra_args: vec!["--max-concurrent-syncs".into(), "16".into()],
            ..Options::default()
        },
    )
    .await;
    let infra = "---\napiVersion: starling.dev/v1alpha1\nkind: SyncGroup\nmetadata: {name: infra}\nspec:\n  sourceRef: {name: demo}\n  clusterSelector: {}\n  template:\n    path: infra\n  rollout:\n    maxUnavailable: \"20%\"\n";
    let manifests = demo_manifests(
        sim,
        &url,
        "    dependsOn:\n      - name: infra\n",
        "    maxUnavailable: \"20%\"\n",
    ) + infra;
    group.apply(1, &manifests).await.expect("specs applied");

    // The first rollout: app after infra, cluster by cluster.
    let first = wait_complete(&group, "demo", "", CLUSTERS).await;
    wait_complete(&group, "infra", "", CLUSTERS).await;
    assert_eq!(check_order(sim, 0), CLUSTERS);

    // A new commit of the shared source changes both: infra goes first again everywhere,
    // although it is already ready at the old revision.
    let since = sim.audit_stats().recorded;
    let mut files = infra_files("v2");
    files.push((
        "app/config.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo-config\n  namespace: demo\ndata:\n  version: \"v2\"\n".to_string(),
    ));
    demo.commit_files(&files, "infra and app v2")
        .expect("v2 committed");
    wait_complete(&group, "demo", &first, CLUSTERS).await;
    wait_complete(&group, "infra", &first, CLUSTERS).await;
    assert_eq!(check_order(sim, since), CLUSTERS);
}

const DATABASE_CRD: &str = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: databases.example.com\nspec:\n  group: example.com\n  scope: Namespaced\n  names: {kind: Database, plural: databases, singular: database, listKind: DatabaseList}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    subresources: {status: {}}\n    schema:\n      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}\n";

/// The database's status on `cluster`, as its operator writes it.
fn set_database_status(sim: &FleetSim, cluster: &str, status: Value) {
    let mut live = sim
        .get_object(
            cluster,
            "example.com/v1",
            "Database",
            Some("demo-infra"),
            "orders",
        )
        .expect("the cluster exists")
        .expect("the database exists");
    live["status"] = status;
    sim.set_object_as(cluster, "database-operator", live)
        .expect("the operator writes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_check_holds_dependants_until_the_custom_resource_is_ready() {
    const CLUSTERS: usize = 6;
    let fixture = demo_fixture(fleetsim::Config {
        clusters: CLUSTERS,
        ready_delay: Duration::from_millis(100),
        ..Default::default()
    })
    .await;
    let (sim, demo, url) = (&fixture.sim, &fixture.repo, fixture.url.clone());
    let infra = vec![
        ("infra/crd.yaml", DATABASE_CRD.to_string()),
        (
            "infra/namespace.yaml",
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo-infra\n".to_string(),
        ),
        (
            "infra/database.yaml",
            "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: orders\n  namespace: demo-infra\nspec:\n  size: small\n".to_string(),
        ),
    ];
    demo.commit_files(&infra, "a database").expect("committed");
    let group = Group::start(3, Options::default()).await;
    // kstatus alone would call the database current as soon as it exists (no conditions).
    let infra_group = "---\napiVersion: starling.dev/v1alpha1\nkind: SyncGroup\nmetadata: {name: infra}\nspec:\n  sourceRef: {name: demo}\n  clusterSelector: {}\n  template:\n    path: infra\n    timeout: 3m\n    healthChecks:\n      - apiVersion: example.com/v1\n        kind: Database\n        inProgress: \"!has(self.status) || status.phase == 'Provisioning'\"\n        failed: \"status.phase == 'Failed'\"\n        current: \"status.phase == 'Ready'\"\n  rollout:\n    maxUnavailable: \"100%\"\n    maxFailures: 0\n";
    let manifests = demo_manifests(
        sim,
        &url,
        "    dependsOn:\n      - name: infra\n",
        "    maxUnavailable: \"100%\"\n",
    ) + infra_group;
    group.apply(1, &manifests).await.expect("specs applied");

    let clusters = sim.cluster_names();
    wait_until(
        Duration::from_secs(120),
        "the database on every cluster",
        || async {
            clusters.iter().all(|cluster| {
                sim.get_object(
                    cluster,
                    "example.com/v1",
                    "Database",
                    Some("demo-infra"),
                    "orders",
                )
                .is_ok_and(|object| object.is_some())
            })
        },
    )
    .await;
    for cluster in &clusters {
        set_database_status(sim, cluster, serde_json::json!({"phase": "Provisioning"}));
    }
    // Every cluster but the last gets ready; the last one fails, with its operator's message.
    let (failing, ready) = clusters.split_last().expect("clusters");
    for cluster in ready {
        set_database_status(sim, cluster, serde_json::json!({"phase": "Ready"}));
    }
    set_database_status(
        sim,
        failing,
        serde_json::json!({"phase": "Failed", "conditions": [{"type": "Ready", "status": "False", "reason": "DiskFull", "message": "volume orders-0 is full"}]}),
    );

    let app_writes = |cluster: &str| -> Vec<u64> {
        writes_since(sim, 0)
            .into_iter()
            .filter(|r| r.cluster == cluster && r.origin == Origin::Api && !r.dry_run)
            .filter(|r| r.namespace.as_deref() == Some("demo") || r.name.as_deref() == Some("demo"))
            .map(|r| r.seq)
            .collect()
    };
    wait_until(
        Duration::from_secs(120),
        "the app on every ready cluster",
        || async { ready.iter().all(|cluster| !app_writes(cluster).is_empty()) },
    )
    .await;
    wait_until(Duration::from_secs(60), "infra halted", || async {
        group
            .rollout("infra")
            .await
            .is_some_and(|r| r.phase == "Halted" && r.summary.is_some_and(|s| s.failed == 1))
    })
    .await;

    // On every ready cluster the app came after the operator's Ready; never on the failed one.
    for cluster in ready {
        let became_ready = writes_since(sim, 0)
            .into_iter()
            .filter(|r| r.cluster == *cluster && r.kind == "Database")
            .filter(|r| r.field_manager.as_deref() == Some("database-operator"))
            .map(|r| r.seq)
            .max()
            .expect("the operator wrote");
        let first = app_writes(cluster)[0];
        assert!(
            first > became_ready,
            "{cluster}: the app was written (#{first}) before the database was ready (#{became_ready})"
        );
    }
    assert!(
        app_writes(failing).is_empty(),
        "{failing}: its dependency failed"
    );
    let syncs: Value =
        serde_json::from_str(&group.cli(&["get", "syncs", "-o", "json"])).expect("json");
    let failed = syncs.to_string();
    assert!(
        failed.contains("volume orders-0 is full"),
        "the failed sync says why: {failed}"
    );
}

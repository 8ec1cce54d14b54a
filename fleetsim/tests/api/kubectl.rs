//! The machine's kubectl (`/usr/bin/kubectl`) against fleetsim, checked on fleetsim's side:
//! what it stored and what its audit log recorded. kubectl sends built-in types as protobuf
//! (`kubectl create ...`), computes strategic merge patches for a client-side
//! `kubectl apply`, reads `/openapi/v3` before applying, and sends server-side applies.
//!
//! Each `kubectl create` is compared with the JSON that kubectl itself prints for the same
//! object (`--dry-run=client -o json`, Go's `encoding/json`): the protobuf body fleetsim
//! decoded must be that JSON exactly.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fleetsim::{AuditFilter, AuditLevel, Config, FleetSim};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use super::common::quick_config;

const KUBECTL: &str = "/usr/bin/kubectl";

/// One kubectl invocation never takes longer than this.
const KUBECTL_TIMEOUT: Duration = Duration::from_secs(60);

/// kubectl with a kubeconfig for one simulated cluster and caches of its own.
struct Kubectl {
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Kubectl {
    fn new(sim: &FleetSim, cluster: &str) -> Kubectl {
        assert!(
            Path::new(KUBECTL).exists(),
            "{KUBECTL} is missing: these tests run the machine's kubectl (1.32), which every \
             machine of this kind has"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, sim.kubeconfig(cluster).expect("kubeconfig"))
            .expect("kubeconfig written");
        Kubectl { dir, kubeconfig }
    }

    /// Runs kubectl; returns (success, stdout, stderr).
    async fn run(&self, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
        let mut command = tokio::process::Command::new(KUBECTL);
        command
            .args(args)
            .arg(format!(
                "--cache-dir={}",
                self.dir.path().join("cache").display()
            ))
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.dir.path())
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("kubectl starts");
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(text.as_bytes())
                .await
                .expect("stdin written");
        }
        let output = tokio::time::timeout(KUBECTL_TIMEOUT, child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} did not finish in {KUBECTL_TIMEOUT:?}"))
            .expect("kubectl runs");
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// Runs kubectl and returns its stdout, failing the test with its stderr otherwise.
    async fn ok(&self, args: &[&str]) -> String {
        self.ok_with_input(args, None).await
    }

    async fn ok_with_input(&self, args: &[&str], stdin: Option<&str>) -> String {
        let (success, stdout, stderr) = self.run(args, stdin).await;
        assert!(success, "kubectl {args:?} failed:\n{stderr}\n{stdout}");
        stdout
    }

    /// `kubectl create ARGS` and the JSON kubectl prints for it without sending it.
    async fn create(&self, args: &[&str]) -> Value {
        let mut dry_run = vec!["create", "--dry-run=client", "-o", "json"];
        dry_run.extend_from_slice(args);
        let printed = self.ok(&dry_run).await;
        let mut create = vec!["create"];
        create.extend_from_slice(args);
        self.ok(&create).await;
        serde_json::from_str(&printed).expect("kubectl prints json")
    }
}

async fn start() -> FleetSim {
    FleetSim::start(Config {
        audit_level: AuditLevel::Request,
        ..quick_config(1)
    })
    .await
    .expect("fleetsim starts")
}

/// The last successful write of `verb` to the named object.
fn last_write(sim: &FleetSim, verb: &str, name: &str) -> fleetsim::AuditRecord {
    sim.audit(&AuditFilter {
        verb: Some(verb.to_string()),
        name: Some(name.to_string()),
        success_only: true,
        ..AuditFilter::cluster("c0")
    })
    .pop()
    .unwrap_or_else(|| panic!("no successful {verb} of {name} in the audit log"))
}

fn stored(
    sim: &FleetSim,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Value {
    sim.get_object("c0", api_version, kind, namespace, name)
        .expect("cluster exists")
        .unwrap_or_else(|| panic!("{kind} {name} is not stored"))
}

/// The regression of issue 51: kubectl sends a Namespace as protobuf, which fleetsim
/// refused with 415 UnsupportedMediaType.
#[tokio::test]
async fn kubectl_create_namespace_sends_protobuf_that_fleetsim_stores() {
    let sim = start().await;
    let kubectl = Kubectl::new(&sim, "c0");
    let printed = kubectl.create(&["namespace", "team-a"]).await;
    let record = last_write(&sim, "create", "team-a");
    assert_eq!(record.kind, "Namespace");
    assert_eq!(record.status, 201);
    assert_eq!(record.field_manager.as_deref(), Some("kubectl-create"));
    assert_eq!(record.request_object.as_ref(), Some(&printed));
    let namespace = stored(&sim, "v1", "Namespace", None, "team-a");
    assert_eq!(namespace["status"]["phase"], "Active");
    assert_eq!(
        namespace["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "team-a"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn kubectl_create_secret_and_configmap_keep_their_data() {
    let sim = start().await;
    let kubectl = Kubectl::new(&sim, "c0");
    let printed = kubectl
        .create(&[
            "secret",
            "generic",
            "creds",
            "--from-literal=password=s3cret",
            "--from-literal=user=admin",
        ])
        .await;
    let secret = stored(&sim, "v1", "Secret", Some("default"), "creds");
    // `[]byte` values travel raw in protobuf and land base64 in JSON, as in Kubernetes
    assert_eq!(
        secret["data"],
        json!({"password": "czNjcmV0", "user": "YWRtaW4="})
    );
    assert_eq!(
        last_write(&sim, "create", "creds").request_object,
        Some(printed)
    );
    let password = kubectl
        .ok(&["get", "secret", "creds", "-o", "jsonpath={.data.password}"])
        .await;
    assert_eq!(password, "czNjcmV0");

    let printed = kubectl
        .create(&[
            "configmap",
            "settings",
            "--from-literal=mode=fast",
            "--from-literal=level=3",
        ])
        .await;
    let config_map = stored(&sim, "v1", "ConfigMap", Some("default"), "settings");
    assert_eq!(config_map["data"], json!({"mode": "fast", "level": "3"}));
    assert_eq!(
        last_write(&sim, "create", "settings").request_object,
        Some(printed)
    );
    sim.shutdown().await;
}

/// Every kind `kubectl create` makes arrives as the JSON Go writes for it: pointers kept at
/// zero (`replicas: 0`), `IntOrString`, `Quantity`, empty structs, `creationTimestamp: null`,
/// lists without omitempty as `null`.
#[tokio::test]
async fn kubectl_create_bodies_decode_to_the_json_go_writes() {
    let sim = start().await;
    let kubectl = Kubectl::new(&sim, "c0");
    let commands: &[&[&str]] = &[
        &[
            "deployment",
            "web",
            "--image=nginx:1.25",
            "--replicas=0",
            "--port=80",
        ],
        &["service", "clusterip", "web", "--tcp=80:http"],
        &["job", "once", "--image=busybox", "--", "echo", "hi"],
        &[
            "cronjob",
            "nightly",
            "--image=busybox",
            "--schedule=*/5 * * * *",
        ],
        &[
            "role",
            "reader",
            "--verb=get,list",
            "--resource=pods,configmaps",
        ],
        &[
            "rolebinding",
            "readers",
            "--role=reader",
            "--user=alice",
            "--serviceaccount=default:robot",
        ],
        &["clusterrole", "aggregated", "--aggregation-rule=team=a"],
        &[
            "clusterrolebinding",
            "devs",
            "--clusterrole=aggregated",
            "--group=devs",
        ],
        &["serviceaccount", "robot"],
        &[
            "poddisruptionbudget",
            "web",
            "--selector=app=web",
            "--min-available=50%",
        ],
        &["quota", "small", "--hard=cpu=1,memory=1Gi,pods=2"],
        &[
            "ingress",
            "site",
            "--rule=foo.example/bar*=web:8080,tls=site-cert",
        ],
        &[
            "secret",
            "docker-registry",
            "pull",
            "--docker-server=r.example",
            "--docker-username=u",
            "--docker-password=p",
        ],
    ];
    for command in commands {
        let printed = kubectl.create(command).await;
        let name = printed["metadata"]["name"]
            .as_str()
            .expect("a name")
            .to_string();
        let record = last_write(&sim, "create", &name);
        assert_eq!(
            record.request_object.as_ref(),
            Some(&printed),
            "kubectl create {command:?}"
        );
    }
    let deployment = stored(&sim, "apps/v1", "Deployment", Some("default"), "web");
    assert_eq!(deployment["spec"]["replicas"], 0);
    let service = stored(&sim, "v1", "Service", Some("default"), "web");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
    let role = stored(
        &sim,
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        None,
        "aggregated",
    );
    assert_eq!(role["rules"], Value::Null);
    sim.shutdown().await;
}

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
  labels: {app: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx:1.25
        ports: [{containerPort: 80}]
        env: [{name: A, value: "1"}, {name: B, value: "2"}]
      - name: side
        image: busybox
"#;

fn containers(deployment: &Value) -> Vec<(String, String)> {
    deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default().to_string(),
                c["image"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Client-side apply: create with the last-applied annotation, then strategic merge
/// patches that change one container, one env var, and drop a container.
#[tokio::test]
async fn kubectl_apply_patches_with_strategic_merge() {
    let sim = start().await;
    let kubectl = Kubectl::new(&sim, "c0");
    kubectl
        .ok_with_input(&["apply", "-f", "-"], Some(DEPLOYMENT))
        .await;
    let created = stored(&sim, "apps/v1", "Deployment", Some("default"), "web");
    let last_applied: Value = serde_json::from_str(
        created["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .expect("last-applied annotation"),
    )
    .expect("annotation is json");
    assert_eq!(last_applied["spec"]["replicas"], 2);
    assert_eq!(
        last_write(&sim, "create", "web").field_manager.as_deref(),
        Some("kubectl-client-side-apply")
    );

    let changed = DEPLOYMENT
        .replace("nginx:1.25", "nginx:1.26")
        .replace(r#"value: "2""#, r#"value: "3""#);
    kubectl
        .ok_with_input(&["apply", "-f", "-"], Some(&changed))
        .await;
    let patch = last_write(&sim, "patch", "web");
    assert_eq!(
        patch.field_manager.as_deref(),
        Some("kubectl-client-side-apply")
    );
    let body = patch.request_object.expect("the patch is audited");
    assert!(
        body.to_string().contains("$setElementOrder/containers"),
        "kubectl sent a strategic merge patch: {body}"
    );
    let patched = stored(&sim, "apps/v1", "Deployment", Some("default"), "web");
    assert_eq!(
        containers(&patched),
        [
            ("web".into(), "nginx:1.26".into()),
            ("side".into(), "busybox".into())
        ]
    );
    assert_eq!(
        patched["spec"]["template"]["spec"]["containers"][0]["env"],
        json!([{"name": "A", "value": "1"}, {"name": "B", "value": "3"}])
    );
    assert_eq!(
        patched["spec"]["template"]["spec"]["containers"][0]["ports"],
        json!([{"containerPort": 80}])
    );

    let without_side = changed.replace("      - name: side\n        image: busybox\n", "");
    kubectl
        .ok_with_input(&["apply", "-f", "-"], Some(&without_side))
        .await;
    let trimmed = stored(&sim, "apps/v1", "Deployment", Some("default"), "web");
    assert_eq!(containers(&trimmed), [("web".into(), "nginx:1.26".into())]);

    // an unchanged manifest writes nothing (the controller's status writes aside)
    let since = last_write(&sim, "patch", "web").seq;
    kubectl
        .ok_with_input(&["apply", "-f", "-"], Some(&without_side))
        .await;
    let writes = sim.audit(&AuditFilter {
        name: Some("web".into()),
        origin: Some(fleetsim::Origin::Api),
        since: Some(since),
        ..AuditFilter::cluster("c0")
    });
    assert!(writes.is_empty(), "{writes:?}");
    sim.shutdown().await;
}

#[tokio::test]
async fn kubectl_apply_server_side_get_and_delete() {
    let sim = start().await;
    let kubectl = Kubectl::new(&sim, "c0");
    kubectl
        .ok_with_input(&["apply", "--server-side", "-f", "-"], Some(DEPLOYMENT))
        .await;
    let record = last_write(&sim, "apply", "web");
    assert_eq!(record.field_manager.as_deref(), Some("kubectl"));
    let applied = stored(&sim, "apps/v1", "Deployment", Some("default"), "web");
    let applies: Vec<&Value> = applied["metadata"]["managedFields"]
        .as_array()
        .expect("managed fields")
        .iter()
        .filter(|m| m["operation"] == "Apply")
        .collect();
    assert_eq!(applies.len(), 1);
    assert_eq!(applies[0]["manager"], "kubectl");
    assert_eq!(containers(&applied).len(), 2);

    // -o json and -o yaml print the stored object (a ConfigMap: no controller writes it)
    kubectl
        .ok_with_input(
            &["apply", "--server-side", "-f", "-"],
            Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: flags}\ndata: {a: \"1\"}\n"),
        )
        .await;
    let mut current = stored(&sim, "v1", "ConfigMap", Some("default"), "flags");
    // kubectl hides managed fields unless --show-managed-fields
    let managed = current["metadata"]
        .as_object_mut()
        .and_then(|m| m.remove("managedFields"));
    assert!(managed.is_some(), "the apply is recorded in managedFields");
    let as_json: Value = serde_json::from_str(
        &kubectl
            .ok(&["get", "configmap", "flags", "-o", "json"])
            .await,
    )
    .expect("json");
    assert_eq!(as_json, current);
    let as_yaml: Value = serde_yaml_ng::from_str(
        &kubectl
            .ok(&["get", "configmap", "flags", "-o", "yaml"])
            .await,
    )
    .expect("yaml");
    assert_eq!(as_yaml, current);
    let table = kubectl.ok(&["get", "deployments"]).await;
    assert!(table.contains("web"), "{table}");

    let deleted = kubectl.ok(&["delete", "deployment", "web"]).await;
    assert!(deleted.contains("deleted"), "{deleted}");
    assert_eq!(last_write(&sim, "delete", "web").status, 200);
    assert!(
        sim.get_object("c0", "apps/v1", "Deployment", Some("default"), "web")
            .expect("cluster")
            .is_none()
    );
    let (found, _, stderr) = kubectl.run(&["get", "deployment", "web"], None).await;
    assert!(!found && stderr.contains("NotFound"), "{stderr}");
    sim.shutdown().await;
}

#[tokio::test]
async fn kubectl_over_https_with_the_kubeconfigs_ca() {
    let sim = FleetSim::start(Config {
        tls: true,
        audit_level: AuditLevel::Request,
        ..quick_config(1)
    })
    .await
    .expect("fleetsim starts");
    let kubectl = Kubectl::new(&sim, "c0");
    let printed = kubectl.create(&["namespace", "secure"]).await;
    assert_eq!(
        last_write(&sim, "create", "secure").request_object,
        Some(printed)
    );
    kubectl.ok(&["delete", "namespace", "secure"]).await;
    sim.shutdown().await;
}

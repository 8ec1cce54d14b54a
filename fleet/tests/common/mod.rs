//! Shared by the manifest and validation tests: one good manifest of each kind, and helpers
//! that edit one line of it and check what a user reads.

// Each test binary uses only some of the helpers.
#![allow(dead_code)]

use fleet::manifest::{Resource, parse_manifests};

pub const SOURCE: &str = r#"
apiVersion: starling.dev/v1alpha1
kind: Source
metadata:
  name: app
  namespace: fleet
spec:
  git:
    url: https://git.example.com/org/app.git
    ref:
      branch: main
  interval: 1m
  timeout: 30s
  secretRef:
    name: git-credentials
"#;

pub const CLUSTER: &str = r#"
apiVersion: starling.dev/v1alpha1
kind: Cluster
metadata:
  name: edge-1
  labels:
    region: eu
    topology.kubernetes.io/zone: eu-1a
spec:
  kubeconfigSecretRef:
    name: edge-1-kubeconfig
    key: value
"#;

pub const SYNC: &str = r#"
apiVersion: starling.dev/v1alpha1
kind: Sync
metadata:
  name: web
spec:
  sourceRef:
    name: app
  clusterRef:
    name: edge-1
  path: ./deploy/web
  substitute:
    REPLICAS: "3"
    HOST: ${cluster.name}.${cluster.labels.region}.example.com
  dependsOn:
    - name: infra
      requiredStatus: Current
    - name: crds
  interval: 10m
  timeout: 5m
"#;

pub const SYNC_GROUP: &str = r#"
apiVersion: starling.dev/v1alpha1
kind: SyncGroup
metadata:
  name: web
spec:
  sourceRef:
    name: app
  clusterSelector:
    matchLabels:
      env: prod
    matchExpressions:
      - key: region
        operator: In
        values: [eu, us]
  template:
    path: deploy/web
    dependsOn:
      - name: infra
  rollout:
    maxUnavailable: 10%
    partitions:
      - matchLabels:
          canary: "true"
      - matchExpressions:
          - key: tier
            operator: Exists
    jitter: 30s
    maxFailures: 2
"#;

pub const PROVIDER: &str = r#"
apiVersion: starling.dev/v1alpha1
kind: Provider
metadata:
  name: chat
  namespace: fleet
spec:
  type: slack
  address: https://hooks.example.com/services
  secretRef:
    name: chat-webhook
  proxy: http://proxy.example.com:3128
  timeout: 20s
  channel: deploys
"#;

pub const ALERT: &str = r#"
apiVersion: starling.dev/v1alpha1
kind: Alert
metadata:
  name: rollouts
  namespace: fleet
spec:
  providerRef:
    name: chat
  eventSeverity: error
  eventSources:
    - kind: SyncGroup
      name: web
    - kind: Cluster
      matchLabels:
        region: eu
    - kind: "*"
  inclusionList:
    - "^Rollout"
  exclusionList:
    - "canary-[0-9]+"
"#;

/// Replaces one line of a good manifest (matched by its exact text) with another.
pub fn edit(manifest: &str, line: &str, replacement: &str) -> String {
    assert!(manifest.contains(line), "the manifest has no line {line:?}");
    manifest.replacen(line, replacement, 1)
}

/// The message a user reads for a bad manifest.
pub fn rejection(manifest: &str) -> String {
    match parse_manifests(manifest) {
        Ok(resources) => panic!("accepted a bad manifest: {resources:?}\n{manifest}"),
        Err(error) => error.to_string(),
    }
}

/// Asserts the manifest is rejected with a message containing every fragment.
pub fn assert_rejected(manifest: &str, fragments: &[&str]) {
    let message = rejection(manifest);
    for fragment in fragments {
        assert!(
            message.contains(fragment),
            "message {message:?} lacks {fragment:?}"
        );
    }
}

pub fn assert_accepted(manifest: &str) -> Vec<Resource> {
    parse_manifests(manifest)
        .unwrap_or_else(|error| panic!("rejected a good manifest: {error}\n{manifest}"))
}

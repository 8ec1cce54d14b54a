//! Writes the starting corpus of every fuzz target (`fuzz/corpus/<target>/seed-*`): real
//! manifests, templates, selectors and a snapshot of a small fleet, so that the fuzzer starts
//! from valid inputs instead of discovering YAML and JSON from nothing.

use std::path::Path;

use fleet::{Command, FleetState};

const MANIFESTS: &str = r#"apiVersion: starling.dev/v1alpha1
kind: Source
metadata: {name: demo}
spec:
  interval: 2s
  git: {url: "git://127.0.0.1/demo.git", ref: {branch: main}}
---
apiVersion: starling.dev/v1alpha1
kind: SyncGroup
metadata: {name: demo}
spec:
  sourceRef: {name: demo}
  clusterSelector: {matchLabels: {env: prod}, matchExpressions: [{key: region, operator: In, values: [eu-west]}]}
  template:
    path: app
    substitute:
      REGION: "${cluster.labels.region}"
  rollout:
    maxUnavailable: "10%"
---
apiVersion: starling.dev/v1alpha1
kind: Cluster
metadata: {name: c001, labels: {env: prod, region: eu-west}}
spec: {}
"#;

fn write(target: &str, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let dir = Path::new("corpus").join(target);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join(format!("seed-{name}")), bytes)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    write("manifests", "demo", MANIFESTS.as_bytes())?;
    write("manifests", "alias", b"a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n")?;
    write(
        "substitute",
        "vars",
        b"name: ${cluster.name}-${VAR:=fallback}\nregion: ${cluster.labels.region}\nx: $${VAR} ${OTHER}\0value\0eu-west",
    )?;
    write(
        "selectors",
        "set",
        b"env=prod,region in (eu-west,us-east),!canary,tier notin (db)\0env=prod\nregion=eu-west",
    )?;
    let mut state = FleetState::default();
    for resource in fleet::manifest::parse_manifests(MANIFESTS)? {
        state.apply(Command::UpsertSpec {
            resource: Box::new(resource),
            at: "2026-01-01T00:00:00Z".to_owned(),
        });
    }
    state.apply(Command::AddMember {
        id: 1,
        address: "127.0.0.1:7001".to_owned(),
        at: "2026-01-01T00:00:00Z".to_owned(),
    });
    write("snapshot", "fleet", &state.encode_snapshot())?;
    println!("wrote the seed corpora under fuzz/corpus/");
    Ok(())
}

//! Checks shared by the render tests (`render.rs`, `chart_sources.rs`): the chart fixture's
//! files, objects on the targets, the hooks' order from fleetsim's audit log, and a Sync's
//! status message.

#![allow(dead_code)]

use std::path::Path;

use fleetsim::{AuditFilter, FleetSim};
use harness::Group;
use serde_json::Value;

use crate::harness;

/// The fixture's files, as (path in the repository, content).
pub fn fixture_files() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/render_fixture");
    let mut files = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("fixture directory") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let relative = path
                    .strip_prefix(&root)
                    .expect("under the fixture")
                    .to_string_lossy()
                    .into_owned();
                files.push((relative, std::fs::read_to_string(&path).expect("read")));
            }
        }
    }
    files
}

pub fn object(sim: &FleetSim, cluster: &str, api: &str, kind: &str, ns: &str, name: &str) -> Value {
    sim.get_object(cluster, api, kind, Some(ns), name)
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("{cluster} has no {kind} {ns}/{name}"))
}

/// The sequence number of the first successful write of `kind` `name` on `cluster` after
/// `since`.
pub fn first_write(
    sim: &FleetSim,
    cluster: &str,
    kind: &str,
    name: &str,
    since: u64,
) -> Option<u64> {
    sim.audit(&AuditFilter {
        cluster: Some(cluster.into()),
        kind: Some(kind.into()),
        name: Some(name.into()),
        since: Some(since),
        success_only: true,
        ..Default::default()
    })
    .into_iter()
    .find(|record| record.verb != "delete")
    .map(|record| record.seq)
}

pub fn last_seq(sim: &FleetSim) -> u64 {
    sim.audit(&AuditFilter::default())
        .last()
        .map_or(0, |record| record.seq)
}

/// Checks the hooks' order on every cluster since audit sequence `since`: the pre hook Job
/// written (and complete) before the release's Deployment, the post hook after it, and the
/// test hook never.
pub fn check_hook_order(
    sim: &FleetSim,
    clusters: &[String],
    namespace: &str,
    release: &str,
    since: u64,
) {
    for cluster in clusters {
        let (job_name, post_name) = (format!("{release}-migrate"), format!("{release}-installed"));
        let job = first_write(sim, cluster, "Job", &job_name, since)
            .unwrap_or_else(|| panic!("{cluster}: the pre hook Job was not written"));
        let deployment = first_write(sim, cluster, "Deployment", release, since)
            .unwrap_or_else(|| panic!("{cluster}: the Deployment was not written"));
        let post = first_write(sim, cluster, "ConfigMap", &post_name, since)
            .unwrap_or_else(|| panic!("{cluster}: the post hook was not written"));
        assert!(
            job < deployment && deployment < post,
            "{cluster}: hooks out of order: pre hook {job}, deployment {deployment}, post hook {post}"
        );
        let job = object(sim, cluster, "batch/v1", "Job", namespace, &job_name);
        let complete = job["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Complete" && c["status"] == "True");
        assert!(
            complete,
            "{cluster}: the pre hook Job is not complete: {job}"
        );
        assert!(
            first_write(sim, cluster, "Pod", &format!("{release}-test"), 0).is_none(),
            "{cluster}: the test hook was applied"
        );
    }
}

pub fn sync_message(group: &Group, name: &str) -> String {
    let out = group.cli(&["get", "sync", name, "-o", "json"]);
    let sync: Value = serde_json::from_str(&out).unwrap_or_default();
    sync["status"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Nothing was written to namespace `namespace` on any target since audit sequence `since`
/// (a failed render must not write).
pub fn assert_no_writes_since(sim: &FleetSim, namespace: &str, since: u64) {
    let writes = sim.audit(&AuditFilter {
        namespace: Some(namespace.into()),
        since: Some(since),
        success_only: true,
        ..Default::default()
    });
    assert!(
        writes.is_empty(),
        "a failed render wrote to targets: {writes:?}"
    );
}

//! The invariants a schedule is judged by (design section 5), beyond the writer checks that
//! live with fleetsim's audit log: revisions only go forward on a target, the budget holds,
//! and the replicas agree on a state that lost nothing and gives every cluster one live owner.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fleetsim::AuditRecord;
use fleetsim::checks::{Check, check};

use crate::world::{Disaster, World};

/// Successful writes by Starling (with its writer header) to the demo app.
fn app_writes(records: &[AuditRecord]) -> impl Iterator<Item = &AuditRecord> {
    records.iter().filter(|r| {
        r.writer.is_some()
            && (200..300).contains(&r.status)
            && !r.dry_run
            && r.namespace.as_deref() == Some("demo")
    })
}

/// The app version a write of the demo ConfigMap carried (`v7` → 7).
fn written_version(record: &AuditRecord) -> Option<u32> {
    if record.kind != "ConfigMap" {
        return None;
    }
    record.request_object.as_ref()?["data"]["version"]
        .as_str()?
        .strip_prefix('v')?
        .parse()
        .ok()
}

/// What a burst wrote: each object with its request body, sorted; `None` when a body is
/// missing (the audit level did not keep it), so that such a burst always counts.
fn burst_content(burst: &[&AuditRecord]) -> Option<Vec<(String, String, String)>> {
    let mut content = burst
        .iter()
        .map(|r| {
            let body = r.request_object.as_ref()?.to_string();
            Some((r.kind.clone(), r.name.clone().unwrap_or_default(), body))
        })
        .collect::<Option<Vec<_>>>()?;
    content.sort();
    content.dedup();
    Some(content)
}

/// No cluster is ever written an older version of the app after a newer one.
pub fn revisions_forward(records: &[AuditRecord]) -> Check {
    let mut newest: BTreeMap<&str, (u32, &AuditRecord)> = BTreeMap::new();
    let mut violations = Vec::new();
    let mut sorted: Vec<&AuditRecord> = app_writes(records).collect();
    sorted.sort_by_key(|r| r.seq);
    for record in sorted {
        let Some(version) = written_version(record) else {
            continue;
        };
        match newest.get(record.cluster.as_str()) {
            Some((seen, earlier)) if version < *seen => violations.push(format!(
                "{}: v{version} written by {} (generation {:?}) at {} after v{seen} by {} (generation {:?}) at {}",
                record.cluster,
                record.writer.as_deref().unwrap_or("?"),
                record.generation,
                record.time,
                earlier.writer.as_deref().unwrap_or("?"),
                earlier.generation,
                earlier.time
            )),
            _ => {
                newest.insert(&record.cluster, (version, record));
            }
        }
    }
    check(
        "no revision going backwards on a target",
        &violations,
        "every cluster's app versions were written in increasing order",
    )
}

/// Writes of one cluster less than this apart belong to one sync.
const SAME_SYNC: Duration = Duration::from_millis(100);

/// The most clusters written to at once never exceeds the largest budget in force. Each
/// cluster's writes are cut into bursts (writes less than [`SAME_SYNC`] apart); a burst lies
/// within one sync, so the count is a lower bound of the clusters in rollout. A burst that
/// writes exactly what the cluster's previous burst wrote (the same objects with the same
/// bodies) changes nothing: it is a drift check re-applying the same revision, which a cluster
/// that is up to date does outside the budget (after a restart, every Sync is checked), and is
/// not counted.
pub fn within_budget(records: &[AuditRecord], budget: u32) -> Check {
    let (most, at) = most_at_once(app_writes(records).filter(|r| r.verb != "delete"));
    let violations = if most > budget {
        vec![format!(
            "{most} clusters written at once (at {at} µs since the epoch), budget {budget}"
        )]
    } else {
        Vec::new()
    };
    check(
        "clusters in rollout never above maxUnavailable",
        &violations,
        &format!("at most {most} clusters written at once, budget {budget}"),
    )
}

/// Prunes of clusters a group lets go of (here: deleted) go through the group's budget too, in
/// places of their own: the most `removed` clusters pruned at once (their delete bursts after
/// their deletion, counted as in [`within_budget`]) never exceeds the largest budget in force.
pub fn prunes_within_budget(
    records: &[AuditRecord],
    removed: &[(String, u64)],
    budget: u32,
) -> Check {
    let (most, at) = most_at_once(app_writes(records).filter(|r| {
        r.verb == "delete"
            && removed
                .iter()
                .any(|(cluster, since)| *cluster == r.cluster && r.seq > *since)
    }));
    let violations = if most > budget {
        vec![format!(
            "{most} clusters pruned at once (at {at} µs since the epoch), budget {budget}"
        )]
    } else {
        Vec::new()
    };
    check(
        "clusters pruning never above maxUnavailable",
        &violations,
        &format!("at most {most} clusters pruned at once, budget {budget}"),
    )
}

/// Nothing Starling applied stays on a deleted cluster: within `timeout` (the prunes that
/// waited for a cluster to come back finish after the heal), no removed cluster holds the demo
/// app's ConfigMap or Deployment.
pub async fn removed_pruned(world: &World, timeout: Duration) -> Check {
    let sim = &world.fixture.sim;
    let deadline = Instant::now() + timeout;
    let left = || -> Vec<String> {
        world
            .removed
            .iter()
            .filter(|(cluster, _)| {
                let config =
                    sim.get_object(cluster, "v1", "ConfigMap", Some("demo"), "demo-config");
                let deployment =
                    sim.get_object(cluster, "apps/v1", "Deployment", Some("demo"), "demo-web");
                matches!(config, Ok(Some(_))) || matches!(deployment, Ok(Some(_)))
            })
            .map(|(cluster, _)| format!("{cluster} still holds the demo app after its deletion"))
            .collect()
    };
    let mut violations = left();
    while !violations.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        violations = left();
    }
    check(
        "a deleted cluster is pruned",
        &violations,
        &format!(
            "{} deleted cluster(s), nothing left on them",
            world.removed.len()
        ),
    )
}

/// An installation never writes to a target another installation holds: no fence on any
/// target was written with the second installation's identity, and no object carrying its
/// app's greeting was written ([`crate::world::SHADOW_GREETING`]).
pub fn installations_keep_out(records: &[AuditRecord], shadow: Option<&str>) -> Check {
    let name = "an installation never writes to a target fenced by another";
    let Some(shadow) = shadow else {
        return check(name, &[], "no second installation in this schedule");
    };
    let mut violations = Vec::new();
    for record in records
        .iter()
        .filter(|r| (200..300).contains(&r.status) && !r.dry_run)
    {
        let Some(object) = &record.request_object else {
            continue;
        };
        if record.name.as_deref() == Some("starling-fence")
            && object["data"]["installation"] == shadow
        {
            violations.push(format!(
                "{}: the fence written by the second installation {shadow} (seq {})",
                record.cluster, record.seq
            ));
        }
        if object["data"]["greeting"] == crate::world::SHADOW_GREETING {
            violations.push(format!(
                "{}: {} {:?} written with the second installation's app (seq {})",
                record.cluster, record.kind, record.name, record.seq
            ));
        }
    }
    check(
        name,
        &violations,
        &format!("the second installation {shadow} wrote nothing"),
    )
}

/// The most clusters with a burst of `writes` in progress at once, and when.
fn most_at_once<'a>(writes: impl Iterator<Item = &'a AuditRecord>) -> (u32, u64) {
    let mut by_cluster: BTreeMap<&str, Vec<&AuditRecord>> = BTreeMap::new();
    for record in writes {
        by_cluster.entry(&record.cluster).or_default().push(record);
    }
    let gap = SAME_SYNC.as_micros() as u64;
    let mut edges: Vec<(u64, i32, &str)> = Vec::new();
    for (cluster, mut writes) in by_cluster {
        writes.sort_by_key(|r| (r.time_unix_micros, r.seq));
        let mut bursts: Vec<Vec<&AuditRecord>> = Vec::new();
        for write in writes {
            match bursts.last_mut() {
                Some(burst)
                    if write.time_unix_micros
                        - burst.last().map_or(0, |last| last.time_unix_micros)
                        <= gap =>
                {
                    burst.push(write)
                }
                _ => bursts.push(vec![write]),
            }
        }
        let mut previous: Option<Vec<(String, String, String)>> = None;
        for burst in bursts {
            let content = burst_content(&burst);
            let reapply = content.is_some() && content == previous;
            previous = content;
            if reapply {
                continue;
            }
            let (first, last) = (burst[0], burst[burst.len() - 1]);
            edges.push((first.time_unix_micros, 1, cluster));
            edges.push((last.time_unix_micros + 1, -1, cluster));
        }
    }
    edges.sort();
    let (mut current, mut most, mut at) = (0i32, 0i32, 0u64);
    for (time, delta, _) in &edges {
        current += delta;
        if current > most {
            most = current;
            at = *time;
        }
    }
    (most.max(0) as u32, at)
}

/// Every object of every answering replica (whole objects: every replica applies the same
/// log, so spec and status must match).
async fn state_of(world: &World) -> Vec<(u64, Option<Objects>)> {
    let mut out = Vec::new();
    for id in world.answering() {
        out.push((id, world.objects(id).await));
    }
    out
}

type Objects = BTreeMap<String, serde_json::Value>;

/// Every replica holds the same state; every cluster has exactly one owner, and it is Live;
/// nothing acknowledged was lost (the ledger's clusters and SyncGroup are there on every
/// replica). Replicas may lag by a few entries, so the comparison is retried for a while.
pub async fn replicas_agree(world: &World) -> Vec<Check> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut disagreement;
    loop {
        let states = state_of(world).await;
        disagreement = compare(&states);
        if disagreement.is_empty() || Instant::now() > deadline {
            let lost = lost(world, &states);
            let owners = settled_owners(world, deadline).await;
            return vec![
                check(
                    "all replicas agree on the state",
                    &disagreement,
                    &format!("{} replicas hold the same objects", states.len()),
                ),
                check(
                    "nothing acknowledged was lost",
                    &lost,
                    "every acknowledged change is on every replica",
                ),
                check(
                    "every cluster has exactly one live owner",
                    &owners,
                    "each cluster is placed on one Live replica, on every replica's view",
                ),
            ];
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn compare(states: &[(u64, Option<Objects>)]) -> Vec<String> {
    let mut out = Vec::new();
    let Some((first, Some(reference))) = states.first() else {
        return vec!["no replica answered".into()];
    };
    for (id, objects) in &states[1..] {
        let Some(objects) = objects else {
            out.push(format!("node {id} did not answer"));
            continue;
        };
        for (key, value) in reference {
            match objects.get(key) {
                None => out.push(format!("{key} on node {first}, not on node {id}")),
                Some(other) if other != value => {
                    out.push(format!("{key} differs between node {first} and node {id}"))
                }
                Some(_) => {}
            }
        }
        for key in objects.keys().filter(|k| !reference.contains_key(*k)) {
            out.push(format!("{key} on node {id}, not on node {first}"));
        }
    }
    out
}

fn lost(world: &World, states: &[(u64, Option<Objects>)]) -> Vec<String> {
    let mut out = Vec::new();
    let ledger = &world.ledger;
    for (id, objects) in states {
        let Some(objects) = objects else { continue };
        let clusters: std::collections::BTreeSet<String> = objects
            .keys()
            .filter_map(|k| k.strip_prefix("Cluster/default/"))
            .map(str::to_string)
            .collect();
        for missing in ledger.clusters.difference(&clusters) {
            out.push(format!("node {id}: Cluster {missing} is missing"));
        }
        for extra in clusters.difference(&ledger.clusters) {
            out.push(format!(
                "node {id}: Cluster {extra} was deleted but is back"
            ));
        }
        let spec = objects
            .get("SyncGroup/default/demo")
            .map(|g| g["spec"].clone())
            .unwrap_or_default();
        let greeting = spec["template"]["substitute"]["GREETING"].as_str();
        if greeting != Some(ledger.greeting.as_str()) {
            out.push(format!(
                "node {id}: SyncGroup greeting {greeting:?}, last applied {:?}",
                ledger.greeting
            ));
        }
        let budget = spec["rollout"]["maxUnavailable"].as_str();
        let want = format!("{}%", ledger.budget_percent);
        if budget != Some(want.as_str()) {
            out.push(format!(
                "node {id}: SyncGroup maxUnavailable {budget:?}, last applied {want:?}"
            ));
        }
    }
    out
}

/// [`owners`], retried until it holds or `deadline` (at least 5 s from now) passes. A replica's
/// members (the leader's view) and its ownership (its own applied state) are two reads: a node
/// coming back Live between them, with its clusters moving back to it, looks like clusters owned
/// by a node that is not Live (seen on a loaded machine, seed 6). A real orphan stays.
async fn settled_owners(world: &World, deadline: Instant) -> Vec<String> {
    let deadline = deadline.max(Instant::now() + Duration::from_secs(5));
    loop {
        let problems = owners(world).await;
        if problems.is_empty() || Instant::now() > deadline {
            return problems;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn owners(world: &World) -> Vec<String> {
    let mut out = Vec::new();
    for id in world.answering() {
        let Some(status) = world.status_of(id).await else {
            out.push(format!("node {id} did not answer its status"));
            continue;
        };
        let live: std::collections::BTreeSet<u64> = status
            .members
            .iter()
            .filter(|m| m.state.eq_ignore_ascii_case("live"))
            .map(|m| m.id)
            .collect();
        let mut admin = world.group.admin(id).await;
        let Ok(Ok(shards)) = tokio::time::timeout(
            Duration::from_secs(2),
            admin.shards(proto::ShardsRequest { node_id: 0 }),
        )
        .await
        else {
            out.push(format!("node {id} did not answer its shards"));
            continue;
        };
        let mut owner_of: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for shard in shards.into_inner().shards {
            for cluster in shard.clusters {
                owner_of.entry(cluster).or_default().push(shard.node_id);
            }
        }
        for name in &world.ledger.clusters {
            let owners = owner_of
                .get(&format!("default/{name}"))
                .cloned()
                .unwrap_or_default();
            match owners.as_slice() {
                [owner] if live.contains(owner) => {}
                [owner] => out.push(format!(
                    "node {id}'s view: {name} is owned by node {owner}, which is not Live"
                )),
                _ => out.push(format!(
                    "node {id}'s view: {name} has owners {owners:?}, not exactly one"
                )),
            }
        }
    }
    out
}

/// Disaster recovery writes to no target before it is recovered: nothing at all between the
/// loss of every replica and `starling recover`, and from then on only at owner generations
/// above the fence the target held before the disaster (recovery raises a target's
/// generation above its fence only once it read the target back, so a cluster recovery could
/// not read stays below it, and any write to it before its read-back shows here).
pub fn no_write_before_recovery(records: &[AuditRecord], disasters: &[Disaster]) -> Check {
    let mut violations = Vec::new();
    for (index, disaster) in disasters.iter().enumerate() {
        let until = disasters.get(index + 1).map_or(u64::MAX, |next| next.since);
        for record in records.iter().filter(|r| {
            r.writer.is_some() && !r.dry_run && r.seq > disaster.since && r.seq <= until
        }) {
            let what = format!(
                "{} {} {}/{} by {} at generation {:?} (seq {})",
                record.cluster,
                record.verb,
                record.kind,
                record.name.as_deref().unwrap_or("-"),
                record.writer.as_deref().unwrap_or("?"),
                record.generation,
                record.seq
            );
            if record.seq <= disaster.recovering {
                violations.push(format!("before recovery: {what}"));
                continue;
            }
            let Some(fence) = disaster.fences.get(&record.cluster) else {
                continue;
            };
            if record.generation.is_none_or(|g| g <= *fence as i64) {
                violations.push(format!("not above the fence {fence} it had: {what}"));
            }
        }
    }
    check(
        "no write before recovery, nor to a cluster not yet recovered",
        &violations,
        &format!(
            "{} disaster(s): no write until recovered, then only above each target's fence",
            disasters.len()
        ),
    )
}

/// The `starling-fence` ConfigMap of `cluster` as fleetsim holds it (`None` when the cluster
/// or the fence does not exist): who writes the target, and at which owner generation.
pub fn fence_of(sim: &fleetsim::FleetSim, cluster: &str) -> Option<serde_json::Value> {
    sim.get_object(
        cluster,
        "v1",
        "ConfigMap",
        Some("starling-system"),
        "starling-fence",
    )
    .ok()
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(seq: u64, cluster: &str, micros: u64, version: u32, generation: i64) -> AuditRecord {
        AuditRecord {
            seq,
            time: String::new(),
            time_unix_micros: micros,
            cluster: cluster.into(),
            verb: "apply".into(),
            subresource: None,
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            resource: "configmaps".into(),
            namespace: Some("demo".into()),
            name: Some("demo-config".into()),
            field_manager: Some("starling".into()),
            status: 200,
            writer: Some("node-1".into()),
            generation: Some(generation),
            dry_run: false,
            resource_version: None,
            origin: fleetsim::Origin::Api,
            injected: false,
            request_object: Some(serde_json::json!({"data": {"version": format!("v{version}")}})),
        }
    }

    #[test]
    fn an_older_version_after_a_newer_one_is_a_violation() {
        let records = [
            write(1, "c1", 0, 1, 1),
            write(2, "c1", 10, 2, 1),
            write(3, "c2", 20, 2, 1),
            write(4, "c1", 30, 1, 1),
        ];
        let check = revisions_forward(&records);
        assert!(!check.ok);
        assert!(check.detail.contains("c1: v1"), "{}", check.detail);
        assert!(revisions_forward(&records[..3]).ok);
    }

    #[test]
    fn writes_of_one_sync_count_once_and_overlapping_syncs_add_up() {
        // c1 and c2 each write three objects in one burst, overlapping; c3 later.
        let records = [
            write(1, "c1", 1_000, 2, 1),
            write(2, "c2", 1_500, 2, 1),
            write(3, "c1", 2_000, 2, 1),
            write(4, "c2", 2_500, 2, 1),
            write(5, "c1", 3_000, 2, 1),
            write(6, "c3", 900_000, 2, 1),
        ];
        assert!(within_budget(&records, 2).ok);
        let over = within_budget(&records, 1);
        assert!(!over.ok);
        assert!(
            over.detail.contains("2 clusters written at once"),
            "{}",
            over.detail
        );
    }

    #[test]
    fn a_drift_check_rewriting_the_same_objects_is_not_a_rollout() {
        // c1 is updated to v2, then re-applied unchanged (a drift check) while c2 rolls out.
        let records = [
            write(1, "c1", 1_000, 2, 1),
            write(2, "c1", 500_000, 2, 1),
            write(3, "c2", 500_100, 2, 1),
            write(4, "c1", 500_200, 2, 1),
        ];
        assert!(within_budget(&records, 1).ok, "the re-apply is not counted");
        // The same timing with a new version on c1 is two clusters in rollout at once.
        let changed = [
            write(1, "c1", 1_000, 2, 1),
            write(2, "c1", 500_000, 3, 1),
            write(3, "c2", 500_100, 2, 1),
            write(4, "c1", 500_200, 3, 1),
        ];
        assert!(!within_budget(&changed, 1).ok);
        // Without request bodies nothing can be compared: every burst counts.
        let blind: Vec<AuditRecord> = records
            .iter()
            .cloned()
            .map(|r| AuditRecord {
                request_object: None,
                ..r
            })
            .collect();
        assert!(!within_budget(&blind, 1).ok);
    }
}

//! Disaster recovery over `starling.v1.Admin` (docs/disaster-recovery.md):
//!
//! ```text
//! Export  ─► header line {"kind":"StarlingExport","version":1,…} + FleetState snapshot, streamed
//! Import  ◄─ the same bytes, into a new standalone installation: recovery on, specs, rollout
//!            histories, pins and pauses
//! Recover ─► recovery on ─► wait for the Sources ─► read each target (fence, inventory mirrors,
//!            health; reads only, bounded concurrency) ─► RecoverCluster per target ─► recovery off
//! ```
//!
//! Recovery never writes to a target: it only learns what the targets hold, so the fleet
//! resumes without re-applying what is already there, and owner generations continue above
//! the fences the targets have seen.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use fleet::manifest::Resource;
use fleet::state::{FleetState, Key, SNAPSHOT_FORMAT, SyncState};
use fleet::{Command, Outcome};
use futures::StreamExt;
use proto::ApiError;
use serde::{Deserialize, Serialize};
use starling_sync::ClusterTarget;
use tonic::Status;

use super::{status, write_status};
use crate::node::Replica;

/// The `kind` of a backup's header line.
pub(crate) const EXPORT_KIND: &str = "StarlingExport";
/// The version of the backup layout (the header line, then the snapshot).
pub(crate) const EXPORT_VERSION: u32 = 1;
/// Bytes per streamed chunk.
const CHUNK_BYTES: usize = 1 << 20;
/// The largest backup `Import` takes.
pub(crate) const MAX_IMPORT_BYTES: usize = 1 << 30;
/// Commands per proposal while importing or recovering.
const BATCH: usize = 256;
/// Targets read at once by default.
const DEFAULT_CONCURRENCY: usize = 64;
/// How long `Recover` waits for the Sources to resolve by default.
const DEFAULT_SOURCE_WAIT: Duration = Duration::from_secs(120);
/// How long `Recover` waits for tickets granted before recovery began to finish.
const TICKET_WAIT: Duration = Duration::from_secs(120);
/// Pending clusters named in `Recover`'s answer.
const PENDING_SHOWN: usize = 10;

/// The stream `Admin.Export` answers with.
pub(crate) type ExportStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<proto::ExportChunk, Status>> + Send>>;

/// The first line of a backup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ExportHeader {
    pub kind: String,
    pub version: u32,
    /// The format of the snapshot that follows (`FleetState::encode_snapshot`).
    pub snapshot_format: u32,
    /// The state revision the backup holds.
    pub state_revision: u64,
    /// The replica that wrote it, and when.
    pub node: u64,
    pub created_at: String,
}

/// A backup: the header line and the snapshot, as `starling export` writes them.
pub(crate) fn export(replica: &Replica) -> Vec<u8> {
    // A clone under the read lock is one state revision: the backup is consistent.
    let state = replica.raft.reader().read(FleetState::clone);
    let header = ExportHeader {
        kind: EXPORT_KIND.into(),
        version: EXPORT_VERSION,
        snapshot_format: SNAPSHOT_FORMAT,
        state_revision: state.revision,
        node: replica.id(),
        created_at: Replica::now_rfc3339(),
    };
    let mut bytes = serde_json::to_vec(&header).unwrap_or_default();
    bytes.push(b'\n');
    bytes.extend(state.encode_snapshot());
    bytes
}

/// The backup in chunks for the `Export` stream.
pub(crate) fn export_chunks(bytes: Vec<u8>) -> Vec<Result<proto::ExportChunk, Status>> {
    bytes
        .chunks(CHUNK_BYTES)
        .map(|chunk| {
            Ok(proto::ExportChunk {
                data: chunk.to_vec(),
            })
        })
        .collect()
}

/// Reads a backup: checks its header and decodes its state.
pub(crate) fn read_backup(bytes: &[u8]) -> Result<(ExportHeader, FleetState), String> {
    let newline = bytes
        .iter()
        .position(|b| *b == b'\n')
        .ok_or("not a Starling backup: no header line")?;
    let header: ExportHeader = serde_json::from_slice(&bytes[..newline])
        .map_err(|error| format!("not a Starling backup: unreadable header: {error}"))?;
    if header.kind != EXPORT_KIND {
        return Err(format!(
            "not a Starling backup: kind {:?}, expected {EXPORT_KIND:?}",
            header.kind
        ));
    }
    if header.version != EXPORT_VERSION {
        return Err(format!(
            "backup version {} is not supported (this build reads version {EXPORT_VERSION})",
            header.version
        ));
    }
    let state = FleetState::decode_snapshot(&bytes[newline + 1..]).map_err(|e| e.to_string())?;
    Ok((header, state))
}

/// Collects an `Import` stream, bounded by [`MAX_IMPORT_BYTES`].
pub(crate) async fn collect_import(
    mut stream: tonic::Streaming<proto::ImportChunk>,
) -> Result<Vec<u8>, Status> {
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if bytes.len() + chunk.data.len() > MAX_IMPORT_BYTES {
            return Err(status(ApiError::invalid_argument(format!(
                "the backup is larger than {MAX_IMPORT_BYTES} bytes"
            ))));
        }
        bytes.extend(chunk.data);
    }
    Ok(bytes)
}

/// The commands that load a backup into a new installation, in order: recovery on, the specs
/// (Secrets and Sources before what uses them; generated Syncs come from their SyncGroups,
/// pins wait for the history they refer to; Providers before their Alerts), the histories,
/// then pins and pauses. What was still to be sent to a Provider is not brought back.
pub(crate) fn import_commands(backup: &FleetState, at: &str) -> (Vec<Command>, usize, usize) {
    let mut specs = Vec::new();
    specs.extend(
        backup
            .secrets
            .values()
            .map(|s| Resource::Secret(s.secret())),
    );
    specs.extend(
        backup
            .sources
            .values()
            .map(|e| Resource::Source(e.object.clone())),
    );
    // Clusters deleted and Syncs let go of while the backup was taken are not brought back:
    // their prunes do not resume (what they had applied stays on those targets).
    specs.extend(
        backup
            .clusters
            .values()
            .filter(|e| e.deleting.is_none())
            .map(|e| Resource::Cluster(e.cluster())),
    );
    let mut pins = Vec::new();
    let mut histories = Vec::new();
    for (key, entry) in &backup.groups {
        let mut group = entry.object.clone();
        if let Some(revision) = group.spec.rollout.pinned_revision.take() {
            pins.push(Command::PinRollout {
                group: key.clone(),
                revision: Some(revision),
                at: at.to_string(),
            });
        }
        if entry.ledger.operator_paused {
            pins.push(Command::PauseRollout { group: key.clone() });
        }
        if !entry.history.is_empty() {
            histories.push(Command::RestoreHistory {
                group: key.clone(),
                history: entry.history.iter().cloned().collect(),
                rollouts: entry.rollouts,
            });
        }
        specs.push(Resource::SyncGroup(group));
    }
    specs.extend(
        backup
            .syncs
            .values()
            .filter(|e| e.group.is_none() && e.retired_from.is_none())
            .map(|e| Resource::Sync(e.object.clone())),
    );
    specs.extend(
        backup
            .providers
            .values()
            .map(|e| Resource::Provider(e.object.clone())),
    );
    specs.extend(
        backup
            .alerts
            .values()
            .map(|e| Resource::Alert(e.object.clone())),
    );
    let (objects, restored) = (specs.len(), histories.len());
    let mut commands = vec![Command::SetRecovery { active: true }];
    // The installation keeps its identity: its fences on the targets stay its own.
    if let Some(id) = &backup.installation {
        commands.push(Command::FormInstallation { id: id.clone() });
    }
    commands.extend(specs.into_iter().map(|resource| Command::UpsertSpec {
        resource: Box::new(without_server_fields(resource)),
        at: at.to_string(),
    }));
    commands.extend(histories);
    commands.extend(pins);
    // The API tokens come back too (their digests): tenants keep working after a recovery.
    commands.extend(
        backup
            .tokens
            .iter()
            .map(|(id, entry)| Command::CreateToken {
                id: id.clone(),
                entry: entry.clone(),
            }),
    );
    (commands, objects, restored)
}

/// A spec as a client would apply it: no status, generation or resourceVersion of the lost
/// installation.
fn without_server_fields(mut resource: Resource) -> Resource {
    macro_rules! clear {
        ($object:expr) => {{
            $object.status = None;
            $object.metadata.generation = None;
            $object.metadata.resource_version = None;
            $object.metadata.uid = None;
        }};
    }
    match &mut resource {
        Resource::Source(o) => clear!(o),
        Resource::Cluster(o) => clear!(o),
        Resource::Sync(o) => clear!(o),
        Resource::SyncGroup(o) => clear!(o),
        Resource::Provider(o) => clear!(o),
        Resource::Alert(o) => clear!(o),
        Resource::Secret(o) => {
            o.metadata.resource_version = None;
            o.metadata.uid = None;
        }
    }
    resource
}

/// Whether the installation holds any spec: an import needs an empty one.
pub(crate) fn holds_specs(state: &FleetState) -> usize {
    state.sources.len()
        + state.clusters.len()
        + state.syncs.len()
        + state.groups.len()
        + state.secrets.len()
        + state.providers.len()
        + state.alerts.len()
}

/// Proposes commands in batches; any rejection fails the whole call with its message.
pub(crate) async fn propose_all(replica: &Replica, commands: Vec<Command>) -> Result<(), Status> {
    let mut commands = commands.into_iter().peekable();
    while commands.peek().is_some() {
        let batch: Vec<Command> = commands.by_ref().take(BATCH).collect();
        let committed = replica
            .raft
            .propose_many(batch)
            .await
            .map_err(write_status)?;
        let rejected: Vec<String> = committed
            .outcomes
            .iter()
            .filter_map(|outcome| match outcome {
                Outcome::Rejected { message } => Some(message.clone()),
                _ => None,
            })
            .collect();
        if !rejected.is_empty() {
            return Err(status(ApiError::failed_precondition(rejected.join("; "))));
        }
    }
    Ok(())
}

/// One target to read back.
struct Survey {
    cluster: Key,
    target: Result<ClusterTarget, String>,
    syncs: Vec<String>,
}

/// `Recover`: reads back what every target holds and records it, then turns recovery off.
/// Targets that cannot be read now (down, or pull clusters, whose agents their owners ask)
/// stay RecoveryPending: nothing writes to them until their owner reads them back
/// ([`crate::worker::reachability`]), and the rest of the fleet rolls on. On an installation
/// that is not recovering, only the clusters still pending are read; with none pending it is
/// refused, since it would stop every rollout of a fleet that is running.
pub(crate) async fn recover(
    replica: &Arc<Replica>,
    actor: &fleet::state::audit::Actor,
    request: proto::RecoverRequest,
) -> Result<proto::RecoverResponse, Status> {
    let reader = replica.raft.reader();
    let (recovering, pending) =
        reader.read(|state| (state.recovering, state.recovery_pending.clone()));
    if !recovering && pending.is_empty() {
        return Err(status(ApiError::failed_precondition(
            "this installation is not recovering and every cluster has been read back: \
             `starling recover` is for an installation that lost every replica (started with \
             --recovery, or after `starling import`); run now, it would stop every rollout",
        )));
    }
    if recovering {
        wait_for(replica, TICKET_WAIT, |state| {
            state.tickets.is_empty() && state.revoked.is_empty()
        })
        .await
        .map_err(|_| {
            status(ApiError::deadline_exceeded(format!(
                "syncs granted before recovery began did not finish within {TICKET_WAIT:?}; recovery stays on: retry `starling recover`"
            )))
        })?;
        let source_wait = match request.source_wait_seconds {
            0 => DEFAULT_SOURCE_WAIT,
            seconds => Duration::from_secs(u64::from(seconds)),
        };
        // Until the Sources resolve, no target's revision can be compared with what is
        // desired.
        let _ = wait_for(replica, source_wait, |state| {
            unresolved_sources(state).is_empty()
        })
        .await;
    }
    let (surveys, unresolved) = reader.read(|state| {
        let mut surveys = surveys(state);
        if !recovering {
            surveys.retain(|survey| pending.contains(&survey.cluster));
        }
        (surveys, unresolved_sources(state))
    });
    let concurrency = match request.concurrency {
        0 => DEFAULT_CONCURRENCY,
        n => n as usize,
    };
    let engine = replica.engine.clone();
    let mut reads = futures::stream::iter(surveys)
        .map(|survey| {
            let engine = engine.clone();
            async move {
                let cluster = survey.cluster.clone();
                let read = match survey.target {
                    Err(reason) => Err(reason),
                    Ok(target) => engine
                        .survey(&target, &survey.syncs)
                        .await
                        .map_err(|error| error.to_string()),
                };
                (cluster, read)
            }
        })
        .buffer_unordered(concurrency);
    let mut response = proto::RecoverResponse {
        unresolved_sources: unresolved,
        ..Default::default()
    };
    let mut unread: Vec<(Key, String)> = Vec::new();
    let mut recovered: Vec<Key> = Vec::new();
    let mut commands = Vec::new();
    let at = Replica::now_rfc3339();
    while let Some((cluster, read)) = reads.next().await {
        let survey = match read {
            Ok(survey) => survey,
            Err(reason) => {
                unread.push((cluster, reason));
                continue;
            }
        };
        response.clusters += 1;
        let (command, syncs) =
            crate::worker::reachability::recover_command(cluster, survey, &at, &mut response);
        recovered.extend(syncs);
        commands.push(command);
        if commands.len() >= BATCH {
            propose_all(replica, std::mem::take(&mut commands)).await?;
        }
    }
    propose_all(replica, commands).await?;
    unread.sort();
    response.pending = unread.len() as u32;
    response.pending_reasons = unread
        .iter()
        .take(PENDING_SHOWN)
        .map(|(cluster, reason)| format!("{cluster}: {reason}"))
        .collect();
    if unread.len() > PENDING_SHOWN {
        response
            .pending_reasons
            .push(format!("and {} more", unread.len() - PENDING_SHOWN));
    }
    if recovering {
        let pending = unread.into_iter().map(|(cluster, _)| cluster).collect();
        let finish = replica.audited(actor, Command::FinishRecovery { pending });
        propose_all(replica, vec![finish]).await?;
    }
    reader.read(|state| {
        for sync in &recovered {
            match state.sync_state(sync) {
                Some(SyncState::Updated | SyncState::Unready) => response.current += 1,
                Some(_) => response.rolling_out += 1,
                None => {}
            }
        }
        response.revision = state.revision;
    });
    Ok(response)
}

/// The targets to read: every Cluster with the Syncs that target it.
fn surveys(state: &FleetState) -> Vec<Survey> {
    state
        .clusters
        .iter()
        .map(|(key, entry)| {
            let namespace = key.split_once('/').map_or("default", |(ns, _)| ns);
            let object = entry.object();
            let pull = object.spec.mode == fleet::resources::ClusterMode::Pull;
            let target = if pull {
                Err(
                    "a pull cluster: its owner reads it through its agent once connected"
                        .to_string(),
                )
            } else {
                crate::worker::prepare::connection(state, namespace, object)
                    .map_err(|error| error.to_string())
            };
            let target = target.map(|connection| ClusterTarget {
                name: object.metadata.name.clone().unwrap_or_default(),
                namespace: namespace.to_string(),
                labels: entry.labels().to_map().unwrap_or_default(),
                connection,
            });
            Survey {
                cluster: key.clone(),
                target,
                syncs: state
                    .cluster_syncs
                    .get(key)
                    .map(|syncs| syncs.iter().cloned().collect())
                    .unwrap_or_default(),
            }
        })
        .collect()
}

/// Sources some Sync uses that have no revision yet.
fn unresolved_sources(state: &FleetState) -> Vec<String> {
    let used: BTreeSet<&Key> = state
        .source_syncs
        .iter()
        .filter(|(_, syncs)| !syncs.is_empty())
        .map(|(source, _)| source)
        .collect();
    used.into_iter()
        .filter(|source| {
            state
                .sources
                .get(source)
                .and_then(|s| s.object.status.as_ref())
                .and_then(|s| s.revision.as_ref())
                .is_none()
        })
        .cloned()
        .collect()
}

/// Waits until `condition` holds on the applied state, up to `limit`.
async fn wait_for(
    replica: &Replica,
    limit: Duration,
    condition: impl Fn(&FleetState) -> bool,
) -> Result<(), ()> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if replica.raft.reader().read(&condition) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backups_are_checked_before_they_are_read() {
        let state = FleetState::default();
        let header = ExportHeader {
            kind: EXPORT_KIND.into(),
            version: EXPORT_VERSION,
            snapshot_format: SNAPSHOT_FORMAT,
            state_revision: 0,
            node: 1,
            created_at: "2026-11-26T00:00:00Z".into(),
        };
        let mut bytes = serde_json::to_vec(&header).unwrap();
        bytes.push(b'\n');
        bytes.extend(state.encode_snapshot());
        let (read, _) = read_backup(&bytes).expect("a backup reads back");
        assert_eq!(read, header);

        assert!(read_backup(b"{}").unwrap_err().contains("no header line"));
        let mut newer = header.clone();
        newer.version = 9;
        let mut bytes = serde_json::to_vec(&newer).unwrap();
        bytes.push(b'\n');
        assert!(read_backup(&bytes).unwrap_err().contains("version 9"));
        let mut other = header;
        other.kind = "Something".into();
        let mut bytes = serde_json::to_vec(&other).unwrap();
        bytes.extend(b"\n{}");
        assert!(read_backup(&bytes).unwrap_err().contains("kind"));
    }

    #[test]
    fn an_import_brings_the_tokens_back() {
        let mut backup = FleetState::default();
        let entry = fleet::state::TokenEntry {
            role: fleet::state::Role::Writer,
            tenants: vec!["team-a".into()],
            digest: "00".repeat(32),
            description: String::new(),
            created: "2026-11-26T00:00:00Z".into(),
            expires: None,
            last_used: None,
        };
        backup.tokens.insert("abc".into(), entry.clone());
        let (commands, _, _) = import_commands(&backup, "2026-11-26T00:00:00Z");
        let mut restored = FleetState::default();
        for command in commands {
            restored.apply(command);
        }
        assert_eq!(restored.tokens.get("abc"), Some(&entry));
    }

    #[test]
    fn an_import_brings_providers_and_alerts_back() {
        let manifests = "apiVersion: starling.dev/v1alpha1\nkind: Provider\nmetadata: {name: chat, namespace: team-a}\nspec: {type: generic, address: \"https://hooks.example.com/x\"}\n---\napiVersion: starling.dev/v1alpha1\nkind: Alert\nmetadata: {name: rollouts, namespace: team-a}\nspec:\n  providerRef: {name: chat}\n  eventSources: [{kind: SyncGroup}]\n";
        let mut backup = FleetState::default();
        for resource in fleet::manifest::parse_manifests(manifests).unwrap() {
            backup.apply(Command::UpsertSpec {
                resource: Box::new(resource),
                at: "2026-11-26T00:00:00Z".into(),
            });
        }
        let (commands, objects, _) = import_commands(&backup, "2026-11-26T00:00:00Z");
        assert_eq!(objects, 2);
        let mut restored = FleetState::default();
        for command in commands {
            restored.apply(command);
        }
        assert_eq!(holds_specs(&restored), 2);
        let alert = &restored.alerts.get("team-a/rollouts").unwrap().object;
        let ready = &alert.status.as_ref().unwrap().conditions[0];
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "ProviderFound")
        );
    }
}

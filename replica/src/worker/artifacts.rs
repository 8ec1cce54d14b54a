//! Getting a revision's artifact onto this node: already in the local store; else fetched by
//! digest from a peer that has it (streamed in chunks, checked against the digest); else built
//! from the git mirror (a chart source: downloaded again from its repository or registry).
//! Peers come first because they keep syncing going while the git host is down and spare the
//! git host one fetch per node. When neither can provide it, the [`ArtifactError`] names the
//! artifact, its Source and both causes: a failure of the source side, not of the cluster.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use source::{ArtifactStore, Digest, StoredArtifact};

use super::error::{ArtifactError, OriginError, PeerError};
use crate::node::Replica;

pub(crate) use proto::limits::MAX_ARTIFACT_BYTES;
/// Time limit of one peer transfer.
const PEER_TIMEOUT: Duration = Duration::from_secs(60);

/// What a sync needs to find its artifact.
#[derive(Clone, Debug)]
pub(crate) struct ArtifactNeed {
    pub digest: Digest,
    /// `namespace/name` of the Source, for the messages.
    pub source: String,
    /// The Source's spec: where the artifact can be made again.
    pub spec: fleet::resources::SourceSpec,
    pub revision: String,
    pub secret: Option<std::collections::BTreeMap<String, starling_sync::SecretBytes>>,
}

/// One fetch per artifact at a time on a replica: the syncs that need an artifact the store
/// lacks wait for the first one's fetch instead of each copying it (a rollout starts hundreds
/// of syncs of one revision at once). Entries go when their last waiter does.
#[derive(Default)]
pub(crate) struct InFlight(
    std::sync::Mutex<std::collections::HashMap<Digest, Arc<tokio::sync::Mutex<()>>>>,
);

impl InFlight {
    fn lock_for(&self, digest: &Digest) -> Arc<tokio::sync::Mutex<()>> {
        let mut fetches = self.0.lock().unwrap_or_else(|e| e.into_inner());
        fetches.retain(|_, lock| Arc::strong_count(lock) > 1);
        fetches.entry(*digest).or_default().clone()
    }
}

/// Makes sure the artifact is in the local store; returns where it is.
pub(crate) async fn ensure(
    replica: &Arc<Replica>,
    fetches: &InFlight,
    need: &ArtifactNeed,
) -> Result<StoredArtifact, ArtifactError> {
    if let Some(stored) = replica.store.get(&need.digest) {
        return Ok(stored);
    }
    let lock = fetches.lock_for(&need.digest);
    let _fetching = lock.lock().await;
    // Another sync may have fetched it while this one waited.
    if let Some(stored) = replica.store.get(&need.digest) {
        return Ok(stored);
    }
    let peers = match from_peers(replica, &need.digest).await {
        Ok(stored) => {
            replica.metrics.artifacts_from_peers.inc();
            return Ok(stored);
        }
        Err(error) => error,
    };
    match from_origin(replica, need).await {
        Ok(stored) => {
            replica.metrics.artifacts_from_git.inc();
            Ok(stored)
        }
        Err(origin_error) => Err(ArtifactError {
            digest: need.digest,
            source_key: need.source.clone(),
            peers,
            origin: origin_of(&need.spec),
            origin_error,
        }),
    }
}

/// The host an artifact is made from, as messages name it: the git host, or the Helm
/// repository's or OCI registry's.
fn origin_of(spec: &fleet::resources::SourceSpec) -> String {
    let url = spec
        .git
        .as_ref()
        .map(|git| git.url.as_str())
        .or(spec.helm.as_ref().map(|helm| helm.url.as_str()))
        .or(spec.oci.as_ref().map(|oci| oci.url.as_str()));
    let Some(url) = url else {
        return "its origin".into();
    };
    match source::RepoUrl::parse(url) {
        Ok(parsed) if !parsed.host().is_empty() => parsed.host().to_string(),
        // A chart repository's URL, or a local path: named without credentials.
        _ => url
            .split_once("://")
            .map_or(url, |(_, rest)| rest)
            .rsplit('@')
            .next()
            .unwrap_or(url)
            .split(['/', ':'])
            .next()
            .filter(|host| !host.is_empty())
            .unwrap_or("its origin")
            .to_string(),
    }
}

pub(crate) async fn from_peers(
    replica: &Arc<Replica>,
    digest: &Digest,
) -> Result<StoredArtifact, PeerError> {
    let peers: Vec<(u64, String)> = replica.raft.reader().read(|state| {
        state
            .live_members()
            .filter(|m| m.id != replica.id())
            .map(|m| (m.id, m.address.clone()))
            .collect()
    });
    let mut failed = None;
    for (peer, address) in peers {
        let Ok(channel) = replica.peer_channel(&address, PEER_TIMEOUT) else {
            continue;
        };
        let mut client = proto::artifacts_client::ArtifactsClient::new(channel)
            .max_decoding_message_size(proto::limits::MAX_API_MESSAGE_BYTES);
        let has = client
            .has(proto::HasRequest {
                digest: digest.to_string(),
            })
            .await;
        if !has.is_ok_and(|reply| reply.get_ref().present) {
            continue;
        }
        let Ok(reply) = client
            .fetch(proto::FetchRequest {
                digest: digest.to_string(),
                cluster: String::new(),
            })
            .await
        else {
            continue;
        };
        let chunks = reply.into_inner().map(|chunk| chunk.map(|c| c.data));
        match replica
            .store
            .import_stream(*digest, MAX_ARTIFACT_BYTES, chunks)
            .await
        {
            Ok(stored) => {
                tracing::info!(%digest, peer, "artifact fetched from a peer");
                return Ok(stored);
            }
            Err(error) => {
                tracing::warn!(%digest, peer, %error, "peer transfer failed");
                failed = Some(PeerError::Transfer {
                    peer,
                    message: error.to_string(),
                });
            }
        }
    }
    Err(failed.unwrap_or(PeerError::NoneHoldsIt))
}

/// Makes the artifact again from its origin: the git mirror, or a chart downloaded again.
async fn from_origin(
    replica: &Arc<Replica>,
    need: &ArtifactNeed,
) -> Result<StoredArtifact, OriginError> {
    if let Some(config) = super::sources::chart_config(&need.spec, need.secret.as_ref()) {
        let config = config?;
        let store: Arc<ArtifactStore> = replica.store.clone();
        let (revision, digest) = (need.revision.clone(), need.digest);
        return tokio::task::spawn_blocking(move || {
            source::materialize_chart(&config, &store, &revision, &digest)
        })
        .await
        .map_err(|e| OriginError::Task(e.to_string()))?
        .map_err(OriginError::from);
    }
    let git = need.spec.git.as_ref().ok_or(OriginError::NoOrigin)?;
    let url = source::RepoUrl::parse(&git.url)?;
    let revision: source::Revision = need.revision.parse()?;
    let auth = match &need.secret {
        Some(data) => source::Auth::from_secret_data(data)?,
        None => source::Auth::anonymous(),
    };
    let mirrors = replica.mirrors.clone();
    let store: Arc<ArtifactStore> = replica.store.clone();
    let digest = need.digest;
    tokio::task::spawn_blocking(move || {
        source::materialize(
            &mirrors,
            &store,
            &url,
            &auth,
            &revision,
            &digest,
            &source::Limits::default(),
        )
    })
    .await
    .map_err(|e| OriginError::Task(e.to_string()))?
    .map_err(OriginError::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn syncs_needing_one_artifact_share_one_fetch_and_the_entry_goes_with_them() {
        let fetches = InFlight::default();
        let digest = Digest::from_bytes([7; 32]);
        let first = fetches.lock_for(&digest);
        let held = first.lock().await;
        let second = fetches.lock_for(&digest);
        assert!(Arc::ptr_eq(&first, &second), "one lock per digest");
        assert!(second.try_lock().is_err(), "the second waits for the first");
        drop(held);
        drop((first, second));
        let other = fetches.lock_for(&Digest::from_bytes([8; 32]));
        assert_eq!(
            fetches.0.lock().unwrap().len(),
            1,
            "the finished fetch's entry is gone"
        );
        drop(other);
    }
}

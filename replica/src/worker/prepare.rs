//! What a sync needs from the state, read under one lock: the cluster's owner generation and
//! connection (its kubeconfig Secret, in the cluster's own namespace), the target revision,
//! the artifact to fetch and the render digest.

use fleet::FleetState;
use fleet::resources::Sync;
use starling_sync::{ClusterTarget, Connection};

use super::artifacts::ArtifactNeed;
use super::error::WorkerError;
use super::secret_data;

/// Everything a sync needs from the state, read under one lock.
pub(super) struct Prepared {
    pub(super) cluster: String,
    pub(super) generation: u64,
    pub(super) revision: String,
    pub(super) object: Sync,
    pub(super) target: Result<ClusterTarget, WorkerError>,
    /// `None` for a retiring Sync, which needs no artifact.
    pub(super) artifact: Option<Result<ArtifactNeed, WorkerError>>,
    /// Deleting with prune: nothing to fetch or apply; the inventory is pruned.
    pub(super) retire: bool,
    /// What the render depends on ([`FleetState::render_digest`]), recorded on the target.
    pub(super) digest: Option<String>,
    /// A pull cluster: its agent applies ([`crate::agents`]).
    pub(super) pull: bool,
    /// The installation's identity, for the fence.
    pub(super) installation: String,
    /// The cluster is being adopted from another installation (`starling cluster adopt`).
    pub(super) adopt: bool,
    /// Release name, cluster annotations and `valuesFrom` for the render.
    pub(super) render: Result<crate::render_inputs::ResolvedRender, WorkerError>,
}

impl Prepared {
    /// A redactor that knows every Secret value this sync uses: the cluster's kubeconfig and
    /// the source's credentials.
    pub(super) fn redactor(&self) -> starling_sync::Redactor {
        let mut redactor = match &self.target {
            Ok(target) => target.redactor(),
            Err(_) => starling_sync::Redactor::new(),
        };
        if let Some(Ok(ArtifactNeed {
            secret: Some(data), ..
        })) = &self.artifact
        {
            for value in data.values() {
                redactor.add_value(value.expose());
            }
        }
        if let Ok(render) = &self.render {
            for value in &render.secret_values {
                redactor.add_value(value.as_bytes());
            }
        }
        redactor
    }
}

pub(super) fn prepare(state: &FleetState, node: u64, sync: &str) -> Option<Prepared> {
    let entry = state.syncs.get(sync)?;
    let object = entry.object.clone();
    let namespace = object
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    // The cluster may live in another namespace that admits this one; its kubeconfig Secret
    // is in its own namespace.
    let cluster_key = fleet::state::cluster_key_of(&object);
    let (owner, generation) = state.cluster_owner(&cluster_key)?;
    if owner != node {
        return None;
    }
    let cluster_entry = state.clusters.get(&cluster_key)?;
    let cluster = cluster_entry.object();
    // Nothing is written before the installation has its identity: a fence without one could
    // be taken by any other installation.
    let installation = state.installation.clone()?;
    let adopt = cluster_entry.adopt;
    let cluster_namespace = object.spec.cluster_ref.namespace_or(&namespace).to_string();
    let pull = cluster.spec.mode == fleet::resources::ClusterMode::Pull;
    let connection = if pull {
        // Never dialled: the agent applies with its own credentials.
        Ok(Connection::Url(format!("agent://{cluster_key}")))
    } else {
        connection(state, &cluster_namespace, cluster)
    };
    let cluster_target = connection.map(|connection| ClusterTarget {
        name: object.spec.cluster_ref.name.clone(),
        namespace: cluster_namespace.clone(),
        labels: cluster_entry.labels().to_map().unwrap_or_default(),
        connection,
    });
    if entry.retiring {
        return Some(Prepared {
            cluster: cluster_key,
            generation,
            revision: String::new(),
            object,
            target: cluster_target,
            artifact: None,
            retire: true,
            digest: None,
            pull,
            installation,
            adopt,
            render: Ok(Default::default()),
        });
    }
    let target = state.target_of(sync)?;
    let source_key = fleet::state::key_of(&namespace, &object.spec.source_ref.name);
    // The group's pinned artifact, or the source's newest.
    let pinned = state
        .artifact_of(sync)
        .map(|artifact| (artifact.digest, target.revision.clone()));
    let artifact = artifact_need(state, &namespace, &source_key, Some(pinned));
    Some(Prepared {
        cluster: cluster_key,
        generation,
        revision: target.revision,
        object,
        target: cluster_target,
        artifact: Some(artifact),
        retire: false,
        digest: state.render_digest(sync),
        pull,
        installation,
        adopt,
        render: crate::render_inputs::render_inputs(state, sync, cluster)
            .map_err(WorkerError::RenderInputs),
    })
}

/// The connection of a push cluster: its kubeconfig Secret (`<name>-kubeconfig`, key `value`
/// unless the Cluster says otherwise).
pub(crate) fn connection(
    state: &FleetState,
    namespace: &str,
    cluster: &fleet::resources::Cluster,
) -> Result<Connection, WorkerError> {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let reference = cluster.spec.kubeconfig_secret_ref.clone();
    let secret_name = reference
        .as_ref()
        .map_or_else(|| format!("{name}-kubeconfig"), |r| r.name.clone());
    let key = reference.and_then(|r| r.key);
    let secret =
        state
            .secret(namespace, &secret_name)
            .ok_or_else(|| WorkerError::KubeconfigMissing {
                secret: format!("{namespace}/{secret_name}"),
                cluster: name.clone(),
            })?;
    Ok(Connection::Secret {
        name: format!("{namespace}/{secret_name}"),
        data: secret_data(secret),
        key,
    })
}

/// Where a Source's artifact is, for a fetch. `chosen` is the digest and revision to use
/// (`Some(None)`: the Sync's choice, and it has none); `None` takes the Source's newest.
pub(crate) fn artifact_need(
    state: &FleetState,
    namespace: &str,
    source_key: &str,
    chosen: Option<Option<(String, String)>>,
) -> Result<ArtifactNeed, WorkerError> {
    let Some(source) = state.sources.get(source_key) else {
        return Err(WorkerError::SourceMissing {
            source_key: source_key.to_owned(),
        });
    };
    let status = source.object.status.as_ref();
    let revision_now = status
        .and_then(|status| status.revision.clone())
        .unwrap_or_default();
    let chosen = chosen.unwrap_or_else(|| {
        status
            .and_then(|status| status.artifact.as_ref())
            .map(|artifact| (artifact.digest.clone(), revision_now.clone()))
    });
    let Some((text, revision)) = chosen else {
        return Err(WorkerError::NoArtifact {
            source_key: source_key.to_owned(),
            revision: revision_now,
        });
    };
    let digest = text
        .parse::<source::Digest>()
        .map_err(|_| WorkerError::MalformedDigest {
            source_key: source_key.to_owned(),
            digest: text.clone(),
        })?;
    Ok(ArtifactNeed {
        digest,
        source: source_key.to_owned(),
        spec: source.object.spec.clone(),
        revision,
        secret: source
            .object
            .spec
            .secret_ref
            .as_ref()
            .and_then(|r| state.secret(namespace, &r.name))
            .map(secret_data),
    })
}

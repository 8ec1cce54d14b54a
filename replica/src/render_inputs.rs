//! What a sync's render needs from the fleet state besides the artifact and the template: the
//! Helm release name (a SyncGroup's Syncs render the group's release, so that every cluster
//! with the same values renders the same objects), the target Cluster's annotations for
//! `${cluster.annotations.KEY}`, and the `valuesFrom` documents read from the Sync's
//! namespace. Read under the state lock with the rest of what a sync needs; a values file of
//! another Source (`kind: Source`) is only located here (its artifact), and read by the worker
//! once the artifact is on this replica ([`ResolvedRender::read_source_values`]).

use fleet::FleetState;
use fleet::resources::{ValuesKind, ValuesReference};
use starling_sync::RenderInputs;
use starling_sync::render::ValuesDocument;

use crate::worker::artifacts::ArtifactNeed;
use crate::worker::error::WorkerError;

/// The render inputs of a Sync, and the secret values among them (for the redactor).
#[derive(Clone, Debug, Default)]
pub(crate) struct ResolvedRender {
    pub inputs: RenderInputs,
    pub secret_values: Vec<String>,
    /// Values files of other Sources, each to be read into `inputs.values_from` at its place.
    pub from_sources: Vec<SourceValues>,
}

/// A `valuesFrom` entry of kind Source: the file, and the artifact holding it.
#[derive(Clone, Debug)]
pub(crate) struct SourceValues {
    /// Where it goes in `values_from` (Helm's merge order is the list's order).
    pub position: usize,
    /// `render.helm.valuesFrom[N]`, for messages.
    pub field: String,
    pub need: ArtifactNeed,
    pub path: String,
    pub optional: bool,
}

/// The largest values file read from a Source.
const MAX_VALUES_FILE: u64 = 4 * 1024 * 1024;

impl ResolvedRender {
    /// The inputs with every Source's values file read, in place: each artifact fetched to this
    /// replica as the sync's own is. A missing file fails the sync unless optional.
    pub(crate) async fn read_source_values(
        &self,
        replica: &std::sync::Arc<crate::node::Replica>,
        fetches: &crate::worker::artifacts::InFlight,
    ) -> Result<RenderInputs, WorkerError> {
        let mut inputs = self.inputs.clone();
        // In the spec's order: each position counts the Source entries before it, less those
        // skipped (optional and absent).
        let mut skipped = 0;
        for values in &self.from_sources {
            let stored = crate::worker::artifacts::ensure(replica, fetches, &values.need).await?;
            let archive = starling_sync::render::ArtifactSource::Archive(
                replica.store.path_of(&stored.digest),
            );
            let limits = starling_sync::render::ReadLimits {
                max_file_bytes: MAX_VALUES_FILE,
                ..Default::default()
            };
            let path = values.path.clone();
            let files = replica.values_files.clone();
            let read =
                tokio::task::spawn_blocking(move || files.read_file(&archive, &path, &limits))
                    .await
                    .map_err(|error| WorkerError::RenderInputs(error.to_string()))?;
            let origin = format!(
                "Source {} at {}, file {}",
                values.need.source, values.need.revision, values.path
            );
            match read {
                Ok(Some(text)) => {
                    let at = (values.position - skipped).min(inputs.values_from.len());
                    let document = ValuesDocument {
                        origin,
                        text: text.to_string(),
                        secret: false,
                    };
                    inputs.values_from.insert(at, document);
                }
                Ok(None) if values.optional => skipped += 1,
                Ok(None) => {
                    return Err(WorkerError::RenderInputs(format!(
                        "{}: {origin} not found (mark it optional to go on without it)",
                        values.field
                    )));
                }
                Err(error) => {
                    return Err(WorkerError::RenderInputs(format!(
                        "{}: {error}",
                        values.field
                    )));
                }
            }
        }
        Ok(inputs)
    }
}

/// The render inputs of Sync `key` targeting `cluster`; an error names a `valuesFrom` entry
/// that cannot be read.
pub(crate) fn render_inputs(
    state: &FleetState,
    key: &str,
    cluster: &fleet::resources::Cluster,
) -> Result<ResolvedRender, String> {
    let Some(entry) = state.syncs.get(key) else {
        return Ok(ResolvedRender::default());
    };
    let release_name = entry.group.as_deref().map(|group| {
        group
            .rsplit_once('/')
            .map_or(group, |(_, name)| name)
            .to_owned()
    });
    let namespace = entry
        .object
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let mut resolved = ResolvedRender {
        inputs: RenderInputs {
            release_name,
            cluster_annotations: cluster.metadata.annotations.clone().unwrap_or_default(),
            values_from: Vec::new(),
        },
        secret_values: Vec::new(),
        from_sources: Vec::new(),
    };
    let references = entry
        .object
        .spec
        .template
        .render
        .as_ref()
        .and_then(|render| render.helm.as_ref())
        .map(|helm| helm.values_from.as_slice())
        .unwrap_or_default();
    for (index, reference) in references.iter().enumerate() {
        let described = |what: &str| {
            format!(
                "render.helm.valuesFrom[{index}]: {} {namespace}/{} {what}",
                reference.kind.as_str(),
                reference.name
            )
        };
        if reference.kind == ValuesKind::Source {
            let source = fleet::state::key_of(&namespace, &reference.name);
            let field = format!("render.helm.valuesFrom[{index}]");
            match crate::worker::prepare::artifact_need(state, &namespace, &source, None) {
                Ok(need) => resolved.from_sources.push(SourceValues {
                    // Every entry before it is in `values_from` by now, or skipped.
                    position: resolved.inputs.values_from.len() + resolved.from_sources.len(),
                    field,
                    need,
                    path: reference.path.clone().unwrap_or_default(),
                    optional: reference.optional,
                }),
                Err(_) if reference.optional => {}
                Err(error) => return Err(format!("{field}: {error}")),
            }
            continue;
        }
        match read(state, &namespace, reference) {
            Ok(Some(text)) => {
                let document = ValuesDocument {
                    origin: format!(
                        "{} {namespace}/{}, key {}",
                        reference.kind.as_str(),
                        reference.name,
                        reference.key_or_default()
                    ),
                    text,
                    secret: reference.kind == ValuesKind::Secret,
                };
                resolved.secret_values.extend(document.redacted_values());
                resolved.inputs.values_from.push(document);
            }
            Ok(None) if reference.optional => {}
            Ok(None) => {
                return Err(described(&format!(
                    "not found, or it has no key {:?} (mark it optional to go on without it)",
                    reference.key_or_default()
                )));
            }
            Err(message) => return Err(described(&message)),
        }
    }
    Ok(resolved)
}

/// A values document from the state; `None` when the object or its key is absent.
fn read(
    state: &FleetState,
    namespace: &str,
    reference: &ValuesReference,
) -> Result<Option<String>, String> {
    match reference.kind {
        ValuesKind::Secret => {
            let Some(secret) = state.secret(namespace, &reference.name) else {
                return Ok(None);
            };
            let key = reference.key_or_default();
            let bytes = secret
                .string_data
                .as_ref()
                .and_then(|data| data.get(key))
                .map(|text| text.as_bytes().to_vec())
                .or_else(|| {
                    secret
                        .data
                        .as_ref()
                        .and_then(|data| data.get(key))
                        .map(|bytes| bytes.0.clone())
                });
            match bytes {
                None => Ok(None),
                Some(bytes) => String::from_utf8(bytes)
                    .map(Some)
                    .map_err(|_| format!("key {key:?} is not utf-8 text")),
            }
        }
        ValuesKind::ConfigMap => Err(
            "cannot be read: Starling keeps Secrets, not ConfigMaps; put the values in a Secret"
                .to_owned(),
        ),
        ValuesKind::Source => Err("is a Source: its file is read with its artifact".to_owned()),
    }
}

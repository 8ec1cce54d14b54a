//! What a sync's render needs from the fleet state besides the artifact and the template: the
//! Helm release name (a SyncGroup's Syncs render the group's release, so that every cluster
//! with the same values renders the same objects), the target Cluster's annotations for
//! `${cluster.annotations.KEY}`, and the `valuesFrom` documents read from the Sync's
//! namespace. Read under the state lock with the rest of what a sync needs.

use fleet::FleetState;
use fleet::resources::{ValuesKind, ValuesReference};
use starling_sync::RenderInputs;
use starling_sync::render::ValuesDocument;

/// The render inputs of a Sync, and the secret values among them (for the redactor).
#[derive(Clone, Debug, Default)]
pub(crate) struct ResolvedRender {
    pub inputs: RenderInputs,
    pub secret_values: Vec<String>,
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
    }
}

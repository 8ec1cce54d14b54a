//! The work a replica does for the shard it owns: [`sources`] polls the sources placed on this
//! node, [`syncs`] runs the syncs of the clusters placed on it, and [`artifacts`] brings the
//! artifacts they need onto the node (from a peer or from git). Their writes go through the
//! replica's [`Applier`]: the sync engine (kube) in a replica, an in-process target in the
//! deterministic simulation (`chaos/tests/sim/`), which runs these workers unchanged.

pub(crate) mod artifacts;
pub(crate) mod drift;
pub(crate) mod error;
pub(crate) mod fair;
mod plan;
pub(crate) mod prepare;
pub(crate) mod reachability;
pub(crate) mod sources;
pub(crate) mod syncs;

use std::collections::BTreeMap;

/// A Secret's data as secret bytes (`data`, overlaid with `stringData`): they print as `***`.
pub(crate) fn secret_data(
    secret: k8s_openapi::api::core::v1::Secret,
) -> BTreeMap<String, starling_sync::SecretBytes> {
    let mut data: BTreeMap<String, starling_sync::SecretBytes> = secret
        .data
        .into_iter()
        .flatten()
        .map(|(key, value)| (key, value.0.into()))
        .collect();
    for (key, value) in secret.string_data.into_iter().flatten() {
        data.insert(key, value.as_str().into());
    }
    data
}

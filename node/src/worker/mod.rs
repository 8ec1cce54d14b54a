//! The work a replica does for the shard it owns: [`sources`] polls the sources placed on this
//! node, [`syncs`] runs the syncs of the clusters placed on it, and [`artifacts`] brings the
//! artifacts they need onto the node (from a peer or from git).

pub mod artifacts;
pub mod drift;
pub mod sources;
pub mod syncs;

use std::collections::BTreeMap;

/// A Secret's data as bytes (`data`, overlaid with `stringData`).
pub fn secret_data(secret: &k8s_openapi::api::core::v1::Secret) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = secret
        .data
        .iter()
        .flatten()
        .map(|(key, value)| (key.clone(), value.0.clone()))
        .collect();
    for (key, value) in secret.string_data.iter().flatten() {
        data.insert(key.clone(), value.clone().into_bytes());
    }
    data
}

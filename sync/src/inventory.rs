//! The inventory: the objects a Sync has applied to a cluster, which is what prune compares the
//! next render against.
//!
//! It is returned to the caller (for the Sync's status) and mirrored on the target in a
//! ConfigMap in `starling-system`, one per Sync, so that a lost management state can be
//! recovered from the targets. The mirror is written twice per changing sync:
//!
//! ```text
//! before applying: previous ∪ new   (an object applied and then interrupted is never lost)
//! after pruning:   new              (what the cluster now holds for this Sync)
//! ```
//!
//! and not at all when nothing changed. The second write also records the revision the sync
//! completed and its render digest ([`MirrorRecord`]), so a replacement installation can tell
//! what the cluster already holds (`starling recover`); a sync that only moves the revision
//! writes the mirror once. The stored format is versioned: format 2 adds the record, format 1
//! (no record) is still read.

use std::collections::{BTreeMap, BTreeSet};

use fleet::resources::ObjectRef;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use xxhash_rust::xxh3::xxh3_64;

use crate::error::SyncError;
use crate::object::ObjectKey;
use crate::session::Session;

/// Version of the mirror's data layout.
pub const INVENTORY_FORMAT_VERSION: &str = "2";
/// The layout before the record was added: read, never written.
const FORMAT_WITHOUT_RECORD: &str = "1";
const FORMAT_KEY: &str = "format";
const SYNC_KEY: &str = "sync";
const OBJECTS_KEY: &str = "inventory.json";
const REVISION_KEY: &str = "revision";
const DIGEST_KEY: &str = "digest";

/// What the last completed sync of a Sync applied: its revision and render digest
/// (`FleetState::render_digest`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MirrorRecord {
    pub revision: String,
    pub digest: String,
}

/// A Sync's inventory mirror as stored on its target.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mirror {
    pub objects: Vec<ObjectRef>,
    /// Absent before the first completed sync, and in format 1.
    pub record: Option<MirrorRecord>,
}
const NAME_PREFIX: &str = "starling-inventory-";
const MAX_NAME: usize = 253;

/// The name of a Sync's inventory ConfigMap: `starling-inventory-<sync>`, with characters that
/// are not allowed in object names replaced, and a hash suffix when it would be too long.
pub fn config_map_name(sync: &str) -> String {
    let cleaned: String = sync
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '.' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '.',
        })
        .collect();
    let cleaned = cleaned.trim_matches(|c| c == '-' || c == '.');
    let name = format!("{NAME_PREFIX}{cleaned}");
    if name.len() <= MAX_NAME && cleaned == sync {
        return name;
    }
    // Cleaning may merge distinct names (`a/b` and `a.b`): a hash of the original keeps them
    // apart.
    let hash = format!("{:016x}", xxh3_64(sync.as_bytes()));
    let keep = MAX_NAME - NAME_PREFIX.len() - hash.len() - 1;
    let cut: String = cleaned.chars().take(keep).collect();
    format!("{NAME_PREFIX}{}-{hash}", cut.trim_end_matches(['-', '.']))
}

/// Sorted, without duplicates (by identity).
pub fn normalized(objects: impl IntoIterator<Item = ObjectRef>) -> Vec<ObjectRef> {
    let mut by_key: BTreeMap<ObjectKey, ObjectRef> = BTreeMap::new();
    for object in objects {
        by_key.entry(ObjectKey::of(&object)).or_insert(object);
    }
    let mut objects: Vec<ObjectRef> = by_key.into_values().collect();
    objects.sort();
    objects
}

/// The objects of `previous` that are not in `current` (by identity): what prune deletes.
pub fn removed(previous: &[ObjectRef], current: &[ObjectRef]) -> Vec<ObjectRef> {
    let keep: BTreeSet<ObjectKey> = current.iter().map(ObjectKey::of).collect();
    normalized(
        previous
            .iter()
            .filter(|object| !keep.contains(&ObjectKey::of(object)))
            .cloned(),
    )
}

/// Whether two inventories hold the same objects.
pub fn same(a: &[ObjectRef], b: &[ObjectRef]) -> bool {
    let keys = |objects: &[ObjectRef]| -> BTreeSet<ObjectKey> {
        objects.iter().map(ObjectKey::of).collect()
    };
    keys(a) == keys(b)
}

fn encode(namespace: &str, sync: &str, mirror: &Mirror) -> Result<ConfigMap, SyncError> {
    let json = serde_json::to_string(&mirror.objects).map_err(|error| SyncError::Invalid {
        operation: "encode the inventory".to_owned(),
        message: error.to_string(),
    })?;
    let mut data = BTreeMap::from([
        (FORMAT_KEY.to_owned(), INVENTORY_FORMAT_VERSION.to_owned()),
        (SYNC_KEY.to_owned(), sync.to_owned()),
        (OBJECTS_KEY.to_owned(), json),
    ]);
    if let Some(record) = &mirror.record {
        data.insert(REVISION_KEY.to_owned(), record.revision.clone());
        data.insert(DIGEST_KEY.to_owned(), record.digest.clone());
    }
    Ok(ConfigMap {
        metadata: ObjectMeta {
            name: Some(config_map_name(sync)),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_owned(),
                "starling".to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        data: Some(data),
        ..ConfigMap::default()
    })
}

fn decode(config_map: &ConfigMap) -> Result<Mirror, String> {
    let empty = BTreeMap::new();
    let data = config_map.data.as_ref().unwrap_or(&empty);
    match data.get(FORMAT_KEY).map(String::as_str) {
        Some(INVENTORY_FORMAT_VERSION | FORMAT_WITHOUT_RECORD) => {}
        other => return Err(format!("unknown inventory format {other:?}")),
    }
    let json = data
        .get(OBJECTS_KEY)
        .ok_or_else(|| format!("no {OBJECTS_KEY} key"))?;
    let objects =
        serde_json::from_str(json).map_err(|error| format!("unreadable {OBJECTS_KEY}: {error}"))?;
    let record = match (data.get(REVISION_KEY), data.get(DIGEST_KEY)) {
        (Some(revision), Some(digest)) => Some(MirrorRecord {
            revision: revision.clone(),
            digest: digest.clone(),
        }),
        _ => None,
    };
    Ok(Mirror { objects, record })
}

/// The mirror of a Sync, `None` when there is none. An unreadable mirror is reported and
/// treated as absent: the Sync's status remains the source of truth.
pub(crate) async fn read(
    session: &Session,
    namespace: &str,
    sync: &str,
) -> Result<Option<Mirror>, SyncError> {
    let api: Api<ConfigMap> = Api::namespaced(session.kube(), namespace);
    let name = config_map_name(sync);
    let Some(config_map) = session
        .read("read the inventory", || api.get_opt(&name))
        .await?
    else {
        return Ok(None);
    };
    match decode(&config_map) {
        Ok(mirror) => Ok(Some(mirror)),
        Err(problem) => {
            tracing::warn!(cluster = %session.cluster(), sync, problem, "ignoring the inventory mirror");
            Ok(None)
        }
    }
}

/// Writes the mirror (server-side apply, our own object, so forced).
pub(crate) async fn write(
    session: &Session,
    namespace: &str,
    sync: &str,
    mirror: &Mirror,
) -> Result<(), SyncError> {
    let api: Api<ConfigMap> = Api::namespaced(session.kube(), namespace);
    let object = encode(namespace, sync, mirror)?;
    let name = config_map_name(sync);
    let params = PatchParams::apply(&session.field_manager).force();
    let patch = Patch::Apply(&object);
    session
        .write("write the inventory", || api.patch(&name, &params, &patch))
        .await
        .map(drop)
}

/// Reads a Sync's mirror with a plain client (tests and diagnostics).
pub async fn read_mirror(
    client: &kube::Client,
    namespace: &str,
    sync: &str,
) -> Result<Option<Mirror>, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    Ok(api
        .get_opt(&config_map_name(sync))
        .await?
        .and_then(|config_map| decode(&config_map).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(kind: &str, namespace: Option<&str>, name: &str) -> ObjectRef {
        ObjectRef {
            api_version: if kind == "Deployment" {
                "apps/v1"
            } else {
                "v1"
            }
            .into(),
            kind: kind.into(),
            namespace: namespace.map(str::to_owned),
            name: name.into(),
        }
    }

    #[test]
    fn names_are_valid_and_distinct() {
        assert_eq!(
            config_map_name("web-edge-1"),
            "starling-inventory-web-edge-1"
        );
        let a = config_map_name("team/web");
        let b = config_map_name("team.web");
        assert_ne!(a, b);
        assert!(a.starts_with("starling-inventory-team.web-"), "{a}");
        let long = config_map_name(&"x".repeat(400));
        assert!(long.len() <= MAX_NAME);
        assert_eq!(config_map_name("Upper"), config_map_name("Upper"));
        assert_ne!(config_map_name("Upper"), "starling-inventory-upper");
    }

    #[test]
    fn removed_objects_are_those_that_left() {
        let previous = vec![
            object("ConfigMap", Some("a"), "one"),
            object("ConfigMap", Some("a"), "two"),
            object("Namespace", None, "a"),
        ];
        let current = vec![
            object("ConfigMap", Some("a"), "one"),
            object("Namespace", None, "a"),
        ];
        assert_eq!(
            removed(&previous, &current),
            [object("ConfigMap", Some("a"), "two")]
        );
        assert!(same(&current, &normalized(current.iter().rev().cloned())));
        let mut moved = object("Deployment", Some("a"), "web");
        moved.api_version = "apps/v1beta2".into();
        assert!(removed(&[moved], &[object("Deployment", Some("a"), "web")]).is_empty());
    }

    #[test]
    fn the_mirror_round_trips_and_is_versioned() {
        let mirror = Mirror {
            objects: vec![object("ConfigMap", Some("a"), "one")],
            record: Some(MirrorRecord {
                revision: "main@sha1:aaa".into(),
                digest: "0123456789abcdef".into(),
            }),
        };
        let mut config_map = encode("starling-system", "web", &mirror).expect("encode");
        assert_eq!(decode(&config_map).expect("decode"), mirror);
        // Format 1 had no record: still read, without one.
        if let Some(data) = config_map.data.as_mut() {
            data.insert(FORMAT_KEY.to_owned(), "1".to_owned());
            data.remove(REVISION_KEY);
        }
        let old = decode(&config_map).expect("format 1 decodes");
        assert_eq!((old.objects, old.record), (mirror.objects.clone(), None));
        if let Some(data) = config_map.data.as_mut() {
            data.insert(FORMAT_KEY.to_owned(), "99".to_owned());
        }
        assert!(
            decode(&config_map)
                .unwrap_err()
                .contains("unknown inventory format")
        );
    }
}

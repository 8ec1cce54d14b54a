//! Target-side fencing (design section 5): before applying, the owner writes its generation into
//! the ConfigMap `starling-fence` in `starling-system` with a resourceVersion precondition, and
//! aborts if a higher generation is already there. This closes the window in which an old owner
//! is still mid-apply when the new one starts: once the new owner has fenced, the old one's
//! next check (before its prune, or its next sync) fails with "fenced by generation N".
//!
//! The fence also names the installation (the identity a Starling control plane makes once when
//! its group forms). Generations are only compared within one installation: a target fenced by
//! another installation is never written, whatever the generations, until it is adopted
//! (`starling cluster adopt`), which writes ours over it.
//!
//! ```text
//! read fence ──none──────────────► create {generation, writer, installation} (409: re-read)
//!            ──another installation──► OwnedByAnotherInstallation (adopting: update, as below)
//!            ──lower generation──► update with metadata.resourceVersion (409: re-read)
//!            ──same gen, us──────► proceed (no write)
//!            ──higher, or same gen held by another writer──► Fenced
//! ```

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ObjectMeta, PostParams};

use crate::error::{SyncError, is_conflict, is_not_found};
use crate::session::Session;

/// The fence object's name.
pub const FENCE_NAME: &str = "starling-fence";
/// Data keys of the fence.
const GENERATION_KEY: &str = "generation";
const WRITER_KEY: &str = "writer";
const INSTALLATION_KEY: &str = "installation";
/// Compare-and-swap rounds before giving up (each lost round means another writer moved).
const MAX_ROUNDS: usize = 8;

/// What the fence holds.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FenceState {
    pub generation: u64,
    pub writer: String,
    /// The installation that wrote it; empty in fences written before installations had an
    /// identity (any installation may take those over, by generation as before).
    #[serde(default)]
    pub installation: String,
}

/// What to do given the fence's content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FenceDecision {
    /// The fence already holds our generation and writer.
    Proceed,
    /// The fence is absent or older: write ours.
    Write,
    /// Someone else holds the cluster.
    Fenced(FenceState),
    /// Another installation holds the cluster.
    Foreign(FenceState),
}

/// The pure decision of the compare-and-swap. `adopt`: take the target over from another
/// installation.
pub fn decide(stored: Option<&FenceState>, ours: &FenceState, adopt: bool) -> FenceDecision {
    match stored {
        None => FenceDecision::Write,
        Some(stored)
            if !stored.installation.is_empty() && stored.installation != ours.installation =>
        {
            if adopt {
                FenceDecision::Write
            } else {
                FenceDecision::Foreign(stored.clone())
            }
        }
        Some(stored) if stored.generation < ours.generation => FenceDecision::Write,
        Some(stored) if stored.generation == ours.generation && stored.writer == ours.writer => {
            FenceDecision::Proceed
        }
        Some(stored) => FenceDecision::Fenced(stored.clone()),
    }
}

pub(crate) fn state_of(config_map: &ConfigMap) -> FenceState {
    let data = config_map.data.clone().unwrap_or_default();
    FenceState {
        // An unreadable generation fences nobody: it is overwritten by the next writer.
        generation: data
            .get(GENERATION_KEY)
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(0),
        writer: data.get(WRITER_KEY).cloned().unwrap_or_default(),
        installation: data.get(INSTALLATION_KEY).cloned().unwrap_or_default(),
    }
}

fn fence_object(namespace: &str, ours: &FenceState, resource_version: Option<String>) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(FENCE_NAME.to_owned()),
            namespace: Some(namespace.to_owned()),
            resource_version,
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_owned(),
                "starling".to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        data: Some(
            [
                (GENERATION_KEY.to_owned(), ours.generation.to_string()),
                (WRITER_KEY.to_owned(), ours.writer.clone()),
                (INSTALLATION_KEY.to_owned(), ours.installation.clone()),
            ]
            .into_iter()
            .filter(|(_, value)| !value.is_empty())
            .collect(),
        ),
        ..ConfigMap::default()
    }
}

fn fenced(stored: FenceState, ours: &FenceState) -> SyncError {
    SyncError::Fenced {
        generation: stored.generation,
        writer: stored.writer,
        ours: ours.generation,
    }
}

fn foreign(stored: FenceState) -> SyncError {
    SyncError::OwnedByAnotherInstallation {
        installation: stored.installation,
        writer: stored.writer,
    }
}

/// Creates a namespace if it is missing (the system namespace, a Helm release's).
pub(crate) async fn ensure_namespace(session: &Session, namespace: &str) -> Result<(), SyncError> {
    let api: Api<Namespace> = Api::all(session.kube());
    let object = Namespace {
        metadata: ObjectMeta {
            name: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    let operation = format!("create namespace {namespace}");
    session
        .write(&operation, || async {
            match api.create(&PostParams::default(), &object).await {
                Err(error) if is_conflict(&error) => Ok(()),
                other => other.map(drop),
            }
        })
        .await
}

/// Compare-and-swaps our generation into the fence, or fails with `Fenced` (or
/// `OwnedByAnotherInstallation` unless `adopt`).
pub(crate) async fn acquire(
    session: &Session,
    namespace: &str,
    ours: &FenceState,
    adopt: bool,
) -> Result<(), SyncError> {
    let api: Api<ConfigMap> = Api::namespaced(session.kube(), namespace);
    for _ in 0..MAX_ROUNDS {
        let current = session
            .read("read the fence", || api.get_opt(FENCE_NAME))
            .await?;
        let stored = current.as_ref().map(state_of);
        match decide(stored.as_ref(), ours, adopt) {
            FenceDecision::Proceed => return Ok(()),
            FenceDecision::Fenced(stored) => return Err(fenced(stored, ours)),
            FenceDecision::Foreign(stored) => return Err(foreign(stored)),
            FenceDecision::Write => {}
        }
        let written = match current {
            None => {
                let object = fence_object(namespace, ours, None);
                session
                    .write("create the fence", || async {
                        match api.create(&PostParams::default(), &object).await {
                            Ok(_) => Ok(Some(true)),
                            // Lost a race: re-read.
                            Err(error) if is_conflict(&error) => Ok(Some(false)),
                            // The namespace is missing.
                            Err(error) if is_not_found(&error) => Ok(None),
                            Err(error) => Err(error),
                        }
                    })
                    .await?
            }
            Some(config_map) => {
                let object = fence_object(namespace, ours, config_map.metadata.resource_version);
                session
                    .write("update the fence", || async {
                        match api
                            .replace(FENCE_NAME, &PostParams::default(), &object)
                            .await
                        {
                            Ok(_) => Ok(Some(true)),
                            Err(error) if is_conflict(&error) || is_not_found(&error) => {
                                Ok(Some(false))
                            }
                            Err(error) => Err(error),
                        }
                    })
                    .await?
            }
        };
        match written {
            Some(true) => {
                tracing::debug!(cluster = %session.cluster(), generation = ours.generation, "fence taken");
                return Ok(());
            }
            Some(false) => continue,
            None => ensure_namespace(session, namespace).await?,
        }
    }
    Err(SyncError::Conflict {
        object: format!("configmap {namespace}/{FENCE_NAME}"),
        managers: Vec::new(),
        message: format!("the fence kept changing over {MAX_ROUNDS} compare-and-swap rounds"),
    })
}

/// Checks that the fence still holds our generation (before pruning). A fence that vanished
/// or went back is taken again; a higher one fails with `Fenced`, another installation's with
/// `OwnedByAnotherInstallation` (an adoption is never repeated mid-sync).
pub(crate) async fn check(
    session: &Session,
    namespace: &str,
    ours: &FenceState,
) -> Result<(), SyncError> {
    let api: Api<ConfigMap> = Api::namespaced(session.kube(), namespace);
    let current = session
        .read("re-read the fence", || api.get_opt(FENCE_NAME))
        .await?;
    match decide(current.as_ref().map(state_of).as_ref(), ours, false) {
        FenceDecision::Proceed => Ok(()),
        FenceDecision::Fenced(stored) => Err(fenced(stored, ours)),
        FenceDecision::Foreign(stored) => Err(foreign(stored)),
        FenceDecision::Write => acquire(session, namespace, ours, false).await,
    }
}

/// The fence of a cluster as it is now (for tests and `starling` diagnostics).
pub async fn read_fence(
    client: &kube::Client,
    namespace: &str,
) -> Result<Option<FenceState>, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    Ok(api.get_opt(FENCE_NAME).await?.as_ref().map(state_of))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(generation: u64, writer: &str) -> FenceState {
        FenceState {
            generation,
            writer: writer.to_owned(),
            installation: String::new(),
        }
    }

    fn of(installation: &str, generation: u64, writer: &str) -> FenceState {
        FenceState {
            installation: installation.to_owned(),
            ..state(generation, writer)
        }
    }

    #[test]
    fn another_installation_is_never_overwritten_unless_adopted() {
        let ours = of("inst-a", 1, "node-1");
        let theirs = of("inst-b", 0, "node-2");
        assert_eq!(
            decide(Some(&theirs), &ours, false),
            FenceDecision::Foreign(theirs.clone()),
            "generations are not compared across installations"
        );
        assert_eq!(decide(Some(&theirs), &ours, true), FenceDecision::Write);
        let higher = of("inst-b", 9, "node-2");
        assert_eq!(decide(Some(&higher), &ours, true), FenceDecision::Write);
        // Within one installation, generations decide as before, adopting or not.
        assert_eq!(
            decide(Some(&of("inst-a", 2, "node-2")), &ours, true),
            FenceDecision::Fenced(of("inst-a", 2, "node-2"))
        );
        // A fence from before installations had an identity is taken over by generation.
        assert_eq!(
            decide(Some(&state(0, "node-9")), &ours, false),
            FenceDecision::Write
        );
        let written = fence_object("starling-system", &ours, None);
        assert_eq!(state_of(&written), ours);
    }

    #[test]
    fn higher_generations_fence_lower_ones() {
        let ours = state(5, "node-a");
        assert_eq!(decide(None, &ours, false), FenceDecision::Write);
        assert_eq!(
            decide(Some(&state(4, "node-b")), &ours, false),
            FenceDecision::Write
        );
        assert_eq!(
            decide(Some(&state(5, "node-a")), &ours, false),
            FenceDecision::Proceed
        );
        assert_eq!(
            decide(Some(&state(6, "node-b")), &ours, false),
            FenceDecision::Fenced(state(6, "node-b"))
        );
        assert_eq!(
            decide(Some(&state(5, "node-b")), &ours, false),
            FenceDecision::Fenced(state(5, "node-b")),
            "one generation has one writer"
        );
    }

    #[test]
    fn unreadable_fences_fence_nobody() {
        let config_map = ConfigMap {
            data: Some(BTreeMap::from([(
                GENERATION_KEY.to_owned(),
                "x".to_owned(),
            )])),
            ..ConfigMap::default()
        };
        assert_eq!(state_of(&config_map), state(0, ""));
        let written = fence_object("starling-system", &state(3, "n"), Some("42".into()));
        assert_eq!(state_of(&written), state(3, "n"));
        assert_eq!(written.metadata.resource_version.as_deref(), Some("42"));
    }
}

//! The `Watch` stream: the current objects (unless resuming), a bookmark, then one event per
//! object touched by each applied log entry. Events carry the object as it is after the entry
//! (`MODIFIED` covers creation too; `DELETED` carries only the reference). A watcher that
//! falls behind the bounded event buffer, or a replica that installs a snapshot, ends the
//! stream with an error telling the client to list again, as Kubernetes does with 410 Gone.

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::Arc;

use fleet::manifest::{Kind, ObjectKey, Resource};
use fleet::selector::Selector;
use fleet::state::{FleetState, Key, key_of};
use fleet::{Command, Outcome};
use futures::Stream;
use proto::ApiError;
use starling_raft::StateEvent;
use tokio::sync::{broadcast, mpsc};
use tonic::Status;

use super::convert;
use crate::replica::Replica;

/// Events buffered per watcher before it counts as too slow.
const BUFFER: usize = 256;

type WatchStream = Pin<Box<dyn Stream<Item = Result<proto::WatchEvent, Status>> + Send>>;

struct Filter {
    kind: Option<Kind>,
    namespace: Option<String>,
    selector: Selector,
}

impl Filter {
    fn key_matches(&self, key: &ObjectKey) -> bool {
        self.kind.is_none_or(|k| k == key.kind)
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| *ns == key.namespace)
    }

    fn matches(&self, resource: &Resource) -> bool {
        self.key_matches(&resource.key()) && self.selector.matches(resource.labels())
    }
}

pub fn start(
    replica: &Arc<Replica>,
    request: proto::WatchRequest,
) -> Result<WatchStream, ApiError> {
    let filter = Filter {
        kind: if request.kind.is_empty() {
            None
        } else {
            Some(convert::kind(&request.kind)?)
        },
        namespace: (!request.namespace.is_empty()).then(|| request.namespace.clone()),
        selector: Selector::parse_str(&request.label_selector)
            .map_err(|error| ApiError::invalid_argument(format!("bad label selector: {error}")))?,
    };
    // Subscribe before reading, so no entry falls between the list and the stream.
    let mut events = replica.raft.subscribe();
    let reader = replica.raft.reader();
    let (initial, revision) = reader.read(|state| {
        let kinds: Vec<Kind> = filter.kind.map_or_else(|| Kind::ALL.to_vec(), |k| vec![k]);
        let objects: Vec<Resource> = kinds
            .into_iter()
            .flat_map(|kind| state.list(kind, filter.namespace.as_deref()))
            .filter(|r| filter.matches(r))
            .collect();
        (objects, state.revision)
    });
    let (sender, receiver) = mpsc::channel(BUFFER);
    let resume = request.since_revision > 0;
    tokio::spawn(async move {
        if !resume {
            for resource in &initial {
                if send(&sender, proto::EventType::Added, resource, revision)
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
        let bookmark = proto::WatchEvent {
            r#type: proto::EventType::Bookmark as i32,
            object: None,
            revision,
        };
        if sender.send(Ok(bookmark)).await.is_err() {
            return;
        }
        loop {
            let entry = match events.recv().await {
                Ok(StateEvent::Applied(entry)) => entry,
                Ok(StateEvent::SnapshotInstalled { .. }) => {
                    let _ = sender
                        .send(Err(Status::aborted(
                            "state replaced by a snapshot; list again",
                        )))
                        .await;
                    return;
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    let message = format!("watch fell behind by {missed} entries; list again");
                    let _ = sender.send(Err(Status::aborted(message))).await;
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            // Objects and revision from one read: each event shows its object as of `revision`.
            let (changes, revision) = reader.read(|state| {
                let changes = touched(state, &entry.commands)
                    .into_iter()
                    .filter(|key| filter.key_matches(key))
                    .map(|key| (state.get(&key), key))
                    .collect::<Vec<_>>();
                (changes, state.revision)
            });
            for (resource, key) in changes {
                let sent = match resource {
                    Some(resource) if filter.matches(&resource) => {
                        send(&sender, proto::EventType::Modified, &resource, revision).await
                    }
                    Some(_) => Ok(()),
                    None => {
                        let event = proto::WatchEvent {
                            r#type: proto::EventType::Deleted as i32,
                            object: Some(proto::Object {
                                r#ref: Some(convert::object_ref(&key)),
                                json: Vec::new(),
                                revision,
                            }),
                            revision,
                        };
                        sender.send(Ok(event)).await.map_err(|_| ())
                    }
                };
                if sent.is_err() {
                    return;
                }
            }
        }
    });
    Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(
        receiver,
    )))
}

async fn send(
    sender: &mpsc::Sender<Result<proto::WatchEvent, Status>>,
    kind: proto::EventType,
    resource: &Resource,
    revision: u64,
) -> Result<(), ()> {
    let event = match convert::object(resource, revision) {
        Ok(object) => Ok(proto::WatchEvent {
            r#type: kind as i32,
            object: Some(object),
            revision,
        }),
        Err(error) => Err(proto::status_from(&error)),
    };
    sender.send(event).await.map_err(|_| ())
}

fn object_key(kind: Kind, key: &Key) -> ObjectKey {
    let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
    ObjectKey::new(kind, namespace, name)
}

/// The objects a log entry changed, as far as the commands tell: the object itself, and for
/// Syncs their SyncGroup (its rollout summary moved).
fn touched(state: &FleetState, commands: &[(Command, Outcome)]) -> BTreeSet<ObjectKey> {
    let mut keys = BTreeSet::new();
    let add_sync = |keys: &mut BTreeSet<ObjectKey>, sync: &Key| {
        keys.insert(object_key(Kind::Sync, sync));
        if let Some(group) = state.syncs.get(sync).and_then(|s| s.group.as_ref()) {
            keys.insert(object_key(Kind::SyncGroup, group));
        }
    };
    for (command, outcome) in commands {
        match (command, outcome) {
            (Command::UpsertSpec { resource, .. }, _) => {
                keys.insert(resource.key());
            }
            (Command::DeleteSpec { key }, _) => {
                keys.insert(key.clone());
            }
            (Command::SourceResolved { source, .. } | Command::SourceFailed { source, .. }, _) => {
                keys.insert(object_key(Kind::Source, source));
                // A new revision moves the target of every SyncGroup rolling this source out.
                for (key, group) in &state.groups {
                    let namespace = key.split_once('/').map_or("default", |(ns, _)| ns);
                    if key_of(namespace, &group.object.spec.source_ref.name) == *source {
                        keys.insert(object_key(Kind::SyncGroup, key));
                    }
                }
            }
            (Command::BeginSync { sync, .. } | Command::ReportHealth { sync, .. }, _)
            | (Command::FinishSync { .. }, Outcome::Finished { sync }) => add_sync(&mut keys, sync),
            (Command::PauseRollout { group } | Command::ResumeRollout { group }, _) => {
                keys.insert(object_key(Kind::SyncGroup, group));
            }
            (Command::Batch(inner), Outcome::Batch(outcomes)) => {
                let pairs: Vec<(Command, Outcome)> = inner
                    .iter()
                    .cloned()
                    .zip(outcomes.iter().cloned())
                    .collect();
                keys.extend(touched(state, &pairs));
            }
            _ => {}
        }
    }
    keys
}

//! The `Watch` stream: the current objects (unless resuming), a bookmark, then one event per
//! object touched by each applied log entry. Events carry the object as it is after the entry
//! (`MODIFIED` covers creation too; `DELETED` carries only the reference). A watcher that
//! falls behind the bounded event buffer, or a replica that installs a snapshot, ends the
//! stream with an error telling the client to list again, as Kubernetes does with 410 Gone.

use std::pin::Pin;
use std::sync::Arc;

use fleet::manifest::{Kind, ObjectKey, Resource};
use fleet::selector::Selector;
use futures::Stream;
use proto::ApiError;

use super::status;
use starling_raft::StateEvent;
use tokio::sync::{broadcast, mpsc};
use tonic::Status;

use super::convert;
use crate::node::Replica;

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

pub(crate) fn start(
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
                        .send(Err(status(ApiError::conflict(
                            "state replaced by a snapshot; list again",
                        ))))
                        .await;
                    return;
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    let message = format!("watch fell behind by {missed} entries; list again");
                    let _ = sender.send(Err(status(ApiError::conflict(message)))).await;
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            // Objects and revision from one read: each event shows its object as of `revision`.
            let (changes, revision) = reader.read(|state| {
                let changes = entry
                    .changed
                    .iter()
                    .filter(|key| filter.key_matches(key))
                    .map(|key| (state.get(key), key.clone()))
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

//! A tiny in-process node with canned answers (`Fleet` and `Admin`), for tests of the client
//! and of the commands' output over a real gRPC connection. The real node is tested end to end
//! by the multi-process harness.

use std::collections::BTreeMap;
use std::sync::Mutex;

use fleet::manifest::{FieldValidation, Kind, parse_manifests_with};
use proto::admin_server::{Admin, AdminServer};
use proto::fleet_server::{Fleet, FleetServer};
use proto::{ApiError, ApplyAction, LeaderHint};
use tonic::codegen::tokio_stream;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

use super::ServerArgs;

type Key = (String, String, String);

/// Objects stored by (kind, namespace, name), as JSON.
#[derive(Default)]
pub(crate) struct CannedNode {
    objects: Mutex<BTreeMap<Key, Vec<u8>>>,
}

/// Starts a node on a free loopback port; it serves until the test's runtime ends.
pub(crate) async fn serve() -> ServerArgs {
    let incoming = TcpIncoming::bind("127.0.0.1:0".parse().expect("loopback address"))
        .expect("bind a loopback port");
    let address = incoming.local_addr().expect("bound address");
    let router = Server::builder()
        .add_service(FleetServer::new(CannedNode::default()))
        .add_service(AdminServer::new(CannedNode::default()));
    tokio::spawn(router.serve_with_incoming(incoming));
    ServerArgs {
        server: address.to_string(),
        timeout: Some(std::time::Duration::from_secs(5)),
        token: None,
        tls_ca: None,
    }
}

/// A stored SyncGroup with a status, as the real node would return it.
pub(crate) fn syncgroup_json(name: &str, phase: &str, updated: u32) -> serde_json::Value {
    let in_progress = 10u32.saturating_sub(updated).min(2);
    let pending = 10u32.saturating_sub(updated + in_progress);
    serde_json::json!({
        "apiVersion": "starling.dev/v1alpha1",
        "kind": "SyncGroup",
        "metadata": {"name": name, "namespace": "default", "generation": 1},
        "spec": {"sourceRef": {"name": "app"}, "clusterSelector": {}},
        "status": {
            "targetRevision": "main@sha1:0a1b2c3d4e5f60718293a4b5c6d7e8f901234567",
            "phase": phase,
            "summary": {"total": 10, "updated": updated, "inProgress": in_progress, "pending": pending, "failed": 0}
        }
    })
}

fn object_ref(key: &Key) -> proto::ObjectRef {
    proto::ObjectRef {
        kind: key.0.clone(),
        namespace: key.1.clone(),
        name: key.2.clone(),
    }
}

fn key_of(object: Option<&proto::ObjectRef>) -> Result<Key, Status> {
    let object =
        object.ok_or_else(|| Status::from(ApiError::invalid_argument("missing object")))?;
    let kind = object
        .kind
        .parse::<Kind>()
        .map_err(|error| Status::from(ApiError::invalid_argument(error.to_string())))?;
    Ok((
        kind.as_str().to_owned(),
        object.namespace.clone(),
        object.name.clone(),
    ))
}

#[tonic::async_trait]
impl Fleet for CannedNode {
    async fn apply(
        &self,
        request: Request<proto::ApplyRequest>,
    ) -> Result<Response<proto::ApplyResponse>, Status> {
        let request = request.into_inner();
        let text = String::from_utf8(request.manifests)
            .map_err(|_| Status::from(ApiError::invalid_argument("manifests are not utf-8")))?;
        let validation = match proto::FieldValidation::try_from(request.field_validation) {
            Ok(proto::FieldValidation::Warn) => FieldValidation::Warn,
            Ok(proto::FieldValidation::Ignore) => FieldValidation::Ignore,
            _ => FieldValidation::Strict,
        };
        let parsed = parse_manifests_with(&text, validation)
            .map_err(|error| Status::from(ApiError::invalid_argument(error.to_string())))?;
        let warnings = parsed.warnings.iter().flat_map(|w| w.lines()).collect();
        let resources = parsed.resources;
        let mut objects = self.objects.lock().expect("objects lock");
        let mut results = Vec::new();
        for resource in resources {
            if resource.name() == "forbidden" {
                return Err(
                    ApiError::failed_precondition("specs are read-only in operator mode").into(),
                );
            }
            let key: Key = (
                resource.kind().as_str().to_owned(),
                resource.namespace().to_owned(),
                resource.name().to_owned(),
            );
            let json = serde_json::to_vec(&resource).expect("serialize a resource");
            let action = match objects.get(&key) {
                None => ApplyAction::Created,
                Some(stored) if *stored == json => ApplyAction::Unchanged,
                Some(_) => ApplyAction::Configured,
            };
            results.push(proto::ApplyResult {
                object: Some(object_ref(&key)),
                action: action.into(),
                generation: 1,
            });
            if !request.dry_run {
                objects.insert(key, json);
            }
        }
        Ok(Response::new(proto::ApplyResponse {
            results,
            revision: 7,
            warnings,
        }))
    }

    async fn delete(
        &self,
        request: Request<proto::DeleteRequest>,
    ) -> Result<Response<proto::DeleteResponse>, Status> {
        let mut objects = self.objects.lock().expect("objects lock");
        let mut results = Vec::new();
        for object in &request.get_ref().objects {
            let key = key_of(Some(object))?;
            let deleted = objects.remove(&key).is_some();
            results.push(proto::DeleteResult {
                object: Some(object_ref(&key)),
                deleted,
            });
        }
        Ok(Response::new(proto::DeleteResponse {
            results,
            revision: 8,
        }))
    }

    async fn get(
        &self,
        request: Request<proto::GetRequest>,
    ) -> Result<Response<proto::GetResponse>, Status> {
        let key = key_of(request.get_ref().object.as_ref())?;
        if key.0 == "SyncGroup" && key.2 == "canned" {
            let json =
                serde_json::to_vec(&syncgroup_json("canned", "Progressing", 4)).expect("json");
            let object = proto::Object {
                r#ref: Some(object_ref(&key)),
                json,
                revision: 3,
            };
            return Ok(Response::new(proto::GetResponse {
                object: Some(object),
                revision: 3,
            }));
        }
        let objects = self.objects.lock().expect("objects lock");
        let json = objects.get(&key).ok_or_else(|| {
            Status::from(ApiError::not_found(format!(
                "{} {}/{} does not exist",
                key.0, key.1, key.2
            )))
        })?;
        let object = proto::Object {
            r#ref: Some(object_ref(&key)),
            json: json.clone(),
            revision: 3,
        };
        Ok(Response::new(proto::GetResponse {
            object: Some(object),
            revision: 3,
        }))
    }

    async fn list(
        &self,
        request: Request<proto::ListRequest>,
    ) -> Result<Response<proto::ListResponse>, Status> {
        let request = request.into_inner();
        let kind = request
            .kind
            .parse::<Kind>()
            .map_err(|error| Status::from(ApiError::invalid_argument(error.to_string())))?;
        let objects = self.objects.lock().expect("objects lock");
        let objects = objects
            .iter()
            .filter(|(key, _)| key.0 == kind.as_str())
            .filter(|(key, _)| request.namespace.is_empty() || key.1 == request.namespace)
            .filter(|(key, _)| request.name.is_empty() || key.2 == request.name)
            .map(|(key, json)| proto::Object {
                r#ref: Some(object_ref(key)),
                json: json.clone(),
                revision: 3,
            })
            .collect();
        Ok(Response::new(proto::ListResponse {
            objects,
            revision: 3,
        }))
    }

    type WatchStream = tokio_stream::Empty<Result<proto::WatchEvent, Status>>;

    async fn watch(
        &self,
        _request: Request<proto::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("watch"))
    }

    async fn status(
        &self,
        _request: Request<proto::StatusRequest>,
    ) -> Result<Response<proto::StatusResponse>, Status> {
        Ok(Response::new(canned_status()))
    }

    async fn rollout_pause(
        &self,
        _request: Request<proto::RolloutRequest>,
    ) -> Result<Response<proto::RolloutResponse>, Status> {
        let hint = LeaderHint {
            id: 2,
            addr: Some("127.0.0.1:7402".into()),
        };
        Err(ApiError::unavailable("cannot forward to the leader")
            .with_leader(Some(hint))
            .into())
    }

    async fn rollout_resume(
        &self,
        request: Request<proto::RolloutRequest>,
    ) -> Result<Response<proto::RolloutResponse>, Status> {
        match request.get_ref().name.as_str() {
            "canned" => Ok(Response::new(proto::RolloutResponse { revision: 9 })),
            other => {
                Err(ApiError::not_found(format!("syncgroup default/{other} does not exist")).into())
            }
        }
    }

    async fn rollout_pin(
        &self,
        _request: Request<proto::RolloutPinRequest>,
    ) -> Result<Response<proto::RolloutResponse>, Status> {
        Err(Status::unimplemented("rollout pin"))
    }

    async fn cluster_hold(
        &self,
        _request: Request<proto::ClusterHoldRequest>,
    ) -> Result<Response<proto::ClusterHoldResponse>, Status> {
        Err(Status::unimplemented("cluster hold"))
    }

    async fn cluster_adopt(
        &self,
        _request: Request<proto::ClusterAdoptRequest>,
    ) -> Result<Response<proto::ClusterAdoptResponse>, Status> {
        Err(Status::unimplemented("cluster adopt"))
    }

    async fn source_poll(
        &self,
        _request: Request<proto::SourcePollRequest>,
    ) -> Result<Response<proto::SourcePollResponse>, Status> {
        // Nothing to wait for: the canned source has served every request.
        Ok(Response::new(proto::SourcePollResponse { request: 0 }))
    }

    async fn list_audit(
        &self,
        _request: Request<proto::ListAuditRequest>,
    ) -> Result<Response<proto::ListAuditResponse>, Status> {
        Err(Status::unimplemented("list audit"))
    }

    type DiffStream = tokio_stream::Empty<Result<proto::DiffEvent, Status>>;

    async fn diff(
        &self,
        _request: Request<proto::DiffRequest>,
    ) -> Result<Response<Self::DiffStream>, Status> {
        Err(Status::unimplemented("diff"))
    }
}

pub(crate) fn canned_status() -> proto::StatusResponse {
    let member = |id: u64, state: &str, role: &str, clusters: u32| proto::Member {
        id,
        address: format!("127.0.0.1:740{id}"),
        state: state.into(),
        role: role.into(),
        voter: role != "learner",
        applied_index: 120,
        clusters_owned: clusters,
        sources_owned: 1,
        syncs_in_flight: 2,
        last_heartbeat_millis: if role == "leader" { 0 } else { 250 },
    };
    proto::StatusResponse {
        members: vec![
            member(1, "live", "leader", 60),
            member(2, "draining", "follower", 0),
            member(3, "live", "learner", 40),
        ],
        leader_id: 1,
        term: 4,
        commit_index: 121,
        revision: 120,
        rollouts: vec![proto::Rollout {
            namespace: "default".into(),
            name: "web".into(),
            target_revision: "main@sha1:0a1b2c3d4e5f60718293a4b5c6d7e8f901234567".into(),
            phase: "Progressing".into(),
            summary: Some(proto::RolloutSummary {
                total: 100,
                updated: 40,
                in_progress: 10,
                pending: 50,
                failed: 0,
                held: 0,
                unreachable: 0,
            }),
            waiting: String::new(),
        }],
        recovering: false,
        installation: "inst-0a1b2c3d4e5f".into(),
    }
}

#[tonic::async_trait]
impl Admin for CannedNode {
    async fn members(
        &self,
        _request: Request<proto::MembersRequest>,
    ) -> Result<Response<proto::MembersResponse>, Status> {
        let status = canned_status();
        Ok(Response::new(proto::MembersResponse {
            members: status.members,
            leader_id: status.leader_id,
        }))
    }

    async fn add_node(
        &self,
        request: Request<proto::AddNodeRequest>,
    ) -> Result<Response<proto::MembershipResponse>, Status> {
        let request = request.into_inner();
        let (voters, learners) = if request.voter {
            (vec![1, 2, 3, request.id], vec![])
        } else {
            (vec![1, 2, 3], vec![request.id])
        };
        Ok(Response::new(proto::MembershipResponse {
            log_index: 130,
            voters,
            learners,
        }))
    }

    async fn remove_node(
        &self,
        request: Request<proto::RemoveNodeRequest>,
    ) -> Result<Response<proto::MembershipResponse>, Status> {
        match request.get_ref().id {
            1..=3 => Ok(Response::new(proto::MembershipResponse {
                log_index: 131,
                voters: vec![1, 2],
                learners: vec![],
            })),
            id => Err(ApiError::failed_precondition(format!("node {id} is not a member")).into()),
        }
    }

    async fn drain(
        &self,
        request: Request<proto::DrainRequest>,
    ) -> Result<Response<proto::DrainResponse>, Status> {
        let moved = if request.get_ref().undo { 0 } else { 33 };
        Ok(Response::new(proto::DrainResponse {
            revision: 132,
            moved,
        }))
    }

    async fn transfer_leadership(
        &self,
        request: Request<proto::TransferLeadershipRequest>,
    ) -> Result<Response<proto::TransferLeadershipResponse>, Status> {
        let target = match request.get_ref().target {
            0 => 2,
            id => id,
        };
        Ok(Response::new(proto::TransferLeadershipResponse {
            leader_id: target,
            term: 5,
        }))
    }

    async fn shards(
        &self,
        _request: Request<proto::ShardsRequest>,
    ) -> Result<Response<proto::ShardsResponse>, Status> {
        Err(Status::unimplemented("shards"))
    }

    type ExportStream =
        std::pin::Pin<Box<dyn futures::Stream<Item = Result<proto::ExportChunk, Status>> + Send>>;

    async fn export(
        &self,
        _request: Request<proto::ExportRequest>,
    ) -> Result<Response<Self::ExportStream>, Status> {
        let chunks = [b"{\"kind\":\"StarlingExport\"}\n".to_vec(), b"{}".to_vec()]
            .map(|data| Ok(proto::ExportChunk { data }));
        Ok(Response::new(Box::pin(futures::stream::iter(chunks))))
    }

    async fn import(
        &self,
        request: Request<tonic::Streaming<proto::ImportChunk>>,
    ) -> Result<Response<proto::ImportResponse>, Status> {
        let mut stream = request.into_inner();
        let mut bytes = 0;
        while let Some(chunk) = stream.message().await? {
            bytes += chunk.data.len();
        }
        Ok(Response::new(proto::ImportResponse {
            revision: 140,
            objects: bytes as u32,
            histories: 1,
            backup_revision: 120,
        }))
    }

    async fn recover(
        &self,
        _request: Request<proto::RecoverRequest>,
    ) -> Result<Response<proto::RecoverResponse>, Status> {
        Err(ApiError::unavailable("1 of 100 targets could not be read").into())
    }

    async fn token_create(
        &self,
        _request: Request<proto::TokenCreateRequest>,
    ) -> Result<Response<proto::TokenCreateResponse>, Status> {
        Err(Status::unimplemented("token_create"))
    }

    async fn token_list(
        &self,
        _request: Request<proto::TokenListRequest>,
    ) -> Result<Response<proto::TokenListResponse>, Status> {
        Err(Status::unimplemented("token_list"))
    }

    async fn token_revoke(
        &self,
        _request: Request<proto::TokenRevokeRequest>,
    ) -> Result<Response<proto::TokenRevokeResponse>, Status> {
        Err(Status::unimplemented("token_revoke"))
    }
}

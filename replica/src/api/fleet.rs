//! `starling.v1.Fleet`: apply, delete, get, list, watch and status of the fleet's resources,
//! and rollout pause/resume. Writes become commands proposed through Raft (forwarded to the
//! leader by any replica); reads come from this replica's applied state.

use std::pin::Pin;
use std::sync::Arc;

use fleet::manifest::{FieldValidation, Kind, ObjectKey, Resource, parse_manifests_with};

use fleet::selector::Selector;
use fleet::state::key_of;
use fleet::{Command, FleetState, Outcome};
use futures::Stream;
use proto::ApiError;
use tonic::{Request, Response, Status};

use super::{convert, status, write_status};
use crate::auth::{Principal, actor, principal};
use crate::node::Replica;
use crate::spec_source::{PatchError, SpecSource};
use fleet::state::Role;
use fleet::state::audit::Actor;

/// How long a client's write waits for the group to form before it is refused.
const WRITE_QUORUM_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

pub(crate) struct FleetService {
    replica: Arc<Replica>,
    /// Operator mode's management cluster: spec writes are refused here, operational changes
    /// are patched there.
    spec_source: Option<Arc<dyn SpecSource>>,
}

impl FleetService {
    pub(crate) fn new(replica: Arc<Replica>, spec_source: Option<Arc<dyn SpecSource>>) -> Self {
        Self {
            replica,
            spec_source,
        }
    }
}

fn action(outcome: &Outcome) -> Option<proto::ApplyAction> {
    match outcome {
        Outcome::Applied(fleet::state::ApplyResult::Created) => Some(proto::ApplyAction::Created),
        Outcome::Applied(fleet::state::ApplyResult::Configured) => {
            Some(proto::ApplyAction::Configured)
        }
        Outcome::Applied(fleet::state::ApplyResult::Unchanged) => {
            Some(proto::ApplyAction::Unchanged)
        }
        _ => None,
    }
}

/// The request's field validation; strict for a client that sends none (or a value this
/// version does not know).
fn field_validation(value: i32) -> FieldValidation {
    match proto::FieldValidation::try_from(value) {
        Ok(proto::FieldValidation::Warn) => FieldValidation::Warn,
        Ok(proto::FieldValidation::Ignore) => FieldValidation::Ignore,
        Ok(proto::FieldValidation::Strict | proto::FieldValidation::Unspecified) | Err(_) => {
            FieldValidation::Strict
        }
    }
}

/// Applies `commands` to a copy of the state: what a dry run reports.
fn dry_run(state: &FleetState, commands: Vec<Command>) -> Vec<Outcome> {
    let mut copy = state.clone();
    commands
        .into_iter()
        .map(|command| copy.apply(command))
        .collect()
}

#[tonic::async_trait]
impl proto::fleet_server::Fleet for FleetService {
    async fn apply(
        &self,
        request: Request<proto::ApplyRequest>,
    ) -> Result<Response<proto::ApplyResponse>, Status> {
        let caller = principal(&request)?;
        let actor = actor(&request, self.replica.id())?;
        let request = request.into_inner();
        self.refuse_when_read_only(request.dry_run)?;
        let text = String::from_utf8(request.manifests)
            .map_err(|_| status(ApiError::invalid_argument("manifests are not valid utf-8")))?;
        // Unknown fields are refused here too: the client may be older, or not `starling`.
        let parsed = parse_manifests_with(&text, field_validation(request.field_validation))
            .map_err(|error| status(ApiError::invalid_argument(error.to_string())))?;
        let warnings: Vec<String> = parsed
            .warnings
            .iter()
            .flat_map(|warning| warning.lines())
            .collect();
        let resources = parsed.resources;
        if resources.is_empty() {
            return Err(status(ApiError::invalid_argument(
                "no objects in the manifests",
            )));
        }
        let keys: Vec<ObjectKey> = resources.iter().map(Resource::key).collect();
        for key in &keys {
            caller.require(Role::Writer, Some(&key.namespace), "apply")?;
        }
        // A hold or pin the manifests leave unset is kept, decided in the state machine.
        let at = Replica::now_rfc3339();
        let commands: Vec<Command> = resources
            .into_iter()
            .map(|resource| {
                let command = Command::ApplySpec {
                    resource: Box::new(resource),
                    at: at.clone(),
                    quota: Some(self.replica.config.quota),
                };
                self.replica.audited(&actor, command)
            })
            .collect();
        let reader = self.replica.raft.reader();
        let (outcomes, revision) = if request.dry_run {
            reader.read(|state| (dry_run(state, commands), state.revision))
        } else {
            self.formed().await?;
            // In entries of at most 256 KiB: a bulk apply must not become one log entry of
            // megabytes that every replica holds several times over (see MAX_PROPOSAL_BYTES).
            let committed = self
                .replica
                .raft
                .propose_in_parts(commands)
                .await
                .map_err(|partial| proto::status_from(&partial))?;
            let revision = reader.read(|state| state.revision);
            (committed.outcomes, revision)
        };
        let mut results = Vec::new();
        let mut rejected = Vec::new();
        for (key, outcome) in keys.iter().zip(&outcomes) {
            match (action(outcome), outcome) {
                (Some(action), _) => {
                    let generation = reader
                        .read(|state| state.get(key).and_then(|r| r.generation()))
                        .unwrap_or(0);
                    results.push(proto::ApplyResult {
                        object: Some(convert::object_ref(key)),
                        action: action as i32,
                        generation: generation as u64,
                    });
                }
                (None, Outcome::Rejected { message }) => rejected.push(format!("{key}: {message}")),
                (None, other) => rejected.push(format!("{key}: unexpected outcome {other:?}")),
            }
        }
        if !rejected.is_empty() {
            let applied = results.len();
            return Err(status(ApiError::failed_precondition(format!(
                "{} (other objects applied: {applied})",
                rejected.join("; ")
            ))));
        }
        Ok(Response::new(proto::ApplyResponse {
            results,
            revision,
            warnings,
        }))
    }

    async fn delete(
        &self,
        request: Request<proto::DeleteRequest>,
    ) -> Result<Response<proto::DeleteResponse>, Status> {
        self.refuse_when_read_only(false)?;
        let caller = principal(&request)?;
        let actor = actor(&request, self.replica.id())?;
        let request = request.into_inner();
        let keys = request
            .objects
            .iter()
            .map(|r| convert::key(Some(r)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(status)?;
        if keys.is_empty() {
            return Err(status(ApiError::invalid_argument("no objects to delete")));
        }
        for key in &keys {
            caller.require(Role::Writer, Some(&key.namespace), "delete")?;
        }
        // Syncs, SyncGroups and Clusters prune what they applied before they go, unless
        // asked to orphan it; Sources and Secrets have nothing on the targets.
        let commands = keys
            .iter()
            .map(|key| match key.kind {
                Kind::Sync | Kind::SyncGroup | Kind::Cluster if !request.orphan => {
                    Command::RetireSpec { key: key.clone() }
                }
                _ => Command::DeleteSpec { key: key.clone() },
            })
            .map(|command| self.replica.audited(&actor, command))
            .collect();
        self.formed().await?;
        let committed = self
            .replica
            .raft
            .propose_in_parts(commands)
            .await
            .map_err(|partial| proto::status_from(&partial))?;
        let mut results = Vec::new();
        for (key, outcome) in keys.iter().zip(&committed.outcomes) {
            match outcome {
                Outcome::Deleted { existed } => results.push(proto::DeleteResult {
                    object: Some(convert::object_ref(key)),
                    deleted: *existed,
                }),
                Outcome::Rejected { message } => {
                    return Err(status(ApiError::failed_precondition(format!(
                        "{key}: {message}"
                    ))));
                }
                other => {
                    return Err(status(ApiError::internal(format!(
                        "{key}: unexpected outcome {other:?}"
                    ))));
                }
            }
        }
        let revision = self.replica.raft.reader().read(|state| state.revision);
        Ok(Response::new(proto::DeleteResponse { results, revision }))
    }

    async fn get(
        &self,
        request: Request<proto::GetRequest>,
    ) -> Result<Response<proto::GetResponse>, Status> {
        let key = convert::key(request.get_ref().object.as_ref()).map_err(status)?;
        principal(&request)?.require(Role::Reader, Some(&key.namespace), "read")?;
        let (resource, revision) = self
            .replica
            .raft
            .reader()
            .read(|state| (state.get(&key), state.revision));
        let resource =
            resource.ok_or_else(|| status(ApiError::not_found(format!("{key} not found"))))?;
        Ok(Response::new(proto::GetResponse {
            object: Some(convert::object(&resource, revision).map_err(status)?),
            revision,
        }))
    }

    async fn list(
        &self,
        request: Request<proto::ListRequest>,
    ) -> Result<Response<proto::ListResponse>, Status> {
        let caller = principal(&request)?;
        let request = request.into_inner();
        let kind = convert::kind(&request.kind).map_err(status)?;
        let selector = Selector::parse_str(&request.label_selector).map_err(|error| {
            status(ApiError::invalid_argument(format!(
                "bad label selector: {error}"
            )))
        })?;
        let namespace = (!request.namespace.is_empty()).then_some(request.namespace.as_str());
        require_reader(&caller, namespace)?;
        let (resources, revision) = self
            .replica
            .raft
            .reader()
            .read(|state| (state.list(kind, namespace), state.revision));
        let objects = resources
            .iter()
            .filter(|r| caller.serves(r.namespace()))
            .filter(|r| request.name.is_empty() || r.name() == request.name)
            .filter(|r| selector.matches(r.labels()))
            .map(|r| convert::object(r, revision))
            .collect::<Result<Vec<_>, _>>()
            .map_err(status)?;
        Ok(Response::new(proto::ListResponse { objects, revision }))
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<proto::WatchEvent, Status>> + Send>>;

    async fn watch(
        &self,
        request: Request<proto::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let caller = principal(&request)?;
        let mut request = request.into_inner();
        if request.namespace.is_empty() && !caller.everywhere() {
            // A tenant watches its own namespace; several need one watch each.
            match caller.tenants.as_slice() {
                [only] => request.namespace = only.clone(),
                _ => {
                    return Err(status(ApiError::permission_denied(format!(
                        "{} acts in several namespaces ({}): watch one of them (--namespace)",
                        caller.name,
                        caller.tenants.join(", ")
                    ))));
                }
            }
        }
        let namespace = (!request.namespace.is_empty()).then_some(request.namespace.as_str());
        caller.require(Role::Reader, namespace, "watch")?;
        let stream = super::watch::start(&self.replica, request).map_err(status)?;
        Ok(Response::new(stream))
    }

    async fn status(
        &self,
        request: Request<proto::StatusRequest>,
    ) -> Result<Response<proto::StatusResponse>, Status> {
        // The members are the installation's; the rollouts shown are the caller's tenants'.
        let caller = principal(&request)?;
        require_reader(&caller, None)?;
        let raft = self.replica.raft.metrics().borrow().clone();
        let members = super::admin::members_leader_view(&self.replica).await;
        let (rollouts, revision, recovering, installation) =
            self.replica.raft.reader().read(|state| {
                let rollouts = state
                    .groups
                    .keys()
                    .filter(|key| caller.serves(crate::worker::fair::tenant_of(key)))
                    .filter_map(|key| {
                        let status = state.group_status(key)?;
                        let (namespace, name) = key.split_once('/')?;
                        let waiting = status
                            .conditions
                            .iter()
                            .find(|c| c.type_ == fleet::state::SOURCE_WAIT_CONDITION)
                            .map(|c| c.message.clone())
                            .unwrap_or_default();
                        Some(proto::Rollout {
                            waiting,
                            namespace: namespace.to_string(),
                            name: name.to_string(),
                            target_revision: status.target_revision.unwrap_or_default(),
                            phase: status.phase.map(|p| format!("{p:?}")).unwrap_or_default(),
                            summary: Some(proto::RolloutSummary {
                                total: status.summary.total,
                                updated: status.summary.updated,
                                in_progress: status.summary.in_progress,
                                pending: status.summary.pending,
                                failed: status.summary.failed,
                                held: status.summary.held,
                                unreachable: status.summary.unreachable,
                            }),
                        })
                    })
                    .collect();
                (
                    rollouts,
                    state.revision,
                    state.recovering,
                    state.installation.clone().unwrap_or_default(),
                )
            });
        Ok(Response::new(proto::StatusResponse {
            members,
            leader_id: raft.current_leader.unwrap_or(0),
            term: raft.current_term,
            commit_index: raft.last_log_index.unwrap_or(0),
            revision,
            rollouts,
            recovering,
            installation,
        }))
    }

    async fn rollout_pause(
        &self,
        request: Request<proto::RolloutRequest>,
    ) -> Result<Response<proto::RolloutResponse>, Status> {
        let caller = principal(&request)?;
        let actor = actor(&request, self.replica.id())?;
        self.rollout(&caller, &actor, request.into_inner(), true)
            .await
    }

    async fn rollout_resume(
        &self,
        request: Request<proto::RolloutRequest>,
    ) -> Result<Response<proto::RolloutResponse>, Status> {
        let caller = principal(&request)?;
        let actor = actor(&request, self.replica.id())?;
        self.rollout(&caller, &actor, request.into_inner(), false)
            .await
    }

    async fn rollout_pin(
        &self,
        request: Request<proto::RolloutPinRequest>,
    ) -> Result<Response<proto::RolloutResponse>, Status> {
        let caller = principal(&request)?;
        let actor = actor(&request, self.replica.id())?;
        let request = request.into_inner();
        let namespace = namespace_or_default(&request.namespace);
        caller.require(Role::Writer, Some(namespace), "pin or unpin a rollout")?;
        let group = key_of(namespace, &request.name);
        let revision = (!request.revision.is_empty()).then_some(request.revision);
        if let Some(revision) = &revision {
            // Checked here too in operator mode, where the state sees the pin only through the
            // management cluster (and would refuse the whole spec).
            let known = self.replica.raft.reader().read(|state| {
                state.groups.get(&group).map(|g| {
                    g.history
                        .iter()
                        .any(|r| &r.revision == revision && r.artifact.is_some())
                })
            });
            match known {
                None => {
                    return Err(status(ApiError::not_found(format!(
                        "syncgroup {group} not found"
                    ))));
                }
                Some(false) => {
                    return Err(status(ApiError::failed_precondition(format!(
                        "syncgroup {group} never rolled out {revision}: `starling rollout history {}` lists the revisions it can go back to",
                        request.name
                    ))));
                }
                Some(true) => {}
            }
        }
        let patch = serde_json::json!({"rollout": {"pinnedRevision": revision}});
        if self
            .patch_at_source(
                &actor,
                fleet::manifest::Kind::SyncGroup,
                namespace,
                &request.name,
                "spec.rollout.pinnedRevision",
                patch,
            )
            .await?
        {
            let revision = self.replica.raft.reader().read(|state| state.revision);
            return Ok(Response::new(proto::RolloutResponse { revision }));
        }
        let revision = self
            .propose_operation(
                &actor,
                Command::PinRollout {
                    group,
                    revision,
                    at: Replica::now_rfc3339(),
                },
            )
            .await?;
        Ok(Response::new(proto::RolloutResponse { revision }))
    }

    async fn cluster_hold(
        &self,
        request: Request<proto::ClusterHoldRequest>,
    ) -> Result<Response<proto::ClusterHoldResponse>, Status> {
        let caller = principal(&request)?;
        let actor = actor(&request, self.replica.id())?;
        let request = request.into_inner();
        let namespace = namespace_or_default(&request.namespace);
        caller.require(Role::Writer, Some(namespace), "hold or release a cluster")?;
        let patch = serde_json::json!({"hold": request.hold});
        if self
            .patch_at_source(
                &actor,
                fleet::manifest::Kind::Cluster,
                namespace,
                &request.name,
                "spec.hold",
                patch,
            )
            .await?
        {
            let revision = self.replica.raft.reader().read(|state| state.revision);
            return Ok(Response::new(proto::ClusterHoldResponse { revision }));
        }
        let revision = self
            .propose_operation(
                &actor,
                Command::HoldCluster {
                    cluster: key_of(namespace, &request.name),
                    hold: request.hold,
                    at: Replica::now_rfc3339(),
                },
            )
            .await?;
        Ok(Response::new(proto::ClusterHoldResponse { revision }))
    }

    async fn cluster_adopt(
        &self,
        request: Request<proto::ClusterAdoptRequest>,
    ) -> Result<Response<proto::ClusterAdoptResponse>, Status> {
        let caller = principal(&request)?;
        let actor = actor(&request, self.replica.id())?;
        let request = request.into_inner();
        let namespace = namespace_or_default(&request.namespace);
        // Taking a cluster from another control plane: an operation on the fleet, not a spec
        // (the same in operator mode), recorded on the Cluster.
        caller.require(Role::Admin, Some(namespace), "adopt a cluster")?;
        let cluster = key_of(namespace, &request.name);
        tracing::warn!(%cluster, "starling cluster adopt: the next sync takes the cluster over from the installation that holds it");
        let revision = self
            .propose_operation(
                &actor,
                Command::AdoptCluster {
                    cluster,
                    at: Replica::now_rfc3339(),
                },
            )
            .await?;
        Ok(Response::new(proto::ClusterAdoptResponse { revision }))
    }

    async fn source_poll(
        &self,
        request: Request<proto::SourcePollRequest>,
    ) -> Result<Response<proto::SourcePollResponse>, Status> {
        let caller = principal(&request)?;
        let actor = actor(&request, self.replica.id())?;
        let request = request.into_inner();
        let namespace = namespace_or_default(&request.namespace);
        // Reading a rollout's progress needs a poll; a reader may ask for one.
        caller.require(Role::Reader, Some(namespace), "ask a source to poll")?;
        let source = key_of(namespace, &request.name);
        self.propose_operation(
            &actor,
            Command::RequestPoll {
                source: source.clone(),
                deliveries: Vec::new(),
                at: None,
            },
        )
        .await?;
        let request = self.replica.raft.reader().read(|state| {
            state
                .sources
                .get(&source)
                .map_or(0, |entry| entry.poll_requests)
        });
        Ok(Response::new(proto::SourcePollResponse { request }))
    }

    async fn list_audit(
        &self,
        request: Request<proto::ListAuditRequest>,
    ) -> Result<Response<proto::ListAuditResponse>, Status> {
        let caller = principal(&request)?;
        self.audit_of(&caller, request.get_ref()).map(Response::new)
    }

    type DiffStream = Pin<Box<dyn Stream<Item = Result<proto::DiffEvent, Status>> + Send>>;

    /// `Diff` ([`crate::diff`]): progress while it runs, then the result. A read.
    async fn diff(
        &self,
        request: Request<proto::DiffRequest>,
    ) -> Result<Response<Self::DiffStream>, Status> {
        let caller = principal(&request)?;
        let request = request.into_inner();
        require_reader(&caller, Some(namespace_or_default(&request.namespace)))?;
        let (progress, mut progressed) = tokio::sync::mpsc::channel(4);
        let (events, stream) = tokio::sync::mpsc::channel(8);
        let replica = self.replica.clone();
        tokio::spawn(async move {
            let running = crate::diff::run(replica, request, progress);
            tokio::pin!(running);
            let result = loop {
                tokio::select! {
                    result = &mut running => break result,
                    Some(progress) = progressed.recv() => {
                        let event = proto::DiffEvent {
                            event: Some(proto::diff_event::Event::Progress(progress)),
                        };
                        let _ = events.send(Ok(event)).await;
                    }
                }
            };
            let event = result.map(|result| proto::DiffEvent {
                event: Some(proto::diff_event::Event::Result(result)),
            });
            let _ = events.send(event.map_err(status)).await;
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(stream),
        )))
    }
}

impl FleetService {
    /// `ListAudit` ([`super::audit`]): a reader's view of who changed what.
    fn audit_of(
        &self,
        caller: &Principal,
        request: &proto::ListAuditRequest,
    ) -> Result<proto::ListAuditResponse, Status> {
        let namespace = (!request.namespace.is_empty()).then_some(request.namespace.as_str());
        require_reader(caller, namespace)?;
        super::audit::list(&self.replica, caller, request)
    }

    /// A client's spec write waits until the group has formed ([`Replica::write_quorum`]).
    async fn formed(&self) -> Result<(), Status> {
        self.replica
            .write_quorum(WRITE_QUORUM_WAIT)
            .await
            .map_err(|message| status(ApiError::unavailable(message)))
    }

    /// With a spec source (operator mode) the specs are read-only here (a dry run still
    /// answers).
    fn refuse_when_read_only(&self, dry_run: bool) -> Result<(), Status> {
        match &self.spec_source {
            Some(source) if !dry_run => Err(status(ApiError::failed_precondition(
                source.read_only_message(),
            ))),
            _ => Ok(()),
        }
    }

    /// With a spec source, `field` is set on the object there (`Ok(true)`); without one nothing
    /// happens (`Ok(false)`) and the caller proposes a command.
    async fn patch_at_source(
        &self,
        actor: &Actor,
        kind: fleet::manifest::Kind,
        namespace: &str,
        name: &str,
        field: &str,
        spec: serde_json::Value,
    ) -> Result<bool, Status> {
        let Some(source) = &self.spec_source else {
            return Ok(false);
        };
        let manager = crate::spec_source::field_manager(actor);
        source
            .patch_spec(kind, namespace, name, field, spec, &manager)
            .await
            .map_err(|error| match error {
                PatchError::NotFound(message) => status(ApiError::not_found(message)),
                PatchError::NotWatched(message) => status(ApiError::failed_precondition(message)),
                PatchError::Unavailable(message) => status(ApiError::unavailable(message)),
            })?;
        Ok(true)
    }

    /// Proposes a standalone-mode command; a rejection is the client's error.
    async fn propose_operation(&self, actor: &Actor, command: Command) -> Result<u64, Status> {
        self.formed().await?;
        let (_, outcome) = self
            .replica
            .raft
            .propose(self.replica.audited(actor, command))
            .await
            .map_err(write_status)?;
        if let Outcome::Rejected { message } = outcome {
            let error = if message.ends_with("not found") {
                ApiError::not_found(message)
            } else {
                ApiError::failed_precondition(message)
            };
            return Err(status(error));
        }
        Ok(self.replica.raft.reader().read(|state| state.revision))
    }

    async fn rollout(
        &self,
        caller: &Principal,
        actor: &Actor,
        request: proto::RolloutRequest,
        pause: bool,
    ) -> Result<Response<proto::RolloutResponse>, Status> {
        let namespace = namespace_or_default(&request.namespace);
        caller.require(Role::Writer, Some(namespace), "pause or resume a rollout")?;
        let patch = serde_json::json!({"rollout": {"paused": pause}});
        if self
            .patch_at_source(
                actor,
                fleet::manifest::Kind::SyncGroup,
                namespace,
                &request.name,
                "spec.rollout.paused",
                patch,
            )
            .await?
        {
            let revision = self.replica.raft.reader().read(|state| state.revision);
            return Ok(Response::new(proto::RolloutResponse { revision }));
        }
        let group = key_of(namespace, &request.name);
        let command = if pause {
            Command::PauseRollout { group }
        } else {
            Command::ResumeRollout { group }
        };
        let revision = self.propose_operation(actor, command).await?;
        Ok(Response::new(proto::RolloutResponse { revision }))
    }
}

/// Reading: in `namespace`, or (`None`) in the caller's own namespaces, filtered afterwards.
fn require_reader(caller: &Principal, namespace: Option<&str>) -> Result<(), Status> {
    match namespace {
        Some(namespace) => caller.require(Role::Reader, Some(namespace), "read"),
        None => caller.require(
            Role::Reader,
            caller.tenants.first().map(String::as_str),
            "read",
        ),
    }
}

fn namespace_or_default(namespace: &str) -> &str {
    if namespace.is_empty() {
        "default"
    } else {
        namespace
    }
}

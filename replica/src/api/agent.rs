//! `starling.v1.Agent`: what `starling agent` calls, with an agent token.
//!
//! - `Register` creates or re-claims a `Cluster` with `mode: pull` in each tenant namespace
//!   the token serves. The Cluster records the token that claimed it
//!   (`starling.dev/agent`); another agent token cannot take it over while that one is valid.
//! - `Attach` is the agent's stream for one cluster. The cluster's owner serves it
//!   ([`crate::agents`]). Any other replica names the owner's address to an agent that asked
//!   for it (`x-starling-direct`: it can reach every replica), or else forwards the stream to
//!   the owner, token included. An agent that could not reach the owner it was named says so
//!   (`x-starling-unreached-owner`), and the answer waits until the cluster moved.
//! - `FetchArtifact` streams an artifact by digest (from this replica's store, or fetched from
//!   a peer first): agents never read git.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use fleet::state::{Command, RegisterRefusal, Role, key_of};
use futures::{Stream, StreamExt};
use proto::ApiError;
use tonic::{Request, Response, Status, Streaming};

use super::{status, write_status};
use crate::agents::Agents;
use crate::auth::{Principal, principal};
use crate::node::Replica;

/// How long an agent has to say which cluster its stream is for.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest an `Attach` naming an unreachable owner waits for its cluster to move (well
/// within the agent's call time-out of 15 s); the agent then tries that owner again.
const OWNER_HOLD: Duration = Duration::from_secs(8);
/// How often a held `Attach` looks at the state again while entries are applied.
const HOLD_RECHECK: Duration = Duration::from_millis(100);

pub(crate) struct AgentService {
    replica: Arc<Replica>,
    /// The agents connected to this replica.
    agents: Arc<Agents>,
    /// Where the specs come from when not from the API: it decides what a Register may do.
    spec_source: Option<Arc<dyn crate::spec_source::SpecSource>>,
    /// Probes of the owners held attaches wait for.
    probes: super::owner_probe::OwnerProbes,
}

impl AgentService {
    pub(crate) fn new(
        replica: Arc<Replica>,
        agents: Arc<Agents>,
        spec_source: Option<Arc<dyn crate::spec_source::SpecSource>>,
    ) -> Self {
        Self {
            replica,
            agents,
            spec_source,
            probes: super::owner_probe::OwnerProbes::default(),
        }
    }
}

type DispatchStream = Pin<Box<dyn Stream<Item = Result<proto::Dispatch, Status>> + Send>>;

/// Refuses unless `caller` is an agent serving the namespace of `key`, and the pull Cluster
/// `key` exists and is claimed by it (or by nobody, unless `must_be_named`): the state's own
/// rule ([`fleet::FleetState::check_pull_claim`]).
fn check_claim(
    state: &fleet::FleetState,
    caller: &Principal,
    key: &str,
    must_be_named: bool,
) -> Result<(), Status> {
    let (namespace, _) = key.split_once('/').ok_or_else(|| {
        status(ApiError::invalid_argument(format!(
            "{key:?} is not <namespace>/<name> of a Cluster"
        )))
    })?;
    caller.require(Role::Agent, Some(namespace), "connect as an agent")?;
    state
        .check_pull_claim(key, &caller.name, must_be_named && !caller.open)
        .map_err(refusal_status)
}

/// The API's answer to a refused registration or claim.
fn refusal_status(refusal: RegisterRefusal) -> Status {
    let message = refusal.to_string();
    status(match refusal {
        RegisterRefusal::HeldByAnother { .. } | RegisterRefusal::Unnamed { .. } => {
            ApiError::permission_denied(message)
        }
        RegisterRefusal::PushCluster { .. } => ApiError::failed_precondition(message),
        RegisterRefusal::NotFound { .. } => ApiError::failed_precondition(message),
        RegisterRefusal::Recovering { .. } => ApiError::unavailable(format!("{message}; retrying")),
    })
}

#[tonic::async_trait]
impl proto::agent_server::Agent for AgentService {
    type AttachStream = DispatchStream;
    type FetchArtifactStream = super::artifacts::FetchStream;

    async fn register(
        &self,
        request: Request<proto::RegisterRequest>,
    ) -> Result<Response<proto::RegisterResponse>, Status> {
        let caller = principal(&request)?;
        let request = request.into_inner();
        if let Err(error) = fleet::validate::check_dns1123_label(&request.cluster) {
            return Err(status(ApiError::invalid_argument(format!(
                "{:?} is not a valid Cluster name: {error}",
                request.cluster
            ))));
        }
        if request.namespaces.is_empty() {
            return Err(status(ApiError::invalid_argument(
                "no namespace to register the cluster in",
            )));
        }
        let (writes, policy) =
            crate::spec_source::register_policy(self.spec_source.as_deref(), caller.open);
        let at = Replica::now_rfc3339();
        let labels: std::collections::BTreeMap<String, String> =
            request.labels.clone().into_iter().collect();
        let mut commands = Vec::new();
        let mut registered = Vec::new();
        for namespace in &request.namespaces {
            caller.require(Role::Agent, Some(namespace), "register a cluster")?;
            let key = key_of(namespace, &request.cluster);
            // A new installation in recovery is recovering from its first moment, before the
            // state says so: it takes no new Cluster until `starling import` or `recover`.
            let refused = self.replica.raft.reader().read(|state| {
                let starting_recovery = self.replica.config.recovery && !state.formed;
                if starting_recovery && !state.clusters.contains_key(&key) {
                    return Some(RegisterRefusal::Recovering {
                        cluster: key.clone(),
                    });
                }
                // The source of truth holds the Clusters: the claim is only checked.
                (!writes)
                    .then(|| state.check_pull_claim(&key, &caller.name, policy.must_be_named))
                    .and_then(Result::err)
            });
            if let Some(refusal) = refused {
                return Err(refusal_status(refusal));
            }
            registered.push(key.clone());
            commands.push(Command::RegisterPullCluster {
                cluster: key,
                agent: caller.name.clone(),
                labels: labels.clone(),
                policy,
                at: at.clone(),
            });
        }
        if !writes {
            return Ok(Response::new(proto::RegisterResponse {
                clusters: registered,
            }));
        }
        // The state decides each claim: at most one agent wins a cluster, and nothing it
        // does not own (a hold, the user's labels) is overwritten.
        let committed = self
            .replica
            .raft
            .propose_many(commands)
            .await
            .map_err(write_status)?;
        for (key, outcome) in registered.iter().zip(&committed.outcomes) {
            match outcome {
                fleet::state::Outcome::Registered { .. } => {}
                fleet::state::Outcome::RegisterRefused { refusal } => {
                    return Err(refusal_status(refusal.clone()));
                }
                fleet::state::Outcome::Rejected { message } => {
                    return Err(status(ApiError::failed_precondition(format!(
                        "Cluster {key}: {message}"
                    ))));
                }
                other => {
                    return Err(status(ApiError::internal(format!(
                        "Cluster {key}: unexpected answer to the registration: {other:?}"
                    ))));
                }
            }
        }
        tracing::info!(clusters = ?registered, agent = %caller.name, "pull clusters registered");
        Ok(Response::new(proto::RegisterResponse {
            clusters: registered,
        }))
    }

    async fn attach(
        &self,
        request: Request<Streaming<proto::AgentMessage>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let caller = principal(&request)?;
        let authorization = request.metadata().get("authorization").cloned();
        let direct = request.metadata().contains_key(proto::status::DIRECT_KEY);
        let unreached = request
            .metadata()
            .get(proto::status::UNREACHED_KEY)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let mut inbound = request.into_inner();
        let hello = match tokio::time::timeout(HELLO_TIMEOUT, inbound.message()).await {
            Ok(Ok(Some(proto::AgentMessage {
                message: Some(proto::agent_message::Message::Hello(cluster)),
            }))) => cluster,
            Ok(Ok(_)) => {
                return Err(status(ApiError::invalid_argument(
                    "an agent stream starts with hello: the cluster it serves",
                )));
            }
            Ok(Err(error)) => return Err(error),
            Err(_) => return Err(status(ApiError::deadline_exceeded("no hello within 10s"))),
        };
        let me = self.replica.id();
        let unreached = unreached.filter(|_| direct);
        let owner = self.owner_of(&caller, &hello, unreached.as_deref()).await?;
        match owner {
            // An owner without a lease sends no pings (the group is forming, or this replica
            // lost touch with the leader): the agent would wait its whole AGENT_LEASE on a
            // silent stream. Refused, it retries within a second.
            (owner, _) if owner == me && !self.replica.lease.is_valid() => {
                Err(status(ApiError::unavailable(format!(
                    "node {me}, the owner of Cluster {hello}, holds no lease from the leader \
                     yet; retry"
                ))))
            }
            (owner, _) if owner == me => Ok(Response::new(self.serve(hello, inbound))),
            (owner, None) => Err(status(ApiError::unavailable(format!(
                "the owner of Cluster {hello}, node {owner}, has no address; retry"
            )))),
            // The agent can reach the owner itself: a forwarded stream would cost this replica
            // a stream of its own and end when either replica goes.
            (owner, Some(address)) if direct => Err(proto::status::owner_redirect(
                format!("Cluster {hello} is served by its owner, node {owner} at {address}"),
                &address,
            )),
            (owner, Some(address)) => {
                let forwarded = self
                    .forward(&hello, inbound, authorization, &address)
                    .await
                    .map_err(|error| {
                        status(ApiError::unavailable(format!(
                            "cannot reach node {owner}, the owner of Cluster {hello}: {}",
                            error.message()
                        )))
                    })?;
                Ok(Response::new(forwarded))
            }
        }
    }

    async fn fetch_artifact(
        &self,
        request: Request<proto::FetchRequest>,
    ) -> Result<Response<Self::FetchArtifactStream>, Status> {
        let caller = principal(&request)?;
        if !caller.role.eq(&Role::Agent) && !caller.open {
            return Err(status(ApiError::permission_denied(format!(
                "{} ({} role) may not fetch artifacts: that needs the agent role",
                caller.name, caller.role
            ))));
        }
        let digest = super::artifacts::digest(&request.get_ref().digest)?;
        if !caller.open {
            // Only what a Sync on a cluster this agent holds rolls out.
            let cluster = &request.get_ref().cluster;
            let named = self.must_be_named();
            self.replica.raft.reader().read(|state| {
                check_claim(state, &caller, cluster, named)?;
                let wanted = state
                    .cluster_syncs
                    .get(cluster.as_str())
                    .is_some_and(|syncs| {
                        syncs.iter().any(|sync| {
                            state
                                .artifact_of(sync)
                                .is_some_and(|artifact| artifact.digest == digest.to_string())
                        })
                    });
                if wanted {
                    Ok(())
                } else {
                    Err(status(ApiError::permission_denied(format!(
                        "{} may not fetch artifact {digest}: no Sync of Cluster {cluster} uses it",
                        caller.name
                    ))))
                }
            })?;
        }
        if !self.replica.store.contains(&digest) {
            crate::worker::artifacts::from_peers(&self.replica, &digest)
                .await
                .map_err(|error| {
                    status(ApiError::not_found(format!(
                        "artifact {digest} not found: {error}"
                    )))
                })?;
        }
        super::artifacts::stream(&self.replica, digest).map(Response::new)
    }
}

impl AgentService {
    /// Whether a pull Cluster must name its agent before one may act for it.
    fn must_be_named(&self) -> bool {
        self.spec_source
            .as_deref()
            .is_some_and(|source| source.agents_must_be_named())
    }

    /// The owner of `cluster` and its advertised address, for an agent `caller`.
    ///
    /// With `unreached` (an owner's address the agent could not reach: it died, or its
    /// clusters are about to move) the answer waits, up to [`OWNER_HOLD`], until the state
    /// names another owner, or none was named yet, or the owner answers this replica again
    /// (it restarted, or a partition healed, before its clusters moved): the agent learns
    /// where to go as soon as this replica does, instead of polling for it.
    async fn owner_of(
        &self,
        caller: &Principal,
        cluster: &str,
        unreached: Option<&str>,
    ) -> Result<(u64, Option<String>), Status> {
        let reader = self.replica.raft.reader();
        let mut applied = reader.watch_applied();
        let held = tokio::time::Instant::now();
        let until = held + OWNER_HOLD;
        let mut counted = None;
        let mut probe: Option<tokio::sync::watch::Receiver<Option<tokio::time::Instant>>> = None;
        loop {
            let owner = reader.read(|state| {
                check_claim(state, caller, cluster, self.must_be_named())?;
                Ok::<_, Status>(state.cluster_owner(cluster).map(|(owner, _)| {
                    let address = state.members.get(&owner).map(|m| m.address.clone());
                    (owner, address)
                }))
            })?;
            let hold = match (&owner, unreached) {
                (_, None) => false,
                (Some((owner, _)), Some(_)) if *owner == self.replica.id() => false,
                (Some((_, address)), Some(gone)) => address.as_deref() == Some(gone),
                (None, Some(_)) => true,
            };
            let answered = probe
                .as_ref()
                .is_some_and(|p| p.borrow().is_some_and(|at| at >= held));
            let expired = tokio::time::Instant::now() >= until;
            if !hold || answered || expired {
                if counted.is_some() {
                    let ended = if !hold {
                        "moved"
                    } else if answered {
                        "answered"
                    } else {
                        "expired"
                    };
                    self.replica
                        .metrics
                        .agent_holds
                        .get_or_create(&crate::metrics::ResultLabel {
                            result: ended.into(),
                        })
                        .inc();
                }
                return owner.ok_or_else(|| {
                    status(ApiError::unavailable(format!(
                        "Cluster {cluster} has no owner yet; retry"
                    )))
                });
            }
            if counted.is_none() {
                counted = Some(Counted::new(&self.replica.metrics.agents_held));
            }
            if let (None, Some((_, Some(address)))) = (&probe, &owner) {
                probe = Some(self.probes.watch(&self.replica, address));
            }
            let probed = async {
                let changed = match probe.as_mut() {
                    Some(probe) => probe.changed().await.is_ok(),
                    None => false,
                };
                if !changed {
                    // No probe yet, or its task ended (the replica is stopping).
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                changed = applied.changed() => {
                    if changed.is_err() {
                        return Err(status(ApiError::unavailable("this replica is stopping; retry")));
                    }
                    // Thousands of agents may wait here after a failover: each looks again at
                    // most every HOLD_RECHECK, not at every applied entry.
                    tokio::time::sleep(HOLD_RECHECK).await;
                }
                () = probed => {}
                () = self.replica.stopping.cancelled() => {
                    return Err(status(ApiError::unavailable("this replica is stopping; retry")));
                }
                () = tokio::time::sleep_until(until) => {}
            }
        }
    }

    /// Serves the stream of `cluster` here, its owner.
    fn serve(
        &self,
        cluster: String,
        mut inbound: Streaming<proto::AgentMessage>,
    ) -> DispatchStream {
        let replica = self.replica.clone();
        let (handle, sender, receiver) = self.agents.open(&cluster);
        tracing::info!(%cluster, "agent connected");
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(crate::agents::PING_INTERVAL);
            loop {
                tokio::select! {
                    message = inbound.message() => match message {
                        Ok(Some(proto::AgentMessage {
                            message: Some(proto::agent_message::Message::Result(result)),
                        })) => {
                            handle.finish(result.job, result.outcome_json);
                        }
                        Ok(Some(_)) => {}
                        Ok(None) | Err(_) => break,
                    },
                    _ = ticker.tick() => {
                        let owned = replica.raft.reader().read(|state| {
                            state.cluster_owner(&cluster).is_some_and(|(o, _)| o == replica.id())
                        });
                        if !owned || replica.stopping.is_cancelled() {
                            let _ = sender
                                .send(Err(status(ApiError::unavailable(format!(
                                    "Cluster {cluster} moved to another replica; reconnect"
                                )))))
                                .await;
                            break;
                        }
                        // Pings stop while the lease lapses: the agent stops writing soon after.
                        if replica.lease.is_valid()
                            && sender.send(Ok(crate::agents::ping())).await.is_err()
                        {
                            break;
                        }
                    }
                }
            }
            tracing::info!(%cluster, "agent disconnected");
            drop(handle);
        });
        Box::pin(tokio_stream::wrappers::ReceiverStream::new(receiver))
    }

    /// Forwards the stream of `cluster` to its owner at `address`, with the agent's token.
    async fn forward(
        &self,
        cluster: &str,
        inbound: Streaming<proto::AgentMessage>,
        authorization: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
        address: &str,
    ) -> Result<DispatchStream, Status> {
        let channel = self
            .replica
            .peer_channel(address, Duration::from_secs(10))
            .map_err(|error| status(ApiError::unavailable(error.to_string())))?;
        let hello = proto::AgentMessage {
            message: Some(proto::agent_message::Message::Hello(cluster.to_string())),
        };
        let upstream = futures::stream::once(async move { hello }).chain(
            inbound
                .take_while(|message| std::future::ready(message.is_ok()))
                .filter_map(|message| std::future::ready(message.ok())),
        );
        let mut request = Request::new(upstream);
        if let Some(value) = authorization {
            request.metadata_mut().insert("authorization", value);
        }
        let mut client = proto::agent_client::AgentClient::new(channel);
        let response = client.attach(request).await?;
        let forwarding = Counted::new(&self.replica.metrics.agents_forwarded);
        Ok(Box::pin(response.into_inner().map(move |item| {
            let _counted = &forwarding;
            item
        })))
    }
}

/// Counts something in a gauge while it lasts: a forwarded stream in
/// `starling_agents_forwarded`, a held attach in `starling_agents_held`.
struct Counted(prometheus_client::metrics::gauge::Gauge);

impl Counted {
    fn new(gauge: &prometheus_client::metrics::gauge::Gauge) -> Counted {
        gauge.inc();
        Counted(gauge.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet::state::AGENT_ANNOTATION;

    fn state_with_pull_cluster(annotation: Option<&str>) -> fleet::FleetState {
        let mut state = fleet::FleetState::default();
        let annotations = annotation
            .map(|a| format!("\n  annotations: {{\"{AGENT_ANNOTATION}\": \"{a}\"}}"))
            .unwrap_or_default();
        let yaml = format!(
            "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: edge-1\n  namespace: team-a{annotations}\nspec: {{mode: pull}}\n"
        );
        for resource in fleet::manifest::parse_manifests(&yaml).expect("manifest") {
            state.apply(Command::UpsertSpec {
                resource: Box::new(resource),
                at: "2026-01-01T00:00:00Z".into(),
            });
        }
        state.apply(Command::CreateToken {
            id: "abc".into(),
            entry: fleet::state::TokenEntry {
                digest: String::new(),
                role: Role::Agent,
                tenants: vec!["team-a".into()],
                description: String::new(),
                created: String::new(),
                expires: None,
                last_used: None,
            },
        });
        state
    }

    fn agent(name: &str) -> Principal {
        Principal {
            name: name.into(),
            role: Role::Agent,
            tenants: vec!["team-a".into()],
            open: false,
        }
    }

    /// Regression (issue 33, part 4): in operator mode an unannotated pull Cluster made in the
    /// management cluster was claimed by the first agent token of its tenant.
    #[test]
    fn in_operator_mode_a_pull_cluster_must_name_its_agent() {
        let unnamed = state_with_pull_cluster(None);
        let refused = check_claim(&unnamed, &agent("token abc"), "team-a/edge-1", true)
            .expect_err("an unannotated Cluster is claimed by nobody");
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        assert!(
            refused.message().contains(AGENT_ANNOTATION),
            "{}",
            refused.message()
        );
        // Standalone, the first agent to register claims it (and Register records the claim).
        assert!(check_claim(&unnamed, &agent("token abc"), "team-a/edge-1", false).is_ok());

        let named = state_with_pull_cluster(Some("token abc"));
        assert!(check_claim(&named, &agent("token abc"), "team-a/edge-1", true).is_ok());
        let other = check_claim(&named, &agent("token xyz"), "team-a/edge-1", true)
            .expect_err("another token");
        assert!(other.message().contains("holds it"), "{}", other.message());
    }

    /// Found by the chaos disaster schedules: agents that survive the loss of every replica
    /// reconnect to the fresh installation before `starling import`, registered their
    /// Clusters, and the import refused a installation that was no longer empty.
    #[test]
    fn a_recovering_installation_takes_no_new_cluster_but_knows_imported_ones() {
        let mut state = state_with_pull_cluster(None);
        state.apply(Command::SetRecovery { active: true });
        let register = |state: &mut fleet::FleetState, key: &str| {
            state.apply(Command::RegisterPullCluster {
                cluster: key.into(),
                agent: "token abc".into(),
                labels: Default::default(),
                policy: fleet::state::RegisterPolicy {
                    may_create: true,
                    must_be_named: false,
                },
                at: "2026-01-01T00:00:00Z".into(),
            })
        };
        let refused = match register(&mut state, "team-a/edge-2") {
            fleet::state::Outcome::RegisterRefused { refusal } => refusal_status(refusal),
            other => panic!("a new Cluster while recovering: {other:?}"),
        };
        assert_eq!(refused.code(), tonic::Code::Unavailable);
        assert!(
            refused.message().contains("recovering"),
            "{}",
            refused.message()
        );
        assert!(matches!(
            register(&mut state, "team-a/edge-1"),
            fleet::state::Outcome::Registered { .. }
        ));
        state.apply(Command::SetRecovery { active: false });
        assert!(matches!(
            register(&mut state, "team-a/edge-2"),
            fleet::state::Outcome::Registered { created: true, .. }
        ));
    }
}

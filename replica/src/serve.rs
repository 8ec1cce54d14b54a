//! Running a replica. [`start`] binds the gRPC server (Raft, Fleet, Admin, Node, Artifacts,
//! Agent) and the HTTP server, builds the parts that live beside the replica (the agents of
//! pull clusters, the fleet view's snapshots, the webhook deliveries), hands each server and
//! task the parts it needs, and starts the replica's tasks; [`RunningNode::stop`] stops them.
//! `starling node` ([`run`]) prints one JSON line on stdout once both servers listen
//! (harnesses wait for it) and runs until its shutdown signal; `starling dev` starts several
//! replicas in one process with the same functions.
//!
//! ```text
//!  NodeConfig ─► Replica::open ─┬─► gRPC: Raft, Node, Artifacts (peers only)
//!  SpecSource (operator mode) ──┤        Fleet, Admin (+ spec source), Agent (+ agents)
//!  Agents, Snapshots, Deliveries┼─► HTTP: probes, /metrics (+ agents), /hooks (+ deliveries),
//!                               │        /ui (+ snapshots)
//!                               └─► tasks: bootstrap, heartbeat, leader, voters, sources,
//!                                          syncs and reachability (+ agents), the spec
//!                                          source's own
//! ```

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::agents::Agents;
use crate::api;
use crate::config::NodeConfig;
use crate::error::ReplicaError;
use crate::node::{self, Replica};
use crate::spec_source::SpecSource;

/// A replica running in this process.
pub struct RunningNode {
    pub replica: Arc<Replica>,
    stop_grpc: Option<oneshot::Sender<()>>,
    grpc: JoinHandle<Result<(), ReplicaError>>,
    tasks: Vec<JoinHandle<()>>,
}

/// Binds both servers and starts the replica. `spec_source` is operator mode's management
/// cluster (`None`: specs come through the API).
pub async fn start(
    config: NodeConfig,
    spec_source: Option<Arc<dyn SpecSource>>,
) -> Result<RunningNode, ReplicaError> {
    let listen = |what: &'static str, address| async move {
        TcpListener::bind(address)
            .await
            .map_err(|source| ReplicaError::Listen {
                what,
                address,
                source,
            })
    };
    let grpc_listener = listen("grpc", config.listen).await?;
    let http_listener = listen("http", config.http_listen).await?;
    let replica = Arc::new(Replica::open(config).await?);
    let agents = Arc::new(Agents::default());
    let authenticator = replica.authenticator();

    let limit = proto::limits::MAX_API_MESSAGE_BYTES;
    let fleet = proto::fleet_server::FleetServer::new(api::fleet::FleetService::new(
        replica.clone(),
        spec_source.clone(),
    ))
    .max_decoding_message_size(limit)
    .max_encoding_message_size(limit);
    let admin = proto::admin_server::AdminServer::new(api::admin::AdminService::new(
        replica.clone(),
        spec_source.clone(),
    ))
    .max_decoding_message_size(limit)
    .max_encoding_message_size(limit);
    let node = proto::node_server::NodeServer::new(api::node::NodeService::new(replica.clone()));
    let artifacts = proto::artifacts_server::ArtifactsServer::new(
        api::artifacts::ArtifactService::new(replica.clone()),
    )
    .max_encoding_message_size(limit);
    let (stop_grpc, stopped) = oneshot::channel::<()>();
    // The client APIs authenticate every call; the replicas' own services (Raft, Node,
    // Artifacts) are for peers, which present a client certificate when TLS is on.
    use crate::auth::RequireToken;
    use tonic::service::interceptor::InterceptedService;
    let fleet = RequireToken::new(fleet, authenticator.clone());
    let agent = RequireToken::new(
        proto::agent_server::AgentServer::new(api::agent::AgentService::new(
            replica.clone(),
            agents.clone(),
            spec_source.clone(),
        ))
        .max_decoding_message_size(limit)
        .max_encoding_message_size(limit),
        authenticator.clone(),
    );
    let admin = RequireToken::new(admin, authenticator);
    let peers_only = starling_transport::tls::PeersOnly {
        enforce: replica.tls.is_some(),
    };
    let grpc = tonic::transport::Server::builder()
        .add_service(InterceptedService::new(
            replica.raft.grpc_service(),
            peers_only.clone(),
        ))
        .add_service(fleet)
        .add_service(admin)
        .add_service(agent)
        .add_service(InterceptedService::new(node, peers_only.clone()))
        .add_service(InterceptedService::new(artifacts, peers_only))
        .serve_with_incoming_shutdown(
            starling_transport::tls::incoming(grpc_listener, replica.tls.clone()),
            async {
                let _ = stopped.await;
            },
        );
    let grpc = tokio::spawn(async move { grpc.await.map_err(ReplicaError::Grpc) });
    let http = {
        let router = crate::http::router(crate::http::HttpState {
            replica: replica.clone(),
            agents: agents.clone(),
            deliveries: Default::default(),
            snapshots: Default::default(),
        });
        let tls = replica.tls.clone();
        tokio::spawn(async move {
            let served = match tls {
                // HTTPS, with the gRPC port's certificate.
                Some(tls) => match crate::http::TlsListener::new(http_listener, tls) {
                    Ok(listener) => axum::serve(listener, router).await,
                    Err(error) => Err(error),
                },
                None => axum::serve(http_listener, router).await,
            };
            if let Err(error) = served {
                tracing::error!(%error, "http server failed");
            }
        })
    };
    let mut tasks = vec![
        http,
        tokio::spawn(node::bootstrap::run(replica.clone())),
        tokio::spawn(node::heartbeat::run(replica.clone())),
        tokio::spawn(node::leader::run(replica.clone())),
        tokio::spawn(node::leader::watch_apply(replica.clone())),
        tokio::spawn(node::notifier::run(replica.clone())),
        tokio::spawn(node::voters::run(replica.clone())),
        tokio::spawn(crate::worker::sources::run(replica.clone())),
        tokio::spawn(crate::worker::syncs::run(replica.clone(), agents.clone())),
        tokio::spawn(crate::worker::reachability::run(
            replica.clone(),
            agents.clone(),
        )),
        tokio::spawn(node::stopping::rejoin(replica.clone())),
    ];
    if let Some(source) = spec_source {
        tasks.push(tokio::spawn(
            source.run(crate::spec_source::SpecHandle::new(replica.clone())),
        ));
    }
    if let Some(tls) = &replica.tls {
        tasks.push(tokio::spawn(tls.clone().watch()));
    }
    if let Some(credentials) = &replica.credentials {
        tasks.push(tokio::spawn(
            credentials
                .clone()
                .watch(starling_transport::tls::RELOAD_INTERVAL),
        ));
        tasks.push(tokio::spawn(crate::node::token_uses::report_uses(
            replica.clone(),
        )));
    }
    tracing::info!(node = replica.id(), grpc = %replica.config.advertise, http = %replica.config.http_listen, "starling node started");
    Ok(RunningNode {
        replica,
        stop_grpc: Some(stop_grpc),
        grpc,
        tasks,
    })
}

/// How long a stop waits for the gRPC server to finish the requests it is serving.
const GRPC_DRAIN: Duration = Duration::from_secs(1);
/// How long a stop waits for the replica's tasks to end once aborted.
const TASKS_DRAIN: Duration = Duration::from_secs(2);
/// How long a stop waits for running syncs to stop and give their tickets back (a write in
/// flight finishes first, within the request time-out).
const SYNCS_DRAIN: Duration = Duration::from_secs(2);

impl RunningNode {
    /// Stops the node in order, so that nothing calls Raft while it shuts down (openraft logs an
    /// error for every call still waiting when its core stops, or made after):
    ///
    /// ```text
    /// gRPC: stop accepting ─► replica tasks: abort, wait ─► Raft: refuse new calls
    ///   ─► gRPC: wait for the requests in flight (1 s) ─► Raft: let the calls under way
    ///   finish (see `RaftNode::shutdown`), shut down; the data stays on disk
    /// ```
    ///
    /// It is quick on purpose: while a replica stops, its peers see it unreachable. A sync
    /// still running in its own task stops when the lease lapses; its result is not committed
    /// and the ticket is reclaimed like a crashed node's.
    pub async fn stop(mut self) {
        let node = self.replica.id();
        // Running syncs stop first and give their tickets back while Raft still takes writes.
        self.replica.stopping.cancel();
        let syncs_stopped = async {
            while !crate::node::lock(&self.replica.running_syncs).is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        if tokio::time::timeout(SYNCS_DRAIN, syncs_stopped)
            .await
            .is_err()
        {
            tracing::info!(node, "syncs still stopping after {SYNCS_DRAIN:?}");
        }
        if let Some(stop) = self.stop_grpc.take() {
            let _ = stop.send(());
        }
        for task in &self.tasks {
            task.abort();
        }
        let tasks = futures::future::join_all(self.tasks.drain(..));
        if tokio::time::timeout(TASKS_DRAIN, tasks).await.is_err() {
            tracing::warn!(node, "replica tasks still running after {TASKS_DRAIN:?}");
        }
        // Syncs still stopping would go on proposing: refuse it from now on.
        self.replica.raft.refuse_new_calls();
        // `run` may have awaited the server's end already; a finished handle is not polled again.
        if !self.grpc.is_finished()
            && tokio::time::timeout(GRPC_DRAIN, &mut self.grpc)
                .await
                .is_err()
        {
            tracing::info!(
                node,
                "grpc requests still open after {GRPC_DRAIN:?}; closing them"
            );
            self.grpc.abort();
        }
        if let Err(error) = self.replica.raft.shutdown().await {
            tracing::warn!(%error, "raft did not shut down cleanly");
        }
        tracing::info!(node, "starling node stopped");
    }
}

/// `starling node`: runs the replica until `shutdown` resolves (the binary passes SIGINT or
/// SIGTERM), then drains it and stops.
pub async fn run(
    config: NodeConfig,
    spec_source: Option<Arc<dyn SpecSource>>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), ReplicaError> {
    let mut node = start(config, spec_source).await?;
    println!(
        "{}",
        serde_json::json!({
            "event": "listening",
            "id": node.replica.id(),
            "grpc": node.replica.config.advertise,
            "http": node.replica.config.http_listen.to_string(),
        })
    );
    let result = tokio::select! {
        _ = shutdown => {
            let timeout = node.replica.config.drain_timeout;
            node::stopping::drain(&node.replica, timeout).await;
            Ok(())
        }
        // A replica whose Raft stopped can neither apply nor vote: serving stale reads would
        // hide it. Exit so that the supervisor (the StatefulSet) restarts it from its disk.
        fatal = node.replica.raft_fatal() => {
            tracing::error!(error = %fatal, "raft stopped with a fatal error; exiting");
            Err(ReplicaError::Fatal(fatal))
        }
        served = &mut node.grpc => served.unwrap_or_else(|error| {
            Err(ReplicaError::Fatal(format!("the grpc server task failed: {error}")))
        }),
    };
    node.stop().await;
    result
}

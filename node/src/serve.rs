//! Running a replica. [`start`] binds the gRPC server (Raft, Fleet, Admin, Node, Artifacts)
//! and the HTTP server and starts the replica's tasks; [`RunningNode::stop`] stops them.
//! `starling node` ([`run`]) prints one JSON line on stdout once both servers listen
//! (harnesses wait for it) and runs until SIGINT or SIGTERM; `starling dev` starts several
//! replicas in one process with the same functions.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::api;
use crate::config::{NodeArgs, NodeConfig};
use crate::replica::{self, Replica};

/// A replica running in this process.
pub struct RunningNode {
    pub replica: Arc<Replica>,
    stop_grpc: Option<oneshot::Sender<()>>,
    grpc: JoinHandle<anyhow::Result<()>>,
    tasks: Vec<JoinHandle<()>>,
}

/// Binds both servers and starts the replica.
pub async fn start(config: NodeConfig) -> anyhow::Result<RunningNode> {
    let grpc_listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen for grpc on {}", config.listen))?;
    let http_listener = TcpListener::bind(config.http_listen)
        .await
        .with_context(|| format!("cannot listen for http on {}", config.http_listen))?;
    let replica = Arc::new(Replica::open(config).await?);
    let authenticator = crate::auth::Authenticator::of(&replica);

    let limit = proto::limits::MAX_API_MESSAGE_BYTES;
    let fleet =
        proto::fleet_server::FleetServer::new(api::fleet::FleetService::new(replica.clone()))
            .max_decoding_message_size(limit)
            .max_encoding_message_size(limit);
    let admin =
        proto::admin_server::AdminServer::new(api::admin::AdminService::new(replica.clone()))
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
    use tonic::service::interceptor::InterceptedService;
    let fleet = InterceptedService::new(fleet, authenticator.clone());
    let agent = InterceptedService::new(
        proto::agent_server::AgentServer::new(api::agent::AgentService::new(replica.clone()))
            .max_decoding_message_size(limit)
            .max_encoding_message_size(limit),
        authenticator.clone(),
    );
    let admin = InterceptedService::new(admin, authenticator);
    let peers_only = crate::tls::PeersOnly {
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
            crate::tls::incoming(grpc_listener, replica.tls.clone()),
            async {
                let _ = stopped.await;
            },
        );
    let grpc = tokio::spawn(async move { grpc.await.context("grpc server failed") });
    let http = {
        let router = crate::http::router(replica.clone());
        tokio::spawn(async move {
            if let Err(error) = axum::serve(http_listener, router).await {
                tracing::error!(%error, "http server failed");
            }
        })
    };
    let mut tasks = vec![
        http,
        tokio::spawn(replica::bootstrap::run(replica.clone())),
        tokio::spawn(replica::heartbeat::run(replica.clone())),
        tokio::spawn(replica::leader::run(replica.clone())),
        tokio::spawn(replica::voters::run(replica.clone())),
        tokio::spawn(crate::worker::sources::run(replica.clone())),
        tokio::spawn(crate::worker::syncs::run(replica.clone())),
        tokio::spawn(crate::operator::run(replica.clone())),
        tokio::spawn(replica::stopping::rejoin(replica.clone())),
    ];
    if let Some(tls) = &replica.tls {
        tasks.push(tokio::spawn(tls.clone().watch()));
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
            while !crate::replica::lock(&self.replica.running_syncs).is_empty() {
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

/// `starling node`.
pub async fn run(args: NodeArgs) -> anyhow::Result<()> {
    let config = args.validate()?;
    let mut node = start(config).await?;
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
        _ = shutdown_signal() => {
            let timeout = node.replica.config.drain_timeout;
            replica::stopping::drain(&node.replica, timeout).await;
            Ok(())
        }
        // A replica whose Raft stopped can neither apply nor vote: serving stale reads would
        // hide it. Exit so that the supervisor (the StatefulSet) restarts it from its disk.
        fatal = node.replica.raft_fatal() => {
            tracing::error!(error = %fatal, "raft stopped with a fatal error; exiting");
            Err(anyhow::anyhow!("raft stopped with a fatal error: {fatal}"))
        }
        served = &mut node.grpc => served.unwrap_or_else(|error| Err(anyhow::anyhow!("grpc server task failed: {error}"))),
    };
    node.stop().await;
    result
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}

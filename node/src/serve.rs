//! `starling node`: runs one replica until SIGINT or SIGTERM. Binds the gRPC server (Raft,
//! Fleet, Admin, Node) and the HTTP server, prints one JSON line on stdout when both listen
//! (harnesses wait for it), then starts the replica's tasks.

use std::sync::Arc;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

use crate::api;
use crate::config::NodeArgs;
use crate::replica::{self, Replica};

pub async fn run(args: NodeArgs) -> anyhow::Result<()> {
    let config = args.validate()?;
    let grpc_listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen for grpc on {}", config.listen))?;
    let http_listen = config.http_listen;
    let replica = Arc::new(Replica::open(config).await?);

    let limit = proto::limits::MAX_API_MESSAGE_BYTES;
    let fleet = proto::fleet_server::FleetServer::new(api::fleet::FleetService::new(replica.clone()))
        .max_decoding_message_size(limit)
        .max_encoding_message_size(limit);
    let admin = proto::admin_server::AdminServer::new(api::admin::AdminService::new(replica.clone()))
        .max_decoding_message_size(limit)
        .max_encoding_message_size(limit);
    let node = proto::node_server::NodeServer::new(api::node::NodeService::new(replica.clone()));
    let grpc = tonic::transport::Server::builder()
        .add_service(replica.raft.grpc_service())
        .add_service(fleet)
        .add_service(admin)
        .add_service(node)
        .serve_with_incoming_shutdown(TcpListenerStream::new(grpc_listener), shutdown_signal());
    let http = crate::http::serve(replica.clone(), http_listen);

    println!(
        "{}",
        serde_json::json!({
            "event": "listening",
            "id": replica.id(),
            "grpc": replica.config.advertise,
            "http": http_listen.to_string(),
        })
    );
    tracing::info!(node = replica.id(), grpc = %replica.config.advertise, http = %http_listen, "starling node started");

    let tasks = [
        tokio::spawn(replica::bootstrap::run(replica.clone())),
        tokio::spawn(replica::heartbeat::run(replica.clone())),
        tokio::spawn(replica::leader::run(replica.clone())),
    ];
    let result = tokio::select! {
        served = grpc => served.context("grpc server failed"),
        served = http => served,
    };
    for task in tasks {
        task.abort();
    }
    if let Err(error) = replica.raft.shutdown().await {
        tracing::warn!(%error, "raft did not shut down cleanly");
    }
    tracing::info!(node = replica.id(), "starling node stopped");
    result
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
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

//! The sending side of the Raft network: one tonic channel per peer address, shared by every
//! client openraft creates for that peer ([`NetworkFactory::new_client`] runs for each
//! election's vote requests and each new replication stream) and kept connected to every voter
//! (`NetworkFactory::warm`), so that a vote or a new leader's first append does not wait for
//! a new TCP, TLS and HTTP/2 connection: across regions those are several round trips, paid on
//! every failover.
//!
//! Failures are classified the way openraft's replication expects, so a dead peer costs only its
//! own replication stream a back-off and never stalls the others (each peer has its own
//! replication task and its own client):
//!
//! | what happened | openraft error | openraft's reaction |
//! |---|---|---|
//! | cannot connect, connection reset, peer shutting down (`UNAVAILABLE`) | `Unreachable` | back off (see [`PeerClient::backoff`]), then retry |
//! | no answer within the RPC's time-to-live (`DEADLINE_EXCEEDED`, tonic's `CANCELLED`) | `Timeout` | retry on the next heartbeat |
//! | the peer answered with an openraft error | `RemoteError` | handled by openraft |
//! | anything else (bad reply, server error) | `Network` | retry on the next heartbeat |
//! | an append-entries request over `max_append_bytes` (not sent) | `PayloadTooLarge` | resend fewer entries |
//!
//! After any transport failure the channel is dropped and rebuilt on the next call, so a peer
//! that restarted (perhaps on a new address after a membership change) is reconnected.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError, Timeout,
    Unreachable,
};
use openraft::network::{Backoff, RPCOption, RPCTypes, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use proto::RaftPayload;
use proto::raft_client::RaftClient;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tonic::Code;
use tonic::transport::{Channel, Endpoint};

use crate::codec;
use crate::types::{NodeId, Peer, TypeConfig};

/// Transport settings for connections to peers.
#[derive(Clone, Debug)]
pub struct NetworkConfig {
    /// Time allowed to establish a TCP + HTTP/2 connection.
    pub connect_timeout: Duration,
    /// Interval of HTTP/2 keep-alive pings, which detect a dead connection between RPCs.
    pub keepalive_interval: Duration,
    /// Largest message sent or accepted.
    pub max_message_bytes: usize,
    /// An append-entries request larger than this is split (openraft resends fewer entries):
    /// it must be sent, decoded and made durable within one heartbeat interval.
    pub max_append_bytes: usize,
    /// First back-off after a peer was found unreachable; doubles up to `max_backoff`.
    pub min_backoff: Duration,
    pub max_backoff: Duration,
    /// Opens the byte stream to a peer instead of a TCP connection. `None` (production) dials
    /// TCP; the deterministic simulation dials its simulated network.
    pub connector: Option<Connector>,
}

pub use starling_transport::{ConnectFuture, Connector, PeerIo};

impl Default for NetworkConfig {
    fn default() -> NetworkConfig {
        NetworkConfig {
            connect_timeout: Duration::from_millis(500),
            keepalive_interval: Duration::from_secs(2),
            max_message_bytes: proto::limits::MAX_RAFT_MESSAGE_BYTES,
            max_append_bytes: 1024 * 1024,
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            connector: None,
        }
    }
}

/// Builds a [`Channel`] to `addr` (`host:port`) that connects on first use, through
/// `config.connector` when one is set (the replica's heartbeats use it too).
pub fn lazy_channel(
    addr: &str,
    config: &NetworkConfig,
) -> Result<Channel, tonic::transport::Error> {
    let endpoint = endpoint(addr, config)?;
    Ok(match &config.connector {
        None => endpoint.connect_lazy(),
        Some(connector) => {
            endpoint.connect_with_connector_lazy(starling_transport::dial(connector))
        }
    })
}

/// Connects a [`Channel`] to `addr` now.
async fn connected_channel(
    addr: &str,
    config: &NetworkConfig,
) -> Result<Channel, tonic::transport::Error> {
    let endpoint = endpoint(addr, config)?;
    match &config.connector {
        None => endpoint.connect().await,
        Some(connector) => {
            endpoint
                .connect_with_connector(starling_transport::dial(connector))
                .await
        }
    }
}

fn endpoint(addr: &str, config: &NetworkConfig) -> Result<Endpoint, tonic::transport::Error> {
    Ok(
        Endpoint::from_shared(format!("http://{}", starling_transport::route(addr)))?
            .connect_timeout(config.connect_timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(config.keepalive_interval)
            .keep_alive_timeout(config.keepalive_interval)
            .keep_alive_while_idle(true),
    )
}

/// The most peer addresses whose channels are kept; past it the map starts again (a group has
/// a handful of members, so only address churn gets there).
const MAX_CHANNELS: usize = 64;

/// Creates a [`PeerClient`] for every replication or vote target. Clones share the channels.
#[derive(Clone, Debug)]
pub struct NetworkFactory {
    id: NodeId,
    config: NetworkConfig,
    channels: Arc<Mutex<Channels>>,
}

/// The channels kept per peer address, each with the generation it was made in (a client that
/// saw its channel fail removes it only if no newer one replaced it).
#[derive(Debug, Default)]
struct Channels {
    by_addr: HashMap<String, (u64, Channel)>,
    /// Addresses a warm-up is connecting to now.
    warming: HashSet<String>,
    generation: u64,
}

impl Channels {
    fn insert(&mut self, addr: &str, channel: Channel) -> u64 {
        if self.by_addr.len() >= MAX_CHANNELS && !self.by_addr.contains_key(addr) {
            self.by_addr.clear();
        }
        self.generation += 1;
        self.by_addr
            .insert(addr.to_owned(), (self.generation, channel));
        self.generation
    }
}

impl NetworkFactory {
    /// `id` is this replica's id (reported in timeout errors).
    pub fn new(id: NodeId, config: NetworkConfig) -> NetworkFactory {
        NetworkFactory {
            id,
            config,
            channels: Arc::default(),
        }
    }

    fn channels(&self) -> std::sync::MutexGuard<'_, Channels> {
        self.channels
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The channel to `addr` and its generation: the one kept, or a new lazy one.
    fn channel(&self, addr: &str) -> Result<(u64, Channel), tonic::transport::Error> {
        let mut channels = self.channels();
        if let Some(kept) = channels.by_addr.get(addr) {
            return Ok(kept.clone());
        }
        let channel = lazy_channel(addr, &self.config)?;
        let generation = channels.insert(addr, channel.clone());
        Ok((generation, channel))
    }

    /// Forgets the channel to `addr` of `generation` after it failed; the next call dials again.
    fn forget(&self, addr: &str, generation: u64) {
        let mut channels = self.channels();
        if channels
            .by_addr
            .get(addr)
            .is_some_and(|(kept, _)| *kept == generation)
        {
            channels.by_addr.remove(addr);
        }
    }

    /// Connects to each of `addrs` that has no channel yet, in the background (one attempt per
    /// address at a time). Called for the voters of the membership, so that the channels a
    /// failover needs are up before it (HTTP/2 keep-alive holds them open while idle).
    pub(crate) fn warm<'a>(&self, addrs: impl IntoIterator<Item = &'a str>) {
        let mut channels = self.channels();
        for addr in addrs {
            if channels.by_addr.contains_key(addr) || !channels.warming.insert(addr.to_owned()) {
                continue;
            }
            let factory = self.clone();
            let addr = addr.to_owned();
            tokio::spawn(async move {
                let connected = connected_channel(&addr, &factory.config).await;
                let mut channels = factory.channels();
                channels.warming.remove(&addr);
                match connected {
                    Ok(channel) if !channels.by_addr.contains_key(&addr) => {
                        channels.insert(&addr, channel);
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::debug!(%addr, %error, "raft peer not reachable yet");
                    }
                }
            });
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &Peer) -> PeerClient {
        PeerClient {
            id: self.id,
            target,
            addr: node.addr.clone(),
            config: self.config.clone(),
            factory: self.clone(),
            client: None,
        }
    }
}

/// The connection to one peer.
pub struct PeerClient {
    id: NodeId,
    target: NodeId,
    addr: String,
    config: NetworkConfig,
    factory: NetworkFactory,
    /// The client and the generation of its channel.
    client: Option<(u64, RaftClient<Channel>)>,
}

#[derive(Clone, Copy)]
enum Rpc {
    AppendEntries,
    InstallSnapshot,
    Vote,
}

impl Rpc {
    fn openraft_type(self) -> RPCTypes {
        match self {
            Rpc::AppendEntries => RPCTypes::AppendEntries,
            Rpc::InstallSnapshot => RPCTypes::InstallSnapshot,
            Rpc::Vote => RPCTypes::Vote,
        }
    }

    fn request_name(self) -> &'static str {
        match self {
            Rpc::AppendEntries => "append-entries request",
            Rpc::InstallSnapshot => "install-snapshot request",
            Rpc::Vote => "vote request",
        }
    }

    fn result_name(self) -> &'static str {
        match self {
            Rpc::AppendEntries => "append-entries result",
            Rpc::InstallSnapshot => "install-snapshot result",
            Rpc::Vote => "vote result",
        }
    }
}

/// Transport-level failure of one call, before classification.
#[derive(Debug, thiserror::Error)]
enum CallError {
    #[error("invalid peer address {addr}: {source}")]
    Address {
        addr: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("rpc to {addr} failed: {status}")]
    Status { addr: String, status: tonic::Status },
    #[error("rpc to {addr} timed out")]
    Elapsed { addr: String },
}

impl PeerClient {
    fn client(&mut self) -> Result<RaftClient<Channel>, CallError> {
        if let Some((_, client)) = &self.client {
            return Ok(client.clone());
        }
        let (generation, channel) =
            self.factory
                .channel(&self.addr)
                .map_err(|source| CallError::Address {
                    addr: self.addr.clone(),
                    source,
                })?;
        let client = RaftClient::new(channel)
            .max_decoding_message_size(self.config.max_message_bytes)
            .max_encoding_message_size(self.config.max_message_bytes);
        self.client = Some((generation, client.clone()));
        Ok(client)
    }

    async fn call<Req, Resp, E>(
        &mut self,
        rpc: Rpc,
        request: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, Peer, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let data = codec::encode(rpc.request_name(), request)
            .map_err(|error| RPCError::Network(NetworkError::new(&error)))?;
        self.call_encoded(rpc, data, option).await
    }

    async fn call_encoded<Resp, E>(
        &mut self,
        rpc: Rpc,
        data: Vec<u8>,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, Peer, RaftError<NodeId, E>>>
    where
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let ttl = option.hard_ttl();
        let outcome = self.send(rpc, data, ttl).await;
        let bytes = match outcome {
            Ok(bytes) => bytes,
            Err(error) => {
                if let Some((generation, _)) = self.client.take() {
                    self.factory.forget(&self.addr, generation);
                }
                return Err(self.classify(rpc, ttl, error));
            }
        };
        let result: Result<Resp, RaftError<NodeId, E>> =
            codec::decode(rpc.result_name(), &bytes)
                .map_err(|error| RPCError::Network(NetworkError::new(&error)))?;
        result.map_err(|error| RPCError::RemoteError(RemoteError::new(self.target, error)))
    }

    async fn send(&mut self, rpc: Rpc, data: Vec<u8>, ttl: Duration) -> Result<Vec<u8>, CallError> {
        let mut client = self.client()?;
        let mut request = tonic::Request::new(RaftPayload { data });
        request.set_timeout(ttl);
        let call = async {
            match rpc {
                Rpc::AppendEntries => client.append_entries(request).await,
                Rpc::InstallSnapshot => client.install_snapshot(request).await,
                Rpc::Vote => client.vote(request).await,
            }
        };
        match tokio::time::timeout(ttl, call).await {
            Ok(Ok(reply)) => Ok(reply.into_inner().data),
            Ok(Err(status)) => Err(CallError::Status {
                addr: self.addr.clone(),
                status,
            }),
            Err(_) => Err(CallError::Elapsed {
                addr: self.addr.clone(),
            }),
        }
    }

    fn classify<E: std::error::Error>(
        &self,
        rpc: Rpc,
        ttl: Duration,
        error: CallError,
    ) -> RPCError<NodeId, Peer, RaftError<NodeId, E>> {
        tracing::debug!(target_node = self.target, addr = %self.addr, error = %error, "raft rpc failed");
        match &error {
            CallError::Address { .. } => RPCError::Unreachable(Unreachable::new(&error)),
            CallError::Elapsed { .. } => RPCError::Timeout(Timeout {
                action: rpc.openraft_type(),
                id: self.id,
                target: self.target,
                timeout: ttl,
            }),
            CallError::Status { status, .. } => match status.code() {
                Code::Unavailable => RPCError::Unreachable(Unreachable::new(&error)),
                // tonic reports its own request deadline as CANCELLED ("Timeout expired").
                Code::DeadlineExceeded | Code::Cancelled => RPCError::Timeout(Timeout {
                    action: rpc.openraft_type(),
                    id: self.id,
                    target: self.target,
                    timeout: ttl,
                }),
                _ => RPCError::Network(NetworkError::new(&error)),
            },
        }
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Peer, RaftError<NodeId>>> {
        let data = codec::encode(Rpc::AppendEntries.request_name(), &rpc)
            .map_err(|error| RPCError::Network(NetworkError::new(&error)))?;
        let entries = rpc.entries.len() as u64;
        let limit = self.config.max_append_bytes as u64;
        if entries > 1 && data.len() as u64 > limit {
            // openraft retries at once with at most this many entries, for the next few RPCs.
            let hint = (entries * limit / data.len() as u64).clamp(1, entries - 1);
            return Err(RPCError::PayloadTooLarge(
                PayloadTooLarge::new_entries_hint(hint),
            ));
        }
        self.call_encoded(Rpc::AppendEntries, data, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, Peer, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call(Rpc::InstallSnapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Peer, RaftError<NodeId>>> {
        self.call(Rpc::Vote, &rpc, &option).await
    }

    /// Exponential back-off after `Unreachable`: a restarted peer is found again quickly, a
    /// dead one costs little.
    fn backoff(&self) -> Backoff {
        let min = self.config.min_backoff;
        let max = self.config.max_backoff.max(min);
        Backoff::new(std::iter::successors(Some(min), move |previous| {
            Some((*previous * 2).min(max))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn kept(factory: &NetworkFactory, addr: &str) -> bool {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if factory.channels().by_addr.contains_key(addr) {
                return true;
            }
            if tokio::time::Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn a_warmed_peer_is_connected_before_any_call_and_shared_by_every_client() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address").to_string();
        let accepted = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.expect("accept");
            stream
        });
        let factory = NetworkFactory::new(1, NetworkConfig::default());
        factory.warm([addr.as_str()]);
        let _stream = tokio::time::timeout(Duration::from_secs(10), accepted)
            .await
            .expect("the warm-up connects without a call")
            .expect("accept task");
        assert!(kept(&factory, &addr).await, "the connected channel is kept");
        let peer = Peer::new(addr.clone());
        let (mut vote, mut replication) = (factory.clone(), factory.clone());
        let mut first = vote.new_client(2, &peer).await;
        let mut second = replication.new_client(2, &peer).await;
        first.client().expect("client");
        second.client().expect("client");
        let generations = |client: &PeerClient| client.client.as_ref().map(|(g, _)| *g);
        assert_eq!(generations(&first), generations(&second));
        // A failed channel is forgotten once; a newer one is not.
        let generation = generations(&first).expect("generation");
        factory.forget(&addr, generation);
        assert!(!factory.channels().by_addr.contains_key(&addr));
        let (newer, _) = factory.channel(&addr).expect("channel");
        factory.forget(&addr, generation);
        assert_eq!(
            factory.channels().by_addr.get(&addr).map(|(g, _)| *g),
            Some(newer)
        );
    }

    #[tokio::test]
    async fn an_unreachable_peer_is_tried_again_at_the_next_warm_up() {
        // A port nothing listens on: bound, then released.
        let addr = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            listener.local_addr().expect("address").to_string()
        };
        let factory = NetworkFactory::new(1, NetworkConfig::default());
        factory.warm([addr.as_str()]);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !factory.channels().warming.is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "the attempt ends");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!factory.channels().by_addr.contains_key(&addr));
    }
}

//! Committing commands: through the local openraft when this replica leads, through the
//! leader's `Propose` RPC otherwise.
//!
//! ```text
//!   propose_many(cmds) ── leader here? ──yes──► write_local ─► openraft client_write ─► outcomes
//!                              │no
//!                              ▼
//!                    Forwarder::forward(leader addr) ──Propose──► leader: write_local
//!                              │ UNAVAILABLE + leader hint (leadership moved)
//!                              └──► retry at the hinted leader until the forward deadline
//! ```

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use fleet::{Command, Outcome};
use openraft::error::{ClientWriteError, RaftError};
use proto::raft_client::RaftClient;
use proto::{ApiError, ErrorKind, ProposeRequest};
use tonic::transport::Channel;

use crate::codec;
use crate::error::WriteError;
use crate::network::client::{NetworkConfig, lazy_channel};
use crate::types::{NodeId, Peer, Proposal, Raft};

/// Pause between attempts while a forwarded write waits for a leader.
const FORWARD_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// The most an API write puts into one log entry, encoded ([`split_by_size`]). An entry is
/// held whole in the log's tail, decoded again to be sent, encoded once per follower and
/// retry, and cannot be split across append-entries requests; an apply of 500 clusters with
/// their kubeconfigs was one entry of several megabytes, which made the leader's heap peak
/// during a bulk load (38 MiB of requests being encoded, heaptrack, 2026-11-29).
pub const MAX_PROPOSAL_BYTES: usize = 256 * 1024;

/// The size of `command` as a log entry encodes it (serde_json, see [`crate::codec`]).
pub fn encoded_size(command: &Command) -> usize {
    // A command that cannot be encoded counts as empty; the proposal itself then reports it.
    fleet::validate::json_size(command)
}

/// Splits `commands`, in order, into runs of at most `max_bytes` encoded; a command larger than
/// that is a run of its own. Never returns an empty run.
pub fn split_by_size(commands: Vec<Command>, max_bytes: usize) -> Vec<Vec<Command>> {
    let mut parts: Vec<Vec<Command>> = Vec::new();
    let mut current: Vec<Command> = Vec::new();
    let mut bytes = 0;
    for command in commands {
        let size = encoded_size(&command);
        if !current.is_empty() && bytes + size > max_bytes {
            parts.push(std::mem::take(&mut current));
            bytes = 0;
        }
        bytes += size;
        current.push(command);
    }
    if !current.is_empty() {
        parts.push(current);
    }
    parts
}

/// A write in parts that failed part-way: the parts before the failure are committed.
#[derive(Debug)]
pub struct PartialWrite {
    pub error: WriteError,
    /// The commands committed before the failure (the first ones, in order).
    pub committed: usize,
    /// All the commands of the write.
    pub total: usize,
}

impl std::fmt::Display for PartialWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.committed == 0 {
            write!(f, "{}", self.error)
        } else {
            write!(
                f,
                "{} (the first {} of {} objects were committed before it; applying again is safe)",
                self.error, self.committed, self.total
            )
        }
    }
}

/// What a committed proposal produced.
#[derive(Clone, Debug)]
pub struct Committed {
    /// Log index of the entry holding the commands (also the state revision it created).
    pub log_index: u64,
    /// One outcome per command, in order.
    pub outcomes: Vec<Outcome>,
}

/// Commits `commands` as one log entry through the local openraft instance.
pub(crate) async fn write_local(
    raft: &Raft,
    commands: Vec<Command>,
) -> Result<Committed, WriteError> {
    if commands.is_empty() {
        return Err(WriteError::Empty);
    }
    let count = commands.len();
    match raft.client_write(Proposal { commands }).await {
        Ok(response) => {
            if response.data.outcomes.len() != count {
                return Err(WriteError::InvalidReply(format!(
                    "{} outcomes for {count} commands",
                    response.data.outcomes.len()
                )));
            }
            Ok(Committed {
                log_index: response.log_id.index,
                outcomes: response.data.outcomes,
            })
        }
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward))) => Err(
            WriteError::not_leader(forward.leader_id, forward.leader_node.as_ref()),
        ),
        Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(error))) => {
            Err(WriteError::InvalidReply(error.to_string()))
        }
        Err(RaftError::Fatal(fatal)) => Err(WriteError::Fatal(fatal.to_string())),
    }
}

/// Commits proposals from any replica: locally when leading, through the leader otherwise.
pub(crate) struct Proposer {
    pub id: NodeId,
    pub raft: Raft,
    pub forwarder: Forwarder,
    pub forward_timeout: Duration,
}

impl Proposer {
    /// The current leader and its address, when known.
    pub fn current_leader(&self) -> Option<(NodeId, Peer)> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        let leader = metrics.current_leader?;
        let peer = metrics
            .membership_config
            .membership()
            .get_node(&leader)
            .cloned()?;
        Some((leader, peer))
    }

    fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().current_leader == Some(self.id)
    }

    async fn wait_for_leader(&self, timeout: Duration) {
        let mut metrics = self.raft.metrics();
        let _ =
            tokio::time::timeout(timeout, metrics.wait_for(|m| m.current_leader.is_some())).await;
    }

    /// Commits `commands` as one log entry, following leadership changes until
    /// `forward_timeout` has passed.
    pub async fn propose_many(&self, commands: Vec<Command>) -> Result<Committed, WriteError> {
        if commands.is_empty() {
            return Err(WriteError::Empty);
        }
        if self.is_leader() {
            return write_local(&self.raft, commands).await;
        }
        let encoded = commands
            .iter()
            .map(|command| codec::encode("command", command))
            .collect::<Result<Vec<_>, _>>()?;
        drop(commands);
        let deadline = tokio::time::Instant::now() + self.forward_timeout;
        let mut hinted: Option<String> = None;
        loop {
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            if remaining.is_zero() {
                return Err(WriteError::Unavailable(format!(
                    "no leader accepted the write within {:?}",
                    self.forward_timeout
                )));
            }
            let target = match (self.current_leader(), hinted.take()) {
                (Some((leader, _)), _) if leader == self.id => {
                    // Leadership came here while we were forwarding.
                    let commands = encoded
                        .iter()
                        .map(|bytes| codec::decode::<Command>("command", bytes))
                        .collect::<Result<Vec<_>, _>>()?;
                    return write_local(&self.raft, commands).await;
                }
                (_, Some(addr)) => Some(addr),
                (Some((_, peer)), None) => Some(peer.addr),
                (None, None) => None,
            };
            let Some(addr) = target else {
                self.wait_for_leader(remaining.min(FORWARD_RETRY_PAUSE * 4))
                    .await;
                continue;
            };
            match self
                .forwarder
                .forward(&addr, encoded.clone(), remaining)
                .await
            {
                Ok(committed) => return Ok(committed),
                Err(WriteError::NotLeader {
                    leader_addr: Some(next),
                    ..
                }) if next != addr => {
                    tracing::debug!(from = %addr, to = %next, "leader moved while forwarding");
                    hinted = Some(next);
                }
                Err(WriteError::NotLeader { .. } | WriteError::Unavailable(_)) => {
                    tokio::time::sleep(FORWARD_RETRY_PAUSE.min(remaining)).await;
                }
                Err(error) => return Err(error),
            }
        }
    }
}

/// Sends proposals to the leader over `Propose`, keeping one channel per leader address.
pub struct Forwarder {
    config: NetworkConfig,
    clients: Mutex<HashMap<String, RaftClient<Channel>>>,
}

impl Forwarder {
    pub fn new(config: NetworkConfig) -> Forwarder {
        Forwarder {
            config,
            clients: Mutex::new(HashMap::new()),
        }
    }

    fn client(&self, addr: &str) -> Result<RaftClient<Channel>, WriteError> {
        let mut clients = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(client) = clients.get(addr) {
            return Ok(client.clone());
        }
        let channel = lazy_channel(addr, &self.config).map_err(|error| {
            WriteError::Unavailable(format!("invalid leader address {addr}: {error}"))
        })?;
        let client = RaftClient::new(channel)
            .max_decoding_message_size(self.config.max_message_bytes)
            .max_encoding_message_size(self.config.max_message_bytes);
        clients.insert(addr.to_owned(), client.clone());
        Ok(client)
    }

    fn forget(&self, addr: &str) {
        self.clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(addr);
    }

    /// Sends already encoded commands to the replica at `addr`, which must be the leader.
    pub async fn forward(
        &self,
        addr: &str,
        commands: Vec<Vec<u8>>,
        timeout: Duration,
    ) -> Result<Committed, WriteError> {
        let count = commands.len();
        let mut client = self.client(addr)?;
        let mut request = tonic::Request::new(ProposeRequest { commands });
        request.set_timeout(timeout);
        let reply = match tokio::time::timeout(timeout, client.propose(request)).await {
            Ok(Ok(reply)) => reply.into_inner(),
            Ok(Err(status)) => {
                if matches!(
                    status.code(),
                    tonic::Code::Unavailable | tonic::Code::Unknown
                ) {
                    self.forget(addr);
                }
                return Err(write_error_from_status(addr, &status));
            }
            Err(_) => {
                self.forget(addr);
                return Err(WriteError::Unavailable(format!(
                    "leader at {addr} did not answer within {timeout:?}"
                )));
            }
        };
        if reply.outcomes.len() != count {
            return Err(WriteError::InvalidReply(format!(
                "leader at {addr} returned {} outcomes for {count} commands",
                reply.outcomes.len()
            )));
        }
        let outcomes = reply
            .outcomes
            .iter()
            .map(|bytes| codec::decode::<Outcome>("outcome", bytes))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| WriteError::InvalidReply(error.to_string()))?;
        Ok(Committed {
            log_index: reply.log_index,
            outcomes,
        })
    }
}

/// Turns the leader's refusal back into the error the caller would have got locally.
fn write_error_from_status(addr: &str, status: &tonic::Status) -> WriteError {
    let error = ApiError::from_status(status);
    match error.kind {
        ErrorKind::Unavailable => match error.leader {
            Some(leader) => WriteError::NotLeader {
                leader_id: Some(leader.id),
                leader_addr: leader.addr,
            },
            None => WriteError::Unavailable(format!("{addr}: {}", error.message)),
        },
        ErrorKind::InvalidArgument => WriteError::Rejected(error.message),
        _ => WriteError::Unavailable(format!("{addr}: {}", error.describe())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redirect_from_the_remote_becomes_not_leader_with_its_hint() {
        let remote = WriteError::not_leader(Some(3), Some(&crate::types::Peer::new("127.0.0.1:9")));
        let status = proto::status_from(&remote);
        match write_error_from_status("127.0.0.1:8", &status) {
            WriteError::NotLeader {
                leader_id,
                leader_addr,
            } => {
                assert_eq!(leader_id, Some(3));
                assert_eq!(leader_addr.as_deref(), Some("127.0.0.1:9"));
            }
            other => panic!("expected NotLeader, got {other:?}"),
        }
    }

    #[test]
    fn a_transport_failure_is_unavailable() {
        let status = tonic::Status::unavailable("tcp connect error");
        assert!(matches!(
            write_error_from_status("127.0.0.1:8", &status),
            WriteError::Unavailable(_)
        ));
    }
}

//! Heartbeats and the node lease. Every `heartbeat_interval` a replica sends a heartbeat to
//! the leader and notes when it *sent* it; an acknowledgement from that leader extends the
//! lease from that send time. The leader confirms its own leadership with a quorum instead
//! (a leader cut off from the majority stops acknowledging anyone, itself included).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use tonic::transport::Channel;

use super::{Replica, lock};

pub async fn run(replica: Arc<Replica>) {
    let interval = replica.config.heartbeat_interval;
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut channel: Option<(String, Channel)> = None;
    loop {
        ticker.tick().await;
        let sent_at = Instant::now();
        let Some((leader, peer)) = replica.raft.current_leader() else {
            continue;
        };
        if leader == replica.id() {
            // Bounded: a leader that cannot reach a quorum within the interval keeps no lease.
            let confirmed =
                tokio::time::timeout(interval * 2, replica.raft.ensure_linearizable()).await;
            let revoked_applied = replica
                .raft
                .reader()
                .read(|state| state.revision >= state.revocations_pending_for(replica.id()));
            if matches!(confirmed, Ok(Ok(_))) && revoked_applied {
                replica.lease.acknowledged(sent_at);
                replica.heard(replica.id());
            }
            continue;
        }
        if channel
            .as_ref()
            .is_none_or(|(address, _)| *address != peer.addr)
        {
            // Over the Raft network's connector: TCP, or the simulation's network.
            channel = starling_raft::lazy_channel(&peer.addr, &replica.raft.config().network)
                .ok()
                .map(|c| (peer.addr.clone(), c));
        }
        let Some((_, current)) = &channel else {
            continue;
        };
        let mut client = proto::node_client::NodeClient::new(current.clone());
        let (applied_index, state_revision) = replica
            .raft
            .reader()
            .read_indexed(|index, state| (index, state.revision));
        let request = proto::HeartbeatRequest {
            node_id: replica.id(),
            sent_at_nanos: replica.started.elapsed().as_nanos() as u64,
            applied_index,
            syncs_in_flight: replica.metrics.syncs_in_flight() as u32,
            state_revision,
            running_syncs: lock(&replica.running_syncs).iter().cloned().collect(),
        };
        match tokio::time::timeout(interval * 2, client.heartbeat(request)).await {
            Ok(Ok(ack)) if ack.get_ref().leader_id == leader => {
                match ack.get_ref().leader_lease_remaining_micros {
                    Some(micros) => replica
                        .lease
                        .acknowledged_within(sent_at, Duration::from_micros(micros)),
                    None => replica.lease.acknowledged(sent_at),
                }
                replica
                    .leader_commit
                    .store(ack.get_ref().commit_index, Ordering::Relaxed);
            }
            Ok(Ok(_)) => tracing::debug!(leader, "heartbeat acknowledged by another leader"),
            Ok(Err(status)) => {
                tracing::debug!(leader, error = %status.message(), "heartbeat refused")
            }
            Err(_) => tracing::debug!(leader, "heartbeat timed out"),
        }
        if !replica.lease.is_valid() && replica.lease.remaining() == Duration::ZERO {
            replica.metrics.lease_lapsed();
        }
    }
}

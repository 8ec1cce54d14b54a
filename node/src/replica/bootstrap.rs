//! Getting into the group. A replica with Raft state on disk is already a member and only
//! re-announces itself. A fresh replica joins through any peer (`Admin.AddNode`, forwarded to
//! the leader). The replica with the lowest id among `--peers` initialises the group, but
//! only after asking the other peers whether a group already exists, so a wiped lowest
//! replica joins instead of starting a second group.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use starling_raft::Peer;

use super::Replica;
use crate::client_channel;

/// Pause between join attempts.
const RETRY: Duration = Duration::from_millis(500);
/// Time limit of one probe or join request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

pub async fn run(replica: Arc<Replica>) {
    let admin = &replica.raft;
    match admin.is_initialized().await {
        Ok(true) => {
            tracing::info!(
                node = replica.id(),
                "raft state found on disk; rejoining as a member"
            );
            return;
        }
        Ok(false) => {}
        Err(error) => {
            tracing::warn!(%error, "cannot tell whether raft is initialised; trying to join")
        }
    }
    let lowest = replica.config.peers.keys().next().copied();
    if lowest == Some(replica.id()) && !any_peer_has_a_leader(&replica).await {
        let members = BTreeMap::from([(replica.id(), Peer::new(replica.config.advertise.clone()))]);
        match admin.initialize(members).await {
            Ok(()) => {
                tracing::info!(node = replica.id(), "initialised a new group");
                return;
            }
            Err(error) => tracing::warn!(%error, "initialisation failed; joining instead"),
        }
    }
    join(&replica).await;
}

async fn any_peer_has_a_leader(replica: &Replica) -> bool {
    for (id, address) in &replica.config.peers {
        if *id == replica.id() {
            continue;
        }
        let Ok(channel) = client_channel(address, REQUEST_TIMEOUT) else {
            continue;
        };
        let mut client = proto::admin_client::AdminClient::new(channel);
        if let Ok(reply) = client.members(proto::MembersRequest {}).await
            && reply.get_ref().leader_id != 0
        {
            return true;
        }
    }
    false
}

/// Asks the peers, in turn, to add this replica, until one succeeds.
async fn join(replica: &Replica) {
    let request = proto::AddNodeRequest {
        id: replica.id(),
        address: replica.config.advertise.clone(),
        voter: true,
    };
    loop {
        if replica.raft.membership().get_node(&replica.id()).is_some() {
            tracing::info!(node = replica.id(), "joined the group");
            return;
        }
        for (id, address) in &replica.config.peers {
            if *id == replica.id() {
                continue;
            }
            let Ok(channel) = client_channel(address, Duration::from_secs(60)) else {
                continue;
            };
            let mut client = proto::admin_client::AdminClient::new(channel);
            match client.add_node(request.clone()).await {
                Ok(_) => {
                    tracing::info!(node = replica.id(), via = %address, "joined the group");
                    return;
                }
                Err(status) => {
                    tracing::debug!(via = %address, error = %status.message(), "join attempt failed")
                }
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}

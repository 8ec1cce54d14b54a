//! Whether an owner that agents could not reach answers this replica.
//!
//! An agent that failed to reach its cluster's owner asks another replica, which holds the
//! answer until the cluster moves ([`super::agent`]). The owner may come back before that: a
//! process restarted in a second, a partition healed. Then the cluster never moves, and the
//! hold must end as soon as the owner answers again. One probe task per owner's address asks
//! it, every [`PROBE_INTERVAL`], while any held attach waits on it; thousands of held attaches
//! share it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::node::{Replica, lock};

/// The pause between two probes of one owner.
const PROBE_INTERVAL: Duration = Duration::from_millis(250);
/// How long a probe waits for the owner's answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// A well-formed digest no artifact has: the probe asks whether the owner has it.
const PROBE_DIGEST: &str =
    "sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// The probes running now, by owner's address: each sends when a probe that started at that
/// instant got an answer.
#[derive(Default)]
pub(crate) struct OwnerProbes {
    running: Arc<Mutex<HashMap<String, watch::Sender<Option<Instant>>>>>,
}

impl OwnerProbes {
    /// Tells when the owner at `address` last answered a probe (the instant that probe
    /// started), probing it while the receiver is kept. The addresses are the members'
    /// (the caller takes them from the state), so the map stays as small as the group.
    pub(crate) fn watch(
        &self,
        replica: &Arc<Replica>,
        address: &str,
    ) -> watch::Receiver<Option<Instant>> {
        let mut running = lock(&self.running);
        if let Some(sender) = running.get(address) {
            return sender.subscribe();
        }
        let (sender, receiver) = watch::channel(None);
        running.insert(address.to_owned(), sender.clone());
        let probes = self.running.clone();
        let replica = replica.clone();
        let address = address.to_owned();
        tokio::spawn(async move {
            loop {
                let started = Instant::now();
                if answers(&replica, &address).await {
                    sender.send_replace(Some(started));
                }
                {
                    // Under the map's lock: `watch` subscribes under it too.
                    let mut running = lock(&probes);
                    if sender.receiver_count() == 0 || replica.stopping.is_cancelled() {
                        running.remove(&address);
                        return;
                    }
                }
                tokio::select! {
                    () = tokio::time::sleep(PROBE_INTERVAL) => {}
                    () = replica.stopping.cancelled() => {}
                }
            }
        });
        receiver
    }
}

/// Whether the replica at `address` answers a cheap call within [`PROBE_TIMEOUT`].
async fn answers(replica: &Replica, address: &str) -> bool {
    let Ok(channel) = replica.peer_channel(address, PROBE_TIMEOUT) else {
        return false;
    };
    let mut client = proto::artifacts_client::ArtifactsClient::new(channel);
    let call = client.has(proto::HasRequest {
        digest: PROBE_DIGEST.to_owned(),
    });
    matches!(tokio::time::timeout(PROBE_TIMEOUT, call).await, Ok(Ok(_)))
}

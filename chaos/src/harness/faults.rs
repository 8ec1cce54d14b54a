//! Faults the tests and benchmarks set up outside Starling: targets that refuse every write,
//! and a notification receiver that never answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Every request to each of `clusters` answers 403 Forbidden, as an API server whose RBAC
/// refuses Starling does.
pub fn refuse_writes(sim: &fleetsim::FleetSim, clusters: &[String]) {
    for name in clusters {
        sim.set_fault(
            name,
            fleetsim::Fault::Errors {
                rate: 1.0,
                code: 403,
                retry_after_seconds: None,
            },
        )
        .expect("fault");
    }
}

/// A loopback receiver that accepts connections and never answers, holding each one open.
pub struct HangingReceiver {
    /// `127.0.0.1:PORT`.
    pub address: std::net::SocketAddr,
    accepted: Arc<AtomicUsize>,
}

impl HangingReceiver {
    pub async fn start() -> std::io::Result<HangingReceiver> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::Relaxed);
                held.push(socket);
            }
        });
        Ok(HangingReceiver { address, accepted })
    }

    /// The connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::Relaxed)
    }
}

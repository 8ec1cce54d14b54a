//! The state fleetsim's server, controller and admin API share ([`Shared`]): the clusters,
//! the audit log, the controller's queue and the counters. A leaf module (its methods for the
//! admin API and the handle are in [`crate::sim`]), so that everything that holds it imports
//! it from here and not from the handle that starts the server.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use tokio::sync::watch;

use crate::audit::AuditLog;
use crate::cluster::Registry;
use crate::config::Config;
use crate::jobs::Controller;

/// State shared by the server, the controller and the handle.
#[derive(Debug)]
pub(crate) struct Shared {
    pub config: Config,
    pub registry: Registry,
    pub audit: AuditLog,
    pub controller: Controller,
    pub base_url: String,
    /// The run's CA and TLS acceptor when serving HTTPS.
    pub tls: Option<Arc<crate::tls::ServerTls>>,
    /// host:port, for `serverAddressByClientCIDRs`.
    pub server_address: String,
    pub shutdown: watch::Receiver<bool>,
    pub connections_open: AtomicU64,
    pub connections_total: AtomicU64,
    pub tls_full_handshakes: AtomicU64,
    pub tls_resumed_handshakes: AtomicU64,
    pub lists_total: AtomicU64,
    pub watches_total: AtomicU64,
}

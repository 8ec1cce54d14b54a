//! How Starling's programs reach each other: the byte streams a gRPC channel runs over
//! ([`Connector`], plain TCP or [`tls::Tls`]), lazily connecting channels ([`channel_via`]),
//! TLS identities reloaded from their files ([`tls`]), and the bearer token a request carries
//! ([`with_bearer`]). The replica, the CLI, the agent and Raft's network all dial through
//! here, so they agree on time-outs, ALPN and certificates.
//!
//! ```text
//!  caller ─► channel_via(address, timeout, connector) ─► tonic Channel (connects on first use)
//!               └─ connector: None → TCP │ Some(Tls::connector()) → TCP + rustls (h2 by ALPN)
//!  server ─► tls::incoming(listener, tls) ─► Conn{verified_client} ─► tls::PeersOnly
//! ```
//!
//! It knows nothing of the fleet: no state, no resources, no tokens' meaning.

#![warn(unreachable_pub)]

pub mod tls;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// How long a channel waits for its connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A byte stream to a peer, as a [`Connector`] opens it.
pub trait PeerIo: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> PeerIo for T {}

/// What a [`Connector`] returns: the opened stream.
pub type ConnectFuture =
    Pin<Box<dyn Future<Output = std::io::Result<Box<dyn PeerIo>>> + Send + 'static>>;

/// Opens connections by `host:port` instead of plain TCP: TLS ([`tls::Tls::connector`]), or
/// the deterministic simulation's network.
#[derive(Clone)]
pub struct Connector(Arc<dyn Fn(String) -> ConnectFuture + Send + Sync>);

impl Connector {
    pub fn new(connect: impl Fn(String) -> ConnectFuture + Send + Sync + 'static) -> Connector {
        Connector(Arc::new(connect))
    }

    /// Opens a stream to `authority` (`host:port`).
    pub fn open(&self, authority: String) -> ConnectFuture {
        (self.0)(authority)
    }
}

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Connector(..)")
    }
}

/// The tower service tonic dials through: `connector` opens the stream to the URI's authority.
pub fn dial(
    connector: &Connector,
) -> impl tower::Service<
    http::Uri,
    Response = hyper_util::rt::TokioIo<Box<dyn PeerIo>>,
    Error = std::io::Error,
    Future = impl Future<Output = std::io::Result<hyper_util::rt::TokioIo<Box<dyn PeerIo>>>> + Send,
> + Clone
+ Send
+ 'static {
    let connector = connector.clone();
    tower::service_fn(move |uri: http::Uri| {
        let authority = uri.authority().map(|a| a.to_string()).unwrap_or_default();
        let opening = connector.open(authority);
        async move { opening.await.map(hyper_util::rt::TokioIo::new) }
    })
}

/// Peer addresses dialled through another address (`starling node --peer-route`), set once
/// at start.
static PEER_ROUTES: std::sync::OnceLock<std::collections::BTreeMap<String, String>> =
    std::sync::OnceLock::new();

/// Makes this process dial each `ADDRESS` of `routes` (`ADDRESS=VIA`) at `VIA` instead: a
/// latency proxy between regions in a benchmark (`loadtest regions`). Call it once, before any
/// channel is made; a second call fails.
pub fn set_peer_routes(routes: &[String]) -> Result<(), String> {
    let mut map = std::collections::BTreeMap::new();
    for route in routes {
        let (address, via) = route
            .split_once('=')
            .filter(|(address, via)| !address.is_empty() && !via.is_empty())
            .ok_or_else(|| format!("--peer-route {route:?}: expected ADDRESS=VIA"))?;
        map.insert(address.to_owned(), via.to_owned());
    }
    PEER_ROUTES
        .set(map)
        .map_err(|_| "the peer routes are already set".to_owned())
}

/// The address to dial for `address`: its route when one is set, else itself.
pub fn route(address: &str) -> &str {
    PEER_ROUTES
        .get()
        .and_then(|routes| routes.get(address))
        .map_or(address, String::as_str)
}

/// A plain-text gRPC channel to `host:port` that connects on first use, with a per-request
/// timeout.
pub fn client_channel(
    address: &str,
    timeout: Duration,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    channel_via(address, timeout, None)
}

/// A gRPC channel to `host:port` that connects on first use through `connector` (TLS, see
/// [`tls::Tls::connector`]), or plain TCP when `None`.
pub fn channel_via(
    address: &str,
    timeout: Duration,
    connector: Option<&Connector>,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{}", route(address)))?
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(timeout);
    Ok(match connector {
        None => endpoint.connect_lazy(),
        Some(connector) => endpoint.connect_with_connector_lazy(dial(connector)),
    })
}

/// Adds `authorization: Bearer <token>` to a request (nothing when `token` is `None`).
pub fn with_bearer<T>(mut request: tonic::Request<T>, token: Option<&str>) -> tonic::Request<T> {
    if let Some(value) = token.and_then(|t| format!("Bearer {t}").parse().ok()) {
        request.metadata_mut().insert("authorization", value);
    }
    request
}

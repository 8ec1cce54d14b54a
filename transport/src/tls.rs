//! TLS for the gRPC port and the HTTP port (rustls), with certificates read from files and
//! reloaded when they change on disk (cert-manager rewrites a mounted Secret in place). The HTTP
//! port ([`incoming_http`]) uses the same certificate and also offers HTTP/1.1.
//!
//! One port serves everyone. The server asks every client for a certificate but does not
//! insist: replicas present theirs (mutual TLS), the CLI and agents come without one and
//! authenticate with a token. A presented certificate must chain to the installation's CA, or
//! the handshake fails. The replicas' own services (Raft, Node, Artifacts) then refuse any
//! call on a connection without a verified client certificate ([`PeersOnly`]).
//!
//! ```text
//! accept ─► handshake (bounded, 10 s) ─► Conn{verified_client} ─► tonic
//!                                                     └─► PeersOnly on Raft/Node/Artifacts
//! files ─► Tls::reload every 2 s (content changed?) ─► new ServerConfig / ClientConfig
//!                                                     (new connections use it)
//! ```

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_stream::wrappers::ReceiverStream;

/// How often the files are read again to notice a rotation.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(2);
/// A TLS handshake that takes longer is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes under way at once; further connections wait in the kernel's backlog.
const MAX_HANDSHAKES: usize = 256;
/// Accepted connections waiting for the server to take them.
const ACCEPTED_QUEUE: usize = 64;

/// The files of a replica's or a client's TLS identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CA bundle (PEM) that peer certificates must chain to.
    pub ca: PathBuf,
    /// This side's certificate chain and key (PEM). A client without them connects without a
    /// client certificate (CLI, agents); a server needs them.
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// The files' bytes: the CA bundle, and the certificate and key when there is an identity.
type Contents = (Vec<u8>, Option<(Vec<u8>, Vec<u8>)>);

/// The loaded configurations, swapped whole on reload.
struct Loaded {
    /// `None` without an identity (a client only).
    server: Option<Arc<ServerConfig>>,
    client: Arc<ClientConfig>,
    /// A hash of the files' bytes, to notice a change.
    fingerprint: u64,
}

/// A TLS identity and trust, reloaded from its files ([`Tls::watch`]).
pub struct Tls {
    files: TlsFiles,
    loaded: RwLock<Loaded>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("files", &self.files).finish()
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// What can go wrong with a TLS identity: every variant names its file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the TLS {what} {}: {source}", .path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("{} is not a PEM certificate file", .0.display())]
    NotCertificates(PathBuf),
    #[error("{} holds no certificate", .0.display())]
    NoCertificate(PathBuf),
    #[error("{}: an unusable CA certificate: {source}", .path.display())]
    UnusableCa {
        path: PathBuf,
        source: rustls::Error,
    },
    #[error("{} is not a PEM private key", .0.display())]
    NotKey(PathBuf),
    #[error("{} does not match {}: {source}", .key.display(), .cert.display())]
    KeyMismatch {
        key: PathBuf,
        cert: PathBuf,
        source: rustls::Error,
    },
    #[error("cannot build the TLS configuration: {0}")]
    Config(String),
}

impl TlsError {
    /// A short label per variant, for metrics and log fields.
    pub fn class(&self) -> &'static str {
        match self {
            TlsError::Read { .. } => "read",
            TlsError::NotCertificates(_) | TlsError::NoCertificate(_) => "certificate",
            TlsError::UnusableCa { .. } => "ca",
            TlsError::NotKey(_) | TlsError::KeyMismatch { .. } => "key",
            TlsError::Config(_) => "config",
        }
    }
}

fn read(path: &Path, what: &'static str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

fn certificates(pem: &[u8], path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| TlsError::NotCertificates(path.to_owned()))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(path.to_owned()));
    }
    Ok(certs)
}

impl Tls {
    /// Reads the files; every problem is named with its file.
    pub fn load(files: TlsFiles) -> Result<Arc<Tls>, TlsError> {
        let loaded = Self::build(&files)?;
        Ok(Arc::new(Tls {
            files,
            loaded: RwLock::new(loaded),
        }))
    }

    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    fn contents(files: &TlsFiles) -> Result<Contents, TlsError> {
        let ca = read(&files.ca, "CA bundle")?;
        let identity = match &files.identity {
            None => None,
            Some((cert, key)) => Some((read(cert, "certificate")?, read(key, "key")?)),
        };
        Ok((ca, identity))
    }

    fn fingerprint(ca: &[u8], identity: &Option<(Vec<u8>, Vec<u8>)>) -> u64 {
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        hasher.update(ca);
        if let Some((cert, key)) = identity {
            hasher.update(cert);
            hasher.update(key);
        }
        hasher.digest()
    }

    fn build(files: &TlsFiles) -> Result<Loaded, TlsError> {
        let (ca, identity) = Self::contents(files)?;
        let fingerprint = Self::fingerprint(&ca, &identity);
        let mut roots = RootCertStore::empty();
        for cert in certificates(&ca, &files.ca)? {
            roots.add(cert).map_err(|source| TlsError::UnusableCa {
                path: files.ca.clone(),
                source,
            })?;
        }
        let roots = Arc::new(roots);
        let client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|error| TlsError::Config(error.to_string()))?
            .with_root_certificates(roots.clone());
        let (client, server) = match (&files.identity, identity) {
            (Some((cert_path, key_path)), Some((cert, key))) => {
                let chain = certificates(&cert, cert_path)?;
                let key = PrivateKeyDer::from_pem_slice(&key)
                    .map_err(|_| TlsError::NotKey(key_path.clone()))?;
                let mismatch = |source| TlsError::KeyMismatch {
                    key: key_path.clone(),
                    cert: cert_path.clone(),
                    source,
                };
                let client = client
                    .with_client_auth_cert(chain.clone(), key.clone_key())
                    .map_err(mismatch)?;
                let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider())
                    .allow_unauthenticated()
                    .build()
                    .map_err(|error| {
                        TlsError::Config(format!("the client certificate verifier: {error}"))
                    })?;
                let mut server = ServerConfig::builder_with_provider(provider())
                    .with_safe_default_protocol_versions()
                    .map_err(|error| TlsError::Config(error.to_string()))?
                    .with_client_cert_verifier(verifier)
                    .with_single_cert(chain, key)
                    .map_err(mismatch)?;
                server.alpn_protocols = vec![b"h2".to_vec()];
                (client, Some(Arc::new(server)))
            }
            _ => (client.with_no_client_auth(), None),
        };
        let mut client = client;
        client.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Loaded {
            server,
            client: Arc::new(client),
            fingerprint,
        })
    }

    /// Reads the files again and swaps the configuration when they changed. `Ok(false)`: no
    /// change. On error the previous configuration stays in use.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let (ca, identity) = Self::contents(&self.files)?;
        let fingerprint = Self::fingerprint(&ca, &identity);
        if fingerprint == self.read_loaded(|loaded| loaded.fingerprint) {
            return Ok(false);
        }
        let loaded = Self::build(&self.files)?;
        *self.loaded.write().unwrap_or_else(|e| e.into_inner()) = loaded;
        Ok(true)
    }

    fn read_loaded<T>(&self, f: impl FnOnce(&Loaded) -> T) -> T {
        f(&self.loaded.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Reloads every [`RELOAD_INTERVAL`] until the task is aborted.
    pub async fn watch(self: Arc<Self>) {
        let mut failing = false;
        loop {
            tokio::time::sleep(RELOAD_INTERVAL).await;
            match self.reload() {
                Ok(true) => {
                    failing = false;
                    tracing::info!(ca = %self.files.ca.display(), "TLS certificates reloaded");
                }
                Ok(false) => failing = false,
                // Logged once per failing spell: cert-manager may be half-way through a write.
                Err(error) if !failing => {
                    failing = true;
                    tracing::warn!(
                        error = format!("{error:#}"),
                        "TLS certificates not reloaded; the previous ones stay in use"
                    );
                }
                Err(_) => {}
            }
        }
    }

    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.read_loaded(|loaded| loaded.client.clone())
    }

    fn server_config(&self) -> Option<Arc<ServerConfig>> {
        self.read_loaded(|loaded| loaded.server.clone())
    }

    /// Opens TLS connections to `host:port` with the current client configuration, for
    /// Raft's network and every other gRPC client.
    pub fn connector(self: &Arc<Self>) -> crate::Connector {
        let tls = self.clone();
        crate::Connector::new(move |authority: String| {
            let config = tls.client_config();
            Box::pin(async move {
                let stream = connect(config, &authority).await?;
                Ok(Box::new(stream) as Box<dyn crate::PeerIo>)
            })
        })
    }
}

/// A TLS connection to `authority` (`host:port`); the certificate must name `host`.
async fn connect(
    config: Arc<ClientConfig>,
    authority: &str,
) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']');
    let name = ServerName::try_from(host.to_string()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{host:?} is not a host name"),
        )
    })?;
    let tcp = TcpStream::connect(authority).await?;
    tcp.set_nodelay(true)?;
    tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
}

/// What the server knows of a connection, in every request's extensions.
#[derive(Debug, Clone)]
pub struct PeerInfo {
    pub remote: Option<SocketAddr>,
    /// The client presented a certificate that chains to the installation's CA.
    pub verified_client: bool,
}

/// An accepted connection: plain (`--insecure`) or TLS.
pub enum Conn {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = PeerInfo;

    fn connect_info(&self) -> PeerInfo {
        match self {
            Conn::Plain(stream) => PeerInfo {
                remote: stream.peer_addr().ok(),
                verified_client: false,
            },
            Conn::Tls(stream) => {
                let (tcp, session) = stream.get_ref();
                PeerInfo {
                    remote: tcp.peer_addr().ok(),
                    verified_client: session.peer_certificates().is_some_and(|c| !c.is_empty()),
                }
            }
        }
    }
}

macro_rules! delegate {
    ($self:ident, $stream:ident => $call:expr) => {
        match $self.get_mut() {
            Conn::Plain($stream) => $call,
            Conn::Tls($stream) => $call,
        }
    };
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, s => Pin::new(s).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, s => Pin::new(s).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(s) => s.is_write_vectored(),
            Conn::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_shutdown(cx))
    }
}

/// The connections `listener` accepts, after their TLS handshake when `tls` is set. The
/// listener closes when the stream is dropped (the server stopped).
pub fn incoming(listener: TcpListener, tls: Option<Arc<Tls>>) -> ReceiverStream<io::Result<Conn>> {
    accept(listener, tls, |config| config)
}

/// [`incoming`] for the HTTP port (probes, `/metrics`, `/ui`, webhooks): the same
/// certificate, offering HTTP/1.1 beside HTTP/2 (kubelet's probes, Prometheus and browsers
/// speak HTTP/1.1). A client certificate is asked for but not required.
pub fn incoming_http(
    listener: TcpListener,
    tls: Option<Arc<Tls>>,
) -> ReceiverStream<io::Result<Conn>> {
    accept(listener, tls, |config| {
        let mut config = (*config).clone();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Arc::new(config)
    })
}

fn accept(
    listener: TcpListener,
    tls: Option<Arc<Tls>>,
    configure: fn(Arc<ServerConfig>) -> Arc<ServerConfig>,
) -> ReceiverStream<io::Result<Conn>> {
    let (sender, receiver) = mpsc::channel(ACCEPTED_QUEUE);
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = sender.closed() => return,
                accepted = listener.accept() => accepted,
            };
            let (tcp, remote) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors, or a connection reset before it was taken.
                    tracing::debug!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let Some(tls) = &tls else {
                if sender.send(Ok(Conn::Plain(tcp))).await.is_err() {
                    return;
                }
                continue;
            };
            let Some(config) = tls.server_config() else {
                return;
            };
            let Ok(permit) = handshakes.clone().acquire_owned().await else {
                return;
            };
            let sender = sender.clone();
            tokio::spawn(async move {
                let acceptor = tokio_rustls::TlsAcceptor::from(configure(config));
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        drop(permit);
                        let _ = sender.send(Ok(Conn::Tls(Box::new(stream)))).await;
                    }
                    Ok(Err(error)) => {
                        tracing::info!(%remote, %error, "TLS handshake refused");
                    }
                    Err(_) => tracing::info!(%remote, "TLS handshake timed out"),
                }
            });
        }
    });
    ReceiverStream::new(receiver)
}

/// Refuses calls to the replicas' own services (Raft, Node, Artifacts) on connections without
/// a verified client certificate, when TLS is on.
#[derive(Clone, Debug)]
pub struct PeersOnly {
    pub enforce: bool,
}

impl tonic::service::Interceptor for PeersOnly {
    fn call(&mut self, request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if !self.enforce
            || request
                .extensions()
                .get::<PeerInfo>()
                .is_some_and(|info| info.verified_client)
        {
            return Ok(request);
        }
        Err(proto::status_from(&proto::ApiError::unauthenticated(
            "this service is for Starling replicas only: connect with a client certificate \
             signed by the installation's CA (--tls-cert, --tls-key)",
        )))
    }
}

//! Clients for target clusters: how a cluster is reached ([`ClusterTarget`]), how its kube
//! client is built (time-outs, the writer headers), and the bounded cache that keeps one client
//! per cluster ([`ClientCache`]).
//!
//! ```text
//! ClusterTarget { connection: Url | Kubeconfig | Secret data }
//!   --kubeconfig::config_from_kubeconfig (inline credentials only)--> kube::Config
//!   --connect/read/write time-outs, no kube retries, x-starling-writer/generation headers
//!   --> kube::Client, kept in ClientCache (LRU bound, idle eviction) with its DiscoveryCache
//! ```
//!
//! The writer identity and generation travel as default headers of the client, so a client
//! belongs to one (cluster, writer, generation): a new owner generation builds a new client
//! and the old one is dropped from the cache.

mod cache;
mod discovery;
mod kubeconfig;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fleet::vars::ClusterContext;
use http::{HeaderName, HeaderValue};

use crate::error::SyncError;

pub use cache::{CacheStats, ClientCache, ClusterClient};
pub use discovery::{DiscoveryCache, Resolved};
pub use kubeconfig::{
    DEFAULT_SECRET_KEY, config_from_kubeconfig, kubeconfig_from_secret, parse_kubeconfig,
    secret_name,
};
use starling_secret::{Redactor, SecretBytes, SecretString};

/// The header naming the node that writes.
pub const WRITER_HEADER: &str = "x-starling-writer";
/// The header carrying the writer's owner generation for the cluster.
pub const GENERATION_HEADER: &str = "x-starling-generation";

/// How to reach a cluster's API server. Credentials are secret types: printing a connection
/// shows `***` for them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Connection {
    /// A plain URL without credentials (fleetsim, `kubectl proxy`).
    Url(String),
    /// Kubeconfig text.
    Kubeconfig(SecretString),
    /// The data of a kubeconfig Secret and the key holding it (`value` when `None`).
    Secret {
        /// `namespace/name` of the Secret, for messages.
        name: String,
        data: BTreeMap<String, SecretBytes>,
        key: Option<String>,
    },
}

impl Connection {
    /// A redactor that knows every secret value of this connection.
    pub fn redactor(&self) -> Redactor {
        let mut redactor = Redactor::new();
        match self {
            Connection::Url(_) => {}
            Connection::Kubeconfig(text) => redactor.add_value(text.expose().as_bytes()),
            Connection::Secret { data, .. } => {
                for value in data.values() {
                    redactor.add_value(value.expose());
                }
            }
        }
        redactor
    }
}

/// A target cluster: its identity (for `${cluster.*}` variables and errors) and connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterTarget {
    /// The `Cluster` object's name.
    pub name: String,
    /// The `Cluster` object's namespace (in the management cluster).
    pub namespace: String,
    /// The `Cluster` object's labels.
    pub labels: BTreeMap<String, String>,
    pub connection: Connection,
}

impl ClusterTarget {
    /// A cluster reached at a URL, in namespace `default`, without labels.
    pub fn at_url(name: impl Into<String>, url: impl Into<String>) -> ClusterTarget {
        ClusterTarget {
            name: name.into(),
            namespace: "default".to_owned(),
            labels: BTreeMap::new(),
            connection: Connection::Url(url.into()),
        }
    }

    /// A redactor for messages about this target: every secret value of its connection,
    /// with the cluster's own names kept readable.
    pub fn redactor(&self) -> Redactor {
        let public = [self.name.clone(), self.namespace.clone()];
        let mut redactor =
            Redactor::new().keep(public.into_iter().chain(self.labels.values().cloned()));
        redactor.extend(&self.connection.redactor());
        redactor
    }

    /// What `${cluster.name}`, `${cluster.namespace}` and `${cluster.labels.KEY}` see
    /// (`${cluster.annotations.KEY}` comes with the sync request's render inputs).
    pub fn context(&self) -> ClusterContext {
        ClusterContext {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            labels: self.labels.clone(),
            annotations: Default::default(),
        }
    }
}

/// Time-outs and cache settings of cluster clients.
#[derive(Clone, Debug)]
pub struct ClientSettings {
    /// Limit on opening a connection.
    pub connect_timeout: Duration,
    /// Limit on each request (read and write time-outs of the connection, and a bound on
    /// each call).
    pub request_timeout: Duration,
    /// How long discovery answers are kept.
    pub discovery_ttl: Duration,
    /// Most clients kept; the least recently used goes first.
    pub max_clients: usize,
    /// A client unused for this long is dropped.
    pub idle_timeout: Duration,
    /// A connection idle for this long is closed. A sync's requests follow one another, so
    /// they share one connection; between syncs (minutes apart) a cluster holds none, which
    /// keeps a replica's thousands of clusters from each holding a socket and its buffers.
    pub connection_idle_timeout: Duration,
}

impl Default for ClientSettings {
    fn default() -> Self {
        ClientSettings {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(15),
            discovery_ttl: Duration::from_secs(300),
            max_clients: 4096,
            idle_timeout: Duration::from_secs(600),
            connection_idle_timeout: Duration::from_secs(10),
        }
    }
}

/// The client configuration of a target, with time-outs and writer headers set.
pub async fn client_config(
    target: &ClusterTarget,
    writer: &str,
    generation: u64,
    settings: &ClientSettings,
) -> Result<kube::Config, SyncError> {
    let invalid = |message: String| SyncError::Kubeconfig {
        cluster: target.name.clone(),
        message,
    };
    let mut config = match &target.connection {
        Connection::Url(url) => {
            let uri = url
                .parse::<http::Uri>()
                .map_err(|error| invalid(format!("invalid url {url:?}: {error}")))?;
            kube::Config::new(uri)
        }
        Connection::Kubeconfig(text) => {
            config_from_kubeconfig(&target.name, "the kubeconfig", text).await?
        }
        Connection::Secret { name, data, key } => {
            let text = kubeconfig_from_secret(&target.name, name, data, key.as_deref())?;
            let origin = format!(
                "secret {name} key {:?}",
                key.as_deref().unwrap_or(DEFAULT_SECRET_KEY)
            );
            config_from_kubeconfig(&target.name, &origin, &text).await?
        }
    };
    config.connect_timeout = Some(settings.connect_timeout);
    config.read_timeout = Some(settings.request_timeout);
    config.write_timeout = Some(settings.request_timeout);
    config.reset_reader_on_write = true;
    // Retries are ours: classified, bounded by the sync's deadline, and visible in results.
    config.default_retry = false;
    let writer_value = HeaderValue::from_str(writer)
        .map_err(|_| invalid(format!("writer {writer:?} is not a valid header value")))?;
    config.headers.extend([
        (HeaderName::from_static(WRITER_HEADER), writer_value),
        (
            HeaderName::from_static(GENERATION_HEADER),
            HeaderValue::from(generation),
        ),
    ]);
    Ok(config)
}

/// Builds the client of a target.
pub async fn build_client(
    target: &ClusterTarget,
    writer: &str,
    generation: u64,
    settings: &ClientSettings,
) -> Result<(kube::Client, String), SyncError> {
    let config = client_config(target, writer, generation, settings).await?;
    let namespace = config.default_namespace.clone();
    let idle = settings.connection_idle_timeout;
    let built = if config.proxy_url.is_some() {
        kube::Client::try_from(config)
    } else if config.cluster_url.scheme() == Some(&http::uri::Scheme::HTTP) {
        client_over(config, plain_connector(), idle)
    } else {
        https_connector(&config).and_then(|connector| client_over(config, connector, idle))
    };
    let client =
        built.map_err(|error| SyncError::from_kube(&target.name, "build its client", error))?;
    Ok((client, namespace))
}

fn plain_connector() -> hyper_util::client::legacy::connect::HttpConnector {
    hyper_util::client::legacy::connect::HttpConnector::new()
}

/// Server names whose TLS session tickets this process keeps before it is told how many
/// clusters it reaches ([`reserve_tls_sessions`]): rustls allocates the whole cache up front.
const SESSION_CACHE_MIN_NAMES: usize = 1024;
/// At most: beyond this a replica resumes the sessions of the clusters it synced last.
const SESSION_CACHE_MAX_NAMES: usize = 1 << 18;
/// rustls sizes its session cache in tickets, eight per server name.
const TICKETS_PER_NAME: usize = 8;
/// TLS configurations kept for reuse, one per distinct trust and client identity.
const TLS_CONFIGS_KEPT: usize = 4096;

/// Sizes this process's TLS session cache for `clusters` clusters (a replica calls it with the
/// clusters it owns), so that every owned cluster's session survives from one sync to the
/// next: a cache smaller than that evicts sessions in a rollout and each eviction costs a full
/// handshake (at 100,000 clusters on 5 replicas a fixed 8,192 names gave 94,503 full
/// handshakes beside 123,191 resumed). The cache only grows, to the next power of two above a
/// quarter more than `clusters`, between 1,024 and 262,144 names; growing it starts an empty
/// one (a handful of times in a process's life).
pub fn reserve_tls_sessions(clusters: usize) {
    TlsConfigs::get().reserve(clusters);
}

/// A sync builds its client afresh (clients are not kept between syncs, to spare memory). Its
/// TLS configuration is kept, one per distinct trust (the kubeconfig's CA) and client
/// identity, with one session store for the process: a later client then resumes the
/// previous sync's session (TLS 1.3 PSK with a fresh key exchange) instead of verifying the
/// server's certificate chain again. rustls resumes only between configurations that share
/// their verifier, which is why the configuration itself is kept. Certificate verification
/// was about half of the handshake's CPU in a rollout to 10,000 clusters over HTTPS (perf,
/// `loadtest rollout`).
struct TlsConfigs {
    /// The session store and the server names it holds.
    sessions: std::sync::RwLock<(usize, Arc<rustls::client::ClientSessionMemoryCache>)>,
    configs: std::sync::Mutex<std::collections::HashMap<u128, (rustls::ClientConfig, u64)>>,
    uses: std::sync::atomic::AtomicU64,
}

impl TlsConfigs {
    fn get() -> &'static TlsConfigs {
        static CONFIGS: std::sync::OnceLock<TlsConfigs> = std::sync::OnceLock::new();
        CONFIGS.get_or_init(|| TlsConfigs {
            sessions: std::sync::RwLock::new(Self::session_store(SESSION_CACHE_MIN_NAMES)),
            configs: Default::default(),
            uses: Default::default(),
        })
    }

    fn session_store(names: usize) -> (usize, Arc<rustls::client::ClientSessionMemoryCache>) {
        let cache = rustls::client::ClientSessionMemoryCache::new(names * TICKETS_PER_NAME);
        (names, Arc::new(cache))
    }

    /// The server names a cache for `clusters` clusters holds.
    fn names_for(clusters: usize) -> usize {
        clusters
            .saturating_add(clusters / 4)
            .checked_next_power_of_two()
            .unwrap_or(usize::MAX)
            .clamp(SESSION_CACHE_MIN_NAMES, SESSION_CACHE_MAX_NAMES)
    }

    fn reserve(&self, clusters: usize) {
        let names = Self::names_for(clusters);
        if names <= self.session_names() {
            return;
        }
        let mut sessions = self.sessions.write().unwrap_or_else(|e| e.into_inner());
        if names > sessions.0 {
            tracing::debug!(clusters, names, "TLS session cache grown");
            *sessions = Self::session_store(names);
        }
    }

    fn session_names(&self) -> usize {
        self.sessions.read().unwrap_or_else(|e| e.into_inner()).0
    }

    fn resumption(&self) -> rustls::client::Resumption {
        let sessions = self.sessions.read().unwrap_or_else(|e| e.into_inner());
        rustls::client::Resumption::store(sessions.1.clone())
    }

    /// The key of a configuration's TLS material, when it can be kept: not for a CA file
    /// (kube reloads it) nor for an exec plugin (it may hand out new client certificates).
    fn key(config: &kube::Config) -> Option<u128> {
        if config.root_cert_file.is_some() || config.auth_info.exec.is_some() {
            return None;
        }
        let mut material = Vec::new();
        for certificate in config.root_cert.iter().flatten() {
            material.extend_from_slice(&(certificate.len() as u64).to_le_bytes());
            material.extend_from_slice(certificate);
        }
        material.push(u8::from(config.accept_invalid_certs));
        let info = &config.auth_info;
        // A certificate names its key: equal certificates come with equal keys.
        for part in [
            &info.client_certificate_data,
            &info.client_certificate,
            &info.client_key,
        ] {
            let text = part.as_deref().unwrap_or("");
            material.extend_from_slice(&(text.len() as u64).to_le_bytes());
            material.extend_from_slice(text.as_bytes());
        }
        Some(xxhash_rust::xxh3::xxh3_128(&material))
    }

    /// The kept configuration for `config`'s TLS material, or a new one (kept when it can be).
    fn config_for(&self, config: &kube::Config) -> Result<rustls::ClientConfig, kube::Error> {
        use kube::client::ConfigExt as _;

        let key = Self::key(config);
        let mut configs = self.configs.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.uses.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(key) = key
            && let Some((kept, used)) = configs.get_mut(&key)
        {
            *used = now;
            let mut tls = kept.clone();
            tls.resumption = self.resumption();
            return Ok(tls);
        }
        let mut tls = config.rustls_client_config()?;
        tls.resumption = self.resumption();
        if let Some(key) = key {
            if configs.len() >= TLS_CONFIGS_KEPT {
                // The least recently used goes.
                if let Some(oldest) = configs
                    .iter()
                    .min_by_key(|(_, (_, used))| *used)
                    .map(|(k, _)| *k)
                {
                    configs.remove(&oldest);
                }
            }
            configs.insert(key, (tls.clone(), now));
        }
        Ok(tls)
    }
}

/// kube's HTTPS connector (the kubeconfig's CA, client identity and server name), over the
/// kept TLS configuration of that material.
fn https_connector(
    config: &kube::Config,
) -> Result<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    kube::Error,
> {
    let tls = TlsConfigs::get().config_for(config)?;
    let mut builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = rustls::pki_types::ServerName::try_from(name.clone()).map_err(|error| {
            kube::Error::Service(format!("invalid tls-server-name {name:?}: {error}").into())
        })?;
        builder =
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let mut tcp = plain_connector();
    tcp.enforce_http(false);
    Ok(builder.enable_http1().wrap_connector(tcp))
}

/// kube's client stack (time-outs, base URI, credentials, headers) over a connection pool that
/// closes idle connections after `idle`; kube's own builder keeps them until the client is
/// dropped. For plain `http://` (fleetsim, `kubectl proxy`) there is no TLS at all: kube builds
/// a rustls configuration for every client, even for http, and without a CA that loads the
/// platform's roots, about 100 KiB per client that a fleet of simulated clusters would pay
/// thousands of times for nothing.
fn client_over<C>(
    config: kube::Config,
    connector: C,
    idle: Duration,
) -> Result<kube::Client, kube::Error>
where
    C: tower::Service<http::Uri> + Clone + Send + Sync + 'static,
    C::Response: hyper::rt::Read
        + hyper::rt::Write
        + hyper_util::client::legacy::connect::Connection
        + Send
        + Unpin
        + 'static,
    C::Future: Send + 'static,
    C::Error: Into<tower::BoxError>,
{
    use kube::client::ConfigExt;
    use tower::{BoxError, ServiceBuilder};

    let mut connector = hyper_timeout::TimeoutConnector::new(connector);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .pool_idle_timeout(idle)
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http);
    Ok(kube::Client::new(service, config.default_namespace))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_cache_is_sized_from_the_clusters_reached_and_only_grows() {
        assert_eq!(TlsConfigs::names_for(0), SESSION_CACHE_MIN_NAMES);
        assert_eq!(TlsConfigs::names_for(3_334), 8_192);
        assert_eq!(TlsConfigs::names_for(20_000), 32_768);
        assert_eq!(TlsConfigs::names_for(usize::MAX), SESSION_CACHE_MAX_NAMES);
        let configs = TlsConfigs {
            sessions: std::sync::RwLock::new(TlsConfigs::session_store(SESSION_CACHE_MIN_NAMES)),
            configs: Default::default(),
            uses: Default::default(),
        };
        configs.reserve(20_000);
        assert_eq!(configs.session_names(), 32_768);
        configs.reserve(100);
        assert_eq!(
            configs.session_names(),
            32_768,
            "a smaller fleet keeps the sessions"
        );
    }

    #[tokio::test]
    async fn configs_carry_time_outs_and_writer_headers() {
        let target = ClusterTarget::at_url("c1", "http://127.0.0.1:1/clusters/c1");
        let settings = ClientSettings::default();
        let config = client_config(&target, "node-a", 7, &settings)
            .await
            .expect("config");
        assert_eq!(config.read_timeout, Some(settings.request_timeout));
        assert!(!config.default_retry);
        let headers: Vec<(String, String)> = config
            .headers
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_str().unwrap_or("").to_owned()))
            .collect();
        assert!(headers.contains(&(WRITER_HEADER.to_owned(), "node-a".to_owned())));
        assert!(headers.contains(&(GENERATION_HEADER.to_owned(), "7".to_owned())));
        let bad = client_config(&target, "bad\nwriter", 1, &settings)
            .await
            .unwrap_err();
        assert!(
            bad.to_string().contains("not a valid header value"),
            "{bad}"
        );
        let context = ClusterTarget {
            labels: [("tier".to_owned(), "gold".to_owned())].into(),
            ..target
        }
        .context();
        assert_eq!(context.labels["tier"], "gold");
    }

    #[tokio::test]
    async fn an_https_cluster_gets_a_tls_client_that_fails_cleanly_when_unreachable() {
        let kubeconfig = "apiVersion: v1\nkind: Config\ncurrent-context: edge\nclusters:\n- name: edge\n  cluster:\n    server: https://127.0.0.1:1\n    insecure-skip-tls-verify: true\ncontexts:\n- name: edge\n  context:\n    cluster: edge\n    user: admin\n    namespace: apps\nusers:\n- name: admin\n  user:\n    token: t0ken\n";
        let target = ClusterTarget {
            connection: Connection::Kubeconfig(kubeconfig.into()),
            ..ClusterTarget::at_url("edge", "http://unused")
        };
        let settings = ClientSettings {
            connect_timeout: Duration::from_secs(2),
            ..ClientSettings::default()
        };
        let (client, namespace) = build_client(&target, "node-a", 1, &settings)
            .await
            .expect("a TLS client is built without connecting");
        assert_eq!(namespace, "apps");
        let error = client
            .apiserver_version()
            .await
            .expect_err("nothing listens on port 1");
        let error = SyncError::from_kube("edge", "ask its version", error);
        assert_eq!(
            error.class(),
            crate::error::ErrorClass::Unreachable,
            "{error}"
        );
    }
}

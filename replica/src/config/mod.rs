//! Configuration of a replica (`starling node`): clap flags with environment fallbacks, the
//! defaults in one place, and [`NodeArgs::validate`], which rejects nonsense with a clear
//! message before anything starts.
//!
//! Node ids are numbers. For a StatefulSet, a pod name such as `starling-2` is accepted
//! wherever an id is (`--id`, `--peers`): its ordinal is the id, so the same flags work on
//! every pod (`--id $(POD_NAME)` and `--peers starling-1.starling:7400,starling-2.starling:7400`).
//!
//! Id 0 is refused: the gRPC API reads a zero node id as "none" (no leader known, every node),
//! so a replica 0 would be invisible as a leader. A StatefulSet starts its ordinals at 1 with
//! `spec.ordinals.start: 1`, as the Helm chart does.
//!
//! `starling node --validate-config` runs [`NodeArgs::validate`] and
//! [`NodeConfig::check_files`] and prints [`NodeConfig::summary`], so that a deployment's
//! flags, environment and files can be checked without starting anything.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use fleet::state::NodeId;

/// Default time after which a silent node is declared Down.
pub const DEFAULT_DOWN_AFTER: &str = "3s";
/// The lease is this fraction of `down_after` unless set. Half leaves a new leader little to
/// wait after its election for a dead leader's clusters (the election grace).
const DEFAULT_LEASE_FRACTION: (u32, u32) = (1, 2);

/// Syncs under way per node by default: three replicas reach a budget of 1,000 without tuning.
pub const DEFAULT_MAX_WAITING_SYNCS: usize = 512;
/// How long a sync of a pull cluster waits for its agent before it fails as unreachable
/// (`--agent-grace`).
pub const DEFAULT_AGENT_GRACE: Duration = Duration::from_secs(30);
/// How much earlier than `down_after` the failure detector's verdict is reached: the leader's
/// tick, and the time to commit and apply the verdict (which re-places the node's clusters),
/// so that they are owned again by the time the node has been silent for `down_after`. The
/// lease must end before it.
pub const DETECTION_SLACK: Duration = Duration::from_millis(400);

/// The lease when `--lease` is not set.
pub fn default_lease(down_after: Duration) -> Duration {
    down_after * DEFAULT_LEASE_FRACTION.0 / DEFAULT_LEASE_FRACTION.1
}

/// How often a node sends heartbeats: a tenth of `down_after`.
pub fn heartbeat_interval(down_after: Duration) -> Duration {
    down_after / 10
}

#[derive(clap::Args, Debug, Clone)]
pub struct NodeArgs {
    /// This node's id: a number, or a StatefulSet pod name whose ordinal is the id.
    #[arg(long, env = "STARLING_ID")]
    pub id: String,
    /// Address the gRPC server listens on.
    #[arg(long, env = "STARLING_LISTEN", default_value = "127.0.0.1:7400")]
    pub listen: SocketAddr,
    /// Address peers and clients use to reach this node (`host:port`); the listen address when
    /// unset.
    #[arg(long, env = "STARLING_ADVERTISE")]
    pub advertise: Option<String>,
    /// Address of the HTTP server (`/healthz`, `/readyz`, `/metrics`); listen port + 1 when unset.
    #[arg(long, env = "STARLING_HTTP_LISTEN")]
    pub http_listen: Option<SocketAddr>,
    /// Directory of the Raft log, vote, snapshots and artifacts.
    #[arg(long, env = "STARLING_DATA_DIR")]
    pub data_dir: PathBuf,
    /// Static peers: `ID=HOST:PORT,...`, or `HOST:PORT,...` with StatefulSet pod host names.
    #[arg(long, env = "STARLING_PEERS", value_delimiter = ',')]
    pub peers: Vec<String>,
    /// Voting members at most; further members are learners (they own shards too).
    #[arg(long, env = "STARLING_MAX_VOTERS", default_value_t = 5)]
    pub max_voters: usize,
    /// A node silent for this long is marked Down and its clusters move.
    #[arg(long, env = "STARLING_DOWN_AFTER", default_value = DEFAULT_DOWN_AFTER, value_parser = humantime::parse_duration)]
    pub down_after: Duration,
    /// How long a node keeps acting after its last acknowledged heartbeat was sent; must be
    /// shorter than `--down-after` by 400ms at least. Half of it when unset.
    #[arg(long, env = "STARLING_LEASE", value_parser = humantime::parse_duration)]
    pub lease: Option<Duration>,
    /// The longest round trip between two replicas (several regions: the slowest pair). Above
    /// 50ms it stretches the Raft heartbeat to twice this and elections to 8–16 times it;
    /// --down-after must stay above the longest election timeout.
    #[arg(long, env = "STARLING_MAX_RTT", default_value = "50ms", value_parser = humantime::parse_duration)]
    pub max_rtt: Duration,
    /// Dial peer ADDRESS at VIA instead (`ADDRESS=VIA`, repeatable): a latency proxy between
    /// regions in a benchmark (`loadtest regions`). Off in production.
    #[arg(long = "peer-route", value_name = "ADDRESS=VIA")]
    pub peer_routes: Vec<String>,
    /// Syncs this node applies at once (rendering and writing to the target).
    #[arg(long, env = "STARLING_MAX_CONCURRENT_SYNCS", default_value_t = 16)]
    pub max_concurrent_syncs: usize,
    /// Syncs this node has under way at once, including those that applied and wait for their
    /// objects to become ready (which hold no apply slot). At least --max-concurrent-syncs.
    #[arg(long, env = "STARLING_MAX_WAITING_SYNCS", default_value_t = DEFAULT_MAX_WAITING_SYNCS)]
    pub max_waiting_syncs: usize,
    /// On SIGTERM or SIGINT, how long the replica may take to hand its clusters on before it
    /// exits (0s: no drain). Keep it below the pod's terminationGracePeriodSeconds.
    #[arg(long, env = "STARLING_DRAIN_TIMEOUT", default_value = "20s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
    /// How long a deleted Sync, SyncGroup or Cluster (or a cluster a SyncGroup let go of) may
    /// wait for its objects to be pruned from clusters that cannot be reached; after it, they
    /// are left there, the object goes, and the SyncGroup's status says so.
    #[arg(long, env = "STARLING_DELETION_TIMEOUT", default_value = "5m", value_parser = humantime::parse_duration)]
    pub deletion_timeout: Duration,
    /// `/metrics` takes a token that reads every namespace, as the fleet view does (open by
    /// default, as Prometheus expects); needs --admin-token-file.
    #[arg(long, env = "STARLING_METRICS_AUTH")]
    pub metrics_auth: bool,
    /// How often this replica reports which API tokens it saw presented (`starling token list`
    /// shows their last use): one Raft write per interval at most.
    #[arg(long, env = "STARLING_TOKEN_USE_INTERVAL", default_value = "60s", value_parser = humantime::parse_duration)]
    pub token_use_interval: Duration,
    /// The most objects one namespace may hold (Sources, Clusters, Syncs, SyncGroups, Secrets;
    /// not the Syncs a SyncGroup generates): a write past it is refused. Standalone mode.
    #[arg(long, env = "STARLING_QUOTA_OBJECTS", default_value_t = fleet::state::quota::DEFAULT_QUOTA_OBJECTS)]
    pub quota_objects: u64,
    /// The most bytes one namespace may hold (specs as JSON, Secrets' keys and values), as a
    /// count or with Ki, Mi, Gi (`512Mi`): a write past it is refused. Standalone mode.
    #[arg(long, env = "STARLING_QUOTA_BYTES", default_value = "1Gi", value_parser = parse_size)]
    pub quota_bytes: u64,
    /// The most entries the audit log keeps (who changed what, `starling audit`); the oldest
    /// go first.
    #[arg(long, env = "STARLING_AUDIT_ENTRIES", default_value_t = fleet::state::audit::DEFAULT_AUDIT_ENTRIES)]
    pub audit_entries: u32,
    /// How long an audit entry is kept.
    #[arg(long, env = "STARLING_AUDIT_MAX_AGE", default_value = "30d", value_parser = humantime::parse_duration)]
    pub audit_max_age: Duration,
    /// The directory under which `starling diff --source-dir` may name checkouts on this
    /// replica (a CI runner's workspace); `--source-dir` is refused when unset.
    #[arg(long, env = "STARLING_DIFF_SOURCE_ROOT", value_name = "DIR")]
    pub diff_source_root: Option<PathBuf>,
    /// Start a new installation in disaster recovery: nothing is rolled out until `starling
    /// recover` has read back what the target clusters hold. No effect on an installation that
    /// has already formed.
    #[arg(long, env = "STARLING_RECOVERY")]
    pub recovery: bool,
    /// A file holding the installation's admin token (the same on every replica, at least 32
    /// characters). When set, every call to the Fleet and Admin APIs needs a token: this one,
    /// or one made with `starling token create`. Unset: the API is open (development).
    #[arg(long, env = "STARLING_ADMIN_TOKEN_FILE", value_name = "PATH")]
    pub admin_token_file: Option<PathBuf>,
    /// The gRPC server's certificate chain (PEM); also this replica's client certificate
    /// towards its peers. Reloaded when it changes on disk. With --tls-key and --tls-ca.
    #[arg(long, env = "STARLING_TLS_CERT", value_name = "PATH")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "STARLING_TLS_KEY", value_name = "PATH")]
    pub tls_key: Option<PathBuf>,
    /// The CA bundle (PEM) the peers' certificates must chain to (mutual TLS between replicas).
    #[arg(long, env = "STARLING_TLS_CA", value_name = "PATH")]
    pub tls_ca: Option<PathBuf>,
    /// How long a sync of a pull cluster waits for the cluster's agent to connect before it
    /// fails as unreachable (which frees its place in the rollout's budget).
    #[arg(long, env = "STARLING_AGENT_GRACE", default_value = "30s", value_parser = humantime::parse_duration)]
    pub agent_grace: Duration,
    /// Serve plain-text gRPC, without TLS: for development on this host only (--listen,
    /// --http-listen, --advertise and --peers all loopback addresses).
    #[arg(long, env = "STARLING_INSECURE")]
    pub insecure: bool,
    /// The address users reach the fleet view at (`https://starling.example`): notifications
    /// and commit statuses link to it. Unset: they carry no link.
    #[arg(long, env = "STARLING_EXTERNAL_URL", value_name = "URL")]
    pub external_url: Option<String>,
    /// Check the flags and environment and the files they name (the admin token, the TLS
    /// certificate, key and CA, read as a start reads them), print the resulting configuration
    /// on one line and exit without starting anything (non-zero when anything is invalid).
    #[arg(long)]
    pub validate_config: bool,
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub id: NodeId,
    pub listen: SocketAddr,
    pub advertise: String,
    pub http_listen: SocketAddr,
    pub data_dir: PathBuf,
    /// Every peer including this node, by id.
    pub peers: BTreeMap<NodeId, String>,
    pub max_voters: usize,
    pub down_after: Duration,
    pub lease: Duration,
    /// How often heartbeats are sent: a tenth of `down_after`.
    pub heartbeat_interval: Duration,
    /// The longest round trip between replicas; stretches the Raft timing
    /// ([`starling_raft::RaftConfig::with_round_trip`]).
    pub max_rtt: Duration,
    pub max_concurrent_syncs: usize,
    /// Syncs under way at once, waits for readiness included (at least `max_concurrent_syncs`).
    pub max_waiting_syncs: usize,
    /// How long a graceful stop may take to hand the clusters on ([`crate::node::stopping`]).
    pub drain_timeout: Duration,
    /// A new installation forms in disaster recovery (`--recovery`).
    pub recovery: bool,
    /// `--admin-token-file`: when set, the API requires tokens.
    pub admin_token_file: Option<PathBuf>,
    /// `--tls-cert`, `--tls-key`, `--tls-ca`; `None` with `--insecure` (loopback only).
    pub tls: Option<starling_transport::tls::TlsFiles>,
    /// How long a pull cluster's sync waits for its agent (`--agent-grace`).
    pub agent_grace: Duration,
    /// How long pruning may wait for unreachable clusters (`--deletion-timeout`).
    pub deletion_timeout: Duration,
    /// `/metrics` requires a reader token (`--metrics-auth`).
    pub metrics_auth: bool,
    /// How often token uses are reported (`--token-use-interval`).
    pub token_use_interval: Duration,
    /// Per-namespace limits (`--quota-objects`, `--quota-bytes`).
    pub quota: fleet::state::quota::Quota,
    /// What the audit log keeps (`--audit-entries`, `--audit-max-age`).
    pub audit: fleet::state::audit::AuditRetention,
    /// Where `starling diff --source-dir` may read (`--diff-source-root`).
    pub diff_source_root: Option<PathBuf>,
    /// Where the fleet view is reached (`--external-url`), for the links in notifications.
    pub external_url: Option<String>,
}

/// The fleet view's address as users reach it: `http://` or `https://` with a host, kept
/// without a trailing `/` (the links append their paths).
fn check_external_url(url: &str) -> Result<String, ConfigError> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    let host = rest.map(|rest| rest.split(['/', '?', '#']).next().unwrap_or_default());
    match host {
        Some(host) if !host.is_empty() && !url.chars().any(char::is_whitespace) => {
            Ok(url.trim_end_matches('/').to_string())
        }
        _ => Err(ConfigError::BadExternalUrl(url.to_string())),
    }
}

/// A size in bytes: a count, or a count with `Ki`, `Mi` or `Gi` (powers of 1024).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let scale: u64 = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?}: use Ki, Mi or Gi"
            ));
        }
    };
    let count: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size (a count, or a count with Ki, Mi, Gi)"))?;
    count
        .checked_mul(scale)
        .ok_or_else(|| format!("{text:?} is too large"))
}

impl NodeConfig {
    /// Reads the files the configuration names, as a start does: the admin token (present, at
    /// least 32 characters) and the TLS certificate, key and CA (readable PEM that fit
    /// together). `starling node --validate-config` runs it after [`NodeArgs::validate`].
    pub fn check_files(&self) -> Result<(), FileError> {
        if let Some(path) = &self.admin_token_file {
            crate::auth::read_admin_token(path)?;
        }
        if let Some(files) = &self.tls {
            starling_transport::tls::Tls::load(files.clone())?;
        }
        Ok(())
    }

    /// The configuration on one line, as `starling node --validate-config` prints it (the
    /// binary adds the mode, which operator mode's own flags decide).
    pub fn summary(&self) -> String {
        let peers = self
            .peers
            .iter()
            .map(|(id, address)| format!("{id}={address}"))
            .collect::<Vec<_>>()
            .join(",");
        format!(
            "valid configuration: id {} listen {} advertise {} http-listen {} peers {} \
             data-dir {} down-after {} lease {} max-rtt {} max-voters {} \
             max-concurrent-syncs {} max-waiting-syncs {} drain-timeout {} auth {} tls {}",
            self.id,
            self.listen,
            self.advertise,
            self.http_listen,
            peers,
            self.data_dir.display(),
            humantime::format_duration(self.down_after),
            humantime::format_duration(self.lease),
            humantime::format_duration(self.max_rtt),
            self.max_voters,
            self.max_concurrent_syncs,
            self.max_waiting_syncs,
            humantime::format_duration(self.drain_timeout),
            match (self.admin_token_file.is_some(), self.metrics_auth) {
                (false, _) => "open",
                (true, false) => "tokens",
                (true, true) => "tokens metrics-auth",
            },
            if self.tls.is_some() { "on" } else { "insecure" },
        )
    }
}

/// A configuration that cannot work.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error(
        "--external-url {0:?} is not an http(s) url with a host, such as https://starling.example.com"
    )]
    BadExternalUrl(String),
    #[error("invalid node id {0:?}: expected a number or a StatefulSet pod name ending in -N")]
    BadId(String),
    #[error(
        "node id 0 in {0:?} is reserved (the API reads 0 as no node): number nodes from 1, \
         for a StatefulSet with spec.ordinals.start: 1"
    )]
    ZeroId(String),
    #[error("invalid peer {0:?}: expected ID=HOST:PORT or a StatefulSet HOST:PORT")]
    BadPeer(String),
    #[error("peer id {0} is listed twice in --peers")]
    DuplicatePeer(NodeId),
    #[error(
        "--lease ({lease:?}) must be shorter than --down-after ({down_after:?}) by 400ms at least"
    )]
    LeaseTooLong {
        lease: Duration,
        down_after: Duration,
    },
    #[error("--down-after must be at least 1s, got {0:?}")]
    DownAfterTooShort(Duration),
    #[error("--max-rtt must be at most 1s, got {0:?}")]
    RttTooLong(Duration),
    #[error(
        "--down-after ({down_after:?}) must exceed the longest Raft election timeout \
         ({election:?}) that --max-rtt ({max_rtt:?}) implies: raise --down-after"
    )]
    DownAfterBelowElection {
        down_after: Duration,
        election: Duration,
        max_rtt: Duration,
    },
    #[error("--max-voters must be between 1 and 9, got {0}")]
    BadMaxVoters(usize),
    #[error("--max-concurrent-syncs must be between 1 and 4096, got {0}")]
    BadConcurrency(usize),
    #[error(
        "--max-waiting-syncs ({waiting}) must be between --max-concurrent-syncs ({applying}) and 65536"
    )]
    BadWaiting { waiting: usize, applying: usize },
    #[error("--advertise {0:?} is not HOST:PORT")]
    BadAdvertise(String),
    #[error(
        "no TLS: give --tls-cert, --tls-key and --tls-ca, or --insecure to serve plain text \
         on a loopback address (development)"
    )]
    NoTls,
    #[error("--tls-cert, --tls-key and --tls-ca go together: {0} is missing")]
    PartialTls(&'static str),
    #[error("--insecure and --tls-* exclude each other")]
    InsecureWithTls,
    #[error(
        "--insecure is for development on a loopback address only, and --listen is {0}: \
         give --tls-cert, --tls-key and --tls-ca"
    )]
    InsecureNotLoopback(SocketAddr),
    #[error(
        "--insecure keeps every port on this host, and {flag} names {address}, which is not a \
         loopback address: Raft and API traffic would cross the network in plain text; give \
         --tls-cert, --tls-key and --tls-ca"
    )]
    InsecureLeavesHost { flag: &'static str, address: String },
    #[error(
        "--metrics-auth needs tokens: give --admin-token-file (an open installation has no \
         token to ask /metrics for)"
    )]
    MetricsAuthOpen,
}

/// Whether `host:port` names this host: a loopback IP address or `localhost`.
fn is_loopback_address(address: &str) -> bool {
    let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    }
}

/// Parses a node id: `7`, or a StatefulSet pod name (`starling-7`) or host name
/// (`starling-7.starling-headless.ns.svc`) whose ordinal is the id. Zero is refused.
pub fn parse_node_id(text: &str) -> Result<NodeId, ConfigError> {
    let id = match text.parse::<NodeId>() {
        Ok(id) => id,
        Err(_) => {
            let first_label = text.split('.').next().unwrap_or(text);
            first_label
                .rsplit_once('-')
                .and_then(|(_, ordinal)| ordinal.parse::<NodeId>().ok())
                .ok_or_else(|| ConfigError::BadId(text.to_string()))?
        }
    };
    if id == 0 {
        return Err(ConfigError::ZeroId(text.to_string()));
    }
    Ok(id)
}

/// A peer whose id is zero says so; any other bad id is a bad peer.
fn bad_id(error: ConfigError, peer: &str) -> ConfigError {
    match error {
        ConfigError::ZeroId(_) => ConfigError::ZeroId(peer.to_string()),
        _ => ConfigError::BadPeer(peer.to_string()),
    }
}

fn parse_peer(text: &str) -> Result<(NodeId, String), ConfigError> {
    let bad = || ConfigError::BadPeer(text.to_string());
    let (id, address) = match text.split_once('=') {
        Some((id, address)) => (parse_node_id(id).map_err(|e| bad_id(e, text))?, address),
        None => (parse_node_id(text).map_err(|e| bad_id(e, text))?, text),
    };
    let (host, port) = address.rsplit_once(':').ok_or_else(bad)?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(bad());
    }
    Ok((id, address.to_string()))
}

impl NodeArgs {
    pub fn validate(&self) -> Result<NodeConfig, ConfigError> {
        let id = parse_node_id(&self.id)?;
        if self.down_after < Duration::from_secs(1) {
            return Err(ConfigError::DownAfterTooShort(self.down_after));
        }
        if self.max_rtt > Duration::from_secs(1) {
            return Err(ConfigError::RttTooLong(self.max_rtt));
        }
        let election = starling_raft::RaftConfig::new(id, "", "")
            .with_round_trip(self.max_rtt)
            .election_timeout_max;
        if self.down_after <= election {
            return Err(ConfigError::DownAfterBelowElection {
                down_after: self.down_after,
                election,
                max_rtt: self.max_rtt,
            });
        }
        let lease = self.lease.unwrap_or(default_lease(self.down_after));
        if lease + DETECTION_SLACK >= self.down_after {
            return Err(ConfigError::LeaseTooLong {
                lease,
                down_after: self.down_after,
            });
        }
        if !(1..=9).contains(&self.max_voters) {
            return Err(ConfigError::BadMaxVoters(self.max_voters));
        }
        if !(1..=4096).contains(&self.max_concurrent_syncs) {
            return Err(ConfigError::BadConcurrency(self.max_concurrent_syncs));
        }
        if !(self.max_concurrent_syncs..=65_536).contains(&self.max_waiting_syncs) {
            return Err(ConfigError::BadWaiting {
                waiting: self.max_waiting_syncs,
                applying: self.max_concurrent_syncs,
            });
        }
        let advertise = self
            .advertise
            .clone()
            .unwrap_or_else(|| self.listen.to_string());
        if !advertise
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
        {
            return Err(ConfigError::BadAdvertise(advertise));
        }
        let mut peers = BTreeMap::new();
        for peer in self.peers.iter().filter(|p| !p.trim().is_empty()) {
            let (peer_id, address) = parse_peer(peer.trim())?;
            if peers.insert(peer_id, address).is_some() {
                return Err(ConfigError::DuplicatePeer(peer_id));
            }
        }
        peers.insert(id, advertise.clone());
        if self.metrics_auth && self.admin_token_file.is_none() {
            return Err(ConfigError::MetricsAuthOpen);
        }
        let tls = self.tls_files()?;
        let http_listen = self.http_listen.unwrap_or_else(|| {
            let mut address = self.listen;
            address.set_port(self.listen.port().wrapping_add(1));
            address
        });
        if tls.is_none() {
            // Plain text stays on this host: what peers and clients dial, and the HTTP port.
            let dialled = std::iter::once(("--advertise", advertise.clone())).chain(
                peers
                    .iter()
                    .filter(|(peer, _)| **peer != id)
                    .map(|(_, address)| ("--peers", address.clone())),
            );
            let http = ("--http-listen", http_listen.to_string());
            if let Some((flag, address)) = dialled
                .chain(std::iter::once(http))
                .find(|(_, address)| !is_loopback_address(address))
            {
                return Err(ConfigError::InsecureLeavesHost { flag, address });
            }
        }
        Ok(NodeConfig {
            id,
            listen: self.listen,
            advertise,
            http_listen,
            data_dir: self.data_dir.clone(),
            peers,
            max_voters: self.max_voters,
            down_after: self.down_after,
            lease,
            heartbeat_interval: heartbeat_interval(self.down_after),
            max_rtt: self.max_rtt,
            max_concurrent_syncs: self.max_concurrent_syncs,
            max_waiting_syncs: self.max_waiting_syncs,
            drain_timeout: self.drain_timeout,
            recovery: self.recovery,
            admin_token_file: self.admin_token_file.clone(),
            tls,
            agent_grace: self.agent_grace,
            deletion_timeout: self.deletion_timeout,
            metrics_auth: self.metrics_auth,
            token_use_interval: self.token_use_interval,
            quota: fleet::state::quota::Quota {
                objects: self.quota_objects,
                bytes: self.quota_bytes,
            },
            audit: fleet::state::audit::AuditRetention {
                entries: self.audit_entries,
                max_age_seconds: self.audit_max_age.as_secs(),
            },
            diff_source_root: self.diff_source_root.clone(),
            external_url: self
                .external_url
                .as_deref()
                .map(check_external_url)
                .transpose()?,
        })
    }

    /// The TLS files, all three or none; none needs `--insecure` on a loopback address.
    fn tls_files(&self) -> Result<Option<starling_transport::tls::TlsFiles>, ConfigError> {
        let given = [&self.tls_cert, &self.tls_key, &self.tls_ca];
        if given.iter().all(|file| file.is_none()) {
            if !self.insecure {
                return Err(ConfigError::NoTls);
            }
            if !self.listen.ip().is_loopback() {
                return Err(ConfigError::InsecureNotLoopback(self.listen));
            }
            return Ok(None);
        }
        if self.insecure {
            return Err(ConfigError::InsecureWithTls);
        }
        let (Some(cert), Some(key), Some(ca)) = (&self.tls_cert, &self.tls_key, &self.tls_ca)
        else {
            let missing = ["--tls-cert", "--tls-key", "--tls-ca"]
                .into_iter()
                .zip(given)
                .find(|(_, file)| file.is_none())
                .map_or("--tls-ca", |(flag, _)| flag);
            return Err(ConfigError::PartialTls(missing));
        };
        Ok(Some(starling_transport::tls::TlsFiles {
            ca: ca.clone(),
            identity: Some((cert.clone(), key.clone())),
        }))
    }
}

/// Why a file the configuration names cannot be used ([`NodeConfig::check_files`]).
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error(transparent)]
    AdminToken(#[from] crate::auth::TokenFileError),
    #[error(transparent)]
    Tls(#[from] starling_transport::tls::TlsError),
}

#[cfg(test)]
mod tests;

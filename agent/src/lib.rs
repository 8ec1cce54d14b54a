//! `starling agent`: pull mode. It runs in a downstream cluster, connects out to the replicas
//! only, and applies the syncs granted to its cluster with the same sync engine the replicas
//! use for push clusters.
//!
//! ```text
//! Upstream (downstream cluster) ─► Secret: addresses, token, namespaces, ca.crt
//!   └─► Register (a pull Cluster per tenant namespace, with the Upstream's labels)
//!   └─► per Cluster: Attach stream to the owner (named by any replica; forwarded by one when
//!          the agent has a single address or cannot reach the owner)
//!          Job ─► FetchArtifact by digest (cached, verified) ─► SyncEngine::sync (fenced by
//!          the owner generation) ─► JobResult (SyncOutcome: inventory, health)
//!          Cancel ─► the job stops; silence for AGENT_LEASE ─► every job stops
//!          stream ends ─► jobs stop, back-off, next replica
//! ```

#![warn(unreachable_pub)]

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleet::resources::Upstream;
use fleet::state::SyncOutcome;
use futures::StreamExt;
use starling_sync::{ArtifactSource, ClusterTarget, Connection, SyncEngine, SyncRequest};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

mod cache;
mod error;

pub use error::AgentError;
use error::io;
use proto::limits::AGENT_LEASE;
use starling_sync::AgentJob;

/// `starling agent`.
#[derive(clap::Args, Debug, Clone)]
pub struct AgentArgs {
    /// The downstream cluster's kubeconfig (inline credentials); the in-cluster service account
    /// when unset.
    #[arg(long, env = "STARLING_AGENT_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The Upstream object to enrol with.
    #[arg(long, env = "STARLING_UPSTREAM", default_value = "starling")]
    pub upstream: String,
    /// The namespace of the Upstream and its Secret.
    #[arg(
        long,
        env = "STARLING_AGENT_NAMESPACE",
        default_value = "starling-system"
    )]
    pub namespace: String,
    /// Where fetched artifacts are kept, verified by digest; a temporary directory when unset.
    #[arg(long, env = "STARLING_AGENT_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Syncs applied at once.
    #[arg(long, env = "STARLING_AGENT_CONCURRENCY", default_value_t = 4)]
    pub concurrency: usize,
    /// Prints the `registered` event on standard output (the binary does; a process that runs
    /// many agents, as `loadtest agents` does, turns it off).
    #[arg(skip = true)]
    pub announce: bool,
}

/// What the Upstream and its Secret say.
#[derive(Debug, Clone)]
struct Enrolment {
    addresses: Vec<String>,
    token: starling_sync::SecretString,
    namespaces: Vec<String>,
    cluster: String,
    labels: BTreeMap<String, String>,
    ca: Option<Vec<u8>>,
}

/// First and longest pause between attempts to reach the replicas.
const MIN_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// The longest pause while the cluster's owner cannot be reached or it has none, or the
/// replica tried is down: its clusters move to a live replica within the replicas'
/// `--down-after` (3 s by default), and the other replicas are up. An agent backing off to 5 s
/// would find the new owner seconds after it is there (a p99 of 8.4 s to attach again after a
/// leader kill in `loadtest agents`).
const QUICK_RETRY_MAX_BACKOFF: Duration = Duration::from_secs(1);
/// Redirects to an owner followed in a row without a pause: the owner can move meanwhile, but
/// not for ever.
const MAX_HOPS: u32 = 3;
/// Attempts in a row that fail at the same owner's address before the agent lets a replica
/// forward its stream instead. After the first, a replica holds the next attempt until the
/// cluster moves or the owner answers that replica again (up to 8 s), so a failover costs one
/// failure, and an owner this agent cannot reach while the replicas can costs a few quick
/// retries.
const OWNER_UNREACHED: u32 = 3;
/// How long a stream must have been up for the pause before the next attempt to start again
/// from [`MIN_BACKOFF`].
const STREAM_LIVED: Duration = Duration::from_secs(1);
/// Time limit of a unary call to a replica.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// The agent's shared parts.
struct Agent {
    enrolment: Enrolment,
    connection: Connection,
    engine: SyncEngine,
    cache: Arc<cache::Cache>,
    connector: Option<starling_transport::Connector>,
    slots: Arc<Semaphore>,
    _cache: Option<tempfile::TempDir>,
}

/// Runs the agent until `shutdown` resolves (the binary passes SIGINT or SIGTERM).
pub async fn run(
    args: AgentArgs,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), AgentError> {
    let (client, connection) = downstream(&args).await?;
    // The Upstream may come after the agent (applied by the same tool, in any order).
    let mut backoff = MIN_BACKOFF;
    let enrolment = loop {
        match enrol(&client, &args).await {
            Ok(enrolment) => break enrolment,
            Err(error) => {
                tracing::warn!(class = error.class(), %error, "not enrolled yet; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    };
    // The Upstream is read once: the client and its idle connection go (an agent keeps one
    // connection to its replica, and to its cluster only while a sync applies).
    drop(client);
    let (cache_dir, temp) = match &args.cache_dir {
        Some(dir) => (dir.clone(), None),
        None => {
            let temp = tempfile::tempdir().map_err(io("create the artifact cache"))?;
            (temp.path().to_path_buf(), Some(temp))
        }
    };
    let connector = match &enrolment.ca {
        None => None,
        Some(ca) => {
            let path = cache_dir.join("ca.crt");
            std::fs::create_dir_all(&cache_dir)
                .and_then(|()| std::fs::write(&path, ca))
                .map_err(io(format!("write {}", path.display())))?;
            let tls = starling_transport::tls::Tls::load(starling_transport::tls::TlsFiles {
                ca: path,
                identity: None,
            })?;
            Some(tls.connector())
        }
    };
    let store =
        source::ArtifactStore::open(cache_dir.join("artifacts")).map_err(AgentError::Store)?;
    let engine = SyncEngine::new(starling_sync::EngineConfig::for_lease(AGENT_LEASE))
        .map_err(AgentError::Engine)?;
    let agent = Arc::new(Agent {
        enrolment,
        connection,
        engine,
        cache: cache::Cache::new(Arc::new(store)),
        connector,
        slots: Arc::new(Semaphore::new(args.concurrency.max(1))),
        _cache: temp,
    });
    let clusters = agent.register_until_done().await;
    if args.announce {
        println!(
            "{}",
            serde_json::json!({"event": "registered", "clusters": clusters})
        );
    }
    // Each agent starts at a replica of its own choosing: agents that all started at the first
    // address would put every stream of the fleet through one replica, which forwards two
    // thirds of them and whose loss ends them all.
    let start = rand::random::<u32>() as usize;
    let sessions: Vec<_> = clusters
        .into_iter()
        .enumerate()
        .map(|(index, cluster)| tokio::spawn(agent.clone().serve(cluster, start + index)))
        .collect();
    shutdown.await;
    for session in sessions {
        session.abort();
    }
    Ok(())
}

/// The downstream cluster's client (to read the Upstream) and the sync engine's connection.
async fn downstream(args: &AgentArgs) -> Result<(kube::Client, Connection), AgentError> {
    let text = match &args.kubeconfig {
        Some(path) => std::fs::read_to_string(path)
            .map_err(io(format!("read the kubeconfig {}", path.display())))?,
        None => in_cluster_kubeconfig()?,
    };
    // Parsed the way a cluster's kubeconfig Secret is: errors name the line, never the text.
    let text = starling_sync::SecretString::new(text);
    let origin = match &args.kubeconfig {
        Some(path) => format!("kubeconfig {}", path.display()),
        None => "the in-cluster kubeconfig".to_owned(),
    };
    let kubeconfig = starling_sync::client::parse_kubeconfig("this cluster", &origin, &text)
        .map_err(|error| AgentError::Kubeconfig(error.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|_| {
            AgentError::Kubeconfig(format!(
                "{origin} cannot be used: check its cluster, user and context"
            ))
        })?;
    let client = kube::Client::try_from(config).map_err(|source| AgentError::Kube {
        what: "build the cluster client".into(),
        source,
    })?;
    Ok((client, Connection::Kubeconfig(text)))
}

/// A kubeconfig with inline credentials from the pod's service account.
fn in_cluster_kubeconfig() -> Result<String, AgentError> {
    const ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
    let host = std::env::var("KUBERNETES_SERVICE_HOST").map_err(|_| {
        AgentError::Kubeconfig(
            "not in a cluster (KUBERNETES_SERVICE_HOST unset): give --kubeconfig".into(),
        )
    })?;
    let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
    let token = std::fs::read_to_string(format!("{ACCOUNT}/token"))
        .map_err(io("read the service account token"))?;
    let ca =
        std::fs::read(format!("{ACCOUNT}/ca.crt")).map_err(io("read the service account CA"))?;
    use base64::Engine as _;
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    Ok(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "in-cluster", "cluster": {
            "server": format!("https://{host}:{port}"),
            "certificate-authority-data": base64::engine::general_purpose::STANDARD.encode(ca),
        }}],
        "users": [{"name": "agent", "user": {"token": token.trim()}}],
        "contexts": [{"name": "in-cluster", "context": {"cluster": "in-cluster", "user": "agent"}}],
        "current-context": "in-cluster",
    })
    .to_string())
}

/// Reads the Upstream and its Secret.
async fn enrol(client: &kube::Client, args: &AgentArgs) -> Result<Enrolment, AgentError> {
    let upstreams: kube::Api<Upstream> = kube::Api::namespaced(client.clone(), &args.namespace);
    let upstream = upstreams
        .get(&args.upstream)
        .await
        .map_err(|source| AgentError::Kube {
            what: format!("read Upstream {}/{}", args.namespace, args.upstream),
            source,
        })?;
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(client.clone(), &args.namespace);
    let secret_name = &upstream.spec.secret_ref.name;
    let secret = secrets
        .get(secret_name)
        .await
        .map_err(|source| AgentError::Kube {
            what: format!("read Secret {}/{secret_name}", args.namespace),
            source,
        })?;
    let data = secret.data.unwrap_or_default();
    let text = |key: &str| -> Result<String, AgentError> {
        let value = data.get(key).ok_or_else(|| {
            AgentError::Enrolment(format!(
                "Secret {}/{secret_name} has no key {key:?}",
                args.namespace
            ))
        })?;
        Ok(String::from_utf8_lossy(&value.0).trim().to_string())
    };
    let list = |text: String| -> Vec<String> {
        text.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    };
    let addresses = list(text("addresses")?);
    let namespaces = list(text("namespaces")?);
    if addresses.is_empty() || namespaces.is_empty() {
        return Err(AgentError::Enrolment(format!(
            "Secret {}/{secret_name}: addresses and namespaces must not be empty",
            args.namespace
        )));
    }
    Ok(Enrolment {
        addresses,
        token: text("token")?.into(),
        namespaces,
        cluster: upstream
            .spec
            .cluster_name
            .clone()
            .unwrap_or_else(|| args.upstream.clone()),
        labels: upstream.spec.labels.clone(),
        ca: data.get("ca.crt").map(|v| v.0.clone()),
    })
}

impl Agent {
    fn channel(
        &self,
        address: &str,
        timeout: Duration,
    ) -> Result<tonic::transport::Channel, AgentError> {
        starling_transport::channel_via(address, timeout, self.connector.as_ref()).map_err(
            |source| AgentError::Address {
                address: address.to_owned(),
                source,
            },
        )
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        starling_transport::with_bearer(
            tonic::Request::new(message),
            Some(self.enrolment.token.expose()),
        )
    }

    /// Registers the clusters, trying the replicas in turn with back-off, until one accepts.
    async fn register_until_done(&self) -> Vec<String> {
        let mut backoff = MIN_BACKOFF;
        let mut attempt = 0usize;
        loop {
            let address = &self.enrolment.addresses[attempt % self.enrolment.addresses.len()];
            attempt += 1;
            match self.register(address).await {
                Ok(clusters) => return clusters,
                Err(error) => {
                    tracing::warn!(%address, class = error.class(), %error, "registration failed; retrying");
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    async fn register(&self, address: &str) -> Result<Vec<String>, AgentError> {
        let mut client =
            proto::agent_client::AgentClient::new(self.channel(address, CALL_TIMEOUT)?);
        let reply = client
            .register(self.request(proto::RegisterRequest {
                cluster: self.enrolment.cluster.clone(),
                namespaces: self.enrolment.namespaces.clone(),
                labels: self.enrolment.labels.clone().into_iter().collect(),
            }))
            .await
            .map_err(AgentError::refused)?;
        Ok(reply.into_inner().clusters)
    }

    /// Keeps the stream of `cluster` attached, to the replicas in turn, for ever.
    ///
    /// With more than one address the agent asks to attach to the cluster's owner itself: a
    /// replica that does not own the cluster names the owner, and the agent goes there at once
    /// when the owner's address is one of its own (the Upstream lists the replicas'
    /// `--advertise` addresses). Otherwise, or when the owner named stays out of reach, the
    /// next attempts let a replica forward the stream, as with a single address (a load
    /// balancer), until a stream was up.
    async fn serve(self: Arc<Self>, cluster: String, first: usize) {
        let addresses = &self.enrolment.addresses;
        let may_go_direct = addresses.len() > 1;
        let mut backoff = MIN_BACKOFF;
        let mut attempt = first;
        let mut direct = may_go_direct;
        // The owner's address a replica named, tried next.
        let mut named: Option<String> = None;
        let mut hops = 0;
        // The owner named last that could not be reached, and how many times in a row. The
        // replicas are told of it: they answer when the cluster has moved.
        let mut unreached: (String, u32) = (String::new(), 0);
        loop {
            let redirected = named.is_some();
            let address = named.take().unwrap_or_else(|| {
                attempt += 1;
                addresses[(attempt - 1) % addresses.len()].clone()
            });
            let started = tokio::time::Instant::now();
            let mut ceiling = MAX_BACKOFF;
            let mut attached = None;
            let gone = (direct && unreached.1 > 0).then_some(unreached.0.as_str());
            match self
                .attach(&cluster, &address, direct, gone, &mut attached)
                .await
            {
                Ok(()) => tracing::info!(%cluster, %address, "stream ended; reconnecting"),
                Err(AgentError::Elsewhere { owner, message }) if hops < MAX_HOPS => {
                    hops += 1;
                    match addresses.iter().find(|known| known.trim() == owner) {
                        Some(known) => named = Some(known.clone()),
                        None => {
                            tracing::info!(%cluster, %owner, "the owner's address is not one of \
                                the Upstream's: attaching through a replica that forwards");
                            direct = false;
                            named = Some(address);
                        }
                    }
                    tracing::debug!(%cluster, %message, "attaching to the owner");
                    continue;
                }
                Err(error) => {
                    // A cluster changing owner, or a replica down, is routine: retried soon,
                    // told quietly. Anything else is worth a warning, and backs off.
                    if error.retry_soon() {
                        ceiling = QUICK_RETRY_MAX_BACKOFF;
                        tracing::info!(%cluster, %address, %error, "reconnecting");
                    } else {
                        tracing::warn!(%cluster, %address, %error, "stream failed; reconnecting");
                    }
                    if error.unknown_cluster() {
                        let _ = self.register(&address).await;
                    }
                    // A redirect past MAX_HOPS reached a replica that named the owner: not a
                    // failure to reach that owner.
                    let reached = matches!(error, AgentError::Elsewhere { .. });
                    if redirected && attached.is_none() && !reached {
                        // The owner named could not be reached. Right after it died that
                        // passes when its clusters move; an owner that stays out of reach
                        // (a network that lets the agent reach only some replicas) is
                        // reached through a replica that forwards.
                        if unreached.0 == address.trim() {
                            unreached.1 += 1;
                        } else {
                            unreached = (address.trim().to_owned(), 1);
                        }
                        if unreached.1 >= OWNER_UNREACHED {
                            tracing::info!(%cluster, owner = %address, "the owner cannot be \
                                reached from here: attaching through a replica that forwards");
                            direct = false;
                        }
                    }
                }
            }
            hops = 0;
            // A stream that was up for a while ended: its owner or the replica forwarding it
            // went, or the cluster moved. The next replica is tried soon, not after the pauses
            // earlier failures built up (they put a tail of 15 s on re-attaching after a leader
            // kill). A stream that ends as soon as it is up still backs off.
            if started.elapsed() > Duration::from_secs(10)
                || attached.is_some_and(|at: tokio::time::Instant| at.elapsed() >= STREAM_LIVED)
            {
                backoff = MIN_BACKOFF;
            }
            if attached.is_some() {
                direct = may_go_direct;
                unreached.1 = 0;
            }
            // Jitter spreads thousands of agents reconnecting after a replica went.
            let jitter = rand::random::<f64>() * backoff.as_secs_f64() / 2.0;
            tokio::time::sleep(backoff + Duration::from_secs_f64(jitter)).await;
            backoff = (backoff * 2).min(ceiling);
        }
    }

    /// One stream: runs the jobs it brings until it ends; every job of it stops with it.
    /// `attached` is set when the stream is up.
    async fn attach(
        self: &Arc<Self>,
        cluster: &str,
        address: &str,
        direct: bool,
        unreached: Option<&str>,
        attached: &mut Option<tokio::time::Instant>,
    ) -> Result<(), AgentError> {
        let channel = self.channel(address, CALL_TIMEOUT)?;
        let (outbound, receiver) =
            mpsc::channel::<proto::AgentMessage>(proto::limits::SESSION_QUEUE);
        outbound
            .send(proto::AgentMessage {
                message: Some(proto::agent_message::Message::Hello(cluster.to_string())),
            })
            .await
            .map_err(|_| AgentError::Stream("stream closed".into()))?;
        let mut client = proto::agent_client::AgentClient::new(channel.clone())
            .max_decoding_message_size(proto::limits::MAX_API_MESSAGE_BYTES)
            .max_encoding_message_size(proto::limits::MAX_API_MESSAGE_BYTES);
        let mut request = self.request(tokio_stream::wrappers::ReceiverStream::new(receiver));
        if direct {
            let metadata = request.metadata_mut();
            metadata.insert(
                proto::status::DIRECT_KEY,
                tonic::metadata::MetadataValue::from_static("true"),
            );
            if let Some(value) = unreached.and_then(|gone| gone.parse().ok()) {
                metadata.insert(proto::status::UNREACHED_KEY, value);
            }
        }
        let mut dispatches = client
            .attach(request)
            .await
            .map_err(AgentError::refused)?
            .into_inner();
        tracing::info!(%cluster, %address, "attached");
        *attached = Some(tokio::time::Instant::now());
        let heard = Arc::new(Mutex::new(tokio::time::Instant::now()));
        let session = CancellationToken::new();
        let jobs: Arc<Mutex<HashMap<u64, CancellationToken>>> = Default::default();
        let mut running = tokio::task::JoinSet::new();
        let result = loop {
            let next = tokio::time::timeout(AGENT_LEASE, dispatches.next()).await;
            let dispatch = match next {
                Err(_) => {
                    break Err(AgentError::Stream(format!(
                        "nothing heard from the replica for {AGENT_LEASE:?}"
                    )));
                }
                Ok(None) => break Ok(()),
                Ok(Some(Err(status))) => {
                    break Err(AgentError::refused(status));
                }
                Ok(Some(Ok(dispatch))) => dispatch,
            };
            *lock(&heard) = tokio::time::Instant::now();
            match dispatch.message {
                Some(proto::dispatch::Message::Job(job)) => {
                    let cancel = session.child_token();
                    lock(&jobs).insert(job.job, cancel.clone());
                    let agent = self.clone();
                    let outbound = outbound.clone();
                    let heard = heard.clone();
                    let jobs = jobs.clone();
                    let channel = channel.clone();
                    running.spawn(async move {
                        let outcome_json = agent
                            .answer_job(&job.job_json, channel, cancel, heard)
                            .await;
                        lock(&jobs).remove(&job.job);
                        let _ = outbound
                            .send(proto::AgentMessage {
                                message: Some(proto::agent_message::Message::Result(
                                    proto::JobResult {
                                        job: job.job,
                                        outcome_json,
                                    },
                                )),
                            })
                            .await;
                    });
                }
                Some(proto::dispatch::Message::Cancel(job)) => {
                    if let Some(cancel) = lock(&jobs).get(&job) {
                        cancel.cancel();
                    }
                }
                Some(proto::dispatch::Message::Ping(_)) | None => {}
            }
            while running.try_join_next().is_some() {}
        };
        // The owner is gone or moved: nothing of this stream may go on writing.
        session.cancel();
        while running.join_next().await.is_some() {}
        result
    }

    /// Answers one job: a sync's outcome, or a survey's answer for `starling recover`, as
    /// JSON.
    async fn answer_job(
        &self,
        json: &[u8],
        channel: tonic::transport::Channel,
        cancel: CancellationToken,
        heard: Arc<Mutex<tokio::time::Instant>>,
    ) -> Vec<u8> {
        if let Ok(AgentJob {
            cluster_name,
            cluster_namespace,
            labels,
            survey: Some(syncs),
            ..
        }) = serde_json::from_slice::<AgentJob>(json)
        {
            let target = ClusterTarget {
                name: cluster_name,
                namespace: cluster_namespace,
                labels,
                connection: self.connection.clone(),
            };
            tracing::info!(cluster = %target.name, syncs = syncs.len(), "reading the cluster back for recovery");
            let answer: starling_sync::SurveyAnswer = self
                .engine
                .survey(&target, &syncs)
                .await
                .map_err(|error| error.to_string());
            return serde_json::to_vec(&answer).unwrap_or_default();
        }
        let outcome = self.run_job(json, channel, cancel, heard).await;
        serde_json::to_vec(&outcome).unwrap_or_default()
    }

    /// Runs one sync job; every error becomes the outcome the owner records.
    async fn run_job(
        &self,
        json: &[u8],
        channel: tonic::transport::Channel,
        cancel: CancellationToken,
        heard: Arc<Mutex<tokio::time::Instant>>,
    ) -> SyncOutcome {
        let failed = |class: &str, message: String| SyncOutcome::Failed {
            class: class.into(),
            message,
            inventory: None,
        };
        let job: AgentJob = match serde_json::from_slice(json) {
            Ok(job) => job,
            Err(error) => return failed("invalid", format!("unreadable job: {error}")),
        };
        let Ok(_slot) = self.slots.clone().acquire_owned().await else {
            return failed("unreachable", "the agent is stopping".into());
        };
        let mut _pinned = None;
        let artifact = if job.retire {
            ArtifactSource::Directory(PathBuf::new())
        } else {
            let cluster = format!("{}/{}", job.cluster_namespace, job.cluster_name);
            match self.artifact(&job.artifact, &cluster, channel).await {
                Ok((path, pinned)) => {
                    // Held until the job ends: the cache keeps what a running job uses.
                    _pinned = Some(pinned);
                    ArtifactSource::Archive(path)
                }
                // The owner could not hand the artifact over: the source side, not this
                // cluster, so the rollout waits on its source rather than skipping the cluster.
                Err(error) => {
                    return failed(fleet::state::SOURCE_UNAVAILABLE_CLASS, format!("{error:#}"));
                }
            }
        };
        let target = ClusterTarget {
            name: job.cluster_name.clone(),
            namespace: job.cluster_namespace.clone(),
            labels: job.labels.clone(),
            connection: self.connection.clone(),
        };
        let mut request = SyncRequest::new(
            &job.sync,
            target,
            job.writer.clone(),
            job.generation,
            artifact,
            job.template.clone(),
        );
        request.revision = job.revision.clone();
        request.installation = job.installation.clone();
        request.adopt = job.adopt;
        request.previous_inventory = job.previous_inventory.clone();
        request.wait = job.wait;
        request.retire = job.retire;
        request.cancel = cancel;
        request.render = job.render.clone();
        request.record = match (&job.revision, &job.record_digest) {
            (Some(revision), Some(digest)) => Some(starling_sync::inventory::MirrorRecord {
                revision: revision.clone(),
                digest: digest.clone(),
            }),
            _ => None,
        };
        // The agent's lease: as long as the owner keeps talking, and AGENT_LEASE after.
        request.lease = Some(starling_sync::LeaseEnd::new(move || {
            Some(*lock(&heard) + AGENT_LEASE)
        }));
        tracing::info!(sync = %job.sync, revision = ?job.revision, generation = job.generation, "applying");
        starling_sync::outcome_of(self.engine.sync(request).await).0
    }

    /// The artifact `digest`, from the cache or fetched from the replica (digest verified).
    /// The artifact `digest`, pinned for the job, from the cache or fetched from the replica
    /// (digest verified). The job's cluster (`namespace/name`) tells the replica which of its
    /// artifacts this is.
    async fn artifact(
        &self,
        digest: &str,
        cluster: &str,
        channel: tonic::transport::Channel,
    ) -> Result<(PathBuf, cache::Pinned), AgentError> {
        let digest: source::Digest = digest
            .parse()
            .map_err(|_| AgentError::Artifact("the job names no valid artifact digest".into()))?;
        let pinned = self.cache.pin(digest);
        if !self.cache.store().contains(&digest) {
            let mut client = proto::agent_client::AgentClient::new(channel)
                .max_decoding_message_size(proto::limits::MAX_API_MESSAGE_BYTES);
            let chunks = client
                .fetch_artifact(self.request(proto::FetchRequest {
                    digest: digest.to_string(),
                    cluster: cluster.to_string(),
                }))
                .await
                .map_err(|status| {
                    AgentError::Artifact(format!(
                        "cannot fetch artifact {digest}: {}",
                        status.message()
                    ))
                })?
                .into_inner()
                .map(|chunk| chunk.map(|c| c.data));
            self.cache
                .store()
                .import_stream(digest, proto::limits::MAX_ARTIFACT_BYTES, chunks)
                .await
                .map_err(|error| {
                    AgentError::Artifact(format!("cannot fetch artifact {digest}: {error}"))
                })?;
            self.cache.fetched(digest);
        }
        Ok((self.cache.path_of(&digest), pinned))
    }
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_moving_owner_or_a_replica_down_is_told_from_other_refusals() {
        use super::AgentError;
        use tonic::Status;
        for moving in [
            Status::unavailable("Cluster default/edge-1 has no owner yet; retry"),
            Status::unavailable("Cluster default/edge-1 moved to another replica; reconnect"),
            // What the client reports when the replica tried is down.
            Status::unavailable("tcp connect error"),
        ] {
            let error = AgentError::refused(moving.clone());
            assert!(error.retry_soon(), "{moving}");
            assert!(!error.unknown_cluster());
            assert_eq!(error.to_string(), moving.message());
        }
        let unknown = AgentError::refused(Status::not_found(
            "Cluster default/edge-1 not found: register it first",
        ));
        assert!(unknown.unknown_cluster() && !unknown.retry_soon());
        let denied = AgentError::refused(Status::permission_denied(
            "token 3a1f holds Cluster default/edge-2",
        ));
        assert!(!denied.retry_soon() && !denied.unknown_cluster());
    }
}

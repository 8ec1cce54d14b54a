//! The public handle of a running fleetsim ([`FleetSim`]) and the state its server,
//! controller and admin API share ([`Shared`]). Every control the admin HTTP API offers
//! is a method here first.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::net::TcpSocket;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::audit::{AuditFilter, AuditLog, AuditRecord, AuditStats, Origin};
use crate::cluster::{Behaviour, Cluster, Registry};
use crate::config::Config;
use crate::error::{ApiError, FleetSimError};
use crate::faults::{Fault, FaultKind, FaultState};
use crate::ids;
use crate::jobs::Controller;
use crate::kubeconfig;
use crate::managed::Scope;
use crate::ops::{self, Actor, Write, WriteRequest};
use crate::resources::{ResourceInfo, split_api_version};
pub(crate) use crate::shared::Shared;
use crate::store::delete::DeleteOptions;
use crate::store::list::ListQuery;

/// The field manager of writes made through [`FleetSim::set_object`].
pub const DRIFT_MANAGER: &str = "fleetsim-drift";

/// Totals over all clusters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub clusters: usize,
    pub objects: usize,
    /// Serialized size of every stored object.
    pub object_bytes: usize,
    /// Events kept for watches, over all clusters.
    pub history_events: usize,
    pub audit: AuditStats,
    pub pending_controller_jobs: usize,
    /// TCP connections open now.
    pub connections_open: u64,
    /// TCP connections accepted since start.
    pub connections_total: u64,
    /// TLS handshakes that verified the certificate chain (full) and that resumed a session.
    pub tls_full_handshakes: u64,
    pub tls_resumed_handshakes: u64,
    /// Collection reads (LIST) and watches served since start, over all clusters.
    pub lists_total: u64,
    pub watches_total: u64,
}

fn missing(name: &str) -> FleetSimError {
    FleetSimError::ClusterNotFound(name.to_string())
}

impl Shared {
    pub fn cluster(&self, name: &str) -> Result<Arc<Cluster>, FleetSimError> {
        self.registry.get(name).ok_or_else(|| missing(name))
    }

    pub fn cluster_url(&self, name: &str) -> String {
        format!("{}/clusters/{name}", self.base_url)
    }

    pub fn add_cluster(&self, name: &str) -> Result<String, FleetSimError> {
        if !ids::is_dns_label(name) {
            return Err(FleetSimError::InvalidClusterName(name.to_string()));
        }
        let cluster = Arc::new(Cluster::new(name, self.config.watch_history));
        if !self.registry.insert(cluster) {
            return Err(FleetSimError::ClusterExists(name.to_string()));
        }
        Ok(self.cluster_url(name))
    }

    pub fn remove_cluster(&self, name: &str) -> Result<(), FleetSimError> {
        self.registry
            .remove(name)
            .map(|_| ())
            .ok_or_else(|| missing(name))
    }

    pub fn set_fault(&self, name: &str, fault: &Fault) -> Result<(), FleetSimError> {
        fault.validate()?;
        self.cluster(name)?.update_faults(|f| f.set(fault));
        Ok(())
    }

    pub fn clear_fault(&self, name: &str, kind: Option<FaultKind>) -> Result<(), FleetSimError> {
        self.cluster(name)?.update_faults(|f| match kind {
            Some(kind) => f.clear(kind),
            None => *f = FaultState::default(),
        });
        Ok(())
    }

    pub fn set_behaviour(&self, name: &str, behaviour: Behaviour) -> Result<(), FleetSimError> {
        let cluster = self.cluster(name)?;
        cluster.update_behaviour(|b| {
            b.never_ready = behaviour.never_ready;
            b.ready_delay_ms = behaviour.ready_delay_ms;
        });
        self.controller.resync_cluster(self, &cluster);
        Ok(())
    }

    pub fn set_object_never_ready(
        &self,
        cluster: &str,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        never_ready: bool,
    ) -> Result<(), FleetSimError> {
        let handle = self.cluster(cluster)?;
        let info = self.resolve_kind(&handle, api_version, kind)?;
        let namespace = if info.namespaced {
            namespace.unwrap_or("default")
        } else {
            ""
        };
        let key = format!("{}/{namespace}/{name}", info.storage_key);
        handle.update_behaviour(|b| {
            if never_ready {
                b.never_ready_objects.insert(key);
            } else {
                b.never_ready_objects.remove(&key);
            }
        });
        self.controller.resync_cluster(self, &handle);
        Ok(())
    }

    pub fn resolve_kind(
        &self,
        cluster: &Cluster,
        api_version: &str,
        kind: &str,
    ) -> Result<Arc<ResourceInfo>, FleetSimError> {
        let (group, version) = split_api_version(api_version);
        cluster
            .read(|s| s.resolve_kind(group, version, kind))
            .ok_or_else(|| {
                FleetSimError::from(ApiError::new(
                    404,
                    "NotFound",
                    format!("no resource of kind {kind:?} is served at {api_version:?}"),
                ))
            })
    }

    pub fn get_object(
        &self,
        name: &str,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        object: &str,
    ) -> Result<Option<Value>, FleetSimError> {
        let cluster = self.cluster(name)?;
        let info = self.resolve_kind(&cluster, api_version, kind)?;
        let namespace = if info.namespaced {
            namespace.unwrap_or("default")
        } else {
            ""
        };
        Ok(cluster
            .read(|s| s.get(&info, namespace, object))
            .map(|o| o.value()))
    }

    pub fn list_objects(
        &self,
        name: &str,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Result<Vec<Value>, FleetSimError> {
        let cluster = self.cluster(name)?;
        let info = self.resolve_kind(&cluster, api_version, kind)?;
        let query = ListQuery {
            namespace: namespace.filter(|_| info.namespaced).map(str::to_string),
            ..ListQuery::default()
        };
        let page = cluster.read(|s| s.list(&info, &query))?;
        Ok(page.items.iter().map(|o| o.value()).collect())
    }

    /// Creates or replaces an object outside any client (drift), audited as `admin`.
    pub fn set_object(&self, name: &str, object: Value) -> Result<Value, FleetSimError> {
        self.set_object_as(name, DRIFT_MANAGER, object)
    }

    /// [`Shared::set_object`] as field manager `manager`.
    pub fn set_object_as(
        &self,
        name: &str,
        manager: &str,
        object: Value,
    ) -> Result<Value, FleetSimError> {
        let cluster = self.cluster(name)?;
        let text = |pointer: &str| {
            object
                .pointer(pointer)
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let (Some(api_version), Some(kind), Some(object_name)) =
            (text("/apiVersion"), text("/kind"), text("/metadata/name"))
        else {
            return Err(
                ApiError::bad_request("apiVersion, kind and metadata.name are required").into(),
            );
        };
        let info = self.resolve_kind(&cluster, &api_version, &kind)?;
        let namespace = if info.namespaced {
            text("/metadata/namespace").unwrap_or_else(|| "default".to_string())
        } else {
            String::new()
        };
        let exists = cluster
            .read(|s| s.get(&info, &namespace, &object_name))
            .is_some();
        let mut body = object.clone();
        if let Some(Value::Object(metadata)) = body.get_mut("metadata") {
            metadata.remove("resourceVersion");
        }
        let request = |write| WriteRequest {
            info: info.clone(),
            namespace: namespace.clone(),
            write,
            manager: Some(manager.to_string()),
            dry_run: false,
            actor: Actor::of(Origin::Admin),
        };
        let write = if exists {
            Write::Update {
                name: object_name.clone(),
                body: body.clone(),
                scope: crate::store::meta::scope_of(&info, false),
            }
        } else {
            Write::Create { body: body.clone() }
        };
        let mut outcome = ops::write(self, &cluster, request(write))?;
        if info.has_status && body.get("status").is_some() {
            let mut with_status = outcome.object.value();
            with_status["status"] = body["status"].clone();
            let write = Write::Update {
                name: object_name,
                body: with_status,
                scope: Scope::Status,
            };
            outcome = ops::write(self, &cluster, request(write))?;
        }
        Ok(outcome.object.value())
    }

    pub fn delete_object(
        &self,
        name: &str,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        object: &str,
    ) -> Result<bool, FleetSimError> {
        let cluster = self.cluster(name)?;
        let info = self.resolve_kind(&cluster, api_version, kind)?;
        let namespace = if info.namespaced {
            namespace.unwrap_or("default").to_string()
        } else {
            String::new()
        };
        let request = WriteRequest {
            info,
            namespace,
            write: Write::Delete {
                name: object.to_string(),
                options: DeleteOptions::default(),
            },
            manager: None,
            dry_run: false,
            actor: Actor::of(Origin::Admin),
        };
        match ops::write(self, &cluster, request) {
            Ok(_) => Ok(true),
            Err(error) if error.code == 404 => Ok(false),
            Err(error) => Err(error.into()),
        }
    }

    pub fn kubeconfig(&self, name: &str) -> Result<String, FleetSimError> {
        self.cluster(name)?;
        Ok(kubeconfig::render(
            &[(name.to_string(), self.cluster_url(name))],
            self.tls.as_ref().map(|tls| tls.ca_pem.as_str()),
        ))
    }

    pub fn combined_kubeconfig(&self) -> String {
        let clusters: Vec<(String, String)> = self
            .registry
            .names()
            .into_iter()
            .map(|n| {
                let url = self.cluster_url(&n);
                (n, url)
            })
            .collect();
        kubeconfig::render(&clusters, self.tls.as_ref().map(|tls| tls.ca_pem.as_str()))
    }

    pub fn stats(&self) -> Stats {
        let clusters = self.registry.all();
        Stats {
            clusters: clusters.len(),
            objects: clusters.iter().map(|c| c.read(|s| s.object_count())).sum(),
            object_bytes: clusters
                .iter()
                .map(|c| {
                    c.read(|s| {
                        s.tables
                            .values()
                            .flat_map(|t| t.values())
                            .map(|o| o.json.len())
                            .sum::<usize>()
                    })
                })
                .sum(),
            history_events: clusters.iter().map(|c| c.read(|s| s.history.len())).sum(),
            audit: self.audit.stats(),
            pending_controller_jobs: self.controller.pending(),
            connections_open: self.connections_open.load(Ordering::Relaxed),
            connections_total: self.connections_total.load(Ordering::Relaxed),
            tls_full_handshakes: self.tls_full_handshakes.load(Ordering::Relaxed),
            tls_resumed_handshakes: self.tls_resumed_handshakes.load(Ordering::Relaxed),
            lists_total: self.lists_total.load(Ordering::Relaxed),
            watches_total: self.watches_total.load(Ordering::Relaxed),
        }
    }
}

/// A running fleetsim: one HTTP server hosting many virtual clusters.
#[derive(Debug)]
pub struct FleetSim {
    shared: Arc<Shared>,
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl FleetSim {
    /// Binds the listen address, creates the initial clusters and starts serving.
    pub async fn start(config: Config) -> Result<FleetSim, FleetSimError> {
        config.validate()?;
        let listen_error = |source| FleetSimError::Listen {
            addr: config.listen.to_string(),
            source,
        };
        let socket = if config.listen.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
        .map_err(listen_error)?;
        socket.set_reuseaddr(true).map_err(listen_error)?;
        socket.bind(config.listen).map_err(listen_error)?;
        let listener = socket.listen(4096).map_err(listen_error)?;
        let addr = listener.local_addr().map_err(listen_error)?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let tls = if config.tls {
            Some(Arc::new(crate::tls::ServerTls::new(addr)?))
        } else {
            None
        };
        let shared = Arc::new(Shared {
            audit: AuditLog::new(config.audit_capacity),
            registry: Registry::default(),
            controller: Controller::default(),
            base_url: format!("{}://{addr}", if tls.is_some() { "https" } else { "http" }),
            tls,
            server_address: addr.to_string(),
            shutdown: shutdown_rx.clone(),
            connections_open: AtomicU64::new(0),
            connections_total: AtomicU64::new(0),
            tls_full_handshakes: AtomicU64::new(0),
            tls_resumed_handshakes: AtomicU64::new(0),
            lists_total: AtomicU64::new(0),
            watches_total: AtomicU64::new(0),
            config,
        });
        for index in 0..shared.config.clusters {
            shared.add_cluster(&shared.config.cluster_name(index))?;
        }
        let server = tokio::spawn(crate::server::serve(listener, shared.clone()));
        let controller = tokio::spawn(Controller::run(shared.clone(), shutdown_rx));
        Ok(FleetSim {
            shared,
            addr,
            shutdown,
            tasks: vec![server, controller],
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`
    pub fn base_url(&self) -> String {
        self.shared.base_url.clone()
    }

    /// `http://127.0.0.1:PORT/clusters/NAME`, usable as a `kube::Config` cluster URL.
    pub fn cluster_url(&self, name: &str) -> String {
        self.shared.cluster_url(name)
    }

    /// The admin API base, `http://127.0.0.1:PORT/admin`.
    /// The CA (PEM) that the server's certificate chains to, when serving HTTPS.
    pub fn ca_pem(&self) -> Option<String> {
        self.shared.tls.as_ref().map(|tls| tls.ca_pem.clone())
    }

    /// A client certificate and key (PEM) signed by the run's CA, which the server accepts;
    /// `None` over plain HTTP.
    pub fn client_identity(&self, user: &str) -> Option<Result<(String, String), FleetSimError>> {
        self.shared
            .tls
            .as_ref()
            .map(|tls| tls.client_identity(user))
    }

    pub fn admin_url(&self) -> String {
        format!("{}/admin", self.shared.base_url)
    }

    pub fn cluster_names(&self) -> Vec<String> {
        self.shared.registry.names()
    }

    /// Adds an empty cluster (with the default namespaces); returns its URL.
    pub fn add_cluster(&self, name: &str) -> Result<String, FleetSimError> {
        self.shared.add_cluster(name)
    }

    /// Removes a cluster: its URL answers 404 and its watches end.
    pub fn remove_cluster(&self, name: &str) -> Result<(), FleetSimError> {
        self.shared.remove_cluster(name)
    }

    /// Switches a fault on (replacing one of the same kind).
    pub fn set_fault(&self, cluster: &str, fault: Fault) -> Result<(), FleetSimError> {
        self.shared.set_fault(cluster, &fault)
    }

    pub fn clear_fault(&self, cluster: &str, kind: FaultKind) -> Result<(), FleetSimError> {
        self.shared.clear_fault(cluster, Some(kind))
    }

    pub fn clear_faults(&self, cluster: &str) -> Result<(), FleetSimError> {
        self.shared.clear_fault(cluster, None)
    }

    pub fn faults(&self, cluster: &str) -> Result<FaultState, FleetSimError> {
        Ok(self.shared.cluster(cluster)?.faults())
    }

    /// "Down" (connections closed without answer) or "up" again.
    pub fn set_down(&self, cluster: &str, down: bool) -> Result<(), FleetSimError> {
        if down {
            self.shared.set_fault(cluster, &Fault::Down)
        } else {
            self.shared.clear_fault(cluster, Some(FaultKind::Down))
        }
    }

    /// Cluster-wide readiness behaviour (never ready, ready delay override).
    pub fn set_behaviour(&self, cluster: &str, behaviour: Behaviour) -> Result<(), FleetSimError> {
        self.shared.set_behaviour(cluster, behaviour)
    }

    pub fn set_never_ready(&self, cluster: &str, never_ready: bool) -> Result<(), FleetSimError> {
        let current = self.shared.cluster(cluster)?.behaviour();
        self.shared.set_behaviour(
            cluster,
            Behaviour {
                never_ready,
                ..current
            },
        )
    }

    /// Keeps one workload from ever becoming ready (or releases it).
    pub fn set_object_never_ready(
        &self,
        cluster: &str,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        never_ready: bool,
    ) -> Result<(), FleetSimError> {
        self.shared
            .set_object_never_ready(cluster, api_version, kind, namespace, name, never_ready)
    }

    pub fn audit(&self, filter: &AuditFilter) -> Vec<AuditRecord> {
        self.shared.audit.query(filter)
    }

    pub fn audit_stats(&self) -> AuditStats {
        self.shared.audit.stats()
    }

    pub fn get_object(
        &self,
        cluster: &str,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Value>, FleetSimError> {
        self.shared
            .get_object(cluster, api_version, kind, namespace, name)
    }

    pub fn list_objects(
        &self,
        cluster: &str,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Result<Vec<Value>, FleetSimError> {
        self.shared
            .list_objects(cluster, api_version, kind, namespace)
    }

    /// Creates or replaces an object behind every client's back (drift), as field manager
    /// [`DRIFT_MANAGER`]; a `status` in the object is written through the status
    /// subresource. Watchers see the change.
    pub fn set_object(&self, cluster: &str, object: Value) -> Result<Value, FleetSimError> {
        self.shared.set_object(cluster, object)
    }

    /// [`FleetSim::set_object`] as another field manager: an autoscaler
    /// (`kube-controller-manager`) or a webhook writing beside Starling.
    pub fn set_object_as(
        &self,
        cluster: &str,
        manager: &str,
        object: Value,
    ) -> Result<Value, FleetSimError> {
        self.shared.set_object_as(cluster, manager, object)
    }

    /// Deletes an object; false when it did not exist.
    pub fn delete_object(
        &self,
        cluster: &str,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<bool, FleetSimError> {
        self.shared
            .delete_object(cluster, api_version, kind, namespace, name)
    }

    /// Forgets a cluster's watch history: watches resuming from an older version get 410.
    pub fn compact_history(&self, cluster: &str) -> Result<(), FleetSimError> {
        self.shared.cluster(cluster)?.with_state(|s| s.compact());
        Ok(())
    }

    /// The cluster's current resourceVersion.
    pub fn resource_version(&self, cluster: &str) -> Result<u64, FleetSimError> {
        Ok(self.shared.cluster(cluster)?.read(|s| s.rv))
    }

    /// A kubeconfig YAML for one cluster.
    pub fn kubeconfig(&self, cluster: &str) -> Result<String, FleetSimError> {
        self.shared.kubeconfig(cluster)
    }

    /// One kubeconfig YAML with a context per cluster.
    pub fn combined_kubeconfig(&self) -> String {
        self.shared.combined_kubeconfig()
    }

    /// Writes `NAME.kubeconfig` for every cluster and `all.kubeconfig` with every context.
    pub fn write_kubeconfigs(&self, dir: &Path) -> Result<Vec<PathBuf>, FleetSimError> {
        let io = |path: &Path, source| FleetSimError::Io {
            path: path.display().to_string(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        let mut written = Vec::new();
        for name in self.cluster_names() {
            let path = dir.join(format!("{name}.kubeconfig"));
            std::fs::write(&path, self.shared.kubeconfig(&name)?).map_err(|e| io(&path, e))?;
            written.push(path);
        }
        let all = dir.join("all.kubeconfig");
        std::fs::write(&all, self.combined_kubeconfig()).map_err(|e| io(&all, e))?;
        written.push(all);
        Ok(written)
    }

    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// Stops serving: closes the listener, every connection and watch, and the
    /// controller.
    pub async fn shutdown(mut self) {
        self.shutdown.send_replace(true);
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
    }
}

impl Drop for FleetSim {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
    }
}

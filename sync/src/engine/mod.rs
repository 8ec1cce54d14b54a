//! The whole sync of one Sync to one cluster, and the health re-check, as the node calls them.
//!
//! ```text
//! read the source, pick the renderer (blocking pool) ─► client (cache)
//!   ─► Helm only: the target's version (cached per discovery TTL) ─► render (blocking pool,
//!      engines out of process, bounded by the node's render slots)
//!   ─► fence: CAS our generation ─► read mirrored inventory
//!   ─► plan (discovery; unknown kinds fail before any write) ─► mirror previous ∪ new
//!   ─► apply CRDs ─► wait Established + discovered ─► pre-install/pre-upgrade hooks
//!   ─► apply Namespaces, cluster-scoped, namespaced ─► wait for readiness (optional)
//!   ─► post-install/post-upgrade hooks ─► fence check ─► prune ─► mirror new ─► SyncReport
//! ```
//!
//! Helm hooks are not in the inventory; a Sync is *installed* (pre-install and post-install
//! hooks run) while nothing it applied is recorded, and *upgraded* after that.
//!
//! A retiring Sync (`SyncRequest::retire`, deleted with prune) renders nothing, so the same
//! path deletes its whole inventory, fenced like any write.
//!
//! Every request is bounded (request time-out, the sync's deadline); the whole sync is bounded
//! by the Sync's `timeout` (5m when unset). Cancelling the request's token stops the sync before
//! its next write. A failure says what failed and carries the inventory to record when the
//! cluster may hold objects the previous inventory lacks.

use std::sync::Arc;
use std::time::Duration;

use fleet::fieldpath::IgnoreRules;
use fleet::health::HealthChecks;
use fleet::resources::{ObjectRef, RenderType, SyncTemplate};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::apply::{apply_one, plan, wait_for_crds};
use crate::client::{ClientCache, ClusterTarget};
use crate::error::SyncError;
use crate::fence::{self, FENCE_NAME, FenceState};
use crate::health::{observe_all, version_of, wait_ready};
use crate::hooks::run_hooks;
use crate::inventory::{self, Mirror, normalized, removed, same};
use crate::namespaces;
use crate::order::Phase;
use crate::prune::{PruneOutcome, prune};
use crate::readiness::{ObjectHealth, least_status};
use crate::render::{HookPhase, RenderOptions, Rendered};
use crate::session::Session;

pub(crate) mod drift;
mod types;

pub use types::{
    ApplySlot, Drift, DriftedField, EngineConfig, FIELD_MANAGER, HealthReport, HealthRequest,
    LeaseEnd, RenderInputs, SYSTEM_NAMESPACE, SyncFailure, SyncReport, SyncRequest,
};

/// What a sync has done so far, kept outside its future so a time-out can still report it.
#[derive(Default)]
struct Progress {
    session: Option<Arc<Session>>,
    inventory: Option<Vec<ObjectRef>>,
    applied: usize,
    /// Every object of the render is applied; what is left is the wait and the prune.
    applied_all: bool,
}

/// Applies Syncs to clusters; one per node, shared by all its sync workers.
pub struct SyncEngine {
    config: EngineConfig,
    clients: ClientCache,
    /// Bounds the renders on the blocking pool (see [`render_threads`]).
    render_gate: Arc<tokio::sync::Semaphore>,
}

/// How many renders may run on the blocking pool at once: one per core for the work a
/// render does itself (reading the artifact, parsing YAML), plus one per engine slot for the
/// renders that wait on an engine process. Without a bound every sync that reaches its render
/// takes a blocking thread of its own (64 at once with `--max-concurrent-syncs 64`), and each
/// such thread keeps its stack and its allocator cache after its render: 58 threads and about
/// 13 MiB more resident memory per node in the 10,000-cluster rollout, for work two cores do
/// no faster.
fn render_threads(engine_slots: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    cores.max(2) + engine_slots
}

impl SyncEngine {
    pub fn new(config: EngineConfig) -> Result<SyncEngine, SyncError> {
        config.validate().map_err(|message| SyncError::Invalid {
            operation: "configure the sync engine".to_owned(),
            message,
        })?;
        let render_gate = Arc::new(tokio::sync::Semaphore::new(render_threads(
            config.render_engines.slots.max(),
        )));
        Ok(SyncEngine {
            clients: ClientCache::new(config.clients.clone()),
            render_gate,
            config,
        })
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The client cache (for stats, or to drop a cluster's client).
    pub fn clients(&self) -> &ClientCache {
        &self.clients
    }

    /// The time limit of a sync: the template's `timeout`, or the default.
    pub fn timeout_of(&self, template: &SyncTemplate) -> Result<Duration, SyncError> {
        match &template.timeout {
            None => Ok(self.config.default_timeout),
            Some(text) => fleet::duration::parse_duration(text)
                .ok()
                .filter(|timeout| !timeout.is_zero())
                .ok_or_else(|| SyncError::Invalid {
                    operation: "read the sync's timeout".to_owned(),
                    message: format!("{text:?} is not a positive duration"),
                }),
        }
    }

    /// Runs one sync to completion, failure, time-out or cancellation.
    pub async fn sync(&self, request: SyncRequest) -> Result<SyncReport, SyncFailure> {
        let started = Instant::now();
        let span = tracing::info_span!(
            "sync",
            cluster = %request.cluster.name,
            sync = %request.sync,
            revision = request.revision.as_deref().unwrap_or(""),
            generation = request.generation,
        );
        let mut progress = Progress::default();
        let outcome = match self.timeout_of(&request.template) {
            Err(error) => Err(error),
            Ok(timeout) => {
                let deadline = started + timeout;
                // Requests stop at the deadline by themselves; the outer bound is a safety net.
                let bound = timeout + self.config.clients.request_timeout;
                match tokio::time::timeout(bound, self.run(&request, deadline, &mut progress))
                    .instrument(span.clone())
                    .await
                {
                    Ok(outcome) => outcome,
                    Err(_) => Err(SyncError::Timeout {
                        operation: "sync".to_owned(),
                        after: timeout,
                    }),
                }
            }
        };
        let (requests, retries) = progress
            .session
            .as_ref()
            .map_or((0, 0), |session| (session.requests(), session.retries()));
        let duration = started.elapsed();
        match outcome {
            Ok(mut report) => {
                report.duration = duration;
                report.requests = requests;
                report.retries = retries;
                span.in_scope(|| {
                    tracing::info!(applied = report.applied, pruned = report.pruned.len(), health = ?report.health, duration_ms = duration.as_millis() as u64, "sync succeeded");
                });
                Ok(report)
            }
            Err(error) => {
                // The one redaction step: the secrets of this target leave no trace in the
                // message that status, events and logs are built from.
                let error = error.redacted(&request.redactor());
                span.in_scope(|| {
                    tracing::warn!(class = %error.class(), error = %error, duration_ms = duration.as_millis() as u64, "sync failed");
                });
                Err(SyncFailure {
                    error,
                    inventory: progress.inventory,
                    applied: progress.applied,
                    applied_all: progress.applied_all,
                    duration,
                    requests,
                    retries,
                })
            }
        }
    }

    async fn session(
        &self,
        cluster: &ClusterTarget,
        writer: &str,
        generation: u64,
        cancel: CancellationToken,
        deadline: Instant,
    ) -> Result<Session, SyncError> {
        let client = self.clients.get(cluster, writer, generation).await?;
        Ok(Session::new(
            client,
            self.config.field_manager.clone(),
            self.config.clients.request_timeout,
            self.config.request_retry.clone(),
            cancel,
            deadline,
        ))
    }

    /// A session for a sync: also bounded by the node's lease.
    async fn sync_session(
        &self,
        request: &SyncRequest,
        deadline: Instant,
    ) -> Result<Arc<Session>, SyncError> {
        let client = self
            .clients
            .get(&request.cluster, &request.writer, request.generation)
            .await?;
        let mut session = Session::new(
            client,
            self.config.field_manager.clone(),
            self.config.clients.request_timeout,
            self.config.request_retry.clone(),
            request.cancel.clone(),
            deadline,
        );
        session.lease = request.lease.clone();
        session.health_checks = Arc::new(compile_health_checks(&request.template.health_checks)?);
        Ok(Arc::new(session))
    }

    /// The render options of `request`, as a sync renders it.
    fn render_options(&self, request: &SyncRequest) -> RenderOptions {
        let mut cluster = request.cluster.context();
        cluster.annotations = request.render.cluster_annotations.clone();
        let release_name = request.render.release_name.clone().unwrap_or_else(|| {
            let name = request
                .sync
                .rsplit_once('/')
                .map_or(request.sync.as_str(), |(_, n)| n);
            name.to_owned()
        });
        RenderOptions {
            path: request.template.path.clone(),
            spec: request.template.render.clone(),
            variables: request.template.substitute.clone(),
            cluster,
            limits: self.config.render_limits,
            release_name,
            kube_version: None,
            values_from: request.render.values_from.clone(),
            engines: self.config.render_engines.clone(),
        }
    }

    /// Renders the request's artifact for its cluster: the renderer is decided first, so that
    /// only a Helm render asks the target for its version.
    async fn render(
        &self,
        request: &SyncRequest,
        session: &Session,
    ) -> Result<Rendered, SyncError> {
        let mut options = self.render_options(request);
        let prepared = self.prepare_render(request, &options).await?;
        if prepared.renderer() == RenderType::Helm {
            let discovery = session.client.discovery.clone();
            let client = session.kube();
            let version = session
                .read("read the server version", || {
                    let discovery = discovery.clone();
                    let client = client.clone();
                    async move { discovery.server_version(&client).await }
                })
                .await?;
            options.kube_version = Some(version);
        }
        self.finish_render(prepared, options).await
    }

    /// Renders as a sync would, without contacting the target: Helm's
    /// `.Capabilities.KubeVersion` is `kube_version` (the one last recorded for the cluster),
    /// the engine's default when `None`. For `starling diff`; the error is redacted with the
    /// request's secrets.
    pub async fn render_offline(
        &self,
        request: &SyncRequest,
        kube_version: Option<String>,
    ) -> Result<Rendered, SyncError> {
        let mut options = self.render_options(request);
        options.kube_version = kube_version;
        let rendered = match self.prepare_render(request, &options).await {
            Ok(prepared) => self.finish_render(prepared, options).await,
            Err(error) => Err(error),
        };
        rendered.map_err(|error| error.redacted(&request.redactor()))
    }

    async fn prepare_render(
        &self,
        request: &SyncRequest,
        options: &RenderOptions,
    ) -> Result<crate::render::Prepared, SyncError> {
        let source = request.artifact.clone();
        let options = options.clone();
        let _permit = self.render_permit().await?;
        tokio::task::spawn_blocking(move || crate::render::prepare(&source, &options))
            .await
            .map_err(render_task_failed)?
            .map_err(SyncError::from)
    }

    async fn finish_render(
        &self,
        prepared: crate::render::Prepared,
        options: RenderOptions,
    ) -> Result<Rendered, SyncError> {
        let _permit = self.render_permit().await?;
        let rendered = tokio::task::spawn_blocking(move || prepared.render(&options))
            .await
            .map_err(render_task_failed)??;
        Ok(rendered)
    }

    /// A place among the renders running on the blocking pool. The wait is bounded by the
    /// sync's own deadline, as every step of a sync is.
    async fn render_permit(&self) -> Result<tokio::sync::SemaphorePermit<'_>, SyncError> {
        self.render_gate
            .acquire()
            .await
            .map_err(|_| SyncError::Invalid {
                operation: "render".to_owned(),
                message: "the render gate is closed".to_owned(),
            })
    }

    async fn run(
        &self,
        request: &SyncRequest,
        deadline: Instant,
        progress: &mut Progress,
    ) -> Result<SyncReport, SyncError> {
        let session = self.sync_session(request, deadline).await?;
        progress.session = Some(session.clone());
        let rendered = if request.retire {
            Rendered {
                renderer: RenderType::Plain,
                objects: Vec::new(),
                namespace: None,
            }
        } else {
            self.render(request, &session).await?
        };
        // Validation refuses a malformed path at apply time; this is the engine's own guard.
        let ignored =
            IgnoreRules::compile("ignoreDifferences", &request.template.ignore_differences)
                .map_err(|errors| SyncError::Invalid {
                    operation: "read the sync's ignoreDifferences".to_owned(),
                    message: joined(&errors),
                })?;
        let system = self.config.system_namespace.as_str();
        let ours = FenceState {
            generation: request.generation,
            writer: request.writer.clone(),
            installation: request.installation.clone(),
        };
        fence::acquire(&session, system, &ours, request.adopt).await?;

        let stored = inventory::read(&session, system, &request.sync).await?;
        let stored_record = stored.as_ref().and_then(|m| m.record.clone());
        let previous = normalized(
            request
                .previous_inventory
                .iter()
                .chain(stored.iter().flat_map(|m| m.objects.iter()))
                .cloned(),
        );
        // Helm's install versus upgrade: nothing of this Sync is on record yet.
        let install = previous.is_empty() && stored_record.is_none();
        // Hooks Starling never runs (tests, delete and rollback hooks) are left out here.
        let objects: Vec<_> = rendered
            .objects
            .iter()
            .filter(|object| object.hook.as_ref().is_none_or(|hook| hook.ever_runs()))
            .cloned()
            .collect();
        let (mut hooks, mut planned): (Vec<_>, Vec<_>) =
            plan(&session, &objects, rendered.namespace.as_deref())
                .await?
                .into_iter()
                .partition(|p| p.object.hook.is_some());
        // Namespaces on request: created before anything is applied into them, and in the
        // inventory only when this Sync created them.
        let created = if request.template.create_namespace && !request.retire {
            let needed = namespaces::needed(planned.iter().chain(hooks.iter()));
            namespaces::ensure(
                &session,
                &request.sync,
                &needed,
                &previous,
                request.template.namespace_metadata.as_ref(),
            )
            .await?
        } else {
            Vec::new()
        };
        let current = normalized(planned.iter().map(|p| p.reference.clone()).chain(created));
        let pending = normalized(previous.iter().chain(current.iter()).cloned());
        progress.inventory = Some(pending.clone());
        if stored
            .as_ref()
            .is_none_or(|stored| !same(&stored.objects, &pending))
        {
            // The record stays the last completed sync's until this one completes.
            let mirror = Mirror {
                objects: pending.clone(),
                record: stored_record.clone(),
            };
            inventory::write(&session, system, &request.sync, &mirror).await?;
        }

        // A chart's release namespace is created when missing, as `helm install
        // --create-namespace` does, unless the chart makes it itself and no hook needs it
        // first. It is not in the inventory: nothing prunes it.
        if rendered.renderer == RenderType::Helm
            && let Some(namespace) = rendered.namespace.as_deref()
        {
            let templated = planned
                .iter()
                .any(|p| p.reference.kind == "Namespace" && p.reference.name == namespace);
            let needed_first =
                !crate::hooks::hooks_of(&hooks, HookPhase::BeforeApply, install).is_empty();
            if !templated || needed_first {
                fence::ensure_namespace(&session, namespace).await?;
            }
        }

        let drift_mode = request.template.drift_mode();
        let mut drift = Vec::new();
        let mut health = Vec::with_capacity(planned.len());
        let mut versions = Vec::with_capacity(planned.len());
        let crds = planned
            .iter()
            .take_while(|p| p.phase == Phase::Crds)
            .count();
        let mut hooks_run = 0;
        for index in 0..=planned.len() {
            if index == crds {
                // The CRDs are applied: their kinds may be what the rest (and the hooks) use.
                if planned
                    .iter()
                    .chain(hooks.iter())
                    .any(|p| p.resolved.is_none())
                {
                    let (defined, rest) = planned.split_at_mut(crds);
                    let waiting = rest
                        .iter_mut()
                        .chain(hooks.iter_mut())
                        .filter(|p| p.resolved.is_none())
                        .collect();
                    wait_for_crds(&session, defined, waiting, self.config.crd_timeout).await?;
                }
                hooks_run +=
                    run_hooks(&session, &hooks, HookPhase::BeforeApply, install, deadline).await?;
            }
            if index == planned.len() {
                break;
            }
            let applied = match apply_one(&session, &planned[index], drift_mode, &ignored).await {
                Ok(applied) => applied,
                Err(error @ SyncError::Invalid { .. }) => {
                    // An apply into a namespace the target lacks: say which option helps.
                    let missing = match &planned[index].reference.namespace {
                        Some(namespace) => namespaces::explain_missing(&session, namespace).await,
                        None => None,
                    };
                    return Err(missing.unwrap_or(error));
                }
                Err(error) => return Err(error),
            };
            progress.applied += 1;
            drift.extend(applied.drift);
            let (status, message) = session.status_of(&applied.live);
            health.push(ObjectHealth {
                object: planned[index].reference.clone(),
                status,
                message,
            });
            versions.push(version_of(&applied.live));
        }
        // Applied: the wait for readiness does not hold an apply slot.
        progress.applied_all = !request.retire;
        request.apply_slot.release();
        if request.wait {
            let resolved: Vec<_> = planned.iter().map(|p| p.resolved.clone()).collect();
            health = wait_ready(&session, health, &resolved, &versions, deadline).await?;
        }
        hooks_run += run_hooks(&session, &hooks, HookPhase::AfterApply, install, deadline).await?;
        if hooks_run > 0 {
            tracing::info!(hooks = hooks_run, install, "helm hooks ran");
        }

        let mut outcome = PruneOutcome::default();
        let prune_enabled = request.retire || request.template.prune.unwrap_or(true);
        let candidates = removed(&previous, &current);
        if prune_enabled && !candidates.is_empty() {
            fence::check(&session, system, &ours).await?;
            outcome = prune(&session, candidates, |object| protected(object, system)).await?;
        }
        let record = if request.retire {
            None
        } else {
            request.record.clone()
        };
        if !same(&current, &pending) || (record.is_some() && record != stored_record) {
            let mirror = Mirror {
                objects: current.clone(),
                record,
            };
            inventory::write(&session, system, &request.sync, &mirror).await?;
        }
        progress.inventory = Some(current.clone());
        Ok(SyncReport {
            inventory: current,
            health: least_status(&health),
            objects: health,
            applied: planned.len(),
            pruned: outcome.deleted,
            kept: outcome.kept,
            drift,
            duration: Duration::ZERO,
            requests: 0,
            retries: 0,
        })
    }

    /// Re-reads the readiness of a Sync's objects (drift and readiness re-checks). Reads only.
    pub async fn check_health(&self, request: HealthRequest) -> Result<HealthReport, SyncError> {
        let redactor = request.cluster.redactor();
        self.check_health_unredacted(request)
            .await
            .map_err(|error| error.redacted(&redactor))
    }

    async fn check_health_unredacted(
        &self,
        request: HealthRequest,
    ) -> Result<HealthReport, SyncError> {
        let deadline = Instant::now() + self.config.default_timeout;
        let mut session = self
            .session(
                &request.cluster,
                &request.writer,
                request.generation,
                request.cancel,
                deadline,
            )
            .await?;
        session.health_checks = Arc::new(compile_health_checks(&request.health_checks)?);
        let session = Arc::new(session);
        let objects: Vec<(ObjectRef, Option<crate::client::Resolved>)> = request
            .inventory
            .into_iter()
            .map(|object| (object, None))
            .collect();
        let health = observe_all(&session, &objects).await?;
        Ok(HealthReport {
            health: least_status(&health),
            objects: health,
        })
    }

    /// Whether a target answers at all: its API server's version, read with a client of its
    /// own (not cached) and the request time-out. For clusters known unreachable, to notice
    /// when they come back.
    pub async fn probe(&self, cluster: &ClusterTarget) -> Result<(), SyncError> {
        let probe = async {
            let (client, _) =
                crate::client::build_client(cluster, "probe", 0, &self.config.clients).await?;
            client
                .apiserver_version()
                .await
                .map(drop)
                .map_err(|error| SyncError::from_kube(&cluster.name, "probe", error))
        };
        let bound = self.config.clients.request_timeout + self.config.clients.connect_timeout;
        match tokio::time::timeout(bound, probe).await {
            Ok(result) => result.map_err(|error| error.redacted(&cluster.redactor())),
            Err(_) => Err(SyncError::Timeout {
                operation: "probe".to_owned(),
                after: bound,
            }),
        }
    }

    /// What a target holds for `starling recover`, with reads only: its fence and, for each
    /// named Sync, its inventory mirror and the least status of the mirrored objects.
    pub async fn survey(
        &self,
        cluster: &ClusterTarget,
        syncs: &[String],
    ) -> Result<TargetSurvey, SyncError> {
        self.survey_unredacted(cluster, syncs)
            .await
            .map_err(|error| error.redacted(&cluster.redactor()))
    }

    async fn survey_unredacted(
        &self,
        cluster: &ClusterTarget,
        syncs: &[String],
    ) -> Result<TargetSurvey, SyncError> {
        let deadline = Instant::now() + self.config.default_timeout;
        let session = self
            .session(cluster, "recovery", 0, CancellationToken::new(), deadline)
            .await?;
        let system = self.config.system_namespace.as_str();
        let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::namespaced(session.kube(), system);
        let fence = session
            .read("read the fence", || api.get_opt(FENCE_NAME))
            .await?
            .as_ref()
            .map(fence::state_of);
        let mut surveyed = Vec::with_capacity(syncs.len());
        for sync in syncs {
            let mirror = inventory::read(&session, system, sync).await?;
            let health = match &mirror {
                Some(mirror) if !mirror.objects.is_empty() => {
                    let objects: Vec<_> =
                        mirror.objects.iter().map(|o| (o.clone(), None)).collect();
                    least_status(&observe_all(&session, &objects).await?)
                }
                _ => fleet::resources::ResourceStatus::Unknown,
            };
            surveyed.push(SurveyedSync {
                sync: sync.clone(),
                mirror,
                health,
            });
        }
        Ok(TargetSurvey {
            fence,
            syncs: surveyed,
        })
    }
}

/// What one target holds, as [`SyncEngine::survey`] read it (also sent back by an agent).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct TargetSurvey {
    pub fence: Option<FenceState>,
    pub syncs: Vec<SurveyedSync>,
}

/// One Sync's mirror on a target and the health of the objects it lists.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct SurveyedSync {
    pub sync: String,
    pub mirror: Option<Mirror>,
    pub health: fleet::resources::ResourceStatus,
}

/// Starling's own objects, never pruned.
fn protected(object: &ObjectRef, system: &str) -> bool {
    let in_system = object.namespace.as_deref() == Some(system);
    (object.kind == "Namespace" && object.api_version == "v1" && object.name == system)
        || (in_system
            && object.kind == "ConfigMap"
            && (object.name == FENCE_NAME || object.name.starts_with("starling-inventory-")))
}

/// Errors of a spec's rules, for one message.
fn joined(errors: &[impl ToString]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// A Sync's `healthChecks`, compiled. Validation refuses an expression that does not compile;
/// this is the engine's guard.
fn compile_health_checks(
    checks: &[fleet::resources::HealthCheck],
) -> Result<HealthChecks, SyncError> {
    HealthChecks::compile("healthChecks", checks).map_err(|errors| SyncError::Invalid {
        operation: "read the sync's healthChecks".to_owned(),
        message: joined(&errors),
    })
}

fn render_task_failed(error: tokio::task::JoinError) -> SyncError {
    SyncError::Invalid {
        operation: "render".to_owned(),
        message: format!("the render task failed: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_is_validated() {
        assert!(EngineConfig::default().validate().is_ok());
        let mut config = EngineConfig::default();
        config.clients.request_timeout = Duration::ZERO;
        assert_eq!(
            config.validate().unwrap_err(),
            "request timeout must be positive"
        );
        let config = EngineConfig {
            system_namespace: "Starling_System".into(),
            ..EngineConfig::default()
        };
        assert!(
            config
                .validate()
                .unwrap_err()
                .contains("not a valid namespace")
        );
        assert!(SyncEngine::new(config).is_err());
    }

    #[test]
    fn bookkeeping_objects_are_protected() {
        let object =
            |api_version: &str, kind: &str, namespace: Option<&str>, name: &str| ObjectRef {
                api_version: api_version.into(),
                kind: kind.into(),
                namespace: namespace.map(str::to_owned),
                name: name.into(),
            };
        assert!(protected(
            &object("v1", "Namespace", None, "starling-system"),
            "starling-system"
        ));
        assert!(protected(
            &object("v1", "ConfigMap", Some("starling-system"), "starling-fence"),
            "starling-system"
        ));
        assert!(protected(
            &object(
                "v1",
                "ConfigMap",
                Some("starling-system"),
                "starling-inventory-x"
            ),
            "starling-system"
        ));
        assert!(!protected(
            &object("v1", "ConfigMap", Some("apps"), "starling-fence"),
            "starling-system"
        ));
        assert!(!protected(
            &object("v1", "Namespace", None, "apps"),
            "starling-system"
        ));
    }

    /// The node spawns syncs: their futures must be `Send + 'static` once the engine is shared.
    #[allow(dead_code)]
    fn syncs_can_be_spawned(engine: Arc<SyncEngine>, request: SyncRequest, health: HealthRequest) {
        drop(tokio::spawn(async move {
            let _ = engine.sync(request).await;
            let _ = engine.check_health(health).await;
        }));
    }

    #[tokio::test]
    async fn timeouts_come_from_the_template() {
        let engine = SyncEngine::new(EngineConfig::default()).expect("engine");
        let template = SyncTemplate {
            timeout: Some("90s".into()),
            ..SyncTemplate::default()
        };
        assert_eq!(
            engine.timeout_of(&template).expect("timeout"),
            Duration::from_secs(90)
        );
        assert_eq!(
            engine
                .timeout_of(&SyncTemplate::default())
                .expect("default"),
            Duration::from_secs(300)
        );
        let bad = SyncTemplate {
            timeout: Some("soon".into()),
            ..SyncTemplate::default()
        };
        assert_eq!(
            engine.timeout_of(&bad).unwrap_err().class(),
            crate::error::ErrorClass::Invalid
        );
    }
}

//! The engine's inputs and outputs: its configuration (every default in one place, with
//! `validate()`), a sync request and its report or failure, and the health re-check.

use std::time::Duration;

use fleet::resources::{ObjectRef, ResourceStatus, SyncTemplate};
use tokio_util::sync::CancellationToken;

use crate::client::{ClientSettings, ClusterTarget};
use crate::error::SyncError;
use crate::readiness::ObjectHealth;
use crate::render::{ArtifactSource, Engines, ReadLimits, ValuesDocument};
use crate::retry::RetryPolicy;

/// The namespace of Starling's bookkeeping objects on targets.
pub const SYSTEM_NAMESPACE: &str = "starling-system";
/// The field manager of every write.
pub const FIELD_MANAGER: &str = "starling";

/// Settings of a [`super::SyncEngine`]; every default is here.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub clients: ClientSettings,
    pub field_manager: String,
    pub system_namespace: String,
    /// Limit on a whole sync when its template sets no `timeout`.
    pub default_timeout: Duration,
    /// Limit on waiting for new CRDs to be established and discovered.
    pub crd_timeout: Duration,
    /// Retries of single requests inside a sync.
    pub request_retry: RetryPolicy,
    pub render_limits: ReadLimits,
    /// How Kustomize and Helm renders run (worker command, engine paths, process limits).
    pub render_engines: Engines,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            clients: ClientSettings::default(),
            field_manager: FIELD_MANAGER.to_owned(),
            system_namespace: SYSTEM_NAMESPACE.to_owned(),
            default_timeout: Duration::from_secs(300),
            crd_timeout: Duration::from_secs(60),
            request_retry: RetryPolicy::request_default(),
            render_limits: ReadLimits::default(),
            render_engines: Engines::default(),
        }
    }
}

impl EngineConfig {
    /// The settings for a writer holding a lease of `lease` (a replica's node lease, an
    /// agent's lease from its owner): every request to a target is bounded by a time-out of at
    /// most ¾ of it, so that no request outlives the ticket it was sent under by more than
    /// that (see the handover in `docs/architecture.md`).
    pub fn for_lease(lease: std::time::Duration) -> EngineConfig {
        let mut config = EngineConfig::default();
        let bound = lease * 3 / 4;
        config.clients.request_timeout = config.clients.request_timeout.min(bound);
        config.clients.connect_timeout = config.clients.connect_timeout.min(bound);
        config
    }

    /// Rejects settings that cannot work.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("connect timeout", self.clients.connect_timeout),
            ("request timeout", self.clients.request_timeout),
            ("default sync timeout", self.default_timeout),
            ("crd timeout", self.crd_timeout),
            ("client idle timeout", self.clients.idle_timeout),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, value)| value.is_zero()) {
            return Err(format!("{name} must be positive"));
        }
        if self.clients.max_clients == 0 {
            return Err("the client cache must hold at least one client".to_owned());
        }
        self.render_engines.validate()?;
        if self.field_manager.is_empty() {
            return Err("the field manager must not be empty".to_owned());
        }
        let valid_namespace = !self.system_namespace.is_empty()
            && self.system_namespace.len() <= 63
            && self
                .system_namespace
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !valid_namespace {
            return Err(format!(
                "system namespace {:?} is not a valid namespace name",
                self.system_namespace
            ));
        }
        Ok(())
    }
}

/// When the node's lease ends, as the node knows it at the moment of asking (`None`: it holds
/// none). A sync bounds every request by it, so that no request runs past the lease: a new
/// owner may then start once the old owner's lease is over, with nothing of the old one still
/// in flight (design section 5).
#[derive(Clone)]
/// Times are tokio's: the same clock as the node's lease, simulated in the deterministic
/// simulation and in paused-time tests.
pub struct LeaseEnd(std::sync::Arc<dyn Fn() -> Option<tokio::time::Instant> + Send + Sync>);

impl LeaseEnd {
    pub fn new(end: impl Fn() -> Option<tokio::time::Instant> + Send + Sync + 'static) -> LeaseEnd {
        LeaseEnd(std::sync::Arc::new(end))
    }

    /// The time left on the lease now (zero when it has ended or none is held).
    pub fn remaining(&self) -> Duration {
        (self.0)()
            .map(|end| end.saturating_duration_since(tokio::time::Instant::now()))
            .unwrap_or_default()
    }
}

impl std::fmt::Debug for LeaseEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LeaseEnd({:?} left)", self.remaining())
    }
}

/// A node's apply slot, held by a sync while it renders and applies and released before it
/// waits for readiness: a sync waiting for its objects to become ready does not keep another
/// from applying. Shared by the clones of a request (one slot per sync).
#[derive(Clone, Default)]
pub struct ApplySlot(std::sync::Arc<std::sync::Mutex<Option<tokio::sync::OwnedSemaphorePermit>>>);

impl ApplySlot {
    pub fn new(permit: tokio::sync::OwnedSemaphorePermit) -> ApplySlot {
        ApplySlot(std::sync::Arc::new(std::sync::Mutex::new(Some(permit))))
    }

    /// Gives the slot back (idempotent).
    pub fn release(&self) {
        let mut permit = self.0.lock().unwrap_or_else(|e| e.into_inner());
        permit.take();
    }

    /// Whether the slot is still held.
    pub fn held(&self) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }
}

impl std::fmt::Debug for ApplySlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApplySlot(held: {})", self.held())
    }
}

/// One sync: what to apply where, as whom.
#[derive(Clone, Debug)]
pub struct SyncRequest {
    /// Identifies the Sync (`<namespace>/<name>` in the management cluster); names its
    /// inventory mirror on the target.
    pub sync: String,
    pub cluster: ClusterTarget,
    /// The node's identity (`x-starling-writer`).
    pub writer: String,
    /// The owner generation of the cluster (`x-starling-generation`, the fence).
    pub generation: u64,
    /// The revision applied, for logs.
    pub revision: Option<String>,
    pub artifact: ArtifactSource,
    pub template: SyncTemplate,
    /// The inventory from the Sync's status.
    pub previous_inventory: Vec<ObjectRef>,
    /// Wait for readiness before pruning and returning.
    pub wait: bool,
    /// Cancelled when the node must stop (its lease lapsed): no write starts after that.
    pub cancel: CancellationToken,
    /// The node's lease: no request starts after it ends, and none runs past it.
    pub lease: Option<LeaseEnd>,
    /// Deleting the Sync with prune: nothing is rendered or applied, and everything in the
    /// inventory is pruned (objects marked `starling.dev/prune: disabled` stay).
    pub retire: bool,
    /// Released once the objects are applied, before the wait for readiness.
    pub apply_slot: ApplySlot,
    /// Recorded in the inventory mirror once the sync completes: the revision and render
    /// digest, which `starling recover` compares with what is desired.
    pub record: Option<crate::inventory::MirrorRecord>,
    /// The installation's identity, written into the fence: a target fenced by another
    /// installation is never written ([`crate::SyncError::OwnedByAnotherInstallation`]).
    /// Empty: none known yet (fences written by such a request carry none).
    pub installation: String,
    /// Take the target over from another installation (`starling cluster adopt`).
    pub adopt: bool,
    /// What the render needs besides the artifact and the template.
    pub render: RenderInputs,
}

/// What a render needs besides the artifact and the template, resolved by the caller from
/// the fleet state.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RenderInputs {
    /// Helm's `.Release.Name` when the template names none: the SyncGroup's name for a
    /// group's Sync; the Sync's own name (from [`SyncRequest::sync`]) when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_name: Option<String>,
    /// The target Cluster's annotations, for `${cluster.annotations.KEY}`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub cluster_annotations: std::collections::BTreeMap<String, String>,
    /// The template's `valuesFrom` documents, in order, read from the Sync's namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values_from: Vec<ValuesDocument>,
}

impl SyncRequest {
    /// Every secret value in play for this sync: the target's credentials and the values of
    /// the `valuesFrom` Secrets.
    pub fn redactor(&self) -> starling_secret::Redactor {
        let mut redactor = self.cluster.redactor();
        for document in &self.render.values_from {
            for value in document.redacted_values() {
                redactor.add_value(value.as_bytes());
            }
        }
        redactor
    }

    /// A request with an empty previous inventory, waiting for readiness, never cancelled.
    pub fn new(
        sync: impl Into<String>,
        cluster: ClusterTarget,
        writer: impl Into<String>,
        generation: u64,
        artifact: ArtifactSource,
        template: SyncTemplate,
    ) -> SyncRequest {
        SyncRequest {
            sync: sync.into(),
            cluster,
            writer: writer.into(),
            generation,
            revision: None,
            artifact,
            template,
            previous_inventory: Vec::new(),
            wait: true,
            cancel: CancellationToken::new(),
            lease: None,
            retire: false,
            apply_slot: ApplySlot::default(),
            record: None,
            installation: String::new(),
            adopt: false,
            render: RenderInputs::default(),
        }
    }
}

/// What a successful sync did.
#[derive(Clone, Debug)]
pub struct SyncReport {
    /// The objects the cluster now holds for this Sync (record in status).
    pub inventory: Vec<ObjectRef>,
    /// The least status of the applied objects (`resourcesLeastStatus`).
    pub health: ResourceStatus,
    pub objects: Vec<ObjectHealth>,
    pub applied: usize,
    pub pruned: Vec<ObjectRef>,
    /// Left in place by `starling.dev/prune: disabled`.
    pub kept: Vec<ObjectRef>,
    /// Objects with fields another field manager had changed, taken back or left as they are
    /// by the Sync's drift mode. Empty when nothing drifted.
    pub drift: Vec<Drift>,
    pub duration: Duration,
    pub requests: u64,
    pub retries: u64,
}

impl SyncReport {
    /// One line for the Sync's status when something drifted, naming the objects, fields and
    /// managers: `drift corrected: v1 ConfigMap demo/config .data.version (changed by
    /// "kubectl-edit")`, or `drift left in place (drift mode Report): …`.
    pub fn drift_message(&self) -> Option<String> {
        let describe = |drift: &Drift| {
            let object = crate::object::describe(&drift.object);
            let fields: Vec<String> = drift
                .fields
                .iter()
                .map(|field| format!("{} (changed by {:?})", field.field, field.manager))
                .collect();
            format!("{object} {}", fields.join(", "))
        };
        let list = |corrected: bool| -> Vec<String> {
            self.drift
                .iter()
                .filter(|drift| drift.corrected == corrected)
                .map(describe)
                .collect()
        };
        let (corrected, left) = (list(true), list(false));
        let mut parts = Vec::new();
        if !corrected.is_empty() {
            parts.push(format!("drift corrected: {}", corrected.join("; ")));
        }
        if !left.is_empty() {
            parts.push(format!(
                "drift left in place (drift mode Report): {}",
                left.join("; ")
            ));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

/// Fields of one applied object that another field manager had changed on the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Drift {
    pub object: ObjectRef,
    pub fields: Vec<DriftedField>,
    /// Taken back (drift mode `Correct`), or left to the other manager (`Report`).
    pub corrected: bool,
}

/// One field another manager changed, as the API server named both.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriftedField {
    /// The other field manager (`kubectl-edit`); empty when the server did not say.
    pub manager: String,
    /// The field's path (`.spec.replicas`, `.spec.template.spec.containers[name="web"].image`).
    pub field: String,
}

/// A failed sync: the error, and the inventory to record if it changed.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct SyncFailure {
    pub error: SyncError,
    /// `Some` when objects may have been applied: the previous inventory plus the new render,
    /// so that nothing applied is ever forgotten by the next prune. `None`: keep the previous.
    pub inventory: Option<Vec<ObjectRef>>,
    pub applied: usize,
    /// Every object of the render was applied before the failure (a cancellation during the
    /// wait for readiness): the target holds the new revision.
    pub applied_all: bool,
    pub duration: Duration,
    pub requests: u64,
    pub retries: u64,
}

impl SyncFailure {
    pub fn class(&self) -> crate::error::ErrorClass {
        self.error.class()
    }
}

/// A health re-check of what a Sync applied.
#[derive(Clone, Debug)]
pub struct HealthRequest {
    pub cluster: ClusterTarget,
    pub writer: String,
    pub generation: u64,
    pub inventory: Vec<ObjectRef>,
    /// The Sync's `healthChecks`: they judge the kinds they name, as in a sync.
    pub health_checks: Vec<fleet::resources::HealthCheck>,
    pub cancel: CancellationToken,
}

/// The readiness of a Sync's objects.
#[derive(Clone, Debug)]
pub struct HealthReport {
    pub health: ResourceStatus,
    pub objects: Vec<ObjectHealth>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::ValuesDocument;

    #[test]
    fn the_redactor_knows_the_values_of_values_from_secrets() {
        let target = ClusterTarget::at_url("c1", "https://127.0.0.1:6443".to_owned());
        let mut request = SyncRequest::new(
            "default/web",
            target,
            "1",
            1,
            ArtifactSource::Directory(std::path::PathBuf::new()),
            SyncTemplate::default(),
        );
        request.render.values_from = vec![
            ValuesDocument {
                origin: "Secret default/web, key values.yaml".into(),
                text: "db: {password: marker-0123456789}\n".into(),
                secret: true,
            },
            ValuesDocument {
                origin: "values.yaml".into(),
                text: "replicas: plain-value\n".into(),
                secret: false,
            },
        ];
        let scrubbed = request
            .redactor()
            .scrub("helm: wrong type for value marker-0123456789 near plain-value");
        assert!(!scrubbed.contains("marker-0123456789"), "{scrubbed}");
        assert!(scrubbed.contains("plain-value"), "{scrubbed}");
    }
}

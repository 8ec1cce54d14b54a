//! What a sync's writes go through ([`Applier`]): the sync engine (kube) in a replica, an
//! in-process target in the deterministic simulation (`chaos/tests/sim/`), which runs the
//! replica's workers unchanged.

use std::time::Duration;

use futures::future::BoxFuture;
use starling_sync::{SyncEngine, SyncFailure, SyncReport, SyncRequest};

/// Applies one Sync to its cluster, as [`SyncEngine`] does.
pub trait Applier: Send + Sync + 'static {
    /// Runs one sync to completion, failure, time-out or cancellation ([`SyncEngine::sync`]).
    fn sync(&self, request: SyncRequest) -> BoxFuture<'_, Result<SyncReport, SyncFailure>>;
    /// Drops the cached clients of clusters `keep` refuses; returns how many went.
    fn retain_clients(&self, keep: &mut dyn FnMut(&str) -> bool) -> usize;
    /// The longest one request to a cluster may take (how long a write can still land after
    /// the sync that sent it was stopped).
    fn request_timeout(&self) -> Duration;
    /// Whether a target answers ([`SyncEngine::probe`]): reads only.
    fn probe<'a>(
        &'a self,
        cluster: &'a starling_sync::ClusterTarget,
    ) -> BoxFuture<'a, Result<(), starling_sync::SyncError>>;
    /// Reads what a target holds for `starling recover` ([`SyncEngine::survey`]): reads only.
    fn survey<'a>(
        &'a self,
        cluster: &'a starling_sync::ClusterTarget,
        syncs: &'a [String],
    ) -> BoxFuture<'a, Result<starling_sync::TargetSurvey, starling_sync::SyncError>>;
    /// How the node's render cache did (`/metrics`); zero where renders run elsewhere.
    fn render_cache(&self) -> starling_sync::render::CacheStats {
        starling_sync::render::CacheStats::default()
    }
    /// Renders a sync's objects without contacting its target, for `starling diff`
    /// ([`SyncEngine::render_offline`]). Refused where renders run elsewhere.
    fn render_offline<'a>(
        &'a self,
        _request: &'a SyncRequest,
        _kube_version: Option<String>,
    ) -> BoxFuture<'a, Result<starling_sync::render::Rendered, starling_sync::SyncError>> {
        Box::pin(async {
            Err(starling_sync::SyncError::Invalid {
                operation: "render".to_owned(),
                message: "this replica has no render engines".to_owned(),
            })
        })
    }
}

impl Applier for SyncEngine {
    fn render_cache(&self) -> starling_sync::render::CacheStats {
        self.config().render_engines.cache.stats()
    }

    fn sync(&self, request: SyncRequest) -> BoxFuture<'_, Result<SyncReport, SyncFailure>> {
        Box::pin(SyncEngine::sync(self, request))
    }

    fn render_offline<'a>(
        &'a self,
        request: &'a SyncRequest,
        kube_version: Option<String>,
    ) -> BoxFuture<'a, Result<starling_sync::render::Rendered, starling_sync::SyncError>> {
        Box::pin(SyncEngine::render_offline(self, request, kube_version))
    }

    fn retain_clients(&self, keep: &mut dyn FnMut(&str) -> bool) -> usize {
        self.clients().retain(keep)
    }

    fn request_timeout(&self) -> Duration {
        self.config().clients.request_timeout
    }

    fn survey<'a>(
        &'a self,
        cluster: &'a starling_sync::ClusterTarget,
        syncs: &'a [String],
    ) -> BoxFuture<'a, Result<starling_sync::TargetSurvey, starling_sync::SyncError>> {
        Box::pin(SyncEngine::survey(self, cluster, syncs))
    }

    fn probe<'a>(
        &'a self,
        cluster: &'a starling_sync::ClusterTarget,
    ) -> BoxFuture<'a, Result<(), starling_sync::SyncError>> {
        Box::pin(SyncEngine::probe(self, cluster))
    }
}

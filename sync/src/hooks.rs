//! Helm hooks on a target: the hooks of one phase (before or after the release's objects) run
//! one by one in Helm's order, each waited for when it is a Job (to completion) or a Pod (to
//! success), and deleted as its `helm.sh/hook-delete-policy` says.
//!
//! ```text
//! for each hook (weight, kind, name):
//!   before-hook-creation (the default) ─► delete the previous one, wait until it is gone
//!   apply (server-side, forced: a hook is Starling's alone)
//!   Job / Pod ─► wait until complete ── failed or late ─► hook-failed? delete ─► sync fails
//! all succeeded ─► delete those with hook-succeeded
//! ```
//!
//! Which hooks run is `starling_render::hooks`' decision; this module only carries it out.

use std::time::Duration;

use fleet::fieldpath::IgnoreRules;
use fleet::resources::{DriftMode, ResourceStatus};
use kube::api::DeleteParams;
use starling_render::{HookDeletePolicy, HookPhase};
use tokio::time::Instant;

use crate::apply::{Planned, apply_one};
use crate::error::{SyncError, is_not_found};
use crate::health::{version_of, wait_ready};
use crate::object::{describe, install_rank};
use crate::readiness::ObjectHealth;
use crate::session::Session;

const FIRST_POLL: Duration = Duration::from_millis(50);
const LAST_POLL: Duration = Duration::from_secs(1);

/// The hooks of `phase` among `hooks`, in the order Helm runs them.
pub(crate) fn hooks_of(hooks: &[Planned], phase: HookPhase, install: bool) -> Vec<&Planned> {
    let mut selected: Vec<&Planned> = hooks
        .iter()
        .filter(|planned| {
            planned
                .object
                .hook
                .as_ref()
                .is_some_and(|hook| hook.runs_in(phase, install))
        })
        .collect();
    selected.sort_by_key(|planned| {
        (
            planned.object.hook.as_ref().map_or(0, |hook| hook.weight),
            install_rank(&planned.reference.kind),
            planned.reference.name.clone(),
        )
    });
    selected
}

fn phase_name(phase: HookPhase, install: bool) -> &'static str {
    match (phase, install) {
        (HookPhase::BeforeApply, true) => "pre-install",
        (HookPhase::BeforeApply, false) => "pre-upgrade",
        (HookPhase::AfterApply, true) => "post-install",
        (HookPhase::AfterApply, false) => "post-upgrade",
    }
}

/// Runs the hooks of one phase; the number run.
pub(crate) async fn run_hooks(
    session: &Session,
    hooks: &[Planned],
    phase: HookPhase,
    install: bool,
    limit: Instant,
) -> Result<usize, SyncError> {
    let selected = hooks_of(hooks, phase, install);
    let name = phase_name(phase, install);
    for hook in &selected {
        let policy = |wanted| {
            hook.object
                .hook
                .as_ref()
                .is_some_and(|declared| declared.deleted_on(wanted))
        };
        if policy(HookDeletePolicy::BeforeHookCreation) {
            delete(session, hook, limit).await?;
        }
        tracing::info!(cluster = session.cluster(), hook = %describe(&hook.reference), phase = name, "running hook");
        let result = run_one(session, hook, limit).await;
        if let Err(error) = result {
            if policy(HookDeletePolicy::HookFailed) {
                // Best effort: the failure is what the sync reports.
                let _ = delete(session, hook, limit).await;
            }
            return Err(named(error, name, hook));
        }
    }
    for hook in &selected {
        let succeeded = hook
            .object
            .hook
            .as_ref()
            .is_some_and(|declared| declared.deleted_on(HookDeletePolicy::HookSucceeded));
        if succeeded {
            delete(session, hook, limit).await?;
        }
    }
    Ok(selected.len())
}

/// The error of a hook, saying it was one.
fn named(error: SyncError, phase: &str, hook: &Planned) -> SyncError {
    match error {
        SyncError::NotReady {
            status,
            message,
            after,
            ..
        } => SyncError::NotReady {
            object: format!("{phase} hook {}", describe(&hook.reference)),
            status,
            message,
            after,
        },
        SyncError::Invalid { operation, message } => SyncError::Invalid {
            operation: format!("run the {phase} hook ({operation})"),
            message,
        },
        other => other,
    }
}

/// Applies one hook and waits for it when it is a Job or a Pod.
async fn run_one(session: &Session, hook: &Planned, limit: Instant) -> Result<(), SyncError> {
    let applied = apply_one(session, hook, DriftMode::Correct, &IgnoreRules::default()).await?;
    let waits = matches!(
        (
            hook.reference.api_version.as_str(),
            hook.reference.kind.as_str()
        ),
        ("batch/v1", "Job") | ("v1", "Pod")
    );
    if !waits {
        return Ok(());
    }
    let (status, message) = session.status_of(&applied.live);
    let health = vec![ObjectHealth {
        object: hook.reference.clone(),
        status,
        message,
    }];
    let versions = [version_of(&applied.live)];
    let resolved = std::slice::from_ref(&hook.resolved);
    let health = wait_ready(session, health, resolved, &versions, limit).await?;
    debug_assert!(health.iter().all(|h| h.status == ResourceStatus::Current));
    Ok(())
}

/// Deletes a hook object (foreground, so a Job's Pods go with it) and waits until it is gone.
async fn delete(session: &Session, hook: &Planned, limit: Instant) -> Result<(), SyncError> {
    let Some(resolved) = &hook.resolved else {
        return Ok(());
    };
    let api = session.api(resolved, hook.reference.namespace.as_deref());
    let described = describe(&hook.reference);
    let name = hook.reference.name.as_str();
    let params = DeleteParams::foreground();
    let deleted = session
        .write(&format!("delete the hook {described}"), || async {
            match api.delete(name, &params).await {
                Ok(_) => Ok(true),
                Err(error) if is_not_found(&error) => Ok(false),
                Err(error) => Err(error),
            }
        })
        .await?;
    if !deleted {
        return Ok(());
    }
    let operation = format!("wait for the hook {described} to be deleted");
    let started = Instant::now();
    let mut delay = FIRST_POLL;
    loop {
        let live = session.read(&operation, || api.get_opt(name)).await?;
        if live.is_none() {
            return Ok(());
        }
        let now = Instant::now();
        if now + delay > limit {
            return Err(SyncError::Timeout {
                operation,
                after: started.elapsed(),
            });
        }
        session.pause(delay, &operation).await?;
        delay = (delay * 2).min(LAST_POLL);
    }
}

//! Helm hooks in the rendered output: which objects are hooks, when they run and what happens
//! to them afterwards, read from their `helm.sh/hook*` annotations as Helm reads them. The sync
//! engine orders the apply by this model.
//!
//! | hook kind | what Starling does |
//! |---|---|
//! | `pre-install`, `pre-upgrade` | applied before the release's objects (after its CRDs), in weight order; Jobs waited for to completion, Pods to success; a failure fails the sync before anything else is written |
//! | `post-install`, `post-upgrade` | applied the same way after the release's objects (after they are ready when the sync waits) |
//! | `pre-delete`, `post-delete`, `pre-rollback`, `post-rollback` | not run: a Sync is never uninstalled or rolled back as a Helm release (a rollback is a forward apply of an older revision) |
//! | `test` (`test-success`) | not run, as `helm install` does not run them |
//!
//! A Sync is *installed* when nothing it applied is recorded yet, and *upgraded* otherwise.
//! Hooks are not part of the Sync's inventory (Helm does not count them in the release either),
//! so prune never touches them; `hook-delete-policy` decides their fate: `before-hook-creation`
//! (the default when none is given) deletes the previous one before applying, `hook-succeeded`
//! deletes it once the phase succeeded, `hook-failed` when it failed.

use serde_json::Value;

/// The annotation that makes an object a hook, listing its events.
pub const HOOK_ANNOTATION: &str = "helm.sh/hook";
/// The annotation that orders hooks of one event (an integer, lowest first; 0 when unset).
pub const WEIGHT_ANNOTATION: &str = "helm.sh/hook-weight";
/// The annotation that says when a hook is deleted.
pub const DELETE_POLICY_ANNOTATION: &str = "helm.sh/hook-delete-policy";

/// When a hook runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HookEvent {
    PreInstall,
    PostInstall,
    PreUpgrade,
    PostUpgrade,
    PreDelete,
    PostDelete,
    PreRollback,
    PostRollback,
    Test,
}

impl HookEvent {
    /// The event an annotation names (`pre-install`, …); `None` for one Helm does not know.
    pub fn parse(name: &str) -> Option<HookEvent> {
        Some(match name {
            "pre-install" => HookEvent::PreInstall,
            "post-install" => HookEvent::PostInstall,
            "pre-upgrade" => HookEvent::PreUpgrade,
            "post-upgrade" => HookEvent::PostUpgrade,
            "pre-delete" => HookEvent::PreDelete,
            "post-delete" => HookEvent::PostDelete,
            "pre-rollback" => HookEvent::PreRollback,
            "post-rollback" => HookEvent::PostRollback,
            // `test-success` is the name Helm 2 used; Helm still reads it as `test`.
            "test" | "test-success" => HookEvent::Test,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::PreInstall => "pre-install",
            HookEvent::PostInstall => "post-install",
            HookEvent::PreUpgrade => "pre-upgrade",
            HookEvent::PostUpgrade => "post-upgrade",
            HookEvent::PreDelete => "pre-delete",
            HookEvent::PostDelete => "post-delete",
            HookEvent::PreRollback => "pre-rollback",
            HookEvent::PostRollback => "post-rollback",
            HookEvent::Test => "test",
        }
    }
}

/// When a hook is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HookDeletePolicy {
    /// The previous one is deleted before this one is applied.
    BeforeHookCreation,
    /// Deleted once every hook of its phase succeeded.
    HookSucceeded,
    /// Deleted when it failed.
    HookFailed,
}

impl HookDeletePolicy {
    pub fn parse(name: &str) -> Option<HookDeletePolicy> {
        Some(match name {
            "before-hook-creation" => HookDeletePolicy::BeforeHookCreation,
            "hook-succeeded" => HookDeletePolicy::HookSucceeded,
            "hook-failed" => HookDeletePolicy::HookFailed,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            HookDeletePolicy::BeforeHookCreation => "before-hook-creation",
            HookDeletePolicy::HookSucceeded => "hook-succeeded",
            HookDeletePolicy::HookFailed => "hook-failed",
        }
    }
}

/// The two moments of a sync at which hooks run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookPhase {
    /// After the CRDs, before the release's other objects.
    BeforeApply,
    /// After the release's objects (and their readiness, when the sync waits).
    AfterApply,
}

/// A hook object's annotations, as Helm reads them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hook {
    /// The events it runs on; names Helm does not know are left out, as Helm does.
    pub events: Vec<HookEvent>,
    pub weight: i32,
    /// As written; empty means Helm's default, [`HookDeletePolicy::BeforeHookCreation`].
    pub delete_policies: Vec<HookDeletePolicy>,
}

impl Hook {
    /// The hook a manifest declares; `None` for an object without `helm.sh/hook`.
    pub fn of(manifest: &Value) -> Option<Hook> {
        let annotations = manifest.pointer("/metadata/annotations")?;
        let events = annotations.get(HOOK_ANNOTATION)?;
        let text = |value: Option<&Value>| match value {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        };
        let list = |text: String| -> Vec<String> {
            text.split(',')
                .map(str::trim)
                .filter(|part| !part.is_empty())
                .map(str::to_owned)
                .collect()
        };
        let mut parsed_events: Vec<HookEvent> = list(text(Some(events)))
            .iter()
            .filter_map(|name| HookEvent::parse(name))
            .collect();
        parsed_events.dedup();
        // Helm: a weight that is not an integer counts as 0.
        let weight = text(annotations.get(WEIGHT_ANNOTATION))
            .trim()
            .parse()
            .unwrap_or(0);
        let delete_policies = list(text(annotations.get(DELETE_POLICY_ANNOTATION)))
            .iter()
            .filter_map(|name| HookDeletePolicy::parse(name))
            .collect();
        Some(Hook {
            events: parsed_events,
            weight,
            delete_policies,
        })
    }

    /// Whether it runs in `phase` of an install (nothing applied yet) or an upgrade.
    pub fn runs_in(&self, phase: HookPhase, install: bool) -> bool {
        let event = match (phase, install) {
            (HookPhase::BeforeApply, true) => HookEvent::PreInstall,
            (HookPhase::BeforeApply, false) => HookEvent::PreUpgrade,
            (HookPhase::AfterApply, true) => HookEvent::PostInstall,
            (HookPhase::AfterApply, false) => HookEvent::PostUpgrade,
        };
        self.events.contains(&event)
    }

    /// Whether Starling ever runs it (install and upgrade hooks only).
    pub fn ever_runs(&self) -> bool {
        self.events.iter().any(|event| {
            matches!(
                event,
                HookEvent::PreInstall
                    | HookEvent::PostInstall
                    | HookEvent::PreUpgrade
                    | HookEvent::PostUpgrade
            )
        })
    }

    /// Whether it is deleted under `policy`, with Helm's default when none is written.
    pub fn deleted_on(&self, policy: HookDeletePolicy) -> bool {
        if self.delete_policies.is_empty() {
            policy == HookDeletePolicy::BeforeHookCreation
        } else {
            self.delete_policies.contains(&policy)
        }
    }

    /// `pre-install,pre-upgrade (weight -5)`, as logs and `starling render` name it.
    pub fn describe(&self) -> String {
        let events: Vec<&str> = self.events.iter().map(|event| event.as_str()).collect();
        let mut text = format!("{} (weight {})", events.join(","), self.weight);
        if !self.delete_policies.is_empty() {
            let policies: Vec<&str> = self.delete_policies.iter().map(|p| p.as_str()).collect();
            text.push_str(&format!(", deleted on {}", policies.join(",")));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn annotated(annotations: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "annotations": annotations}})
    }

    #[test]
    fn hooks_are_read_as_helm_reads_them() {
        let hook = Hook::of(&annotated(json!({
            "helm.sh/hook": "pre-install, pre-upgrade,bogus",
            "helm.sh/hook-weight": " -5 ",
            "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded",
        })))
        .expect("a hook");
        assert_eq!(hook.events, [HookEvent::PreInstall, HookEvent::PreUpgrade]);
        assert_eq!(hook.weight, -5);
        assert!(hook.runs_in(HookPhase::BeforeApply, true));
        assert!(hook.runs_in(HookPhase::BeforeApply, false));
        assert!(!hook.runs_in(HookPhase::AfterApply, true));
        assert!(hook.deleted_on(HookDeletePolicy::HookSucceeded));
        assert!(!hook.deleted_on(HookDeletePolicy::HookFailed));
        assert_eq!(
            hook.describe(),
            "pre-install,pre-upgrade (weight -5), deleted on before-hook-creation,hook-succeeded"
        );
    }

    #[test]
    fn defaults_and_skipped_kinds() {
        let post = Hook::of(&annotated(
            json!({"helm.sh/hook": "post-install", "helm.sh/hook-weight": "heavy"}),
        ))
        .expect("a hook");
        assert_eq!(post.weight, 0, "a weight that is not a number is 0");
        assert!(
            post.deleted_on(HookDeletePolicy::BeforeHookCreation),
            "Helm's default"
        );
        assert!(post.runs_in(HookPhase::AfterApply, true));
        assert!(
            !post.runs_in(HookPhase::AfterApply, false),
            "not on upgrades"
        );
        let test = Hook::of(&annotated(json!({"helm.sh/hook": "test-success"}))).expect("a hook");
        assert_eq!(test.events, [HookEvent::Test]);
        assert!(!test.ever_runs());
        assert!(Hook::of(&annotated(json!({"other": "x"}))).is_none());
        assert!(Hook::of(&json!({"metadata": {"name": "x"}})).is_none());
    }
}

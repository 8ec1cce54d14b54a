//! The audit log: who changed what in the replicated state, kept in the state itself (so in
//! every snapshot, on every replica, and in `starling export`'s backups).
//!
//! ```text
//!  API call (token, admin, agent, operator) ──► Command::Audited { actor, at, keep, command }
//!      apply: generation before ─► apply(command) ─► changed? ─► AuditEntry pushed
//!             (a refused or unchanged command leaves none)      └► trimmed to `keep`
//! ```
//!
//! Entries name the actor (a token's id and tenants, never its secret), the replica that took
//! the request and the client's address, the object (kind, namespace, name), its generation
//! before and after, a digest of its spec (none for Secrets: a digest of a short value could
//! be guessed), and for operations the operation (`rollout undo`, `cluster hold`, …). The
//! bound (`--audit-entries`, `--audit-max-age`) travels in the command, so every replica trims
//! the same entries.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64;

use super::{Command, FleetState, NodeId, Outcome};
use crate::manifest::{Kind, ObjectKey, Resource};

/// `--audit-entries`'s default.
pub const DEFAULT_AUDIT_ENTRIES: u32 = 100_000;
/// `--audit-max-age`'s default: 30 days.
pub const DEFAULT_AUDIT_MAX_AGE_SECONDS: u64 = 30 * 24 * 3600;

/// Who made a change, and through which replica.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    /// `token ci`, `the admin token`, `anonymous` (an open API), `operator`, `agent token x`.
    pub name: String,
    /// The namespaces it acts in (`*`: all); empty when not a token.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tenants: Vec<String>,
    /// The replica that took the request.
    pub replica: NodeId,
    /// The client's address, when the transport knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// How much of the log is kept: the newest `entries`, none older than `max_age_seconds`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRetention {
    pub entries: u32,
    pub max_age_seconds: u64,
}

impl Default for AuditRetention {
    fn default() -> Self {
        AuditRetention {
            entries: DEFAULT_AUDIT_ENTRIES,
            max_age_seconds: DEFAULT_AUDIT_MAX_AGE_SECONDS,
        }
    }
}

/// One change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Increasing, never reused: a reader pages with it.
    pub seq: u64,
    /// When the replica took the request (RFC 3339).
    pub at: String,
    pub actor: Actor,
    /// `apply`, `delete`, `delete --orphan`, `rollout pause`, `rollout undo`, `cluster hold`,
    /// `token create`, …
    pub action: String,
    /// The object's kind (`Token` for tokens, empty for the installation itself).
    pub kind: String,
    /// Empty for what has no namespace (tokens, recovery).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_before: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_after: Option<i64>,
    /// `xxh3:…` of the spec as stored after the change; none for Secrets and deletions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_digest: Option<String>,
    /// The operation's argument (`to revision abc1234`, `role writer in team-a`), or what an
    /// apply did (`created`, `configured`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// The kept entries, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AuditLog {
    pub entries: VecDeque<AuditEntry>,
    /// The seq of the next entry.
    #[serde(default)]
    pub next_seq: u64,
}

impl AuditLog {
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.next_seq == 0
    }

    /// Drops the oldest entries past `keep` (by count, then by age at `now`).
    fn trim(&mut self, keep: &AuditRetention, now: &str) {
        while self.entries.len() > keep.entries as usize {
            self.entries.pop_front();
        }
        let Some(now) = crate::duration::unix_seconds(now) else {
            return;
        };
        let oldest_kept =
            now.saturating_sub(i64::try_from(keep.max_age_seconds).unwrap_or(i64::MAX));
        while let Some(oldest) = self.entries.front() {
            match crate::duration::unix_seconds(&oldest.at) {
                Some(at) if at < oldest_kept => {
                    self.entries.pop_front();
                }
                _ => break,
            }
        }
    }
}

/// What a command is done to, for its entry.
struct Target {
    action: String,
    key: Option<ObjectKey>,
    /// For what is not an object (tokens, recovery): its kind and name.
    other: Option<(&'static str, String)>,
    detail: String,
}

impl Target {
    fn object(action: &str, kind: Kind, key: &str, detail: String) -> Target {
        let (namespace, name) = key.split_once('/').unwrap_or(("", key));
        Target {
            action: action.to_owned(),
            key: Some(ObjectKey {
                kind,
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            }),
            other: None,
            detail,
        }
    }

    fn other(action: &str, kind: &'static str, name: String, detail: String) -> Target {
        Target {
            action: action.to_owned(),
            key: None,
            other: Some((kind, name)),
            detail,
        }
    }

    fn of(command: &Command) -> Target {
        match command {
            Command::ApplySpec { resource, .. } | Command::UpsertSpec { resource, .. } => {
                let key = resource.key();
                Target {
                    action: "apply".into(),
                    key: Some(key),
                    other: None,
                    detail: String::new(),
                }
            }
            Command::DeleteSpec { key } => Target {
                action: if matches!(key.kind, Kind::Sync | Kind::SyncGroup | Kind::Cluster) {
                    "delete --orphan".into()
                } else {
                    "delete".into()
                },
                key: Some(key.clone()),
                other: None,
                detail: String::new(),
            },
            Command::RetireSpec { key } => Target {
                action: "delete".into(),
                key: Some(key.clone()),
                other: None,
                detail: "prunes what it applied, then goes".into(),
            },
            Command::PauseRollout { group } => {
                Target::object("rollout pause", Kind::SyncGroup, group, String::new())
            }
            Command::ResumeRollout { group } => {
                Target::object("rollout resume", Kind::SyncGroup, group, String::new())
            }
            Command::PinRollout {
                group,
                revision: Some(revision),
                ..
            } => Target::object(
                "rollout undo",
                Kind::SyncGroup,
                group,
                format!("to revision {revision}"),
            ),
            Command::PinRollout { group, .. } => {
                Target::object("rollout unpin", Kind::SyncGroup, group, String::new())
            }
            Command::HoldCluster { cluster, hold, .. } => {
                let action = if *hold {
                    "cluster hold"
                } else {
                    "cluster release"
                };
                Target::object(action, Kind::Cluster, cluster, String::new())
            }
            Command::AdoptCluster { cluster, .. } => {
                Target::object("cluster adopt", Kind::Cluster, cluster, String::new())
            }
            Command::RequestPoll { source, .. } => {
                Target::object("source poll", Kind::Source, source, String::new())
            }
            Command::RecoverCluster { cluster, syncs, .. } => Target::object(
                "recover",
                Kind::Cluster,
                cluster,
                format!("{} syncs read back", syncs.len()),
            ),
            Command::RestoreHistory { group, .. } => {
                Target::object("import history", Kind::SyncGroup, group, String::new())
            }
            Command::CreateToken { id, entry } => Target::other(
                "token create",
                "Token",
                id.clone(),
                format!(
                    "role {} in {}",
                    entry.role.as_str(),
                    entry.tenants.join(",")
                ),
            ),
            Command::RevokeToken { id } => {
                Target::other("token revoke", "Token", id.clone(), String::new())
            }
            Command::SetRecovery { active } => Target::other(
                if *active {
                    "recovery start"
                } else {
                    "recovery end"
                },
                "",
                String::new(),
                String::new(),
            ),
            Command::FinishRecovery { pending } => Target::other(
                "recovery finish",
                "",
                String::new(),
                format!("{} clusters still pending", pending.len()),
            ),
            Command::AddMember { id, address, .. } => {
                Target::other("member add", "Member", id.to_string(), address.clone())
            }
            Command::RemoveMember { id } => {
                Target::other("member remove", "Member", id.to_string(), String::new())
            }
            Command::SetMemberState { id, state, .. } => Target::other(
                "member state",
                "Member",
                id.to_string(),
                format!("{state:?}"),
            ),
            Command::SetLearnerOnly { id, learner } => Target::other(
                if *learner {
                    "member learner"
                } else {
                    "member voter"
                },
                "Member",
                id.to_string(),
                String::new(),
            ),
            other => Target::other(&variant_name(other), "", String::new(), String::new()),
        }
    }
}

/// A command's variant (`AbandonOverduePrunes`), for those without an entry of their own.
fn variant_name(command: &Command) -> String {
    let debug = format!("{command:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// Whether an outcome changed the state (what the revision counts).
pub(super) fn changed(outcome: &Outcome) -> bool {
    !matches!(
        outcome,
        Outcome::Rejected { .. }
            | Outcome::Denied { .. }
            | Outcome::StaleTicket
            | Outcome::Applied(super::ApplyResult::Unchanged)
            | Outcome::Deleted { existed: false }
            | Outcome::SourceRecorded { changed: false }
            | Outcome::RegisterRefused { .. }
            | Outcome::Registered { changed: false, .. }
    )
}

/// `xxh3:` and 16 hex digits of the object's spec as JSON; none for a Secret.
fn spec_digest(resource: &Resource) -> Option<String> {
    if resource.kind() == Kind::Secret {
        return None;
    }
    let value = serde_json::to_value(resource).ok()?;
    let spec = serde_json::to_vec(value.get("spec")?).ok()?;
    Some(format!("xxh3:{:016x}", xxh3_64(&spec)))
}

impl FleetState {
    /// Applies `command` on behalf of `actor`, and records it when it changed something.
    pub(super) fn audited(
        &mut self,
        actor: Actor,
        at: String,
        keep: AuditRetention,
        command: Command,
    ) -> Outcome {
        let target = Target::of(&command);
        let before = target.key.as_ref().and_then(|key| self.get(key));
        let outcome = self.apply(command);
        if !changed(&outcome) {
            return outcome;
        }
        let after = target.key.as_ref().and_then(|key| self.get(key));
        let (kind, namespace, name) = match (&target.key, &target.other) {
            (Some(key), _) => (
                key.kind.as_str().to_owned(),
                key.namespace.clone(),
                key.name.clone(),
            ),
            (None, Some((kind, name))) => ((*kind).to_owned(), String::new(), name.clone()),
            (None, None) => Default::default(),
        };
        let mut detail = target.detail;
        if target.action == "apply" && detail.is_empty() {
            detail = match outcome {
                Outcome::Applied(super::ApplyResult::Created) => "created".into(),
                _ => "configured".into(),
            };
        }
        let entry = AuditEntry {
            seq: self.audit.next_seq,
            at: at.clone(),
            actor,
            action: target.action,
            kind,
            namespace,
            name,
            generation_before: before.as_ref().and_then(Resource::generation),
            generation_after: after.as_ref().and_then(Resource::generation),
            spec_digest: after.as_ref().and_then(spec_digest),
            detail,
        };
        self.audit.next_seq += 1;
        self.audit.entries.push_back(entry);
        self.audit.trim(&keep, &at);
        outcome
    }
}

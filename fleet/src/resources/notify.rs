//! The notification resources: a `Provider` says where to send (a webhook, a chat service, a
//! git host's commit statuses, Alertmanager), an `Alert` says what to send there (which
//! objects' events, at which severity). Named and spelled as Flux's notification-controller
//! spells them, so that users of one read the other.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Condition, LocalObjectReference};

/// The namespace whose Alerts may watch installation events (`kind: Replica`: replicas marked
/// Down, disaster recovery). A tenant's Alert cannot: those events are not its namespace's.
pub const SYSTEM_NAMESPACE: &str = "starling-system";

/// Where a Provider sends.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ProviderType {
    /// A JSON POST of each event (the Starling schema), with `X-Starling-Event-Id`.
    #[default]
    Generic,
    /// As `generic`, signed: `X-Signature: sha256=<HMAC-SHA256 of the body>` with the Secret's
    /// `token` as the key.
    #[serde(rename = "generic-hmac")]
    GenericHmac,
    Slack,
    Msteams,
    Discord,
    /// Commit statuses on GitHub (`POST /repos/{owner}/{repo}/statuses/{sha}`).
    Github,
    /// Commit statuses on GitLab (`POST /projects/{id}/statuses/{sha}`).
    Gitlab,
    /// Commit statuses on Gitea.
    Gitea,
    /// Alerts in Alertmanager (`POST /api/v2/alerts`).
    Alertmanager,
}

impl ProviderType {
    /// The name as written in a manifest (`generic-hmac`).
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderType::Generic => "generic",
            ProviderType::GenericHmac => "generic-hmac",
            ProviderType::Slack => "slack",
            ProviderType::Msteams => "msteams",
            ProviderType::Discord => "discord",
            ProviderType::Github => "github",
            ProviderType::Gitlab => "gitlab",
            ProviderType::Gitea => "gitea",
            ProviderType::Alertmanager => "alertmanager",
        }
    }

    /// Whether it writes commit statuses (rollout progress on the revision's commit) rather
    /// than messages.
    pub fn writes_commit_statuses(self) -> bool {
        matches!(
            self,
            ProviderType::Github | ProviderType::Gitlab | ProviderType::Gitea
        )
    }
}

/// Where notifications go.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "starling.dev",
    version = "v1alpha1",
    kind = "Provider",
    doc = "Where notifications go: a webhook, a chat service, a git host's commit statuses or Alertmanager.",
    category = "starling",
    namespaced,
    derive = "PartialEq",
    status = "ProviderStatus",
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".spec.type"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ProviderSpec {
    #[serde(rename = "type")]
    pub type_: ProviderType,
    /// The URL to send to (a webhook URL, or the API of a git host or Alertmanager: for
    /// github, gitlab and gitea the public services' APIs when unset). Chat webhook URLs are
    /// credentials: put them in the Secret's `address` instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// A Secret in the same namespace with `address` (overrides `spec.address`), `token` (the
    /// API token, or generic-hmac's key) and `proxy`. Never shown, logged or sent in an event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
    /// A Secret in the same namespace whose `ca.crt` is trusted for `address`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_secret_ref: Option<LocalObjectReference>,
    /// An HTTP(S) proxy for the requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<String>,
    /// Time limit of one request, as a duration; 15s when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Commit statuses: `owner/repo` (a GitLab project path or id); derived from the Source's
    /// git URL when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// Slack and Discord: the channel (where the webhook allows it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// Slack and Discord: the name the messages are posted under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Nothing is sent while true; events for it still queue (within the bound).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: the last delivery went through (or none was tried yet), or why not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Notifications dropped because more than the bound were waiting for this Provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped: Option<u64>,
}

/// The severity of an event.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum EventSeverity {
    /// Everything: progress and completion as well as errors.
    #[default]
    Info,
    /// Errors only: a halt, a failed sync, an unreachable cluster, a failed source, a replica
    /// marked Down.
    Error,
}

/// Which objects' events an Alert sends.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventSource {
    /// `SyncGroup`, `Sync`, `Source`, `Cluster`, `Replica` (installation events, for Alerts in
    /// the `starling-system` namespace), or `*` for every kind. A SyncGroup's events include
    /// those of the Syncs it generated.
    pub kind: String,
    /// The object's name, or `*` (the default) for every object of the kind in the namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Only objects with these labels (instead of `name`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
}

/// What to send to a Provider.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "starling.dev",
    version = "v1alpha1",
    kind = "Alert",
    doc = "Which events of which objects are sent to a Provider.",
    category = "starling",
    namespaced,
    derive = "PartialEq",
    status = "AlertStatus",
    printcolumn = r#"{"name":"Provider","type":"string","jsonPath":".spec.providerRef.name"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Last sent","type":"date","jsonPath":".status.lastSentTime"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AlertSpec {
    /// The Provider, in the same namespace.
    pub provider_ref: LocalObjectReference,
    /// The objects whose events are sent; an Alert sees only its own namespace's objects.
    pub event_sources: Vec<EventSource>,
    /// `info` (everything, the default) or `error` (errors only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_severity: Option<EventSeverity>,
    /// Regular expressions: when set, only events whose message matches one of them are sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inclusion_list: Vec<String>,
    /// Regular expressions: events whose message matches one of them are not sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclusion_list: Vec<String>,
    /// A line put at the top of every message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Added to every event's metadata.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub event_metadata: BTreeMap<String, String>,
    /// Nothing is queued for this Alert while true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlertStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: its Provider exists and takes its events, or why not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// When the last message of this Alert was delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sent_time: Option<String>,
}

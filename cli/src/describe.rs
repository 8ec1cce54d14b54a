//! `starling describe KIND NAME`: one object in detail, as `kubectl describe` shows it, with
//! the answer to "why is it like this?": a Sync's rollout state and what it waits for, the
//! revisions it had; a Cluster's hold, owner and Syncs; a SyncGroup's rollout and its last
//! rollouts; a Provider's destination and the names of its Secrets (never their values); an
//! Alert's Provider, sources and filters.

use anyhow::anyhow;
use fleet::manifest::{DEFAULT_NAMESPACE, Kind};
use serde_json::Value;

use super::get::{decode, parse_kind, text_at};
use super::output::{NONE, Table, emit, short_revision};
use super::rollout::RolloutView;
use super::target::Target;
use crate::client::{Client, ServerArgs, block_on};

/// How many rollouts `describe syncgroup` lists.
const ROLLOUTS_SHOWN: usize = 5;
/// How many audit entries `describe` lists.
const HISTORY_SHOWN: u32 = 10;

#[derive(clap::Args, Debug)]
pub struct DescribeArgs {
    /// sources, clusters, syncs, syncgroups, secrets, providers or alerts (singular and short
    /// names too).
    #[arg(value_parser = parse_kind)]
    pub kind: Kind,
    pub name: String,
    #[arg(short = 'n', long, default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
    #[command(flatten)]
    pub server: ServerArgs,
}

pub fn run(args: DescribeArgs) -> anyhow::Result<()> {
    let text = block_on(async {
        let client = Client::connect(&args.server).await?;
        let object = get(&client, args.kind, &args.namespace, &args.name).await?;
        let syncs = match args.kind {
            Kind::Cluster => {
                syncs(&client, &args.namespace, "starling.dev/cluster", &args.name).await?
            }
            Kind::SyncGroup => {
                syncs(
                    &client,
                    &args.namespace,
                    "starling.dev/sync-group",
                    &args.name,
                )
                .await?
            }
            _ => Vec::new(),
        };
        let mut text = describe(args.kind, &object, &syncs);
        text.push_str(&history(&client, &args).await);
        Ok(text)
    })?;
    emit(&text)
}

/// The object's last changes from the audit log (who, what, when), as a section.
async fn history(client: &Client, args: &DescribeArgs) -> String {
    let request = proto::ListAuditRequest {
        kind: args.kind.as_str().to_owned(),
        namespace: args.namespace.clone(),
        name: args.name.clone(),
        limit: HISTORY_SHOWN,
        ..Default::default()
    };
    let body = match client.list_audit(request).await {
        Ok(response) if response.entries.is_empty() => "none recorded\n".to_owned(),
        Ok(response) => {
            let mut table = Table::new(["TIME", "WHO", "ACTION", "GENERATION", "DETAIL"]);
            for entry in &response.entries {
                table.push(vec![
                    entry.at.clone(),
                    entry.actor.clone(),
                    entry.action.clone(),
                    super::audit::generations(entry),
                    entry.detail.clone(),
                ]);
            }
            table.render()
        }
        Err(error) => format!("unavailable: {error}\n"),
    };
    let mut lines = Lines(String::new());
    lines.section("History (starling audit)", &body);
    lines.0
}

async fn get(client: &Client, kind: Kind, namespace: &str, name: &str) -> anyhow::Result<Value> {
    let response = client
        .get(proto::GetRequest {
            object: Some(proto::ObjectRef {
                kind: kind.as_str().to_owned(),
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            }),
        })
        .await?;
    let object = response
        .object
        .ok_or_else(|| anyhow!("the node answered without {namespace}/{name}"))?;
    decode(&object)
}

/// The Syncs whose `label` is `value`.
async fn syncs(
    client: &Client,
    namespace: &str,
    label: &str,
    value: &str,
) -> anyhow::Result<Vec<Value>> {
    let response = client
        .list(proto::ListRequest {
            kind: Kind::Sync.as_str().to_owned(),
            namespace: namespace.to_owned(),
            name: String::new(),
            label_selector: format!("{label}={value}"),
        })
        .await?;
    response.objects.iter().map(decode).collect()
}

/// `Label:  value` lines, aligned.
struct Lines(String);

impl Lines {
    fn field(&mut self, label: &str, value: impl AsRef<str>) {
        self.0
            .push_str(&format!("{:<22}{}\n", format!("{label}:"), value.as_ref()));
    }

    /// A field only when the object has it.
    fn optional(&mut self, label: &str, object: &Value, pointer: &str) {
        let value = text_at(object, pointer);
        if value != NONE {
            self.field(label, value);
        }
    }

    fn section(&mut self, title: &str, body: &str) {
        self.0.push_str(&format!("{title}:\n"));
        for line in body.lines() {
            self.0.push_str(&format!("  {line}\n"));
        }
    }
}

pub fn describe(kind: Kind, object: &Value, syncs: &[Value]) -> String {
    let mut out = Lines(String::new());
    out.field("Name", text_at(object, "/metadata/name"));
    out.field("Namespace", text_at(object, "/metadata/namespace"));
    out.field("Kind", kind.as_str());
    let labels = object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .filter(|labels| !labels.is_empty())
        .unwrap_or_else(|| NONE.to_owned());
    out.field("Labels", labels);
    out.optional("Generation", object, "/metadata/generation");
    match kind {
        Kind::Sync => describe_sync(&mut out, object),
        Kind::Cluster => describe_cluster(&mut out, object, syncs),
        Kind::SyncGroup => describe_group(&mut out, object, syncs),
        Kind::Source => {
            let location = crate::get::source_location(object);
            if !location.is_empty() {
                out.field("URL", location);
            }
            out.optional("Revision", object, "/status/revision");
            out.optional("Artifact", object, "/status/artifact/digest");
            out.optional("Last fetch", object, "/status/lastFetchTime");
        }
        Kind::Secret => {}
        Kind::Provider => describe_provider(&mut out, object),
        Kind::Alert => describe_alert(&mut out, object),
    }
    conditions(&mut out, object);
    out.0
}

fn describe_sync(out: &mut Lines, object: &Value) {
    out.optional("Cluster", object, "/spec/clusterRef/name");
    out.optional("Source", object, "/spec/sourceRef/name");
    out.optional("Path", object, "/spec/path");
    out.optional("Pinned revision", object, "/spec/pinnedRevision");
    out.optional("State", object, "/status/rolloutState");
    out.optional("Applied revision", object, "/status/lastAppliedRevision");
    out.optional(
        "Attempted revision",
        object,
        "/status/lastAttemptedRevision",
    );
    out.optional("Last apply", object, "/status/lastApplyTime");
    out.optional("Result", object, "/status/result");
    out.optional("Message", object, "/status/message");
    out.optional("Ready", object, "/status/resourcesLeastStatus");
    if let Some(pending) = object
        .pointer("/status/pendingDependencies")
        .and_then(Value::as_array)
        .filter(|p| !p.is_empty())
    {
        let names: Vec<&str> = pending.iter().filter_map(Value::as_str).collect();
        out.field("Waiting for", names.join(", "));
    }
    let inventory = object
        .pointer("/status/inventory")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    out.field("Inventory", format!("{inventory} objects"));
    if let Some(revisions) = object
        .pointer("/status/revisionHistory")
        .and_then(Value::as_array)
        .filter(|r| !r.is_empty())
    {
        let mut table = Table::new(["REVISION", "APPLIED"]);
        for revision in revisions {
            table.push(vec![
                text_at(revision, "/revision"),
                text_at(revision, "/appliedAt"),
            ]);
        }
        out.section("Revisions (newest first)", &table.render());
    }
}

fn describe_cluster(out: &mut Lines, object: &Value, syncs: &[Value]) {
    let name = text_at(object, "/metadata/name");
    let held = object
        .pointer("/spec/hold")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    out.field(
        "Held",
        if held {
            format!("yes: no writes until `starling cluster release {name}`")
        } else {
            "no".to_owned()
        },
    );
    out.optional("Paused", object, "/spec/paused");
    out.optional("Mode", object, "/spec/mode");
    out.optional("Owner", object, "/status/owner");
    out.optional("Owner generation", object, "/status/ownerGeneration");
    out.optional("Reachable", object, "/status/reachable");
    sync_table(out, syncs);
}

fn describe_group(out: &mut Lines, object: &Value, syncs: &[Value]) {
    let namespace = text_at(object, "/metadata/namespace");
    let name = text_at(object, "/metadata/name");
    let view = RolloutView::from_object(&namespace, &name, object);
    let report =
        super::rollout::render(&view, super::output::ReportFormat::Text, false).unwrap_or_default();
    // The report's first line names the group, already shown.
    out.section(
        "Rollout",
        report
            .lines()
            .skip(1)
            .map(str::trim)
            .collect::<Vec<_>>()
            .join("\n")
            .as_str(),
    );
    let target = Target { name, namespace };
    if let Ok(history) = super::history::render(
        &target,
        &limit_history(object, ROLLOUTS_SHOWN),
        super::output::ReportFormat::Text,
    ) {
        out.section(
            "Last rollouts",
            history
                .lines()
                .skip(1)
                .collect::<Vec<_>>()
                .join("\n")
                .as_str(),
        );
    }
    // The clusters not updated, which are the ones asked about.
    let waiting: Vec<Value> = syncs
        .iter()
        .filter(|s| !text_at(s, "/status/rolloutState").starts_with("Updated"))
        .cloned()
        .collect();
    if !waiting.is_empty() {
        sync_table(out, &waiting);
    }
}

/// Where a Provider sends, and which Secrets it reads (by name: the object holds no values).
fn describe_provider(out: &mut Lines, object: &Value) {
    out.optional("Type", object, "/spec/type");
    out.optional("Address", object, "/spec/address");
    out.optional("Secret", object, "/spec/secretRef/name");
    out.optional("CA secret", object, "/spec/certSecretRef/name");
    out.optional("Proxy", object, "/spec/proxy");
    out.optional("Timeout", object, "/spec/timeout");
    out.optional("Repository", object, "/spec/repository");
    out.optional("Channel", object, "/spec/channel");
    out.optional("Username", object, "/spec/username");
    out.optional("Suspended", object, "/spec/suspend");
    out.optional("Dropped", object, "/status/dropped");
}

/// What an Alert sends, and to which Provider.
fn describe_alert(out: &mut Lines, object: &Value) {
    out.optional("Provider", object, "/spec/providerRef/name");
    let severity = text_at(object, "/spec/eventSeverity");
    out.field(
        "Severity",
        if severity == NONE { "info" } else { &severity },
    );
    out.optional("Summary", object, "/spec/summary");
    out.optional("Suspended", object, "/spec/suspend");
    out.optional("Last sent", object, "/status/lastSentTime");
    let sources = object
        .pointer("/spec/eventSources")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !sources.is_empty() {
        let mut table = Table::new(["KIND", "NAME", "LABELS"]);
        for source in &sources {
            let labels = source
                .get("matchLabels")
                .and_then(Value::as_object)
                .map(|labels| {
                    labels
                        .iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .filter(|labels| !labels.is_empty())
                .unwrap_or_else(|| NONE.to_owned());
            let name = match text_at(source, "/name") {
                name if name == NONE => "*".to_owned(),
                name => name,
            };
            table.push(vec![text_at(source, "/kind"), name, labels]);
        }
        out.section("Event sources", &table.render());
    }
    for (label, pointer) in [
        ("Inclusion list", "/spec/inclusionList"),
        ("Exclusion list", "/spec/exclusionList"),
    ] {
        let patterns: Vec<&str> = object
            .pointer(pointer)
            .and_then(Value::as_array)
            .map(|list| list.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !patterns.is_empty() {
            out.section(label, &patterns.join("\n"));
        }
    }
}

fn limit_history(object: &Value, count: usize) -> Value {
    let mut object = object.clone();
    if let Some(history) = object
        .pointer_mut("/status/history")
        .and_then(Value::as_array_mut)
    {
        history.truncate(count);
    }
    object
}

fn sync_table(out: &mut Lines, syncs: &[Value]) {
    if syncs.is_empty() {
        return;
    }
    let mut table = Table::new(["SYNC", "CLUSTER", "REVISION", "STATE"]);
    for sync in syncs {
        table.push(vec![
            text_at(sync, "/metadata/name"),
            text_at(sync, "/spec/clusterRef/name"),
            short_revision(&text_at(sync, "/status/lastAppliedRevision")),
            text_at(sync, "/status/rolloutState"),
        ]);
    }
    out.section("Syncs", &table.render());
}

fn conditions(out: &mut Lines, object: &Value) {
    let Some(conditions) = object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .filter(|c| !c.is_empty())
    else {
        return;
    };
    let mut table = Table::new(["TYPE", "STATUS", "REASON", "MESSAGE"]);
    for condition in conditions {
        table.push(vec![
            text_at(condition, "/type"),
            text_at(condition, "/status"),
            text_at(condition, "/reason"),
            text_at(condition, "/message"),
        ]);
    }
    out.section("Conditions", &table.render());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_sync_says_why_it_is_not_on_the_new_revision_and_which_revisions_it_had() {
        let sync = json!({
            "metadata": {"name": "web-c042", "namespace": "fleet", "generation": 3,
                         "labels": {"starling.dev/cluster": "c042"}},
            "spec": {"clusterRef": {"name": "c042"}, "sourceRef": {"name": "repo"}, "path": "apps",
                     "pinnedRevision": "main@sha1:aaa"},
            "status": {"rolloutState": "Held: cluster fleet/c042 is held (starling cluster release)",
                       "lastAppliedRevision": "main@sha1:aaa",
                       "revisionHistory": [{"revision": "main@sha1:aaa", "appliedAt": "2026-01-01T02:00:00Z"},
                                           {"revision": "main@sha1:bbb", "appliedAt": "2026-01-01T01:00:00Z"}]}
        });
        let text = describe(Kind::Sync, &sync, &[]);
        assert!(text.contains("Name:                 web-c042\n"), "{text}");
        assert!(
            text.contains("State:                Held: cluster fleet/c042 is held"),
            "{text}"
        );
        assert!(
            text.contains("Pinned revision:      main@sha1:aaa\n"),
            "{text}"
        );
        assert!(
            text.contains("Revisions (newest first):\n  REVISION        APPLIED\n  main@sha1:aaa"),
            "{text}"
        );
    }

    #[test]
    fn a_provider_shows_where_it_sends_and_its_secret_by_name_only() {
        let provider = json!({
            "metadata": {"name": "chat", "namespace": "team-a", "generation": 2},
            "spec": {"type": "slack", "address": "https://hooks.example.com", "secretRef": {"name": "chat-webhook"},
                     "channel": "deploys"},
            "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "SecretNotFound",
                                       "message": "secret chat-webhook (spec.secretRef) not found in namespace team-a"}]}
        });
        let text = describe(Kind::Provider, &provider, &[]);
        for line in [
            "Kind:                 Provider\n",
            "Type:                 slack\n",
            "Address:              https://hooks.example.com\n",
            "Secret:               chat-webhook\n",
            "Channel:              deploys\n",
            "SecretNotFound",
        ] {
            assert!(text.contains(line), "{line:?} missing from:\n{text}");
        }
    }

    #[test]
    fn an_alert_shows_its_provider_sources_and_filters() {
        let alert = json!({
            "metadata": {"name": "rollouts", "namespace": "team-a"},
            "spec": {"providerRef": {"name": "chat"},
                     "eventSources": [{"kind": "SyncGroup", "name": "web"}, {"kind": "Cluster", "matchLabels": {"region": "eu"}}],
                     "exclusionList": ["canary"]},
            "status": {"lastSentTime": "2026-01-01T00:00:00Z",
                       "conditions": [{"type": "Ready", "status": "True", "reason": "ProviderFound", "message": "provider chat takes its events"}]}
        });
        let text = describe(Kind::Alert, &alert, &[]);
        for line in [
            "Provider:             chat\n",
            "Severity:             info\n",
            "Last sent:            2026-01-01T00:00:00Z\n",
            "SyncGroup   web    -",
            "Cluster     *      region=eu",
            "Exclusion list:\n  canary\n",
            "ProviderFound",
        ] {
            assert!(text.contains(line), "{line:?} missing from:\n{text}");
        }
    }

    #[test]
    fn a_held_cluster_shows_its_hold_and_its_syncs() {
        let cluster = json!({
            "metadata": {"name": "c042", "namespace": "fleet"},
            "spec": {"hold": true},
            "status": {"owner": "node-2", "ownerGeneration": 4}
        });
        let sync = json!({"metadata": {"name": "web-c042"}, "spec": {"clusterRef": {"name": "c042"}},
                          "status": {"rolloutState": "Held"}});
        let text = describe(Kind::Cluster, &cluster, &[sync]);
        assert!(
            text.contains(
                "Held:                 yes: no writes until `starling cluster release c042`"
            ),
            "{text}"
        );
        assert!(text.contains("Owner:                node-2\n"), "{text}");
        assert!(text.contains("web-c042   c042"), "{text}");
    }
}

//! `starling get KIND [NAME]`: read objects from any node and print them as a table with the
//! columns of the CRDs' printer columns, as JSON or YAML (one object, or a `List`), or as
//! names.
//!
//! Objects arrive as the JSON of the Kubernetes-shaped resource and are read as plain JSON
//! values, so a newer node's extra fields pass through `-o json|yaml` untouched. A Secret's
//! `data` and `stringData` are never printed: the table shows the number of keys and the
//! JSON/YAML output drops them, whatever the node sent.

use anyhow::{Context as _, anyhow};
use fleet::manifest::{DEFAULT_NAMESPACE, Kind};
use serde_json::Value;

use super::output::{
    NONE, OutputFormat, Table, emit, object_name, short_revision, to_json, to_yaml,
};
use crate::client::{Client, ServerArgs, block_on};

#[derive(clap::Args, Debug)]
pub struct GetArgs {
    /// sources, clusters, syncs, syncgroups, secrets, providers or alerts (singular and short
    /// names too: src, scl, ssync, sg).
    #[arg(value_parser = parse_kind)]
    pub kind: Kind,
    /// One object; every object of the kind when unset.
    #[arg(conflicts_with_all = ["all_namespaces", "selector"])]
    pub name: Option<String>,
    /// The namespace to read; `default` when unset.
    #[arg(short = 'n', long, conflicts_with = "all_namespaces")]
    pub namespace: Option<String>,
    /// Read every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Only objects whose labels match (`env=prod,tier in (a,b),!canary`).
    #[arg(short = 'l', long, value_parser = parse_selector)]
    pub selector: Option<String>,
    /// Output format: text (a table), json, yaml or name.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    #[command(flatten)]
    pub server: ServerArgs,
}

pub fn parse_kind(text: &str) -> Result<Kind, String> {
    text.parse()
        .map_err(|error: fleet::manifest::DocumentError| error.to_string())
}

fn parse_selector(text: &str) -> Result<String, String> {
    fleet::selector::Selector::parse_str(text)
        .map(|_| text.to_owned())
        .map_err(|error| error.to_string())
}

pub fn run(args: GetArgs) -> anyhow::Result<()> {
    let namespace = args.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
    let fetched = block_on(async {
        let client = Client::connect(&args.server).await?;
        fetch(&client, &args, namespace).await
    })?;
    if fetched.is_empty() && args.output == OutputFormat::Text {
        match args.all_namespaces {
            true => eprintln!("no {} found", args.kind.plural()),
            false => eprintln!("no {} found in namespace {namespace}", args.kind.plural()),
        }
        return Ok(());
    }
    let single = args.name.is_some();
    emit(&render(
        args.kind,
        &fetched,
        args.output,
        args.all_namespaces,
        single,
    )?)
}

/// The objects asked for, sorted by namespace and name.
async fn fetch(client: &Client, args: &GetArgs, namespace: &str) -> anyhow::Result<Vec<Value>> {
    let kind = args.kind.as_str().to_owned();
    let objects = match &args.name {
        Some(name) => {
            let object = proto::ObjectRef {
                kind,
                namespace: namespace.to_owned(),
                name: name.clone(),
            };
            let response = client
                .get(proto::GetRequest {
                    object: Some(object),
                })
                .await?;
            let object = response.object.ok_or_else(|| {
                anyhow!("the node answered without the object {namespace}/{name}")
            })?;
            vec![object]
        }
        None => {
            let namespace = if args.all_namespaces {
                String::new()
            } else {
                namespace.to_owned()
            };
            let label_selector = args.selector.clone().unwrap_or_default();
            let request = proto::ListRequest {
                kind,
                namespace,
                name: String::new(),
                label_selector,
            };
            client.list(request).await?.objects
        }
    };
    let mut values = objects
        .iter()
        .map(decode)
        .collect::<anyhow::Result<Vec<_>>>()?;
    values.sort_by(|a, b| {
        (
            text_at(a, "/metadata/namespace"),
            text_at(a, "/metadata/name"),
        )
            .cmp(&(
                text_at(b, "/metadata/namespace"),
                text_at(b, "/metadata/name"),
            ))
    });
    Ok(values)
}

pub fn decode(object: &proto::Object) -> anyhow::Result<Value> {
    serde_json::from_slice(&object.json).with_context(|| match &object.r#ref {
        Some(key) => format!(
            "the node sent an invalid {} {}/{}",
            key.kind, key.namespace, key.name
        ),
        None => "the node sent an invalid object".to_owned(),
    })
}

/// Renders the objects in the chosen format. `single`: one object was asked for by name, so
/// JSON and YAML print it alone rather than in a `List`.
pub fn render(
    kind: Kind,
    objects: &[Value],
    format: OutputFormat,
    all_namespaces: bool,
    single: bool,
) -> anyhow::Result<String> {
    match format {
        OutputFormat::Text => Ok(table(kind, objects, all_namespaces).render()),
        OutputFormat::Name => Ok(objects
            .iter()
            .map(|object| {
                format!(
                    "{}\n",
                    object_name(kind, &text_at(object, "/metadata/name"))
                )
            })
            .collect()),
        OutputFormat::Json | OutputFormat::Yaml => {
            let mut redacted: Vec<Value> = objects.to_vec();
            if kind == Kind::Secret {
                redacted.iter_mut().for_each(redact_secret);
            }
            let document = match (single, redacted.as_slice()) {
                (true, [object]) => object.clone(),
                _ => serde_json::json!({"apiVersion": "v1", "kind": "List", "items": redacted}),
            };
            match format {
                OutputFormat::Json => to_json(&document),
                _ => to_yaml(&document),
            }
        }
    }
}

/// A Secret without its values: `data` and `stringData` are removed.
fn redact_secret(secret: &mut Value) {
    if let Some(object) = secret.as_object_mut() {
        object.remove("data");
        object.remove("stringData");
    }
}

/// The table of `starling get`, with a NAMESPACE column first when listing every namespace.
pub fn table(kind: Kind, objects: &[Value], all_namespaces: bool) -> Table {
    let headers: &[&str] = match kind {
        Kind::Source => &["NAME", "URL", "REVISION", "READY"],
        Kind::Cluster => &["NAME", "MODE", "OWNER", "GENERATION", "REACHABLE"],
        Kind::Sync => &["NAME", "CLUSTER", "REVISION", "READY", "RESULT", "STATE"],
        Kind::SyncGroup => &["NAME", "REVISION", "TOTAL", "UPDATED", "FAILED", "PHASE"],
        Kind::Secret => &["NAME", "TYPE", "KEYS"],
        Kind::Provider => &["NAME", "TYPE", "READY"],
        Kind::Alert => &["NAME", "PROVIDER", "READY", "LAST-SENT"],
    };
    let namespace_column = all_namespaces.then_some("NAMESPACE");
    let mut table = Table::new(namespace_column.iter().chain(headers).copied());
    for object in objects {
        let mut row: Vec<String> = Vec::new();
        if all_namespaces {
            row.push(text_at(object, "/metadata/namespace"));
        }
        row.push(text_at(object, "/metadata/name"));
        row.extend(columns(kind, object));
        table.push(row);
    }
    table
}

/// Where a Source is: its git url, its Helm repository's url with the chart, or its OCI url.
pub(crate) fn source_location(object: &Value) -> String {
    serde_json::from_value::<fleet::resources::SourceSpec>(object["spec"].clone())
        .map(|spec| spec.location())
        .unwrap_or_default()
}

fn columns(kind: Kind, object: &Value) -> Vec<String> {
    let at = |pointer: &str| text_at(object, pointer);
    let revision = |pointer: &str| short_revision(&at(pointer));
    match kind {
        Kind::Source => vec![
            source_location(object),
            revision("/status/revision"),
            ready_condition(object),
        ],
        Kind::Cluster => vec![
            at("/spec/mode"),
            at("/status/owner"),
            at("/status/ownerGeneration"),
            at("/status/reachable"),
        ],
        Kind::Sync => vec![
            at("/spec/clusterRef/name"),
            revision("/status/lastAppliedRevision"),
            at("/status/resourcesLeastStatus"),
            at("/status/result"),
            rollout_state(object),
        ],
        Kind::SyncGroup => vec![
            revision("/status/targetRevision"),
            at("/status/summary/total"),
            at("/status/summary/updated"),
            at("/status/summary/failed"),
            at("/status/phase"),
        ],
        Kind::Secret => {
            let secret_type = match object.pointer("/type").and_then(Value::as_str) {
                Some(secret_type) => secret_type.to_owned(),
                None => "Opaque".to_owned(),
            };
            vec![secret_type, secret_key_count(object).to_string()]
        }
        Kind::Provider => vec![at("/spec/type"), ready_condition(object)],
        Kind::Alert => vec![
            at("/spec/providerRef/name"),
            ready_condition(object),
            at("/status/lastSentTime"),
        ],
    }
}

/// A Sync's rollout state without the reason (`Pending`, `Updated`, `Retiring`, ...); the
/// reason is in `describe`.
fn rollout_state(object: &Value) -> String {
    let state = text_at(object, "/status/rolloutState");
    match state.split_once(':') {
        Some((state, _)) => state.to_owned(),
        None => state,
    }
}

/// The status of the `Ready` condition, as the CRD's printer column reads it.
fn ready_condition(object: &Value) -> String {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|conditions| {
            conditions
                .iter()
                .find(|condition| condition.get("type").and_then(Value::as_str) == Some("Ready"))
        })
        .map_or_else(
            || NONE.to_owned(),
            |condition| text_at(condition, "/status"),
        )
}

/// The number of distinct keys in `data` and `stringData`.
fn secret_key_count(secret: &Value) -> usize {
    let mut keys = std::collections::BTreeSet::new();
    for field in ["/data", "/stringData"] {
        if let Some(map) = secret.pointer(field).and_then(Value::as_object) {
            keys.extend(map.keys());
        }
    }
    keys.len()
}

/// A scalar at a JSON pointer as text; [`NONE`] when absent, null or not a scalar.
pub fn text_at(value: &Value, pointer: &str) -> String {
    match value.pointer(pointer) {
        Some(Value::String(text)) if !text.is_empty() => text.clone(),
        Some(Value::Number(number)) => number.to_string(),
        Some(Value::Bool(flag)) => flag.to_string(),
        _ => NONE.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::testing;
    use serde_json::json;

    fn source(name: &str, namespace: &str) -> Value {
        json!({
            "apiVersion": "starling.dev/v1alpha1", "kind": "Source",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"git": {"url": "https://git.example.com/app.git", "ref": {"branch": "main"}}},
            "status": {
                "revision": "main@sha1:0a1b2c3d4e5f60718293a4b5c6d7e8f901234567",
                "conditions": [{"type": "Fetched", "status": "True"}, {"type": "Ready", "status": "True"}]
            }
        })
    }

    #[test]
    fn kinds_and_selectors_are_checked_before_anything_is_sent() {
        assert_eq!(parse_kind("sg"), Ok(Kind::SyncGroup));
        assert_eq!(parse_kind("Secrets"), Ok(Kind::Secret));
        assert!(
            parse_kind("pods")
                .unwrap_err()
                .starts_with("unknown kind \"pods\"")
        );
        assert_eq!(
            parse_selector("env=prod,tier in (a,b)").as_deref(),
            Ok("env=prod,tier in (a,b)")
        );
        assert!(parse_selector("env in prod").is_err());
    }

    #[test]
    fn source_tables_show_url_short_revision_and_readiness() {
        let mut bare = source("zeta", "other");
        bare.as_object_mut().unwrap().remove("status");
        let text = table(Kind::Source, &[source("app", "default"), bare], true).render();
        assert_eq!(
            text,
            "NAMESPACE   NAME   URL                               REVISION                 READY\n\
             default     app    https://git.example.com/app.git   main@sha1:0a1b2c3d4e5f   True\n\
             other       zeta   https://git.example.com/app.git   -                        -\n"
        );
    }

    #[test]
    fn every_kind_has_its_printer_columns() {
        let cluster = json!({"metadata": {"name": "c1"}, "spec": {"mode": "push"},
            "status": {"owner": "2", "ownerGeneration": 7, "reachable": true}});
        assert_eq!(columns(Kind::Cluster, &cluster), ["push", "2", "7", "true"]);
        let sync = json!({"metadata": {"name": "web-c1"}, "spec": {"clusterRef": {"name": "c1"}},
            "status": {"lastAppliedRevision": "v1@sha1:abc", "resourcesLeastStatus": "Current", "result": "Succeeded",
                "rolloutState": "Retiring: deleted; its owner prunes what it applied"}});
        assert_eq!(
            columns(Kind::Sync, &sync),
            ["c1", "v1@sha1:abc", "Current", "Succeeded", "Retiring"]
        );
        let group = testing::syncgroup_json("web", "Progressing", 4);
        assert_eq!(
            columns(Kind::SyncGroup, &group),
            ["main@sha1:0a1b2c3d4e5f", "10", "4", "0", "Progressing"]
        );
        let provider = json!({"metadata": {"name": "chat"}, "spec": {"type": "slack", "secretRef": {"name": "hook"}},
            "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "SecretNotFound"}]}});
        assert_eq!(columns(Kind::Provider, &provider), ["slack", "False"]);
        let alert = json!({"metadata": {"name": "rollouts"}, "spec": {"providerRef": {"name": "chat"}, "eventSources": [{"kind": "*"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "lastSentTime": "2026-01-01T00:00:00Z"}});
        assert_eq!(
            columns(Kind::Alert, &alert),
            ["chat", "True", "2026-01-01T00:00:00Z"]
        );
        assert_eq!(
            table(Kind::Alert, &[alert], false).render().lines().next(),
            Some("NAME       PROVIDER   READY   LAST-SENT")
        );
        assert_eq!(parse_kind("providers"), Ok(Kind::Provider));
        assert_eq!(parse_kind("alert"), Ok(Kind::Alert));
    }

    #[test]
    fn secrets_never_show_their_values() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c1-kubeconfig"},
            "data": {"value": "c2VjcmV0"}, "stringData": {"token": "hunter2", "value": "x"}});
        assert_eq!(columns(Kind::Secret, &secret), ["Opaque", "2"]);
        for format in [
            OutputFormat::Json,
            OutputFormat::Yaml,
            OutputFormat::Text,
            OutputFormat::Name,
        ] {
            let text = render(
                Kind::Secret,
                std::slice::from_ref(&secret),
                format,
                false,
                true,
            )
            .unwrap();
            assert!(
                !text.contains("c2VjcmV0") && !text.contains("hunter2"),
                "{format:?}: {text}"
            );
            assert!(text.contains("c1-kubeconfig"), "{format:?}: {text}");
        }
    }

    #[test]
    fn several_objects_print_as_a_list_and_one_alone() {
        let objects = [source("a", "default"), source("b", "default")];
        let list: Value = serde_json::from_str(
            &render(Kind::Source, &objects, OutputFormat::Json, false, false).unwrap(),
        )
        .unwrap();
        assert_eq!(list["kind"], "List");
        assert_eq!(list["items"].as_array().map(Vec::len), Some(2));
        let one: Value = serde_yaml_ng::from_str(
            &render(Kind::Source, &objects[..1], OutputFormat::Yaml, false, true).unwrap(),
        )
        .unwrap();
        assert_eq!(one["metadata"]["name"], "a");
        // A list printed as YAML is a valid manifest again.
        let yaml = render(Kind::Source, &objects, OutputFormat::Yaml, false, false).unwrap();
        assert_eq!(fleet::manifest::parse_manifests(&yaml).unwrap().len(), 2);
        assert_eq!(
            render(Kind::Source, &objects, OutputFormat::Name, false, false).unwrap(),
            "source.starling.dev/a\nsource.starling.dev/b\n"
        );
    }

    #[tokio::test]
    async fn get_reads_back_what_apply_stored() {
        let server = testing::serve().await;
        let client = Client::connect(&server).await.unwrap();
        let manifest = serde_json::to_string(&source("app", "default")).unwrap();
        let request = proto::ApplyRequest {
            manifests: manifest.into_bytes(),
            origin: "s.json".into(),
            dry_run: false,
            ..Default::default()
        };
        client.apply(request).await.unwrap();
        let args = |name: Option<&str>| GetArgs {
            kind: Kind::Source,
            name: name.map(str::to_owned),
            namespace: None,
            all_namespaces: false,
            selector: None,
            output: OutputFormat::Name,
            server: server.clone(),
        };
        let listed = fetch(&client, &args(None), "default").await.unwrap();
        assert_eq!(
            render(Kind::Source, &listed, OutputFormat::Name, false, false).unwrap(),
            "source.starling.dev/app\n"
        );
        let error = fetch(&client, &args(Some("nope")), "default")
            .await
            .unwrap_err();
        assert_eq!(
            format!("{error:#}"),
            "not found: Source default/nope does not exist"
        );
    }
}

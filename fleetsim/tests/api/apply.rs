//! Server-side apply: creation, managed fields in FieldsV1, conflicts with the other
//! manager and field named, forcing, removal of fields a manager stops applying, shared
//! ownership, the status subresource, and no-op applies.

use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::common::{api_error, client, raw, start};

fn applied(replicas: i64, labels: Value, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": image}]}
            }
        }
    })
}

fn entry<'a>(
    object: &'a Deployment,
    manager: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry> {
    object
        .managed_fields()
        .iter()
        .find(|m| m.manager.as_deref() == Some(manager))
}

fn fields(object: &Deployment, manager: &str) -> Value {
    entry(object, manager)
        .and_then(|m| m.fields_v1.as_ref())
        .map(|f| f.0.clone())
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn apply_conflicts_force_and_field_removal() {
    let sim = start(1).await;
    sim.set_never_ready("c0", true).expect("behaviour");
    let client = client(&sim, "c0");
    let api: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let starling = PatchParams::apply("starling");

    let created = api
        .patch(
            "web",
            &starling,
            &Patch::Apply(applied(2, json!({"app": "web", "team": "a"}), "nginx:1")),
        )
        .await
        .expect("apply creates");
    assert_eq!(created.metadata.generation, Some(1));
    let owned = fields(&created, "starling");
    assert_eq!(owned["f:spec"]["f:replicas"], json!({}));
    assert_eq!(owned["f:metadata"]["f:labels"]["f:team"], json!({}));
    let container =
        &owned["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"web\"}"];
    assert_eq!(container["."], json!({}));
    assert_eq!(container["f:image"], json!({}));
    let starling_entry = entry(&created, "starling").expect("starling entry");
    assert_eq!(starling_entry.operation.as_deref(), Some("Apply"));
    assert_eq!(starling_entry.api_version.as_deref(), Some("apps/v1"));
    assert_eq!(starling_entry.fields_type.as_deref(), Some("FieldsV1"));

    // a second manager applying a different value conflicts, naming manager and field
    let other = PatchParams::apply("other");
    let conflict = api_error(
        api.patch(
            "web",
            &other,
            &Patch::Apply(json!({
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                "spec": {"replicas": 5}
            })),
        )
        .await,
    );
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));
    assert!(
        conflict.message.contains("\"starling\"") && conflict.message.contains(".spec.replicas"),
        "{}",
        conflict.message
    );
    let causes = conflict.details.expect("details").causes;
    assert_eq!(causes[0].field, ".spec.replicas");
    assert_eq!(causes[0].reason, "FieldManagerConflict");

    // forcing takes the field over
    let forced = api
        .patch(
            "web",
            &PatchParams::apply("other").force(),
            &Patch::Apply(json!({
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                "spec": {"replicas": 5}
            })),
        )
        .await
        .expect("forced apply");
    assert_eq!(forced.spec.as_ref().and_then(|s| s.replicas), Some(5));
    assert!(
        fields(&forced, "starling")["f:spec"]
            .get("f:replicas")
            .is_none()
    );
    assert_eq!(fields(&forced, "other")["f:spec"]["f:replicas"], json!({}));

    // a label co-owned with equal values survives when starling stops applying it; one
    // only starling owned is removed
    api.patch("web", &PatchParams::apply("labeller"), &Patch::Apply(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"app": "web"}}
    })))
    .await
    .expect("shared label");
    let mut config = applied(2, json!({}), "nginx:1");
    config["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("replicas");
    let trimmed = api
        .patch("web", &starling, &Patch::Apply(config))
        .await
        .expect("apply without labels");
    let labels = trimmed.labels();
    assert!(
        !labels.contains_key("team"),
        "team was only starling's: removed"
    );
    assert_eq!(
        labels.get("app").map(String::as_str),
        Some("web"),
        "app is also labeller's: kept"
    );
    assert_eq!(
        trimmed.spec.as_ref().and_then(|s| s.replicas),
        Some(5),
        "replicas belong to other"
    );

    // an update-style write takes ownership; applying the old value then conflicts
    api.patch("web", &PatchParams { field_manager: Some("kubectl-edit".into()), ..PatchParams::default() },
        &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:2"}]}}}})))
        .await
        .expect("edit");
    let mut config = applied(2, json!({}), "nginx:1");
    config["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("replicas");
    let edited = api_error(
        api.patch("web", &starling, &Patch::Apply(config.clone()))
            .await,
    );
    assert!(
        edited.message.contains("kubectl-edit"),
        "{}",
        edited.message
    );

    // a no-op apply keeps the resourceVersion
    config["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
    let once = api
        .patch("web", &starling, &Patch::Apply(config.clone()))
        .await
        .expect("apply");
    let twice = api
        .patch("web", &starling, &Patch::Apply(config))
        .await
        .expect("apply again");
    assert_eq!(once.resource_version(), twice.resource_version());
    sim.shutdown().await;
}

#[tokio::test]
async fn apply_to_status_and_missing_field_manager() {
    let sim = start(1).await;
    sim.set_never_ready("c0", true).expect("behaviour");
    let client = client(&sim, "c0");
    let api: Api<Deployment> = Api::namespaced(client.clone(), "default");
    api.patch(
        "web",
        &PatchParams::apply("starling"),
        &Patch::Apply(applied(1, json!({"app": "web"}), "nginx:1")),
    )
    .await
    .expect("apply");
    let status = api
        .patch_status(
            "web",
            &PatchParams::apply("status-writer"),
            &Patch::Apply(json!({
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                "spec": {"replicas": 9},
                "status": {"observedGeneration": 1, "replicas": 1}
            })),
        )
        .await
        .expect("status apply");
    assert_eq!(status.status.as_ref().and_then(|s| s.replicas), Some(1));
    assert_eq!(
        status.spec.as_ref().and_then(|s| s.replicas),
        Some(1),
        "spec untouched by a status apply"
    );
    let entry = entry(&status, "status-writer").expect("status manager");
    assert_eq!(entry.subresource.as_deref(), Some("status"));
    assert!(fields(&status, "status-writer").get("f:spec").is_none());

    let (code, body) = raw(
        &client,
        "PATCH",
        "/apis/apps/v1/namespaces/default/deployments/web",
        Some("application/apply-patch+yaml"),
        b"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n".to_vec(),
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(body["kind"], "Status");
    let (code, _) = raw(
        &client,
        "PATCH",
        "/apis/apps/v1/namespaces/default/deployments/web?fieldManager=yaml&force=true",
        Some("application/apply-patch+yaml"),
        b"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  labels:\n    from: yaml\n".to_vec(),
    )
    .await;
    assert_eq!(code, 200, "yaml apply bodies are accepted");
    assert_eq!(
        api.get("web")
            .await
            .expect("get")
            .labels()
            .get("from")
            .map(String::as_str),
        Some("yaml")
    );
    sim.shutdown().await;
}

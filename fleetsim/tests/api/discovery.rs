//! Discovery with `kube::discovery`: the built-in groups, CRDs that become served once
//! Established, custom resources through a dynamic client, aggregated discovery, and
//! CRD deletion.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Discovery, Scope};
use serde_json::json;

use crate::common::{api_error, client, eventually, start};

fn widget_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}}
            }]
        }
    }))
    .expect("crd")
}

#[tokio::test]
async fn discovers_builtins_and_registered_crds() {
    let sim = start(1).await;
    let client = client(&sim, "c0");
    let version = client.apiserver_version().await.expect("version");
    assert_eq!(
        (version.major.as_str(), version.minor.as_str()),
        ("1", "33")
    );

    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");
    for group in [
        "",
        "apps",
        "batch",
        "apiextensions.k8s.io",
        "rbac.authorization.k8s.io",
    ] {
        assert!(discovery.has_group(group), "group {group:?} missing");
    }
    let (deployments, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"))
        .expect("deployments discovered");
    assert_eq!(deployments.plural, "deployments");
    assert_eq!(caps.scope, Scope::Namespaced);
    assert!(caps.subresources.iter().any(|(r, _)| r.plural == "status"));
    let widget = GroupVersionKind::gvk("example.com", "v1", "Widget");
    assert!(discovery.resolve_gvk(&widget).is_none());

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &widget_crd())
        .await
        .expect("create crd");
    eventually("crd established", || async {
        let crd = crds.get("widgets.example.com").await.ok()?;
        let conditions = crd.status?.conditions?;
        conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await;

    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery after crd");
    let (resource, caps) = discovery.resolve_gvk(&widget).expect("widget discovered");
    assert_eq!(resource.plural, "widgets");
    assert!(caps.subresources.iter().any(|(r, _)| r.plural == "status"));
    let aggregated = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .expect("aggregated discovery");
    assert!(aggregated.resolve_gvk(&widget).is_some());
    assert!(
        aggregated
            .resolve_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap"))
            .is_some()
    );

    // a dynamic client uses the discovered resource
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
    let mut object = DynamicObject::new("w1", &resource).within("default");
    object.data = json!({"spec": {"size": 3}});
    let created = widgets
        .create(&PostParams::default(), &object)
        .await
        .expect("create widget");
    assert_eq!(created.metadata.generation, Some(1));
    let status = widgets
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}})),
        )
        .await
        .expect("widget status");
    assert_eq!(status.data["status"]["ready"], true);
    assert_eq!(
        widgets
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        1
    );

    // deleting the CRD deletes its objects and stops serving it
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .expect("delete crd");
    eventually("widgets no longer served", || async {
        match widgets.list(&ListParams::default()).await {
            Err(kube::Error::Api(status)) if status.code == 404 => Some(()),
            _ => None,
        }
    })
    .await;
    let gone = api_error(crds.get("widgets.example.com").await);
    assert_eq!(gone.code, 404);
    sim.shutdown().await;
}

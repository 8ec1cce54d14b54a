//! Every verb and error code: create, get, list (selectors, pagination), update with
//! preconditions, merge and JSON patch, status subresource, generation, delete with
//! finalizers and propagation, namespaces, dry-run.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy};
use serde_json::json;

use crate::common::{api_error, client, eventually, raw, start};

fn config_map(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
        },
        "data": {"key": "value"}
    }))
    .expect("config map")
}

pub fn deployment(name: &str, replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}
            }
        }
    }))
    .expect("deployment")
}

#[tokio::test]
async fn crud_and_error_codes_on_config_maps() {
    let sim = start(1).await;
    let client = client(&sim, "c0");
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let pp = PostParams {
        field_manager: Some("tester".into()),
        ..PostParams::default()
    };

    let created = api
        .create(&pp, &config_map("one", &[("app", "a")]))
        .await
        .expect("create");
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    let first_rv: u64 = created
        .resource_version()
        .expect("rv")
        .parse()
        .expect("numeric rv");
    let managers: Vec<_> = created
        .managed_fields()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(managers, vec!["tester".to_string()]);

    let exists = api_error(api.create(&pp, &config_map("one", &[])).await);
    assert_eq!(
        (exists.code, exists.reason.as_str()),
        (409, "AlreadyExists")
    );
    let missing = api_error(api.get("nope").await);
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    assert_eq!(missing.message, "configmaps \"nope\" not found");

    let ghost: Api<ConfigMap> = Api::namespaced(client.clone(), "ghost");
    let no_namespace = api_error(ghost.create(&pp, &config_map("x", &[])).await);
    assert_eq!(no_namespace.code, 404);
    assert_eq!(no_namespace.message, "namespaces \"ghost\" not found");

    // update with a stale resourceVersion conflicts; with the current one it succeeds
    let mut stale = created.clone();
    stale.metadata.resource_version = Some((first_rv - 1).to_string());
    let conflict = api_error(api.replace("one", &pp, &stale).await);
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));
    let mut current = created.clone();
    current.data = Some(BTreeMap::from([("key".to_string(), "changed".to_string())]));
    let replaced = api.replace("one", &pp, &current).await.expect("replace");
    let second_rv: u64 = replaced
        .resource_version()
        .expect("rv")
        .parse()
        .expect("numeric rv");
    assert!(second_rv > first_rv);
    let missing_update = api_error(api.replace("two", &pp, &config_map("two", &[])).await);
    assert_eq!(missing_update.code, 404);

    // merge patch and JSON patch
    let merged = api
        .patch(
            "one",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"extra": "1"}})),
        )
        .await
        .expect("merge patch");
    let data = merged.data.expect("data");
    assert_eq!(data.get("key").map(String::as_str), Some("changed"));
    assert_eq!(data.get("extra").map(String::as_str), Some("1"));
    let (status, body) = raw(
        &client,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/one",
        Some("application/json-patch+json"),
        serde_json::to_vec(&json!([{"op": "replace", "path": "/data/extra", "value": "2"}]))
            .expect("json"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["data"]["extra"], "2");
    let patch_missing = api_error(
        api.patch("two", &PatchParams::default(), &Patch::Merge(json!({})))
            .await,
    );
    assert_eq!(patch_missing.code, 404);

    // dry run writes change nothing
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    api.create(&dry, &config_map("dry", &[]))
        .await
        .expect("dry-run create");
    assert_eq!(api_error(api.get("dry").await).code, 404);
    let dry_patch = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    api.patch(
        "one",
        &dry_patch,
        &Patch::Merge(json!({"data": {"key": "dry"}})),
    )
    .await
    .expect("dry patch");
    let dry_delete = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    api.delete("one", &dry_delete).await.expect("dry delete");
    let still = api.get("one").await.expect("still there");
    assert_eq!(
        still.data.expect("data").get("key").map(String::as_str),
        Some("changed")
    );

    api.delete("one", &DeleteParams::default())
        .await
        .expect("delete");
    assert_eq!(api_error(api.get("one").await).code, 404);
    assert_eq!(
        api_error(api.delete("one", &DeleteParams::default()).await).code,
        404
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn list_selectors_and_consistent_pages() {
    let sim = start(1).await;
    let client = client(&sim, "c0");
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    for i in 0..6 {
        let app = if i % 2 == 0 { "a" } else { "b" };
        let tier = i.to_string();
        api.create(
            &pp,
            &config_map(&format!("cm-{i}"), &[("app", app), ("tier", &tier)]),
        )
        .await
        .expect("create");
    }
    let names = |list: kube::core::ObjectList<ConfigMap>| {
        list.items.iter().map(|c| c.name_any()).collect::<Vec<_>>()
    };
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("app=a"))
                .await
                .expect("list")
        ),
        ["cm-0", "cm-2", "cm-4"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("app in (a,b),tier notin (0,1),app!=b"))
                .await
                .expect("list")
        ),
        ["cm-2", "cm-4"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("!app"))
                .await
                .expect("list")
        )
        .len(),
        0
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().fields("metadata.name=cm-3"))
                .await
                .expect("list")
        ),
        ["cm-3"]
    );
    let all: Api<ConfigMap> = Api::all(client.clone());
    let everywhere = all
        .list(&ListParams::default().fields("metadata.namespace=default"))
        .await
        .expect("list all");
    assert_eq!(everywhere.items.len(), 6);
    assert!(everywhere.metadata.resource_version.is_some());

    // pages are a consistent snapshot: changes after the first page do not show up
    let first = api
        .list(&ListParams::default().limit(2))
        .await
        .expect("page 1");
    assert_eq!(names(first.clone()), ["cm-0", "cm-1"]);
    assert_eq!(first.metadata.remaining_item_count, Some(4));
    let token = first.metadata.continue_.clone().expect("continue token");
    api.delete("cm-3", &DeleteParams::default())
        .await
        .expect("delete during paging");
    api.create(&pp, &config_map("cm-9", &[]))
        .await
        .expect("create during paging");
    let mut seen = names(first);
    let mut token = Some(token);
    while let Some(next) = token {
        let page = api
            .list(&ListParams::default().limit(2).continue_token(&next))
            .await
            .expect("next page");
        token = page.metadata.continue_.clone().filter(|t| !t.is_empty());
        seen.extend(names(page));
    }
    assert_eq!(seen, ["cm-0", "cm-1", "cm-2", "cm-3", "cm-4", "cm-5"]);

    // delete a collection by label
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("app=a"),
    )
    .await
    .expect("deletecollection");
    assert_eq!(
        names(api.list(&ListParams::default()).await.expect("list")),
        ["cm-1", "cm-5", "cm-9"]
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn generation_and_status_subresource() {
    let sim = start(1).await;
    sim.set_never_ready("c0", true).expect("behaviour");
    let client = client(&sim, "c0");
    let api: Api<Deployment> = Api::namespaced(client, "default");
    let mut with_status = deployment("web", 1);
    with_status.status = Some(serde_json::from_value(json!({"replicas": 99})).expect("status"));
    let created = api
        .create(&PostParams::default(), &with_status)
        .await
        .expect("create");
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.status.is_none(), "status is ignored on create");

    let labelled = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .expect("label patch");
    assert_eq!(
        labelled.metadata.generation,
        Some(1),
        "metadata changes keep the generation"
    );
    let scaled = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}, "status": {"replicas": 7}})),
        )
        .await
        .expect("spec patch");
    assert_eq!(scaled.metadata.generation, Some(2));
    assert_eq!(scaled.spec.as_ref().and_then(|s| s.replicas), Some(3));
    assert!(
        scaled.status.as_ref().and_then(|s| s.replicas) != Some(7),
        "status ignored on main writes"
    );

    let status_write = api
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 10}, "status": {"replicas": 5, "observedGeneration": 2}})),
        )
        .await
        .expect("status patch");
    assert_eq!(
        status_write.status.as_ref().and_then(|s| s.replicas),
        Some(5)
    );
    assert_eq!(
        status_write.spec.as_ref().and_then(|s| s.replicas),
        Some(3),
        "spec ignored on status writes"
    );
    assert_eq!(
        status_write.metadata.generation,
        Some(2),
        "status writes keep the generation"
    );
    let fetched = api.get_status("web").await.expect("get status");
    assert_eq!(fetched.status.and_then(|s| s.replicas), Some(5));
    sim.shutdown().await;
}

#[tokio::test]
async fn deletion_finalizers_propagation_and_namespaces() {
    let sim = start(1).await;
    let client = client(&sim, "c0");
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();

    // a finalizer holds the object until it is removed
    let mut held = config_map("held", &[]);
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&pp, &held).await.expect("create");
    let deleting = api
        .delete("held", &DeleteParams::default())
        .await
        .expect("delete");
    let deleting = deleting.left().expect("object while finalizers remain");
    assert!(deleting.metadata.deletion_timestamp.is_some());
    assert!(api.get("held").await.is_ok());
    let add = api_error(
        api.patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold", "new"]}})),
        )
        .await,
    );
    assert_eq!(add.code, 403);
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("remove finalizer");
    assert_eq!(api_error(api.get("held").await).code, 404);

    // owner references: background deletes dependents, orphan keeps them
    for (policy, dependents_remain) in [
        (PropagationPolicy::Background, false),
        (PropagationPolicy::Foreground, false),
        (PropagationPolicy::Orphan, true),
    ] {
        let owner = api
            .create(&pp, &config_map("owner", &[]))
            .await
            .expect("owner");
        let uid = owner.uid().expect("uid");
        for i in 0..2 {
            let mut dependent = config_map(&format!("dep-{i}"), &[]);
            dependent.metadata.owner_references = Some(vec![
                serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid
                }))
                .expect("owner reference"),
            ]);
            api.create(&pp, &dependent).await.expect("dependent");
        }
        let params = DeleteParams {
            propagation_policy: Some(policy.clone()),
            ..DeleteParams::default()
        };
        api.delete("owner", &params).await.expect("delete owner");
        eventually("owner deletion", || async {
            api.get_opt("owner")
                .await
                .expect("get")
                .is_none()
                .then_some(())
        })
        .await;
        let left = api.get_opt("dep-0").await.expect("get dependent");
        assert_eq!(left.is_some(), dependents_remain, "{policy:?}");
        if let Some(orphan) = left {
            assert!(
                orphan.owner_references().is_empty(),
                "orphans lose the owner reference"
            );
            api.delete_collection(&DeleteParams::default(), &ListParams::default())
                .await
                .expect("cleanup");
        }
    }

    // a namespace turns Terminating, refuses new content, then goes away with its objects
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "doomed"}})).expect("namespace"),
        )
        .await
        .expect("create namespace");
    let doomed: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    doomed
        .create(&pp, &config_map("inside", &[]))
        .await
        .expect("create inside");
    let terminating = namespaces
        .delete("doomed", &DeleteParams::default())
        .await
        .expect("delete namespace");
    let phase = terminating
        .left()
        .and_then(|n| n.status)
        .and_then(|s| s.phase);
    assert_eq!(phase.as_deref(), Some("Terminating"));
    if let Err(kube::Error::Api(status)) = doomed.create(&pp, &config_map("late", &[])).await {
        assert!(status.code == 403 || status.code == 404, "{status:?}");
    }
    eventually("namespace removal", || async {
        namespaces
            .get_opt("doomed")
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(api_error(doomed.get("inside").await).code, 404);
    sim.shutdown().await;
}

#[tokio::test]
async fn cluster_scoped_resources() {
    let sim = start(1).await;
    let client = client(&sim, "c0");
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    }))
    .expect("role");
    let created = roles
        .create(&PostParams::default(), &role)
        .await
        .expect("create");
    assert!(created.metadata.namespace.is_none());
    assert_eq!(
        roles
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        1
    );
    let (status, body) = raw(
        &client,
        "GET",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/clusterroles/reader",
        None,
        vec![],
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(body["kind"], "Status");
    let namespaces: Api<Namespace> = Api::all(client);
    let default = namespaces
        .get("default")
        .await
        .expect("default namespace exists");
    assert_eq!(
        default
            .labels()
            .get("kubernetes.io/metadata.name")
            .map(String::as_str),
        Some("default")
    );
    sim.shutdown().await;
}

//! Apply, change, prune, CRDs, namespaces, substitution, kubeconfig connections and the
//! inventory mirror.

use std::collections::BTreeMap;
use std::time::Duration;

use fleet::resources::ResourceStatus;
use starling_sync::{Connection, ErrorClass};

use crate::common::*;

fn first_files() -> Vec<(String, String)> {
    vec![
        ("app/00-namespace.yaml".into(), NAMESPACE.into()),
        ("app/config.yaml".into(), config_map("config", &BTreeMap::from([("color", "blue")]))),
        (
            "app/keep.yaml".into(),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: keep\n  namespace: shop\n  annotations:\n    starling.dev/prune: disabled\ndata: {}\n".into(),
        ),
        ("app/web.yaml".into(), deployment("web", 1, "")),
        (
            "app/service.json".into(),
            r#"{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "shop"}, "spec": {"ports": [{"port": 80}]}}"#.into(),
        ),
        ("other/ignored.yaml".into(), config_map("ignored", &BTreeMap::new())),
    ]
}

fn borrowed(files: &[(String, String)]) -> Vec<(&str, &str)> {
    files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_then_change_then_prune_keeps_disabled_objects() {
    let sim = fleet(1, Duration::from_millis(50)).await;
    let engine = engine();
    let files = first_files();
    let report = engine
        .sync(request(&sim, "c0", "node-a", 1, &borrowed(&files)))
        .await
        .expect("first sync");
    assert_eq!(report.applied, 5);
    assert_eq!(report.inventory.len(), 5);
    assert_eq!(report.health, ResourceStatus::Current);
    let config = object(&sim, "c0", "v1", "ConfigMap", Some("shop"), "config").expect("applied");
    assert_eq!(config["data"]["color"], "blue");
    let managers: Vec<&str> = config["metadata"]["managedFields"]
        .as_array()
        .map(|fields| {
            fields
                .iter()
                .filter_map(|f| f["manager"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert!(managers.contains(&"starling"), "{managers:?}");
    assert!(
        object(&sim, "c0", "v1", "ConfigMap", Some("shop"), "ignored").is_none(),
        "outside the path"
    );

    // Change: new data and replicas; drop the service and the prune-disabled config map.
    let mut changed = first_files();
    changed[1].1 = config_map("config", &BTreeMap::from([("color", "green")]));
    changed[3].1 = deployment("web", 3, "");
    changed.retain(|(path, _)| path != "app/service.json" && path != "app/keep.yaml");
    let mut second = request(&sim, "c0", "node-a", 1, &borrowed(&changed));
    second.previous_inventory = report.inventory.clone();
    let report = engine.sync(second).await.expect("second sync");
    let config =
        object(&sim, "c0", "v1", "ConfigMap", Some("shop"), "config").expect("still there");
    assert_eq!(config["data"]["color"], "green");
    let web =
        object(&sim, "c0", "apps/v1", "Deployment", Some("shop"), "web").expect("still there");
    assert_eq!(web["spec"]["replicas"], 3);
    assert_eq!(
        report.pruned,
        [reference("v1", "Service", Some("shop"), "web")]
    );
    assert!(
        object(&sim, "c0", "v1", "Service", Some("shop"), "web").is_none(),
        "pruned"
    );
    assert_eq!(
        report.kept,
        [reference("v1", "ConfigMap", Some("shop"), "keep")]
    );
    assert!(
        object(&sim, "c0", "v1", "ConfigMap", Some("shop"), "keep").is_some(),
        "prune disabled"
    );
    assert_eq!(report.inventory.len(), 3);

    // The mirror on the target holds the same inventory, so a lost status can be recovered,
    // and a sync that forgot its previous inventory still prunes.
    let survey = engine
        .survey(&target(&sim, "c0"), &["default/app".to_owned()])
        .await
        .expect("read the mirror");
    assert_eq!(survey.fence.map(|f| f.generation), Some(1));
    let mirrored = survey.syncs[0]
        .mirror
        .as_ref()
        .map(|m| m.objects.as_slice());
    assert_eq!(mirrored, Some(report.inventory.as_slice()));
    let without_web: Vec<_> = changed
        .iter()
        .filter(|(p, _)| p != "app/web.yaml")
        .cloned()
        .collect();
    let report = engine
        .sync(request(&sim, "c0", "node-a", 1, &borrowed(&without_web)))
        .await
        .expect("third sync");
    assert_eq!(
        report.pruned,
        [reference("apps/v1", "Deployment", Some("shop"), "web")]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_its_resources_and_their_namespace_in_one_render() {
    let sim = fleet(1, Duration::from_millis(50)).await;
    let crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.example.com\nspec:\n  group: example.com\n  scope: Namespaced\n  names:\n    kind: Widget\n    plural: widgets\n    singular: widget\n    listKind: WidgetList\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n";
    let widget = "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\n  namespace: shop\nspec:\n  size: 3\n";
    // Files sort the custom resource and the namespace before the CRD: order is the engine's.
    let files = [
        ("app/a-widget.yaml", widget),
        ("app/b-namespace.yaml", NAMESPACE),
        ("app/c-crd.yaml", crd),
    ];
    let report = engine()
        .sync(request(&sim, "c0", "node-a", 1, &files))
        .await
        .expect("sync with a new crd");
    assert_eq!(report.applied, 3);
    let live = object(&sim, "c0", "example.com/v1", "Widget", Some("shop"), "w1")
        .expect("custom resource");
    assert_eq!(live["spec"]["size"], 3);
    assert_eq!(report.health, ResourceStatus::Current);
    let applies: Vec<String> = writes_by(&sim, "c0", "node-a")
        .into_iter()
        .filter(|r| r.verb == "apply" && r.namespace.as_deref() != Some("starling-system"))
        .map(|r| r.kind)
        .collect();
    assert_eq!(applies, ["CustomResourceDefinition", "Namespace", "Widget"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_kinds_fail_before_any_write() {
    let sim = fleet(1, Duration::from_millis(50)).await;
    let files = [
        ("app/ns.yaml", NAMESPACE),
        (
            "app/gadget.yaml",
            "apiVersion: example.com/v1\nkind: Gadget\nmetadata:\n  name: g\n  namespace: shop\n",
        ),
    ];
    let failure = engine()
        .sync(request(&sim, "c0", "node-a", 1, &files))
        .await
        .expect_err("nobody defines Gadget");
    assert_eq!(failure.class(), ErrorClass::Invalid);
    assert!(failure.to_string().contains("kind Gadget"), "{failure}");
    assert!(
        failure.to_string().contains("app/gadget.yaml, document 1"),
        "{failure}"
    );
    assert!(object(&sim, "c0", "v1", "Namespace", None, "shop").is_none());
    assert!(
        failure.inventory.is_none(),
        "nothing applied, nothing to record"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn substitution_from_cluster_labels_and_variables() {
    let sim = fleet(1, Duration::from_millis(50)).await;
    let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${cluster.name}-settings\n  namespace: shop\ndata:\n  region: ${cluster.labels.region}\n  tier: ${cluster.labels.tier:=bronze}\n  greeting: ${GREETING}\n  literal: $${NOT_A_VARIABLE}\n";
    let mut sync = request(
        &sim,
        "c0",
        "node-a",
        1,
        &[("app/ns.yaml", NAMESPACE), ("app/settings.yaml", text)],
    );
    sync.cluster.labels = BTreeMap::from([("region".to_owned(), "eu-west".to_owned())]);
    sync.template.substitute = BTreeMap::from([(
        "GREETING".to_owned(),
        "hello from ${cluster.labels.region}".to_owned(),
    )]);
    engine().sync(sync).await.expect("sync");
    let live = object(&sim, "c0", "v1", "ConfigMap", Some("shop"), "c0-settings")
        .expect("named after the cluster");
    assert_eq!(live["data"]["region"], "eu-west");
    assert_eq!(live["data"]["tier"], "bronze");
    assert_eq!(live["data"]["greeting"], "hello from eu-west");
    assert_eq!(live["data"]["literal"], "${NOT_A_VARIABLE}");

    let missing = request(
        &sim,
        "c0",
        "node-a",
        1,
        &[(
            "app/x.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  a: ${UNDEFINED}\n",
        )],
    );
    let failure = engine()
        .sync(missing)
        .await
        .expect_err("undefined variable");
    assert_eq!(failure.class(), ErrorClass::Invalid);
    let message = failure.to_string();
    assert!(
        message.contains("\"UNDEFINED\"") && message.contains("app/x.yaml"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_are_reached_through_kubeconfig_secrets() {
    let sim = fleet(1, Duration::from_millis(50)).await;
    let kubeconfig = sim.kubeconfig("c0").expect("kubeconfig");
    let mut sync = request(&sim, "c0", "node-a", 1, &[("app/ns.yaml", NAMESPACE)]);
    sync.cluster.connection = Connection::Secret {
        name: "default/c0-kubeconfig".to_owned(),
        data: BTreeMap::from([("value".to_owned(), kubeconfig.into_bytes().into())]),
        key: None,
    };
    engine()
        .sync(sync)
        .await
        .expect("sync through the secret's kubeconfig");
    assert!(object(&sim, "c0", "v1", "Namespace", None, "shop").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_without_namespace_is_the_one_in_the_default_namespace() {
    let sim = fleet(1, Duration::from_millis(50)).await;
    let files = [
        (
            "app/a.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dup\n",
        ),
        (
            "app/b.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dup\n  namespace: default\n",
        ),
    ];
    let failure = engine()
        .sync(request(&sim, "c0", "node-a", 1, &files))
        .await
        .expect_err("duplicate once defaulted");
    assert_eq!(failure.class(), ErrorClass::Invalid);
    assert!(
        failure.to_string().contains("app/b.yaml, document 1: duplicate object v1 ConfigMap default/dup, first defined in app/a.yaml, document 1"),
        "{failure}"
    );
    let report = engine()
        .sync(request(&sim, "c0", "node-a", 1, &files[..1]))
        .await
        .expect("one of them");
    assert_eq!(
        report.inventory,
        [reference("v1", "ConfigMap", Some("default"), "dup")]
    );
}

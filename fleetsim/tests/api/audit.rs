//! The audit log is complete under concurrency, records the writer headers, follows each
//! cluster's commit order, and is queryable through the admin API.

use fleetsim::{AuditFilter, GENERATION_HEADER, Origin, WRITER_HEADER};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::{client_with, raw, start};

const WRITERS: usize = 8;
const WRITES_EACH: usize = 25;

#[tokio::test]
async fn complete_under_concurrency_with_writer_headers() {
    let sim = start(2).await;
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let generation = (writer + 1).to_string();
        let name = format!("node-{writer}");
        let client = client_with(
            &sim,
            "c0",
            None,
            true,
            &[(WRITER_HEADER, &name), (GENERATION_HEADER, &generation)],
        );
        tasks.push(tokio::spawn(async move {
            let api: Api<ConfigMap> = Api::namespaced(client, "default");
            for i in 0..WRITES_EACH {
                let object = format!("w{writer}-{i}");
                let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": object}})).expect("cm");
                api.create(&PostParams::default(), &cm).await.expect("create");
                api.patch(&object, &PatchParams::apply("starling").force(), &Patch::Apply(json!({
                    "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": object}, "data": {"i": i.to_string()}
                })))
                .await
                .expect("apply");
            }
        }));
    }
    for task in tasks {
        task.await.expect("writer task");
    }
    let records = sim.audit(&AuditFilter {
        origin: Some(Origin::Api),
        ..AuditFilter::cluster("c0")
    });
    assert_eq!(
        records.len(),
        WRITERS * WRITES_EACH * 2,
        "every write is audited"
    );
    for writer in 0..WRITERS {
        let mine: Vec<_> = records
            .iter()
            .filter(|r| r.writer.as_deref() == Some(&format!("node-{writer}")))
            .collect();
        assert_eq!(mine.len(), WRITES_EACH * 2);
        assert!(mine.iter().all(|r| r.generation == Some(writer as i64 + 1)));
        assert_eq!(
            mine.iter().filter(|r| r.verb == "apply").count(),
            WRITES_EACH
        );
        assert!(
            mine.iter()
                .filter(|r| r.verb == "apply")
                .all(|r| r.field_manager.as_deref() == Some("starling"))
        );
    }
    assert!(records.iter().all(|r| r.kind == "ConfigMap"
        && r.namespace.as_deref() == Some("default")
        && r.status < 300));
    // audit order is commit order: resourceVersions grow with the sequence numbers
    let versions: Vec<u64> = records
        .iter()
        .map(|r| {
            r.resource_version
                .as_deref()
                .and_then(|v| v.parse().ok())
                .expect("rv")
        })
        .collect();
    assert!(
        versions.windows(2).all(|w| w[0] < w[1]),
        "per-cluster audit order follows commits"
    );
    assert!(sim.audit(&AuditFilter::cluster("c1")).is_empty());
    let limited = sim.audit(&AuditFilter {
        limit: Some(5),
        since: Some(records[10].seq),
        ..AuditFilter::cluster("c0")
    });
    assert_eq!(limited.len(), 5);
    assert_eq!(limited[0].seq, records[11].seq);

    // the same query through the admin API
    let admin = kube::Client::try_from(kube::Config::new(sim.base_url().parse().expect("url")))
        .expect("client");
    let (status, body) = raw(
        &admin,
        "GET",
        "/admin/audit?cluster=c0&writer=node-3&verb=apply",
        None,
        vec![],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["records"].as_array().map(Vec::len), Some(WRITES_EACH));
    assert_eq!(body["records"][0]["writer"], "node-3");
    assert_eq!(body["records"][0]["generation"], 4);
    assert!(
        body["stats"]["recorded"]
            .as_u64()
            .is_some_and(|n| n >= (WRITERS * WRITES_EACH * 2) as u64)
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn bounded_with_a_dropped_counter() {
    let config = fleetsim::Config {
        clusters: 1,
        audit_capacity: 160,
        ..crate::common::quick_config(1)
    };
    let sim = fleetsim::FleetSim::start(config).await.expect("start");
    let client = crate::common::client(&sim, "c0");
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    for i in 0..30 {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("cm-{i}")}})).expect("cm");
        api.create(&PostParams::default(), &cm)
            .await
            .expect("create");
    }
    let stats = sim.audit_stats();
    assert_eq!(stats.recorded, 30);
    assert_eq!(stats.retained + stats.dropped, 30);
    assert!(stats.dropped >= 20, "{stats:?}");
    let kept = sim.audit(&AuditFilter::cluster("c0"));
    assert_eq!(
        kept.last().and_then(|r| r.name.clone()).as_deref(),
        Some("cm-29"),
        "the newest records are kept"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn request_level_keeps_request_bodies_and_metadata_level_does_not() {
    for level in [
        fleetsim::AuditLevel::Metadata,
        fleetsim::AuditLevel::Request,
    ] {
        let sim = fleetsim::FleetSim::start(fleetsim::Config {
            audit_level: level,
            ..crate::common::quick_config(1)
        })
        .await
        .expect("fleetsim starts");
        let api: Api<ConfigMap> = Api::namespaced(crate::common::client(&sim, "c0"), "default");
        let body = json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"version": "v2"}
        });
        api.patch("cm", &PatchParams::apply("starling"), &Patch::Apply(&body))
            .await
            .expect("apply");
        api.delete("cm", &Default::default()).await.expect("delete");
        let records = sim.audit(&AuditFilter {
            origin: Some(Origin::Api),
            ..AuditFilter::cluster("c0")
        });
        assert_eq!(records.len(), 2);
        let (apply, delete) = (&records[0], &records[1]);
        assert_eq!(
            (apply.verb.as_str(), delete.verb.as_str()),
            ("apply", "delete")
        );
        assert_eq!(delete.request_object, None, "a delete has no body");
        match level {
            fleetsim::AuditLevel::Metadata => assert_eq!(apply.request_object, None),
            fleetsim::AuditLevel::Request => {
                let object = apply.request_object.as_ref().expect("request body kept");
                assert_eq!(object["data"]["version"], "v2");
            }
        }
    }
}

//! Fault injection has the effects it claims: latency, error rates with the right codes
//! and Retry-After, hanging requests bounded by the client's timeout, down and up again,
//! and only for the cluster it is set on.

use std::time::Duration;

use fleetsim::{AuditFilter, Fault, FaultKind};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::common::{api_error, client, client_with, raw_full, start};

#[tokio::test]
async fn latency_and_error_rates() {
    let sim = start(2).await;
    let plain: Api<ConfigMap> = Api::default_namespaced(client_with(&sim, "c0", None, false, &[]));
    plain.list(&Default::default()).await.expect("warm up");

    sim.set_fault("c0", Fault::latency(Duration::from_millis(300)))
        .expect("latency");
    let started = tokio::time::Instant::now();
    plain.list(&Default::default()).await.expect("slow list");
    assert!(started.elapsed() >= Duration::from_millis(300));
    let other: Api<ConfigMap> = Api::default_namespaced(client(&sim, "c1"));
    let started = tokio::time::Instant::now();
    other
        .list(&Default::default())
        .await
        .expect("other cluster");
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "faults are per cluster"
    );
    sim.clear_fault("c0", FaultKind::Latency).expect("clear");

    for (code, reason) in [
        (500, "InternalError"),
        (503, "ServiceUnavailable"),
        (429, "TooManyRequests"),
    ] {
        sim.set_fault(
            "c0",
            Fault::Errors {
                rate: 1.0,
                code,
                retry_after_seconds: Some(2),
            },
        )
        .expect("errors");
        let status = api_error(plain.list(&Default::default()).await);
        assert_eq!((status.code, status.reason.as_str()), (code, reason));
        let (http_status, headers, _) = raw_full(
            &client_with(&sim, "c0", None, false, &[]),
            "GET",
            "/api/v1/namespaces",
            None,
            vec![],
        )
        .await;
        assert_eq!(http_status.as_u16(), code);
        let retry_after = headers.get("retry-after").and_then(|v| v.to_str().ok());
        assert_eq!(
            retry_after,
            if code == 500 { None } else { Some("2") },
            "retry-after for {code}"
        );
    }

    // a share of failures: about half of 200 requests
    sim.set_fault(
        "c0",
        Fault::Errors {
            rate: 0.5,
            code: 500,
            retry_after_seconds: None,
        },
    )
    .expect("errors");
    let mut failures = 0;
    for _ in 0..200 {
        if plain.list(&Default::default()).await.is_err() {
            failures += 1;
        }
    }
    assert!((40..=160).contains(&failures), "{failures} of 200 failed");
    // kube's own retries ride out retryable errors
    sim.set_fault(
        "c0",
        Fault::Errors {
            rate: 0.5,
            code: 503,
            retry_after_seconds: Some(0),
        },
    )
    .expect("errors");
    let retrying: Api<ConfigMap> = Api::default_namespaced(client(&sim, "c0"));
    for _ in 0..10 {
        retrying
            .list(&Default::default())
            .await
            .expect("retried to success");
    }

    // injected errors on writes are audited as such
    sim.set_fault("c0", Fault::errors(1.0, 500))
        .expect("errors");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "x"}})).expect("cm");
    assert_eq!(
        api_error(plain.create(&PostParams::default(), &cm).await).code,
        500
    );
    let records = sim.audit(&AuditFilter {
        verb: Some("create".into()),
        ..AuditFilter::cluster("c0")
    });
    assert!(
        records
            .iter()
            .any(|r| r.injected && r.status == 500 && r.kind == "ConfigMap"),
        "{records:?}"
    );
    sim.clear_faults("c0").expect("clear");
    plain
        .create(&PostParams::default(), &cm)
        .await
        .expect("create after clearing");
    assert!(sim.faults("c0").expect("faults").errors.is_none());
    sim.shutdown().await;
}

#[tokio::test]
async fn hanging_requests_time_out_on_the_client() {
    let sim = start(1).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client_with(
        &sim,
        "c0",
        Some(Duration::from_millis(400)),
        false,
        &[],
    ));
    sim.set_fault("c0", Fault::Hang { rate: 1.0 })
        .expect("hang");
    let started = tokio::time::Instant::now();
    let result = api.list(&Default::default()).await;
    assert!(result.is_err(), "hung request must fail");
    assert!(
        !matches!(result, Err(kube::Error::Api(_))),
        "no answer, only the client's timeout"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(350)
            && started.elapsed() < Duration::from_secs(5)
    );
    sim.clear_fault("c0", FaultKind::Hang).expect("clear");
    api.list(&Default::default()).await.expect("answered again");
    sim.shutdown().await;
}

#[tokio::test]
async fn down_and_up_again() {
    let sim = start(2).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client_with(&sim, "c0", None, false, &[]));
    let other: Api<ConfigMap> = Api::default_namespaced(client(&sim, "c1"));
    api.list(&Default::default()).await.expect("up");
    sim.set_down("c0", true).expect("down");
    for _ in 0..3 {
        match api.list(&Default::default()).await {
            Err(kube::Error::Api(status)) => {
                panic!("a down cluster must not answer, got {status:?}")
            }
            Err(_) => {}
            Ok(_) => panic!("a down cluster must not answer"),
        }
    }
    other
        .list(&Default::default())
        .await
        .expect("the other cluster stays up");
    sim.set_down("c0", false).expect("up");
    api.list(&Default::default()).await.expect("up again");
    sim.shutdown().await;
}

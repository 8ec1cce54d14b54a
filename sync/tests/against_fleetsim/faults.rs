//! Each fault fleetsim injects gets the right class and the right retries, and a broken
//! cluster does not slow a healthy one down.

use std::time::{Duration, Instant};

use fleet::resources::ResourceStatus;
use fleetsim::{Fault, FaultKind};
use starling_sync::retry::RetryPolicy;
use starling_sync::{ErrorClass, SyncEngine};

use crate::common::*;

const FILES: [(&str, &str); 1] = [("app/ns.yaml", NAMESPACE)];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_are_unreachable_after_the_request_retries() {
    let sim = fleet(1, Duration::from_millis(50)).await;
    let engine = engine();
    sim.set_fault("c0", Fault::errors(1.0, 500)).expect("fault");
    let failure = engine
        .sync(request(&sim, "c0", "node-a", 1, &FILES))
        .await
        .expect_err("500s");
    assert_eq!(failure.class(), ErrorClass::Unreachable);
    assert!(
        failure.to_string().contains("(500 InternalError)"),
        "{failure}"
    );
    let retries = RetryPolicy::request_default()
        .unreachable
        .and_then(|b| b.max_retries)
        .expect("bounded");
    assert_eq!(
        failure.retries,
        u64::from(retries),
        "the first request was retried, then given up"
    );
    assert_eq!(failure.requests, u64::from(retries) + 1);
    assert!(
        RetryPolicy::sync_default()
            .delay(failure.class(), 1, 0)
            .is_some(),
        "the sync is retried later"
    );

    sim.clear_fault("c0", FaultKind::Errors).expect("clear");
    let report = engine
        .sync(request(&sim, "c0", "node-a", 1, &FILES))
        .await
        .expect("healed");
    assert_eq!(report.retries, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_honours_the_servers_delay() {
    let sim = fleet(1, Duration::from_millis(50)).await;
    let mut config = engine_config();
    config
        .request_retry
        .throttled
        .as_mut()
        .expect("throttled retries")
        .max_retries = Some(1);
    let engine = SyncEngine::new(config).expect("engine");
    sim.set_fault(
        "c0",
        Fault::Errors {
            rate: 1.0,
            code: 429,
            retry_after_seconds: Some(1),
        },
    )
    .expect("fault");
    let started = Instant::now();
    let failure = engine
        .sync(request(&sim, "c0", "node-a", 1, &FILES))
        .await
        .expect_err("429s");
    assert_eq!(failure.class(), ErrorClass::Throttled);
    assert_eq!(failure.error.retry_after(), Some(Duration::from_secs(1)));
    assert_eq!(failure.retries, 1);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "waited for Retry-After: {:?}",
        started.elapsed()
    );
    let later = RetryPolicy::sync_default().delay_at_least(
        ErrorClass::Throttled,
        1,
        0,
        failure.error.retry_after(),
    );
    assert!(later >= Some(Duration::from_secs(1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_is_tolerated_until_it_exceeds_the_request_timeout() {
    let sim = fleet(1, Duration::from_millis(50)).await;
    let engine = engine();
    sim.set_fault("c0", Fault::latency(Duration::from_millis(150)))
        .expect("fault");
    let report = engine
        .sync(request(&sim, "c0", "node-a", 1, &FILES))
        .await
        .expect("slow but fine");
    assert_eq!(report.health, ResourceStatus::Current);
    assert!(
        report.duration >= Duration::from_millis(150) * 3,
        "{:?}",
        report.duration
    );

    sim.set_fault("c0", Fault::latency(Duration::from_secs(5)))
        .expect("fault");
    let failure = engine
        .sync(request(&sim, "c0", "node-a", 1, &FILES))
        .await
        .expect_err("too slow");
    assert_eq!(failure.class(), ErrorClass::Timeout);
    assert_eq!(failure.retries, 1, "one retry of a timed-out request");
    assert!(
        failure.duration < Duration::from_secs(8),
        "{:?}",
        failure.duration
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_down_cluster_is_unreachable() {
    let sim = fleet(1, Duration::from_millis(50)).await;
    sim.set_down("c0", true).expect("down");
    let failure = engine()
        .sync(request(&sim, "c0", "node-a", 1, &FILES))
        .await
        .expect_err("down");
    assert_eq!(failure.class(), ErrorClass::Unreachable);
    assert!(failure.retries >= 1);
    assert!(
        failure.duration < Duration::from_secs(5),
        "{:?}",
        failure.duration
    );
    sim.set_down("c0", false).expect("up");
    engine()
        .sync(request(&sim, "c0", "node-a", 1, &FILES))
        .await
        .expect("back up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_clusters_do_not_delay_a_healthy_one() {
    let sim = fleet(3, Duration::from_millis(50)).await;
    let engine = engine();
    sim.set_down("c0", true).expect("down");
    sim.set_fault("c1", Fault::Hang { rate: 1.0 })
        .expect("hang");
    let web = deployment("web", 1, "");
    let files = [("app/ns.yaml", NAMESPACE), ("app/web.yaml", web.as_str())];
    let (down, hung, healthy) = tokio::join!(
        engine.sync(request(&sim, "c0", "node-a", 1, &files)),
        engine.sync(request(&sim, "c1", "node-a", 1, &files)),
        engine.sync(request(&sim, "c2", "node-a", 1, &files)),
    );
    let healthy = healthy.expect("the healthy cluster syncs");
    let hung = hung.expect_err("hung cluster");
    assert_eq!(
        down.expect_err("down cluster").class(),
        ErrorClass::Unreachable
    );
    assert_eq!(hung.class(), ErrorClass::Timeout);
    assert!(
        healthy.duration < Duration::from_secs(2) && healthy.duration < hung.duration,
        "healthy took {:?}, hung {:?}",
        healthy.duration,
        hung.duration
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_request_runs_past_the_nodes_lease() {
    let sim = fleet(1, Duration::from_millis(50)).await;
    let engine = engine();
    // Every request to c0 takes 5 s: far longer than what is left of the lease.
    sim.set_fault("c0", Fault::latency(Duration::from_secs(5)))
        .expect("fault");
    let started = Instant::now();
    let lease_end = tokio::time::Instant::now() + Duration::from_millis(400);
    let mut bounded = request(&sim, "c0", "node-a", 1, &FILES);
    bounded.lease = Some(starling_sync::LeaseEnd::new(move || Some(lease_end)));
    let failure = engine
        .sync(bounded)
        .await
        .expect_err("the lease ends first");
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "the sync stopped at the end of the lease, not after the request time-out: {:?}",
        started.elapsed()
    );
    assert!(
        matches!(
            failure.class(),
            ErrorClass::Unreachable | ErrorClass::Cancelled
        ),
        "{failure}"
    );

    // A node whose lease is over starts nothing.
    sim.clear_fault("c0", FaultKind::Latency).expect("clear");
    let mut lapsed = request(&sim, "c0", "node-a", 1, &FILES);
    lapsed.lease = Some(starling_sync::LeaseEnd::new(|| None));
    let failure = engine.sync(lapsed).await.expect_err("no lease");
    assert_eq!(failure.class(), ErrorClass::Cancelled, "{failure}");
    assert!(writes_by(&sim, "c0", "node-a").is_empty());
}

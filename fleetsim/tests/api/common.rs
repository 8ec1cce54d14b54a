//! Shared fixtures: a fleetsim with quick timings, kube clients for its clusters, raw
//! requests, and bounded waiting on conditions.

use std::future::Future;
use std::time::Duration;

use fleetsim::{Config, FleetSim};
use http::{Request, StatusCode};
use kube::Client;
use serde_json::Value;

/// Every wait in these tests gives up after this long.
pub const WAIT: Duration = Duration::from_secs(10);

pub fn quick_config(clusters: usize) -> Config {
    Config {
        clusters,
        ready_delay: Duration::from_millis(200),
        bookmark_interval: Duration::from_millis(200),
        hang_limit: Duration::from_secs(5),
        ..Config::default()
    }
}

pub async fn start(clusters: usize) -> FleetSim {
    FleetSim::start(quick_config(clusters))
        .await
        .expect("fleetsim starts")
}

pub fn client(sim: &FleetSim, cluster: &str) -> Client {
    client_with(sim, cluster, None, true, &[])
}

/// A client with a read timeout, kube's default retries of 429/503/504 on or off, and
/// extra headers on every request.
pub fn client_with(
    sim: &FleetSim,
    cluster: &str,
    read_timeout: Option<Duration>,
    retry: bool,
    headers: &[(&str, &str)],
) -> Client {
    let url = sim
        .cluster_url(cluster)
        .parse()
        .expect("cluster url parses");
    let mut config = kube::Config::new(url);
    if read_timeout.is_some() {
        config.read_timeout = read_timeout;
    }
    config.default_retry = retry;
    for (name, value) in headers {
        config.headers.push((
            http::HeaderName::from_bytes(name.as_bytes()).expect("header name"),
            http::HeaderValue::from_str(value).expect("header value"),
        ));
    }
    Client::try_from(config).expect("kube client builds")
}

/// Sends a raw request through the kube client (so the cluster base path applies) and
/// returns the status and the decoded JSON body (Null when not JSON).
pub async fn raw(
    client: &Client,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> (StatusCode, Value) {
    let (status, _, bytes) = raw_full(client, method, path, content_type, body).await;
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

pub async fn raw_full(
    client: &Client,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> (StatusCode, http::HeaderMap, Vec<u8>) {
    let mut builder = Request::builder().method(method).uri(path);
    if let Some(content_type) = content_type {
        builder = builder.header(http::header::CONTENT_TYPE, content_type);
    }
    let request = builder
        .body(kube::client::Body::from(body))
        .expect("request builds");
    let response = client.send(request).await.expect("request is answered");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response
        .into_body()
        .collect_bytes()
        .await
        .expect("body is read");
    (status, headers, bytes.to_vec())
}

/// Polls `check` every 20 ms until it returns Some, failing after [`WAIT`].
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The Status carried by a kube API error.
pub fn api_error<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an api error, got {other:?}"),
    }
}

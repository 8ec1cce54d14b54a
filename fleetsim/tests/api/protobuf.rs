//! Kubernetes protobuf over the wire without kubectl: a body kubectl sent, answers to a
//! client that accepts only protobuf (objects, lists, Status errors), and what stays JSON
//! or is refused (watch streams, patches, JSON-capable clients).

use http::Request;
use kube::Client;

use super::common::{client, start};

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// `kubectl create namespace x` (kubectl 1.33) as it went over the wire.
const KUBECTL_NAMESPACE: &[u8] = &[
    0x6b, 0x38, 0x73, 0x00, 0x0a, 0x0f, 0x0a, 0x02, 0x76, 0x31, 0x12, 0x09, 0x4e, 0x61, 0x6d, 0x65,
    0x73, 0x70, 0x61, 0x63, 0x65, 0x12, 0x19, 0x0a, 0x11, 0x0a, 0x01, 0x78, 0x12, 0x00, 0x1a, 0x00,
    0x22, 0x00, 0x2a, 0x00, 0x32, 0x00, 0x38, 0x00, 0x42, 0x00, 0x12, 0x00, 0x1a, 0x02, 0x0a, 0x00,
    0x1a, 0x00, 0x22, 0x00,
];

async fn send(
    client: &Client,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (u16, String, Vec<u8>) {
    let mut builder = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let request = builder
        .body(kube::client::Body::from(body))
        .expect("request builds");
    let response = client.send(request).await.expect("request is answered");
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let bytes = response
        .into_body()
        .collect_bytes()
        .await
        .expect("body is read");
    (status, content_type, bytes.to_vec())
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn protobuf_bodies_create_and_protobuf_only_clients_get_protobuf() {
    let sim = start(1).await;
    let client = client(&sim, "c0");
    let (status, content_type, _) = send(
        &client,
        "POST",
        "/api/v1/namespaces",
        &[("content-type", PROTOBUF), ("accept", "application/json")],
        KUBECTL_NAMESPACE.to_vec(),
    )
    .await;
    assert_eq!((status, content_type.as_str()), (201, "application/json"));
    let stored = sim
        .get_object("c0", "v1", "Namespace", None, "x")
        .expect("cluster")
        .expect("namespace x stored");
    assert_eq!(stored["status"]["phase"], "Active");

    // accepting protobuf only: object, list and Status answers are protobuf envelopes
    let only = [("accept", PROTOBUF)];
    for (path, code, kind) in [
        ("/api/v1/namespaces/x", 200, "Namespace"),
        ("/api/v1/namespaces", 200, "NamespaceList"),
        ("/api/v1/namespaces/missing", 404, "Status"),
    ] {
        let (status, content_type, body) = send(&client, "GET", path, &only, Vec::new()).await;
        assert_eq!(status, code, "{path}");
        assert_eq!(content_type, PROTOBUF, "{path}");
        assert!(body.starts_with(b"k8s\0"), "{path}: {body:?}");
        assert!(contains(&body, kind), "{path} answers a {kind}");
    }

    // JSON acceptable too: JSON, as kubectl's typed clients get
    let (_, content_type, _) = send(
        &client,
        "GET",
        "/api/v1/namespaces/x",
        &[(
            "accept",
            "application/vnd.kubernetes.protobuf,application/json",
        )],
        Vec::new(),
    )
    .await;
    assert_eq!(content_type, "application/json");

    // watches stay JSON: a protobuf-only watch is not acceptable
    let (status, _, body) = send(
        &client,
        "GET",
        "/api/v1/namespaces?watch=true",
        &only,
        Vec::new(),
    )
    .await;
    assert_eq!(status, 406);
    assert!(contains(&body, "NotAcceptable"));

    // protobuf is no patch format, and a body that is no envelope is a bad request
    let (status, _, _) = send(
        &client,
        "PATCH",
        "/api/v1/namespaces/x",
        &[("content-type", PROTOBUF)],
        KUBECTL_NAMESPACE.to_vec(),
    )
    .await;
    assert_eq!(status, 415);
    let (status, _, body) = send(
        &client,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("content-type", PROTOBUF)],
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
    assert!(contains(&body, "magic number"));
    sim.shutdown().await;
}

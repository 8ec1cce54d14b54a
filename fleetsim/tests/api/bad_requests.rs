//! Bad requests get a Kubernetes `Status` error with the apiserver's code and reason, and
//! the server keeps serving.

use crate::common::{client, raw, start};

/// method, path, content type, body, expected code, expected reason
type Case<'a> = (&'a str, String, Option<&'a str>, Vec<u8>, u16, &'a str);

#[tokio::test]
async fn bad_requests_get_status_errors() {
    let sim = start(1).await;
    let client = client(&sim, "c0");
    let cms = "/api/v1/namespaces/default/configmaps";
    let big = vec![b' '; 3 * 1024 * 1024 + 1];
    // Annotations over 256 KiB in total, in a body under the 3 MiB request limit.
    let big_annotations = format!(
        r#"{{"metadata":{{"name":"a","annotations":{{"note":"{}"}}}}}}"#,
        "x".repeat(256 * 1024)
    )
    .into_bytes();
    let cases: Vec<Case> = vec![
        (
            "POST",
            cms.into(),
            Some("application/json"),
            b"{not json".to_vec(),
            400,
            "BadRequest",
        ),
        (
            "POST",
            cms.into(),
            Some("application/json"),
            b"[1,2]".to_vec(),
            400,
            "BadRequest",
        ),
        (
            "POST",
            cms.into(),
            Some("application/yaml"),
            b"metadata: [unclosed".to_vec(),
            400,
            "BadRequest",
        ),
        (
            "PATCH",
            format!("{cms}/x?fieldManager=a"),
            Some("application/apply-patch+yaml"),
            b"a: b: c: [".to_vec(),
            400,
            "BadRequest",
        ),
        (
            "POST",
            cms.into(),
            Some("application/json"),
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{}}"#.to_vec(),
            422,
            "Invalid",
        ),
        (
            "POST",
            cms.into(),
            Some("application/json"),
            br#"{"metadata":{"name":"Not_Valid"}}"#.to_vec(),
            422,
            "Invalid",
        ),
        (
            "POST",
            cms.into(),
            Some("application/json"),
            br#"{"kind":"Secret","metadata":{"name":"a"}}"#.to_vec(),
            400,
            "BadRequest",
        ),
        (
            "POST",
            cms.into(),
            Some("application/json"),
            br#"{"metadata":{"name":"a","namespace":"other"}}"#.to_vec(),
            400,
            "BadRequest",
        ),
        (
            "POST",
            cms.into(),
            Some("application/json"),
            br#"{"metadata":{"name":"a","labels":"x"}}"#.to_vec(),
            400,
            "BadRequest",
        ),
        (
            "POST",
            cms.into(),
            Some("application/json"),
            big,
            413,
            "RequestEntityTooLarge",
        ),
        (
            "POST",
            cms.into(),
            Some("application/json"),
            big_annotations,
            422,
            "Invalid",
        ),
        (
            "POST",
            cms.into(),
            Some("application/vnd.kubernetes.protobuf"),
            b"\x00".to_vec(),
            400,
            "BadRequest",
        ),
        (
            "PATCH",
            format!("{cms}/a"),
            Some("application/vnd.kubernetes.protobuf"),
            b"k8s\x00".to_vec(),
            415,
            "UnsupportedMediaType",
        ),
        (
            "GET",
            "/api/v1/namespaces/default/widgets".into(),
            None,
            vec![],
            404,
            "NotFound",
        ),
        (
            "GET",
            "/apis/example.com/v1/widgets".into(),
            None,
            vec![],
            404,
            "NotFound",
        ),
        ("GET", "/apis/apps/v7".into(), None, vec![], 404, "NotFound"),
        (
            "GET",
            "/nonsense/path".into(),
            None,
            vec![],
            404,
            "NotFound",
        ),
        (
            "GET",
            format!("{cms}?labelSelector=app%3D%3D%3D"),
            None,
            vec![],
            400,
            "BadRequest",
        ),
        (
            "GET",
            format!("{cms}?labelSelector=app+in+(a"),
            None,
            vec![],
            400,
            "BadRequest",
        ),
        (
            "GET",
            format!("{cms}?fieldSelector=spec.nodeName%3Dx"),
            None,
            vec![],
            400,
            "BadRequest",
        ),
        (
            "GET",
            format!("{cms}?limit=ten"),
            None,
            vec![],
            400,
            "BadRequest",
        ),
        (
            "GET",
            format!("{cms}?continue=garbage"),
            None,
            vec![],
            400,
            "BadRequest",
        ),
        (
            "GET",
            format!("{cms}?watch=true&resourceVersion=abc"),
            None,
            vec![],
            400,
            "BadRequest",
        ),
        (
            "POST",
            format!("{cms}/named"),
            Some("application/json"),
            b"{}".to_vec(),
            405,
            "MethodNotAllowed",
        ),
        (
            "POST",
            format!("{cms}?dryRun=Some"),
            Some("application/json"),
            br#"{"metadata":{"name":"a"}}"#.to_vec(),
            400,
            "BadRequest",
        ),
        (
            "DELETE",
            format!("{cms}/a?propagationPolicy=Sideways"),
            None,
            vec![],
            400,
            "BadRequest",
        ),
        (
            "PATCH",
            format!("{cms}/a"),
            Some("text/plain"),
            b"x".to_vec(),
            415,
            "UnsupportedMediaType",
        ),
    ];
    for (method, path, content_type, body, code, reason) in cases {
        let (status, status_body) = raw(&client, method, &path, content_type, body).await;
        assert_eq!(status.as_u16(), code, "{method} {path}: {status_body}");
        assert_eq!(status_body["kind"], "Status", "{method} {path}");
        assert_eq!(status_body["apiVersion"], "v1");
        assert_eq!(status_body["status"], "Failure");
        assert_eq!(status_body["code"], code);
        assert_eq!(
            status_body["reason"], reason,
            "{method} {path}: {status_body}"
        );
        assert!(
            status_body["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }

    // patch failures on an existing object
    raw(
        &client,
        "POST",
        cms,
        Some("application/json"),
        br#"{"metadata":{"name":"a"}}"#.to_vec(),
    )
    .await;
    let (status, _) = raw(
        &client,
        "PATCH",
        &format!("{cms}/a"),
        Some("application/json-patch+json"),
        br#"[{"op":"remove","path":"/nope"}]"#.to_vec(),
    )
    .await;
    assert_eq!(status.as_u16(), 422);
    let (status, _) = raw(
        &client,
        "PATCH",
        &format!("{cms}/a"),
        Some("application/merge-patch+json"),
        b"{bad".to_vec(),
    )
    .await;
    assert_eq!(status.as_u16(), 400);
    let (status, body) = raw(
        &client,
        "PATCH",
        &format!("{cms}/a"),
        Some("application/merge-patch+json"),
        br#"{"metadata":{"name":"renamed"}}"#.to_vec(),
    )
    .await;
    assert_eq!(status.as_u16(), 400, "{body}");

    // unknown clusters are a Status too, and the server is still healthy
    let admin = kube::Client::try_from(kube::Config::new(sim.base_url().parse().expect("url")))
        .expect("client");
    let (status, body) = raw(&admin, "GET", "/clusters/ghost/api", None, vec![]).await;
    assert_eq!(status.as_u16(), 404);
    assert_eq!(body["kind"], "Status");
    let (status, _) = raw(&client, "GET", "/readyz", None, vec![]).await;
    assert_eq!(status.as_u16(), 200);
    let (status, body) = raw(
        &client,
        "GET",
        "/api/v1/namespaces/default/configmaps/a",
        None,
        vec![],
    )
    .await;
    assert_eq!(status.as_u16(), 200);
    assert_eq!(body["metadata"]["name"], "a");
    sim.shutdown().await;
}

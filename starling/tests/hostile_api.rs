//! Hostile and broken requests on the public gRPC API, one test per input, against a real
//! `starling node`: each is refused with a clear message and the right code, nothing already
//! stored is lost, and the node keeps serving. (Oversized messages and unparsable YAML are in
//! `control_plane.rs`.)

mod harness;

use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use harness::{Group, Options, fleet_manifests};
use tonic::codegen::Service;
use tonic::codegen::http;
use tonic::transport::Channel;

/// One node with a few clusters stored, so that a test can check nothing was lost.
async fn group_with_clusters() -> Group {
    let group = Group::start(1, Options::default()).await;
    group
        .apply(1, &fleet_manifests(3))
        .await
        .expect("good manifests");
    group
}

/// The names of the stored clusters.
async fn cluster_names(group: &Group) -> Vec<String> {
    let mut client = group.fleet(1).await;
    let list = client
        .list(proto::ListRequest {
            kind: "clusters".into(),
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner();
    let mut names: Vec<String> = list
        .objects
        .into_iter()
        .map(|object| {
            let value: serde_json::Value =
                serde_json::from_slice(&object.json).expect("object json");
            value["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    names.sort();
    names
}

/// Asserts the three clusters are still there and the node still accepts a good apply.
async fn assert_nothing_lost_and_still_serving(group: &Group) {
    assert_eq!(cluster_names(group).await, ["c0000", "c0001", "c0002"]);
    group
        .apply(1, &fleet_manifests(3))
        .await
        .expect("still serving");
}

async fn apply_bytes(group: &Group, manifests: Vec<u8>) -> tonic::Status {
    let mut client = group.fleet(1).await;
    client
        .apply(proto::ApplyRequest {
            manifests,
            origin: "test".into(),
            dry_run: false,
            ..Default::default()
        })
        .await
        .expect_err("the request is refused")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_that_are_not_utf8_are_refused_over_grpc() {
    let group = group_with_clusters().await;
    let mut bytes = fleet_manifests(1).into_bytes();
    bytes.extend_from_slice(b"\n# caf\xe9\n");
    let error = apply_bytes(&group, bytes).await;
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    assert_eq!(error.message(), "manifests are not valid utf-8");
    assert_nothing_lost_and_still_serving(&group).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_yaml_alias_bomb_is_refused_over_grpc_quickly() {
    let group = group_with_clusters().await;
    let mut text = String::from("a: &a [x,x,x,x,x,x,x,x,x]\n");
    let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
    for pair in names.windows(2) {
        let aliases = vec![format!("*{}", pair[0]); 9].join(",");
        text.push_str(&format!("{}: &{} [{aliases}]\n", pair[1], pair[1]));
    }
    let started = Instant::now();
    let error = apply_bytes(&group, text.into_bytes()).await;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    assert!(
        error.message().contains("repetition limit exceeded"),
        "{}",
        error.message()
    );
    assert_nothing_lost_and_still_serving(&group).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_with_one_bad_object_writes_none_of_it() {
    let group = group_with_clusters().await;
    let text = "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {name: c0009}\nspec: {}\n---\napiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata: {name: Bad_Name}\nspec: {}\n";
    let error = apply_bytes(&group, text.as_bytes().to_vec()).await;
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    assert!(
        error
            .message()
            .contains("document 2: Cluster \"Bad_Name\": metadata.name"),
        "{}",
        error.message()
    );
    assert_nothing_lost_and_still_serving(&group).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_with_a_broken_label_selector_is_refused() {
    let group = group_with_clusters().await;
    let mut client = group.fleet(1).await;
    let error = client
        .list(proto::ListRequest {
            kind: "clusters".into(),
            label_selector: "env in (prod".into(),
            ..Default::default()
        })
        .await
        .expect_err("refused");
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    assert!(
        error
            .message()
            .contains("invalid label selector \"env in (prod\" at position 12"),
        "{}",
        error.message()
    );
    assert_nothing_lost_and_still_serving(&group).await;
}

/// A SyncGroup with `selector:` where `clusterSelector:` belongs (the field was dropped, and the
/// group selected no cluster).
const MISSPELLED_GROUP: &str = "apiVersion: starling.dev/v1alpha1\nkind: SyncGroup\nmetadata: {name: typo}\nspec:\n  sourceRef: {name: repo}\n  selector: {}\n";

const DID_YOU_MEAN: &str = "document 1: SyncGroup \"typo\": unknown field spec.selector; did you mean spec.clusterSelector?";

async fn apply_with(
    group: &Group,
    manifests: &str,
    field_validation: proto::FieldValidation,
) -> Result<proto::ApplyResponse, tonic::Status> {
    let mut client = group.fleet(1).await;
    client
        .apply(proto::ApplyRequest {
            manifests: manifests.as_bytes().to_vec(),
            origin: "typo.yaml".into(),
            dry_run: false,
            field_validation: field_validation.into(),
        })
        .await
        .map(tonic::Response::into_inner)
}

/// The stored SyncGroup `typo`, if any.
async fn stored_typo_group(group: &Group) -> Option<serde_json::Value> {
    let mut client = group.fleet(1).await;
    let object = client
        .get(proto::GetRequest {
            object: Some(proto::ObjectRef {
                kind: "SyncGroup".into(),
                namespace: "default".into(),
                name: "typo".into(),
            }),
        })
        .await
        .ok()?
        .into_inner()
        .object?;
    serde_json::from_slice(&object.json).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misspelled_field_is_refused_by_the_node_whatever_the_client_checked() {
    let group = group_with_clusters().await;
    // A client that says nothing (older, or not `starling`) gets strict, as one that asks.
    for mode in [
        proto::FieldValidation::Unspecified,
        proto::FieldValidation::Strict,
    ] {
        let error = apply_with(&group, MISSPELLED_GROUP, mode)
            .await
            .expect_err("refused");
        assert_eq!(error.code(), tonic::Code::InvalidArgument, "{mode:?}");
        assert_eq!(error.message(), DID_YOU_MEAN, "{mode:?}");
    }
    assert_eq!(stored_typo_group(&group).await, None);
    assert_nothing_lost_and_still_serving(&group).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warn_and_ignore_apply_without_the_unknown_field_and_warn_says_so() {
    let group = group_with_clusters().await;
    let response = apply_with(&group, MISSPELLED_GROUP, proto::FieldValidation::Warn)
        .await
        .expect("accepted with a warning");
    assert_eq!(response.warnings, [DID_YOU_MEAN]);
    let stored = stored_typo_group(&group).await.expect("stored");
    assert!(stored["spec"].get("selector").is_none(), "{stored}");
    assert!(stored["spec"].get("clusterSelector").is_none(), "{stored}");
    let response = apply_with(&group, MISSPELLED_GROUP, proto::FieldValidation::Ignore)
        .await
        .expect("accepted");
    assert!(response.warnings.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starling_apply_refuses_a_misspelled_field_and_validate_warn_prints_it() {
    let group = group_with_clusters().await;
    let dir = std::env::temp_dir().join(format!("starling-typo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let file = dir.join("typo.yaml");
    std::fs::write(&file, MISSPELLED_GROUP).expect("write the manifest");
    let file = file.to_str().expect("a utf-8 path");
    let node = group.running().next().expect("a running node");
    let apply = |extra: &[&str]| {
        std::process::Command::new(harness::binary())
            .args(["apply", "--server", &node.grpc, "-f", file])
            .args(extra)
            .output()
            .expect("run starling apply")
    };
    let refused = apply(&[]);
    let stderr = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(!refused.status.success());
    assert!(
        stderr.contains(&format!("{file}: {DID_YOU_MEAN}")),
        "{stderr}"
    );
    let warned = apply(&["--validate=warn"]);
    let stderr = String::from_utf8_lossy(&warned.stderr).into_owned();
    assert!(warned.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("warning: {file}: {DID_YOU_MEAN}")),
        "{stderr}"
    );
    assert_eq!(
        String::from_utf8_lossy(&warned.stdout),
        "syncgroup.starling.dev/typo created\n"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sends every request to another method of the API: a message of one type arrives where
/// another is expected, which is how a malformed body looks to the server.
#[derive(Clone)]
struct Redirect {
    channel: Channel,
    path: &'static str,
}

impl<B> Service<http::Request<B>> for Redirect
where
    Channel: Service<http::Request<B>>,
{
    type Response = <Channel as Service<http::Request<B>>>::Response;
    type Error = <Channel as Service<http::Request<B>>>::Error;
    type Future = <Channel as Service<http::Request<B>>>::Future;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Service::<http::Request<B>>::poll_ready(&mut self.channel, context)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let uri = format!("http://localhost{}", self.path);
        *request.uri_mut() = uri.parse().expect("uri");
        self.channel.call(request)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_protobuf_apply_request_is_refused() {
    let group = group_with_clusters().await;
    let channel = harness::channel(&group.nodes[&1].grpc);
    let mut client = proto::admin_client::AdminClient::new(Redirect {
        channel,
        path: "/starling.v1.Fleet/Apply",
    });
    // `node_id = 7` is field 1 as a varint, where Apply expects field 1 as bytes.
    let error = client
        .shards(proto::ShardsRequest { node_id: 7 })
        .await
        .expect_err("refused");
    assert!(
        matches!(
            error.code(),
            tonic::Code::InvalidArgument | tonic::Code::Internal
        ),
        "{error:?}"
    );
    assert!(
        error.message().contains("decode") && error.message().contains("ApplyRequest"),
        "{}",
        error.message()
    );
    assert_nothing_lost_and_still_serving(&group).await;
}

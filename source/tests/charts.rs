//! Chart sources against small HTTP servers on loopback: a Helm repository whose archive does
//! not match the index's digest, one that wants credentials, one whose version did not change
//! (nothing downloaded), and a registry that asks for a token with a `Bearer` challenge.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest as _, Sha256};
use source::chart::HELM_CHART_LAYER;
use source::helm_repo::VersionPolicy;
use source::{ArtifactStore, ChartConfig, ChartOrigin, ChartWatcher, HttpAuth, OciReference};
use source::{ErrorKind, SecretBytes};

/// What the server answers for a path: status, extra headers, body.
type Answer = (u16, Vec<(String, String)>, Vec<u8>);
/// Each request's path and `Authorization` header, in order.
type Log = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A tiny HTTP/1.1 server: each request is answered by `route(path, authorization)` and logged.
struct Server {
    base: String,
    log: Log,
}

impl Server {
    fn start(route: impl Fn(&str, Option<&str>) -> Answer + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let base = format!("http://{}", listener.local_addr().unwrap());
        let log: Log = Arc::default();
        let (logged, route) = (log.clone(), Arc::new(route));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let (logged, route) = (logged.clone(), route.clone());
                std::thread::spawn(move || {
                    let mut request = Vec::new();
                    let mut buffer = [0u8; 4096];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buffer) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buffer[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&request).into_owned();
                    let path = text.split(' ').nth(1).unwrap_or("/").to_owned();
                    let authorization = text.lines().find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("authorization")
                            .then(|| value.trim().to_owned())
                    });
                    logged
                        .lock()
                        .unwrap()
                        .push((path.clone(), authorization.clone()));
                    let (status, headers, body) = route(&path, authorization.as_deref());
                    let mut head = format!(
                        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n",
                        body.len()
                    );
                    for (name, value) in headers {
                        head.push_str(&format!("{name}: {value}\r\n"));
                    }
                    head.push_str("\r\n");
                    let _ = stream.write_all(head.as_bytes());
                    let _ = stream.write_all(&body);
                });
            }
        });
        Server { base, log }
    }

    fn requests(&self, path: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == path)
            .count()
    }
}

/// A gzipped tar holding `web/Chart.yaml`.
fn archive(version: &str) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::default(),
    ));
    let chart = format!("apiVersion: v2\nname: web\nversion: {version}\n");
    let mut header = tar::Header::new_gnu();
    header.set_size(chart.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    builder
        .append_data(&mut header, "web/Chart.yaml", chart.as_bytes())
        .unwrap();
    builder.into_inner().unwrap().finish().unwrap()
}

fn index(version: &str, digest: &str) -> Vec<u8> {
    format!(
        "apiVersion: v1\nentries:\n  web:\n    - version: {version}\n      digest: {digest}\n      urls: [web-{version}.tgz]\n"
    )
    .into_bytes()
}

fn ok(body: Vec<u8>) -> Answer {
    (200, Vec::new(), body)
}

/// A watcher over a store in a temporary directory (removed when the returned guard drops).
fn watcher(
    origin: ChartOrigin,
    auth: HttpAuth,
) -> (ChartWatcher, Arc<ArtifactStore>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(ArtifactStore::open(dir.path().join("store")).unwrap());
    let config = ChartConfig {
        origin,
        auth,
        interval: Duration::from_secs(60),
        timeout: Duration::from_secs(10),
        max_artifact_bytes: 1024 * 1024,
    };
    (
        ChartWatcher::new(config, store.clone()).unwrap(),
        store,
        dir,
    )
}

fn helm_origin(server: &Server) -> ChartOrigin {
    ChartOrigin::HelmRepository {
        url: format!("{}/charts", server.base),
        chart: "web".into(),
        policy: VersionPolicy::parse("^1").unwrap(),
    }
}

#[test]
fn a_version_is_downloaded_once_and_an_unchanged_poll_downloads_nothing() {
    let chart = archive("1.0.0");
    let digest = hex::encode(Sha256::digest(&chart));
    let server = Server::start(move |path, _| match path {
        "/charts/index.yaml" => ok(index("1.0.0", &digest)),
        "/charts/web-1.0.0.tgz" => ok(chart.clone()),
        _ => (404, Vec::new(), Vec::new()),
    });
    let (mut watcher, store, _dir) = watcher(helm_origin(&server), HttpAuth::anonymous());
    let first = watcher.poll();
    assert!(first.changed && first.error.is_none(), "{first:?}");
    let good = watcher.last_good().unwrap().clone();
    assert_eq!(good.revision, "web@1.0.0");
    assert!(store.contains(&good.artifact.digest));
    let again = watcher.poll();
    assert!(!again.changed && again.error.is_none(), "{again:?}");
    assert_eq!(server.requests("/charts/index.yaml"), 2);
    assert_eq!(server.requests("/charts/web-1.0.0.tgz"), 1);
}

#[test]
fn an_archive_that_does_not_match_the_index_is_refused_and_not_stored() {
    let chart = archive("1.0.0");
    let server = Server::start(move |path, _| match path {
        "/charts/index.yaml" => ok(index("1.0.0", &"0".repeat(64))),
        _ => ok(chart.clone()),
    });
    let (mut watcher, store, _dir) = watcher(helm_origin(&server), HttpAuth::anonymous());
    let outcome = watcher.poll();
    let error = outcome.error.expect("a digest mismatch fails");
    assert_eq!(error.kind, ErrorKind::Integrity);
    assert!(
        error
            .message
            .contains("does not match the digest the index states"),
        "{}",
        error.message
    );
    assert!(store.list().is_empty(), "nothing stored");
    assert!(watcher.last_good().is_none());
}

#[test]
fn a_repository_that_wants_credentials_gets_them_and_errors_never_show_them() {
    let chart = archive("1.0.0");
    let digest = hex::encode(Sha256::digest(&chart));
    let expected = "Basic dXNlcjpzM2NyZXQtcGFzcw=="; // user:s3cret-pass
    let server = Server::start(move |path, authorization| {
        if authorization != Some(expected) {
            return (401, Vec::new(), b"who are you".to_vec());
        }
        match path {
            "/charts/index.yaml" => ok(index("1.0.0", &digest)),
            _ => ok(chart.clone()),
        }
    });
    let anonymous = watcher(helm_origin(&server), HttpAuth::anonymous())
        .0
        .poll();
    let error = anonymous.error.expect("refused");
    assert_eq!(error.kind, ErrorKind::Auth, "{}", error.message);
    let secret: BTreeMap<String, SecretBytes> = [("username", "user"), ("password", "s3cret-pass")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), SecretBytes::new(v.as_bytes().to_vec())))
        .collect();
    let auth = HttpAuth::from_secret_data(&secret).unwrap();
    let (mut with_credentials, _, _dir) = watcher(helm_origin(&server), auth);
    let outcome = with_credentials.poll();
    assert!(outcome.changed && outcome.error.is_none(), "{outcome:?}");
    assert!(!with_credentials.message().contains("s3cret-pass"));
}

#[test]
fn a_registry_bearer_challenge_gets_a_token_and_the_highest_matching_tag() {
    let chart = archive("1.2.0");
    let layer = format!("sha256:{}", hex::encode(Sha256::digest(&chart)));
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "config": {"mediaType": "application/vnd.cncf.helm.config.v1+json",
                   "digest": format!("sha256:{}", "c".repeat(64)), "size": 2},
        "layers": [{"mediaType": HELM_CHART_LAYER, "digest": layer, "size": chart.len()}],
    })
    .to_string()
    .into_bytes();
    let base = Arc::new(Mutex::new(String::new()));
    let realm = base.clone();
    let blob_path = format!("/v2/charts/web/blobs/{layer}");
    let server = Server::start(move |path, authorization| {
        if path.starts_with("/token?") {
            assert!(
                path.contains("service=registry.test") && path.contains("scope=repository"),
                "{path}"
            );
            return ok(br#"{"token":"tok-1"}"#.to_vec());
        }
        if authorization != Some("Bearer tok-1") {
            let challenge = format!(
                r#"Bearer realm="{}/token",service="registry.test",scope="repository:charts/web:pull""#,
                realm.lock().unwrap()
            );
            return (
                401,
                vec![("WWW-Authenticate".into(), challenge)],
                Vec::new(),
            );
        }
        match path {
            "/v2/charts/web/tags/list" => ok(
                br#"{"name":"charts/web","tags":["1.0.0","1.2.0","2.0.0","1.3.0-rc.1","latest"]}"#
                    .to_vec(),
            ),
            "/v2/charts/web/manifests/1.2.0" => ok(manifest.clone()),
            p if p == blob_path => ok(chart.clone()),
            _ => (404, Vec::new(), Vec::new()),
        }
    });
    *base.lock().unwrap() = server.base.clone();
    let url = server.base.replace("http://", "oci://") + "/charts/web";
    let range = semver::VersionReq::parse("^1").unwrap();
    let origin = ChartOrigin::oci(&url, OciReference::Range(range), true).unwrap();
    let (mut watcher, store, _dir) = watcher(origin, HttpAuth::anonymous());
    let outcome = watcher.poll();
    assert!(outcome.changed && outcome.error.is_none(), "{outcome:?}");
    let good = watcher.last_good().unwrap();
    assert!(
        good.revision.starts_with("1.2.0@sha256:"),
        "{}",
        good.revision
    );
    assert_eq!(good.artifact.digest.to_string(), layer);
    assert!(store.contains(&good.artifact.digest));
    assert_eq!(
        server.requests("/v2/charts/web/tags/list"),
        2,
        "challenged once"
    );
}

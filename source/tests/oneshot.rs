//! `resolve_once`, behind `starling source resolve`: figures for the whole tree and a path,
//! a reusable cache directory, one-line failures; and the pinned artifact format.

mod common;

use common::{WorkRepo, limits};
use source::{Auth, ErrorKind, ResolveRequest, RevisionPolicy, resolve_once};

fn request(repo: &WorkRepo, policy: RevisionPolicy) -> ResolveRequest {
    ResolveRequest {
        url: repo.file_url(),
        policy,
        auth: Auth::anonymous(),
        path: None,
        cache_dir: None,
        limits: limits(),
    }
}

#[test]
fn resolve_reports_revision_digest_size_and_counts() {
    let repo = WorkRepo::with_files(&[
        ("deploy/a.yaml", "a: 1\n"),
        ("deploy/b.yaml", "b: 22\n"),
        ("README", "hello\n"),
    ]);
    repo.tag("v1.0.0");
    let mut req = request(&repo, RevisionPolicy::semver("^1").expect("policy"));
    req.path = Some("deploy".into());
    let report = resolve_once(&req).expect("resolves");
    assert_eq!(report.revision, format!("v1.0.0@sha1:{}", repo.head()));
    assert!(report.digest.starts_with("sha256:") && report.digest.len() == 71);
    assert_eq!(report.file_count, 3);
    assert_eq!(report.content_bytes, 5 + 6 + 6);
    let path = report.path.expect("path figures");
    assert_eq!((path.file_count, path.content_bytes), (2, 11));
}

#[test]
fn a_cache_dir_keeps_the_mirror_and_the_artifact() {
    let repo = WorkRepo::with_files(&[("a", "1")]);
    let cache = tempfile::tempdir().expect("temp dir");
    let mut req = request(&repo, RevisionPolicy::branch("main").expect("policy"));
    req.cache_dir = Some(cache.path().to_path_buf());
    let first = resolve_once(&req).expect("first");
    let second = resolve_once(&req).expect("second");
    assert_eq!(first.digest, second.digest);
    let artifact = cache
        .path()
        .join("artifacts/sha256")
        .join(format!("{}.tar.gz", &first.digest["sha256:".len()..]));
    assert!(artifact.exists(), "{}", artifact.display());
}

#[test]
fn failures_are_one_clear_line() {
    let repo = WorkRepo::with_files(&[("a", "1")]);
    let error = resolve_once(&request(
        &repo,
        RevisionPolicy::branch("gone").expect("policy"),
    ))
    .expect_err("fails");
    assert_eq!(error.kind(), ErrorKind::NotFound);
    assert_eq!(
        error.to_string(),
        format!("branch \"gone\" not found in {}", repo.file_url())
    );
    assert!(!error.to_string().contains('\n'));

    let mut bad_url = request(&repo, RevisionPolicy::branch("main").expect("policy"));
    bad_url.url = "ftp://example.invalid/repo".into();
    assert_eq!(
        resolve_once(&bad_url).err().map(|e| e.kind()),
        Some(ErrorKind::InvalidPolicy)
    );
}

/// The bytes of an artifact are a stored format: if this digest changes, every node's
/// artifacts change with it. Bump `ARTIFACT_FORMAT_VERSION` and update the value on purpose.
#[test]
fn the_artifact_format_is_pinned() {
    let repo = WorkRepo::with_files(&[
        ("deploy/app.yaml", "kind: Deployment\n"),
        ("run.sh", "#!/bin/sh\n"),
    ]);
    let report = resolve_once(&request(
        &repo,
        RevisionPolicy::branch("main").expect("policy"),
    ))
    .expect("resolves");
    assert_eq!(source::ARTIFACT_FORMAT_VERSION, 1);
    assert_eq!(report.digest, GOLDEN_DIGEST, "the artifact format changed");
}

const GOLDEN_DIGEST: &str =
    "sha256:df1d62fd3c807cc56852768b3b39cfc4343857ac74c102c3919003188f344828";

//! The artifact store: reuse after a restart, garbage collection, verified chunked transfer
//! between nodes (the peer-fetch path, also when the git host is down), corruption.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{GitDaemon, Node, WorkRepo, limits};
use source::store::DEFAULT_CHUNK_SIZE;
use source::{
    ArtifactStore, Auth, Digest, ErrorKind, RevisionPolicy, SourceConfig, SourceWatcher,
    materialize,
};

/// Builds the head of `repo` into `node`'s store.
fn build_head(node: &Node, repo: &WorkRepo) -> source::ArchiveSummary {
    let url = repo.url();
    node.fetch(&url).expect("fetch");
    let mirror = node.mirrors.mirror(&url);
    let git = mirror.open().expect("open");
    let oid = git2::Oid::from_str(&repo.head()).expect("oid");
    node.store
        .build_from_git(&git, oid, None, &limits())
        .expect("build")
}

#[test]
fn a_restarted_store_reuses_what_is_on_disk_and_drops_unfinished_writes() {
    let repo = WorkRepo::with_files(&[("a", "1")]);
    let node = Node::new();
    let summary = build_head(&node, &repo);
    let root = node.store.root().to_path_buf();
    std::fs::write(root.join("tmp/artifact-crashed"), b"half").expect("write");
    std::fs::write(root.join("sha256/README"), b"not an artifact").expect("write");

    let reopened = ArtifactStore::open(&root).expect("reopen");
    assert_eq!(
        reopened.list(),
        vec![source::StoredArtifact {
            digest: summary.digest,
            size: summary.size
        }]
    );
    assert_eq!(reopened.total_bytes(), summary.size);
    assert_eq!(std::fs::read_dir(root.join("tmp")).expect("tmp").count(), 0);
    assert!(reopened.verify(&summary.digest).is_ok());
}

#[test]
fn garbage_collection_keeps_referenced_and_recent_artifacts_within_budget() {
    let repo = WorkRepo::with_files(&[("a", "1")]);
    let node = Node::new();
    let mut digests = Vec::new();
    for round in 0..4 {
        repo.write("a", &format!("content {round}\n"));
        repo.commit(&format!("round {round}"));
        digests.push(build_head(&node, &repo));
        std::thread::sleep(Duration::from_millis(5)); // distinct last-use times
    }
    let referenced: BTreeSet<Digest> = [digests[0].digest].into();
    // Budget for one unreferenced artifact: the newest (round 3) stays as a cache.
    let budget = digests[3].size;
    let report = node.store.collect_garbage(&referenced, budget).expect("gc");
    let removed: BTreeSet<Digest> = report.removed.iter().copied().collect();
    assert_eq!(removed, [digests[1].digest, digests[2].digest].into());
    assert_eq!(report.freed_bytes, digests[1].size + digests[2].size);
    assert_eq!(report.kept_bytes, digests[0].size + digests[3].size);
    assert!(!node.store.path_of(&digests[1].digest).exists());

    // With no budget only the referenced one stays, on disk and after a restart.
    node.store.collect_garbage(&referenced, 0).expect("gc");
    let reopened = ArtifactStore::open(node.store.root()).expect("reopen");
    assert_eq!(
        reopened.list().iter().map(|a| a.digest).collect::<Vec<_>>(),
        vec![digests[0].digest]
    );
}

#[test]
fn chunks_move_between_stores_and_are_verified() {
    let repo = WorkRepo::with_files(&[("big.txt", &"0123456789".repeat(50_000))]);
    let (owner, peer) = (Node::new(), Node::new());
    let summary = build_head(&owner, &repo);
    let chunks = owner
        .store
        .open_chunks(&summary.digest, 1024)
        .expect("open");
    let stored = peer
        .store
        .import_verified(summary.digest, 1 << 20, chunks)
        .expect("import");
    assert_eq!(stored.digest, summary.digest);
    assert_eq!(
        std::fs::read(peer.store.path_of(&summary.digest)).expect("read"),
        std::fs::read(owner.store.path_of(&summary.digest)).expect("read")
    );

    // Wrong bytes for a digest are refused and leave nothing behind.
    let other = Node::new();
    let bogus: Vec<Result<Vec<u8>, String>> = vec![Ok(b"not the artifact".to_vec())];
    let error = other
        .store
        .import_verified(summary.digest, 1 << 20, bogus)
        .expect_err("refused");
    assert_eq!(error.kind(), ErrorKind::Integrity);
    assert!(!other.store.contains(&summary.digest));
    assert_eq!(
        std::fs::read_dir(other.store.root().join("tmp"))
            .expect("tmp")
            .count(),
        0
    );

    // A broken stream is a transfer error, and the size limit applies while receiving.
    let broken: Vec<Result<Vec<u8>, String>> =
        vec![Ok(vec![1, 2, 3]), Err("connection reset".into())];
    let error = other
        .store
        .import_verified(summary.digest, 1 << 20, broken)
        .expect_err("refused");
    assert_eq!(error.kind(), ErrorKind::Unreachable);
    let chunks = owner
        .store
        .open_chunks(&summary.digest, 1024)
        .expect("open");
    let error = other
        .store
        .import_verified(summary.digest, 100, chunks)
        .expect_err("refused");
    assert_eq!(error.kind(), ErrorKind::LimitExceeded);
}

#[test]
fn a_corrupt_artifact_is_never_served() {
    let repo = WorkRepo::with_files(&[("a", "1")]);
    let node = Node::new();
    let summary = build_head(&node, &repo);
    let path = node.store.path_of(&summary.digest);
    let mut bytes = std::fs::read(&path).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&path, bytes).expect("write");

    let results: Vec<_> = node
        .store
        .open_chunks(&summary.digest, DEFAULT_CHUNK_SIZE)
        .expect("open")
        .collect();
    let error = results
        .last()
        .and_then(|r| r.as_ref().err())
        .expect("the stream ends in an error");
    assert_eq!(error.kind(), ErrorKind::Integrity);
    assert!(
        !node.store.contains(&summary.digest),
        "the corrupt file is dropped"
    );
    assert!(!path.exists());
}

#[test]
fn peer_fetch_keeps_syncing_when_the_git_host_is_down() {
    let repo = WorkRepo::with_files(&[("deploy/app.yaml", "replicas: 3\n")]);
    let mut daemon = GitDaemon::start(repo.root.path());
    let url = daemon.url("repo");
    let (owner, other) = (Node::new(), Node::new());

    let config = SourceConfig {
        url: url.clone(),
        policy: RevisionPolicy::branch("main").expect("policy"),
        auth: Auth::anonymous(),
        interval: Duration::from_secs(60),
        limits: limits(),
    };
    let mut watcher =
        SourceWatcher::new(config, owner.mirrors.clone(), owner.store.clone()).expect("watcher");
    assert!(watcher.poll().changed);
    let resolved = watcher.resolution().last_good.clone().expect("resolved");

    daemon.stop();
    // The other node cannot build from git...
    let error = materialize(
        &other.mirrors,
        &other.store,
        &url,
        &Auth::anonymous(),
        &resolved.revision,
        &resolved.artifact.digest,
        &limits(),
    )
    .expect_err("git is down");
    assert_eq!(error.kind(), ErrorKind::Unreachable);

    // ...so it streams the artifact from the owner, as the gRPC service and client would.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let stored = runtime.block_on(async {
        let stream = owner
            .store
            .chunk_stream(resolved.artifact.digest, 4096)
            .expect("stream");
        other
            .store
            .import_stream(resolved.artifact.digest, 1 << 20, Box::pin(stream))
            .await
    });
    let stored = stored.expect("imported");
    assert_eq!(stored, resolved.artifact);
    // Now materialize succeeds without git.
    let again = materialize(
        &other.mirrors,
        &other.store,
        &url,
        &Auth::anonymous(),
        &resolved.revision,
        &resolved.artifact.digest,
        &limits(),
    )
    .expect("from the store");
    assert_eq!(again, resolved.artifact);
}

#[test]
fn an_unknown_digest_is_not_found() {
    let node = Node::new();
    let digest = Digest::from_bytes([7; 32]);
    let error = node.store.open_chunks(&digest, 1024).expect_err("missing");
    assert_eq!(error.kind(), ErrorKind::NotFound);
    assert_eq!(
        error.to_string(),
        format!("artifact {digest} not found in the artifact store")
    );
}

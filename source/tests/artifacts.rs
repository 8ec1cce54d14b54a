//! Artifacts: byte-identical builds in two mirrors, the archive layout, traversal and symlink
//! attacks, limits, and subtrees.

mod common;

use std::io::Read;

use common::{GitDaemon, Node, WorkRepo, limits};
use source::{ErrorKind, Limits, RepoUrl};

fn long_name() -> String {
    format!("deep/{}.yaml", "x".repeat(120))
}

/// A repository with nested files, an executable, an in-tree symlink and a long path.
fn rich_repo() -> WorkRepo {
    let repo = WorkRepo::new();
    repo.write("deploy/app.yaml", "kind: Deployment\n");
    repo.write("deploy/base/ns.yaml", "kind: Namespace\n");
    repo.write("scripts/run.sh", "#!/bin/sh\necho hi\n");
    repo.write("Zeta.txt", "capital first\n");
    repo.write("ünïcode.txt", "utf-8 name\n");
    repo.write(&long_name(), "long: true\n");
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(
        repo.dir().join("scripts/run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .expect("chmod");
    std::os::unix::fs::symlink("deploy/app.yaml", repo.dir().join("link.yaml")).expect("symlink");
    repo.commit("rich");
    repo
}

fn build(
    node: &Node,
    url: &RepoUrl,
    commit: &str,
    subtree: Option<&str>,
    limits: &Limits,
) -> Result<source::ArchiveSummary, source::SourceError> {
    node.fetch(url)?;
    let repo = node.mirrors.mirror(url).open()?;
    let oid = git2::Oid::from_str(commit).expect("oid");
    node.store.build_from_git(&repo, oid, subtree, limits)
}

#[test]
fn the_same_commit_gives_the_same_digest_in_two_mirrors() {
    let repo = rich_repo();
    let commit = repo.head();
    let daemon = GitDaemon::start(repo.root.path());
    let (first, second) = (Node::new(), Node::new());
    let a = build(&first, &repo.url(), &commit, None, &limits()).expect("build over file://");
    let b =
        build(&second, &daemon.url("repo"), &commit, None, &limits()).expect("build over git://");
    assert_eq!(a, b);
    let bytes_a = std::fs::read(first.store.path_of(&a.digest)).expect("read");
    let bytes_b = std::fs::read(second.store.path_of(&b.digest)).expect("read");
    assert_eq!(bytes_a, bytes_b);
    // And again, on the same node: the same answer, nothing new stored.
    let again = build(&first, &repo.url(), &commit, None, &limits()).expect("rebuild");
    assert_eq!(again, a);
    assert_eq!(first.store.list().len(), 1);
    assert_eq!(a.file_count, 7);
}

#[test]
fn the_archive_is_sorted_owned_by_nobody_and_timeless() {
    let repo = rich_repo();
    let node = Node::new();
    let summary = build(&node, &repo.url(), &repo.head(), None, &limits()).expect("build");
    let bytes = std::fs::read(node.store.path_of(&summary.digest)).expect("read");
    // gzip header: no flags (no file name), mtime 0, OS byte 255.
    assert_eq!(&bytes[..4], &[0x1f, 0x8b, 8, 0]);
    assert_eq!(&bytes[4..8], &[0, 0, 0, 0]);
    assert_eq!(bytes[9], 255);

    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&bytes[..]));
    let mut seen = Vec::new();
    for entry in archive.entries().expect("entries") {
        let mut entry = entry.expect("entry");
        let header = entry.header().clone();
        let path = entry.path().expect("path").to_string_lossy().into_owned();
        assert_eq!(header.mtime().expect("mtime"), 0, "{path}");
        assert_eq!(
            (header.uid().expect("uid"), header.gid().expect("gid")),
            (0, 0),
            "{path}"
        );
        assert_eq!(header.username().expect("user"), Some(""), "{path}");
        assert_eq!(header.groupname().expect("group"), Some(""), "{path}");
        let mode = header.mode().expect("mode");
        match path.as_str() {
            "scripts/run.sh" => assert_eq!(mode, 0o755),
            "link.yaml" => {
                assert!(header.entry_type().is_symlink());
                assert_eq!(
                    entry
                        .link_name()
                        .expect("link")
                        .map(|l| l.to_string_lossy().into_owned())
                        .as_deref(),
                    Some("deploy/app.yaml")
                );
            }
            _ => assert_eq!(mode, 0o644, "{path}"),
        }
        if path == "deploy/app.yaml" {
            let mut content = String::new();
            entry.read_to_string(&mut content).expect("content");
            assert_eq!(content, "kind: Deployment\n");
        }
        seen.push(path);
    }
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(seen, sorted, "entries are sorted by path");
    assert!(seen.contains(&long_name()), "long paths survive: {seen:?}");
    assert!(seen.iter().all(|p| !p.starts_with(".git")), "{seen:?}");
    assert_eq!(seen.len(), 7);
}

fn unsafe_error(repo: &WorkRepo, branch: &str) -> source::SourceError {
    let node = Node::new();
    let commit = repo.git(&["rev-parse", branch]);
    build(&node, &repo.url(), &commit, None, &limits()).expect_err("the build is refused")
}

#[test]
fn symlinks_out_of_the_tree_are_refused_by_name() {
    let repo = WorkRepo::with_files(&[("ok.yaml", "a: 1\n")]);
    std::os::unix::fs::symlink("/etc/passwd", repo.dir().join("passwd")).expect("symlink");
    repo.commit("absolute link");
    let error = unsafe_error(&repo, "HEAD");
    assert_eq!(error.kind(), ErrorKind::UnsafePath);
    assert_eq!(
        error.to_string(),
        "unsafe path \"passwd\" in the repository: symlink to absolute path \"/etc/passwd\""
    );

    let repo = WorkRepo::with_files(&[("dir/ok.yaml", "a: 1\n")]);
    std::os::unix::fs::symlink("../../secrets", repo.dir().join("dir/escape")).expect("symlink");
    repo.commit("relative escape");
    let error = unsafe_error(&repo, "HEAD");
    assert_eq!(error.kind(), ErrorKind::UnsafePath);
    assert!(
        error.to_string().contains("\"dir/escape\"")
            && error.to_string().contains("leads out of the tree"),
        "{error}"
    );

    // Through another symlink: `here -> .`, `up -> here/..`.
    let repo = WorkRepo::with_files(&[("ok.yaml", "a: 1\n")]);
    std::os::unix::fs::symlink(".", repo.dir().join("here")).expect("symlink");
    std::os::unix::fs::symlink("here/..", repo.dir().join("up")).expect("symlink");
    repo.commit("chained escape");
    assert_eq!(unsafe_error(&repo, "HEAD").kind(), ErrorKind::UnsafePath);
}

#[test]
fn crafted_tree_entries_cannot_escape_or_smuggle_git_metadata() {
    let repo = WorkRepo::with_files(&[("ok.yaml", "a: 1\n")]);
    let blob = repo.blob("payload\n");
    repo.commit_raw_tree("dotdot", &format!("100644 blob {blob}\t..\n"));
    let error = unsafe_error(&repo, "dotdot");
    assert_eq!(error.kind(), ErrorKind::UnsafePath);
    assert!(
        error.to_string().contains("would escape the tree"),
        "{error}"
    );

    repo.commit_raw_tree("dotgit", &format!("100644 blob {blob}\t.GIT\n"));
    let error = unsafe_error(&repo, "dotgit");
    assert_eq!(error.kind(), ErrorKind::UnsafePath);
    assert!(error.to_string().contains(".git entry"), "{error}");
}

#[test]
fn limits_on_files_content_and_artifact_size() {
    let repo = WorkRepo::with_files(&[("a", "1"), ("b", "2"), ("c", &"x".repeat(10_000))]);
    let node = Node::new();
    let commit = repo.head();
    let few_files = Limits {
        max_files: 2,
        ..limits()
    };
    let error = build(&node, &repo.url(), &commit, None, &few_files).expect_err("refused");
    assert_eq!(error.kind(), ErrorKind::LimitExceeded);
    assert_eq!(
        error.to_string(),
        "limit exceeded: the tree has more than 2 files"
    );

    let small_tree = Limits {
        max_tree_bytes: 5_000,
        ..limits()
    };
    let error = build(&node, &repo.url(), &commit, None, &small_tree).expect_err("refused");
    assert_eq!(
        error.to_string(),
        "limit exceeded: the tree's files exceed 5000 bytes"
    );

    let small_artifact = Limits {
        max_artifact_bytes: 100,
        ..limits()
    };
    let error = build(&node, &repo.url(), &commit, None, &small_artifact).expect_err("refused");
    assert_eq!(
        error.to_string(),
        "limit exceeded: the artifact exceeds 100 bytes"
    );
    assert!(node.store.list().is_empty(), "nothing half-written is kept");
    let leftovers = std::fs::read_dir(node.store.root().join("tmp"))
        .expect("tmp")
        .count();
    assert_eq!(leftovers, 0);
}

#[test]
fn a_subtree_is_packaged_relative_to_its_root() {
    let repo = rich_repo();
    let node = Node::new();
    let summary =
        build(&node, &repo.url(), &repo.head(), Some("deploy"), &limits()).expect("build");
    assert_eq!(summary.file_count, 2);
    let bytes = std::fs::read(node.store.path_of(&summary.digest)).expect("read");
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&bytes[..]));
    let paths: Vec<String> = archive
        .entries()
        .expect("entries")
        .map(|e| {
            e.expect("entry")
                .path()
                .expect("path")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(paths, vec!["app.yaml", "base/ns.yaml"]);

    let error =
        build(&node, &repo.url(), &repo.head(), Some("nope"), &limits()).expect_err("missing");
    assert_eq!(error.kind(), ErrorKind::NotFound);
    assert!(
        error
            .to_string()
            .starts_with("directory \"nope\" at commit"),
        "{error}"
    );
}

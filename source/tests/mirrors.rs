//! Mirrors: one per URL, fetches coalesced (100 Sources on one URL, 3 nodes), `git daemon`
//! on loopback, an unreachable host, and the fetch deadline.

mod common;

use std::sync::Barrier;
use std::time::Duration;

use common::{GitDaemon, Node, WorkRepo, limits};
use source::{Auth, ErrorKind, RepoUrl, RevisionPolicy, SourceConfig, SourceWatcher, materialize};

fn watchers(node: &Node, url: &RepoUrl, count: usize, interval: Duration) -> Vec<SourceWatcher> {
    (0..count)
        .map(|_| {
            let config = SourceConfig {
                url: url.clone(),
                policy: RevisionPolicy::branch("main").expect("policy"),
                auth: Auth::anonymous(),
                interval,
                limits: limits(),
            };
            SourceWatcher::new(config, node.mirrors.clone(), node.store.clone()).expect("watcher")
        })
        .collect()
}

/// Polls every watcher at once from its own thread; returns how many reported a change.
fn poll_all_at_once(watchers: &mut [SourceWatcher]) -> usize {
    let barrier = Barrier::new(watchers.len());
    std::thread::scope(|scope| {
        let handles: Vec<_> = watchers
            .iter_mut()
            .map(|watcher| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    let outcome = watcher.poll();
                    assert!(outcome.error.is_none(), "{outcome:?}");
                    outcome.changed
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().expect("poll thread"))
            .filter(|changed| *changed)
            .count()
    })
}

#[test]
fn a_hundred_sources_on_one_url_make_one_fetch_per_interval() {
    let repo = WorkRepo::with_files(&[("deploy/app.yaml", "replicas: 1\n")]);
    let daemon = GitDaemon::start(repo.root.path());
    let url = daemon.url("repo");
    let node = Node::new();
    // Long enough that the first two rounds fall in one interval even on a loaded machine.
    let interval = Duration::from_secs(4);
    let mut sources = watchers(&node, &url, 100, interval);

    assert_eq!(
        poll_all_at_once(&mut sources),
        100,
        "every source sees its first revision"
    );
    assert_eq!(node.mirrors.fetch_count(), 1, "one fetch for 100 sources");

    // A change within the same interval is not fetched again by anyone.
    repo.write("deploy/app.yaml", "replicas: 2\n");
    let second = repo.commit("scale");
    assert_eq!(poll_all_at_once(&mut sources), 0);
    assert_eq!(node.mirrors.fetch_count(), 1);

    // The next interval: one more fetch, and every source moves.
    std::thread::sleep(interval);
    assert_eq!(poll_all_at_once(&mut sources), 100);
    assert_eq!(node.mirrors.fetch_count(), 2);
    for source in &sources {
        let good = source.resolution().last_good.as_ref().expect("resolved");
        assert_eq!(good.revision.commit, second);
    }
    // All of them share one artifact.
    assert_eq!(node.store.list().len(), 2, "one artifact per revision");
}

#[test]
fn three_nodes_fetch_at_most_once_each_per_change_whatever_the_number_of_clusters() {
    let repo = WorkRepo::with_files(&[("app.yaml", "v: 1\n")]);
    let daemon = GitDaemon::start(repo.root.path());
    let url = daemon.url("repo");
    let nodes = [Node::new(), Node::new(), Node::new()];

    // The owner (node 0) polls and resolves.
    let mut owner = watchers(&nodes[0], &url, 1, Duration::from_secs(60)).remove(0);
    assert!(owner.poll().changed);
    let resolved = owner.resolution().last_good.clone().expect("resolved");

    // Every node needs the artifact for 40 clusters, all at once.
    for node in &nodes {
        std::thread::scope(|scope| {
            for _ in 0..40 {
                scope.spawn(|| {
                    let stored = materialize(
                        &node.mirrors,
                        &node.store,
                        &url,
                        &Auth::anonymous(),
                        &resolved.revision,
                        &resolved.artifact.digest,
                        &limits(),
                    )
                    .expect("materialize");
                    assert_eq!(stored.digest, resolved.artifact.digest);
                });
            }
        });
    }
    let fetches: Vec<u64> = nodes.iter().map(|n| n.mirrors.fetch_count()).collect();
    assert_eq!(
        fetches,
        vec![1, 1, 1],
        "at most one fetch per node per change"
    );
}

#[test]
fn equivalent_urls_share_one_mirror() {
    let repo = WorkRepo::with_files(&[("a", "1")]);
    let daemon = GitDaemon::start(repo.root.path());
    let node = Node::new();
    let plain = RepoUrl::parse(&format!("git://127.0.0.1:{}/repo", daemon.port)).expect("url");
    let suffixed =
        RepoUrl::parse(&format!("GIT://127.0.0.1:{}/repo.git/", daemon.port)).expect("url");
    node.fetch(&plain).expect("fetch");
    let report = node
        .mirrors
        .fetch_if_older_than(
            &suffixed,
            &Auth::anonymous(),
            Duration::from_secs(60),
            Duration::from_secs(10),
        )
        .expect("fresh");
    assert!(
        !report.fetched,
        "the second spelling reuses the first one's fetch"
    );
    assert_eq!(
        node.mirrors.mirror(&plain).path(),
        node.mirrors.mirror(&suffixed).path()
    );
    let dirs = std::fs::read_dir(node.mirrors.root())
        .expect("list")
        .count();
    assert_eq!(dirs, 1);

    // Mirrors of URLs no longer used are removed.
    assert_eq!(
        node.mirrors
            .remove_unused(std::slice::from_ref(&plain))
            .expect("gc"),
        0
    );
    assert_eq!(node.mirrors.remove_unused(&[]).expect("gc"), 1);
    assert_eq!(
        std::fs::read_dir(node.mirrors.root())
            .expect("list")
            .count(),
        0
    );
}

#[test]
fn an_unreachable_host_keeps_the_last_revision_and_says_so() {
    let repo = WorkRepo::with_files(&[("a", "1")]);
    let mut daemon = GitDaemon::start(repo.root.path());
    let url = daemon.url("repo");
    let node = Node::new();
    let mut watcher = watchers(&node, &url, 1, Duration::from_millis(1)).remove(0);
    assert!(watcher.poll().changed);
    let kept = watcher.resolution().last_good.clone().expect("resolved");

    daemon.stop();
    let outcome = watcher.poll();
    let error = outcome.error.expect("error");
    assert_eq!(error.kind, ErrorKind::Unreachable);
    assert_eq!(error.reason, "GitUnreachable");
    assert!(
        error.message.starts_with(&format!("cannot reach {url}")),
        "{}",
        error.message
    );
    assert_eq!(watcher.resolution().last_good.as_ref(), Some(&kept));
    assert_eq!(watcher.resolution().consecutive_failures, 1);
}

#[test]
fn failures_are_shared_too_so_a_dead_host_is_tried_once_per_interval() {
    let port = common::free_port();
    let url = RepoUrl::parse(&format!("git://127.0.0.1:{port}/repo")).expect("url");
    let node = Node::new();
    let mut sources = watchers(&node, &url, 20, Duration::from_secs(60));
    for source in &mut sources {
        assert_eq!(
            source.poll().error.map(|e| e.kind),
            Some(ErrorKind::Unreachable)
        );
    }
    assert_eq!(node.mirrors.fetch_count(), 1);
}

#[test]
fn a_fetch_past_its_deadline_is_a_limit_error() {
    let repo = WorkRepo::with_files(&[("a", "1")]);
    let daemon = GitDaemon::start(repo.root.path());
    let node = Node::new();
    let error = node
        .mirrors
        .fetch_if_older_than(
            &daemon.url("repo"),
            &Auth::anonymous(),
            Duration::ZERO,
            Duration::from_nanos(1),
        )
        .expect_err("fails");
    assert_eq!(error.kind(), ErrorKind::LimitExceeded, "{error}");
    assert!(
        error
            .to_string()
            .contains("took longer than the limit of 1ns"),
        "{error}"
    );
}

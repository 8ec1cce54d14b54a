//! Revision policies against real repositories over `file://`: branch, tag, semver, commit;
//! tags added, moved and deleted; force-pushes and vanished branches; the last good revision
//! kept in use while the error is reported.

mod common;

use std::time::Duration;

use common::{Node, WorkRepo, limits};
use source::{Auth, ErrorKind, Notice, RevisionPolicy, SourceConfig, SourceWatcher};

fn watcher(node: &Node, repo: &WorkRepo, policy: RevisionPolicy) -> SourceWatcher {
    let config = SourceConfig {
        url: repo.url(),
        policy,
        auth: Auth::anonymous(),
        // Tiny interval: every poll fetches (the mirror is never "fresh enough").
        interval: Duration::from_millis(1),
        limits: limits(),
    };
    SourceWatcher::new(config, node.mirrors.clone(), node.store.clone()).expect("watcher")
}

fn current_revision(watcher: &SourceWatcher) -> String {
    watcher
        .resolution()
        .last_good
        .as_ref()
        .map(|good| good.revision.to_string())
        .unwrap_or_default()
}

#[test]
fn branch_follows_the_head_and_reports_changes_only_once() {
    let repo = WorkRepo::with_files(&[("app.yaml", "v: 1\n")]);
    let first = repo.head();
    let node = Node::new();
    let mut watcher = watcher(
        &node,
        &repo,
        RevisionPolicy::branch("main").expect("policy"),
    );

    let outcome = watcher.poll();
    assert!(outcome.changed && outcome.error.is_none(), "{outcome:?}");
    assert_eq!(current_revision(&watcher), format!("main@sha1:{first}"));

    let again = watcher.poll();
    assert!(
        !again.changed,
        "an unchanged branch is not a change: {again:?}"
    );

    repo.write("app.yaml", "v: 2\n");
    let second = repo.commit("second");
    let outcome = watcher.poll();
    assert!(outcome.changed && outcome.notices.is_empty(), "{outcome:?}");
    assert_eq!(current_revision(&watcher), format!("main@sha1:{second}"));
}

#[test]
fn a_vanished_branch_keeps_the_last_revision_with_a_clear_error() {
    let repo = WorkRepo::with_files(&[("a", "1")]);
    repo.git(&["checkout", "-q", "-b", "release"]);
    let release = repo.commit("on release");
    let node = Node::new();
    let mut watcher = watcher(
        &node,
        &repo,
        RevisionPolicy::branch("release").expect("policy"),
    );
    assert!(watcher.poll().changed);

    repo.git(&["checkout", "-q", "main"]);
    repo.git(&["branch", "-q", "-D", "release"]);
    let outcome = watcher.poll();
    let error = outcome.error.expect("an error is reported");
    assert_eq!(error.kind, ErrorKind::NotFound);
    assert_eq!(error.reason, "RevisionNotFound");
    assert!(
        error
            .message
            .starts_with("branch \"release\" not found in file://"),
        "{}",
        error.message
    );
    assert!(!outcome.changed);
    assert_eq!(
        current_revision(&watcher),
        format!("release@sha1:{release}")
    );
    assert!(
        watcher
            .resolution()
            .message()
            .contains("still serving revision release@sha1:")
    );
}

#[test]
fn a_force_push_is_followed_and_reported() {
    let repo = WorkRepo::with_files(&[("a", "1")]);
    let base = repo.head();
    repo.write("a", "2");
    let doomed = repo.commit("to be rewritten");
    let node = Node::new();
    let mut watcher = watcher(
        &node,
        &repo,
        RevisionPolicy::branch("main").expect("policy"),
    );
    assert!(watcher.poll().changed);
    assert_eq!(current_revision(&watcher), format!("main@sha1:{doomed}"));

    repo.git(&["reset", "-q", "--hard", &base]);
    repo.write("a", "rewritten");
    let rewritten = repo.commit("rewritten history");
    let outcome = watcher.poll();
    assert!(outcome.changed, "{outcome:?}");
    assert_eq!(
        outcome.notices,
        vec![Notice::HistoryRewritten {
            branch: "main".into(),
            from: doomed.clone(),
            to: rewritten.clone()
        }]
    );
    let text = outcome.notices[0].to_string();
    assert!(text.contains("force-pushed"), "{text}");
}

#[test]
fn tags_added_moved_and_deleted() {
    let repo = WorkRepo::with_files(&[("a", "1")]);
    let node = Node::new();
    let mut watcher = watcher(&node, &repo, RevisionPolicy::tag("v1.0.0").expect("policy"));

    // Not there yet.
    let outcome = watcher.poll();
    assert_eq!(outcome.error.map(|e| e.kind), Some(ErrorKind::NotFound));
    assert!(watcher.resolution().last_good.is_none());

    // Added (annotated tags are peeled to their commit).
    repo.git(&["tag", "-a", "-m", "release", "v1.0.0"]);
    let tagged = repo.head();
    assert!(watcher.poll().changed);
    assert_eq!(current_revision(&watcher), format!("v1.0.0@sha1:{tagged}"));

    // Moved.
    repo.write("a", "2");
    let moved_to = repo.commit("later");
    repo.git(&["tag", "-f", "-a", "-m", "moved", "v1.0.0"]);
    let outcome = watcher.poll();
    assert!(outcome.changed);
    assert_eq!(
        outcome.notices,
        vec![Notice::TagMoved {
            tag: "v1.0.0".into(),
            from: tagged,
            to: moved_to.clone()
        }]
    );

    // Deleted: the error is clear and the moved revision stays in use.
    repo.git(&["tag", "-d", "v1.0.0"]);
    let outcome = watcher.poll();
    let error = outcome.error.expect("error");
    assert_eq!(error.kind, ErrorKind::NotFound);
    assert!(
        error.message.starts_with("tag \"v1.0.0\" not found"),
        "{}",
        error.message
    );
    assert_eq!(
        current_revision(&watcher),
        format!("v1.0.0@sha1:{moved_to}")
    );
}

#[test]
fn semver_picks_the_highest_matching_tag_and_follows_deletions() {
    let repo = WorkRepo::with_files(&[("a", "1")]);
    let commits: Vec<String> = ["v1.0.0", "1.1.0", "v1.2.0-rc.1", "latest", "v2.0.0"]
        .iter()
        .map(|tag| {
            repo.write("a", tag);
            let commit = repo.commit(tag);
            repo.tag(tag);
            commit
        })
        .collect();
    let node = Node::new();
    let mut watcher = watcher(
        &node,
        &repo,
        RevisionPolicy::semver(">=1.0.0, <2.0.0").expect("policy"),
    );
    assert!(watcher.poll().changed);
    assert_eq!(
        current_revision(&watcher),
        format!("1.1.0@sha1:{}", commits[1])
    );

    // A new matching tag wins.
    repo.write("a", "1.3.0");
    let newer = repo.commit("1.3.0");
    repo.tag("v1.3.0");
    assert!(watcher.poll().changed);
    assert_eq!(current_revision(&watcher), format!("v1.3.0@sha1:{newer}"));

    // Deleting it goes back down, with a notice.
    repo.git(&["tag", "-d", "v1.3.0"]);
    let outcome = watcher.poll();
    assert!(outcome.changed);
    assert_eq!(
        outcome.notices,
        vec![Notice::VersionWentDown {
            from: "v1.3.0".into(),
            to: "1.1.0".into()
        }]
    );

    // A range that asks for pre-releases gets them.
    let mut rc = self::watcher(
        &node,
        &repo,
        RevisionPolicy::semver(">=1.2.0-rc.0, <2").expect("policy"),
    );
    rc.poll();
    assert_eq!(
        current_revision(&rc),
        format!("v1.2.0-rc.1@sha1:{}", commits[2])
    );

    // No match at all is a clear not-found.
    let mut none = self::watcher(&node, &repo, RevisionPolicy::semver(">=5").expect("policy"));
    let error = none.poll().error.expect("error");
    assert_eq!(error.kind, ErrorKind::NotFound);
    assert!(
        error
            .message
            .contains("a tag matching semver range \">=5\""),
        "{}",
        error.message
    );
}

#[test]
fn a_pinned_commit_must_exist() {
    let repo = WorkRepo::with_files(&[("a", "1")]);
    let pinned = repo.head();
    repo.write("a", "2");
    repo.commit("later");
    let node = Node::new();
    let mut watcher = watcher(
        &node,
        &repo,
        RevisionPolicy::commit(&pinned).expect("policy"),
    );
    assert!(watcher.poll().changed);
    assert_eq!(current_revision(&watcher), format!("sha1:{pinned}"));
    let fetches = node.mirrors.fetch_count();
    let again = watcher.poll();
    assert!(
        !again.changed && !again.fetched && again.error.is_none(),
        "{again:?}"
    );
    assert_eq!(
        node.mirrors.fetch_count(),
        fetches,
        "a present pinned commit needs no fetch"
    );

    let missing = "0123456789abcdef0123456789abcdef01234567";
    let mut absent = self::watcher(
        &node,
        &repo,
        RevisionPolicy::commit(missing).expect("policy"),
    );
    let error = absent.poll().error.expect("error");
    assert_eq!(error.kind, ErrorKind::NotFound);
    assert!(
        error
            .message
            .starts_with(&format!("commit {missing} not found")),
        "{}",
        error.message
    );
}

#[test]
fn a_missing_repository_is_not_found() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = source::RepoUrl::parse(&format!("file://{}/nothing-here", dir.path().display()))
        .expect("url");
    let node = Node::new();
    let error = node.fetch(&url).expect_err("fails");
    assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");
    assert!(
        error
            .to_string()
            .starts_with("repository not found in file://"),
        "{error}"
    );
}

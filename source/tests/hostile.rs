//! Hostile and broken input to sources, one test per input: repository urls a user writes in a
//! Source, and trees anyone with push access shapes. Each is refused with a clear, lowercase
//! message naming what is wrong, before libgit2 or the packager acts on it.

mod common;

use std::time::{Duration, Instant};

use common::{Node, WorkRepo, limits};
use source::{ErrorKind, RepoUrl};

fn url_error(text: &str) -> String {
    match RepoUrl::parse(text) {
        Ok(url) => panic!("accepted {text:?} as {}", url.redacted()),
        Err(error) => {
            assert_eq!(error.kind(), ErrorKind::InvalidPolicy, "{error}");
            error.to_string()
        }
    }
}

fn build_head(
    repo: &WorkRepo,
    subtree: Option<&str>,
) -> Result<source::ArchiveSummary, source::SourceError> {
    let node = Node::new();
    node.fetch(&repo.url())?;
    let mirror = node.mirrors.mirror(&repo.url()).open()?;
    let oid = git2::Oid::from_str(&repo.head()).expect("oid");
    node.store.build_from_git(&mirror, oid, subtree, &limits())
}

#[test]
fn a_url_naming_the_ext_remote_helper_is_refused() {
    // `ext::` makes the git command line run a program.
    let message = url_error("ext::sh%20-c%20id");
    assert_eq!(
        message,
        "invalid source: \"ext::sh%20-c%20id\" names a git remote helper (ext::), which is not supported"
    );
}

#[test]
fn a_url_whose_host_is_an_ssh_option_is_refused() {
    for text in [
        "ssh://-oProxyCommand=id/org/app.git",
        "-oProxyCommand=id:org/app.git",
        "git@-oProxyCommand=id:org/app.git",
    ] {
        let message = url_error(text);
        assert!(
            message.contains("must not start with '-'"),
            "{text}: {message}"
        );
    }
}

#[test]
fn a_url_with_a_newline_is_refused() {
    let message = url_error("https://git.example.com/app.git\n[core]\nsshCommand=id");
    assert_eq!(
        message,
        "invalid source: the repository url contains whitespace or control characters"
    );
}

#[test]
fn a_url_with_a_password_is_refused_without_repeating_it() {
    let message = url_error("ftp://user:hunter2@example.com/app.git");
    assert!(!message.contains("hunter2"), "{message}");
}

#[test]
fn a_directory_to_package_with_dot_dot_is_refused() {
    let repo = WorkRepo::with_files(&[("deploy/app.yaml", "a: 1\n")]);
    let error = build_head(&repo, Some("deploy/../../etc")).expect_err("refused");
    assert_eq!(error.kind(), ErrorKind::UnsafePath);
    assert_eq!(
        error.to_string(),
        "unsafe path \"deploy/../../etc\" in the repository: the directory to package must not contain '..'"
    );
}

#[test]
fn symlinks_that_point_at_each_other_are_refused_quickly() {
    let repo = WorkRepo::with_files(&[("ok.yaml", "a: 1\n")]);
    std::os::unix::fs::symlink("b", repo.dir().join("a")).expect("symlink");
    std::os::unix::fs::symlink("a", repo.dir().join("b")).expect("symlink");
    repo.commit("a loop");
    let started = Instant::now();
    let error = build_head(&repo, None).expect_err("refused");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(error.kind(), ErrorKind::UnsafePath);
    assert!(error.to_string().contains("loops"), "{error}");
}

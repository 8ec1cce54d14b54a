//! Credentials against a real authenticating smart-http server: a token works, a wrong token
//! or none is a clear auth error, and no secret shows in any error, status or debug output.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::http::AuthServer;
use common::{Node, WorkRepo, limits};
use source::{Auth, ErrorKind, RepoUrl, RevisionPolicy, SourceConfig, SourceWatcher};

const TOKEN: &str = "tok_correct_horse_battery";
const WRONG_TOKEN: &str = "tok_wrong_staple_value";

fn secret(pairs: &[(&str, &str)]) -> Auth {
    let data: BTreeMap<String, source::SecretBytes> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), source::SecretBytes::from(*v)))
        .collect();
    Auth::from_secret_data(&data).expect("secret parses")
}

fn fetch(url: &RepoUrl, auth: &Auth) -> Result<source::FetchReport, source::SourceError> {
    let node = Node::new();
    node.mirrors
        .fetch_if_older_than(url, auth, Duration::ZERO, Duration::from_secs(20))
}

fn assert_no_secret(text: &str) {
    for secret in [TOKEN, WRONG_TOKEN, "urlpassword99"] {
        assert!(!text.contains(secret), "a secret leaked into: {text}");
    }
}

#[test]
fn a_token_is_sent_as_the_password_of_x_access_token() {
    let repo = WorkRepo::with_files(&[("a", "1")]);
    let server = AuthServer::start(repo.root.path(), "x-access-token", TOKEN);
    let url = RepoUrl::parse(&server.url("repo")).expect("url");
    let node = Node::new();
    let config = SourceConfig {
        url,
        policy: RevisionPolicy::branch("main").expect("policy"),
        auth: secret(&[("token", TOKEN)]),
        interval: Duration::from_secs(60),
        limits: limits(),
    };
    let mut watcher =
        SourceWatcher::new(config, node.mirrors.clone(), node.store.clone()).expect("watcher");
    let outcome = watcher.poll();
    assert!(outcome.changed, "{outcome:?}");
    assert_eq!(
        watcher
            .resolution()
            .last_good
            .as_ref()
            .map(|g| g.revision.commit.clone()),
        Some(repo.head())
    );
    assert_no_secret(&format!("{watcher:?}"));
}

#[test]
fn username_and_password_work_too() {
    let repo = WorkRepo::with_files(&[("a", "1")]);
    let server = AuthServer::start(repo.root.path(), "deployer", TOKEN);
    let url = RepoUrl::parse(&server.url("repo")).expect("url");
    fetch(
        &url,
        &secret(&[("username", "deployer"), ("password", TOKEN)]),
    )
    .expect("fetch");
}

#[test]
fn a_wrong_token_is_a_clear_auth_error_without_the_token() {
    let repo = WorkRepo::with_files(&[("a", "1")]);
    let server = AuthServer::start(repo.root.path(), "x-access-token", TOKEN);
    let url = RepoUrl::parse(&server.url("repo")).expect("url");
    let error = fetch(&url, &secret(&[("token", WRONG_TOKEN)])).expect_err("refused");
    assert_eq!(error.kind(), ErrorKind::Auth, "{error}");
    assert_eq!(error.status().reason, "AuthenticationFailed");
    let text = error.to_string();
    assert!(
        text.starts_with(&format!(
            "authentication to {url} failed: the server refused the credentials"
        )),
        "{text}"
    );
    assert_no_secret(&text);
    assert_no_secret(&format!("{error:?} {:?}", error.status()));
}

#[test]
fn no_credentials_where_some_are_needed_is_an_auth_error() {
    let repo = WorkRepo::with_files(&[("a", "1")]);
    let server = AuthServer::start(repo.root.path(), "x-access-token", TOKEN);
    let url = RepoUrl::parse(&server.url("repo")).expect("url");
    let error = fetch(&url, &Auth::anonymous()).expect_err("refused");
    assert_eq!(error.kind(), ErrorKind::Auth, "{error}");
    assert_eq!(
        error.to_string(),
        format!(
            "authentication to {url} failed: the server requires credentials but the source has none"
        )
    );
}

#[test]
fn a_password_inside_the_url_is_used_and_never_shown() {
    let repo = WorkRepo::with_files(&[("a", "1")]);
    let server = AuthServer::start(repo.root.path(), "x-access-token", "urlpassword99");
    let good = format!(
        "http://x-access-token:urlpassword99@127.0.0.1:{}/repo",
        server.port
    );
    fetch(&RepoUrl::parse(&good).expect("url"), &Auth::anonymous()).expect("url credentials work");

    let wrong = format!(
        "http://x-access-token:{WRONG_TOKEN}@127.0.0.1:{}/repo",
        server.port
    );
    let url = RepoUrl::parse(&wrong).expect("url");
    let error = fetch(&url, &Auth::anonymous()).expect_err("refused");
    assert_eq!(error.kind(), ErrorKind::Auth, "{error}");
    assert_eq!(
        error.to_string(),
        format!(
            "authentication to http://x-access-token:***@127.0.0.1:{}/repo failed: the server refused the credentials",
            server.port
        )
    );
    assert_no_secret(&format!("{error} {error:?} {url} {url:?}"));
}

#[test]
fn ssh_without_a_reachable_server_is_unreachable_not_a_hang() {
    let port = common::free_port();
    let url = RepoUrl::parse(&format!("ssh://git@127.0.0.1:{port}/repo.git")).expect("url");
    let auth = secret(&[
        (
            "identity",
            "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-real-key\n-----END OPENSSH PRIVATE KEY-----",
        ),
        (
            "known_hosts",
            "[127.0.0.1]:22 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
        ),
    ]);
    let error = fetch(&url, &auth).expect_err("fails");
    assert_eq!(error.kind(), ErrorKind::Unreachable, "{error}");
    assert!(!error.to_string().contains("not-a-real-key"));
}

//! The fetch time limit against a server that accepts and never answers. In its own test
//! binary because it sets libgit2's process-wide socket time-out.

mod common;

use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Node;
use source::{Auth, ErrorKind, Limits, RepoUrl};

#[test]
fn a_silent_server_is_cut_off_by_the_time_limit() {
    // Accepts connections and never answers.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    source::set_network_timeouts(Duration::from_secs(2), Duration::from_secs(1)).expect("timeouts");
    let url = RepoUrl::parse(&format!("git://127.0.0.1:{port}/repo")).expect("url");
    let node = Node::new();
    let limits = Limits {
        fetch_timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let (sender, receiver) = std::sync::mpsc::channel();
    let mirrors = Arc::clone(&node.mirrors);
    std::thread::spawn(move || {
        let started = Instant::now();
        let result = mirrors.fetch_if_older_than(
            &url,
            &Auth::anonymous(),
            Duration::ZERO,
            limits.fetch_timeout,
        );
        let _ = sender.send((result, started.elapsed()));
    });
    let (result, elapsed) = receiver
        .recv_timeout(Duration::from_secs(20))
        .expect("the fetch gives up in time");
    drop(listener);
    let error = result.expect_err("fails");
    assert_eq!(error.kind(), ErrorKind::LimitExceeded, "{error}");
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
}

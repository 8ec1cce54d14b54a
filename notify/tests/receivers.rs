//! Each provider's requests, checked at a receiver on loopback against the shape its service
//! documents; retries on 5xx and 429, none on 400; a hanging receiver bounded by the timeout.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, Uri};
use serde_json::Value;
use starling_notify::{
    Client, CommitState, CommitStatus, Counts, Event, ProviderKind, RetryPolicy, SendError,
    Severity, Target, compose, deliver, message_request, status_request,
};

/// What a receiver got.
#[derive(Clone, Debug)]
struct Received {
    path: String,
    headers: HeaderMap,
    body: Bytes,
}

impl Received {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }
}

/// How a receiver answers one request.
#[derive(Clone, Copy)]
enum Answer {
    Status(u16),
    TooMany { retry_after: u64 },
    Hang,
}

#[derive(Clone, Default)]
struct Receiver {
    received: Arc<Mutex<Vec<Received>>>,
    script: Arc<Mutex<VecDeque<Answer>>>,
}

impl Receiver {
    /// A receiver on loopback that answers `script` in turn, then 200.
    async fn start(script: &[Answer]) -> (Receiver, String) {
        let receiver = Receiver::default();
        receiver
            .script
            .lock()
            .unwrap()
            .extend(script.iter().copied());
        let state = receiver.clone();
        let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: Bytes| {
            let state = state.clone();
            async move {
                state.received.lock().unwrap().push(Received {
                    path: uri.path().to_string(),
                    headers,
                    body,
                });
                let answer = state.script.lock().unwrap().pop_front();
                match answer.unwrap_or(Answer::Status(200)) {
                    Answer::Status(code) => (
                        StatusCode::from_u16(code).unwrap(),
                        HeaderMap::new(),
                        "answer",
                    ),
                    Answer::TooMany { retry_after } => {
                        let mut headers = HeaderMap::new();
                        headers.insert("retry-after", retry_after.into());
                        (StatusCode::TOO_MANY_REQUESTS, headers, "slow down")
                    }
                    Answer::Hang => {
                        std::future::pending::<()>().await;
                        unreachable!()
                    }
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (receiver, address)
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

fn event(n: u32, reason: &str, severity: Severity) -> Event {
    Event {
        id: format!("starling-test-{n}"),
        severity,
        reason: reason.into(),
        kind: "SyncGroup".into(),
        namespace: "shop".into(),
        name: "web".into(),
        group: Some("web".into()),
        message: format!("event {n}"),
        revision: Some("main@sha1:0a1b2c3d4e5f60718293a4b5c6d7e8f901234567".into()),
        counts: Some(Counts {
            updated: 20,
            failed: 3,
            unreachable: 1,
            total: 50,
        }),
        failing: vec!["eu-7: Apply: admission webhook denied".into()],
        at: "2026-12-03T07:00:00Z".into(),
        ..Event::default()
    }
}

fn quick() -> RetryPolicy {
    RetryPolicy {
        attempts: 4,
        initial_delay: Duration::from_millis(20),
        max_delay: Duration::from_millis(100),
    }
}

async fn send(target: Target, events: Vec<Event>) -> Result<(), SendError> {
    let message = compose(events, Some("prod"));
    let request = message_request(&target, &message)?;
    deliver(&Client::new(target)?, request, quick()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generic_posts_the_events_with_their_idempotency_key() {
    let (receiver, address) = Receiver::start(&[]).await;
    let target = Target::new(ProviderKind::Generic, Some(format!("{address}/hook")));
    send(target, vec![event(1, "RolloutStarted", Severity::Info)])
        .await
        .unwrap();
    let got = receiver.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].path, "/hook");
    assert_eq!(got[0].header("x-starling-event-id"), "starling-test-1");
    assert_eq!(got[0].header("content-type"), "application/json");
    let body = got[0].json();
    assert_eq!(body["eventIds"], serde_json::json!(["starling-test-1"]));
    assert_eq!(body["events"][0]["reason"], "RolloutStarted");
    assert_eq!(body["events"][0]["counts"]["total"], 50);
    assert_eq!(body["summary"], "prod");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generic_hmac_signs_the_body_with_the_token() {
    let (receiver, address) = Receiver::start(&[]).await;
    let mut target = Target::new(ProviderKind::GenericHmac, Some(address));
    target.token = Some("s3cret-key".into());
    send(target, vec![event(2, "RolloutComplete", Severity::Info)])
        .await
        .unwrap();
    let got = &receiver.received()[0];
    let expected = format!("sha256={}", starling_notify::sign(b"s3cret-key", &got.body));
    assert_eq!(got.header("x-signature"), expected);
    // Checked independently of the crate's own signing: a receiver's verification.
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"s3cret-key").unwrap();
    mac.update(&got.body);
    let hex = got.header("x-signature").strip_prefix("sha256=").unwrap();
    mac.verify_slice(&hex::decode(hex).unwrap()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_services_get_their_documented_shapes() {
    let (receiver, address) = Receiver::start(&[]).await;
    let halted = || vec![event(3, "RolloutHalted", Severity::Error)];
    let mut slack = Target::new(ProviderKind::Slack, Some(format!("{address}/slack")));
    slack.channel = Some("#fleet".into());
    slack.username = Some("starling".into());
    send(slack, halted()).await.unwrap();
    send(
        Target::new(ProviderKind::Msteams, Some(format!("{address}/teams"))),
        halted(),
    )
    .await
    .unwrap();
    send(
        Target::new(ProviderKind::Discord, Some(format!("{address}/discord"))),
        halted(),
    )
    .await
    .unwrap();
    send(
        Target::new(ProviderKind::Alertmanager, Some(address.clone())),
        halted(),
    )
    .await
    .unwrap();
    let got = receiver.received();
    let slack = got[0].json();
    assert_eq!(got[0].path, "/slack");
    assert!(slack["text"].as_str().unwrap().contains("RolloutHalted"));
    assert_eq!(slack["channel"], "#fleet");
    assert_eq!(slack["username"], "starling");
    assert_eq!(slack["attachments"][0]["color"], "danger");
    assert!(
        slack["attachments"][0]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["title"] == "Clusters")
    );
    let teams = got[1].json();
    assert_eq!(teams["@type"], "MessageCard");
    assert_eq!(teams["@context"], "https://schema.org/extensions");
    assert!(teams["summary"].is_string());
    assert!(teams["sections"][0]["facts"].is_array());
    let discord = got[2].json();
    assert!(discord["content"].as_str().unwrap().len() <= 2000);
    assert!(discord["embeds"][0]["title"].is_string());
    assert!(discord["embeds"][0]["color"].is_u64());
    assert_eq!(got[3].path, "/api/v2/alerts");
    let alerts = got[3].json();
    let alert = &alerts.as_array().unwrap()[0];
    assert_eq!(alert["labels"]["alertname"], "StarlingRolloutHalted");
    assert_eq!(alert["labels"]["severity"], "error");
    assert_eq!(alert["annotations"]["eventId"], "starling-test-3");
    assert_eq!(alert["startsAt"], "2026-12-03T07:00:00Z");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_failures_reach_the_receiver_as_one_message() {
    let (receiver, address) = Receiver::start(&[]).await;
    let events = (0..300)
        .map(|n| event(n, "SyncFailed", Severity::Error))
        .collect();
    send(Target::new(ProviderKind::Generic, Some(address)), events)
        .await
        .unwrap();
    let got = receiver.received();
    assert_eq!(got.len(), 1);
    let body = got[0].json();
    assert_eq!(body["count"], 300);
    assert_eq!(body["eventIds"].as_array().unwrap().len(), 300);
    assert!(body["text"].as_str().unwrap().ends_with("… and 290 more"));
    assert_eq!(
        got[0].header("x-starling-event-id"),
        "starling-test-0..starling-test-299"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_and_429_are_retried_and_400_is_not() {
    let (receiver, address) = Receiver::start(&[
        Answer::Status(500),
        Answer::Status(503),
        Answer::TooMany { retry_after: 0 },
    ])
    .await;
    let target = Target::new(ProviderKind::Generic, Some(address.clone()));
    send(
        target.clone(),
        vec![event(4, "SyncFailed", Severity::Error)],
    )
    .await
    .unwrap();
    assert_eq!(receiver.received().len(), 4);
    let ids: Vec<String> = receiver
        .received()
        .iter()
        .map(|r| r.header("x-starling-event-id").to_string())
        .collect();
    assert!(ids.iter().all(|id| id == "starling-test-4"), "{ids:?}");

    let (receiver, address) = Receiver::start(&[Answer::Status(400)]).await;
    let error = send(
        Target::new(ProviderKind::Generic, Some(address)),
        vec![event(5, "SyncFailed", Severity::Error)],
    )
    .await
    .unwrap_err();
    assert!(!error.is_retryable());
    assert!(error.to_string().contains("answered 400"), "{error}");
    assert_eq!(receiver.received().len(), 1);

    let (receiver, address) = Receiver::start(&[Answer::Status(502); 10]).await;
    let error = send(
        Target::new(ProviderKind::Generic, Some(address)),
        vec![event(6, "SyncFailed", Severity::Error)],
    )
    .await
    .unwrap_err();
    assert!(error.is_retryable());
    assert_eq!(receiver.received().len(), quick().attempts as usize);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_receiver_is_cut_off_by_the_timeout_and_no_secret_is_in_the_error() {
    let (_receiver, address) = Receiver::start(&[Answer::Hang; 4]).await;
    let mut target = Target::new(
        ProviderKind::Slack,
        Some(format!("{address}/T000/B000/xoxb-hook")),
    );
    target.timeout = Duration::from_millis(300);
    let message = compose(vec![event(7, "SyncFailed", Severity::Error)], None);
    let request = message_request(&target, &message).unwrap();
    let client = Client::new(target).unwrap();
    let policy = RetryPolicy {
        attempts: 1,
        ..quick()
    };
    let error = tokio::time::timeout(Duration::from_secs(20), deliver(&client, request, policy))
        .await
        .expect("the timeout bounds a hanging receiver")
        .unwrap_err();
    assert!(error.is_retryable());
    assert!(!error.to_string().contains("xoxb-hook"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_statuses_follow_each_git_hosts_api() {
    let (receiver, address) = Receiver::start(&[]).await;
    let sha = "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567";
    let status = |state| CommitStatus {
        repository: "acme/platform/fleet".into(),
        sha: sha.into(),
        context: "starling/shop/web".into(),
        state,
        description: "4,210 of 10,000 clusters at 0a1b2c3 (3 failed)".into(),
        target_url: Some("https://starling.example/groups/shop/web".into()),
    };
    for (kind, base) in [
        (ProviderKind::Github, format!("{address}/gh")),
        (ProviderKind::Gitlab, format!("{address}/gl")),
        (ProviderKind::Gitea, format!("{address}/gt")),
    ] {
        let mut target = Target::new(kind, Some(base));
        target.token = Some("tok-123".into());
        let request = status_request(&target, &status(CommitState::Pending)).unwrap();
        deliver(&Client::new(target).unwrap(), request, quick())
            .await
            .unwrap();
    }
    let got = receiver.received();
    assert_eq!(
        got[0].path,
        format!("/gh/repos/acme/platform/fleet/statuses/{sha}")
    );
    assert_eq!(got[0].header("authorization"), "Bearer tok-123");
    assert_eq!(got[0].header("accept"), "application/vnd.github+json");
    let github = got[0].json();
    assert_eq!(github["state"], "pending");
    assert_eq!(github["context"], "starling/shop/web");
    assert_eq!(
        github["target_url"],
        "https://starling.example/groups/shop/web"
    );
    assert!(
        github["description"]
            .as_str()
            .unwrap()
            .starts_with("4,210 of 10,000")
    );

    assert_eq!(
        got[1].path,
        format!("/gl/api/v4/projects/acme%2Fplatform%2Ffleet/statuses/{sha}")
    );
    assert_eq!(got[1].header("private-token"), "tok-123");
    let gitlab = got[1].json();
    assert_eq!(gitlab["state"], "running");
    assert_eq!(gitlab["name"], "starling/shop/web");

    assert_eq!(
        got[2].path,
        format!("/gt/api/v1/repos/acme/platform/fleet/statuses/{sha}")
    );
    assert_eq!(got[2].header("authorization"), "token tok-123");
    assert_eq!(got[2].json()["state"], "pending");

    let target = Target::new(ProviderKind::Slack, Some(address));
    assert!(status_request(&target, &status(CommitState::Success)).is_err());
}

//! The webhook receiver, `POST /hooks/<namespace>/<source>` on every replica's HTTP port: a
//! git host's push event, verified against the Source's `spec.webhook`, makes the Source's
//! owner poll at once instead of at its interval (a [`Command::RequestPoll`] through Raft, so
//! any replica can take the event).
//!
//! Verification, by provider: an HMAC-SHA256 of the body (GitHub, Gitea/Forgejo, Bitbucket;
//! the generic receiver signs `<timestamp>.<body>` and refuses timestamps more than five
//! minutes off) or the token itself (GitLab). Comparisons are constant-time. A verified
//! delivery is known by its delivery id and its body's digest in the replicated state
//! (`SourceEntry::deliveries`, bounded and expiring): one seen before, on any replica and
//! under any delivery id, is refused as a replay (409), and this replica's own recent ids are
//! refused before they cost a Raft write. Bodies over [`MAX_BODY_BYTES`] are refused before
//! they are read. Events other than pushes (and pings) are acknowledged and ignored. The
//! secret is never logged or echoed. However many pushes arrive, the Source's owner runs at
//! most one poll at a time and one more after it (`worker/sources.rs`).

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use fleet::Command;
use fleet::resources::{WebhookProvider, WebhookSpec};
use fleet::state::key_of;
use hmac::{Hmac, Mac};
use sha2::{Digest as _, Sha256};

use crate::node::Replica;

/// The largest event body taken (GitHub caps its payloads at 25 MB; a push of a few
/// thousand commits stays far below this).
pub(crate) const MAX_BODY_BYTES: usize = 1024 * 1024;
/// How far a generic event's timestamp may be from this replica's clock.
const MAX_SKEW_SECONDS: u64 = 300;
/// Delivery ids remembered against replays.
const DELIVERIES_KEPT: usize = 10_000;

/// Delivery ids already received, the oldest forgotten first.
#[derive(Default)]
pub struct Deliveries(Mutex<(VecDeque<String>, HashSet<String>)>);

impl Deliveries {
    /// Records a delivery; false when it was seen before.
    fn first_time(&self, id: String) -> bool {
        let mut guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (order, seen) = &mut *guard;
        if seen.contains(&id) {
            return false;
        }
        if order.len() >= DELIVERIES_KEPT
            && let Some(oldest) = order.pop_front()
        {
            seen.remove(&oldest);
        }
        seen.insert(id.clone());
        order.push_back(id);
        true
    }
}

/// Why an event was refused: the status and a message for the sender.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Refusal(pub StatusCode, pub String);

/// The one answer to a delivery that was not verified: an unknown Source, one without a
/// webhook or its secret, a missing or wrong signature.
const UNVERIFIED: &str =
    "not accepted: no such webhook, or the delivery's signature or token does not verify";

fn refuse(code: StatusCode, message: impl Into<String>) -> Refusal {
    Refusal(code, message.into())
}

/// What a verified event asks for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A push (or tag push): poll the source.
    Poll,
    /// Another event (a ping, an issue comment): acknowledged, nothing to do.
    Ignore(String),
}

fn header<'a>(headers: &'a HeaderMap, names: &[&str]) -> Option<&'a str> {
    names
        .iter()
        .find_map(|name| headers.get(*name))
        .and_then(|value| value.to_str().ok())
}

fn required<'a>(headers: &'a HeaderMap, names: &[&str]) -> Result<&'a str, Refusal> {
    header(headers, names).ok_or_else(|| {
        refuse(
            StatusCode::BAD_REQUEST,
            format!("missing header {}", names.join(" or ")),
        )
    })
}

/// Checks `HMAC-SHA256(secret, message)` against a hex signature, in constant time.
fn check_hmac(secret: &[u8], message: &[&[u8]], signature_hex: &str) -> Result<(), Refusal> {
    let bad = || refuse(StatusCode::UNAUTHORIZED, "signature does not match");
    let signature = hex::decode(signature_hex.trim()).map_err(|_| bad())?;
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).map_err(|_| bad())?;
    for part in message {
        mac.update(part);
    }
    mac.verify_slice(&signature).map_err(|_| bad())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq as _;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// Verifies an event for `provider` with `secret`; returns its delivery id (if the provider
/// sends one) and what it asks for. `now` is the unix time in seconds.
pub(crate) fn verify(
    provider: WebhookProvider,
    secret: &[u8],
    headers: &HeaderMap,
    body: &[u8],
    now: u64,
) -> Result<(Option<String>, Verdict), Refusal> {
    let (delivery, event, pushes): (Option<&str>, &str, &[&str]) = match provider {
        WebhookProvider::Github => {
            let signature = required(headers, &["x-hub-signature-256"])?;
            let hex = signature
                .strip_prefix("sha256=")
                .ok_or_else(|| refuse(StatusCode::UNAUTHORIZED, "signature is not sha256=<hex>"))?;
            check_hmac(secret, &[body], hex)?;
            (
                Some(required(headers, &["x-github-delivery"])?),
                required(headers, &["x-github-event"])?,
                &["push"],
            )
        }
        WebhookProvider::Gitea => {
            let signature = required(headers, &["x-forgejo-signature", "x-gitea-signature"])?;
            check_hmac(secret, &[body], signature)?;
            (
                header(headers, &["x-forgejo-delivery", "x-gitea-delivery"]),
                required(headers, &["x-forgejo-event", "x-gitea-event"])?,
                &["push", "create"],
            )
        }
        WebhookProvider::Bitbucket => {
            let signature = required(headers, &["x-hub-signature"])?;
            let hex = signature
                .strip_prefix("sha256=")
                .ok_or_else(|| refuse(StatusCode::UNAUTHORIZED, "signature is not sha256=<hex>"))?;
            check_hmac(secret, &[body], hex)?;
            (
                header(headers, &["x-request-uuid", "x-hook-uuid"]),
                required(headers, &["x-event-key"])?,
                &["repo:push", "repo:refs_changed"],
            )
        }
        WebhookProvider::Gitlab => {
            let token = required(headers, &["x-gitlab-token"])?;
            if !constant_time_eq(token.as_bytes(), secret) {
                return Err(refuse(StatusCode::UNAUTHORIZED, "token does not match"));
            }
            (
                header(headers, &["x-gitlab-event-uuid", "idempotency-key"]),
                required(headers, &["x-gitlab-event"])?,
                &["Push Hook", "Tag Push Hook"],
            )
        }
        WebhookProvider::Generic => {
            let signature = required(headers, &["x-starling-signature"])?;
            let hex = signature
                .strip_prefix("sha256=")
                .ok_or_else(|| refuse(StatusCode::UNAUTHORIZED, "signature is not sha256=<hex>"))?;
            let timestamp = required(headers, &["x-starling-timestamp"])?;
            check_hmac(secret, &[timestamp.as_bytes(), b".", body], hex)?;
            let sent: u64 = timestamp.parse().map_err(|_| {
                refuse(
                    StatusCode::BAD_REQUEST,
                    "x-starling-timestamp is not unix seconds",
                )
            })?;
            if sent.abs_diff(now) > MAX_SKEW_SECONDS {
                return Err(refuse(
                    StatusCode::UNAUTHORIZED,
                    "timestamp more than 5 minutes from this replica's clock (a replay?)",
                ));
            }
            (
                Some(required(headers, &["x-starling-delivery"])?),
                header(headers, &["x-starling-event"]).unwrap_or("push"),
                &["push"],
            )
        }
    };
    let verdict = if pushes.contains(&event) {
        Verdict::Poll
    } else {
        Verdict::Ignore(format!(
            "event {event} ignored: only pushes poll the source"
        ))
    };
    Ok((delivery.map(String::from), verdict))
}

/// `POST /hooks/:namespace/:source`.
pub(crate) async fn receive(
    State(replica): State<Arc<Replica>>,
    State(deliveries): State<Arc<Deliveries>>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    match handle(&replica, &deliveries, &namespace, &name, &headers, &body).await {
        Ok(message) => {
            replica.metrics.webhooks.get_or_create(&accepted()).inc();
            (StatusCode::ACCEPTED, format!("{message}\n"))
        }
        Err(Refusal(code, message)) => {
            tracing::info!(source = %key_of(&namespace, &name), status = code.as_u16(), %message, "webhook refused");
            replica.metrics.webhooks.get_or_create(&refused()).inc();
            (code, format!("{message}\n"))
        }
    }
}

fn accepted() -> crate::metrics::ResultLabel {
    crate::metrics::ResultLabel {
        result: "accepted".into(),
    }
}

fn refused() -> crate::metrics::ResultLabel {
    crate::metrics::ResultLabel {
        result: "refused".into(),
    }
}

async fn handle(
    replica: &Replica,
    deliveries: &Deliveries,
    namespace: &str,
    name: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<String, Refusal> {
    let key = key_of(namespace, name);
    let (spec, secret): (Option<WebhookSpec>, Option<starling_sync::SecretBytes>) =
        replica.raft.reader().read(|state| {
            let spec = state
                .sources
                .get(&key)
                .and_then(|s| s.object.spec.webhook.clone());
            let secret = spec.as_ref().and_then(|spec| {
                let secret = state.secret(namespace, &spec.secret_ref.name)?;
                crate::worker::secret_data(secret).remove("token")
            });
            (spec, secret)
        });
    // Until a delivery is verified, every refusal reads the same, so that a caller without the
    // secret cannot tell which Sources have a webhook; the replica logs the real reason.
    let unverified = |reason: Refusal| {
        tracing::info!(source = %key, status = reason.0.as_u16(), reason = %reason.1, "webhook not verified");
        refuse(StatusCode::UNAUTHORIZED, UNVERIFIED)
    };
    let Some(spec) = spec else {
        return Err(unverified(refuse(
            StatusCode::NOT_FOUND,
            format!("no source {key} with a webhook"),
        )));
    };
    let Some(secret) = secret.filter(|s| !s.is_empty()) else {
        tracing::warn!(
            source = %key,
            "the webhook secret of source {key} (secret {namespace}/{}, key token) is missing: \
             every delivery is refused",
            spec.secret_ref.name
        );
        return Err(unverified(refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "the webhook secret is missing",
        )));
    };
    let now = u64::try_from(crate::clock::unix_now()).unwrap_or(0);
    let (delivery, verdict) =
        verify(spec.provider, secret.expose(), headers, body, now).map_err(unverified)?;
    if let Some(delivery) = &delivery
        && !deliveries.first_time(format!("{key}/{delivery}"))
    {
        return Err(refuse(
            StatusCode::CONFLICT,
            format!("delivery {delivery} was already received (a replay?)"),
        ));
    }
    if let Verdict::Ignore(message) = verdict {
        return Ok(message);
    }
    // Known by its delivery id (when the provider gives one) and by its body's digest, in the
    // replicated state: a body replayed on any replica, under any delivery id, is refused.
    let mut keys = vec![format!("sha256:{}", hex::encode(Sha256::digest(body)))];
    if let Some(delivery) = &delivery {
        keys.push(format!("id:{delivery}"));
    }
    match replica
        .raft
        .propose(replica.audited(
            &webhook_actor(replica, spec.provider, delivery.as_deref()),
            Command::RequestPoll {
                source: key.clone(),
                deliveries: keys,
                at: Some(crate::node::Replica::now_rfc3339()),
            },
        ))
        .await
    {
        Ok((_, fleet::Outcome::Rejected { message })) => {
            Err(refuse(StatusCode::NOT_FOUND, message))
        }
        Ok((_, fleet::Outcome::Applied(fleet::state::ApplyResult::Unchanged))) => Err(refuse(
            StatusCode::CONFLICT,
            "this delivery was already received (a replay?)",
        )),
        Ok(_) => Ok(format!("polling source {key}")),
        Err(error) => Err(refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("cannot reach the leader to poll source {key}: {error}"),
        )),
    }
}

/// Who a verified delivery is, for the audit log: the provider's webhook and its delivery id.
fn webhook_actor(
    replica: &crate::node::Replica,
    provider: WebhookProvider,
    delivery: Option<&str>,
) -> fleet::state::audit::Actor {
    let provider = format!("{provider:?}").to_lowercase();
    let name = match delivery {
        Some(delivery) => format!("webhook {provider} delivery {delivery}"),
        None => format!("webhook {provider}"),
    };
    fleet::state::audit::Actor {
        name,
        tenants: Vec::new(),
        replica: replica.id(),
        address: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"It's a Secret to Everybody";
    const BODY: &[u8] = b"Hello, World!";
    /// GitHub's documented example: the signature of `Hello, World!` with that secret.
    const GITHUB_EXAMPLE: &str =
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(
                axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        headers
    }

    fn sign(message: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(SECRET).unwrap();
        mac.update(message);
        hex::encode(mac.finalize().into_bytes())
    }

    #[test]
    fn github_pushes_verify_against_the_documented_example() {
        let good = headers(&[
            ("x-hub-signature-256", GITHUB_EXAMPLE),
            ("x-github-delivery", "d1"),
            ("x-github-event", "push"),
        ]);
        assert_eq!(
            verify(WebhookProvider::Github, SECRET, &good, BODY, 0),
            Ok((Some("d1".into()), Verdict::Poll))
        );
        let refused = verify(WebhookProvider::Github, b"another secret", &good, BODY, 0);
        assert_eq!(refused.unwrap_err().0, StatusCode::UNAUTHORIZED);
        let tampered = verify(WebhookProvider::Github, SECRET, &good, b"Hello, World?", 0);
        assert_eq!(tampered.unwrap_err().0, StatusCode::UNAUTHORIZED);
        let ping = headers(&[
            ("x-hub-signature-256", GITHUB_EXAMPLE),
            ("x-github-delivery", "d2"),
            ("x-github-event", "ping"),
        ]);
        assert!(matches!(
            verify(WebhookProvider::Github, SECRET, &ping, BODY, 0),
            Ok((_, Verdict::Ignore(_)))
        ));
        let unsigned = headers(&[("x-github-event", "push")]);
        assert_eq!(
            verify(WebhookProvider::Github, SECRET, &unsigned, BODY, 0).unwrap_err(),
            Refusal(
                StatusCode::BAD_REQUEST,
                "missing header x-hub-signature-256".into()
            )
        );
    }

    #[test]
    fn gitea_forgejo_bitbucket_and_gitlab_verify_their_own_way() {
        let signature = sign(BODY);
        let forgejo = headers(&[
            ("x-forgejo-signature", &signature),
            ("x-forgejo-event", "push"),
            ("x-forgejo-delivery", "f1"),
        ]);
        assert_eq!(
            verify(WebhookProvider::Gitea, SECRET, &forgejo, BODY, 0),
            Ok((Some("f1".into()), Verdict::Poll))
        );
        let bitbucket = headers(&[
            ("x-hub-signature", &format!("sha256={signature}")),
            ("x-event-key", "repo:push"),
        ]);
        assert_eq!(
            verify(WebhookProvider::Bitbucket, SECRET, &bitbucket, BODY, 0),
            Ok((None, Verdict::Poll))
        );
        let gitlab = |token: &str| {
            headers(&[
                ("x-gitlab-token", token),
                ("x-gitlab-event", "Push Hook"),
                ("x-gitlab-event-uuid", "g1"),
            ])
        };
        assert_eq!(
            verify(
                WebhookProvider::Gitlab,
                SECRET,
                &gitlab("It's a Secret to Everybody"),
                BODY,
                0
            ),
            Ok((Some("g1".into()), Verdict::Poll))
        );
        assert_eq!(
            verify(WebhookProvider::Gitlab, SECRET, &gitlab("guess"), BODY, 0)
                .unwrap_err()
                .0,
            StatusCode::UNAUTHORIZED
        );
    }

    #[test]
    fn generic_events_sign_their_timestamp_and_old_ones_are_refused() {
        let now = 1_800_000_000;
        let event = |timestamp: u64| {
            let signed = sign(
                format!("{timestamp}.")
                    .as_bytes()
                    .iter()
                    .chain(BODY)
                    .copied()
                    .collect::<Vec<_>>()
                    .as_slice(),
            );
            headers(&[
                ("x-starling-signature", &format!("sha256={signed}")),
                ("x-starling-timestamp", &timestamp.to_string()),
                ("x-starling-delivery", "x1"),
            ])
        };
        assert_eq!(
            verify(
                WebhookProvider::Generic,
                SECRET,
                &event(now - 10),
                BODY,
                now
            ),
            Ok((Some("x1".into()), Verdict::Poll))
        );
        let stale = verify(
            WebhookProvider::Generic,
            SECRET,
            &event(now - 600),
            BODY,
            now,
        );
        assert_eq!(stale.unwrap_err().0, StatusCode::UNAUTHORIZED);
    }

    #[test]
    fn a_delivery_is_taken_once_and_the_memory_is_bounded() {
        let deliveries = Deliveries::default();
        assert!(deliveries.first_time("a".into()));
        assert!(!deliveries.first_time("a".into()));
        for i in 0..DELIVERIES_KEPT {
            deliveries.first_time(i.to_string());
        }
        let guard = deliveries.0.lock().unwrap();
        assert_eq!(guard.0.len(), DELIVERIES_KEPT);
        assert_eq!(guard.1.len(), DELIVERIES_KEPT);
    }
}

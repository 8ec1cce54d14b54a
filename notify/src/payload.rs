//! Each service's request for a message, as its published API spells it: the generic JSON
//! (signed with HMAC-SHA256 for generic-hmac), Slack's incoming webhooks, Teams' and
//! Discord's webhooks, and Alertmanager's `POST /api/v2/alerts`.

use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::compose::{Message, clip};
use crate::event::Severity;
use crate::target::{ProviderKind, Target, TargetError};

/// The events a generic body carries in full; every id is listed in `eventIds`.
const EVENTS_IN_BODY: usize = 50;
/// The header a receiver drops duplicates by.
pub const EVENT_ID_HEADER: &str = "X-Starling-Event-Id";

/// An HTTP request, made and not yet sent.
#[derive(Clone, PartialEq, Eq)]
pub struct Request {
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL and the headers may hold credentials.
        f.debug_struct("Request")
            .field("bytes", &self.body.len())
            .finish_non_exhaustive()
    }
}

impl Request {
    pub(crate) fn json(url: String, body: &Value) -> Request {
        Request {
            url,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: serde_json::to_vec(body).expect("a JSON value serialises"),
        }
    }

    pub(crate) fn header(mut self, name: &str, value: String) -> Request {
        self.headers.push((name.to_string(), value));
        self
    }

    /// The value of header `name` (the first, case-insensitive).
    pub fn header_value(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The request that sends `message` to `target`.
pub fn message_request(target: &Target, message: &Message) -> Result<Request, TargetError> {
    let address = target.endpoint()?;
    let request = match target.kind {
        ProviderKind::Generic => {
            let request = Request::json(address, &generic_body(message));
            match target.token.as_deref().filter(|t| !t.is_empty()) {
                Some(token) => request.header("Authorization", format!("Bearer {token}")),
                None => request,
            }
        }
        ProviderKind::GenericHmac => {
            let key = target
                .token
                .as_deref()
                .filter(|t| !t.is_empty())
                .ok_or(TargetError::MissingToken(target.kind))?;
            let request = Request::json(address, &generic_body(message));
            let signature = sign(key.as_bytes(), &request.body);
            request.header("X-Signature", format!("sha256={signature}"))
        }
        ProviderKind::Slack => Request::json(address, &slack_body(target, message)),
        ProviderKind::Msteams => Request::json(address, &teams_body(message)),
        ProviderKind::Discord => Request::json(address, &discord_body(target, message)),
        ProviderKind::Alertmanager => {
            let url = if address.ends_with("/api/v2/alerts") {
                address
            } else {
                format!("{address}/api/v2/alerts")
            };
            Request::json(url, &alertmanager_body(message))
        }
        kind @ (ProviderKind::Github | ProviderKind::Gitlab | ProviderKind::Gitea) => {
            return Err(TargetError::NotMessages(kind));
        }
    };
    Ok(request
        .header(EVENT_ID_HEADER, message.id())
        .header("User-Agent", user_agent()))
}

pub(crate) fn user_agent() -> String {
    concat!("starling/", env!("CARGO_PKG_VERSION")).to_string()
}

/// The lowercase hex HMAC-SHA256 of `body` under `key`: what `X-Signature: sha256=…` carries.
pub fn sign(key: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// The generic body: the message, every event id, and the first events in full.
fn generic_body(message: &Message) -> Value {
    json!({
        "id": message.id(),
        "severity": message.severity,
        "summary": message.summary,
        "title": message.title,
        "text": message.text,
        "count": message.events.len(),
        "eventIds": message.event_ids(),
        "events": &message.events[..message.events.len().min(EVENTS_IN_BODY)],
    })
}

/// The lines a chat message shows below the title: the group, the revision and the counts.
fn facts(message: &Message) -> Vec<(&'static str, String)> {
    let mut facts = Vec::new();
    let Some(lead) = message.lead() else {
        return facts;
    };
    if let Some(group) = &lead.group {
        facts.push(("SyncGroup", format!("{}/{group}", lead.namespace)));
    }
    if let Some(revision) = &lead.revision {
        facts.push(("Revision", revision.clone()));
    }
    if let Some(counts) = &lead.counts {
        facts.push((
            "Clusters",
            format!(
                "{} of {} updated, {} failed, {} unreachable",
                counts.updated, counts.total, counts.failed, counts.unreachable
            ),
        ));
    }
    if let Some(url) = &lead.url {
        facts.push(("Fleet view", url.clone()));
    }
    facts
}

fn headline(message: &Message) -> String {
    match &message.summary {
        Some(summary) => format!("{summary}: {}", message.title),
        None => message.title.clone(),
    }
}

/// Slack's incoming webhook: `text`, and an attachment coloured by severity with the facts.
fn slack_body(target: &Target, message: &Message) -> Value {
    let color = match message.severity {
        Severity::Error => "danger",
        Severity::Info => "good",
    };
    let fields: Vec<Value> = facts(message)
        .into_iter()
        .map(|(title, value)| json!({"title": title, "value": value, "short": true}))
        .collect();
    let mut body = json!({
        "text": clip(&headline(message), 3000),
        "attachments": [{
            "color": color,
            "text": clip(&message.text, 3000),
            "fields": fields,
            "mrkdwn_in": ["text"],
        }],
    });
    if let Some(channel) = &target.channel {
        body["channel"] = json!(channel);
    }
    if let Some(username) = &target.username {
        body["username"] = json!(username);
    }
    body
}

/// A Teams incoming webhook's `MessageCard`.
fn teams_body(message: &Message) -> Value {
    let color = match message.severity {
        Severity::Error => "FF0000",
        Severity::Info => "00A86B",
    };
    let facts: Vec<Value> = facts(message)
        .into_iter()
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect();
    json!({
        "@type": "MessageCard",
        "@context": "https://schema.org/extensions",
        "themeColor": color,
        "summary": clip(&message.title, 200),
        "sections": [{
            "activityTitle": clip(&headline(message), 400),
            "text": clip(&message.text, 20_000),
            "facts": facts,
        }],
    })
}

/// Discord's webhook: `content` (at most 2,000 characters) and one embed.
fn discord_body(target: &Target, message: &Message) -> Value {
    let color = match message.severity {
        Severity::Error => 0xE0_1E_5A,
        Severity::Info => 0x2E_B6_7D,
    };
    let fields: Vec<Value> = facts(message)
        .into_iter()
        .map(|(name, value)| json!({"name": name, "value": clip(&value, 1000), "inline": true}))
        .collect();
    let mut body = json!({
        "content": clip(&headline(message), 2000),
        "embeds": [{
            "title": clip(&message.title, 256),
            "description": clip(&message.text, 4096),
            "color": color,
            "fields": fields,
        }],
    });
    if let Some(username) = &target.username {
        body["username"] = json!(username);
    }
    body
}

/// Alertmanager's `postableAlerts`: one alert per event, labelled by what it is about.
fn alertmanager_body(message: &Message) -> Value {
    let alerts: Vec<Value> = message
        .events
        .iter()
        .map(|event| {
            let mut alert = json!({
                "labels": {
                    "alertname": format!("Starling{}", event.reason),
                    "severity": event.severity,
                    "reason": event.reason,
                    "kind": event.kind,
                    "namespace": event.namespace,
                    "name": event.name,
                },
                "annotations": {
                    "message": event.message,
                    "summary": message.summary.clone().unwrap_or_else(|| event.object()),
                    "eventId": event.id,
                },
                "startsAt": event.at,
            });
            if let Some(url) = &event.url {
                alert["generatorURL"] = json!(url);
            }
            if let Some(revision) = &event.revision {
                alert["annotations"]["revision"] = json!(revision);
            }
            alert
        })
        .collect();
    Value::Array(alerts)
}

//! A burst of events becomes one message: 300 failing Syncs of one rollout are one message
//! that names the first ten and gives the count, not 300 messages.

use std::collections::BTreeMap;

use crate::event::{Event, Severity};

/// Events a message names one by one, at most; the rest are counted.
pub const NAMED_IN_MESSAGE: usize = 10;
/// Characters of one event's message kept in a composed text.
const MESSAGE_CHARS: usize = 400;

/// What one request to a Provider carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Every event the message stands for, in the order they happened.
    pub events: Vec<Event>,
    /// The Alert's `summary`, a line above everything else.
    pub summary: Option<String>,
    /// The worst of the events'.
    pub severity: Severity,
    /// One line: the event, or the count of each reason.
    pub title: String,
    /// The events named one by one (at most [`NAMED_IN_MESSAGE`]), then how many more.
    pub text: String,
}

impl Message {
    /// The idempotency key of the message: its event's id, or `first..last` for a burst (the
    /// body lists every id, so a receiver can drop a duplicate event by event).
    pub fn id(&self) -> String {
        match (self.events.first(), self.events.last()) {
            (Some(first), Some(last)) if self.events.len() > 1 => {
                format!("{}..{}", first.id, last.id)
            }
            (Some(only), _) => only.id.clone(),
            _ => String::new(),
        }
    }

    /// The ids of every event in the message.
    pub fn event_ids(&self) -> Vec<&str> {
        self.events.iter().map(|event| event.id.as_str()).collect()
    }

    /// The one event's or the first event's revision, counts and group, for the payloads'
    /// fields.
    pub fn lead(&self) -> Option<&Event> {
        self.events
            .iter()
            .rev()
            .find(|event| event.counts.is_some())
            .or(self.events.last())
    }
}

/// One message for `events` (of one Alert, in order), with the Alert's `summary`.
pub fn compose(events: Vec<Event>, summary: Option<&str>) -> Message {
    let severity = events
        .iter()
        .map(|event| event.severity)
        .max()
        .unwrap_or_default();
    let title = match events.as_slice() {
        [only] => format!("{}: {}", only.reason, only.object()),
        _ => {
            let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
            for event in &events {
                *reasons.entry(event.reason.as_str()).or_default() += 1;
            }
            let counted: Vec<String> = reasons
                .iter()
                .map(|(reason, n)| format!("{n} {reason}"))
                .collect();
            format!(
                "{} events: {}",
                group_digits(events.len() as u64),
                counted.join(", ")
            )
        }
    };
    let mut lines: Vec<String> = events
        .iter()
        .take(NAMED_IN_MESSAGE)
        .map(|event| {
            let mut line = format!(
                "{} {}: {}",
                event.reason,
                event.object(),
                clip(&event.message, MESSAGE_CHARS)
            );
            for failing in &event.failing {
                line.push_str(&format!("\n    {}", clip(failing, MESSAGE_CHARS)));
            }
            line
        })
        .collect();
    if events.len() > NAMED_IN_MESSAGE {
        lines.push(format!(
            "… and {} more",
            group_digits((events.len() - NAMED_IN_MESSAGE) as u64)
        ));
    }
    Message {
        summary: summary.map(str::to_string),
        severity,
        title,
        text: lines.join("\n"),
        events,
    }
}

/// `10000` as `10,000`.
pub fn group_digits(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// At most `max` characters of `text`, with `…` when cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(n: usize) -> Event {
        Event {
            id: format!("inst-{n}"),
            severity: Severity::Error,
            reason: "SyncFailed".into(),
            kind: "Sync".into(),
            namespace: "shop".into(),
            name: format!("web-c{n}"),
            message: "apply refused: deployments.apps is forbidden".into(),
            ..Event::default()
        }
    }

    #[test]
    fn three_hundred_failures_are_one_message_naming_ten() {
        let message = compose((0..300).map(failed).collect(), Some("prod fleet"));
        assert_eq!(message.events.len(), 300);
        assert_eq!(message.title, "300 events: 300 SyncFailed");
        assert_eq!(message.text.lines().count(), NAMED_IN_MESSAGE + 1);
        assert!(message.text.ends_with("… and 290 more"), "{}", message.text);
        assert_eq!(message.id(), "inst-0..inst-299");
        assert_eq!(message.severity, Severity::Error);
    }

    #[test]
    fn one_event_is_named_in_the_title() {
        let message = compose(vec![failed(7)], None);
        assert_eq!(message.title, "SyncFailed: Sync shop/web-c7");
        assert_eq!(message.id(), "inst-7");
    }

    #[test]
    fn digits_are_grouped_and_text_is_clipped() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(999), "999");
        assert_eq!(group_digits(1000), "1,000");
        assert_eq!(group_digits(1234567), "1,234,567");
        assert_eq!(clip("héllo", 2), "hé…");
        assert_eq!(clip("hé", 2), "hé");
    }
}

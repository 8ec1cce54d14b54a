//! Outbound notifications: what Starling sends to the people who run a fleet, and how.
//!
//! The replicated state decides which events happen and which Alerts take them (`fleet`'s
//! `state::notify`); this crate turns what a Provider has queued into the requests its service
//! expects and sends them:
//!
//! ```text
//!  queued events ─► Filter (an Alert's inclusion/exclusion lists)
//!               ─► compose: a burst becomes one Message (the first ten named, the count)
//!               ─► message_request / status_request: the service's own payload
//!                  (generic JSON, HMAC-signed JSON, Slack, Teams, Discord, Alertmanager,
//!                  GitHub / GitLab / Gitea commit statuses)
//!               ─► deliver: the Client (bounded in time), retried with backoff and jitter
//!                  on 5xx, timeouts and 429 (`Retry-After` honoured), never on other 4xx
//! ```
//!
//! [`Pacer`] holds each Alert to one message per second, and [`StatusPacer`] holds a commit
//! status to one update per ten seconds per group and revision, plus every change of state.
//! Nothing here knows the fleet's types: the crate is a leaf, tested against receivers on
//! loopback.

mod client;
mod compose;
mod event;
mod payload;
mod retry;
mod status;
mod target;

pub use client::{Client, SendError};
pub use compose::{Message, NAMED_IN_MESSAGE, compose, group_digits};
pub use event::{Counts, Event, Filter, FilterError, Severity};
pub use payload::{EVENT_ID_HEADER, Request, message_request, sign};
pub use retry::{Backoff, Pacer, RetryPolicy, StatusPacer, deliver};
pub use status::{CommitState, CommitStatus, commit_of, derive_repository, status_request};
pub use target::{ProviderKind, Target, TargetError};

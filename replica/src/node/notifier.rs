//! The leader's notifier: sends what the state has queued for each Provider
//! (`fleet::state::notify`) and commits [`Command::SettleNotifications`] for what went out.
//!
//! ```text
//!  every TICK, while leading:
//!    state.notifications ─► per Provider with nothing in flight and no back-off:
//!        its Target (spec + Secret), its Alerts' filters ─► per Alert, paced to one message
//!        per second: filter, compose (a burst is one message) ─► message requests
//!        commit-status Providers: the latest rollout event per group and revision, paced to
//!        one status per 10 s (every change of state at once) ─► status requests
//!    ─► a delivery task (at most MAX_IN_FLIGHT at once, one per Provider), retried with
//!       backoff on 5xx, timeouts and 429 ─► SettleNotifications{delivered ids, error}
//! ```
//!
//! The queue lives in the replicated state, so a new leader sends what the old one had not
//! settled: a leader kill loses nothing, and a receiver drops the rare duplicate by its
//! `X-Starling-Event-Id`. Sending never shares a task with syncing: a receiver that hangs
//! holds only its own Provider's delivery, for at most its time limit times the tries.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleet::Command;
use fleet::resources::EventSeverity;
use fleet::state::FleetState;
use fleet::state::notify::QueuedEvent;
use starling_notify::{
    Client, CommitState, CommitStatus, Counts, Event, Filter, Pacer, ProviderKind, Request,
    RetryPolicy, SendError, Severity, StatusPacer, Target, compose, deliver, message_request,
    status_request,
};
use tokio::task::JoinSet;

use super::Replica;

/// How often the leader looks at the queues.
const TICK: Duration = Duration::from_millis(250);
/// Providers being sent to at once, at most.
const MAX_IN_FLIGHT: usize = 8;
/// Events one delivery takes from a Provider's queue, at most.
const BATCH: usize = 1_000;
/// One message per Alert per this.
const ALERT_INTERVAL: Duration = Duration::from_secs(1);
/// One commit status per group and revision per this (plus every change of state).
const STATUS_INTERVAL: Duration = Duration::from_secs(10);
/// How long a Provider rests after a delivery that failed every try (or that cannot be made).
const PROVIDER_BACKOFF: Duration = Duration::from_secs(15);

/// What a delivery task reports.
struct Delivered {
    provider: String,
    /// Events done with: sent, filtered out, or refused for good by the receiver.
    settled: Vec<u64>,
    /// The last error, if any request failed.
    error: Option<SendError>,
    /// Messages sent, and failed, for the metrics.
    sent: u64,
    failed: u64,
}

/// One delivery: the requests of one Provider and the events each one settles.
struct Job {
    provider: String,
    client: Client,
    requests: Vec<(Request, Vec<u64>)>,
    /// Settled without a request (filtered out, or nothing to say for them).
    skipped: Vec<u64>,
}

pub(crate) async fn run(replica: Arc<Replica>) {
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut notifier: Option<Notifier> = None;
    loop {
        ticker.tick().await;
        if !replica.raft.is_leader() {
            // Dropping it aborts its deliveries: the new leader sends what they had not
            // settled.
            notifier = None;
            continue;
        }
        notifier
            .get_or_insert_with(Notifier::default)
            .tick(&replica)
            .await;
    }
}

struct Notifier {
    in_flight: JoinSet<Delivered>,
    busy: HashSet<String>,
    resting: HashMap<String, Instant>,
    alerts: Pacer<String>,
    statuses: StatusPacer<(String, String)>,
}

impl Default for Notifier {
    fn default() -> Notifier {
        Notifier {
            in_flight: JoinSet::new(),
            busy: HashSet::new(),
            resting: HashMap::new(),
            alerts: Pacer::new(ALERT_INTERVAL),
            statuses: StatusPacer::new(STATUS_INTERVAL),
        }
    }
}

impl Notifier {
    async fn tick(&mut self, replica: &Replica) {
        let mut commands = Vec::new();
        while let Some(done) = self.in_flight.try_join_next() {
            let Ok(done) = done else { continue };
            self.busy.remove(&done.provider);
            let label = |outcome: &str| crate::metrics::ProviderOutcome {
                provider: done.provider.clone(),
                outcome: outcome.to_string(),
            };
            replica
                .metrics
                .notifications_sent
                .get_or_create(&label("delivered"))
                .inc_by(done.sent);
            if done.failed > 0 {
                let outcome = if done.error.as_ref().is_some_and(SendError::is_retryable) {
                    "retrying"
                } else {
                    "refused"
                };
                replica
                    .metrics
                    .notifications_sent
                    .get_or_create(&label(outcome))
                    .inc_by(done.failed);
            }
            if let Some(error) = &done.error {
                tracing::warn!(provider = %done.provider, %error, "notification not delivered");
                if error.is_retryable() {
                    self.resting
                        .insert(done.provider.clone(), Instant::now() + PROVIDER_BACKOFF);
                }
            }
            if !done.settled.is_empty() || done.error.is_some() {
                commands.push(Command::SettleNotifications {
                    provider: done.provider,
                    ids: done.settled,
                    error: done.error.map(|e| e.to_string()),
                    at: Replica::now_rfc3339(),
                });
            }
        }
        let now = Instant::now();
        self.resting.retain(|_, until| *until > now);
        let external_url = replica.config.external_url.clone();
        let (jobs, refused) = replica.raft.reader().read(|state| {
            let mut jobs = Vec::new();
            let mut refused = Vec::new();
            for (provider, queue) in &state.notifications {
                if jobs.len() + self.in_flight.len() >= MAX_IN_FLIGHT {
                    break;
                }
                if queue.pending.is_empty()
                    || self.busy.contains(provider)
                    || self.resting.contains_key(provider)
                {
                    continue;
                }
                match self.plan(
                    state,
                    provider,
                    queue.pending.iter(),
                    external_url.as_deref(),
                ) {
                    Ok(Some(job)) => jobs.push(job),
                    Ok(None) => {}
                    Err(error) => refused.push((provider.clone(), error)),
                }
            }
            (jobs, refused)
        });
        for (provider, error) in refused {
            // The Provider cannot send (no Secret, a bad address): its events wait, within the
            // queue's bound, until it is fixed; its Ready condition says why.
            self.resting
                .insert(provider.clone(), Instant::now() + PROVIDER_BACKOFF);
            let shown = replica
                .raft
                .reader()
                .read(|state| ready_message(state, &provider));
            if shown.as_deref() != Some(error.as_str()) {
                commands.push(Command::SettleNotifications {
                    provider,
                    ids: Vec::new(),
                    error: Some(error),
                    at: Replica::now_rfc3339(),
                });
            }
        }
        for job in jobs {
            self.busy.insert(job.provider.clone());
            self.in_flight.spawn(send(job));
        }
        if !commands.is_empty()
            && let Err(error) = replica.raft.propose_many(commands).await
        {
            // Unsettled events stay queued: the next leader (or the next tick) sends them again.
            tracing::warn!(%error, "cannot commit what the notifier delivered");
        }
    }

    /// The delivery of `provider`'s `pending` events, or `None` when nothing is due yet.
    fn plan<'a>(
        &mut self,
        state: &FleetState,
        provider: &str,
        pending: impl Iterator<Item = &'a QueuedEvent>,
        external_url: Option<&str>,
    ) -> Result<Option<Job>, String> {
        let Some(entry) = state.providers.get(provider) else {
            return Ok(None);
        };
        let spec = &entry.object.spec;
        if spec.suspend {
            return Ok(None);
        }
        let namespace = provider.split_once('/').map_or("default", |(ns, _)| ns);
        let target = target_of(state, namespace, spec)?;
        let kind = target.kind;
        let client = Client::new(target).map_err(|e| e.to_string())?;
        let installation = state.installation.clone().unwrap_or_default();
        let mut by_alert: BTreeMap<&str, Vec<&QueuedEvent>> = BTreeMap::new();
        for event in pending.take(BATCH) {
            by_alert
                .entry(event.alert.as_str())
                .or_default()
                .push(event);
        }
        let mut job = Job {
            provider: provider.to_string(),
            client,
            requests: Vec::new(),
            skipped: Vec::new(),
        };
        let now = Instant::now();
        for (alert_key, events) in by_alert {
            let Some(alert) = state.alerts.get(alert_key) else {
                // The Alert went away: its events are not sent.
                job.skipped.extend(events.iter().map(|e| e.id));
                continue;
            };
            let alert = &alert.object.spec;
            if kind.writes_commit_statuses() {
                self.plan_statuses(
                    state,
                    &mut job,
                    &events,
                    spec.repository.as_deref(),
                    external_url,
                    now,
                )?;
                continue;
            }
            if !self.alerts.wait(&alert_key.to_string(), now).is_zero() {
                continue;
            }
            let filter = Filter::new(&alert.inclusion_list, &alert.exclusion_list)
                .map_err(|e| format!("Alert {alert_key}: {e}"))?;
            let (admitted, filtered): (Vec<&QueuedEvent>, Vec<&QueuedEvent>) =
                events.into_iter().partition(|e| filter.admits(&e.message));
            job.skipped.extend(filtered.iter().map(|e| e.id));
            if admitted.is_empty() {
                continue;
            }
            let ids = admitted.iter().map(|e| e.id).collect();
            let events = admitted
                .into_iter()
                .map(|e| event_of(e, &installation, &alert.event_metadata, external_url))
                .collect();
            let message = compose(events, alert.summary.as_deref());
            let request =
                message_request(job.client.target(), &message).map_err(|e| e.to_string())?;
            job.requests.push((request, ids));
            self.alerts.sent(alert_key.to_string(), now);
        }
        Ok((!job.requests.is_empty() || !job.skipped.is_empty()).then_some(job))
    }

    /// Commit statuses for `events`: the latest rollout event of each group and revision,
    /// when due; the other events are settled with it.
    fn plan_statuses(
        &mut self,
        state: &FleetState,
        job: &mut Job,
        events: &[&QueuedEvent],
        repository: Option<&str>,
        external_url: Option<&str>,
        now: Instant,
    ) -> Result<(), String> {
        // Per group and revision: its latest rollout event, and every event it stands for.
        type Latest<'e> = (Option<&'e QueuedEvent>, Vec<u64>);
        let mut latest: BTreeMap<(String, String), Latest<'_>> = BTreeMap::new();
        for event in events {
            let (Some(group), Some(revision)) = (&event.group, &event.revision) else {
                job.skipped.push(event.id);
                continue;
            };
            let key = (format!("{}/{group}", event.namespace), revision.clone());
            let slot = latest.entry(key).or_default();
            if event.kind == "SyncGroup" && event.reason.starts_with("Rollout") {
                slot.0 = Some(event);
            }
            slot.1.push(event.id);
        }
        for ((group, revision), (event, ids)) in latest {
            let Some(event) = event else {
                // A Sync's failure says nothing a status would: the next rollout event will.
                job.skipped.extend(ids);
                continue;
            };
            let state_of = match event.reason.as_str() {
                "RolloutComplete" => CommitState::Success,
                "RolloutHalted" => CommitState::Failure,
                _ => CommitState::Pending,
            };
            let counts = event.counts.clone().unwrap_or_default();
            let short = revision
                .rsplit_once("sha1:")
                .map_or(revision.as_str(), |(_, sha)| &sha[..sha.len().min(7)]);
            let description = format!(
                "{} of {} clusters at {short} ({} failed)",
                starling_notify::group_digits(u64::from(counts.updated)),
                starling_notify::group_digits(u64::from(counts.total)),
                counts.failed
            );
            let key = (group.clone(), revision.clone());
            if !self.statuses.due(&key, state_of, &description, now) {
                // Not yet: the events wait for the next status, which says more.
                continue;
            }
            let Some(sha) = starling_notify::commit_of(&revision) else {
                job.skipped.extend(ids);
                continue;
            };
            let repository = match repository {
                Some(repository) => repository.to_string(),
                None => repository_of(state, &group).ok_or_else(|| {
                    format!("cannot tell the repository of SyncGroup {group}: set spec.repository")
                })?,
            };
            let (namespace, name) = group.split_once('/').unwrap_or(("default", &group));
            let status = CommitStatus {
                repository,
                sha: sha.to_string(),
                context: format!("starling/{namespace}/{name}"),
                state: state_of,
                description: description.clone(),
                target_url: external_url.map(|url| group_url(url, &group)),
            };
            let request =
                status_request(job.client.target(), &status).map_err(|e| e.to_string())?;
            job.requests.push((request, ids));
            self.statuses.sent(key, state_of, description, now);
        }
        Ok(())
    }
}

/// Sends a job's requests one after the other (a Provider's messages keep their order).
async fn send(job: Job) -> Delivered {
    let mut done = Delivered {
        provider: job.provider,
        settled: job.skipped,
        error: None,
        sent: 0,
        failed: 0,
    };
    for (request, ids) in job.requests {
        match deliver(&job.client, request, RetryPolicy::default()).await {
            Ok(()) => {
                done.sent += 1;
                done.settled.extend(ids);
            }
            Err(error) => {
                done.failed += 1;
                if !error.is_retryable() {
                    // Refused for good (a 4xx): sending it again would be refused again.
                    done.settled.extend(ids);
                }
                let retryable = error.is_retryable();
                done.error = Some(error);
                if retryable {
                    // The receiver is down: the rest waits for the Provider's next turn.
                    break;
                }
            }
        }
    }
    done
}

/// The Provider's Target: its spec, with the Secrets' `address`, `token`, `proxy` and
/// `ca.crt` filled in. A missing Secret or key is an error naming it, never a value.
fn target_of(
    state: &FleetState,
    namespace: &str,
    spec: &fleet::resources::ProviderSpec,
) -> Result<Target, String> {
    let kind = ProviderKind::parse(spec.type_.as_str()).map_err(|e| e.to_string())?;
    let mut target = Target::new(kind, spec.address.clone());
    target.proxy = spec.proxy.clone();
    target.repository = spec.repository.clone();
    target.channel = spec.channel.clone();
    target.username = spec.username.clone();
    if let Some(timeout) = &spec.timeout {
        target.timeout = humantime::parse_duration(timeout)
            .map_err(|e| format!("spec.timeout {timeout:?}: {e}"))?;
    }
    let text = |value: &starling_sync::SecretBytes| {
        String::from_utf8_lossy(value.expose()).trim().to_string()
    };
    if let Some(reference) = &spec.secret_ref {
        let secret = state.secret(namespace, &reference.name).ok_or_else(|| {
            format!(
                "Secret {namespace}/{} (spec.secretRef) not found",
                reference.name
            )
        })?;
        let data = crate::worker::secret_data(secret);
        if let Some(address) = data.get("address") {
            target.address = Some(text(address));
        }
        if let Some(token) = data.get("token") {
            target.token = Some(text(token));
        }
        if let Some(proxy) = data.get("proxy") {
            target.proxy = Some(text(proxy));
        }
    }
    if let Some(reference) = &spec.cert_secret_ref {
        let secret = state.secret(namespace, &reference.name).ok_or_else(|| {
            format!(
                "Secret {namespace}/{} (spec.certSecretRef) not found",
                reference.name
            )
        })?;
        let data = crate::worker::secret_data(secret);
        let ca = data
            .get("ca.crt")
            .ok_or_else(|| format!("Secret {namespace}/{} has no \"ca.crt\"", reference.name))?;
        target.ca_pem = Some(ca.expose().to_vec());
    }
    target.validate().map_err(|e| e.to_string())?;
    Ok(target)
}

/// The message of a Provider's `Ready` condition when it is `False`.
fn ready_message(state: &FleetState, provider: &str) -> Option<String> {
    let status = state.providers.get(provider)?.object.status.as_ref()?;
    status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "False")
        .map(|c| c.message.clone())
}

/// The repository of a group's Source, from its git URL.
fn repository_of(state: &FleetState, group: &str) -> Option<String> {
    let entry = state.groups.get(group)?;
    let namespace = group.split_once('/').map_or("default", |(ns, _)| ns);
    let reference = &entry.object.spec.source_ref;
    let source = state.sources.get(&fleet::state::key_of(
        reference.namespace_or(namespace),
        &reference.name,
    ))?;
    starling_notify::derive_repository(&source.object.spec.git.as_ref()?.url)
}

/// The fleet view's page of a group.
fn group_url(external_url: &str, group: &str) -> String {
    format!("{}/#/groups/{group}", external_url.trim_end_matches('/'))
}

/// A queued event as receivers see it.
fn event_of(
    event: &QueuedEvent,
    installation: &str,
    metadata: &BTreeMap<String, String>,
    external_url: Option<&str>,
) -> Event {
    let group = event
        .group
        .as_ref()
        .map(|group| format!("{}/{group}", event.namespace));
    Event {
        id: format!("{installation}-{}", event.id),
        severity: match event.severity {
            EventSeverity::Error => Severity::Error,
            EventSeverity::Info => Severity::Info,
        },
        reason: event.reason.clone(),
        kind: event.kind.clone(),
        namespace: event.namespace.clone(),
        name: event.name.clone(),
        group: event.group.clone(),
        message: event.message.clone(),
        revision: event.revision.clone(),
        counts: event.counts.as_ref().map(|c| Counts {
            updated: c.updated,
            failed: c.failed,
            unreachable: c.unreachable,
            total: c.total,
        }),
        failing: event.failing.clone(),
        at: event.at.clone(),
        metadata: metadata.clone(),
        url: external_url
            .zip(group)
            .map(|(url, group)| group_url(url, &group)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet::resources::ProviderType;

    #[test]
    fn every_provider_type_is_a_notify_kind() {
        for kind in [
            ProviderType::Generic,
            ProviderType::GenericHmac,
            ProviderType::Slack,
            ProviderType::Msteams,
            ProviderType::Discord,
            ProviderType::Github,
            ProviderType::Gitlab,
            ProviderType::Gitea,
            ProviderType::Alertmanager,
        ] {
            let parsed = ProviderKind::parse(kind.as_str()).unwrap();
            assert_eq!(
                parsed.writes_commit_statuses(),
                kind.writes_commit_statuses()
            );
        }
    }
}

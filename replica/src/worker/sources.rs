//! The source poller: this node polls the sources placed on it, each at its `interval` with
//! ±10% jitter, through the node's shared mirrors (one bare mirror per URL, one fetch per
//! interval however many Sources share it), and commits `SourceResolved` only when the
//! revision changes. A failure commits `SourceFailed` once per distinct message; the last good
//! revision stays in use. Chart sources (`spec.helm`, `spec.oci`) are polled the same way by a
//! [`source::ChartWatcher`] with the node's HTTP client.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleet::resources::{ArtifactRef, Source};
use fleet::state::Key;
use fleet::{Command, ExpectedRevision, Outcome};
use source::{ChartWatcher, SourceConfig, SourceWatcher};
use tokio::task::JoinSet;

use super::secret_data;
use crate::node::Replica;

/// Polls running at once on one node.
const MAX_CONCURRENT_POLLS: usize = 4;
/// How often the poller looks at ownership and due polls.
const TICK: Duration = Duration::from_millis(250);

/// An owned Source, with its credentials' Secret data and its count of webhook requests.
type OwnedSource = (
    Key,
    Source,
    Option<BTreeMap<String, starling_sync::SecretBytes>>,
    u64,
);

struct Watched {
    generation: i64,
    /// `None` while a poll has it.
    watcher: Option<Watcher>,
    next_poll: Instant,
    polls: u64,
    /// The last failure committed, so a repeating error is committed once.
    reported_error: Option<String>,
    /// The source's committed revision this watcher resolves from: the one in the state when
    /// it started, then each one it committed. A resolution states it (`expected`), so that one
    /// made from an outdated view is refused instead of moving the source back.
    resolved_from: Option<String>,
    /// The webhook requests already acted on ([`fleet::state::SourceEntry::poll_requests`]).
    poll_requests: u64,
    /// A webhook arrived while a poll was running: poll again as soon as it ends.
    poll_again: bool,
    /// The last poll request committed as served ([`Command::SourcePolled`]).
    served: u64,
}

pub(crate) async fn run(replica: Arc<Replica>) {
    let mut watched: BTreeMap<Key, Watched> = BTreeMap::new();
    let mut polls: JoinSet<PollDone> = JoinSet::new();
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            Some(done) = polls.join_next(), if !polls.is_empty() => {
                if let Ok(done) = done {
                    replica.metrics.source_fetch_duration.observe(done.took.as_secs_f64());
                    finish_poll(&replica, &mut watched, done).await;
                }
                continue;
            }
        }
        let owned: Vec<OwnedSource> = replica.raft.reader().read(|state| {
            state
                .sources_of(replica.id())
                .into_iter()
                .filter_map(|key| {
                    let entry = state.sources.get(&key)?;
                    let (object, requests) = (entry.object.clone(), entry.poll_requests);
                    let namespace = object
                        .metadata
                        .namespace
                        .clone()
                        .unwrap_or_else(|| "default".into());
                    let secret = object
                        .spec
                        .secret_ref
                        .as_ref()
                        .and_then(|r| state.secret(&namespace, &r.name))
                        .map(secret_data);
                    Some((key, object, secret, requests))
                })
                .collect()
        });
        watched.retain(|key, _| owned.iter().any(|(k, ..)| k == key));
        for (key, object, secret, requests) in owned {
            let generation = object.metadata.generation.unwrap_or(1);
            let stale = watched
                .get(&key)
                .is_none_or(|w| w.generation != generation && w.watcher.is_some());
            if stale && !object.spec.suspend {
                match watcher_for(&replica, &object, secret.as_ref()) {
                    Ok(watcher) => {
                        watched.insert(
                            key.clone(),
                            Watched {
                                generation,
                                watcher: Some(watcher),
                                next_poll: Instant::now(),
                                polls: 0,
                                reported_error: None,
                                resolved_from: object
                                    .status
                                    .as_ref()
                                    .and_then(|status| status.revision.clone()),
                                poll_requests: requests,
                                poll_again: false,
                                served: 0,
                            },
                        );
                    }
                    Err(error) => {
                        let message = error.to_string();
                        let already = watched.get(&key).and_then(|w| w.reported_error.clone())
                            == Some(message.clone());
                        if !already {
                            report_failure(&replica, &key, &message).await;
                            watched.insert(
                                key.clone(),
                                Watched {
                                    generation,
                                    watcher: None,
                                    next_poll: Instant::now(),
                                    polls: 0,
                                    reported_error: Some(message),
                                    resolved_from: None,
                                    poll_requests: requests,
                                    poll_again: false,
                                    served: 0,
                                },
                            );
                        }
                    }
                }
            }
            if object.spec.suspend {
                watched.remove(&key);
            }
            // A verified webhook: poll now rather than at the interval.
            if let Some(entry) = watched.get_mut(&key)
                && entry.poll_requests < requests
            {
                entry.poll_requests = requests;
                match entry.watcher.as_mut() {
                    Some(watcher) => {
                        watcher.fetch_on_next_poll();
                        entry.next_poll = Instant::now();
                    }
                    None => entry.poll_again = true,
                }
            }
        }
        let now = Instant::now();
        for (key, entry) in watched.iter_mut() {
            if polls.len() >= MAX_CONCURRENT_POLLS {
                break;
            }
            if entry.next_poll > now {
                continue;
            }
            let Some(mut watcher) = entry.watcher.take() else {
                continue;
            };
            let key = key.clone();
            let expected = match &entry.resolved_from {
                Some(revision) => ExpectedRevision::Revision(revision.clone()),
                None => ExpectedRevision::Unresolved,
            };
            // Every request made before this poll starts is served by it.
            let serving = entry.poll_requests;
            polls.spawn(async move {
                let started = Instant::now();
                let outcome = watcher.poll_async().await;
                PollDone {
                    key,
                    watcher,
                    expected,
                    outcome,
                    took: started.elapsed(),
                    serving,
                }
            });
        }
    }
}

/// A finished poll, and the last poll request it serves.
struct PollDone {
    key: Key,
    watcher: Watcher,
    expected: ExpectedRevision,
    outcome: source::PollOutcome,
    took: Duration,
    serving: u64,
}

async fn finish_poll(replica: &Replica, watched: &mut BTreeMap<Key, Watched>, done: PollDone) {
    let PollDone {
        key,
        watcher,
        expected,
        outcome,
        serving,
        ..
    } = done;
    let at = Replica::now_rfc3339();
    let mut command = None;
    // The input digest of every path the source's Syncs render: those whose input is
    // unchanged move to the new revision without a write (the mono-repository rule).
    let mut watcher = watcher;
    let mut inputs = BTreeMap::new();
    if outcome.changed {
        let paths = replica.raft.reader().read(|state| state.source_paths(&key));
        let task = tokio::task::spawn_blocking(move || {
            let inputs = watcher.path_inputs(&paths);
            (watcher, inputs)
        });
        match task.await {
            Ok(done) => (watcher, inputs) = done,
            Err(error) => {
                tracing::error!(source = %key, %error, "digesting the source's paths stopped");
                watched.remove(&key);
                return;
            }
        }
    }
    if outcome.changed
        && let Some((revision, artifact)) = watcher.last_good()
    {
        command = Some(Command::SourceResolved {
            source: key.clone(),
            revision,
            artifact: Some(ArtifactRef {
                digest: artifact.digest.to_string(),
                size: artifact.size,
            }),
            expected,
            inputs,
            at: at.clone(),
        });
    }
    let Some(entry) = watched.get_mut(&key) else {
        return;
    };
    if let Some(error) = &outcome.error {
        let message = watcher.message();
        if entry.reported_error.as_deref() != Some(message.as_str()) {
            tracing::warn!(source = %key, reason = %error.reason, "source poll failed");
            entry.reported_error = Some(message.clone());
            command = Some(Command::SourceFailed {
                source: key.clone(),
                message,
                at,
            });
        }
    } else {
        entry.reported_error = None;
    }
    entry.polls += 1;
    let seed = xxhash(&key) ^ entry.polls;
    entry.next_poll = if std::mem::take(&mut entry.poll_again) {
        watcher.fetch_on_next_poll();
        Instant::now()
    } else {
        Instant::now() + watcher.next_delay(seed)
    };
    entry.watcher = Some(watcher);
    // After the revision: a `rollout status --watch` that asked for this poll sees the new
    // revision's rollout begin before it sees the request served.
    let polled = (serving > entry.served).then(|| {
        entry.served = serving;
        Command::SourcePolled {
            source: key.clone(),
            served: serving,
        }
    });
    let Some(command) = command else {
        if let Some(polled) = polled {
            report_polled(replica, &key, polled).await;
        }
        return;
    };
    let resolved = match &command {
        Command::SourceResolved { revision, .. } => Some(revision.clone()),
        _ => None,
    };
    match replica.raft.propose(command).await {
        Ok((_, Outcome::Rejected { message })) => {
            // Another owner's resolution was committed first (a handover): start again from
            // the committed state, whose revision the next poll resolves from.
            tracing::info!(source = %key, %message, "source resolution refused; resolving again");
            watched.remove(&key);
        }
        Ok(_) => {
            if let Some(revision) = resolved
                && let Some(entry) = watched.get_mut(&key)
            {
                entry.resolved_from = Some(revision);
            }
            if let Some(polled) = polled {
                report_polled(replica, &key, polled).await;
            }
        }
        Err(error) => {
            tracing::warn!(source = %key, %error, "cannot commit the source's revision; retrying");
            // Nothing was committed: start again from the committed state at the next tick,
            // which sees the change again.
            watched.remove(&key);
        }
    }
}

async fn report_polled(replica: &Replica, key: &str, polled: Command) {
    if let Err(error) = replica.raft.propose(polled).await {
        tracing::warn!(source = %key, %error, "cannot record that a requested poll finished");
    }
}

async fn report_failure(replica: &Replica, key: &str, message: &str) {
    let command = Command::SourceFailed {
        source: key.to_string(),
        message: message.to_string(),
        at: Replica::now_rfc3339(),
    };
    if let Err(error) = replica.raft.propose(command).await {
        tracing::warn!(source = %key, %error, "cannot commit a source failure");
    }
}

fn xxhash(text: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(text.as_bytes())
}

/// A Source's watcher: a git repository's, or a chart's.
enum Watcher {
    Git(SourceWatcher),
    Chart(ChartWatcher),
}

impl Watcher {
    async fn poll_async(&mut self) -> source::PollOutcome {
        match self {
            Watcher::Git(watcher) => watcher.poll_async().await,
            Watcher::Chart(watcher) => watcher.poll_async().await,
        }
    }

    /// The revision in use and its artifact.
    fn last_good(&self) -> Option<(String, source::StoredArtifact)> {
        match self {
            Watcher::Git(watcher) => watcher
                .resolution()
                .last_good
                .as_ref()
                .map(|good| (good.revision.to_string(), good.artifact)),
            Watcher::Chart(watcher) => watcher
                .last_good()
                .map(|good| (good.revision.clone(), good.artifact)),
        }
    }

    fn message(&self) -> String {
        match self {
            Watcher::Git(watcher) => watcher.resolution().message(),
            Watcher::Chart(watcher) => watcher.message(),
        }
    }

    /// The input digest of each path (git only: a chart's every version rolls out).
    fn path_inputs(&self, paths: &[String]) -> BTreeMap<String, String> {
        match self {
            Watcher::Git(watcher) => watcher.path_inputs(paths),
            Watcher::Chart(_) => BTreeMap::new(),
        }
    }

    fn fetch_on_next_poll(&mut self) {
        if let Watcher::Git(watcher) = self {
            watcher.fetch_on_next_poll();
        }
    }

    fn next_delay(&self, seed: u64) -> Duration {
        match self {
            Watcher::Git(watcher) => watcher.next_delay(seed),
            Watcher::Chart(watcher) => watcher.next_delay(seed),
        }
    }
}

/// The chart source of a Source spec (`spec.helm` or `spec.oci`); `None` for a git source.
pub(crate) fn chart_config(
    spec: &fleet::resources::SourceSpec,
    secret: Option<&BTreeMap<String, starling_sync::SecretBytes>>,
) -> Option<Result<source::ChartConfig, source::SourceError>> {
    let origin = if let Some(helm) = &spec.helm {
        source::helm_repo::VersionPolicy::parse(helm.version.as_deref().unwrap_or("")).map(
            |policy| source::ChartOrigin::HelmRepository {
                url: helm.url.clone(),
                chart: helm.chart.clone(),
                policy,
            },
        )
    } else if let Some(oci) = &spec.oci {
        let reference = match (&oci.tag, &oci.semver) {
            (Some(tag), _) => Ok(source::OciReference::Tag(tag.clone())),
            (None, Some(range)) => semver::VersionReq::parse(range)
                .map(source::OciReference::Range)
                .map_err(|error| {
                    source::SourceError::InvalidPolicy(format!(
                        "spec.oci.semver {range:?}: {error}"
                    ))
                }),
            (None, None) => Err(source::SourceError::InvalidPolicy(
                "spec.oci needs a tag or a semver range".into(),
            )),
        };
        reference.and_then(|reference| source::ChartOrigin::oci(&oci.url, reference, oci.insecure))
    } else {
        return None;
    };
    let auth = match secret {
        Some(data) => source::HttpAuth::from_secret_data(data).map_err(|error| {
            let name = spec.secret_ref.as_ref().map_or("", |r| r.name.as_str());
            source::SourceError::InvalidPolicy(format!("secret {name} of source: {error}"))
        }),
        None => Ok(source::HttpAuth::anonymous()),
    };
    Some(origin.and_then(|origin| {
        Ok(source::ChartConfig {
            origin,
            auth: auth?,
            interval: fleet::validate::source_interval(spec),
            timeout: fleet::validate::source_timeout(spec),
            max_artifact_bytes: source::Limits::default().max_artifact_bytes,
        })
    }))
}

/// The poll of a git Source's spec; `policy` in place of the spec's `ref` when given
/// (`starling diff --revision`).
pub(crate) fn git_config(
    spec: &fleet::resources::SourceSpec,
    secret: Option<&BTreeMap<String, starling_sync::SecretBytes>>,
    policy: Option<source::RevisionPolicy>,
) -> Result<SourceConfig, source::SourceError> {
    let Some(git) = &spec.git else {
        return Err(source::SourceError::InvalidPolicy(
            "the source names no git repository, Helm repository or OCI artifact".into(),
        ));
    };
    let reference = &git.reference;
    let policy = match policy {
        Some(policy) => policy,
        None => source::RevisionPolicy::from_ref_fields(
            reference.branch.as_deref(),
            reference.tag.as_deref(),
            reference.semver.as_deref(),
            reference.commit.as_deref(),
        )?,
    };
    Ok(SourceConfig {
        url: source::RepoUrl::parse(&git.url)?,
        policy,
        auth: match secret {
            Some(data) => source::Auth::from_secret_data(data).map_err(|error| {
                let name = spec.secret_ref.as_ref().map_or("", |r| r.name.as_str());
                source::SourceError::InvalidPolicy(format!("secret {name} of source: {error}"))
            })?,
            None => source::Auth::anonymous(),
        },
        interval: fleet::validate::source_interval(spec),
        limits: source::Limits {
            fetch_timeout: fleet::validate::source_timeout(spec),
            ..source::Limits::default()
        },
    })
}

/// A watcher for a Source spec, starting from its committed revision so an unchanged
/// repository is not reported as a change after an ownership move.
fn watcher_for(
    replica: &Replica,
    object: &Source,
    secret: Option<&BTreeMap<String, starling_sync::SecretBytes>>,
) -> Result<Watcher, source::SourceError> {
    let spec = &object.spec;
    let committed_artifact = object.status.as_ref().and_then(|status| {
        let revision = status.revision.clone()?;
        let artifact = status.artifact.as_ref()?;
        let digest = artifact.digest.parse().ok()?;
        Some((
            revision,
            source::StoredArtifact {
                digest,
                size: artifact.size,
            },
        ))
    });
    if let Some(config) = chart_config(spec, secret) {
        let watcher = ChartWatcher::new(config?, replica.store.clone())?;
        return Ok(Watcher::Chart(match committed_artifact {
            Some((revision, artifact)) => {
                watcher.with_last_good(source::ChartRevision { revision, artifact })
            }
            None => watcher,
        }));
    }
    let config = git_config(spec, secret, None)?;
    let watcher = SourceWatcher::new(config, replica.mirrors.clone(), replica.store.clone())?;
    let committed = committed_artifact.and_then(|(revision, artifact)| {
        Some(source::ResolvedRevision {
            revision: revision.parse().ok()?,
            artifact,
            file_count: 0,
        })
    });
    Ok(Watcher::Git(match committed {
        Some(resolved) => watcher.with_last_good(resolved),
        None => watcher,
    }))
}

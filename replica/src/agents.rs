//! Pull clusters on the owning replica: the agents connected to it, and how a sync of a pull
//! cluster runs through its agent instead of the sync engine.
//!
//! ```text
//! worker (owner, ticket held) ──run()──► session of the cluster ──Job──► starling agent
//!        ◄────────────── SyncOutcome ◄── JobResult ◄─────────────────────┘ applies with
//!                                                                         the same engine
//! ```
//!
//! A pull cluster is owned like any other: its owner admits its syncs and holds their tickets.
//! The agent may be connected to another replica, which forwards its stream here
//! ([`crate::api::agent`]). A session lasts while this replica owns the cluster; when the
//! cluster moves, the session ends and the agent reconnects to the new owner. A sync that
//! finds no agent waits for one up to the grace period, then fails as `unreachable`, which
//! frees its place in the rollout's budget like any unreachable cluster.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fleet::state::SyncOutcome;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tonic::Status;

use crate::node::lock;

/// How often the owner pings a session (and checks it still owns the cluster). The agent
/// stops writing when it has heard nothing for [`AGENT_LEASE`].
pub(crate) const PING_INTERVAL: Duration = Duration::from_secs(1);
/// After a cancel, how long the owner waits for the agent to say how far it got.
const CANCEL_WAIT: Duration = Duration::from_secs(5);
pub(crate) use proto::limits::SESSION_QUEUE;

pub(crate) use starling_sync::AgentJob;

/// What the owner sends an agent, as the service streams it.
pub(crate) type Outbound = mpsc::Sender<Result<proto::Dispatch, Status>>;
type Inbound = mpsc::Receiver<Result<proto::Dispatch, Status>>;

/// The jobs an agent was sent and not answered yet: their answers arrive as JSON (a
/// [`SyncOutcome`], or a survey's [`starling_sync::SurveyAnswer`]).
type Pending = Arc<std::sync::Mutex<HashMap<u64, oneshot::Sender<Vec<u8>>>>>;

/// One agent's stream on this replica.
struct Session {
    id: u64,
    sender: Outbound,
    pending: Pending,
}

/// The agents connected to this replica, by cluster key.
#[derive(Default)]
pub struct Agents {
    sessions: std::sync::Mutex<HashMap<String, Session>>,
    next: AtomicU64,
    connected: tokio::sync::Notify,
}

/// A session's handle for the service: results come in through it, and it ends the session
/// when dropped.
pub struct SessionHandle {
    agents: Arc<Agents>,
    cluster: String,
    id: u64,
    pending: Pending,
}

impl SessionHandle {
    /// An agent's verdict on job `job`; an unknown job (already cancelled, or never sent on
    /// this session) is ignored.
    pub fn finish(&self, job: u64, answer: Vec<u8>) -> bool {
        match lock(&self.pending).remove(&job) {
            Some(waiter) => waiter.send(answer).is_ok(),
            None => false,
        }
    }
}

impl Drop for SessionHandle {
    fn drop(&mut self) {
        let mut sessions = lock(&self.agents.sessions);
        if sessions.get(&self.cluster).is_some_and(|s| s.id == self.id) {
            sessions.remove(&self.cluster);
        }
        // Waiters of unfinished jobs see their sender dropped: the agent went mid-sync.
        lock(&self.pending).clear();
    }
}

impl Agents {
    /// Opens the session of `cluster`, replacing an older one (whose stream then ends).
    pub fn open(self: &Arc<Self>, cluster: &str) -> (SessionHandle, Outbound, Inbound) {
        let (sender, receiver) = mpsc::channel(SESSION_QUEUE);
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let pending: Pending = Default::default();
        let previous = lock(&self.sessions).insert(
            cluster.to_string(),
            Session {
                id,
                sender: sender.clone(),
                pending: pending.clone(),
            },
        );
        if let Some(previous) = previous {
            lock(&previous.pending).clear();
        }
        self.connected.notify_waiters();
        (
            SessionHandle {
                agents: self.clone(),
                cluster: cluster.to_string(),
                id,
                pending,
            },
            sender,
            receiver,
        )
    }

    /// Whether an agent of `cluster` is connected here.
    pub fn is_connected(&self, cluster: &str) -> bool {
        lock(&self.sessions).contains_key(cluster)
    }

    /// Resolves when the next agent connects here.
    pub fn next_connection(&self) -> tokio::sync::futures::Notified<'_> {
        self.connected.notified()
    }

    /// How many agents are connected here.
    pub fn count(&self) -> usize {
        lock(&self.sessions).len()
    }

    fn session(&self, cluster: &str) -> Option<(Outbound, Pending)> {
        lock(&self.sessions)
            .get(cluster)
            .map(|s| (s.sender.clone(), s.pending.clone()))
    }

    /// Runs one sync of pull cluster `cluster` through its agent: waits up to `grace` for the
    /// agent, sends the job and waits for its outcome. `cancel` (the ticket withdrawn, the
    /// lease lapsed, the replica stopping) tells the agent to stop; its answer, or
    /// `Abandoned`, is the outcome.
    pub async fn run(
        &self,
        cluster: &str,
        job: &AgentJob,
        grace: Duration,
        cancel: &CancellationToken,
    ) -> SyncOutcome {
        let unreachable = |message: String| SyncOutcome::Failed {
            class: "unreachable".into(),
            message,
            inventory: None,
        };
        let abandoned = |reason: &str| SyncOutcome::Abandoned {
            reason: reason.into(),
            inventory: None,
            applied: false,
        };
        let deadline = tokio::time::Instant::now() + grace;
        let (sender, pending) = loop {
            let connected = self.connected.notified();
            if let Some(session) = self.session(cluster) {
                break session;
            }
            tokio::select! {
                _ = connected => {}
                _ = tokio::time::sleep_until(deadline) => {
                    return unreachable(format!(
                        "the agent of pull cluster {cluster} has not been connected for {}",
                        humantime::format_duration(grace)
                    ));
                }
                _ = cancel.cancelled() => return abandoned("stopped before the agent connected"),
            }
        };
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (waiter, outcome) = oneshot::channel();
        lock(&pending).insert(id, waiter);
        let json = match serde_json::to_vec(job) {
            Ok(json) => json,
            Err(error) => {
                lock(&pending).remove(&id);
                return SyncOutcome::Failed {
                    class: "invalid".into(),
                    message: format!("cannot encode the job: {error}"),
                    inventory: None,
                };
            }
        };
        let dispatch = proto::Dispatch {
            message: Some(proto::dispatch::Message::Job(proto::Job {
                job: id,
                job_json: json,
            })),
        };
        if sender.send(Ok(dispatch)).await.is_err() {
            lock(&pending).remove(&id);
            return unreachable(format!("the agent of pull cluster {cluster} disconnected"));
        }
        let decode = |answer: Vec<u8>| {
            serde_json::from_slice::<SyncOutcome>(&answer).unwrap_or_else(|error| {
                SyncOutcome::Failed {
                    class: "invalid".into(),
                    message: format!(
                        "the agent of pull cluster {cluster} sent an unreadable result: {error}"
                    ),
                    inventory: None,
                }
            })
        };
        let mut outcome = outcome;
        tokio::select! {
            result = &mut outcome => {
                return result.map(decode).unwrap_or_else(|_| unreachable(format!(
                    "the agent of pull cluster {cluster} disconnected mid-sync"
                )));
            }
            _ = cancel.cancelled() => {}
        }
        let stop = proto::Dispatch {
            message: Some(proto::dispatch::Message::Cancel(id)),
        };
        let _ = sender.send(Ok(stop)).await;
        match tokio::time::timeout(CANCEL_WAIT, outcome).await {
            Ok(Ok(answer)) => decode(answer),
            _ => {
                lock(&pending).remove(&id);
                abandoned("stopped; the agent did not answer")
            }
        }
    }

    /// Reads pull cluster `cluster` back through its connected agent for `starling recover`:
    /// its fence and the inventory mirrors of `job.survey`'s Syncs. Fails at once when no agent
    /// of the cluster is connected here, and after `limit` without an answer.
    pub async fn survey(
        &self,
        cluster: &str,
        job: &AgentJob,
        limit: Duration,
    ) -> Result<starling_sync::TargetSurvey, String> {
        let (sender, pending) = self
            .session(cluster)
            .ok_or_else(|| format!("the agent of pull cluster {cluster} is not connected"))?;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (waiter, answer) = oneshot::channel();
        lock(&pending).insert(id, waiter);
        let json = serde_json::to_vec(job).map_err(|error| error.to_string())?;
        let dispatch = proto::Dispatch {
            message: Some(proto::dispatch::Message::Job(proto::Job {
                job: id,
                job_json: json,
            })),
        };
        if sender.send(Ok(dispatch)).await.is_err() {
            lock(&pending).remove(&id);
            return Err(format!("the agent of pull cluster {cluster} disconnected"));
        }
        match tokio::time::timeout(limit, answer).await {
            Ok(Ok(answer)) => serde_json::from_slice::<starling_sync::SurveyAnswer>(&answer)
                .map_err(|error| format!("the agent sent an unreadable survey: {error}"))?,
            Ok(Err(_)) => Err(format!("the agent of pull cluster {cluster} disconnected")),
            Err(_) => {
                lock(&pending).remove(&id);
                Err(format!(
                    "the agent of pull cluster {cluster} did not answer within {}",
                    humantime::format_duration(limit)
                ))
            }
        }
    }
}

/// A dispatch that keeps a session alive.
pub(crate) fn ping() -> proto::Dispatch {
    proto::Dispatch {
        message: Some(proto::dispatch::Message::Ping(true)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> AgentJob {
        AgentJob {
            sync: "default/web-c1".into(),
            cluster_name: "c1".into(),
            cluster_namespace: "default".into(),
            labels: Default::default(),
            writer: "node-1".into(),
            generation: 3,
            installation: "inst-test".into(),
            adopt: false,
            revision: Some("main@sha1:abc".into()),
            artifact: String::new(),
            template: Default::default(),
            previous_inventory: Vec::new(),
            wait: true,
            retire: false,
            record_digest: None,
            survey: None,
            render: Default::default(),
        }
    }

    fn job_id(dispatch: proto::Dispatch) -> u64 {
        match dispatch.message {
            Some(proto::dispatch::Message::Job(job)) => job.job,
            other => panic!("not a job: {other:?}"),
        }
    }

    #[tokio::test]
    async fn without_an_agent_a_sync_fails_unreachable_after_the_grace_period() {
        let agents = Arc::new(Agents::default());
        let never = CancellationToken::new();
        let outcome = agents
            .run("default/c1", &job(), Duration::from_millis(200), &never)
            .await;
        let SyncOutcome::Failed { class, message, .. } = outcome else {
            panic!("{outcome:?}");
        };
        assert_eq!(class, "unreachable");
        assert!(
            message.contains("has not been connected for 200ms"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn an_agent_that_connects_within_the_grace_period_gets_the_job() {
        let agents = Arc::new(Agents::default());
        let never = CancellationToken::new();
        let running = {
            let agents = agents.clone();
            tokio::spawn(async move {
                agents
                    .run("default/c1", &job(), Duration::from_secs(30), &never)
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (session, _sender, mut receiver) = agents.open("default/c1");
        let id = job_id(receiver.recv().await.expect("a job").expect("ok"));
        let done = SyncOutcome::Succeeded {
            inventory: Vec::new(),
            health: Default::default(),
            drift: None,
        };
        assert!(session.finish(id, serde_json::to_vec(&done).unwrap()));
        assert_eq!(running.await.expect("joined"), done);
        // A result for a job this session never had is ignored.
        assert!(!session.finish(id + 100, serde_json::to_vec(&done).unwrap()));
    }

    #[tokio::test]
    async fn an_agent_leaving_mid_sync_fails_the_sync_and_a_cancel_reaches_the_agent() {
        let agents = Arc::new(Agents::default());
        let (session, _sender, mut receiver) = agents.open("default/c1");
        let never = CancellationToken::new();
        let running = {
            let agents = agents.clone();
            tokio::spawn(async move {
                agents
                    .run("default/c1", &job(), Duration::from_secs(30), &never)
                    .await
            })
        };
        job_id(receiver.recv().await.expect("a job").expect("ok"));
        drop(session);
        let outcome = running.await.expect("joined");
        assert!(
            matches!(&outcome, SyncOutcome::Failed { class, message, .. }
                if class == "unreachable" && message.contains("mid-sync")),
            "{outcome:?}"
        );
        assert!(!agents.is_connected("default/c1"));

        // Cancelled by the owner (ticket withdrawn): the agent is told, then its answer wins.
        let (session, _sender, mut receiver) = agents.open("default/c1");
        let cancel = CancellationToken::new();
        let running = {
            let agents = agents.clone();
            let cancel = cancel.clone();
            tokio::spawn(async move {
                agents
                    .run("default/c1", &job(), Duration::from_secs(30), &cancel)
                    .await
            })
        };
        let id = job_id(receiver.recv().await.expect("a job").expect("ok"));
        cancel.cancel();
        let stop = receiver.recv().await.expect("a cancel").expect("ok");
        assert!(matches!(stop.message, Some(proto::dispatch::Message::Cancel(c)) if c == id));
        let abandoned = SyncOutcome::Abandoned {
            reason: "cancelled".into(),
            inventory: None,
            applied: false,
        };
        session.finish(id, serde_json::to_vec(&abandoned).unwrap());
        assert_eq!(running.await.expect("joined"), abandoned);
    }
}

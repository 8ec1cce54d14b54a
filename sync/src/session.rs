//! One sync's conversation with its target cluster: every request goes through
//! [`Session::read`] or [`Session::write`], which bound it in time (the request time-out, and
//! never past the sync's deadline), retry transient failures with backoff, classify what is
//! left, and stop as soon as the sync is cancelled. A write is never started once the
//! cancellation token fires: that is how a node whose lease lapsed stops at its next step.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fleet::health::HealthChecks;
use fleet::resources::{ObjectRef, ResourceStatus};
use kube::api::{Api, DynamicObject};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::{ClusterClient, Resolved};
use crate::error::SyncError;
use crate::object::gvk_of;
use crate::retry::{RetryPolicy, jitter_key};

/// One sync's handle on its cluster.
pub(crate) struct Session {
    pub client: Arc<ClusterClient>,
    pub field_manager: String,
    request_timeout: Duration,
    retry: RetryPolicy,
    cancel: CancellationToken,
    deadline: Instant,
    /// The node's lease: no request starts after it ends, and none runs past it.
    pub lease: Option<crate::engine::LeaseEnd>,
    /// The Sync's own readiness rules (`healthChecks`); kstatus for every other kind.
    pub health_checks: Arc<HealthChecks>,
    key: u64,
    pub requests: AtomicU64,
    pub retries: AtomicU64,
}

impl Session {
    pub fn new(
        client: Arc<ClusterClient>,
        field_manager: String,
        request_timeout: Duration,
        retry: RetryPolicy,
        cancel: CancellationToken,
        deadline: Instant,
    ) -> Session {
        let key = jitter_key(&client.cluster);
        Session {
            client,
            field_manager,
            request_timeout,
            retry,
            cancel,
            deadline,
            lease: None,
            health_checks: Arc::default(),
            key,
            requests: AtomicU64::new(0),
            retries: AtomicU64::new(0),
        }
    }

    pub fn cluster(&self) -> &str {
        &self.client.cluster
    }

    pub fn kube(&self) -> kube::Client {
        self.client.client.clone()
    }

    /// The readiness of an object as read back: by the Sync's health check for its kind, or
    /// by kstatus.
    pub fn status_of(&self, live: &serde_json::Value) -> (ResourceStatus, String) {
        self.health_checks
            .judge(live)
            .unwrap_or_else(|| crate::readiness::status_of(live))
    }

    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Fails with `Cancelled` when the sync must stop: cancelled, or its node's lease over.
    pub fn keep_going(&self, operation: &str) -> Result<(), SyncError> {
        if self.cancel.is_cancelled() || self.lease_left().is_zero() {
            return Err(SyncError::Cancelled {
                operation: operation.to_owned(),
            });
        }
        Ok(())
    }

    /// What is left of the node's lease (unbounded without one).
    fn lease_left(&self) -> Duration {
        self.lease
            .as_ref()
            .map_or(Duration::MAX, |lease| lease.remaining())
    }

    /// Sleeps, unless cancelled first; never past the deadline.
    pub async fn pause(&self, delay: Duration, operation: &str) -> Result<(), SyncError> {
        let until = (Instant::now() + delay).min(self.deadline);
        tokio::select! {
            biased;
            () = self.cancel.cancelled() => Err(SyncError::Cancelled { operation: operation.to_owned() }),
            () = tokio::time::sleep_until(until) => Ok(()),
        }
    }

    /// A read: retried and bounded, stopped by cancellation at once.
    pub async fn read<T, F, Fut>(&self, operation: &str, call: F) -> Result<T, SyncError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        self.run(operation, call, true).await
    }

    /// A write: never started (nor retried) after cancellation. A write already sent is not
    /// abandoned when the sync is cancelled: dropping it would not stop the server from
    /// applying it later. It runs to its answer or its time-out, which is never past the end
    /// of the node's lease, so when a cancelled sync reports, none of its writes can still
    /// land, and none can once the lease is over.
    pub async fn write<T, F, Fut>(&self, operation: &str, call: F) -> Result<T, SyncError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        self.keep_going(operation)?;
        let outcome = self.run(operation, call, false).await;
        // Cancelled meanwhile: the answer does not matter any more, the sync stops here.
        self.keep_going(operation)?;
        outcome
    }

    async fn run<T, F, Fut>(
        &self,
        operation: &str,
        mut call: F,
        abort_on_cancel: bool,
    ) -> Result<T, SyncError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let mut attempt = 0u32;
        loop {
            self.keep_going(operation)?;
            let now = Instant::now();
            if now >= self.deadline {
                return Err(SyncError::Timeout {
                    operation: operation.to_owned(),
                    after: self.request_timeout,
                });
            }
            // Never past the sync's deadline, nor past the node's lease.
            let limit = self
                .request_timeout
                .min(self.deadline - now)
                .min(self.lease_left());
            self.requests.fetch_add(1, Ordering::Relaxed);
            let outcome = if abort_on_cancel {
                tokio::select! {
                    biased;
                    () = self.cancel.cancelled() => {
                        return Err(SyncError::Cancelled { operation: operation.to_owned() });
                    }
                    outcome = within(limit, call()) => outcome,
                }
            } else {
                within(limit, call()).await
            };
            let error = match outcome {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(error)) => SyncError::from_kube(self.cluster(), operation, error),
                Err(Elapsed) => SyncError::Timeout {
                    operation: operation.to_owned(),
                    after: limit,
                },
            };
            let error = match error {
                SyncError::Timeout { operation, after } if after.is_zero() => SyncError::Timeout {
                    operation,
                    after: limit,
                },
                other => other,
            };
            attempt += 1;
            let Some(delay) =
                self.retry
                    .delay_at_least(error.class(), attempt, self.key, error.retry_after())
            else {
                return Err(error);
            };
            if Instant::now() + delay >= self.deadline {
                return Err(error);
            }
            tracing::debug!(
                cluster = %self.cluster(),
                operation,
                attempt,
                delay_ms = delay.as_millis() as u64,
                error = %error,
                "retrying request"
            );
            self.retries.fetch_add(1, Ordering::Relaxed);
            self.pause(delay, operation).await?;
        }
    }

    /// Discovery of an object's kind through the cluster's cache.
    pub async fn resolve(&self, object: &ObjectRef) -> Result<Option<Resolved>, SyncError> {
        let gvk = gvk_of(object);
        let operation = format!("discovering {}", object.api_version);
        self.read(&operation, || {
            self.client.discovery.resolve(&self.client.client, &gvk)
        })
        .await
    }

    /// The dynamic API of a resolved kind, in a namespace for namespaced kinds.
    pub fn api(&self, resolved: &Resolved, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(namespace) if resolved.namespaced => {
                Api::namespaced_with(self.kube(), namespace, &resolved.resource)
            }
            _ => Api::all_with(self.kube(), &resolved.resource),
        }
    }

    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }
}

/// A request that ran out of its time.
#[derive(Debug)]
struct Elapsed;

/// Runs `future` for at most `limit` from now, looking at the clock *before* each poll. A
/// process stopped past the limit (SIGSTOP, a frozen VM) must not send a request once it runs
/// again: `tokio::time::timeout` polls the inner future before its timer, and that first poll
/// can write the request to the socket after the lease that allowed it has ended. Found by the
/// chaos schedules' zombie owners: a write at generation 1 landed after generation 2's fence.
fn within<F: Future>(
    limit: Duration,
    future: F,
) -> impl Future<Output = Result<F::Output, Elapsed>> {
    let deadline = Instant::now() + limit;
    async move {
        let mut future = std::pin::pin!(future);
        let mut timer = std::pin::pin!(tokio::time::sleep_until(deadline));
        std::future::poll_fn(move |cx| {
            if Instant::now() >= deadline {
                return std::task::Poll::Ready(Err(Elapsed));
            }
            if let std::task::Poll::Ready(output) = future.as_mut().poll(cx) {
                return std::task::Poll::Ready(Ok(output));
            }
            if timer.as_mut().poll(cx).is_ready() {
                return std::task::Poll::Ready(Err(Elapsed));
            }
            std::task::Poll::Pending
        })
        .await
    }
}

#[cfg(test)]
mod deadline_tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// The zombie owner: the process stops after a request was set up and before it was sent;
    /// when it runs again past the limit, the request is never sent.
    #[tokio::test]
    async fn a_request_is_not_sent_when_the_process_wakes_after_its_limit() {
        let sent = Arc::new(AtomicBool::new(false));
        let request = {
            let sent = sent.clone();
            async move { sent.store(true, Ordering::SeqCst) }
        };
        let bounded = within(Duration::from_millis(20), request);
        // Frozen: the runtime does not run while this thread sleeps.
        std::thread::sleep(Duration::from_millis(40));
        assert!(bounded.await.is_err());
        assert!(
            !sent.load(Ordering::SeqCst),
            "the request went out after its limit"
        );
        // Within its limit it runs, and a slow one ends at the limit.
        assert!(within(Duration::from_secs(5), async { 7 }).await.is_ok());
        let slow = within(Duration::from_millis(20), std::future::pending::<()>());
        assert!(slow.await.is_err());
    }
}

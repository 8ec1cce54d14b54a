//! The simulated controllers' delay queue ([`Controller`]): one heap of due times for every
//! job of every cluster, which [`crate::controller`] drives. A leaf module, so that the state
//! every part shares ([`crate::shared::Shared`]) can hold it without importing the runner.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum JobKind {
    Workload,
    Crd,
    Namespace,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct JobKey {
    pub(crate) cluster: Arc<str>,
    pub(crate) kind: JobKind,
    pub(crate) storage_key: Arc<str>,
    pub(crate) namespace: Box<str>,
    pub(crate) name: Box<str>,
}

#[derive(Debug, Default)]
struct Queue {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    jobs: HashMap<u64, JobKey>,
    latest: HashMap<JobKey, u64>,
    next_seq: u64,
}

/// The controller's queue; `run` drives it.
#[derive(Debug, Default)]
pub(crate) struct Controller {
    queue: Mutex<Queue>,
    pub(crate) wake: Notify,
}

impl Controller {
    pub(crate) fn schedule(&self, key: JobKey, due: Instant) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        queue.next_seq += 1;
        let seq = queue.next_seq;
        if let Some(previous) = queue.latest.insert(key.clone(), seq) {
            queue.jobs.remove(&previous);
        }
        queue.jobs.insert(seq, key);
        let earliest = queue
            .heap
            .peek()
            .is_none_or(|Reverse((first, _))| due < *first);
        queue.heap.push(Reverse((due, seq)));
        drop(queue);
        if earliest {
            self.wake.notify_one();
        }
    }

    /// Schedules a job unless one with the same key is already pending (a pending job
    /// carries a later, deliberate due time that must not be cut short).
    pub(crate) fn schedule_if_idle(&self, key: JobKey, due: Instant) {
        let pending = self
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .latest
            .contains_key(&key);
        if !pending {
            self.schedule(key, due);
        }
    }

    /// Jobs that are due, and when the next one will be.
    pub(crate) fn take_due(&self, now: Instant) -> (Vec<JobKey>, Option<Instant>) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let mut due = Vec::new();
        while let Some(Reverse((at, seq))) = queue.heap.peek().copied() {
            if !queue.jobs.contains_key(&seq) {
                queue.heap.pop();
                continue;
            }
            if at > now {
                return (due, Some(at));
            }
            queue.heap.pop();
            if let Some(key) = queue.jobs.remove(&seq) {
                queue.latest.remove(&key);
                due.push(key);
            }
        }
        (due, None)
    }

    /// Pending jobs (for tests and stats).
    pub fn pending(&self) -> usize {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .jobs
            .len()
    }
}

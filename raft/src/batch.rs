//! Automatic batching of single-command proposals.
//!
//! ```text
//!   propose(cmd) ─┐
//!   propose(cmd) ─┼─► queue ─► batcher task: drain what is queued (up to MAX_BATCH) ─► propose_many
//!   propose(cmd) ─┘                 ▲                                                    │
//!                                   └── while up to MAX_IN_FLIGHT batches are committing ┘
//!                                        each caller gets its own outcome back
//! ```
//!
//! One log entry per command costs a Raft round trip's worth of bookkeeping per command, which
//! caps throughput far below what the disk and network allow. Callers that propose concurrently
//! (shard workers asking for grants) are instead gathered into one entry: while a batch commits,
//! the next one fills up, so batches grow with load and latency stays one commit when idle.
//! Commands of one batch share a log index and are applied in queue order, exactly as if they
//! had been separate entries; concurrent callers never relied on an order between them anyway.

use std::sync::Arc;

use fleet::{Command, Outcome};
use tokio::sync::{Semaphore, mpsc, oneshot, watch};

use crate::error::WriteError;
use crate::write::Proposer;

/// Most commands gathered into one entry.
const MAX_BATCH: usize = 512;
/// Batches committing at the same time.
const MAX_IN_FLIGHT: usize = 4;
/// Proposals waiting for a batch; further callers wait for room (backpressure).
const QUEUE_CAPACITY: usize = 8192;

struct Pending {
    command: Command,
    reply: oneshot::Sender<Result<(u64, Outcome), WriteError>>,
}

/// The sending side of the batcher; the task stops when every handle is dropped.
#[derive(Clone)]
pub(crate) struct Batcher {
    queue: mpsc::Sender<Pending>,
}

impl Batcher {
    /// Starts the batcher task; it ends when the last `Batcher` is dropped. When `give_up`
    /// turns true (the node shuts down), batches still committing are dropped, so that
    /// openraft has no waiting call to log an error about when it stops.
    pub fn start(proposer: Arc<Proposer>, give_up: watch::Receiver<bool>) -> Batcher {
        let (queue, receiver) = mpsc::channel(QUEUE_CAPACITY);
        tokio::spawn(run(proposer, receiver, give_up));
        Batcher { queue }
    }

    pub async fn propose(&self, command: Command) -> Result<(u64, Outcome), WriteError> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Pending { command, reply })
            .await
            .map_err(|_| WriteError::Fatal("the proposal batcher has stopped".into()))?;
        answer
            .await
            .map_err(|_| WriteError::Fatal("the proposal batcher dropped the proposal".into()))?
    }
}

async fn run(
    proposer: Arc<Proposer>,
    mut receiver: mpsc::Receiver<Pending>,
    give_up: watch::Receiver<bool>,
) {
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    loop {
        // Wait for room first, so proposals keep gathering while every slot is busy.
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        let Some(first) = receiver.recv().await else {
            return;
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(pending) => batch.push(pending),
                Err(_) => break,
            }
        }
        let proposer = proposer.clone();
        let mut give_up = give_up.clone();
        tokio::spawn(async move {
            // Dropping the batch drops its callers' reply channels: they hear the batcher
            // gave up on them.
            tokio::select! {
                () = commit(&proposer, batch) => {}
                _ = give_up.wait_for(|given_up| *given_up) => {}
            }
            drop(permit);
        });
    }
}

async fn commit(proposer: &Proposer, batch: Vec<Pending>) {
    let (commands, replies): (Vec<Command>, Vec<_>) = batch
        .into_iter()
        .map(|pending| (pending.command, pending.reply))
        .unzip();
    let count = commands.len();
    match proposer.propose_many(commands).await {
        Ok(committed) if committed.outcomes.len() == count => {
            for (reply, outcome) in replies.into_iter().zip(committed.outcomes) {
                // A caller that gave up waiting is no longer interested.
                let _ = reply.send(Ok((committed.log_index, outcome)));
            }
        }
        Ok(committed) => {
            let message = format!("{} outcomes for {count} commands", committed.outcomes.len());
            for reply in replies {
                let _ = reply.send(Err(WriteError::InvalidReply(message.clone())));
            }
        }
        Err(error) => {
            for reply in replies {
                let _ = reply.send(Err(error.duplicate()));
            }
        }
    }
}

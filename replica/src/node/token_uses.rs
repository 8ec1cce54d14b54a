//! The token uses a replica saw, reported to the replicated state (`starling token list`
//! shows their last use).

use std::sync::Arc;

/// Reports the token uses this replica saw, every `--token-use-interval`, as one command;
/// uses that could not be committed are kept for the next report.
pub(crate) async fn report_uses(replica: Arc<super::Replica>) {
    let Some(credentials) = replica.credentials.clone() else {
        return;
    };
    let interval = replica
        .config
        .token_use_interval
        .max(std::time::Duration::from_millis(100));
    loop {
        tokio::time::sleep(interval).await;
        let uses = credentials.take_uses();
        if uses.is_empty() {
            continue;
        }
        let command = fleet::Command::NoteTokenUse { uses: uses.clone() };
        if let Err(error) = replica.raft.propose(command).await {
            tracing::debug!(%error, tokens = uses.len(), "token uses not reported; kept for the next report");
            for (id, at) in uses {
                if let Some(seconds) = fleet::duration::unix_seconds(&at) {
                    credentials.note_use(&id, seconds);
                }
            }
        }
    }
}

//! Waits on a group's rollouts, shared by the end-to-end tests.

use std::time::{Duration, Instant};

use super::Group;

impl Group {
    /// Waits until SyncGroup `name`'s rollout is complete at a revision other than `not`,
    /// with `updated` clusters updated and `held` held; returns the revision.
    pub async fn wait_complete(&self, name: &str, not: &str, updated: u32, held: u32) -> String {
        let deadline = Instant::now() + Duration::from_secs(150);
        loop {
            let status = self.rollout(name).await;
            if let Some(current) = &status
                && current.phase == "Complete"
                && current.target_revision != not
                && current
                    .summary
                    .is_some_and(|s| s.updated == updated && s.held == held)
            {
                return current.target_revision.clone();
            }
            if Instant::now() >= deadline {
                // Evidence: every sync of the group that is not at the target yet.
                let syncs = self.cli_output(&["get", "syncs", "-A"]);
                panic!(
                    "rollout of {name} did not complete with {updated} updated and {held} held: \
                     {status:?}\nsyncs:\n{}{}",
                    String::from_utf8_lossy(&syncs.stdout),
                    String::from_utf8_lossy(&syncs.stderr)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

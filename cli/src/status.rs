//! `starling status`: the replica group at a glance — the leader and term, every member with
//! its state, Raft role, applied index and load (clusters and sources owned, syncs in flight),
//! and every rollout with its progress.
//!
//! On a terminal each rollout gets a progress bar; piped, the same table without bars; with
//! `-o json`, one JSON document. `--watch` redraws every second until Ctrl-C, and keeps going
//! through errors (a node restarting, an election) so a failover can be watched live.

use std::time::Duration;

use serde_json::json;

use super::output::{
    NONE, OutputFormat, Progress, ReportFormat, Table, capitalized, emit, millis_ago, progress_bar,
    progress_ratio, short_revision, stdout_is_terminal, to_json,
};
use crate::client::{Client, ServerArgs, block_on};

/// Width of a rollout's progress bar, in cells.
pub const BAR_WIDTH: usize = 24;

/// How often `--watch` refreshes.
const WATCH_PERIOD: Duration = Duration::from_secs(1);

/// Clears a terminal and puts the cursor at the top left.
const CLEAR_SCREEN: &str = "\x1b[2J\x1b[H";

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Output format: text or json.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    /// Refresh every second until Ctrl-C.
    #[arg(short = 'w', long)]
    pub watch: bool,
    #[command(flatten)]
    pub server: ServerArgs,
}

pub fn run(args: StatusArgs) -> anyhow::Result<()> {
    let format = ReportFormat::from_output(args.output, "starling status")?;
    let bars = stdout_is_terminal() && format == ReportFormat::Text;
    block_on(async {
        if !args.watch {
            let client = Client::connect(&args.server).await?;
            let status = client.status().await?;
            return emit(&render(&status, format, bars)?);
        }
        watch(&args, format, bars).await
    })
}

/// Redraws until Ctrl-C. A failed refresh is shown in place of the report, and the next one
/// reconnects.
async fn watch(args: &StatusArgs, format: ReportFormat, terminal: bool) -> anyhow::Result<()> {
    let mut client: Option<Client> = None;
    let mut ticker = tokio::time::interval(WATCH_PERIOD);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            _ = ticker.tick() => {}
        }
        let report = match refresh(&mut client, &args.server).await {
            Ok(status) => render(&status, format, terminal)?,
            Err(error) => {
                client = None;
                format!("error: {error:#}\n")
            }
        };
        let frame = if terminal {
            format!("{CLEAR_SCREEN}{report}")
        } else {
            format!("{report}\n")
        };
        emit(&frame)?;
    }
}

async fn refresh(
    client: &mut Option<Client>,
    server: &ServerArgs,
) -> anyhow::Result<proto::StatusResponse> {
    let connected = match client.take() {
        Some(connected) => connected,
        None => Client::connect(server).await?,
    };
    let status = connected.status().await?;
    *client = Some(connected);
    Ok(status)
}

pub fn render(
    status: &proto::StatusResponse,
    format: ReportFormat,
    bars: bool,
) -> anyhow::Result<String> {
    match format {
        ReportFormat::Json => to_json(&status_json(status)),
        ReportFormat::Text => Ok(status_text(status, bars)),
    }
}

/// The report as text: a headline, the members, the rollouts.
pub fn status_text(status: &proto::StatusResponse, bars: bool) -> String {
    let leader = match status.leader_id {
        0 => "none (no leader elected)".to_owned(),
        id => format!("node {id}"),
    };
    let mut text = format!(
        "leader: {leader}   term: {}   commit index: {}   revision: {}\n",
        status.term, status.commit_index, status.revision
    );
    if !status.installation.is_empty() {
        text.push_str(&format!("installation: {}\n", status.installation));
    }
    text.push('\n');
    if status.recovering {
        text.push_str(
            "disaster recovery in progress: nothing rolls out until `starling recover` has read the target clusters\n\n",
        );
    }
    text.push_str(&members_table(&status.members).render());
    text.push('\n');
    if status.rollouts.is_empty() {
        text.push_str("no rollouts\n");
    } else {
        text.push_str(&rollouts_table(&status.rollouts, bars).render());
    }
    text
}

/// One row per member: state and role, how far it has applied the log, and its load with its
/// share of all owned clusters.
pub fn members_table(members: &[proto::Member]) -> Table {
    let total_clusters: u64 = members
        .iter()
        .map(|member| u64::from(member.clusters_owned))
        .sum();
    let mut table = Table::new([
        "ID",
        "ADDRESS",
        "STATE",
        "ROLE",
        "VOTER",
        "APPLIED",
        "CLUSTERS",
        "SOURCES",
        "SYNCING",
        "LAST SEEN",
    ]);
    let mut members: Vec<&proto::Member> = members.iter().collect();
    members.sort_by_key(|member| member.id);
    for member in members {
        let share = (u64::from(member.clusters_owned) * 100)
            .checked_div(total_clusters)
            .unwrap_or(0);
        table.push(vec![
            member.id.to_string(),
            or_none(&member.address),
            capitalized(&or_none(&member.state)),
            or_none(&member.role),
            if member.voter { "yes" } else { "no" }.to_owned(),
            member.applied_index.to_string(),
            format!("{} ({share}%)", member.clusters_owned),
            member.sources_owned.to_string(),
            member.syncs_in_flight.to_string(),
            millis_ago(member.last_heartbeat_millis),
        ]);
    }
    table
}

/// One row per rollout; `bars` adds a progress bar column (for terminals).
pub fn rollouts_table(rollouts: &[proto::Rollout], bars: bool) -> Table {
    let mut headers = vec!["ROLLOUT", "REVISION", "PHASE"];
    if bars {
        headers.push("PROGRESS");
    }
    headers.extend(["UPDATED", "IN PROGRESS", "PENDING", "FAILED"]);
    let mut table = Table::new(headers);
    for rollout in rollouts {
        let summary = rollout.summary.unwrap_or_default();
        let progress = Progress::from(&summary);
        let mut row = vec![
            format!("{}/{}", rollout.namespace, rollout.name),
            or_none(&short_revision(&rollout.target_revision)),
            if rollout.waiting.is_empty() {
                or_none(&rollout.phase)
            } else {
                format!("{} (waits on its source)", or_none(&rollout.phase))
            },
        ];
        if bars {
            row.push(progress_bar(progress, BAR_WIDTH));
        }
        row.extend([
            progress_ratio(progress),
            summary.in_progress.to_string(),
            summary.pending.to_string(),
            summary.failed.to_string(),
        ]);
        table.push(row);
    }
    table
}

fn or_none(text: &str) -> String {
    match text {
        "" => NONE.to_owned(),
        text => text.to_owned(),
    }
}

/// The report as JSON (camelCase, as the resources): `leaderId` is null without a leader.
pub fn status_json(status: &proto::StatusResponse) -> serde_json::Value {
    json!({
        "leaderId": (status.leader_id != 0).then_some(status.leader_id),
        "term": status.term,
        "commitIndex": status.commit_index,
        "revision": status.revision,
        "recovering": status.recovering,
        "installation": (!status.installation.is_empty()).then_some(&status.installation),
        "members": status.members.iter().map(member_json).collect::<Vec<_>>(),
        "rollouts": status.rollouts.iter().map(rollout_json).collect::<Vec<_>>(),
    })
}

pub fn member_json(member: &proto::Member) -> serde_json::Value {
    json!({
        "id": member.id,
        "address": member.address,
        "state": member.state,
        "role": member.role,
        "voter": member.voter,
        "appliedIndex": member.applied_index,
        "clustersOwned": member.clusters_owned,
        "sourcesOwned": member.sources_owned,
        "syncsInFlight": member.syncs_in_flight,
        "lastHeartbeatMillis": member.last_heartbeat_millis,
    })
}

fn rollout_json(rollout: &proto::Rollout) -> serde_json::Value {
    let summary = rollout.summary.unwrap_or_default();
    json!({
        "namespace": rollout.namespace,
        "name": rollout.name,
        "targetRevision": rollout.target_revision,
        "phase": rollout.phase,
        "summary": {
            "total": summary.total,
            "updated": summary.updated,
            "inProgress": summary.in_progress,
            "pending": summary.pending,
            "failed": summary.failed,
        },
        "waiting": (!rollout.waiting.is_empty()).then_some(&rollout.waiting),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::testing;

    #[test]
    fn text_shows_leader_members_and_rollouts() {
        let text = status_text(&testing::canned_status(), false);
        assert_eq!(
            text,
            "leader: node 1   term: 4   commit index: 121   revision: 120\n\
             installation: inst-0a1b2c3d4e5f\n\
             \n\
             ID   ADDRESS          STATE      ROLE       VOTER   APPLIED   CLUSTERS   SOURCES   SYNCING   LAST SEEN\n\
             1    127.0.0.1:7401   Live       leader     yes     120       60 (60%)   1         2         -\n\
             2    127.0.0.1:7402   Draining   follower   yes     120       0 (0%)     1         2         250ms\n\
             3    127.0.0.1:7403   Live       learner    no      120       40 (40%)   1         2         250ms\n\
             \n\
             ROLLOUT       REVISION                 PHASE         UPDATED        IN PROGRESS   PENDING   FAILED\n\
             default/web   main@sha1:0a1b2c3d4e5f   Progressing   40/100 (40%)   10            50        0\n"
        );
    }

    #[test]
    fn terminals_get_progress_bars() {
        let text = status_text(&testing::canned_status(), true);
        let bar = format!("[{}{}{}]", "#".repeat(10), ">".repeat(2), "-".repeat(12));
        assert!(
            text.contains(&format!("Progressing   {bar}   40/100 (40%)")),
            "{text}"
        );
    }

    #[test]
    fn recovery_in_progress_is_said_first() {
        let status = proto::StatusResponse {
            leader_id: 1,
            recovering: true,
            ..proto::StatusResponse::default()
        };
        let text = status_text(&status, false);
        assert!(
            text.contains(
                "disaster recovery in progress: nothing rolls out until `starling recover`"
            ),
            "{text}"
        );
        assert_eq!(status_json(&status)["recovering"], true);
    }

    #[test]
    fn no_leader_and_no_rollouts_are_said_plainly() {
        let status = proto::StatusResponse {
            leader_id: 0,
            term: 9,
            ..proto::StatusResponse::default()
        };
        let text = status_text(&status, true);
        assert!(
            text.starts_with("leader: none (no leader elected)   term: 9"),
            "{text}"
        );
        assert!(text.ends_with("no rollouts\n"), "{text}");
        assert_eq!(status_json(&status)["leaderId"], serde_json::Value::Null);
    }

    #[test]
    fn json_carries_every_field() {
        let value = status_json(&testing::canned_status());
        assert_eq!(value["leaderId"], 1);
        assert_eq!(value["members"][1]["state"], "draining");
        assert_eq!(value["members"][2]["voter"], false);
        assert_eq!(value["rollouts"][0]["summary"]["inProgress"], 10);
        assert_eq!(
            value["rollouts"][0]["targetRevision"],
            "main@sha1:0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"
        );
    }

    #[tokio::test]
    async fn status_comes_over_the_wire() {
        let server = testing::serve().await;
        let client = Client::connect(&server).await.unwrap();
        let status = client.status().await.unwrap();
        assert_eq!(status, testing::canned_status());
        let mut cached = None;
        assert!(refresh(&mut cached, &server).await.is_ok());
        assert!(cached.is_some());
    }
}

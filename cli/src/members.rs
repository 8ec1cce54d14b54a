//! `starling members`: list the replica group's members and change it — add a node (as a
//! learner, or a voter once caught up), remove one, drain one (its clusters and sources move
//! to the others; `--undo` gives it work again), and hand leadership to another voter.

use serde_json::json;

use super::output::{OutputFormat, ReportFormat, emit, to_json};
use super::status::{member_json, members_table};
use crate::client::{Client, ServerArgs, block_on};

#[derive(clap::Args, Debug)]
pub struct MembersArgs {
    #[command(subcommand)]
    pub command: Option<MembersCommand>,
    /// Output format: of the list, or of a change's result.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    #[command(flatten)]
    pub server: ServerArgs,
}

#[derive(clap::Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum MembersCommand {
    /// List the members with state, role and load (the default).
    List,
    /// Add a node to the group; it becomes a voter once caught up unless --learner.
    Add {
        /// The new node's id (its --id).
        id: u64,
        /// host:port the other replicas reach it at (its --advertise).
        address: String,
        /// Keep it a learner: it replicates the log but does not vote.
        #[arg(long)]
        learner: bool,
    },
    /// Remove a node from the group.
    Remove { id: u64 },
    /// Move a node's clusters and sources to the other nodes, and give it no new ones.
    Drain {
        id: u64,
        /// Give the node work again.
        #[arg(long)]
        undo: bool,
    },
    /// Hand leadership to a node (any other up-to-date voter when no id is given).
    TransferLeader { id: Option<u64> },
}

pub fn run(args: MembersArgs) -> anyhow::Result<()> {
    let command = args.command.unwrap_or(MembersCommand::List);
    let format = ReportFormat::from_output(args.output, "starling members")?;
    let text = block_on(async {
        let client = Client::connect(&args.server).await?;
        execute(&client, command, format).await
    })?;
    emit(&text)
}

/// Runs one members command and returns what to print: a sentence (or the table), or the
/// node's answer as JSON.
pub async fn execute(
    client: &Client,
    command: MembersCommand,
    output: ReportFormat,
) -> anyhow::Result<String> {
    let (text, json) = match command {
        MembersCommand::List => {
            let response = client.members().await?;
            let json = json!({
                "leaderId": (response.leader_id != 0).then_some(response.leader_id),
                "members": response.members.iter().map(member_json).collect::<Vec<_>>(),
            });
            (members_text(&response), json)
        }
        MembersCommand::Add {
            id,
            address,
            learner,
        } => {
            let request = proto::AddNodeRequest {
                id,
                address: address.clone(),
                voter: !learner,
            };
            let response = client.add_node(request).await?;
            let role = if learner { "learner" } else { "voter" };
            let text = format!(
                "node {id} at {address} added as {role}; {}",
                membership(&response)
            );
            (text, membership_json(&response))
        }
        MembersCommand::Remove { id } => {
            let response = client.remove_node(proto::RemoveNodeRequest { id }).await?;
            (
                format!("node {id} removed; {}", membership(&response)),
                membership_json(&response),
            )
        }
        MembersCommand::Drain { id, undo } => {
            let response = client.drain(proto::DrainRequest { id, undo }).await?;
            let text = match undo {
                true => format!(
                    "node {id} takes work again (revision {})\n",
                    response.revision
                ),
                false => format!(
                    "node {id} draining: {} clusters and sources moved away (revision {})\n",
                    response.moved, response.revision
                ),
            };
            (
                text,
                json!({"revision": response.revision, "moved": response.moved}),
            )
        }
        MembersCommand::TransferLeader { id } => {
            let target = id.unwrap_or(0);
            let response = client
                .transfer_leadership(proto::TransferLeadershipRequest { target })
                .await?;
            let text = format!(
                "leader is node {} (term {})\n",
                response.leader_id, response.term
            );
            (
                text,
                json!({"leaderId": response.leader_id, "term": response.term}),
            )
        }
    };
    match output {
        ReportFormat::Text => Ok(text),
        ReportFormat::Json => to_json(&json),
    }
}

fn membership_json(response: &proto::MembershipResponse) -> serde_json::Value {
    json!({"logIndex": response.log_index, "voters": response.voters, "learners": response.learners})
}

fn members_text(response: &proto::MembersResponse) -> String {
    let leader = match response.leader_id {
        0 => "none (no leader elected)".to_owned(),
        id => format!("node {id}"),
    };
    format!(
        "leader: {leader}\n\n{}",
        members_table(&response.members).render()
    )
}

/// `voters 1,2,3; learners none (log index 12)`.
fn membership(response: &proto::MembershipResponse) -> String {
    let ids = |ids: &[u64]| match ids {
        [] => "none".to_owned(),
        ids => ids.iter().map(u64::to_string).collect::<Vec<_>>().join(","),
    };
    format!(
        "voters {}; learners {} (log index {})\n",
        ids(&response.voters),
        ids(&response.learners),
        response.log_index
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::testing;
    use clap::Parser as _;

    /// The command line as a user types it, after `starling`.
    #[derive(clap::Parser, Debug)]
    struct Line {
        #[command(subcommand)]
        command: Top,
    }

    #[derive(clap::Subcommand, Debug)]
    enum Top {
        Members(MembersArgs),
    }

    fn parse(line: &str) -> MembersArgs {
        let words = std::iter::once("starling").chain(line.split_whitespace());
        match Line::try_parse_from(words) {
            Ok(Line {
                command: Top::Members(args),
            }) => args,
            Err(error) => panic!("{line}: {error}"),
        }
    }

    #[test]
    fn command_lines_parse() {
        assert!(parse("members").command.is_none());
        assert!(matches!(
            parse("members add 4 10.0.0.4:7400 --learner").command,
            Some(MembersCommand::Add {
                id: 4,
                learner: true,
                ..
            })
        ));
        assert!(matches!(
            parse("members drain 2 --undo").command,
            Some(MembersCommand::Drain { id: 2, undo: true })
        ));
        assert!(matches!(
            parse("members transfer-leader").command,
            Some(MembersCommand::TransferLeader { id: None })
        ));
        let args = parse("members --server 10.0.0.1:7400 remove 3 --timeout 2s -o json");
        assert_eq!(args.output, OutputFormat::Json);
        assert_eq!(
            parse("members list -o json").command,
            Some(MembersCommand::List)
        );
        assert_eq!(parse("members -o json").output, OutputFormat::Json);
        assert_eq!(args.server.server, "10.0.0.1:7400");
        assert_eq!(args.server.timeout, Some(std::time::Duration::from_secs(2)));
        assert!(Line::try_parse_from(["starling", "members", "add", "four", "x:1"]).is_err());
    }

    #[tokio::test]
    async fn each_change_says_what_happened() {
        let server = testing::serve().await;
        let client = Client::connect(&server).await.unwrap();
        let add = MembersCommand::Add {
            id: 4,
            address: "127.0.0.1:7404".into(),
            learner: false,
        };
        assert_eq!(
            execute(&client, add, ReportFormat::Text).await.unwrap(),
            "node 4 at 127.0.0.1:7404 added as voter; voters 1,2,3,4; learners none (log index 130)\n"
        );
        assert_eq!(
            execute(
                &client,
                MembersCommand::Drain { id: 2, undo: false },
                ReportFormat::Text
            )
            .await
            .unwrap(),
            "node 2 draining: 33 clusters and sources moved away (revision 132)\n"
        );
        assert_eq!(
            execute(
                &client,
                MembersCommand::TransferLeader { id: None },
                ReportFormat::Text
            )
            .await
            .unwrap(),
            "leader is node 2 (term 5)\n"
        );
        let error = execute(
            &client,
            MembersCommand::Remove { id: 9 },
            ReportFormat::Text,
        )
        .await
        .unwrap_err();
        assert_eq!(format!("{error:#}"), "rejected: node 9 is not a member");
        let listed = execute(&client, MembersCommand::List, ReportFormat::Text)
            .await
            .unwrap();
        assert!(
            listed.starts_with("leader: node 1\n\nID   ADDRESS"),
            "{listed}"
        );
        let json = execute(
            &client,
            MembersCommand::Drain { id: 2, undo: true },
            ReportFormat::Json,
        )
        .await
        .unwrap();
        let json: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(json, json!({"revision": 132, "moved": 0}));
    }
}

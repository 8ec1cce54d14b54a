//! `starling rollout pause|resume|status SYNCGROUP`: hold a SyncGroup's rollout (clusters in
//! flight finish, no new ones are admitted), let it continue (also after a halt), and show where
//! it stands: phase, target revision and counts, read from the SyncGroup's status.
//!
//! `rollout status --watch` waits like `kubectl rollout status`: it reports progress until the
//! rollout is complete (exit 0) or halted (exit 1, with the reason).

pub use super::target::Target;
use std::time::Duration;

use anyhow::bail;
use fleet::manifest::Kind;
use serde_json::{Value, json};

use super::get::text_at;
use super::output::{
    NONE, OutputFormat, Progress, ReportFormat, emit, object_name, progress_bar, progress_ratio,
    stdout_is_terminal, to_json,
};
use super::status::BAR_WIDTH;
use crate::client::{Client, ServerArgs, block_on};

/// How often `rollout status --watch` looks again.
const WATCH_PERIOD: Duration = Duration::from_secs(1);

#[derive(clap::Args, Debug)]
pub struct RolloutArgs {
    #[command(subcommand)]
    pub command: RolloutCommand,
    #[command(flatten)]
    pub server: ServerArgs,
}

#[derive(clap::Subcommand, Debug)]
pub enum RolloutCommand {
    /// Stop admitting clusters; those in flight finish.
    Pause(Target),
    /// Continue a paused or halted rollout.
    Resume(Target),
    /// Show the phase, target revision and counts of a SyncGroup's rollout.
    Status(StatusArgs),
    /// List a SyncGroup's last rollouts: revision, trigger, times, counts, halt reason.
    History(HistoryArgs),
    /// Roll back: pin the SyncGroup to a revision it rolled out before (by default the last
    /// one that completed before the current target), with the same budget and partitions.
    Undo(UndoArgs),
    /// Remove the pin of `undo`: follow the source's newest revision again.
    Unpin(Target),
}

#[derive(clap::Args, Debug)]
pub struct HistoryArgs {
    #[command(flatten)]
    pub target: Target,
    /// Output format: text or json.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

#[derive(clap::Args, Debug)]
pub struct UndoArgs {
    #[command(flatten)]
    pub target: Target,
    /// The revision to go back to: as `rollout history` shows it (a unique prefix is
    /// enough), its git commit (short or full), or the rollout's ID in the history.
    #[arg(long, value_name = "REVISION")]
    pub to_revision: Option<String>,
}

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    pub target: Target,
    /// Output format: text or json.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    /// Wait until the rollout completes (exit 0) or halts (exit 1), reporting progress. It
    /// first asks the SyncGroup's Source to poll, so a commit just pushed is rolled out before
    /// the rollout counts as complete; `--timeout` bounds the whole wait.
    #[arg(short = 'w', long)]
    pub watch: bool,
}

pub fn run(args: RolloutArgs) -> anyhow::Result<()> {
    block_on(async {
        let client = Client::connect(&args.server).await?;
        match args.command {
            RolloutCommand::Pause(target) => emit(&pause(&client, &target).await?),
            RolloutCommand::Resume(target) => emit(&resume(&client, &target).await?),
            RolloutCommand::Status(status) if status.watch => {
                let limit = args.server.timeout;
                match limit {
                    Some(limit) => tokio::time::timeout(limit, watch(&client, &status.target))
                        .await
                        .unwrap_or_else(|_| {
                            Err(anyhow::anyhow!(
                                "rollout of {}/{} not complete after {} (--timeout)",
                                status.target.namespace,
                                status.target.name,
                                fleet::duration::format_duration(limit)
                            ))
                        }),
                    None => watch(&client, &status.target).await,
                }
            }
            RolloutCommand::Status(status) => {
                let format = ReportFormat::from_output(status.output, "starling rollout status")?;
                let view = fetch(&client, &status.target).await?;
                emit(&render(&view, format, stdout_is_terminal())?)
            }
            RolloutCommand::History(history) => {
                let format = ReportFormat::from_output(history.output, "starling rollout history")?;
                let object = fetch_object(&client, &history.target).await?;
                emit(&super::history::render(&history.target, &object, format)?)
            }
            RolloutCommand::Undo(undo) => emit(&undo_to(&client, &undo).await?),
            RolloutCommand::Unpin(target) => emit(&pin(&client, &target, None).await?),
        }
    })
}

fn request(target: &Target) -> proto::RolloutRequest {
    proto::RolloutRequest {
        namespace: target.namespace.clone(),
        name: target.name.clone(),
    }
}

pub async fn pause(client: &Client, target: &Target) -> anyhow::Result<String> {
    client.rollout_pause(request(target)).await?;
    Ok(format!(
        "{} paused\n",
        object_name(Kind::SyncGroup, &target.name)
    ))
}

pub async fn resume(client: &Client, target: &Target) -> anyhow::Result<String> {
    client.rollout_resume(request(target)).await?;
    Ok(format!(
        "{} resumed\n",
        object_name(Kind::SyncGroup, &target.name)
    ))
}

/// `rollout undo`: pins to `--to-revision`, or to the revision the history suggests.
pub async fn undo_to(client: &Client, undo: &UndoArgs) -> anyhow::Result<String> {
    let object = fetch_object(client, &undo.target).await?;
    let revision = match &undo.to_revision {
        Some(given) => {
            super::history::expand_revision(&object, given).map_err(anyhow::Error::msg)?
        }
        None => {
            super::history::previous_revision(&object).ok_or_else(|| {
                anyhow::anyhow!(
                    "syncgroup {}/{} has no earlier revision to go back to (`starling rollout history {}`)",
                    undo.target.namespace,
                    undo.target.name,
                    undo.target.name
                )
            })?
        }
    };
    pin(client, &undo.target, Some(revision)).await
}

/// Pins a group to `revision`, or unpins it.
pub async fn pin(
    client: &Client,
    target: &Target,
    revision: Option<String>,
) -> anyhow::Result<String> {
    client
        .rollout_pin(proto::RolloutPinRequest {
            namespace: target.namespace.clone(),
            name: target.name.clone(),
            revision: revision.clone().unwrap_or_default(),
        })
        .await?;
    let name = object_name(Kind::SyncGroup, &target.name);
    Ok(match revision {
        Some(revision) => format!(
            "{name} pinned to {revision}: rolling back with its budget and partitions. It stays \
             there, whatever the source does, until `starling rollout unpin {}`.\n",
            target.name
        ),
        None => format!("{name} unpinned: it follows its source's newest revision again\n"),
    })
}

/// Where a SyncGroup's rollout stands, read from the object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RolloutView {
    pub namespace: String,
    pub name: String,
    pub target_revision: Option<String>,
    pub phase: Option<String>,
    /// `spec.rollout.paused`: asked to pause (the phase follows once the node acts on it).
    pub paused: bool,
    /// The node has not yet acted on the latest spec (`observedGeneration < generation`).
    pub stale: bool,
    pub progress: Progress,
    pub pending: u32,
    /// Clusters held (`starling cluster hold`), skipped by the rollout.
    pub held: u32,
    /// Clusters that could not be reached when the rollout came to them, skipped.
    pub unreachable: u32,
    /// Why the current rollout halted, from its record in the history.
    pub halt_reason: Option<String>,
    /// `spec.rollout.pinnedRevision` (`starling rollout undo`).
    pub pinned: Option<String>,
    /// While pinned: the source's newest revision, waiting for `starling rollout unpin`.
    pub waiting: Option<String>,
    /// Conditions that say something is wrong (not `True`, or a problem that is `True`, such
    /// as `WaitingForSource`), as `type: reason: message`.
    pub problems: Vec<String>,
}

impl RolloutView {
    pub fn from_object(namespace: &str, name: &str, object: &Value) -> RolloutView {
        let count = |field: &str| {
            object
                .pointer(&format!("/status/summary/{field}"))
                .and_then(Value::as_u64)
                .and_then(|count| u32::try_from(count).ok())
                .unwrap_or(0)
        };
        let text = |pointer: &str| Some(text_at(object, pointer)).filter(|text| text != NONE);
        let generation = object
            .pointer("/metadata/generation")
            .and_then(Value::as_i64);
        let observed = object
            .pointer("/status/observedGeneration")
            .and_then(Value::as_i64);
        let problems = object
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .map(|conditions| {
                conditions
                    .iter()
                    .filter(|condition| {
                        let kind = condition.get("type").and_then(Value::as_str);
                        let status = condition.get("status").and_then(Value::as_str);
                        // Most conditions say something good when True; a few say a
                        // problem (`WaitingForSource`, `NoClusters`, ...).
                        match kind {
                            Some(kind)
                                if fleet::state::ABNORMAL_TRUE_CONDITIONS.contains(&kind) =>
                            {
                                status == Some("True")
                            }
                            _ => status != Some("True"),
                        }
                    })
                    .map(|condition| {
                        let parts =
                            ["/type", "/reason", "/message"].map(|field| text_at(condition, field));
                        parts
                            .into_iter()
                            .filter(|part| part != NONE)
                            .collect::<Vec<_>>()
                            .join(": ")
                    })
                    .collect()
            })
            .unwrap_or_default();
        RolloutView {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            target_revision: text("/status/targetRevision"),
            phase: text("/status/phase"),
            paused: object
                .pointer("/spec/rollout/paused")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            stale: matches!((generation, observed), (Some(generation), Some(observed)) if observed < generation),
            progress: Progress {
                total: count("total"),
                updated: count("updated"),
                in_progress: count("inProgress"),
                failed: count("failed"),
            },
            pending: count("pending"),
            held: count("held"),
            unreachable: count("unreachable"),
            halt_reason: object
                .pointer("/status/history/0/haltReason")
                .and_then(Value::as_str)
                .map(String::from),
            pinned: object
                .pointer("/spec/rollout/pinnedRevision")
                .and_then(Value::as_str)
                .map(String::from),
            waiting: text("/status/waitingRevision"),
            problems,
        }
    }

    fn phase(&self) -> &str {
        self.phase.as_deref().unwrap_or(NONE)
    }

    /// `40/100 (40%) updated, 10 in progress, 50 pending, 0 failed`.
    fn counts(&self) -> String {
        let mut held = if self.held > 0 {
            format!(", {} held", self.held)
        } else {
            String::new()
        };
        if self.unreachable > 0 {
            held.push_str(&format!(", {} unreachable", self.unreachable));
        }
        format!(
            "{} updated, {} in progress, {} pending, {} failed{held}",
            progress_ratio(self.progress),
            self.progress.in_progress,
            self.pending,
            self.progress.failed
        )
    }

    /// One line for `--watch`.
    fn line(&self, bar: bool) -> String {
        let bar = if bar {
            format!("{} ", progress_bar(self.progress, BAR_WIDTH))
        } else {
            String::new()
        };
        format!(
            "{}/{} {} {bar}{}",
            self.namespace,
            self.name,
            self.phase(),
            self.counts()
        )
    }
}

/// The SyncGroup object, as JSON.
pub async fn fetch_object(client: &Client, target: &Target) -> anyhow::Result<Value> {
    let object = proto::ObjectRef {
        kind: Kind::SyncGroup.as_str().to_owned(),
        namespace: target.namespace.clone(),
        name: target.name.clone(),
    };
    let response = client
        .get(proto::GetRequest {
            object: Some(object),
        })
        .await?;
    let Some(object) = response.object else {
        bail!(
            "the node answered without syncgroup {}/{}",
            target.namespace,
            target.name
        );
    };
    serde_json::from_slice(&object.json).map_err(|error| {
        anyhow::anyhow!(
            "the node sent an invalid syncgroup {}/{}: {error}",
            target.namespace,
            target.name
        )
    })
}

/// Asks the SyncGroup's Source to poll now, so that `--watch` judges the rollout of what the
/// repository holds now, not of the commit before a push. The Source and the request number
/// to wait for; `None` when there is nothing to wait for.
async fn ask_for_poll(client: &Client, target: &Target) -> anyhow::Result<Option<(String, u64)>> {
    let object = fetch_object(client, target).await?;
    let Some(source) = object
        .pointer("/spec/sourceRef/name")
        .and_then(Value::as_str)
        .map(String::from)
    else {
        return Ok(None);
    };
    let response = client
        .source_poll(proto::SourcePollRequest {
            namespace: target.namespace.clone(),
            name: source.clone(),
        })
        .await?;
    Ok((response.request > 0).then_some((source, response.request)))
}

/// Whether the Source has finished a poll that started after `request`.
async fn poll_served(
    client: &Client,
    namespace: &str,
    source: &str,
    request: u64,
) -> anyhow::Result<bool> {
    let response = client
        .get(proto::GetRequest {
            object: Some(proto::ObjectRef {
                kind: Kind::Source.as_str().to_owned(),
                namespace: namespace.to_owned(),
                name: source.to_owned(),
            }),
        })
        .await?;
    let served = response
        .object
        .and_then(|object| serde_json::from_slice::<Value>(&object.json).ok())
        .and_then(|value| {
            value
                .pointer("/status/observedPollRequest")
                .and_then(Value::as_u64)
        })
        .unwrap_or(0);
    Ok(served >= request)
}

async fn fetch(client: &Client, target: &Target) -> anyhow::Result<RolloutView> {
    let value = fetch_object(client, target).await?;
    Ok(RolloutView::from_object(
        &target.namespace,
        &target.name,
        &value,
    ))
}

pub fn render(view: &RolloutView, format: ReportFormat, bar: bool) -> anyhow::Result<String> {
    if format == ReportFormat::Json {
        return to_json(&json!({
            "namespace": view.namespace,
            "name": view.name,
            "targetRevision": view.target_revision,
            "phase": view.phase,
            "paused": view.paused,
            "summary": {
                "total": view.progress.total,
                "updated": view.progress.updated,
                "inProgress": view.progress.in_progress,
                "pending": view.pending,
                "failed": view.progress.failed,
                "held": view.held,
                "unreachable": view.unreachable,
            },
            "haltReason": view.halt_reason,
            "pinnedRevision": view.pinned,
            "waitingRevision": view.waiting,
            "problems": view.problems,
        }));
    }
    let mut text = format!("syncgroup {}/{}\n", view.namespace, view.name);
    text.push_str(&format!(
        "  revision: {}\n",
        view.target_revision.as_deref().unwrap_or(NONE)
    ));
    text.push_str(&format!("  phase:    {}\n", view.phase()));
    if let Some(pinned) = &view.pinned {
        text.push_str(&format!(
            "  pinned:   to {pinned} (starling rollout unpin {} to follow the source)\n",
            view.name
        ));
    }
    if let Some(waiting) = &view.waiting {
        text.push_str(&format!(
            "  waiting:  {waiting} is newer at the source; it rolls out after \
             `starling rollout unpin {}`\n",
            view.name
        ));
    }
    if view.paused && view.phase.as_deref() != Some("Paused") {
        text.push_str("  paused:   requested, not yet in effect\n");
    }
    text.push_str(&format!("  clusters: {}\n", view.counts()));
    if bar {
        text.push_str(&format!("  {}\n", progress_bar(view.progress, BAR_WIDTH)));
    }
    for problem in &view.problems {
        text.push_str(&format!("  {problem}\n"));
    }
    Ok(text)
}

/// What `--watch` does after a look: go on, or end with success or an error.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Waiting,
    Complete,
    Halted(String),
}

pub fn verdict(view: &RolloutView) -> Verdict {
    if view.stale {
        return Verdict::Waiting;
    }
    // A group that selects no cluster has nothing to wait for.
    if let Some(none) = view
        .problems
        .iter()
        .find(|p| p.starts_with(fleet::state::NO_CLUSTERS_CONDITION))
    {
        return Verdict::Halted(none.clone());
    }
    match view.phase.as_deref() {
        Some("Complete") => Verdict::Complete,
        Some("Halted") => {
            let reason = match (&view.halt_reason, view.problems.as_slice()) {
                (Some(reason), _) => reason.clone(),
                (None, []) => format!("{} failed clusters", view.progress.failed),
                (None, problems) => problems.join("; "),
            };
            Verdict::Halted(reason)
        }
        _ => Verdict::Waiting,
    }
}

/// Reports progress until the rollout completes or halts, or until Ctrl-C. On a terminal a
/// live progress bar (indicatif) shows clusters updated out of the total, with the phase and
/// counts; piped, a plain line is printed each time something changed.
async fn watch(client: &Client, target: &Target) -> anyhow::Result<()> {
    let poll = ask_for_poll(client, target).await?;
    let mut polled = poll.is_none();
    let bar = stdout_is_terminal().then(|| {
        let bar =
            indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stdout());
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{prefix} [{bar:40.green/blue}] {pos}/{len} {elapsed_precise} {msg}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(format!("{}/{}", target.namespace, target.name));
        bar
    });
    let mut last_line = String::new();
    let mut ticker = tokio::time::interval(WATCH_PERIOD);
    let finish = |bar: &Option<indicatif::ProgressBar>| {
        if let Some(bar) = bar {
            bar.abandon();
        }
    };
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {
                finish(&bar);
                return Ok(());
            }
            _ = ticker.tick() => {}
        }
        let view = fetch(client, target).await?;
        match &bar {
            Some(bar) => {
                bar.set_length(u64::from(view.progress.total));
                bar.set_position(u64::from(view.progress.updated));
                bar.set_message(format!("{} {}", view.phase(), view.counts()));
            }
            None => {
                let line = view.line(false);
                if line != last_line {
                    emit(&format!("{line}\n"))?;
                    last_line = line;
                }
            }
        }
        if !polled && let Some((source, request)) = &poll {
            polled = poll_served(client, &target.namespace, source, *request).await?;
        }
        match verdict(&view) {
            Verdict::Waiting => {}
            // The rollout of what the source held before the poll: wait for the poll.
            Verdict::Complete if !polled => {}
            Verdict::Complete => {
                finish(&bar);
                return emit(&format!(
                    "rollout of {}/{} complete\n",
                    view.namespace, view.name
                ));
            }
            Verdict::Halted(reason) => {
                finish(&bar);
                bail!(
                    "rollout of {}/{} halted: {reason}",
                    view.namespace,
                    view.name
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::testing;
    use fleet::manifest::DEFAULT_NAMESPACE;

    fn target(name: &str) -> Target {
        Target {
            name: name.to_owned(),
            namespace: DEFAULT_NAMESPACE.to_owned(),
        }
    }

    #[test]
    fn views_read_the_syncgroup_status() {
        let mut object = testing::syncgroup_json("web", "Halted", 4);
        object["spec"]["rollout"] = json!({"paused": true});
        object["status"]["summary"]["failed"] = json!(3);
        object["status"]["conditions"] = json!([
            {"type": "Ready", "status": "False", "reason": "Halted", "message": "3 clusters failed, more than maxFailures 2"},
            {"type": "Reconciling", "status": "True"}
        ]);
        let view = RolloutView::from_object("default", "web", &object);
        assert_eq!(view.phase.as_deref(), Some("Halted"));
        assert!(view.paused);
        assert_eq!(
            view.progress,
            Progress {
                total: 10,
                updated: 4,
                in_progress: 2,
                failed: 3
            }
        );
        assert_eq!(
            view.problems,
            ["Ready: Halted: 3 clusters failed, more than maxFailures 2"]
        );
        assert_eq!(
            verdict(&view),
            Verdict::Halted("Ready: Halted: 3 clusters failed, more than maxFailures 2".into())
        );
        let text = render(&view, ReportFormat::Text, false).unwrap();
        assert_eq!(
            text,
            "syncgroup default/web\n  revision: main@sha1:0a1b2c3d4e5f60718293a4b5c6d7e8f901234567\n  phase:    Halted\n  \
             paused:   requested, not yet in effect\n  clusters: 4/10 (40%) updated, 2 in progress, 4 pending, 3 failed\n  \
             Ready: Halted: 3 clusters failed, more than maxFailures 2\n"
        );
    }

    #[test]
    fn a_pinned_group_says_a_newer_revision_waits_at_the_source() {
        let mut object = testing::syncgroup_json("web", "Complete", 10);
        object["spec"]["rollout"] = json!({"pinnedRevision": "main@sha1:aaa"});
        object["status"]["waitingRevision"] = json!("main@sha1:bbb");
        let view = RolloutView::from_object("default", "web", &object);
        let text = render(&view, ReportFormat::Text, false).unwrap();
        assert!(
            text.contains(
                "  pinned:   to main@sha1:aaa (starling rollout unpin web to follow the source)\n  \
                 waiting:  main@sha1:bbb is newer at the source; it rolls out after `starling \
                 rollout unpin web`\n"
            ),
            "{text}"
        );
        let json: Value =
            serde_json::from_str(&render(&view, ReportFormat::Json, false).unwrap()).unwrap();
        assert_eq!(json["waitingRevision"], "main@sha1:bbb");
    }

    #[test]
    fn a_complete_phase_from_an_older_generation_is_not_complete() {
        let mut object = testing::syncgroup_json("web", "Complete", 10);
        object["status"]["observedGeneration"] = json!(1);
        assert_eq!(
            verdict(&RolloutView::from_object("default", "web", &object)),
            Verdict::Complete
        );
        object["metadata"]["generation"] = json!(2);
        assert_eq!(
            verdict(&RolloutView::from_object("default", "web", &object)),
            Verdict::Waiting
        );
    }

    #[test]
    fn a_group_without_status_reads_as_nothing_yet() {
        let object = json!({"metadata": {"name": "web"}, "spec": {}});
        let view = RolloutView::from_object("default", "web", &object);
        assert_eq!(
            view.line(false),
            "default/web - 0/0 (0%) updated, 0 in progress, 0 pending, 0 failed"
        );
        assert_eq!(verdict(&view), Verdict::Waiting);
        let json: Value =
            serde_json::from_str(&render(&view, ReportFormat::Json, false).unwrap()).unwrap();
        assert_eq!(json["phase"], Value::Null);
        assert_eq!(json["summary"]["total"], 0);
    }

    #[tokio::test]
    async fn pause_resume_and_status_over_the_wire() {
        let server = testing::serve().await;
        let client = Client::connect(&server).await.unwrap();
        assert_eq!(
            resume(&client, &target("canned")).await.unwrap(),
            "syncgroup.starling.dev/canned resumed\n"
        );
        let error = resume(&client, &target("web")).await.unwrap_err();
        assert_eq!(
            format!("{error:#}"),
            "not found: syncgroup default/web does not exist"
        );
        let error = pause(&client, &target("canned")).await.unwrap_err();
        assert_eq!(
            format!("{error:#}"),
            "no leader: cannot forward to the leader (leader is node 2 at 127.0.0.1:7402: retry with \
             --server 127.0.0.1:7402)"
        );
        let view = fetch(&client, &target("canned")).await.unwrap();
        assert_eq!(view.progress.updated, 4);
        assert_eq!(view.phase.as_deref(), Some("Progressing"));
    }
}

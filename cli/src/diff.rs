//! `starling diff`: what a new revision would do to every cluster a SyncGroup (or a Sync)
//! selects, before it merges: a summary (clusters unchanged, changed, with errors; objects to
//! create, update and prune), then one unified diff per group of clusters that would see the
//! identical change, with a few of their names and the count. Against the render of the
//! revision each cluster last applied and the inventory recorded on it: no target is
//! contacted and nothing is written. Secrets show as changed or not, never their values.
//!
//! Exit code, as `diff`'s: 0 when nothing would change, 1 when something would, 2 when the diff
//! could not run or a cluster could not be diffed (the render's message is shown).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use super::output::{OutputFormat, ReportFormat, emit};
use crate::client::{Client, ServerArgs, block_on};

/// What `--comment-file` holds at most: under GitHub's 65,536-character comment limit.
const MAX_COMMENT_BYTES: usize = 60_000;
/// How long the whole diff may take.
const DIFF_TIMEOUT: Duration = Duration::from_secs(600);

/// What is diffed.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiffKind {
    #[value(alias = "syncgroups")]
    Syncgroup,
    #[value(alias = "syncs")]
    Sync,
}

impl DiffKind {
    fn api_kind(self) -> &'static str {
        match self {
            DiffKind::Syncgroup => "SyncGroup",
            DiffKind::Sync => "Sync",
        }
    }
}

#[derive(clap::Args, Debug, Clone)]
#[command(group(
    clap::ArgGroup::new("new")
        .required(true)
        .args(["revision", "source_dir"])
))]
pub struct DiffArgs {
    /// `syncgroup` or `sync`.
    #[arg(value_enum)]
    pub kind: DiffKind,
    pub name: String,
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// The new revision of the Source's repository: a branch (`feature`, `refs/heads/x`), a
    /// tag (`refs/tags/v2`) or a full commit.
    #[arg(long, value_name = "REV")]
    pub revision: Option<String>,
    /// A checkout on the replica's machine (under its --diff-source-root), as a CI runner
    /// has it before pushing.
    #[arg(long, value_name = "DIR")]
    pub source_dir: Option<PathBuf>,
    /// Groups of identical change shown with their diffs (at most 1,000).
    #[arg(long, default_value_t = 20)]
    pub max_groups: u32,
    /// Also write a pull-request comment (Markdown: the summary and the first diffs, under
    /// 60,000 characters) to this file.
    #[arg(long, value_name = "FILE")]
    pub comment_file: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// How a diff came out: the process's exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Unchanged,
    Changed,
    /// Some cluster could not be diffed.
    Errors,
}

impl Verdict {
    pub fn of(summary: &proto::DiffSummary) -> Verdict {
        if summary.errors > 0 {
            Verdict::Errors
        } else if summary.changed > 0 {
            Verdict::Changed
        } else {
            Verdict::Unchanged
        }
    }

    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Unchanged => 0,
            Verdict::Changed => 1,
            Verdict::Errors => 2,
        }
    }
}

/// Runs the diff; the exit code (0, 1 or 2) after printing it, or 2 after the error.
pub fn main(args: DiffArgs) -> std::process::ExitCode {
    match run(args) {
        Ok(verdict) => std::process::ExitCode::from(verdict.exit_code()),
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::from(2)
        }
    }
}

pub fn run(args: DiffArgs) -> anyhow::Result<Verdict> {
    let format = ReportFormat::from_output(args.output, "starling diff")?;
    if args.max_groups == 0 || args.max_groups > 1000 {
        anyhow::bail!("--max-groups must be 1 to 1000 (got {})", args.max_groups);
    }
    let request = proto::DiffRequest {
        kind: args.kind.api_kind().to_owned(),
        namespace: args.namespace.clone(),
        name: args.name.clone(),
        revision: args.revision.clone().unwrap_or_default(),
        source_dir: args
            .source_dir
            .as_ref()
            .map(|dir| std::path::absolute(dir).unwrap_or_else(|_| dir.clone()))
            .map(|dir| dir.display().to_string())
            .unwrap_or_default(),
        max_groups: args.max_groups,
    };
    let show_progress = std::io::stderr().is_terminal();
    let result = block_on(async {
        let client = Client::connect(&args.server)
            .await?
            .with_timeout(DIFF_TIMEOUT);
        client
            .diff(request, |progress| {
                if show_progress {
                    eprint!("\rdiffing: {}/{} clusters", progress.done, progress.total);
                }
            })
            .await
    });
    if show_progress {
        eprint!("\r\x1b[K");
    }
    let result = result?;
    let summary = result.summary.unwrap_or_default();
    let target = format!("{} {}/{}", args.kind.api_kind(), args.namespace, args.name);
    if let Some(file) = &args.comment_file {
        std::fs::write(file, comment(&target, &result, &summary))
            .map_err(|error| anyhow::anyhow!("cannot write {}: {error}", file.display()))?;
    }
    let text = match format {
        ReportFormat::Json => format!("{:#}\n", to_json(&result, &summary)),
        ReportFormat::Text => text(&target, &result, &summary),
    };
    emit(&text)?;
    Ok(Verdict::of(&summary))
}

fn summary_line(summary: &proto::DiffSummary) -> String {
    format!(
        "{} clusters: {} unchanged, {} changed, {} with errors; objects: {} to create, {} to update, {} to prune{}",
        summary.clusters,
        summary.unchanged,
        summary.changed,
        summary.errors,
        summary.create,
        summary.update,
        summary.prune,
        match summary.orphan {
            0 => String::new(),
            n => format!(", {n} left in place (prune off)"),
        }
    )
}

fn clusters_of(group: &proto::DiffGroup) -> String {
    let more = group.count.saturating_sub(group.clusters.len() as u64);
    let mut names = group.clusters.join(", ");
    if more > 0 {
        names.push_str(&format!(" and {more} more"));
    }
    let noun = if group.count == 1 {
        "cluster"
    } else {
        "clusters"
    };
    format!("{} {noun} ({names})", group.count)
}

fn object_line(object: &proto::DiffObject) -> String {
    let at = match object.namespace.as_str() {
        "" => object.name.clone(),
        namespace => format!("{namespace}/{}", object.name),
    };
    let secret = if object.secret {
        " (a Secret: values not shown)"
    } else {
        ""
    };
    format!(
        "{} {} {} {at}{secret}",
        object.change, object.api_version, object.kind
    )
}

/// For people: the summary, then each group with its objects and diffs.
pub fn text(target: &str, result: &proto::DiffResult, summary: &proto::DiffSummary) -> String {
    let mut out = format!(
        "Diff of {target} at {}, against what each cluster last applied\n{}\n",
        result.revision,
        summary_line(summary)
    );
    for group in &result.groups {
        out.push('\n');
        if !group.error.is_empty() {
            out.push_str(&format!(
                "== {}: cannot diff\n{}\n",
                clusters_of(group),
                group.error
            ));
            continue;
        }
        out.push_str(&format!("== {}:\n", clusters_of(group)));
        for object in &group.objects {
            out.push_str(&format!("  {}\n", object_line(object)));
        }
        for object in group.objects.iter().filter(|o| !o.diff.is_empty()) {
            out.push_str(&object.diff);
            if !object.diff.ends_with('\n') {
                out.push('\n');
            }
        }
    }
    if result.groups_left_out > 0 {
        out.push_str(&format!(
            "\n({} more groups not shown: --max-groups)\n",
            result.groups_left_out
        ));
    }
    out
}

/// For machines: the result as JSON.
pub fn to_json(result: &proto::DiffResult, summary: &proto::DiffSummary) -> serde_json::Value {
    let groups: Vec<serde_json::Value> = result
        .groups
        .iter()
        .map(|group| {
            let objects: Vec<serde_json::Value> = group
                .objects
                .iter()
                .map(|o| {
                    json!({
                        "apiVersion": o.api_version, "kind": o.kind,
                        "namespace": (!o.namespace.is_empty()).then_some(&o.namespace),
                        "name": o.name, "change": o.change, "diff": o.diff, "secret": o.secret,
                    })
                })
                .collect();
            json!({
                "clusters": group.clusters, "count": group.count, "objects": objects,
                "error": (!group.error.is_empty()).then_some(&group.error),
            })
        })
        .collect();
    json!({
        "revision": result.revision,
        "summary": {
            "clusters": summary.clusters, "unchanged": summary.unchanged,
            "changed": summary.changed, "errors": summary.errors,
            "create": summary.create, "update": summary.update, "prune": summary.prune,
            "orphan": summary.orphan, "renders": summary.renders,
        },
        "groups": groups,
        "groupsLeftOut": result.groups_left_out,
    })
}

/// A pull-request comment: the summary and the first groups' diffs, bounded in size.
pub fn comment(target: &str, result: &proto::DiffResult, summary: &proto::DiffSummary) -> String {
    let mut out = format!(
        "### Starling diff: {target} at `{}`\n\n{}\n",
        result.revision,
        summary_line(summary)
    );
    let mut left_out = result.groups_left_out;
    for (index, group) in result.groups.iter().enumerate() {
        let mut section = format!("\n#### {}\n\n", clusters_of(group));
        if group.error.is_empty() {
            for object in &group.objects {
                section.push_str(&format!("- {}\n", object_line(object)));
            }
            let diffs: String = group.objects.iter().map(|o| o.diff.as_str()).collect();
            if !diffs.is_empty() {
                section.push_str(&format!("\n```diff\n{diffs}```\n"));
            }
        } else {
            section.push_str(&format!("Cannot diff:\n\n```\n{}\n```\n", group.error));
        }
        if out.len() + section.len() > MAX_COMMENT_BYTES {
            left_out += (result.groups.len() - index) as u64;
            break;
        }
        out.push_str(&section);
    }
    if left_out > 0 {
        out.push_str(&format!(
            "\n_{left_out} more groups not shown; run `starling diff` for all of them._\n"
        ));
    }
    out
}

#[cfg(test)]
mod tests;

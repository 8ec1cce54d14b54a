//! What the operator CLI prints, kept apart from what it asks: aligned tables in the style of
//! `kubectl get`, object names (`syncgroup.starling.dev/web`), rollout progress bars, short
//! revisions, JSON and YAML rendering, and writing to stdout.
//!
//! Every renderer here returns a `String`, so the commands' output is unit-tested without a
//! terminal; only [`emit`] touches stdout.

use std::io::{IsTerminal as _, Write as _};

use anyhow::Context as _;
use fleet::manifest::Kind;
use serde::Serialize;

/// Shown in a table cell whose field is unset.
pub const NONE: &str = "-";

/// `-o/--output`, one type for every command: the flag is global (accepted before or after the
/// subcommand, as `starling -o json status`), so clap hands the same value to whichever command
/// runs. Each command takes the formats it can print and refuses the others with one line.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    /// For people: aligned columns as `kubectl get`, or a report.
    #[value(alias = "table")]
    Text,
    Json,
    /// `starling get` only.
    Yaml,
    /// `kind.group/name`, one per line; `starling get` only.
    Name,
}

impl OutputFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            OutputFormat::Text => "text",
            OutputFormat::Json => "json",
            OutputFormat::Yaml => "yaml",
            OutputFormat::Name => "name",
        }
    }
}

/// Output formats of the reports (`status`, `members`, `rollout status`, `placement`,
/// `source resolve`, `dev`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportFormat {
    Text,
    Json,
}

impl ReportFormat {
    /// The report format `-o` asks for, or an error naming what `command` prints.
    pub fn from_output(output: OutputFormat, command: &str) -> anyhow::Result<ReportFormat> {
        match output {
            OutputFormat::Text => Ok(ReportFormat::Text),
            OutputFormat::Json => Ok(ReportFormat::Json),
            other => anyhow::bail!(
                "{command} prints text or json, not {} (-o text|json)",
                other.as_str()
            ),
        }
    }
}

/// The name of an object as kubectl prints it: `syncgroup.starling.dev/web`, `secret/web`.
pub fn object_name(kind: Kind, name: &str) -> String {
    let singular = kind.as_str().to_ascii_lowercase();
    match kind {
        Kind::Secret => format!("{singular}/{name}"),
        _ => format!("{singular}.{}/{name}", fleet::resources::GROUP),
    }
}

/// [`object_name`] for a kind the server spelled, which this CLI may not know (a newer server).
pub fn object_name_from(kind: &str, name: &str) -> String {
    match kind.parse::<Kind>() {
        Ok(kind) => object_name(kind, name),
        Err(_) => format!("{}/{name}", kind.to_ascii_lowercase()),
    }
}

/// Shortens the commit of a revision for a table: `main@sha1:0a1b2c3d4e5f6789…` becomes
/// `main@sha1:0a1b2c3d4e5f`. Anything else is kept as it is.
pub fn short_revision(revision: &str) -> String {
    const KEPT_HEX_DIGITS: usize = 12;
    match revision.split_once("@sha1:") {
        Some((reference, commit))
            if commit.len() > KEPT_HEX_DIGITS && commit.is_char_boundary(KEPT_HEX_DIGITS) =>
        {
            format!("{reference}@sha1:{}", &commit[..KEPT_HEX_DIGITS])
        }
        _ => revision.to_owned(),
    }
}

/// A table of text cells, printed with columns aligned and separated by three spaces, without
/// trailing whitespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<I, S>(headers: I) -> Table
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Table {
            headers: headers.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells print empty and extra cells are dropped.
    pub fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    pub fn render(&self) -> String {
        let columns = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut text = String::new();
        for line in std::iter::once(&self.headers).chain(&self.rows) {
            let mut rendered = String::new();
            for (index, width) in widths.iter().enumerate() {
                let cell = line.get(index).map(String::as_str).unwrap_or_default();
                rendered.push_str(cell);
                if index + 1 < columns {
                    let padding = width - cell.chars().count() + 3;
                    rendered.extend(std::iter::repeat_n(' ', padding));
                }
            }
            text.push_str(rendered.trim_end());
            text.push('\n');
        }
        text
    }
}

/// Counts of a rollout, as the bar draws them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    pub total: u32,
    pub updated: u32,
    pub in_progress: u32,
    pub failed: u32,
}

impl From<&proto::RolloutSummary> for Progress {
    fn from(summary: &proto::RolloutSummary) -> Progress {
        Progress {
            total: summary.total,
            updated: summary.updated,
            in_progress: summary.in_progress,
            failed: summary.failed,
        }
    }
}

/// A progress bar `width` cells wide between brackets: `#` updated, `x` failed, `>` in
/// progress, `-` pending. Counts over the total (a summary read mid-change) are clamped.
pub fn progress_bar(progress: Progress, width: usize) -> String {
    let total = u64::from(progress.total);
    let mut bar = String::with_capacity(width + 2);
    bar.push('[');
    if total == 0 {
        bar.extend(std::iter::repeat_n('-', width));
    } else {
        let mut drawn = 0;
        let mut cumulative = 0u64;
        for (count, glyph) in [
            (progress.updated, '#'),
            (progress.failed, 'x'),
            (progress.in_progress, '>'),
        ] {
            cumulative = (cumulative + u64::from(count)).min(total);
            // Cells up to the rounded cumulative boundary, so the segments always add up to
            // `width` and a full rollout fills the bar exactly.
            let boundary = ((cumulative * width as u64 + total / 2) / total) as usize;
            bar.extend(std::iter::repeat_n(glyph, boundary.saturating_sub(drawn)));
            drawn = drawn.max(boundary);
        }
        bar.extend(std::iter::repeat_n('-', width.saturating_sub(drawn)));
    }
    bar.push(']');
    bar
}

/// `updated/total (NN%)`.
pub fn progress_ratio(progress: Progress) -> String {
    let percent = (u64::from(progress.updated) * 100)
        .checked_div(u64::from(progress.total))
        .unwrap_or(0);
    format!("{}/{} ({percent}%)", progress.updated, progress.total)
}

/// Capitalises a state the server sends in lowercase (`live` → `Live`).
pub fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// How long ago, from milliseconds: `850ms`, `3.2s`, `4m`; [`NONE`] for 0 (unknown).
pub fn millis_ago(millis: u64) -> String {
    match millis {
        0 => NONE.to_owned(),
        1..1_000 => format!("{millis}ms"),
        1_000..60_000 => format!("{:.1}s", millis as f64 / 1_000.0),
        _ => format!("{}m", millis / 60_000),
    }
}

pub fn to_json<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<String> {
    let mut text = serde_json::to_string_pretty(value).context("cannot render json")?;
    text.push('\n');
    Ok(text)
}

pub fn to_yaml<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<String> {
    serde_yaml_ng::to_string(value).context("cannot render yaml")
}

/// Whether stdout is a terminal (progress bars, screen refresh) rather than a pipe or a file.
pub fn stdout_is_terminal() -> bool {
    std::io::stdout().is_terminal()
}

/// Writes to stdout. A closed pipe (`starling get … | head`) ends the output quietly.
pub fn emit(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(error) => Err(error).context("cannot write to stdout"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_take_text_or_json_and_name_the_command_otherwise() {
        let report = |output| ReportFormat::from_output(output, "starling status");
        assert_eq!(report(OutputFormat::Text).unwrap(), ReportFormat::Text);
        assert_eq!(report(OutputFormat::Json).unwrap(), ReportFormat::Json);
        assert_eq!(
            report(OutputFormat::Yaml).unwrap_err().to_string(),
            "starling status prints text or json, not yaml (-o text|json)"
        );
    }

    #[test]
    fn object_names_follow_kubectl() {
        assert_eq!(
            object_name(Kind::SyncGroup, "web"),
            "syncgroup.starling.dev/web"
        );
        assert_eq!(object_name(Kind::Source, "app"), "source.starling.dev/app");
        assert_eq!(object_name(Kind::Secret, "kc"), "secret/kc");
        assert_eq!(object_name_from("Cluster", "a"), "cluster.starling.dev/a");
        assert_eq!(object_name_from("Widget", "w"), "widget/w");
    }

    #[test]
    fn revisions_are_shortened_only_when_they_carry_a_long_commit() {
        let long = "main@sha1:0a1b2c3d4e5f60718293a4b5c6d7e8f901234567";
        assert_eq!(short_revision(long), "main@sha1:0a1b2c3d4e5f");
        assert_eq!(short_revision("v1.2.3@sha1:abc"), "v1.2.3@sha1:abc");
        assert_eq!(short_revision("main"), "main");
    }

    #[test]
    fn tables_align_columns_without_trailing_spaces() {
        let mut table = Table::new(["NAME", "URL", "READY"]);
        table.push(vec![
            "app".into(),
            "https://example.com/a.git".into(),
            "True".into(),
        ]);
        table.push(vec!["longer-name".into(), "-".into(), String::new()]);
        assert_eq!(
            table.render(),
            "NAME          URL                         READY\n\
             app           https://example.com/a.git   True\n\
             longer-name   -\n"
        );
    }

    #[test]
    fn short_rows_print_empty_cells() {
        let mut table = Table::new(["A", "B"]);
        table.push(vec!["x".into()]);
        assert_eq!(table.render(), "A   B\nx\n");
    }

    #[test]
    fn progress_bars_fill_by_state() {
        let progress = Progress {
            total: 10,
            updated: 4,
            in_progress: 2,
            failed: 1,
        };
        assert_eq!(progress_bar(progress, 10), "[####x>>---]");
        let done = Progress {
            total: 3,
            updated: 3,
            ..Progress::default()
        };
        assert_eq!(progress_bar(done, 20), format!("[{}]", "#".repeat(20)));
        assert_eq!(progress_bar(Progress::default(), 4), "[----]");
    }

    #[test]
    fn progress_bars_keep_their_width_with_odd_counts() {
        for total in 1..40u32 {
            for updated in 0..=total {
                let progress = Progress {
                    total,
                    updated,
                    in_progress: (total - updated) / 2,
                    failed: (total - updated) / 3,
                };
                let bar = progress_bar(progress, 17);
                assert_eq!(bar.chars().count(), 19, "{progress:?}: {bar}");
            }
        }
        let overfull = Progress {
            total: 2,
            updated: 5,
            in_progress: 5,
            failed: 5,
        };
        assert_eq!(progress_bar(overfull, 4), "[####]");
    }

    #[test]
    fn ratios_and_durations_read_well() {
        let progress = Progress {
            total: 3,
            updated: 1,
            ..Progress::default()
        };
        assert_eq!(progress_ratio(progress), "1/3 (33%)");
        assert_eq!(progress_ratio(Progress::default()), "0/0 (0%)");
        assert_eq!(millis_ago(0), "-");
        assert_eq!(millis_ago(850), "850ms");
        assert_eq!(millis_ago(3_240), "3.2s");
        assert_eq!(millis_ago(240_000), "4m");
        assert_eq!(capitalized("draining"), "Draining");
        assert_eq!(capitalized(""), "");
    }
}

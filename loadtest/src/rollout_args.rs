//! The flags of `loadtest rollout`, which the other benchmarks start from: a leaf module, so
//! that the rollout bench and the helpers it shares with the others (`fleet_rollout`) both
//! read it.

use std::time::Duration;

use starling_dev::Demo;

/// A `clap::Parser` too, so that `scale` can start from its defaults.
#[derive(clap::Parser, Debug)]
pub struct RolloutArgs {
    /// Simulated clusters.
    #[arg(long, default_value_t = 10_000)]
    pub clusters: usize,
    /// `starling node` processes.
    #[arg(long, default_value_t = 3)]
    pub nodes: u64,
    /// `--max-concurrent-syncs` of each node.
    #[arg(long, default_value_t = 64)]
    pub(crate) max_concurrent_syncs: usize,
    /// The SyncGroup's budget.
    #[arg(long, default_value = "10%")]
    pub(crate) max_unavailable: String,
    /// Latency fleetsim adds to every request.
    #[arg(long, default_value = "20ms", value_parser = humantime::parse_duration)]
    pub(crate) latency: Duration,
    /// Delay before fleetsim makes a workload ready.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub(crate) ready_delay: Duration,
    /// Upper bound on each rollout.
    #[arg(long, default_value = "15m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Where the JSON report and the SVG chart go (the global `--out`).
    #[arg(skip)]
    pub out: std::path::PathBuf,
    /// The report's name (`rollout`, or `scale`).
    #[arg(skip = "rollout")]
    pub bench: &'static str,
    /// Pull clusters beside the `clusters` push clusters, each with a `starling agent`
    /// process (set by the benches that take `--pull`).
    #[arg(skip)]
    pub pull: usize,
    /// How the demo app is rendered: plain YAML, its Helm chart (30 templates, values per
    /// region) or its Kustomize overlay (a generator, a patch, per-cluster substitution).
    #[arg(long, value_enum, default_value_t = Demo::Plain)]
    pub render: Demo,
    /// With `--render helm`: the chart's 27 extra config maps too (30 objects per cluster
    /// instead of the 3 every renderer gives by default).
    #[arg(long)]
    pub chart_extras: bool,
    /// Before the timed rollout, a commit outside every path the group renders (the
    /// mono-repository rule): the report gives the syncs it admitted and the writes it made to
    /// the targets (fleetsim's audit log), both to be 0, and the time until every cluster
    /// reports its revision.
    #[arg(long)]
    pub unrelated_commit: bool,
    /// Before the timed rollout, a generic Provider whose receiver accepts connections and
    /// never answers, and an Alert sending it every event of the namespace: the rollout's
    /// time, beside a run without it, shows that a hanging receiver does not slow syncing
    /// (issue 53: within 10%).
    #[arg(long)]
    pub hanging_alert: bool,
}

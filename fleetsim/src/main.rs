//! The `fleetsim` binary: serves N simulated clusters (HTTPS with a CA made for the run, unless
//! `--plain-http`) and prints one JSON line with its base URL and CA once ready, then runs until
//! interrupted.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use fleetsim::{AuditLevel, Config, FleetSim};

/// Simulated Kubernetes API servers for thousands of clusters.
#[derive(Debug, Parser)]
#[command(name = "fleetsim", version)]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "FLEETSIM_LISTEN", default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Number of clusters to create at start.
    #[arg(long, env = "FLEETSIM_CLUSTERS", default_value_t = 1)]
    clusters: usize,
    /// Cluster name prefix (names are PREFIX + zero-padded index).
    #[arg(long, env = "FLEETSIM_NAME_PREFIX", default_value = "c")]
    name_prefix: String,
    /// Delay before workloads become ready after a spec change.
    #[arg(long, env = "FLEETSIM_READY_DELAY", default_value = "2s", value_parser = humantime::parse_duration)]
    ready_delay: Duration,
    /// Latency added to every cluster request.
    #[arg(long, env = "FLEETSIM_LATENCY", default_value = "0s", value_parser = humantime::parse_duration)]
    latency: Duration,
    /// Write NAME.kubeconfig per cluster and all.kubeconfig into this directory.
    #[arg(long, env = "FLEETSIM_KUBECONFIG_DIR")]
    kubeconfig_dir: Option<PathBuf>,
    /// Watch events kept per cluster.
    #[arg(long, env = "FLEETSIM_WATCH_HISTORY", default_value_t = Config::default().watch_history)]
    watch_history: usize,
    /// Audit records kept in total.
    #[arg(long, env = "FLEETSIM_AUDIT_CAPACITY", default_value_t = Config::default().audit_capacity)]
    audit_capacity: usize,
    /// What audit records keep: Metadata, or Request to keep request bodies too (any case, as
    /// the Kubernetes audit policy spells them or in lowercase).
    #[arg(long, env = "FLEETSIM_AUDIT_LEVEL", value_enum, ignore_case = true, default_value_t = AuditLevel::Metadata)]
    audit_level: AuditLevel,
    /// Interval of watch bookmarks.
    #[arg(long, env = "FLEETSIM_BOOKMARK_INTERVAL", default_value = "30s", value_parser = humantime::parse_duration)]
    bookmark_interval: Duration,
    /// Serve plain HTTP instead of HTTPS (the kubeconfigs then carry no CA).
    #[arg(long, env = "FLEETSIM_PLAIN_HTTP")]
    plain_http: bool,
}

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let config = Config {
        listen: args.listen,
        clusters: args.clusters,
        name_prefix: args.name_prefix,
        ready_delay: args.ready_delay,
        latency: args.latency,
        watch_history: args.watch_history,
        audit_capacity: args.audit_capacity,
        audit_level: args.audit_level,
        bookmark_interval: args.bookmark_interval,
        tls: !args.plain_http,
        ..Config::default()
    };
    let sim = FleetSim::start(config).await.context("starting fleetsim")?;
    if let Some(dir) = &args.kubeconfig_dir {
        sim.write_kubeconfigs(dir)
            .with_context(|| format!("writing kubeconfigs to {}", dir.display()))?;
    }
    let ready = serde_json::json!({
        "base_url": sim.base_url(),
        "admin_url": sim.admin_url(),
        "clusters": sim.cluster_names().len(),
        "cluster_url_template": format!("{}/clusters/{{name}}", sim.base_url()),
        "kubeconfig_dir": args.kubeconfig_dir,
        "ca_pem": sim.ca_pem(),
    });
    println!("{ready}");
    tokio::signal::ctrl_c()
        .await
        .context("waiting for ctrl-c")?;
    sim.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory as _, Parser as _};

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn audit_levels_are_accepted_in_any_case() {
        for (spelling, level) in [
            ("Request", AuditLevel::Request),
            ("request", AuditLevel::Request),
            ("REQUEST", AuditLevel::Request),
            ("Metadata", AuditLevel::Metadata),
            ("metadata", AuditLevel::Metadata),
        ] {
            let args = Args::try_parse_from(["fleetsim", "--audit-level", spelling])
                .unwrap_or_else(|error| panic!("--audit-level {spelling}: {error}"));
            assert_eq!(args.audit_level, level, "{spelling}");
        }
        assert!(Args::try_parse_from(["fleetsim", "--audit-level", "RequestResponse"]).is_err());
    }
}

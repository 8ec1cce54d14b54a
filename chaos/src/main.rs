//! `chaos`: runs seeded fault schedules against real `starling node` processes and checks the
//! invariants after each. Exits non-zero when any schedule fails, after printing its seed, its
//! schedule and the evidence.

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};
use chaos::run::{Outcome, RunConfig, run};
use chaos::schedule::{Schedule, Shape};
use clap::Parser;
use futures::FutureExt as _;

#[derive(Parser, Debug)]
#[command(
    name = "chaos",
    about = "Fault schedules against real Starling replicas"
)]
struct Args {
    /// Schedules to run; schedule i uses seed `seed + i`.
    #[arg(long, default_value_t = 20)]
    schedules: u64,
    /// The first seed (default: drawn from the clock, and printed).
    #[arg(long)]
    seed: Option<u64>,
    /// The CI form: 100 clusters and 4 pull clusters, a 15 s fault window, 10 faults, 3
    /// replicas.
    #[arg(long)]
    short: bool,
    /// Replicas per schedule (3 or 5); default: 5 for every fourth seed, else 3.
    #[arg(long, value_parser = clap::value_parser!(u64).range(3..=5))]
    replicas: Option<u64>,
    /// Clusters at the start of each schedule (default 200, 100 with --short).
    #[arg(long)]
    clusters: Option<usize>,
    /// Pull clusters besides them, each with its own `starling agent` process (default 8, 4
    /// with --short).
    #[arg(long)]
    pull: Option<usize>,
    /// How long faults are injected (default 30s, 15s with --short).
    #[arg(long, value_parser = humantime::parse_duration)]
    window: Option<Duration>,
    /// Faults drawn per schedule (default 15, 10 with --short).
    #[arg(long)]
    faults: Option<usize>,
    /// The replicas' `--down-after`.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "3s")]
    down_after: Duration,
    /// The replicas' `--max-concurrent-syncs`.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// How long the healed fleet may take to converge.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "120s")]
    converge_timeout: Duration,
    /// Where the evidence of failed schedules is kept.
    #[arg(long, default_value = "target/chaos")]
    evidence: PathBuf,
    /// Stop at the first failed schedule.
    #[arg(long)]
    fail_fast: bool,
    /// Schedules run at once, each with its own replicas, fleet and git host, on its own
    /// thread. One schedule keeps about a fifth of a core busy, so `--jobs 4` suits 2 cores.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=16))]
    jobs: u64,
    /// Only print the schedules, run nothing.
    #[arg(long)]
    print: bool,
}

impl Args {
    fn shape(&self, seed: u64) -> Shape {
        let short = self.short;
        Shape {
            replicas: self
                .replicas
                .unwrap_or(if !short && seed.is_multiple_of(4) {
                    5
                } else {
                    3
                }),
            clusters: self.clusters.unwrap_or(if short { 100 } else { 200 }),
            window: self
                .window
                .unwrap_or(Duration::from_secs(if short { 15 } else { 30 })),
            faults: self.faults.unwrap_or(if short { 10 } else { 15 }),
            down_after: self.down_after,
            pull: self.pull.unwrap_or(if short { 4 } else { 8 }),
        }
    }
}

/// Builds the `starling` binary the schedules run, in this profile, when run through Cargo.
fn build_starling() -> anyhow::Result<()> {
    let Some(cargo) = std::env::var_os("CARGO") else {
        return Ok(());
    };
    if std::env::var_os("STARLING_BINARY").is_some() {
        return Ok(());
    }
    let mut command = std::process::Command::new(cargo);
    command.args(["build", "--quiet", "-p", "starling", "--bin", "starling"]);
    if !cfg!(debug_assertions) {
        command.arg("--release");
    }
    let status = command
        .status()
        .context("cannot run cargo to build starling")?;
    if !status.success() {
        bail!("building the starling binary failed");
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match schedules(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("chaos: {error:#}");
            ExitCode::from(2)
        }
    }
}

fn schedules(args: Args) -> anyhow::Result<bool> {
    let first = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() % 1_000_000)
            .unwrap_or(1)
    });
    if args.print {
        for seed in first..first + args.schedules {
            print!("{}", Schedule::generate(seed, args.shape(seed)));
        }
        return Ok(true);
    }
    build_starling()?;
    let binary = chaos::harness::binary();
    if !binary.is_file() {
        bail!(
            "no starling binary at {}: build it (cargo build -p starling) or set STARLING_BINARY",
            binary.display()
        );
    }
    let config = RunConfig {
        workers: args.workers,
        converge_timeout: args.converge_timeout,
        evidence_dir: args.evidence.clone(),
    };
    println!(
        "chaos: {} schedule(s) from seed {first} (replay one with --seed S --schedules 1{})",
        args.schedules,
        if args.short { " --short" } else { "" }
    );
    // Schedules side by side with --jobs, and a second installation beside a schedule's own
    // replicas (`Fault::Shadow`): groups never wait for each other here.
    chaos::harness::allow_concurrent_groups();
    let mut failed = Vec::new();
    let mut converged = Vec::new();
    let mut ran = 0;
    let next = AtomicU64::new(first);
    let stop = AtomicBool::new(false);
    let (verdicts, received) = std::sync::mpsc::channel();
    std::thread::scope(|scope| -> anyhow::Result<()> {
        for _ in 0..args.jobs {
            let verdicts = verdicts.clone();
            let (args, config, next, stop) = (&args, &config, &next, &stop);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .context("cannot start a runtime for a job")?;
            scope.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= first + args.schedules {
                        break;
                    }
                    let schedule = Schedule::generate(seed, args.shape(seed));
                    let verdict = runtime.block_on(run_one(&schedule, config));
                    if verdicts.send((schedule, verdict)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(verdicts);
        for (schedule, verdict) in received {
            ran += 1;
            let seed = schedule.seed;
            match verdict {
                Ok(outcome) if outcome.ok() => {
                    converged.extend(outcome.converged_after);
                    println!(
                        "seed {seed}: ok ({} replicas, {} faults) in {:.1}s, converged {:.1}s after healing",
                        schedule.shape.replicas,
                        schedule.steps.len(),
                        outcome.elapsed.as_secs_f64(),
                        outcome.converged_after.unwrap_or_default()
                    );
                }
                Ok(outcome) => {
                    println!("seed {seed}: VIOLATION\n{schedule}");
                    for check in outcome.checks.iter().filter(|c| !c.ok) {
                        println!("  [FAILED] {}: {}", check.name, check.detail);
                    }
                    if let Some(dir) = &outcome.evidence {
                        println!("  evidence: {}", dir.display());
                    }
                    failed.push(seed);
                }
                Err(error) => {
                    println!("seed {seed}: ERROR {error}\n{schedule}");
                    failed.push(seed);
                }
            }
            if args.fail_fast && !failed.is_empty() {
                stop.store(true, Ordering::Relaxed);
            }
        }
        Ok(())
    })?;
    failed.sort_unstable();
    converged.sort_by(f64::total_cmp);
    let slowest = converged.last().copied().unwrap_or_default();
    println!(
        "chaos: {} schedule(s) failed of {}; convergence after healing: median {:.1}s, slowest {:.1}s{}",
        failed.len(),
        ran,
        converged
            .get(converged.len() / 2)
            .copied()
            .unwrap_or_default(),
        slowest,
        if failed.is_empty() {
            String::new()
        } else {
            format!("; failed seeds {failed:?}")
        }
    );
    Ok(failed.is_empty())
}

/// Runs one schedule. A panic in the harness (a process that does not start) fails this
/// schedule only.
async fn run_one(schedule: &Schedule, config: &RunConfig) -> Result<Outcome, String> {
    match AssertUnwindSafe(run(schedule, config)).catch_unwind().await {
        Ok(Ok(outcome)) => Ok(outcome),
        Ok(Err(error)) => Err(format!("{error:#}")),
        Err(panic) => Err(format!(
            "the harness failed: {}",
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    }
}

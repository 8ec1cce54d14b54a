//! Figures for a large repository: 10,000 files and 50 MB of content, served by `git daemon`
//! on 127.0.0.1. Measures the first fetch into an empty mirror, an incremental fetch after a
//! commit that changes 10 files, resolving the branch, and building the artifact. The served
//! repository is packed first (`git repack -ad`), as a git host's would be.
//!
//! `cargo run --release -p source --example bench_repo [-- FILES TOTAL_MB]`

use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use source::{ArtifactStore, Auth, Limits, MirrorSet, RepoUrl, RevisionPolicy};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let whole = Instant::now();
    let files: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(10_000);
    let total_mb: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(50);
    let file_size = total_mb * 1024 * 1024 / files;

    let work = tempfile::tempdir()?;
    let repo = work.path().join("repo");
    std::fs::create_dir(&repo)?;
    git(&repo, &["init", "-q", "-b", "main"])?;
    let started = Instant::now();
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    for index in 0..files {
        let path = repo.join(format!(
            "team-{:02}/app-{:03}/manifest-{index:05}.yaml",
            index % 50,
            index % 997
        ));
        std::fs::create_dir_all(path.parent().context("a file has a parent")?)?;
        std::fs::write(&path, manifest(index, file_size, &mut rng))?;
    }
    git(&repo, &["add", "-A"])?;
    git(&repo, &["commit", "-q", "-m", "initial"])?;
    // Serve from a pack, as git hosts do: packing 10,000 loose objects on the first request
    // would otherwise cost the server far more than the client's fetch.
    git(&repo, &["repack", "-adq"])?;
    let pack = dir_size(&repo.join(".git"))?;
    println!(
        "repository: {files} files, {} MB of content, .git {:.1} MB (set up in {:.1}s)",
        total_mb,
        pack as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );

    let daemon = Daemon::start(work.path())?;
    let url = RepoUrl::parse(&format!("git://127.0.0.1:{}/repo", daemon.port))?;
    let node = tempfile::tempdir()?;
    let mirrors = MirrorSet::open(node.path().join("mirrors"))?;
    let store = ArtifactStore::open(node.path().join("artifacts"))?;
    let limits = Limits {
        fetch_timeout: Duration::from_secs(600),
        ..Limits::default()
    };
    let auth = Auth::anonymous();
    let policy = RevisionPolicy::branch("main")?;

    let (clone, report) =
        timed(|| mirrors.fetch_if_older_than(&url, &auth, Duration::ZERO, limits.fetch_timeout))?;
    let received = report.stats.map(|s| s.received_bytes).unwrap_or(0);
    println!(
        "first fetch (clone into an empty mirror): {:>8.3}s  ({:.1} MB received)",
        clone.as_secs_f64(),
        received as f64 / 1e6
    );
    let (cli_clone, _) = timed(|| {
        git(
            node.path(),
            &[
                "clone",
                "-q",
                "--mirror",
                url.redacted().as_str(),
                "cli-mirror",
            ],
        )
    })?;
    println!(
        "  for comparison, `git clone --mirror`:    {:>8.3}s",
        cli_clone.as_secs_f64()
    );

    for index in 0..10 {
        let path = repo.join(format!(
            "team-{:02}/app-{:03}/manifest-{index:05}.yaml",
            index % 50,
            index % 997
        ));
        let mut file = std::fs::OpenOptions::new().append(true).open(path)?;
        writeln!(file, "# changed")?;
    }
    git(&repo, &["commit", "-q", "-am", "change 10 files"])?;
    let (incremental, report) =
        timed(|| mirrors.fetch_if_older_than(&url, &auth, Duration::ZERO, limits.fetch_timeout))?;
    let received = report.stats.map(|s| s.received_bytes).unwrap_or(0);
    println!(
        "incremental fetch (10 files changed):      {:>8.3}s  ({:.1} KB received)",
        incremental.as_secs_f64(),
        received as f64 / 1e3
    );

    let (noop, _) =
        timed(|| mirrors.fetch_if_older_than(&url, &auth, Duration::ZERO, limits.fetch_timeout))?;
    println!(
        "fetch with nothing new:                    {:>8.3}s",
        noop.as_secs_f64()
    );

    let mirror = mirrors.mirror(&url);
    let (resolve, revision) = timed(|| mirror.resolve(&policy))?;
    println!(
        "resolve branch:                            {:>8.3}s  ({revision})",
        resolve.as_secs_f64()
    );

    let git_repo = mirror.open()?;
    let commit = revision.oid()?;
    let (build, summary) = timed(|| store.build_from_git(&git_repo, commit, None, &limits))?;
    println!(
        "build artifact:                            {:>8.3}s  ({} files, {:.1} MB tar.gz, {})",
        build.as_secs_f64(),
        summary.file_count,
        summary.size as f64 / 1e6,
        summary.digest
    );
    let (rebuild, again) = timed(|| store.build_from_git(&git_repo, commit, None, &limits))?;
    if again.digest != summary.digest {
        bail!(
            "the artifact is not deterministic: {} then {}",
            summary.digest,
            again.digest
        );
    }
    println!(
        "rebuild (same digest, nothing stored):     {:>8.3}s",
        rebuild.as_secs_f64()
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at the end: {}", load.trim());
    println!("total (with set-up): {:.1}s", whole.elapsed().as_secs_f64());
    Ok(())
}

fn timed<T, E: Into<anyhow::Error>>(
    f: impl FnOnce() -> Result<T, E>,
) -> anyhow::Result<(Duration, T)> {
    let started = Instant::now();
    let value = f().map_err(Into::into)?;
    Ok((started.elapsed(), value))
}

/// A YAML-ish file of `size` bytes whose values are pseudo-random hex (compresses about 2:1,
/// like real manifests with hashes and base64 in them).
fn manifest(index: usize, size: usize, rng: &mut u64) -> String {
    let mut text =
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: config-{index}\ndata:\n");
    let mut line = 0;
    while text.len() < size {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        text.push_str(&format!(
            "  key-{line}: \"{:016x}{:016x}\"\n",
            *rng,
            rng.rotate_left(29)
        ));
        line += 1;
    }
    text.truncate(size.max(1) - 1);
    text.push('\n');
    text
}

fn git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.invalid")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.invalid")
        .output()
        .with_context(|| format!("cannot run git {args:?}"))?;
    if !output.status.success() {
        bail!(
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

fn dir_size(dir: &Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let metadata = entry.metadata()?;
        total += if metadata.is_dir() {
            dir_size(&entry.path())?
        } else {
            metadata.len()
        };
    }
    Ok(total)
}

/// `git-daemon` on a free loopback port, killed on drop.
struct Daemon {
    child: Child,
    port: u16,
}

impl Daemon {
    fn start(base: &Path) -> anyhow::Result<Daemon> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let exec_path = git(base, &["--exec-path"])?;
        let child = Command::new(Path::new(&exec_path).join("git-daemon"))
            .args([
                "--reuseaddr".to_string(),
                format!("--base-path={}", base.display()),
                "--export-all".to_string(),
                "--listen=127.0.0.1".to_string(),
                format!("--port={port}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start git-daemon")?;
        let daemon = Daemon { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                bail!("git-daemon did not listen on port {port} within 10 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(daemon)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

//! `starling source resolve`: resolve a Source once, the way the owner node would, and print
//! its revision, artifact digest, size and file count. For operators debugging a source; it
//! needs no running installation.
//!
//! Credentials come from `--secret-dir`, a directory of files named like the keys of a Source's
//! Secret (`token`, `username`, `password`, `identity`, `known_hosts`), as a mounted Secret
//! is, so nothing secret is typed on the command line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::output::{OutputFormat, ReportFormat};

/// Inspect git sources.
#[derive(clap::Args, Debug)]
pub struct SourceArgs {
    #[command(subcommand)]
    command: SourceCommand,
}

#[derive(clap::Subcommand, Debug)]
enum SourceCommand {
    /// Fetch, resolve and package a source once; print revision, digest, size and file count.
    Resolve(ResolveArgs),
}

#[derive(clap::Args, Debug)]
struct ResolveArgs {
    /// Repository URL: https://, http://, ssh://, git://, file:// or user@host:path.
    #[arg(long)]
    url: String,

    #[command(flatten)]
    reference: ReferenceArgs,

    /// Also report the files under this directory of the tree (what a Sync would apply).
    #[arg(long)]
    path: Option<String>,

    /// Output format: text or json.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    output: OutputFormat,

    /// Keep the mirror and the artifact here for the next run (a temporary directory otherwise).
    #[arg(long, env = "STARLING_SOURCE_CACHE_DIR")]
    cache_dir: Option<PathBuf>,

    /// A directory of files named like Secret keys: token, username, password, identity,
    /// known_hosts.
    #[arg(long)]
    secret_dir: Option<PathBuf>,

    /// Time limit of the fetch, e.g. 30s or 2m. The global `--timeout` sets it too, so its
    /// type is the same as there (clap hands one value to both).
    #[arg(long, default_value = "60s", value_parser = parse_fetch_timeout)]
    timeout: std::time::Duration,

    /// Largest artifact (tar.gz) in bytes.
    #[arg(long)]
    max_artifact_bytes: Option<u64>,

    /// Most files in the artifact.
    #[arg(long)]
    max_files: Option<u64>,
}

/// Exactly one revision policy.
#[derive(clap::Args, Debug)]
#[group(required = true, multiple = false)]
struct ReferenceArgs {
    /// Follow the head of this branch.
    #[arg(long)]
    branch: Option<String>,
    /// Use this tag.
    #[arg(long)]
    tag: Option<String>,
    /// Use the highest tag matching this semver range, e.g. ">=1.2.0, <2".
    #[arg(long)]
    semver: Option<String>,
    /// Use this commit (40 hexadecimal digits).
    #[arg(long)]
    commit: Option<String>,
}

pub fn run(args: SourceArgs) -> anyhow::Result<()> {
    match args.command {
        SourceCommand::Resolve(args) => resolve(args),
    }
}

fn parse_fetch_timeout(text: &str) -> Result<std::time::Duration, String> {
    ::source::parse_duration(text).map_err(|error| error.to_string())
}

fn resolve(args: ResolveArgs) -> anyhow::Result<()> {
    // `source` errors already read as one line naming their input; keep them that way.
    let one_line = |error: ::source::SourceError| anyhow::anyhow!("{error}");
    let reference = &args.reference;
    let policy = ::source::RevisionPolicy::from_ref_fields(
        reference.branch.as_deref(),
        reference.tag.as_deref(),
        reference.semver.as_deref(),
        reference.commit.as_deref(),
    )
    .map_err(one_line)?;
    let auth = match &args.secret_dir {
        Some(dir) => {
            let data = read_secret_dir(dir)?
                .into_iter()
                .map(|(key, value)| (key, ::source::SecretBytes::from(value)))
                .collect();
            ::source::Auth::from_secret_data(&data).map_err(one_line)?
        }
        None => ::source::Auth::anonymous(),
    };
    let mut limits = ::source::Limits {
        fetch_timeout: args.timeout,
        ..::source::Limits::default()
    };
    if let Some(bytes) = args.max_artifact_bytes {
        limits.max_artifact_bytes = bytes;
    }
    if let Some(files) = args.max_files {
        limits.max_files = files;
    }
    let request = ::source::ResolveRequest {
        url: args.url.clone(),
        policy,
        auth,
        path: args.path.clone(),
        cache_dir: args.cache_dir.clone(),
        limits,
    };
    let report = ::source::resolve_once(&request).map_err(one_line)?;
    match ReportFormat::from_output(args.output, "starling source resolve")? {
        ReportFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        ReportFormat::Text => print!("{}", render_text(&report)),
    }
    Ok(())
}

fn render_text(report: &::source::ResolveReport) -> String {
    let mut text = format!(
        "url:       {}\nrevision:  {}\ndigest:    {}\nsize:      {} bytes\nfiles:     {} ({} bytes uncompressed)\n",
        report.url,
        report.revision,
        report.digest,
        report.size,
        report.file_count,
        report.content_bytes
    );
    if let Some(path) = &report.path {
        text.push_str(&format!(
            "path:      {}: {} files, {} bytes\n",
            path.path, path.file_count, path.content_bytes
        ));
    }
    text.push_str(&format!(
        "timing:    fetch {:.2}s, build {:.2}s\n",
        report.fetch_seconds, report.build_seconds
    ));
    text
}

/// Reads every regular file of `dir` as one Secret key (file name) and value (content).
fn read_secret_dir(dir: &Path) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
    let mut data = BTreeMap::new();
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read secret directory {}", dir.display()))?;
    for entry in entries {
        let entry =
            entry.with_context(|| format!("cannot read secret directory {}", dir.display()))?;
        let path = entry.path();
        // Mounted Secrets hold `..data` links and dot-directories; only plain keys count.
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !path.is_file() {
            continue;
        }
        let value = std::fs::read(&path)
            .with_context(|| format!("cannot read secret key file {}", path.display()))?;
        data.insert(name, value);
    }
    Ok(data)
}

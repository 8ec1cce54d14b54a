//! Disaster recovery from the command line (docs/disaster-recovery.md):
//!
//! - `starling export [-f FILE] --encrypt-to KEY | --unencrypted`: a consistent backup of the
//!   replicated state, a versioned header line and a snapshot, encrypted with age
//!   ([`crate::encryption`]) unless asked otherwise;
//! - `starling import FILE [--identity KEYFILE]`: loads it into a new standalone installation,
//!   with recovery on;
//! - `starling recover`: reads back from every target cluster what it holds (fence, inventory,
//!   applied revision; reads only), then lets the fleet roll out whatever differs.

use std::path::PathBuf;
use std::time::Duration;

use super::output::emit;
use crate::client::{Client, ServerArgs, block_on};

/// The least time limit of a backup's transfer, whatever `--timeout` says.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// Where to write the backup; `-` (the default) is standard output.
    #[arg(short = 'f', long = "file", default_value = "-")]
    pub file: String,
    /// Encrypt the backup (age) to this recipient: an `age1…` public key, or a file of them,
    /// or an identity file (`starling backup-key`, `age-keygen`). Repeatable.
    #[arg(long = "encrypt-to", value_name = "RECIPIENT")]
    pub encrypt_to: Vec<String>,
    /// Write the backup in clear: every kubeconfig, git token and Secret of the fleet, readable
    /// by whoever reads the file.
    #[arg(long, conflicts_with = "encrypt_to")]
    pub unencrypted: bool,
    #[command(flatten)]
    pub server: ServerArgs,
}

#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// A backup written by `starling export`.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The identity file (secret key) an encrypted backup was encrypted to. Repeatable.
    #[arg(long, value_name = "KEYFILE")]
    pub identity: Vec<PathBuf>,
    #[command(flatten)]
    pub server: ServerArgs,
}

#[derive(clap::Args, Debug)]
pub struct RecoverArgs {
    /// Target clusters read at once.
    #[arg(long, default_value_t = 64)]
    pub concurrency: u32,
    /// How long to wait for every Source to resolve before reading the targets.
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
    pub source_wait: Duration,
    /// How long the whole recovery may take.
    #[arg(long, default_value = "15m", value_parser = humantime::parse_duration)]
    pub wait: Duration,
    #[command(flatten)]
    pub server: ServerArgs,
}

pub fn export(args: ExportArgs) -> anyhow::Result<()> {
    let recipients = crate::encryption::recipients(&args.encrypt_to)?;
    if recipients.is_empty() && !args.unencrypted {
        anyhow::bail!(
            "a backup holds every kubeconfig, git token and Secret of the fleet: encrypt it with \
             --encrypt-to RECIPIENT (an age public key, age1…, or a file of them; `starling \
             backup-key FILE` makes a key pair), or write it in clear with --unencrypted"
        );
    }
    block_on(async {
        let client = Client::connect(&args.server).await?;
        let timeout = args.server.call_timeout().max(TRANSFER_TIMEOUT);
        let backup = client.with_timeout(timeout).export().await?;
        let backup = if recipients.is_empty() {
            eprintln!(
                "warning: this backup is not encrypted: it holds every kubeconfig, git token and \
                 Secret of the fleet in clear; keep it as you keep them"
            );
            backup
        } else {
            crate::encryption::encrypt(&backup, &recipients)?
        };
        if args.file == "-" {
            use std::io::Write as _;
            std::io::stdout().write_all(&backup)?;
            return Ok(());
        }
        // Written beside the target and renamed: a backup is never left half written. Readable
        // by this user only, encrypted or not.
        let path = PathBuf::from(&args.file);
        let partial = path.with_extension("partial");
        write_private(&partial, &backup)
            .map_err(|error| anyhow::anyhow!("cannot write {}: {error}", partial.display()))?;
        std::fs::rename(&partial, &path)
            .map_err(|error| anyhow::anyhow!("cannot write {}: {error}", path.display()))?;
        eprintln!(
            "backup written to {} ({} bytes, {})",
            path.display(),
            backup.len(),
            if recipients.is_empty() {
                "not encrypted".to_string()
            } else {
                format!("encrypted to {} recipients", recipients.len())
            }
        );
        Ok(())
    })
}

/// Writes `bytes` to a new file of mode 0600 (replacing one left by an earlier attempt).
fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

pub fn import(args: ImportArgs) -> anyhow::Result<()> {
    block_on(async {
        let backup = std::fs::read(&args.file)
            .map_err(|error| anyhow::anyhow!("cannot read {}: {error}", args.file.display()))?;
        let backup = if crate::encryption::is_encrypted(&backup) {
            crate::encryption::decrypt(&backup, &args.identity, &args.file)?
        } else {
            backup
        };
        let client = Client::connect(&args.server).await?;
        let timeout = args.server.call_timeout().max(TRANSFER_TIMEOUT);
        let reply = client.with_timeout(timeout).import(backup).await?;
        emit(&format!(
            "imported {} and {} from a backup at state revision {}\nrecovery is on: nothing rolls out until `starling recover` has read the target clusters\n",
            plural(reply.objects as usize, "object", "objects"),
            plural(
                reply.histories as usize,
                "rollout history",
                "rollout histories"
            ),
            reply.backup_revision
        ))
    })
}

pub fn recover(args: RecoverArgs) -> anyhow::Result<()> {
    block_on(async {
        let client = Client::connect(&args.server).await?;
        let reply = client
            .with_timeout(args.wait)
            .recover(proto::RecoverRequest {
                concurrency: args.concurrency,
                source_wait_seconds: args.source_wait.as_secs().max(1) as u32,
            })
            .await?;
        emit(&recovered(&reply))
    })
}

/// `1 object`, `2 objects`.
fn plural(count: usize, one: &str, many: &str) -> String {
    format!("{count} {}", if count == 1 { one } else { many })
}

fn recovered(reply: &proto::RecoverResponse) -> String {
    let mut text = format!(
        "recovered {}: {} already at their desired revision (nothing to write), {} to roll out, {} without an inventory on their target\nowner generations continue above the highest fence found ({})\n",
        plural(reply.clusters as usize, "cluster", "clusters"),
        plural(reply.current as usize, "sync", "syncs"),
        reply.rolling_out,
        reply.without_mirror,
        reply.highest_fence
    );
    if reply.pending > 0 {
        text.push_str(&format!(
            "{} could not be read now and {} RecoveryPending: nothing is written to them until their owner reads them back, which it keeps trying; the rest of the fleet rolls on\n",
            plural(reply.pending as usize, "cluster", "clusters"),
            if reply.pending == 1 { "is" } else { "are" }
        ));
        for reason in &reply.pending_reasons {
            text.push_str(&format!("  {reason}\n"));
        }
    }
    if !reply.unresolved_sources.is_empty() {
        text.push_str(&format!(
            "sources without a revision yet (their syncs roll out once they resolve): {}\n",
            reply.unresolved_sources.join(", ")
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::testing;

    #[tokio::test]
    async fn backups_stream_both_ways_and_failures_say_why() {
        let server = testing::serve().await;
        let client = Client::connect(&server).await.unwrap();
        let backup = client.export().await.unwrap();
        assert_eq!(backup, b"{\"kind\":\"StarlingExport\"}\n{}");
        // Larger than one chunk: every byte arrives.
        let big = vec![b'x'; (1 << 20) + 5];
        let reply = client.import(big).await.unwrap();
        assert_eq!(reply.objects as usize, (1 << 20) + 5);
        let error = client
            .recover(proto::RecoverRequest::default())
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("could not be read"), "{error}");
    }

    #[test]
    fn the_summary_says_what_recovery_found() {
        let text = recovered(&proto::RecoverResponse {
            clusters: 3,
            current: 2,
            rolling_out: 1,
            without_mirror: 0,
            highest_fence: 4,
            unresolved_sources: vec!["default/apps".into()],
            revision: 9,
            pending: 1,
            pending_reasons: vec!["default/edge-1: unreachable".into()],
        });
        assert!(text.ends_with('\n'), "{text:?}");
        assert!(
            text.contains("1 cluster could not be read now and is RecoveryPending"),
            "{text}"
        );
        assert!(
            text.contains("recovered 3 clusters: 2 syncs already"),
            "{text}"
        );
        assert!(text.contains("highest fence found (4)"), "{text}");
        assert!(text.contains("default/apps"), "{text}");
    }
}

//! Data at rest (issue 32, part 5): a replica's data directory holds every kubeconfig and git
//! token of the fleet, and so does a backup. Both are readable by their owner only: the data
//! directory and everything in it 0700/0600, `starling export` 0600.

mod harness;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use harness::{Group, Options, fleet_manifests};

/// Every entry below `dir` (itself included) that others may read, with its mode.
fn readable_by_others(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            found.push(format!("{} {mode:o}", path.display()));
        }
        if meta.is_dir()
            && let Ok(entries) = std::fs::read_dir(&path)
        {
            pending.extend(entries.flatten().map(|entry| entry.path()));
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_directory_and_backups_are_readable_by_their_owner_only() {
    let group = Group::start(1, Options::default()).await;
    group
        .apply(1, &fleet_manifests(3))
        .await
        .expect("the specs apply");
    let secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: git-token}\nstringData: {token: not-for-others}\n";
    group.apply(1, secret).await.expect("a Secret applies");

    let backups = tempfile::tempdir().expect("temp dir");
    let backup = backups.path().join("backup");
    group.cli(&["export", "-f", backup.to_str().expect("utf-8 path")]);
    let mode = std::fs::metadata(&backup)
        .expect("the backup exists")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600, "the backup's mode is {mode:o}");

    let data_dir = group.nodes[&1].data_dir.clone();
    let open = readable_by_others(&data_dir);
    assert!(open.is_empty(), "readable by others: {open:#?}");
}

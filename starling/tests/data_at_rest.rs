//! Data at rest (issue 32, part 5): a replica's data directory holds every kubeconfig and git
//! token of the fleet, and so does a backup. Both are readable by their owner only: the data
//! directory and everything in it 0700/0600, `starling export` 0600. A backup is encrypted
//! (age, `--encrypt-to`) unless `--unencrypted` says otherwise.

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
    let path = |name: &str| backups.path().join(name).to_str().unwrap().to_owned();
    let mode = |file: &str| {
        std::fs::metadata(file)
            .expect("the backup exists")
            .permissions()
            .mode()
            & 0o777
    };
    let contains = |file: &str, text: &str| {
        let bytes = std::fs::read(file).expect("read the backup");
        bytes.windows(text.len()).any(|w| w == text.as_bytes())
    };

    // Neither encrypted nor said to be in clear: refused, saying how.
    let refused = group.cli_output(&["export", "-f", &path("nothing")]);
    assert!(!refused.status.success());
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(
        message.contains("--encrypt-to RECIPIENT") && message.contains("--unencrypted"),
        "{message}"
    );
    assert!(!backups.path().join("nothing").exists());

    // Encrypted to a backup key: no Secret value in it, 0600.
    let key = path("backup.key");
    let public = group.cli(&["backup-key", &key]);
    let public = public.lines().next().expect("the public key").to_owned();
    assert!(public.starts_with("age1"), "{public}");
    assert_eq!(mode(&key), 0o600);
    let sealed = path("sealed");
    group.cli(&["export", "--encrypt-to", &public, "-f", &sealed]);
    assert_eq!(mode(&sealed), 0o600, "the backup's mode");
    assert!(contains(&sealed, "age-encryption.org/v1"));
    assert!(!contains(&sealed, "git-token"), "names are encrypted too");
    // Reading it needs the key.
    let unreadable = group.cli_output(&["import", &sealed]);
    let message = String::from_utf8_lossy(&unreadable.stderr);
    assert!(
        !unreadable.status.success() && message.contains("--identity FILE"),
        "{message}"
    );
    let other_key = path("other.key");
    group.cli(&["backup-key", &other_key]);
    let wrong = group.cli_output(&["import", "--identity", &other_key, &sealed]);
    let message = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        !wrong.status.success() && message.contains("none of the identities"),
        "{message}"
    );

    // In clear when asked, with a warning; still 0600.
    let clear = path("clear");
    let written = group.cli_output(&["export", "--unencrypted", "-f", &clear]);
    assert!(written.status.success());
    let warning = String::from_utf8_lossy(&written.stderr);
    assert!(warning.contains("not encrypted"), "{warning}");
    assert_eq!(mode(&clear), 0o600, "the backup's mode");
    assert!(contains(&clear, "git-token"));

    let data_dir = group.nodes[&1].data_dir.clone();
    let open = readable_by_others(&data_dir);
    assert!(open.is_empty(), "readable by others: {open:#?}");
}

/// Per-namespace quotas (issue 32, part 5): a tenant cannot fill every replica's memory. Past
/// `--quota-objects` or `--quota-bytes` a write is refused with a message naming the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_past_its_quota_is_refused_with_a_clear_message() {
    let group = Group::start(
        1,
        Options {
            extra_args: vec!["--quota-objects=3".into(), "--quota-bytes=8Ki".into()],
            ..Options::default()
        },
    )
    .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let apply = |name: &str, namespace: &str, bytes: usize| {
        let file = dir.path().join(format!("{namespace}-{name}.yaml"));
        std::fs::write(
            &file,
            format!(
                "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {namespace}}}\nstringData: {{value: \"{}\"}}\n",
                "x".repeat(bytes)
            ),
        )
        .expect("write the manifest");
        group.cli_output(&["apply", "-f", file.to_str().expect("utf-8 path")])
    };
    for name in ["a", "b", "c"] {
        let output = apply(name, "team-a", 1000);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let refused = apply("d", "team-a", 10);
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && message.contains("namespace team-a is at its quota of 3 objects")
            && message.contains("--quota-objects"),
        "{message}"
    );
    // Another namespace has room of its own, but not for more bytes than its quota.
    let other = apply("d", "team-b", 10);
    assert!(other.status.success());
    let large = apply("large", "team-b", 9 * 1024);
    let message = String::from_utf8_lossy(&large.stderr);
    assert!(
        !large.status.success()
            && message.contains("over its quota of 8.0 KiB")
            && message.contains("--quota-bytes"),
        "{message}"
    );
    // Deleting makes room again.
    let deleted = group.cli_output(&["delete", "secret", "a", "-n", "team-a"]);
    assert!(
        deleted.status.success(),
        "{}",
        String::from_utf8_lossy(&deleted.stderr)
    );
    let again = apply("d", "team-a", 10);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

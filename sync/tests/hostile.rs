//! Hostile and broken input to the render and to kubeconfig handling, one test per input: each is
//! refused with a clear, lowercase message naming what is wrong, quickly, without a panic or an
//! unbounded allocation. Artifacts come from a git repository anyone with push access shapes;
//! kubeconfigs come from Secrets written through the API.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;
use fleet::vars::ClusterContext;
use starling_sync::client::{config_from_kubeconfig, kubeconfig_from_secret};
use starling_sync::render::{MAX_VISIBLE_MANIFESTS, render};
use starling_sync::{ArtifactSource, ErrorClass, RenderOptions};

const GENEROUS: Duration = Duration::from_secs(10);

/// Runs `work` on its own thread and fails the test if it takes longer than `limit`.
fn within<T: Send + 'static>(limit: Duration, work: impl FnOnce() -> T + Send + 'static) -> T {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(work());
    });
    match receiver.recv_timeout(limit) {
        Ok(result) => result,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("did not finish within {limit:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the work panicked"),
    }
}

enum Entry<'a> {
    File(&'a str, &'a [u8]),
    Link(&'a str, &'a str),
    /// A file whose header announces `size` bytes but holds none (the archive ends there).
    Announced(&'a str, u64),
}

/// A tar.gz with the entries in order. Names are written into the header as raw bytes, so that
/// an archive can hold what a well-behaved writer refuses to write (`../x`, `/etc/x`).
fn archive(entries: &[Entry<'_>]) -> Bytes {
    let mut builder = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
    for entry in entries {
        let mut header = tar::Header::new_old();
        let (name, size, data): (&str, u64, &[u8]) = match entry {
            Entry::File(name, data) => {
                header.set_entry_type(tar::EntryType::Regular);
                (name, data.len() as u64, data)
            }
            Entry::Link(name, target) => {
                header.set_entry_type(tar::EntryType::Symlink);
                let link = &mut header.as_old_mut().linkname;
                link[..target.len()].copy_from_slice(target.as_bytes());
                (name, 0, &[])
            }
            Entry::Announced(name, size) => {
                header.set_entry_type(tar::EntryType::Regular);
                (name, *size, &[])
            }
        };
        header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        header.set_size(size);
        header.set_mode(0o644);
        header.set_cksum();
        if let Entry::Announced(..) = entry {
            // The header alone: the archive ends where the announced content would start.
            builder
                .get_mut()
                .write_all(header.as_bytes())
                .expect("write header");
            continue;
        }
        builder.append(&header, data).expect("append");
    }
    let encoder = builder.into_inner().expect("finish tar");
    Bytes::from(encoder.finish().expect("finish gzip"))
}

fn options() -> RenderOptions {
    RenderOptions {
        cluster: ClusterContext {
            name: "edge-1".into(),
            namespace: "fleet".into(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
        },
        ..RenderOptions::default()
    }
}

/// The message of a render of `bytes` that must fail, within the time limit.
fn render_error(bytes: Bytes, options: RenderOptions) -> String {
    within(GENEROUS, move || {
        match render(&ArtifactSource::ArchiveBytes(bytes), &options) {
            Ok(objects) => panic!("rendered hostile input: {} objects", objects.objects.len()),
            Err(error) => error.to_string(),
        }
    })
}

fn assert_contains(message: &str, fragments: &[&str]) {
    for fragment in fragments {
        assert!(
            message.contains(fragment),
            "message {:?} lacks {fragment:?}",
            message.chars().take(400).collect::<String>()
        );
    }
}

const CONFIG_MAP: &[u8] = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n";

// ---------------------------------------------------------------------------------------------
// Archives
// ---------------------------------------------------------------------------------------------

#[test]
fn an_archive_entry_with_dot_dot_is_refused() {
    let bytes = archive(&[Entry::File("../escape.yaml", CONFIG_MAP)]);
    let message = render_error(bytes, options());
    assert_contains(&message, &["entry ../escape.yaml leaves the archive"]);
}

#[test]
fn an_archive_entry_with_an_absolute_path_is_refused() {
    let bytes = archive(&[Entry::File("/etc/cron.d/x.yaml", CONFIG_MAP)]);
    let message = render_error(bytes, options());
    assert_contains(&message, &["entry /etc/cron.d/x.yaml leaves the archive"]);
}

#[test]
fn a_symlink_in_an_archive_to_an_absolute_path_is_refused() {
    let bytes = archive(&[Entry::Link("app/passwd.yaml", "/etc/passwd")]);
    let message = render_error(bytes, options());
    assert_contains(&message, &["app/passwd.yaml", "points outside the tree"]);
}

#[test]
fn symlinks_that_loop_into_their_own_directory_are_refused_quickly() {
    // Each link doubles the visible paths at every round: 2^40 without a bound.
    let bytes = archive(&[
        Entry::File("app/cm.yaml", CONFIG_MAP),
        Entry::Link("app/a", "."),
        Entry::Link("app/b", "."),
    ]);
    let message = render_error(bytes, options());
    assert_contains(
        &message,
        &[
            &format!("symlinks make more than {MAX_VISIBLE_MANIFESTS} manifest paths visible"),
            "may form a loop",
        ],
    );
}

#[test]
fn a_manifest_announcing_a_gigabyte_is_refused_before_it_is_decompressed() {
    // A gzip bomb: the header is checked first, so not one byte of it is inflated.
    let bytes = archive(&[Entry::Announced("app/bomb.yaml", 1 << 30)]);
    let message = render_error(bytes, options());
    assert_contains(
        &message,
        &["file app/bomb.yaml has 1073741824 bytes, more than the limit of 16777216"],
    );
}

#[test]
fn a_manifest_that_is_not_utf8_is_refused_by_name() {
    let bytes = archive(&[Entry::File("app/latin1.yaml", b"name: caf\xe9\n")]);
    let message = render_error(bytes, options());
    assert_contains(
        &message,
        &["cannot read app/latin1.yaml: file is not valid utf-8"],
    );
}

#[test]
fn bytes_that_are_not_a_gzip_archive_are_refused() {
    let bytes = Bytes::from_static(b"<html>502 bad gateway</html>");
    let message = render_error(bytes, options());
    assert_contains(&message, &["cannot read artifact of 28 bytes"]);
}

#[test]
fn a_truncated_archive_is_refused() {
    let whole = archive(&[Entry::File("app/cm.yaml", CONFIG_MAP)]);
    let bytes = whole.slice(..whole.len() / 2);
    let message = render_error(bytes, options());
    assert_contains(&message, &["cannot read artifact of"]);
}

#[test]
fn a_sync_path_with_dot_dot_is_refused() {
    let bytes = archive(&[Entry::File("app/cm.yaml", CONFIG_MAP)]);
    let options = RenderOptions {
        path: Some("app/../../etc".into()),
        ..options()
    };
    let message = render_error(bytes, options);
    assert_contains(
        &message,
        &["invalid path \"app/../../etc\": it must not contain '..'"],
    );
}

// ---------------------------------------------------------------------------------------------
// Manifests inside artifacts
// ---------------------------------------------------------------------------------------------

#[test]
fn a_yaml_alias_bomb_in_a_manifest_is_refused_quickly() {
    let mut text = String::from("a: &a [x,x,x,x,x,x,x,x,x]\n");
    let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
    for pair in names.windows(2) {
        let aliases = vec![format!("*{}", pair[0]); 9].join(",");
        text.push_str(&format!("{}: &{} [{aliases}]\n", pair[1], pair[1]));
    }
    let bytes = archive(&[Entry::File("app/bomb.yaml", text.as_bytes())]);
    let message = render_error(bytes, options());
    assert_contains(
        &message,
        &[
            "app/bomb.yaml, document 1: invalid yaml",
            "repetition limit",
        ],
    );
}

#[test]
fn a_manifest_nested_10000_levels_deep_is_refused() {
    let text = format!("a: {}x{}", "[".repeat(10_000), "]".repeat(10_000));
    let bytes = archive(&[Entry::File("app/deep.yaml", text.as_bytes())]);
    let message = render_error(bytes, options());
    assert_contains(
        &message,
        &["app/deep.yaml, document 1: invalid yaml", "recursion limit"],
    );
}

#[test]
fn an_unterminated_variable_in_a_manifest_names_file_and_line() {
    let text = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  x: ${REPLICAS\n";
    let bytes = archive(&[Entry::File("app/cm.yaml", text)]);
    let message = render_error(bytes, options());
    assert_contains(
        &message,
        &["app/cm.yaml, document 1: unterminated variable reference at line 6"],
    );
}

#[test]
fn a_variable_used_to_multiply_a_manifest_past_the_limit_is_refused() {
    // A 1 MiB variable used 100,000 times in a 600 KB manifest: 100 GiB once substituted.
    let text = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  x: \"{}\"\n",
        "${BIG}".repeat(100_000)
    );
    let bytes = archive(&[Entry::File("app/cm.yaml", text.as_bytes())]);
    let options = RenderOptions {
        variables: BTreeMap::from([("BIG".to_owned(), "x".repeat(1024 * 1024))]),
        ..options()
    };
    let message = render_error(bytes, options);
    assert_contains(
        &message,
        &[
            "app/cm.yaml, document 1: the text is too large after substitution",
            "over the limit of 16777216 bytes",
        ],
    );
}

#[test]
fn a_manifest_document_that_is_a_scalar_is_refused() {
    let bytes = archive(&[Entry::File("app/x.yaml", b"---\njust a string\n")]);
    let message = render_error(bytes, options());
    assert_contains(
        &message,
        &["app/x.yaml, document 1: the document is not an object"],
    );
}

#[test]
fn a_manifest_with_a_duplicate_key_is_refused_not_silently_merged() {
    // `replicas` twice: the first value would be dropped without a word.
    let text = b"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 3\n  replicas: 300\n";
    let bytes = archive(&[Entry::File("app/web.yaml", text)]);
    let message = render_error(bytes, options());
    assert_contains(
        &message,
        &[
            "app/web.yaml, document 1: invalid yaml",
            "duplicate key \"replicas\"",
        ],
    );
}

#[test]
fn a_json_manifest_with_a_duplicate_key_is_refused() {
    let text = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","name":"b"}}"#;
    let bytes = archive(&[Entry::File("app/cm.json", text)]);
    let message = render_error(bytes, options());
    assert_contains(
        &message,
        &[
            "app/cm.json, document 1: invalid json",
            "duplicate key \"name\"",
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// Kubeconfigs from Secrets
// ---------------------------------------------------------------------------------------------

const KUBECONFIG_HEAD: &str = "apiVersion: v1\nkind: Config\ncurrent-context: edge\nclusters:\n- name: edge\n  cluster:\n    server: https://10.0.0.1:6443\ncontexts:\n- name: edge\n  context:\n    cluster: edge\n    user: admin\nusers:\n- name: admin\n  user:\n";

async fn kubeconfig_error(text: &str) -> starling_sync::SyncError {
    let text = text.to_owned();
    tokio::time::timeout(GENEROUS, async move {
        config_from_kubeconfig(
            "edge",
            "secret default/edge-kubeconfig key \"value\"",
            &text.into(),
        )
        .await
    })
    .await
    .expect("finishes within the limit")
    .expect_err("the kubeconfig is refused")
}

#[tokio::test]
async fn a_kubeconfig_with_an_auth_provider_plugin_is_refused() {
    let text = format!(
        "{KUBECONFIG_HEAD}    auth-provider:\n      name: gcp\n      config:\n        cmd-path: /bin/sh\n"
    );
    let error = kubeconfig_error(&text).await;
    assert_eq!(error.class(), ErrorClass::Invalid);
    assert_eq!(
        error.to_string(),
        "invalid kubeconfig for cluster edge: secret default/edge-kubeconfig key \"value\" uses auth-provider plugins (users[0]), which are not allowed: use inline data"
    );
}

#[tokio::test]
async fn a_kubeconfig_with_an_exec_plugin_is_refused_before_anything_runs() {
    let marker = std::env::temp_dir().join(format!("starling-exec-{}", std::process::id()));
    let text = format!(
        "{KUBECONFIG_HEAD}    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: touch\n      args: [{}]\n",
        marker.display()
    );
    let error = kubeconfig_error(&text).await;
    assert!(
        error
            .to_string()
            .contains("uses exec plugins (users[0]), which are not allowed"),
        "{error}"
    );
    assert!(!marker.exists(), "the plugin must not have run");
}

#[tokio::test]
async fn a_kubeconfig_that_is_not_yaml_is_refused() {
    let error = kubeconfig_error("\t{{{ not: yaml").await;
    assert!(
        error
            .to_string()
            .starts_with("invalid kubeconfig for cluster edge: secret default/edge-kubeconfig key \"value\" is not a valid kubeconfig: a yaml error"),
        "{error}"
    );
}

#[tokio::test]
async fn a_kubeconfig_alias_bomb_is_refused_quickly() {
    let mut text = String::from("a: &a [x,x,x,x,x,x,x,x,x]\n");
    let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
    for pair in names.windows(2) {
        let aliases = vec![format!("*{}", pair[0]); 9].join(",");
        text.push_str(&format!("{}: &{} [{aliases}]\n", pair[1], pair[1]));
    }
    let error = kubeconfig_error(&text).await;
    assert!(
        error
            .to_string()
            .starts_with("invalid kubeconfig for cluster edge: secret default/edge-kubeconfig key \"value\" is not a valid kubeconfig: a yaml error"),
        "{error}"
    );
}

#[tokio::test]
async fn a_kubeconfig_whose_current_context_does_not_exist_is_refused() {
    let text = format!("{KUBECONFIG_HEAD}    token: t\n")
        .replace("current-context: edge", "current-context: elsewhere");
    let error = kubeconfig_error(&text).await;
    assert!(
        error
            .to_string()
            .starts_with("invalid kubeconfig for cluster edge:")
            && error
                .to_string()
                .contains("names a current-context that none of its contexts defines")
            // The name comes from the secret, so it is not quoted.
            && !error.to_string().contains("elsewhere"),
        "{error}"
    );
}

#[tokio::test]
async fn a_kubeconfig_without_contexts_or_current_context_is_refused() {
    let text = "apiVersion: v1\nkind: Config\nclusters:\n- name: edge\n  cluster:\n    server: https://10.0.0.1:6443\n";
    let error = kubeconfig_error(text).await;
    assert_eq!(error.class(), ErrorClass::Invalid);
    assert!(
        error
            .to_string()
            .starts_with("invalid kubeconfig for cluster edge:"),
        "{error}"
    );
}

#[test]
fn a_kubeconfig_secret_value_that_is_not_utf8_is_refused() {
    let data = BTreeMap::from([(
        "value".to_owned(),
        starling_sync::SecretBytes::from(vec![0xff, 0xfe, 0x00, 0x41]),
    )]);
    let error = kubeconfig_from_secret("edge", "default/edge-kubeconfig", &data, None).unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid kubeconfig for cluster edge: key \"value\" of secret default/edge-kubeconfig is not utf-8 text"
    );
}

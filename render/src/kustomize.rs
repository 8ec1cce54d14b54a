//! Kustomize: kustomize's own build (`kubectl kustomize`, kustomize v5 built in), run out of
//! process with the render limits, so that what a cluster gets is exactly what `kubectl
//! kustomize` prints.
//!
//! ```text
//! tree on disk ─► walk every kustomization reachable from the path:
//!                   an entry (resources, bases, components, generators, transformers,
//!                   validators) that is a URL ─► refused, nothing runs
//!                   a local entry that leaves the source tree ─► refused
//!              ─► kubectl kustomize <root>/<path>  (no kubeconfig, scrubbed environment,
//!                                                   time, memory and output limits)
//!              ─► YAML text, or kustomize's error with the scratch directory taken out
//! ```
//!
//! kubectl is found by [`find_kubectl`]: the configured path, then `STARLING_KUBECTL`, then
//! `PATH`, then the usual install locations.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::RenderError;
use crate::detect::KUSTOMIZATION_FILES;
use crate::process::{self, ProcessLimits};

/// The environment variable naming the kubectl binary.
pub const KUBECTL_ENV: &str = "STARLING_KUBECTL";

/// Where kubectl is looked for after the configured path, the variable and `PATH`.
const KNOWN_KUBECTLS: &[&str] = &[
    "/usr/local/bin/kubectl",
    "/usr/bin/kubectl",
    "/usr/lib/google-cloud-sdk/bin/kubectl",
    "/snap/bin/kubectl",
];

/// Fields of a kustomization whose string entries name other kustomizations or files.
const REFERENCE_FIELDS: &[&str] = &[
    "resources",
    "bases",
    "components",
    "generators",
    "transformers",
    "validators",
];

/// The kubectl to run: `configured`, then `$STARLING_KUBECTL`, then `kubectl` on `PATH`, then
/// the usual install locations. The error lists every place it looked.
pub fn find_kubectl(configured: Option<&Path>) -> Result<PathBuf, RenderError> {
    search_kubectl(
        configured,
        std::env::var_os(KUBECTL_ENV),
        std::env::var_os("PATH"),
        KNOWN_KUBECTLS,
    )
}

fn search_kubectl(
    configured: Option<&Path>,
    variable: Option<std::ffi::OsString>,
    path_variable: Option<std::ffi::OsString>,
    known: &[&str],
) -> Result<PathBuf, RenderError> {
    let mut looked = Vec::new();
    if let Some(path) = configured {
        if is_executable(path) {
            return Ok(path.to_path_buf());
        }
        looked.push(format!("{} (configured)", path.display()));
    }
    match variable {
        Some(path) if !path.is_empty() => {
            let path = PathBuf::from(path);
            if is_executable(&path) {
                return Ok(path);
            }
            looked.push(format!("{} (${KUBECTL_ENV})", path.display()));
        }
        _ => looked.push(format!("${KUBECTL_ENV} (unset)")),
    }
    if let Some(paths) = path_variable {
        for dir in std::env::split_paths(&paths) {
            let candidate = dir.join("kubectl");
            if is_executable(&candidate) {
                return Ok(candidate);
            }
        }
        looked.push("kubectl on PATH".to_owned());
    }
    for known in known {
        let candidate = PathBuf::from(known);
        if is_executable(&candidate) {
            return Ok(candidate);
        }
        looked.push((*known).to_owned());
    }
    Err(RenderError::EngineMissing {
        engine: "kustomize (kubectl)",
        looked,
        hint: format!(
            "install kubectl 1.27 or later (it carries kustomize v5), or name it with {KUBECTL_ENV} or --kubectl"
        ),
    })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// Whether a kustomization entry names something remote: a URL (`https://…`, `ssh://…`), a
/// go-getter reference (`git::…`), an scp-like address (`git@host:org/repo`) or a
/// `host.tld/org/repo` shorthand.
pub fn looks_remote(entry: &str) -> bool {
    let entry = entry.trim();
    if entry.starts_with("git::") {
        return true;
    }
    if let Some((scheme, _)) = entry.split_once("://") {
        let mut chars = scheme.chars();
        return chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-'));
    }
    let first = entry.split('/').next().unwrap_or_default();
    // git@github.com:org/repo
    if let Some((user, rest)) = first.split_once('@')
        && !user.is_empty()
        && rest.contains(':')
    {
        return true;
    }
    // github.com/org/repo, gitlab.example.com:8443/org/repo
    if entry.contains('/') {
        let host = first.split(':').next().unwrap_or_default();
        let labels: Vec<&str> = host.split('.').collect();
        let tld = labels.last().copied().unwrap_or_default();
        return labels.len() >= 2
            && labels.iter().all(|label| {
                !label.is_empty() && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            })
            && tld.len() >= 2
            && tld.chars().all(|c| c.is_ascii_alphabetic());
    }
    false
}

/// The kustomization file of a directory, if it has one.
fn kustomization_file(directory: &Path) -> Option<PathBuf> {
    KUSTOMIZATION_FILES
        .iter()
        .map(|name| directory.join(name))
        .find(|path| path.is_file())
}

/// `path` without `.` and `..` (lexically); `None` when it climbs above its start.
fn lexical(path: &Path) -> Option<PathBuf> {
    let mut parts: Vec<Component<'_>> = Vec::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !matches!(parts.last(), Some(Component::Normal(_))) {
                    return None;
                }
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    Some(parts.iter().collect())
}

/// Walks every kustomization reachable from `start` (inside `root`) and refuses, before
/// anything runs, entries that are remote or that leave the source tree.
pub fn check_offline(root: &Path, start: &Path) -> Result<(), RenderError> {
    let canonical_root = root.canonicalize().map_err(|error| RenderError::Read {
        what: root.display().to_string(),
        message: error.to_string(),
    })?;
    let relative = |path: &Path| -> String {
        let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        canonical
            .strip_prefix(&canonical_root)
            .or_else(|_| path.strip_prefix(root))
            .unwrap_or(path)
            .display()
            .to_string()
    };
    let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
    let mut pending = vec![start.to_path_buf()];
    while let Some(directory) = pending.pop() {
        let Ok(canonical) = directory.canonicalize() else {
            continue; // kustomize names what is missing itself
        };
        if !seen.insert(canonical) {
            continue;
        }
        let Some(file) = kustomization_file(&directory) else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        // A kustomization that does not parse is kustomize's to report, with its message.
        let Ok(document) = serde_yaml_ng::from_str::<Value>(&text) else {
            continue;
        };
        for field in REFERENCE_FIELDS {
            let Some(entries) = document.get(field).and_then(Value::as_array) else {
                continue;
            };
            for entry in entries.iter().filter_map(Value::as_str) {
                let local = directory.join(entry);
                let refused = |why: &str| RenderError::Refused {
                    message: format!("{why}: {field} entry '{entry}' in {}", relative(&file)),
                };
                if !local.exists() {
                    if looks_remote(entry) {
                        return Err(refused(
                            "remote bases are refused, a render never reaches the network",
                        ));
                    }
                    continue; // kustomize reports the missing file
                }
                let inside = match local.canonicalize() {
                    Ok(target) => target.starts_with(&canonical_root),
                    Err(_) => lexical(&local).is_some_and(|path| path.starts_with(root)),
                };
                if !inside || Path::new(entry).is_absolute() {
                    return Err(refused("the entry leaves the source tree"));
                }
                if local.is_dir() {
                    pending.push(local);
                }
            }
        }
    }
    Ok(())
}

/// `kubectl kustomize` of `root/path`; the YAML it prints.
pub fn build(
    kubectl: &Path,
    root: &Path,
    path: &str,
    limits: &ProcessLimits,
) -> Result<String, RenderError> {
    let target = if path.is_empty() {
        root.to_path_buf()
    } else {
        root.join(path)
    };
    check_offline(root, &target)?;
    let home = std::env::temp_dir();
    let command = || {
        let mut command = Command::new(kubectl);
        command
            .arg("kustomize")
            .arg(&target)
            .current_dir(root)
            .env_clear()
            .env("KUBECONFIG", "/dev/null")
            .env("HOME", &home)
            .env("LANG", "C");
        if let Some(path) = std::env::var_os("PATH") {
            command.env("PATH", path);
        }
        command
    };
    let shown_path = if path.is_empty() { "." } else { path };
    let finished = process::run(&command, None, limits).map_err(|error| RenderError::Engine {
        engine: "kustomize",
        subject: shown_path.to_owned(),
        message: error.to_string(),
    })?;
    if !finished.status.success() {
        let message = kubectl_error(&finished.stderr);
        let message = scrub(&message, root);
        return Err(RenderError::Engine {
            engine: "kustomize",
            subject: shown_path.to_owned(),
            message: if message.is_empty() {
                format!("kubectl exited with {}", finished.status)
            } else {
                message
            },
        });
    }
    for line in finished
        .stderr
        .lines()
        .filter(|line| !line.trim().is_empty())
    {
        tracing::debug!(path = shown_path, "kustomize: {line}");
    }
    String::from_utf8(finished.stdout).map_err(|_| RenderError::Engine {
        engine: "kustomize",
        subject: shown_path.to_owned(),
        message: "the build printed text that is not utf-8".to_owned(),
    })
}

/// The scratch directory taken out of a message, so that it names paths in the source.
fn scrub(message: &str, root: &Path) -> String {
    let mut message = message.to_owned();
    for root in [root.to_path_buf(), root.canonicalize().unwrap_or_default()] {
        let text = root.display().to_string();
        if text.is_empty() || text == "/" {
            continue;
        }
        message = message.replace(&format!("{text}/"), "").replace(&text, ".");
    }
    message
}

/// The message of kubectl's klog `"command failed" err=…` line, or its plain error text.
fn kubectl_error(stderr: &str) -> String {
    if let Some(start) = stderr.find("err=\"") {
        let rest = &stderr[start + 4..];
        // A Go-quoted string: JSON reads it, escapes and all.
        let mut end = 1;
        let bytes = rest.as_bytes();
        while end < bytes.len() {
            match bytes[end] {
                b'\\' => end += 2,
                b'"' => break,
                _ => end += 1,
            }
        }
        let quoted = &rest[..(end + 1).min(rest.len())];
        if let Ok(message) = serde_json::from_str::<String>(quoted) {
            return message;
        }
        return quoted.trim_matches('"').to_owned();
    }
    if let Some(start) = stderr.find("err=<\n") {
        let body = &stderr[start + 6..];
        let body = body.split("\n >").next().unwrap_or(body);
        return body
            .lines()
            .map(|line| line.strip_prefix('\t').unwrap_or(line))
            .collect::<Vec<_>>()
            .join("\n");
    }
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with("# Warning"))
        .collect();
    lines.join("\n").trim_start_matches("error: ").to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_entries_are_recognised() {
        for remote in [
            "https://github.com/example-org/platform-bases//web?ref=v1.2.0",
            "ssh://git@example.com/org/repo.git",
            "git::https://example.com/repo",
            "git@github.com:org/repo//base",
            "github.com/org/repo/base?ref=main",
            "gitlab.example.com:8443/org/repo",
        ] {
            assert!(looks_remote(remote), "{remote}");
        }
        for local in [
            "../base",
            "deployment.yaml",
            "base",
            "./overlays/prod",
            "v1.2/x",
        ] {
            assert!(!looks_remote(local), "{local}");
        }
    }

    #[test]
    fn kubectl_messages_are_extracted() {
        let klog = "E1127 06:44:25.175088   21966 run.go:72] \"command failed\" err=\"accumulating resources: \\\"x\\\" not found\"\n";
        assert_eq!(
            kubectl_error(klog),
            "accumulating resources: \"x\" not found"
        );
        let block = "E1127 run.go:72] \"command failed\" err=<\n\tfirst line\n\tsecond line\n >\n";
        assert_eq!(kubectl_error(block), "first line\nsecond line");
        assert_eq!(kubectl_error("error: no such thing\n"), "no such thing");
    }

    #[test]
    fn entries_that_leave_the_tree_are_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("repo");
        std::fs::create_dir_all(root.join("app")).expect("mkdir");
        std::fs::create_dir_all(dir.path().join("outside")).expect("mkdir");
        std::fs::write(
            root.join("app/kustomization.yaml"),
            "resources:\n- ../../outside\n",
        )
        .expect("write");
        let error = check_offline(&root, &root.join("app")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "refused: the entry leaves the source tree: resources entry '../../outside' in app/kustomization.yaml"
        );
        std::fs::write(
            root.join("app/kustomization.yaml"),
            "resources:\n- github.com/org/repo/base?ref=v1\n",
        )
        .expect("write");
        let error = check_offline(&root, &root.join("app")).unwrap_err();
        assert!(
            error.to_string().contains("remote bases are refused"),
            "{error}"
        );
    }

    #[test]
    fn a_missing_kubectl_names_where_it_looked() {
        let error = search_kubectl(
            Some(Path::new("/nonexistent/kubectl")),
            Some("/also/missing".into()),
            Some("/nowhere:/neither".into()),
            &["/not/here/kubectl"],
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "kustomize (kubectl) was not found; looked at: /nonexistent/kubectl (configured), \
             /also/missing ($STARLING_KUBECTL), kubectl on PATH, /not/here/kubectl; install \
             kubectl 1.27 or later (it carries kustomize v5), or name it with STARLING_KUBECTL \
             or --kubectl"
        );
        let found = search_kubectl(None, None, None, &["/bin/sh"]).expect("an executable");
        assert_eq!(found, Path::new("/bin/sh"));
    }
}

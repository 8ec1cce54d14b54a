//! What a render of one path reads, as a digest: the mono-repository rule.
//!
//! A new revision of a source rolls out only to the Syncs whose input changed. The input of a
//! path is its git tree, plus everything outside it that a render there can read:
//!
//! ```text
//!  path ──walk its tree──▶ kustomization files: every entry naming something in the repository
//!                          Chart.yaml:          `file://` dependencies
//!                          symlinks:            their targets
//!        each one outside what is covered ──▶ covered too (and walked the same way)
//!  digest = sha256 over (covered path, git object id) sorted
//! ```
//!
//! Git object ids are content digests, so equal digests mean equal bytes for everything a
//! render can read. When the walk cannot be sure (too many entries, a link leaving the
//! repository), the path has no digest and every revision rolls out to it, as before.

use std::collections::BTreeMap;
use std::path::Path;

use git2::{ObjectType, Oid, Repository, Tree};
use sha2::{Digest as _, Sha256};

/// Tree entries walked for one path before giving up (its revisions then always roll out).
pub const MAX_WALKED_ENTRIES: usize = 50_000;
/// Directories and files outside a path that its input may cover.
pub const MAX_COVERED: usize = 64;
/// The largest kustomization or `Chart.yaml` read for references.
const MAX_REFERENCE_FILE: usize = 1024 * 1024;

const KUSTOMIZATION_FILES: [&str; 3] = ["kustomization.yaml", "kustomization.yml", "Kustomization"];
const CHART_FILE: &str = "Chart.yaml";
const LINK_MODE: i32 = 0o120000;

/// `path` as the repository names it: no `.`, no empty parts, no leading or trailing `/`;
/// `None` when it climbs above the root.
pub fn normalize(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            other => parts.push(other),
        }
    }
    Some(parts.join("/"))
}

/// The input digest of each path at `commit`, keyed by the path as given (`apps/a` and
/// `./apps/a/` have the same digest); a path whose input cannot be bounded is left out.
pub fn path_inputs(
    repo: &Repository,
    commit: Oid,
    paths: &[String],
) -> Result<BTreeMap<String, String>, git2::Error> {
    let tree = repo.find_commit(commit)?.tree()?;
    let mut inputs = BTreeMap::new();
    for path in paths {
        let Some(normal) = normalize(path) else {
            continue;
        };
        if let Some(digest) = input_digest(repo, &tree, &normal) {
            inputs.insert(path.clone(), digest);
        }
    }
    Ok(inputs)
}

/// Whether `path` is `root` or lies under it.
fn within(path: &str, root: &str) -> bool {
    root.is_empty()
        || path == root
        || (path.starts_with(root) && path.as_bytes().get(root.len()) == Some(&b'/'))
}

fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(parent, _)| parent)
}

fn join(directory: &str, entry: &str) -> Option<String> {
    if entry.starts_with('/') {
        return None;
    }
    normalize(&format!("{directory}/{entry}"))
}

struct Walk<'r> {
    repo: &'r Repository,
    root: &'r Tree<'r>,
    /// Covered paths and their object ids (`-` for a path that does not exist).
    covered: BTreeMap<String, String>,
    queue: Vec<String>,
    walked: usize,
}

fn input_digest(repo: &Repository, root: &Tree<'_>, path: &str) -> Option<String> {
    let mut walk = Walk {
        repo,
        root,
        covered: BTreeMap::new(),
        queue: vec![path.to_owned()],
        walked: 0,
    };
    while let Some(next) = walk.queue.pop() {
        if walk.covered.keys().any(|done| within(&next, done)) {
            continue;
        }
        if walk.covered.len() >= MAX_COVERED {
            return None;
        }
        walk.cover(&next)?;
    }
    let mut hash = Sha256::new();
    for (path, id) in &walk.covered {
        hash.update(path.as_bytes());
        hash.update([0]);
        hash.update(id.as_bytes());
        hash.update([b'\n']);
    }
    Some(format!("sha256:{}", hex::encode(hash.finalize())))
}

impl Walk<'_> {
    /// Covers one path and queues what it refers to; `None` when the input cannot be bounded.
    fn cover(&mut self, path: &str) -> Option<()> {
        if path.is_empty() {
            // The whole repository: its tree id covers everything a render may read.
            self.covered
                .insert(String::new(), self.root.id().to_string());
            return Some(());
        }
        let Ok(entry) = self.root.get_path(Path::new(path)) else {
            self.covered.insert(path.to_owned(), "-".to_owned());
            return Some(());
        };
        self.covered.insert(path.to_owned(), entry.id().to_string());
        match entry.kind() {
            Some(ObjectType::Tree) => {
                let tree = self.repo.find_tree(entry.id()).ok()?;
                self.walk_tree(&tree, path)
            }
            Some(ObjectType::Blob) if entry.filemode() == LINK_MODE => {
                self.follow_link(entry.id(), parent(path))
            }
            _ => Some(()),
        }
    }

    fn walk_tree(&mut self, tree: &Tree<'_>, directory: &str) -> Option<()> {
        for entry in tree.iter() {
            self.walked += 1;
            if self.walked > MAX_WALKED_ENTRIES {
                return None;
            }
            let name = entry.name().ok()?;
            let path = format!("{directory}/{name}");
            match entry.kind() {
                Some(ObjectType::Tree) => {
                    let subtree = self.repo.find_tree(entry.id()).ok()?;
                    self.walk_tree(&subtree, &path)?;
                }
                Some(ObjectType::Blob) if entry.filemode() == LINK_MODE => {
                    self.follow_link(entry.id(), directory)?;
                }
                Some(ObjectType::Blob) if KUSTOMIZATION_FILES.contains(&name) => {
                    self.references(entry.id(), directory, false)?;
                }
                Some(ObjectType::Blob) if name == CHART_FILE => {
                    self.references(entry.id(), directory, true)?;
                }
                _ => {}
            }
        }
        Some(())
    }

    /// A symlink: its target is input too. One leaving the repository cannot be bounded.
    fn follow_link(&mut self, blob: Oid, directory: &str) -> Option<()> {
        let blob = self.repo.find_blob(blob).ok()?;
        let target = std::str::from_utf8(blob.content()).ok()?;
        let resolved = join(directory, target)?;
        self.queue.push(resolved);
        Some(())
    }

    /// Every string of a kustomization (or the `file://` ones of a `Chart.yaml`) that names
    /// something in the repository outside `directory` is input too. Over-reading is harmless:
    /// at worst a revision rolls out that did not need to.
    fn references(&mut self, blob: Oid, directory: &str, chart: bool) -> Option<()> {
        let blob = self.repo.find_blob(blob).ok()?;
        if blob.size() > MAX_REFERENCE_FILE {
            return None;
        }
        // A file that does not parse is the engine's to report; it reads nothing else.
        let Ok(document) = serde_yaml_ng::from_slice::<serde_yaml_ng::Value>(blob.content()) else {
            return Some(());
        };
        let mut strings = Vec::new();
        collect_strings(&document, &mut strings);
        for text in strings {
            let text = text.trim();
            let entry = if let Some(local) = text.strip_prefix("file://") {
                local
            } else if chart || text.contains("://") {
                continue;
            } else {
                // Generators' `key=path` entries.
                text.split_once('=').map_or(text, |(_, path)| path)
            };
            let Some(resolved) = join(directory, entry) else {
                continue; // leaves the repository: the render refuses it
            };
            if within(&resolved, directory) {
                continue;
            }
            if self.root.get_path(Path::new(&resolved)).is_ok() {
                self.queue.push(resolved);
            }
        }
        Some(())
    }
}

fn collect_strings<'v>(value: &'v serde_yaml_ng::Value, into: &mut Vec<&'v str>) {
    match value {
        serde_yaml_ng::Value::String(text) => into.push(text),
        serde_yaml_ng::Value::Sequence(items) => {
            for item in items {
                collect_strings(item, into);
            }
        }
        serde_yaml_ng::Value::Mapping(map) => {
            for item in map.values() {
                collect_strings(item, into);
            }
        }
        serde_yaml_ng::Value::Tagged(tagged) => collect_strings(&tagged.value, into),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repository with one commit per call of `commit`, files given as (path, content);
    /// content `@target` makes a symlink.
    struct Repo {
        _dir: tempfile::TempDir,
        repo: Repository,
    }

    impl Repo {
        fn new() -> Repo {
            let dir = tempfile::tempdir().unwrap();
            let repo = Repository::init(dir.path()).unwrap();
            Repo { _dir: dir, repo }
        }

        fn commit(&self, files: &[(&str, &str)]) -> Oid {
            let workdir = self.repo.workdir().unwrap().to_path_buf();
            for (path, content) in files {
                let file = workdir.join(path);
                std::fs::create_dir_all(file.parent().unwrap()).unwrap();
                let _ = std::fs::remove_file(&file);
                if let Some(target) = content.strip_prefix('@') {
                    std::os::unix::fs::symlink(target, &file).unwrap();
                } else {
                    std::fs::write(&file, content).unwrap();
                }
            }
            let mut index = self.repo.index().unwrap();
            index
                .add_all(["*"], git2::IndexAddOption::DEFAULT, None)
                .unwrap();
            index.write().unwrap();
            let tree = self.repo.find_tree(index.write_tree().unwrap()).unwrap();
            let signature = git2::Signature::now("t", "t@example.com").unwrap();
            let parents: Vec<git2::Commit<'_>> = self
                .repo
                .head()
                .ok()
                .and_then(|head| head.peel_to_commit().ok())
                .into_iter()
                .collect();
            let parents: Vec<&git2::Commit<'_>> = parents.iter().collect();
            self.repo
                .commit(Some("HEAD"), &signature, &signature, "c", &tree, &parents)
                .unwrap()
        }

        fn inputs(&self, commit: Oid, paths: &[&str]) -> BTreeMap<String, String> {
            let paths: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
            path_inputs(&self.repo, commit, &paths).unwrap()
        }
    }

    #[test]
    fn paths_are_normalized() {
        assert_eq!(normalize("./apps//a/").as_deref(), Some("apps/a"));
        assert_eq!(normalize("apps/b/../a").as_deref(), Some("apps/a"));
        assert_eq!(normalize("").as_deref(), Some(""));
        assert_eq!(normalize("../x"), None);
    }

    #[test]
    fn a_commit_elsewhere_leaves_the_input_of_a_path_alone() {
        let repo = Repo::new();
        let first = repo.commit(&[("apps/a/cm.yaml", "a: 1\n"), ("apps/b/cm.yaml", "b: 1\n")]);
        let second = repo.commit(&[("apps/b/cm.yaml", "b: 2\n")]);
        let before = repo.inputs(first, &["apps/a", "./apps/b/", ""]);
        let after = repo.inputs(second, &["apps/a", "apps/b", ""]);
        assert_eq!(before["apps/a"], after["apps/a"]);
        assert_eq!(
            before["./apps/b/"],
            repo.inputs(first, &["apps/b"])["apps/b"]
        );
        assert_ne!(before["./apps/b/"], after["apps/b"]);
        assert_ne!(before[""], after[""]);
    }

    #[test]
    fn a_kustomize_base_outside_the_path_is_input() {
        let repo = Repo::new();
        let first = repo.commit(&[
            ("base/kustomization.yaml", "resources: [cm.yaml]\n"),
            ("base/cm.yaml", "a: 1\n"),
            (
                "overlays/prod/kustomization.yaml",
                "resources: [../../base]\nconfigMapGenerator:\n- name: x\n  files: [key=../../files/x.txt]\n",
            ),
            ("files/x.txt", "x\n"),
            ("unrelated/cm.yaml", "u: 1\n"),
        ]);
        let base_changed = repo.commit(&[("base/cm.yaml", "a: 2\n")]);
        let file_changed = repo.commit(&[("files/x.txt", "y\n")]);
        let unrelated = repo.commit(&[("unrelated/cm.yaml", "u: 2\n")]);
        let digest = |commit| repo.inputs(commit, &["overlays/prod"])["overlays/prod"].clone();
        assert_ne!(digest(first), digest(base_changed));
        assert_ne!(digest(base_changed), digest(file_changed));
        assert_eq!(digest(file_changed), digest(unrelated));
    }

    #[test]
    fn chart_dependencies_and_symlinks_outside_the_path_are_input() {
        let repo = Repo::new();
        let first = repo.commit(&[
            (
                "charts/web/Chart.yaml",
                "apiVersion: v2\nname: web\nversion: 1.0.0\ndependencies:\n- name: common\n  version: 1.0.0\n  repository: file://../common\n",
            ),
            ("charts/common/Chart.yaml", "apiVersion: v2\nname: common\nversion: 1.0.0\n"),
            ("charts/common/templates/_h.tpl", "{{/* v1 */}}"),
            ("plain/shared.yaml", "@../shared/cm.yaml"),
            ("shared/cm.yaml", "s: 1\n"),
        ]);
        let second = repo.commit(&[
            ("charts/common/templates/_h.tpl", "{{/* v2 */}}"),
            ("shared/cm.yaml", "s: 2\n"),
        ]);
        let before = repo.inputs(first, &["charts/web", "plain"]);
        let after = repo.inputs(second, &["charts/web", "plain"]);
        assert_ne!(before["charts/web"], after["charts/web"]);
        assert_ne!(before["plain"], after["plain"]);
    }

    #[test]
    fn a_link_leaving_the_repository_leaves_the_path_without_a_digest() {
        let repo = Repo::new();
        let commit = repo.commit(&[("app/cm.yaml", "a: 1\n"), ("app/out.yaml", "@../../etc/x")]);
        assert!(!repo.inputs(commit, &["app"]).contains_key("app"));
    }
}

//! Reading manifest files out of an artifact (the deterministic tar.gz the `source` crate
//! builds) or out of a directory on disk.
//!
//! ```text
//! tar.gz / directory --walk--> regular files (.yaml .yml .json only) + symlinks
//!                    --resolve symlinks inside the tree--> visible paths
//!                    --keep those under `path`, sorted by path bytes--> Vec<ManifestFile>
//! ```
//!
//! Symlinks are followed inside the tree only (to files and to directories); one leading out of
//! it is an error. Sizes are bounded so that a hostile artifact cannot exhaust memory.
//!
//! The engines (kustomize, Helm) read more than manifests: for them the tree keeps every file
//! and is written out to a scratch directory ([`Tree::write_to`]), symlinks turned into copies.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use bytes::Bytes;

use super::RenderError;

/// Where manifests are read from.
#[derive(Clone, Debug)]
pub enum ArtifactSource {
    /// A tar.gz file on disk.
    Archive(PathBuf),
    /// A tar.gz already in memory.
    ArchiveBytes(Bytes),
    /// A directory tree on disk (a checkout, for `starling render --source-dir`).
    Directory(PathBuf),
}

impl ArtifactSource {
    /// How errors name the source.
    pub fn describe(&self) -> String {
        match self {
            ArtifactSource::Archive(path) => format!("artifact {}", path.display()),
            ArtifactSource::ArchiveBytes(bytes) => format!("artifact of {} bytes", bytes.len()),
            ArtifactSource::Directory(path) => format!("directory {}", path.display()),
        }
    }
}

/// Bounds on what is read.
#[derive(Clone, Copy, Debug)]
pub struct ReadLimits {
    /// Largest manifest file.
    pub max_file_bytes: u64,
    /// Largest sum of manifest files.
    pub max_total_bytes: u64,
}

impl Default for ReadLimits {
    fn default() -> Self {
        ReadLimits {
            max_file_bytes: 16 * 1024 * 1024,
            max_total_bytes: 256 * 1024 * 1024,
        }
    }
}

/// One manifest file, with its path relative to the tree's root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestFile {
    pub path: String,
    pub text: String,
}

const MAX_LINK_ROUNDS: usize = 40;
/// Most manifest paths a tree may show once its symlinks are followed. Two links to their own
/// directory double the paths at every round: without a bound, 40 rounds would make 2^40.
pub const MAX_VISIBLE_MANIFESTS: usize = 100_000;

/// The files and symlinks of a tree, before symlinks are resolved.
#[derive(Default)]
pub(crate) struct Tree {
    /// Keep every file, not only manifests (for the engines, which read templates, values,
    /// `.helmignore` and the like).
    keep_all: bool,
    files: BTreeMap<String, usize>,
    contents: Vec<Vec<u8>>,
    links: BTreeMap<String, String>,
    /// Every regular file's path, kept or not (for detecting the renderer).
    names: std::collections::BTreeSet<String>,
    /// Every directory that holds at least one entry.
    directories: std::collections::BTreeSet<String>,
    total_bytes: u64,
}

impl Tree {
    fn note_directories(&mut self, path: &str) {
        let mut rest = path;
        while let Some((parent, _)) = rest.rsplit_once('/') {
            if !self.directories.insert(parent.to_owned()) {
                break;
            }
            rest = parent;
        }
    }

    fn add_file(
        &mut self,
        path: String,
        reader: &mut dyn Read,
        size: u64,
        limits: &ReadLimits,
    ) -> Result<(), RenderError> {
        self.note_directories(&path);
        self.names.insert(path.clone());
        let manifest = is_manifest(&path);
        if !manifest && !self.keep_all {
            return Ok(());
        }
        if size > limits.max_file_bytes {
            return Err(RenderError::Limit {
                message: format!(
                    "file {path} has {size} bytes, more than the limit of {}",
                    limits.max_file_bytes
                ),
            });
        }
        self.total_bytes += size;
        if self.total_bytes > limits.max_total_bytes {
            return Err(RenderError::Limit {
                message: format!("manifests exceed {} bytes in total", limits.max_total_bytes),
            });
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        reader
            .take(limits.max_file_bytes + 1)
            .read_to_end(&mut bytes)
            .map_err(|error| RenderError::Read {
                what: path.clone(),
                message: error.to_string(),
            })?;
        // The engines read what they read; plain manifests must be text.
        if !self.keep_all && std::str::from_utf8(&bytes).is_err() {
            return Err(RenderError::Read {
                what: path.clone(),
                message: "file is not valid utf-8".to_owned(),
            });
        }
        self.contents.push(bytes);
        self.files.insert(path, self.contents.len() - 1);
        Ok(())
    }

    fn add_link(&mut self, path: String, target: String) {
        self.note_directories(&path);
        self.links.insert(path, target);
    }

    /// Every path a reader of the tree sees a manifest at, symlinks included.
    fn visible(&self) -> Result<BTreeMap<String, usize>, RenderError> {
        let mut visible = self.files.clone();
        for _ in 0..MAX_LINK_ROUNDS {
            let mut added = false;
            for (link, target) in &self.links {
                let resolved = resolve_link(link, target)?;
                if let Some(&content) = visible.get(&resolved) {
                    added |= visible.insert(link.clone(), content).is_none();
                    continue;
                }
                let prefix = format!("{resolved}/");
                let inside: Vec<(String, usize)> = visible
                    .range(prefix.clone()..)
                    .take_while(|(path, _)| path.starts_with(&prefix))
                    .map(|(path, &content)| (format!("{link}/{}", &path[prefix.len()..]), content))
                    .collect();
                for (path, content) in inside {
                    added |= visible.insert(path, content).is_none();
                    if visible.len() > MAX_VISIBLE_MANIFESTS {
                        return Err(RenderError::Limit {
                            message: format!(
                                "symlinks make more than {MAX_VISIBLE_MANIFESTS} manifest paths visible (symlink {link} to {target:?} may form a loop)"
                            ),
                        });
                    }
                }
            }
            if !added {
                return Ok(visible);
            }
        }
        Err(RenderError::Read {
            what: "symlinks".to_owned(),
            message: format!("symlinks nest more than {MAX_LINK_ROUNDS} levels deep"),
        })
    }

    fn has_directory(&self, path: &str) -> bool {
        path.is_empty()
            || self.directories.contains(path)
            || self.links.contains_key(path)
            || self.files.contains_key(path)
    }
}

/// Whether a path names a manifest file, by extension.
pub fn is_manifest(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    lower.ends_with(".yaml") || lower.ends_with(".yml") || lower.ends_with(".json")
}

/// The normalised form of a Sync's `path`: relative, `/`-separated, no `.` or `..`; `""` is the
/// whole tree.
pub fn normalize_path(path: Option<&str>) -> Result<String, RenderError> {
    let Some(path) = path else {
        return Ok(String::new());
    };
    let invalid = |reason: &str| RenderError::InvalidPath {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    if path.starts_with('/') {
        return Err(invalid("it must be relative to the source's root"));
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(invalid("it must not contain '..'")),
            other => parts.push(other),
        }
    }
    Ok(parts.join("/"))
}

/// `a/b/../c` relative to the link's directory, refused when it leaves the tree.
fn resolve_link(link: &str, target: &str) -> Result<String, RenderError> {
    let outside = || RenderError::Read {
        what: link.to_owned(),
        message: format!("symlink to {target:?} points outside the tree"),
    };
    if target.starts_with('/') {
        return Err(outside());
    }
    let mut parts: Vec<&str> = link.split('/').collect();
    parts.pop();
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(outside());
                }
            }
            other => parts.push(other),
        }
    }
    Ok(parts.join("/"))
}

/// Normalises an entry path of an archive (`./a/b` → `a/b`); `None` for the root itself.
fn entry_path(path: &Path) -> Result<Option<String>, String> {
    let mut parts = Vec::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::Normal(part) => parts.push(
                part.to_str()
                    .ok_or_else(|| format!("entry {} is not utf-8", path.display()))?
                    .to_owned(),
            ),
            _ => return Err(format!("entry {} leaves the archive", path.display())),
        }
    }
    Ok((!parts.is_empty()).then(|| parts.join("/")))
}

fn read_archive(
    reader: impl Read,
    source: &str,
    limits: &ReadLimits,
    mut tree: Tree,
) -> Result<Tree, RenderError> {
    let read_error = |message: String| RenderError::Read {
        what: source.to_owned(),
        message,
    };
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(reader));
    let entries = archive
        .entries()
        .map_err(|error| read_error(error.to_string()))?;
    for entry in entries {
        let mut entry = entry.map_err(|error| read_error(error.to_string()))?;
        let raw_path = entry
            .path()
            .map_err(|error| read_error(error.to_string()))?
            .into_owned();
        let Some(path) = entry_path(&raw_path).map_err(read_error)? else {
            continue;
        };
        let entry_type = entry.header().entry_type();
        if entry_type.is_symlink() {
            let target = entry
                .link_name()
                .map_err(|error| read_error(error.to_string()))?
                .ok_or_else(|| read_error(format!("symlink {path} has no target")))?;
            let target = target
                .to_str()
                .ok_or_else(|| read_error(format!("symlink {path} has a non-utf-8 target")))?
                .to_owned();
            tree.add_link(path, target);
        } else if entry_type.is_dir() {
            tree.note_directories(&format!("{path}/"));
        } else if entry_type.is_file() {
            let size = entry.size();
            tree.add_file(path, &mut entry, size, limits)?;
        }
    }
    Ok(tree)
}

fn read_directory(root: &Path, limits: &ReadLimits, mut tree: Tree) -> Result<Tree, RenderError> {
    let mut pending = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, prefix)) = pending.pop() {
        let read_error = |error: std::io::Error| RenderError::Read {
            what: dir.display().to_string(),
            message: error.to_string(),
        };
        for entry in std::fs::read_dir(&dir).map_err(read_error)? {
            let entry = entry.map_err(read_error)?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if name == ".git" {
                continue;
            }
            let path = format!("{prefix}{name}");
            let file_type = entry.file_type().map_err(read_error)?;
            if file_type.is_symlink() {
                let target = std::fs::read_link(entry.path()).map_err(read_error)?;
                if let Some(target) = target.to_str() {
                    tree.add_link(path, target.to_owned());
                }
            } else if file_type.is_dir() {
                tree.note_directories(&format!("{path}/"));
                pending.push((entry.path(), format!("{path}/")));
            } else if file_type.is_file() {
                let mut file = std::fs::File::open(entry.path()).map_err(read_error)?;
                let size = file.metadata().map_err(read_error)?.len();
                tree.add_file(path, &mut file, size, limits)?;
            }
        }
    }
    Ok(tree)
}

/// Reads a tree: its manifests only, or every file (`keep_all`, for the engines).
pub(crate) fn read_tree(
    source: &ArtifactSource,
    keep_all: bool,
    limits: &ReadLimits,
) -> Result<Tree, RenderError> {
    let described = source.describe();
    let tree = Tree {
        keep_all,
        ..Tree::default()
    };
    match source {
        ArtifactSource::Archive(file) => {
            // The store lost the archive (collected, or the disk was wiped): the source side.
            let reader = std::fs::File::open(file).map_err(|error| RenderError::ArtifactGone {
                what: described.clone(),
                message: error.to_string(),
            })?;
            read_archive(std::io::BufReader::new(reader), &described, limits, tree)
        }
        ArtifactSource::ArchiveBytes(bytes) => {
            read_archive(bytes.as_ref(), &described, limits, tree)
        }
        ArtifactSource::Directory(dir) => read_directory(dir, limits, tree),
    }
}

impl Tree {
    /// Fails when `path` names nothing in the tree: a typo must not render an empty set and
    /// prune everything.
    pub(crate) fn check_path(
        &self,
        path: &str,
        source: &ArtifactSource,
    ) -> Result<(), RenderError> {
        if self.has_directory(path) {
            Ok(())
        } else {
            Err(RenderError::PathNotFound {
                path: path.to_owned(),
                artifact: source.describe(),
            })
        }
    }

    /// The chart of a packaged chart archive (`helm package`, a Helm repository, an OCI
    /// registry): the root holds nothing but one directory, and that directory a `Chart.yaml`.
    pub(crate) fn packaged_chart(&self) -> Option<&str> {
        if !self.names_in("").is_empty() {
            return None;
        }
        let mut top = self
            .directories
            .iter()
            .filter(|d| !d.is_empty() && !d.contains('/'));
        match (top.next(), top.next()) {
            (Some(only), None) if self.names.contains(&format!("{only}/Chart.yaml")) => {
                Some(only.as_str())
            }
            _ => None,
        }
    }

    /// The names of the files and symlinks directly in directory `path` (`""`: the root).
    pub(crate) fn names_in(&self, path: &str) -> Vec<&str> {
        let prefix = if path.is_empty() {
            String::new()
        } else {
            format!("{path}/")
        };
        self.names
            .iter()
            .chain(self.links.keys())
            .filter_map(|name| name.strip_prefix(&prefix))
            .filter(|rest| !rest.contains('/'))
            .collect()
    }

    /// Every manifest file under `path`, sorted by path.
    pub(crate) fn manifests_under(&self, path: &str) -> Result<Vec<ManifestFile>, RenderError> {
        let prefix = if path.is_empty() {
            String::new()
        } else {
            format!("{path}/")
        };
        let visible = self.visible()?;
        Ok(visible
            .into_iter()
            .filter(|(file, _)| (file.starts_with(&prefix) || file == path) && is_manifest(file))
            .map(|(file, content)| ManifestFile {
                path: file,
                text: String::from_utf8_lossy(&self.contents[content]).into_owned(),
            })
            .collect())
    }

    /// The content of one file (through symlinks inside the tree), if the tree kept it.
    pub(crate) fn file(&self, path: &str) -> Result<Option<&[u8]>, RenderError> {
        if let Some(&content) = self.files.get(path) {
            return Ok(Some(&self.contents[content]));
        }
        Ok(self
            .visible()?
            .get(path)
            .map(|&content| self.contents[content].as_slice()))
    }

    /// Writes every kept file under `path` (`""`: all) into `root`, at the same relative
    /// paths; symlinks become copies, so nothing written points anywhere else.
    pub(crate) fn write_to(&self, path: &str, root: &Path) -> Result<usize, RenderError> {
        let prefix = if path.is_empty() {
            String::new()
        } else {
            format!("{path}/")
        };
        let write_error = |what: &Path, error: std::io::Error| RenderError::Read {
            what: format!("the render's copy {}", what.display()),
            message: error.to_string(),
        };
        let mut written = 0;
        for (file, content) in self.visible()? {
            if !file.starts_with(&prefix) {
                continue;
            }
            let target = root.join(&file);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(|error| write_error(parent, error))?;
            }
            std::fs::write(&target, &self.contents[content])
                .map_err(|error| write_error(&target, error))?;
            written += 1;
        }
        // Directories that hold only directories (an empty `charts/`) matter to no engine.
        Ok(written)
    }
}

/// Every manifest file under `path` (normalised, `""` for all), sorted by path. A `path` that
/// names nothing in the tree is an error: a typo must not render an empty set and prune
/// everything.
pub fn read_manifests(
    source: &ArtifactSource,
    path: &str,
    limits: &ReadLimits,
) -> Result<Vec<ManifestFile>, RenderError> {
    let tree = read_tree(source, false, limits)?;
    tree.check_path(path, source)?;
    tree.manifests_under(path)
}

/// The text of one file of a tree (`path` normalised; symlinks inside the tree followed), or
/// `None` when the tree has no such file: a values file read from another Source.
pub fn read_file(
    source: &ArtifactSource,
    path: &str,
    limits: &ReadLimits,
) -> Result<Option<String>, RenderError> {
    let path = normalize_path(Some(path))?;
    let tree = read_tree(source, true, limits)?;
    let Some(bytes) = tree.file(&path)? else {
        return Ok(None);
    };
    String::from_utf8(bytes.to_vec())
        .map(Some)
        .map_err(|_| RenderError::Values {
            what: format!("file {path} of {}", source.describe()),
            message: "not valid utf-8".to_owned(),
        })
}

#[cfg(test)]
mod tests {
    use flate2::Compression;
    use flate2::write::GzEncoder;

    use super::*;

    enum Entry<'a> {
        File(&'a str, &'a str),
        Link(&'a str, &'a str),
    }

    fn archive(entries: &[Entry<'_>]) -> Bytes {
        let mut builder = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
        for entry in entries {
            let mut header = tar::Header::new_gnu();
            match entry {
                Entry::File(path, text) => {
                    header.set_size(text.len() as u64);
                    header.set_mode(0o644);
                    header.set_entry_type(tar::EntryType::Regular);
                    builder
                        .append_data(&mut header, path, text.as_bytes())
                        .expect("append file");
                }
                Entry::Link(path, target) => {
                    header.set_size(0);
                    header.set_mode(0o777);
                    header.set_entry_type(tar::EntryType::Symlink);
                    builder
                        .append_link(&mut header, path, target)
                        .expect("append link");
                }
            }
        }
        let encoder = builder.into_inner().expect("finish tar");
        Bytes::from(encoder.finish().expect("finish gzip"))
    }

    fn paths(files: &[ManifestFile]) -> Vec<&str> {
        files.iter().map(|file| file.path.as_str()).collect()
    }

    #[test]
    fn archives_give_sorted_manifests_under_the_path() {
        let bytes = archive(&[
            Entry::File("apps/web/b.yaml", "b"),
            Entry::File("apps/web/a.yml", "a"),
            Entry::File("apps/web/sub/c.JSON", "c"),
            Entry::File("apps/web/README.md", "no"),
            Entry::File("apps/webhook/x.yaml", "not under apps/web"),
            Entry::File("other/d.yaml", "d"),
        ]);
        let source = ArtifactSource::ArchiveBytes(bytes);
        let files = read_manifests(&source, "apps/web", &ReadLimits::default()).expect("read");
        assert_eq!(
            paths(&files),
            ["apps/web/a.yml", "apps/web/b.yaml", "apps/web/sub/c.JSON"]
        );
        assert_eq!(files[0].text, "a");
        let all = read_manifests(&source, "", &ReadLimits::default()).expect("read all");
        assert_eq!(all.len(), 5);
        let missing = read_manifests(&source, "apps/db", &ReadLimits::default()).unwrap_err();
        assert!(
            missing.to_string().contains("path \"apps/db\" not found"),
            "{missing}"
        );
    }

    #[test]
    fn one_file_is_read_through_links_or_found_missing() {
        let bytes = archive(&[
            Entry::File("envs/prod/values.yaml", "replicas: 3\n"),
            Entry::Link("envs/live.yaml", "prod/values.yaml"),
        ]);
        let source = ArtifactSource::ArchiveBytes(bytes);
        let limits = ReadLimits::default();
        let read = |path: &str| read_file(&source, path, &limits).unwrap();
        assert_eq!(
            read("envs/prod/values.yaml").as_deref(),
            Some("replicas: 3\n")
        );
        assert_eq!(read("./envs/live.yaml").as_deref(), Some("replicas: 3\n"));
        assert_eq!(read("envs/other.yaml"), None);

        // Through a node's cache: read once per artifact and path, the absence too.
        let cache = crate::RenderCache::new(8, 1 << 20);
        for _ in 0..3 {
            let text = cache.read_file(&source, "envs/prod/values.yaml", &limits);
            assert_eq!(text.unwrap().as_deref(), Some("replicas: 3\n"));
            let missing = cache.read_file(&source, "envs/other.yaml", &limits);
            assert_eq!(missing.unwrap(), None);
        }
        assert_eq!((cache.stats().renders, cache.stats().hits), (2, 4));
    }

    #[test]
    fn symlinks_are_followed_inside_the_tree_only() {
        let bytes = archive(&[
            Entry::File("base/cm.yaml", "cm"),
            Entry::Link("app/cm.yaml", "../base/cm.yaml"),
            Entry::Link("app/shared", "../base"),
        ]);
        let source = ArtifactSource::ArchiveBytes(bytes);
        let files = read_manifests(&source, "app", &ReadLimits::default()).expect("read");
        assert_eq!(paths(&files), ["app/cm.yaml", "app/shared/cm.yaml"]);
        assert!(files.iter().all(|file| file.text == "cm"));

        let escaping = archive(&[Entry::Link("app/x.yaml", "../../etc/passwd")]);
        let error = read_manifests(
            &ArtifactSource::ArchiveBytes(escaping),
            "app",
            &ReadLimits::default(),
        )
        .unwrap_err();
        assert!(error.to_string().contains("outside the tree"), "{error}");
    }

    #[test]
    fn limits_bound_what_is_read() {
        let bytes = archive(&[Entry::File("a.yaml", "0123456789")]);
        let limits = ReadLimits {
            max_file_bytes: 4,
            max_total_bytes: 100,
        };
        let error = read_manifests(&ArtifactSource::ArchiveBytes(bytes), "", &limits).unwrap_err();
        assert!(error.to_string().contains("more than the limit"), "{error}");
    }

    #[test]
    fn directories_are_read_like_archives() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("app/nested")).expect("mkdir");
        std::fs::create_dir_all(root.join(".git")).expect("mkdir");
        std::fs::write(root.join("app/b.yaml"), "b").expect("write");
        std::fs::write(root.join("app/nested/a.json"), "a").expect("write");
        std::fs::write(root.join(".git/config.yaml"), "no").expect("write");
        let files = read_manifests(
            &ArtifactSource::Directory(root.to_path_buf()),
            "",
            &ReadLimits::default(),
        )
        .expect("read");
        assert_eq!(paths(&files), ["app/b.yaml", "app/nested/a.json"]);
    }

    #[test]
    fn paths_are_normalised_and_checked() {
        assert_eq!(normalize_path(None).unwrap(), "");
        assert_eq!(normalize_path(Some("./apps//web/")).unwrap(), "apps/web");
        assert_eq!(normalize_path(Some(".")).unwrap(), "");
        assert!(normalize_path(Some("/etc")).is_err());
        assert!(normalize_path(Some("apps/../..")).is_err());
    }
}

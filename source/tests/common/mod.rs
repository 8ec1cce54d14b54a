//! Shared fixtures for the integration tests: real repositories made with the `git` CLI in
//! temporary directories, served over `file://` or by a `git daemon` on 127.0.0.1 (and, in
//! `http`, by a small authenticating smart-http server). Every server is killed on drop and
//! every wait is bounded.

#![allow(dead_code)]

pub mod http;

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use source::{ArtifactStore, Auth, Limits, MirrorSet, RepoUrl};

/// Runs git in `dir` with a clean configuration; panics with git's output on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    git_with_input(dir, args, "")
}

/// [`git`] with `input` on standard input.
pub fn git_with_input(dir: &Path, args: &[&str], input: &str) -> String {
    use std::io::Write as _;
    let mut child = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.invalid")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.invalid")
        .env("GIT_AUTHOR_DATE", "2024-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2024-01-01T00:00:00Z")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("git runs");
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes()).expect("write to git");
    }
    let output = child.wait_with_output().expect("git finishes");
    assert!(
        output.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// A working repository that tests commit to and serve.
pub struct WorkRepo {
    pub root: tempfile::TempDir,
}

impl WorkRepo {
    /// An empty repository at `<tmp>/repo` whose default branch is `main`.
    pub fn new() -> WorkRepo {
        let root = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(root.path().join("repo")).expect("mkdir");
        let repo = WorkRepo { root };
        repo.git(&["init", "-q", "-b", "main"]);
        repo
    }

    /// A repository with one commit on `main` holding `files`.
    pub fn with_files(files: &[(&str, &str)]) -> WorkRepo {
        let repo = WorkRepo::new();
        for (path, content) in files {
            repo.write(path, content);
        }
        repo.commit("initial");
        repo
    }

    pub fn dir(&self) -> PathBuf {
        self.root.path().join("repo")
    }

    pub fn git(&self, args: &[&str]) -> String {
        git(&self.dir(), args)
    }

    pub fn write(&self, path: &str, content: &str) {
        let full = self.dir().join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(full, content).expect("write");
    }

    /// Stages everything and commits; returns the commit id.
    pub fn commit(&self, message: &str) -> String {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "--allow-empty", "-m", message]);
        self.head()
    }

    pub fn head(&self) -> String {
        self.git(&["rev-parse", "HEAD"])
    }

    pub fn tag(&self, name: &str) {
        self.git(&["tag", "-f", name]);
    }

    /// Makes branch `branch` point at a commit whose root tree is `tree_lines` (`git mktree`
    /// input, `<mode> <type> <oid>\t<name>` per line): trees git itself would never write.
    pub fn commit_raw_tree(&self, branch: &str, tree_lines: &str) -> String {
        let tree = git_with_input(&self.dir(), &["mktree"], tree_lines);
        let commit = self.git(&["commit-tree", &tree, "-m", "crafted"]);
        self.git(&["update-ref", &format!("refs/heads/{branch}"), &commit]);
        commit
    }

    /// Stores `content` as a blob and returns its id.
    pub fn blob(&self, content: &str) -> String {
        git_with_input(&self.dir(), &["hash-object", "-w", "--stdin"], content)
    }

    pub fn file_url(&self) -> String {
        format!("file://{}", self.dir().display())
    }

    pub fn url(&self) -> RepoUrl {
        RepoUrl::parse(&self.file_url()).expect("file url parses")
    }
}

/// A `git daemon` serving every repository under `base` on 127.0.0.1.
pub struct GitDaemon {
    child: Child,
    pub port: u16,
}

impl GitDaemon {
    pub fn start(base: &Path) -> GitDaemon {
        let port = free_port();
        // Run git-daemon itself: `git daemon` would fork it as a child that a kill misses.
        let exec_path = git(base, &["--exec-path"]);
        let child = Command::new(Path::new(&exec_path).join("git-daemon"))
            .args([
                "--reuseaddr",
                &format!("--base-path={}", base.display()),
                "--export-all",
                "--listen=127.0.0.1",
                &format!("--port={port}"),
            ])
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("git daemon starts");
        wait_for_port(port);
        GitDaemon { child, port }
    }

    /// `git://127.0.0.1:PORT/<name>`
    pub fn url(&self, name: &str) -> RepoUrl {
        RepoUrl::parse(&format!("git://127.0.0.1:{}/{name}", self.port)).expect("url parses")
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// Waits (at most 10 s) until something accepts on the port.
pub fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("nothing listens on port {port} after 10 s");
}

/// A node's mirrors and store in a temporary directory.
pub struct Node {
    pub dir: tempfile::TempDir,
    pub mirrors: Arc<MirrorSet>,
    pub store: Arc<ArtifactStore>,
}

impl Node {
    pub fn new() -> Node {
        let dir = tempfile::tempdir().expect("temp dir");
        let mirrors = Arc::new(MirrorSet::open(dir.path().join("mirrors")).expect("mirrors"));
        let store = Arc::new(ArtifactStore::open(dir.path().join("artifacts")).expect("store"));
        Node {
            dir,
            mirrors,
            store,
        }
    }

    /// Fetches now (no reuse of a fresh mirror).
    pub fn fetch(&self, url: &RepoUrl) -> Result<source::FetchReport, source::SourceError> {
        self.mirrors.fetch_if_older_than(
            url,
            &Auth::anonymous(),
            Duration::ZERO,
            Duration::from_secs(20),
        )
    }
}

pub fn limits() -> Limits {
    Limits {
        fetch_timeout: Duration::from_secs(20),
        ..Limits::default()
    }
}

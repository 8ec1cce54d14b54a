//! How the engines are run: the worker command, where kubectl and the Helm library are, the
//! process limits and where sources are copied for them. Every default is here.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::cache::RenderCache;
use crate::helm::WORKER_SUBCOMMAND;
use crate::process::ProcessLimits;

/// The command that starts a Helm render worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
}

impl WorkerCommand {
    /// `<this executable> render-worker`: the `starling` binary's hidden command.
    pub fn current_exe() -> WorkerCommand {
        WorkerCommand {
            program: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("starling")),
            args: vec![WORKER_SUBCOMMAND.to_owned()],
        }
    }

    /// A worker binary that takes no arguments (`starling-render-worker`).
    pub fn binary(program: impl Into<PathBuf>) -> WorkerCommand {
        WorkerCommand {
            program: program.into(),
            args: Vec::new(),
        }
    }
}

/// How renders run their engines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Engines {
    pub worker: WorkerCommand,
    /// kubectl; found by [`crate::kustomize::find_kubectl`] when unset.
    pub kubectl: Option<PathBuf>,
    /// `libhelm_c.so`; found by [`crate::helm::library::find_library`] when unset.
    pub helm_library: Option<PathBuf>,
    pub limits: ProcessLimits,
    /// Where a source is copied for an engine to read; the system's temporary directory when
    /// unset.
    pub scratch_dir: Option<PathBuf>,
    /// How many engine processes run at once (shared by every clone of these settings).
    pub slots: EngineSlots,
    /// The engines' outputs, kept per node (shared by every clone of these settings).
    pub cache: RenderCache,
}

impl Default for Engines {
    fn default() -> Self {
        Engines {
            worker: WorkerCommand::current_exe(),
            kubectl: None,
            helm_library: None,
            limits: ProcessLimits::default(),
            scratch_dir: None,
            slots: EngineSlots::new(DEFAULT_CONCURRENT_RENDERS),
            cache: RenderCache::default(),
        }
    }
}

impl Engines {
    /// Rejects settings that cannot work.
    pub fn validate(&self) -> Result<(), String> {
        self.limits.validate()?;
        if self.worker.program.as_os_str().is_empty() {
            return Err("the render worker command is empty".to_owned());
        }
        if self.slots.max == 0 {
            return Err("at least one render must be allowed to run at once".to_owned());
        }
        Ok(())
    }

    /// A fresh scratch directory, removed when dropped.
    pub(crate) fn scratch(&self) -> std::io::Result<tempfile::TempDir> {
        let builder = {
            let mut builder = tempfile::Builder::new();
            builder.prefix("starling-render-");
            builder
        };
        match &self.scratch_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                builder.tempdir_in(dir)
            }
            None => builder.tempdir(),
        }
    }
}

/// Engine processes that may run at once on a node by default: each may take a core and a
/// few hundred MiB.
pub const DEFAULT_CONCURRENT_RENDERS: usize = 2;

/// A bound on the engine processes running at once, shared by the clones of one [`Engines`].
#[derive(Clone)]
pub struct EngineSlots {
    max: usize,
    used: Arc<(Mutex<usize>, Condvar)>,
}

impl EngineSlots {
    pub fn new(max: usize) -> EngineSlots {
        EngineSlots {
            max,
            used: Arc::new((Mutex::new(0), Condvar::new())),
        }
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// Takes a slot, waiting at most `wait` for one to come free.
    pub(crate) fn acquire(&self, wait: Duration) -> Result<SlotGuard, crate::RenderError> {
        let deadline = Instant::now() + wait;
        let (used, freed) = &*self.used;
        let mut count = used.lock().unwrap_or_else(|e| e.into_inner());
        while *count >= self.max {
            let now = Instant::now();
            if now >= deadline {
                return Err(crate::RenderError::Limit {
                    message: format!(
                        "no render slot came free within {wait:?}: {} renders were already running on this node",
                        self.max
                    ),
                });
            }
            count = freed
                .wait_timeout(count, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *count += 1;
        Ok(SlotGuard {
            used: self.used.clone(),
        })
    }
}

impl std::fmt::Debug for EngineSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EngineSlots(max {})", self.max)
    }
}

impl PartialEq for EngineSlots {
    fn eq(&self, other: &Self) -> bool {
        self.max == other.max && Arc::ptr_eq(&self.used, &other.used)
    }
}

impl Eq for EngineSlots {}

/// A slot taken; given back on drop.
pub(crate) struct SlotGuard {
    used: Arc<(Mutex<usize>, Condvar)>,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let (used, freed) = &*self.used;
        let mut count = used.lock().unwrap_or_else(|e| e.into_inner());
        *count = count.saturating_sub(1);
        freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_bound_the_renders_and_the_wait() {
        let slots = EngineSlots::new(1);
        let first = slots.acquire(Duration::from_secs(1)).expect("a free slot");
        let error = slots
            .acquire(Duration::from_millis(20))
            .err()
            .expect("no second slot");
        assert!(
            error.to_string().contains("no render slot came free"),
            "{error}"
        );
        let clone = slots.clone();
        let waiter = std::thread::spawn(move || clone.acquire(Duration::from_secs(30)).is_ok());
        drop(first);
        assert!(waiter.join().expect("joined"), "the freed slot is taken");
    }
}

//! Running a render engine (`kubectl kustomize`, the Helm worker) as a child process with
//! bounds, so that a render that loops, balloons or floods its output never takes the replica
//! down and never holds a sync worker past its limit.
//!
//! ```text
//! spawn ─ in the child, before exec: own process group, parent-death signal, no core dumps,
//!         RLIMIT_AS = memory limit, a new network namespace (nothing to reach, not even
//!         loopback)
//!       ─ threads: feed stdin │ read stdout up to the cap │ read stderr (first 64 KiB kept)
//!       ─ wait for the exit without reaping it (waitid WNOWAIT) up to the time limit
//!           └ late or over the cap: SIGKILL to the whole process group
//!       ─ SIGKILL to what is left of the group, join the readers, reap
//! ```
//!
//! The child is reaped only after every kill, so a signal never reaches a recycled process
//! group. A network namespace needs root or unprivileged user namespaces; where neither is
//! permitted, [`NetworkIsolation::BestEffort`] (the default) runs without one and says so once
//! in the log. The engines are offline by construction anyway (remote bases and dependency
//! downloads are refused before they run); the namespace is the second wall.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

/// What a render process may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessLimits {
    /// Wall-clock limit; the process group is killed when it passes.
    pub timeout: Duration,
    /// Address-space limit (`RLIMIT_AS`) of the process, in bytes.
    pub memory_bytes: u64,
    /// Most bytes read from its standard output; more kills it.
    pub output_bytes: usize,
    pub network: NetworkIsolation,
}

impl Default for ProcessLimits {
    fn default() -> Self {
        ProcessLimits {
            timeout: Duration::from_secs(60),
            // Go runtimes (kubectl, the Helm library) reserve address space generously; 4 GiB
            // of address space leaves a real chart about 10 times what it needs.
            memory_bytes: 4 << 30,
            output_bytes: 64 << 20,
            network: NetworkIsolation::BestEffort,
        }
    }
}

impl ProcessLimits {
    /// Rejects limits that cannot work.
    pub fn validate(&self) -> Result<(), String> {
        if self.timeout.is_zero() {
            return Err("the render time limit must be positive".to_owned());
        }
        if self.memory_bytes < 256 << 20 {
            return Err(format!(
                "the render memory limit of {} bytes is below 256 MiB, too little for any engine",
                self.memory_bytes
            ));
        }
        if self.output_bytes < 1024 {
            return Err("the render output cap must be at least 1 KiB".to_owned());
        }
        Ok(())
    }
}

/// Whether renders run in a network namespace of their own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NetworkIsolation {
    /// Always; a render fails when the namespace cannot be made.
    Required,
    /// When the system permits it (root, or unprivileged user namespaces).
    #[default]
    BestEffort,
    /// Never.
    Off,
}

impl std::str::FromStr for NetworkIsolation {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().as_str() {
            "required" => Ok(NetworkIsolation::Required),
            "best-effort" | "besteffort" => Ok(NetworkIsolation::BestEffort),
            "off" => Ok(NetworkIsolation::Off),
            _ => Err(format!(
                "{text:?} is not a network isolation mode: required, best-effort or off"
            )),
        }
    }
}

/// How a process ended, with what it printed.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    /// The first [`STDERR_KEPT`] bytes of its standard error, lossily decoded.
    pub stderr: String,
}

/// How much of a process's standard error is kept for messages.
pub const STDERR_KEPT: usize = 64 * 1024;

/// Why a process gave no usable result.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("cannot start {program}: {error}")]
    Spawn {
        program: String,
        error: std::io::Error,
    },
    #[error(
        "cannot isolate {program} from the network ({error}); run as root, allow unprivileged user namespaces, or set the render network isolation to best-effort"
    )]
    Isolation {
        program: String,
        error: std::io::Error,
    },
    #[error("{program} ran past the render time limit of {after:?} and was killed")]
    Timeout { program: String, after: Duration },
    #[error("{program} printed more than the render output cap of {limit} bytes and was killed")]
    OutputTooLarge { program: String, limit: usize },
    #[error("{program} was killed by signal {signal}{hint}")]
    Killed {
        program: String,
        signal: i32,
        hint: &'static str,
    },
    #[error("cannot wait for {program}: {error}")]
    Wait {
        program: String,
        error: std::io::Error,
    },
}

/// 0: not probed yet, 1: namespaces work, 2: they do not (best effort runs without).
static ISOLATION: AtomicU8 = AtomicU8::new(0);

/// Runs the command `build` makes to completion within `limits`, feeding it `stdin`.
/// (`build` may be called twice: a second time without the network namespace, when the system
/// refuses one and the isolation is best effort.)
pub fn run(
    build: &dyn Fn() -> Command,
    stdin: Option<Vec<u8>>,
    limits: &ProcessLimits,
) -> Result<Finished, ProcessError> {
    let isolate = match limits.network {
        NetworkIsolation::Off => false,
        NetworkIsolation::Required => true,
        NetworkIsolation::BestEffort => ISOLATION.load(Ordering::Relaxed) != 2,
    };
    let memory = limits.memory_bytes;
    let spawn = |isolate: bool| {
        let mut command = build();
        command
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: the closure runs in the child between fork and exec and calls only
        // async-signal-safe system calls (setpgid, prctl, setrlimit, geteuid, unshare).
        unsafe {
            command.pre_exec(move || prepare_child(memory, isolate));
        }
        let program = command.get_program().to_string_lossy().into_owned();
        (program, command.spawn())
    };
    let (program, spawned) = spawn(isolate);
    let mut child = match spawned {
        Ok(child) => {
            if isolate {
                ISOLATION.store(1, Ordering::Relaxed);
            }
            child
        }
        Err(error) if isolate && is_isolation_error(&error) => {
            if limits.network == NetworkIsolation::Required {
                return Err(ProcessError::Isolation { program, error });
            }
            if ISOLATION.swap(2, Ordering::Relaxed) != 2 {
                tracing::warn!(%error, "renders run without a network namespace of their own: this system does not permit one (they are offline by construction: remote references are refused before a render starts)");
            }
            spawn(false).1.map_err(|error| ProcessError::Spawn {
                program: program.clone(),
                error,
            })?
        }
        Err(error) => return Err(ProcessError::Spawn { program, error }),
    };
    let pid = child.id() as libc::pid_t;

    let feeder = match (child.stdin.take(), stdin) {
        (Some(mut pipe), Some(bytes)) => Some(std::thread::spawn(move || {
            // A child that exits without reading all of it is judged by its exit status.
            let _ = pipe.write_all(&bytes);
        })),
        _ => None,
    };
    let overflow = Arc::new(AtomicBool::new(false));
    let stdout = child.stdout.take().map(|mut pipe| {
        let overflow = overflow.clone();
        let cap = limits.output_bytes;
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            let mut buffer = [0u8; 64 * 1024];
            loop {
                match pipe.read(&mut buffer) {
                    Ok(0) | Err(_) => break,
                    Ok(read) => {
                        if kept.len() + read > cap {
                            overflow.store(true, Ordering::Relaxed);
                            // SAFETY: the group's leader is not reaped before this thread is
                            // joined, so the group id still names this render's processes.
                            unsafe { libc::kill(-pid, libc::SIGKILL) };
                            break;
                        }
                        kept.extend_from_slice(&buffer[..read]);
                    }
                }
            }
            kept
        })
    });
    let stderr = child.stderr.take().map(|mut pipe| {
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            let mut buffer = [0u8; 16 * 1024];
            loop {
                match pipe.read(&mut buffer) {
                    Ok(0) | Err(_) => break,
                    Ok(read) => {
                        let room = STDERR_KEPT.saturating_sub(kept.len());
                        kept.extend_from_slice(&buffer[..read.min(room)]);
                    }
                }
            }
            String::from_utf8_lossy(&kept).into_owned()
        })
    });

    let (exited_tx, exited_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = exited_tx.send(wait_without_reaping(pid));
    });
    let timed_out = match exited_rx.recv_timeout(limits.timeout) {
        Ok(_) => false,
        Err(_) => {
            // SAFETY: the leader is not reaped yet (the waiter does not reap), so the group
            // id is still this render's.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            // SIGKILL cannot be caught: the exit follows promptly.
            let _ = exited_rx.recv_timeout(Duration::from_secs(30));
            true
        }
    };
    // Whatever the leader left running in its group (kubectl's helpers) goes with it.
    // SAFETY: as above; the leader is a zombie at worst, still holding the group id.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    if let Some(feeder) = feeder {
        let _ = feeder.join();
    }
    let stdout = stdout
        .map(|reader| reader.join().unwrap_or_default())
        .unwrap_or_default();
    let stderr = stderr
        .map(|reader| reader.join().unwrap_or_default())
        .unwrap_or_default();
    let status = child.wait().map_err(|error| ProcessError::Wait {
        program: program.clone(),
        error,
    })?;
    if timed_out {
        return Err(ProcessError::Timeout {
            program,
            after: limits.timeout,
        });
    }
    if overflow.load(Ordering::Relaxed) {
        return Err(ProcessError::OutputTooLarge {
            program,
            limit: limits.output_bytes,
        });
    }
    if let Some(signal) = std::os::unix::process::ExitStatusExt::signal(&status) {
        let hint = if signal == libc::SIGKILL || signal == libc::SIGSEGV || signal == libc::SIGABRT
        {
            " (it may have run out of its render memory limit)"
        } else {
            ""
        };
        return Err(ProcessError::Killed {
            program,
            signal,
            hint,
        });
    }
    Ok(Finished {
        status,
        stdout,
        stderr,
    })
}

/// Blocks until `pid` has exited, leaving it to be reaped by `Child::wait`.
fn wait_without_reaping(pid: libc::pid_t) -> std::io::Result<()> {
    loop {
        // SAFETY: `info` is a plain struct the kernel fills in.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let result = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if result == 0 {
            return Ok(());
        }
        let error = std::io::Error::last_os_error();
        if error.kind() != std::io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// The errors `unshare` gives where namespaces are not permitted.
fn is_isolation_error(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EPERM | libc::EINVAL | libc::ENOSPC | libc::EUSERS | libc::ENOSYS)
    )
}

/// In the child, between fork and exec.
fn prepare_child(memory_bytes: u64, isolate: bool) -> std::io::Result<()> {
    let check = |result: libc::c_int| {
        if result == -1 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    // SAFETY: plain system calls on this (single-threaded, just forked) process.
    unsafe {
        check(libc::setpgid(0, 0))?;
        check(libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
        ))?;
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        check(libc::setrlimit(libc::RLIMIT_CORE, &no_core))?;
        let memory = libc::rlimit {
            rlim_cur: memory_bytes as libc::rlim_t,
            rlim_max: memory_bytes as libc::rlim_t,
        };
        check(libc::setrlimit(libc::RLIMIT_AS, &memory))?;
        if isolate {
            let flags = if libc::geteuid() == 0 {
                libc::CLONE_NEWNET
            } else {
                libc::CLONE_NEWUSER | libc::CLONE_NEWNET
            };
            check(libc::unshare(flags))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(script: &str) -> impl Fn() -> Command {
        let script = script.to_owned();
        move || {
            let mut command = Command::new("/bin/sh");
            command.arg("-c").arg(&script);
            command
        }
    }

    fn limits() -> ProcessLimits {
        ProcessLimits {
            timeout: Duration::from_secs(20),
            ..ProcessLimits::default()
        }
    }

    #[test]
    fn output_and_input_pass_through() {
        let finished = run(
            &shell("cat; echo oops >&2"),
            Some(b"hello".to_vec()),
            &limits(),
        )
        .expect("cat runs");
        assert!(finished.status.success());
        assert_eq!(finished.stdout, b"hello");
        assert_eq!(finished.stderr, "oops\n");
    }

    #[test]
    fn a_process_past_its_time_limit_is_killed_with_its_group() {
        let limits = ProcessLimits {
            timeout: Duration::from_millis(300),
            ..limits()
        };
        // The background sleeper holds stdout open: only a group kill ends the read.
        let started = std::time::Instant::now();
        let error = run(&shell("sleep 600 & sleep 600"), None, &limits).unwrap_err();
        assert!(matches!(error, ProcessError::Timeout { .. }), "{error}");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "took {:?}",
            started.elapsed()
        );
    }

    #[test]
    fn output_over_the_cap_kills_the_process() {
        let limits = ProcessLimits {
            output_bytes: 4096,
            ..limits()
        };
        let error = run(&shell("yes"), None, &limits).unwrap_err();
        assert!(
            matches!(error, ProcessError::OutputTooLarge { limit: 4096, .. }),
            "{error}"
        );
    }

    #[test]
    fn the_memory_limit_holds_in_the_child() {
        let limits = ProcessLimits {
            memory_bytes: 300 << 20,
            ..limits()
        };
        let finished = run(&shell("ulimit -v"), None, &limits).expect("sh runs");
        assert_eq!(
            String::from_utf8_lossy(&finished.stdout).trim(),
            (300 * 1024).to_string()
        );
    }

    /// As root (CI, the container) the namespace is always permitted, so this is checked
    /// there; elsewhere it depends on the system's user-namespace policy.
    #[test]
    fn renders_have_no_network_of_their_own() {
        // SAFETY: a plain system call.
        let root = unsafe { libc::geteuid() } == 0;
        let limits = ProcessLimits {
            network: if root {
                NetworkIsolation::Required
            } else {
                NetworkIsolation::BestEffort
            },
            ..limits()
        };
        let finished = run(&shell("cat /proc/net/dev"), None, &limits).expect("cat runs");
        let interfaces = String::from_utf8_lossy(&finished.stdout).into_owned();
        let names: Vec<&str> = interfaces
            .lines()
            .skip(2)
            .filter_map(|line| line.split(':').next())
            .map(str::trim)
            .collect();
        if root || ISOLATION.load(Ordering::Relaxed) == 1 {
            // A fresh namespace holds only its own loopback, down.
            assert_eq!(names, ["lo"], "{interfaces}");
        }
    }

    #[test]
    fn limits_are_validated() {
        assert!(ProcessLimits::default().validate().is_ok());
        let zero = ProcessLimits {
            timeout: Duration::ZERO,
            ..ProcessLimits::default()
        };
        assert!(zero.validate().is_err());
        assert_eq!(
            "best-effort".parse::<NetworkIsolation>(),
            Ok(NetworkIsolation::BestEffort)
        );
        assert!("sometimes".parse::<NetworkIsolation>().is_err());
    }
}

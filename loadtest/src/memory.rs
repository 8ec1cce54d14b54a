//! What the benches read of a process's memory and CPU: the kernel's figures from `/proc`
//! (peak and current resident set, anonymous against file-backed pages, CPU seconds) and, for
//! `starling node` processes, the allocator's own figures from `/metrics`
//! (`starling_allocator_bytes`), sampled over a run by [`MemorySampler`].
//!
//! The breakdown says where a peak comes from: the binary's code (file-backed pages, the same
//! for any fleet), the heap the program holds (the allocator's `allocated`) and what the
//! allocator keeps resident beyond it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::Proc;
use crate::fleet_rollout::http_get;

/// Peak resident set (`VmHWM`) of a process, in MiB.
pub(crate) fn peak_rss_mib(pid: u32) -> Option<f64> {
    proc_status_mib(pid, "VmHWM:")
}

/// Current resident set (`VmRSS`) of a process, in MiB.
pub(crate) fn rss_mib(pid: u32) -> Option<f64> {
    proc_status_mib(pid, "VmRSS:")
}

/// CPU time a process and its reaped children (render engines) used, in seconds: utime,
/// stime, cutime and cstime of `/proc/PID/stat` at the kernel's 100 ticks per second.
pub(crate) fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count fields after its closing parenthesis.
    let after = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the name: state is field 3, so utime (14) .. cstime (17) are at 11..=14 here.
    let ticks: f64 = fields
        .get(11..=14)?
        .iter()
        .map(|field| field.parse::<f64>().unwrap_or(0.0))
        .sum();
    Some(ticks / 100.0)
}

fn proc_status_mib(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status_field_mib(&status, field)
}

fn status_field_mib(status: &str, field: &str) -> Option<f64> {
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// One node's memory at one moment, in MiB.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub(crate) struct Breakdown {
    /// The resident set (`VmRSS`).
    pub rss: f64,
    /// Its anonymous pages (`RssAnon`): the heap, stacks, the allocator's caches.
    pub anon: f64,
    /// Its file-backed pages (`RssFile`): the binary's code and the libraries it touched.
    pub file: f64,
    /// What the program holds on the heap (the allocator's `allocated`), when it reports it.
    pub heap: Option<f64>,
    /// What the allocator keeps resident (its `resident`, metadata included).
    pub allocator_resident: Option<f64>,
}

/// The allocator's `allocated` and `resident` from a node's `/metrics` text, in MiB.
fn allocator_mib(metrics: &str) -> (Option<f64>, Option<f64>) {
    let value = |kind: &str| {
        let prefix = format!("starling_allocator_bytes{{kind=\"{kind}\"}} ");
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|bytes| bytes / (1024.0 * 1024.0))
    };
    (value("allocated"), value("resident"))
}

/// What a run's samples say of one node's memory.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub(crate) struct NodeMemory {
    /// The breakdown at the sample of highest resident set.
    pub at_peak: Breakdown,
    /// The largest heap any sample saw.
    pub largest_heap: Option<f64>,
}

impl NodeMemory {
    /// One line for the bench's output.
    pub(crate) fn describe(&self) -> String {
        let mib = |value: Option<f64>| value.map_or("?".to_owned(), |v| format!("{v:.0}"));
        let peak = &self.at_peak;
        format!(
            "at its highest sample {:.0} MiB resident: {:.0} anonymous (heap {} MiB, the \
             allocator's resident {} MiB), {:.0} file-backed (the binary's code); largest heap {} MiB",
            peak.rss,
            peak.anon,
            mib(peak.heap),
            mib(peak.allocator_resident),
            peak.file,
            mib(self.largest_heap),
        )
    }
}

/// Each node's resident memory over a run, sampled by a task of this process: the "memory per
/// node over time" chart. Bounded: when [`MemorySampler::MAX_SAMPLES`] are kept, every other
/// one is dropped and the period doubles, so a run of any length keeps its whole shape. Beside
/// the chart's samples it keeps, per node, the breakdown at its highest sample.
pub(crate) struct MemorySampler {
    samples: std::sync::Arc<std::sync::Mutex<Vec<(f64, u64, f64)>>>,
    nodes: std::sync::Arc<std::sync::Mutex<BTreeMap<u64, NodeMemory>>>,
    task: tokio::task::JoinHandle<()>,
}

impl MemorySampler {
    const MAX_SAMPLES: usize = 20_000;

    /// Samples the processes of `procs` as they are now (a node started again later has
    /// another pid and is not followed).
    pub(crate) fn start(procs: &BTreeMap<u64, Proc>) -> MemorySampler {
        let watched: Vec<(u64, u32, String)> = procs
            .iter()
            .map(|(id, p)| (*id, p.child.id(), p.http.clone()))
            .collect();
        let samples = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let nodes = std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::new()));
        let (kept, kept_nodes) = (samples.clone(), nodes.clone());
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let mut period = Duration::from_secs(1);
            loop {
                let at = started.elapsed().as_secs_f64();
                let mut round = Vec::with_capacity(watched.len());
                for (node, pid, http) in &watched {
                    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
                        continue;
                    };
                    let (heap, allocator_resident) = match http_get(http, "/metrics").await {
                        Ok(text) => allocator_mib(&text),
                        Err(_) => (None, None),
                    };
                    let field = |name| status_field_mib(&status, name).unwrap_or(0.0);
                    round.push((
                        *node,
                        Breakdown {
                            rss: field("VmRSS:"),
                            anon: field("RssAnon:"),
                            file: field("RssFile:"),
                            heap,
                            allocator_resident,
                        },
                    ));
                }
                {
                    let mut nodes = kept_nodes.lock().unwrap_or_else(|e| e.into_inner());
                    for (node, breakdown) in &round {
                        let memory = nodes.entry(*node).or_insert_with(NodeMemory::default);
                        if breakdown.rss > memory.at_peak.rss {
                            memory.at_peak = *breakdown;
                        }
                        if let Some(heap) = breakdown.heap {
                            memory.largest_heap =
                                Some(memory.largest_heap.unwrap_or(0.0).max(heap));
                        }
                    }
                }
                {
                    let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
                    kept.extend(round.iter().map(|(node, b)| (at, *node, b.rss)));
                    if kept.len() >= Self::MAX_SAMPLES {
                        let mut index = 0;
                        // Whole rounds (one sample per node) are kept or dropped together.
                        let round = watched.len().max(1);
                        kept.retain(|_| {
                            index += 1;
                            ((index - 1) / round).is_multiple_of(2)
                        });
                        period *= 2;
                    }
                }
                tokio::time::sleep(period).await;
            }
        });
        MemorySampler {
            samples,
            nodes,
            task,
        }
    }

    /// The samples so far: (seconds since the start, node, MiB).
    pub(crate) fn samples(&self) -> Vec<(f64, u64, f64)> {
        self.samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// What the samples so far say of `node`'s memory.
    pub(crate) fn node(&self, node: u64) -> Option<NodeMemory> {
        self.nodes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&node)
            .copied()
    }
}

impl Drop for MemorySampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allocator_figures_are_read_from_metrics() {
        let text = "# HELP starling_allocator_bytes x\n\
                    starling_allocator_bytes{kind=\"allocated\"} 104857600\n\
                    starling_allocator_bytes{kind=\"resident\"} 157286400\n";
        assert_eq!(allocator_mib(text), (Some(100.0), Some(150.0)));
        assert_eq!(allocator_mib("starling_raft_term 3\n"), (None, None));
    }

    #[test]
    fn status_fields_are_read_in_mib() {
        let status = "Name:\tx\nVmRSS:\t  204800 kB\nRssAnon:\t  102400 kB\n";
        assert_eq!(status_field_mib(status, "VmRSS:"), Some(200.0));
        assert_eq!(status_field_mib(status, "RssAnon:"), Some(100.0));
        assert_eq!(status_field_mib(status, "RssFile:"), None);
    }
}

//! Helm: Helm's own engine (Helm v4, in `libhelm_c.so`) renders the chart at a Sync's path,
//! in a render worker process, so that what a cluster gets is what `helm template` gives.
//!
//! ```text
//! replica                                          render worker (own process, limits)
//!  values layers (values.rs, substituted)  ──stdin──►  load libhelm_c, merge, pre-flight,
//!  chart on disk (scratch copy)                        render, CRDs, parse documents
//!  objects ◄── origins mapped to the source ◄─stdout── templates + crds as JSON documents
//! ```
//!
//! The release name defaults to the Sync's name (a SyncGroup's Syncs: the group's), the
//! namespace to `default`; `.Capabilities.KubeVersion` is the target's version when the caller
//! knows it; `lookup` returns nothing, as in `helm template`. Nothing is downloaded: a chart's
//! dependencies must be vendored under `charts/`, and a missing one fails the render with
//! Helm's own message.

mod ffi;
pub mod library;
pub(crate) mod protocol;
pub(crate) mod values;
pub mod worker;

use std::path::Path;
use std::process::Command;

use protocol::{Outcome, Output, PROTOCOL, Stage, WorkerRequest, WorkerResponse};

pub use protocol::{EngineVersion, LayerContent, ValuesLayer};
pub use values::ValuesDocument;

use crate::RenderError;
use crate::engines::Engines;
use crate::process;

/// One chart render, as the worker is asked for it.
pub(crate) struct ChartRequest<'a> {
    /// The chart's directory on disk.
    pub chart_dir: &'a Path,
    /// The chart's path in the source, for messages and origins.
    pub chart_path: &'a str,
    pub release: &'a str,
    pub namespace: &'a str,
    pub kube_version: Option<&'a str>,
    pub values: Vec<ValuesLayer>,
    /// The scratch directory, taken out of the engine's messages.
    pub scratch: Option<&'a Path>,
}

/// Renders a chart in a worker process.
pub(crate) fn render_chart(
    engines: &Engines,
    request: ChartRequest<'_>,
) -> Result<Output, RenderError> {
    let library = library::find_library(engines.helm_library.as_deref())?;
    let engine_error = |message: String| RenderError::Engine {
        engine: "helm",
        subject: display_path(request.chart_path),
        message,
    };
    let body = serde_json::to_vec(&WorkerRequest {
        protocol: PROTOCOL,
        library,
        chart_dir: request.chart_dir.to_path_buf(),
        release: request.release.to_owned(),
        namespace: request.namespace.to_owned(),
        kube_version: request.kube_version.map(str::to_owned),
        values: request.values,
    })
    .map_err(|error| engine_error(format!("cannot write the worker's request: {error}")))?;
    let command = || {
        let mut command = Command::new(&engines.worker.program);
        command
            .args(&engines.worker.args)
            .env_clear()
            .env("LANG", "C")
            .current_dir(request.chart_dir);
        // The worker logs nothing of interest; Go's runtime reads these if present.
        for variable in ["PATH", "GODEBUG", "GOMAXPROCS"] {
            if let Some(value) = std::env::var_os(variable) {
                command.env(variable, value);
            }
        }
        command
    };
    let finished = process::run(&command, Some(body), &engines.limits)
        .map_err(|error| engine_error(error.to_string()))?;
    let response: WorkerResponse = match serde_json::from_slice(&finished.stdout) {
        Ok(response) => response,
        Err(error) => {
            let stderr = finished.stderr.trim();
            let tail: String = stderr
                .char_indices()
                .rev()
                .nth(2000)
                .map_or(stderr, |(index, _)| &stderr[index..])
                .to_owned();
            return Err(engine_error(format!(
                "the render worker ({}) gave no answer (exit {}, {error}){}{}",
                engines.worker.program.display(),
                finished.status,
                if tail.is_empty() { "" } else { ": " },
                tail
            )));
        }
    };
    if response.protocol != PROTOCOL {
        return Err(engine_error(format!(
            "the render worker speaks protocol {}, this replica {PROTOCOL}: it is from another build",
            response.protocol
        )));
    }
    match response.outcome {
        Outcome::Rendered(output) => Ok(output),
        Outcome::Failed(failure) => {
            let message = scrub(&failure.message, request.scratch);
            Err(match failure.stage {
                Stage::Values => RenderError::Values {
                    what: "the chart's values".to_owned(),
                    message,
                },
                _ => engine_error(message),
            })
        }
    }
}

fn display_path(path: &str) -> String {
    if path.is_empty() {
        ".".to_owned()
    } else {
        path.to_owned()
    }
}

/// The scratch directory taken out of an engine message.
fn scrub(message: &str, scratch: Option<&Path>) -> String {
    let Some(scratch) = scratch else {
        return message.to_owned();
    };
    let text = scratch.display().to_string();
    if text.is_empty() || text == "/" {
        return message.to_owned();
    }
    message.replace(&format!("{text}/"), "").replace(&text, ".")
}

/// The worker command line, as the `starling` binary runs it: `starling render-worker`.
pub const WORKER_SUBCOMMAND: &str = "render-worker";

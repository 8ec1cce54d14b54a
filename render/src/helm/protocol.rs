//! What the replica and its render worker say to each other: one JSON request on the worker's
//! standard input, one JSON response on its standard output. Versioned, since a replica may
//! run a worker binary of another build during an upgrade.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol version both sides must speak.
pub(crate) const PROTOCOL: u32 = 1;

/// One chart to render.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct WorkerRequest {
    pub protocol: u32,
    /// `libhelm_c.so`, found by the replica.
    pub library: PathBuf,
    /// The chart's directory (in the render's scratch copy of the source).
    pub chart_dir: PathBuf,
    pub release: String,
    pub namespace: String,
    /// `.Capabilities.KubeVersion`; the engine's default when `None`.
    #[serde(default)]
    pub kube_version: Option<String>,
    /// Merged in order over the chart's `values.yaml`, as `helm -f` merges files.
    pub values: Vec<ValuesLayer>,
}

/// One values document, already substituted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ValuesLayer {
    /// Where it came from, for messages: `values/prod.yaml`, `helm.values`, …
    pub origin: String,
    #[serde(flatten)]
    pub content: LayerContent,
}

/// A values document as YAML text (parsed by Helm's own YAML reader in the worker) or as a
/// JSON object (from the Sync's spec).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LayerContent {
    Yaml(String),
    Json(Value),
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct WorkerResponse {
    pub protocol: u32,
    pub outcome: Outcome,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Outcome {
    Rendered(Output),
    Failed(Failure),
}

/// The chart's templates and CRDs, each split into documents and parsed by Helm's YAML
/// reader, as `helm install` reads them.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Output {
    /// Sorted by template path (`<chart>/templates/…`, `<chart>/charts/<sub>/templates/…`);
    /// `NOTES.txt` left out.
    pub templates: Vec<RenderedFile>,
    /// The `crds/` files of the chart and its enabled subcharts.
    pub crds: Vec<RenderedFile>,
    pub engine: EngineVersion,
}

impl Output {
    /// About how many bytes it takes (its JSON size), for the render cache's bound.
    pub fn size(&self) -> usize {
        serde_json::to_vec(self).map_or(0, |bytes| bytes.len())
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct RenderedFile {
    /// As the engine names it: `<chart name>/templates/deploy.yaml`.
    pub path: String,
    pub documents: Vec<Document>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Document {
    /// 1-based, counting the file's empty documents too.
    pub index: usize,
    pub object: Value,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineVersion {
    pub helm_c: String,
    pub helm_sdk: String,
}

/// Why the worker could not render.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Failure {
    pub stage: Stage,
    /// The library's status code (0 when the failure is not the library's).
    pub code: i32,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Stage {
    Request,
    Library,
    Values,
    Preflight,
    Render,
    Parse,
}

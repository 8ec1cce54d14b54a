//! The render worker: a short-lived process (`starling render-worker`, or this crate's
//! `starling-render-worker` binary) that loads Helm's engine, renders one chart and exits. The
//! replica never loads the library itself: it carries a Go runtime, and a chart that loops or
//! balloons must cost one killed process, not a replica.
//!
//! ```text
//! stdin: WorkerRequest ─► load libhelm_c ─► values: each layer parsed by Helm's YAML reader,
//!   merged in order (maps merge, anything else replaces, as `helm -f`)
//!   ─► pre-flight: a client-side dry-run install (dependencies present, Chart.yaml
//!      kubeVersion, release name, values schema, YAML of the output) on its own chart handle
//!   ─► render on a fresh handle (rendering prunes disabled subcharts from it), then its CRDs
//!   ─► every template and CRD file split into documents, each parsed by Helm's YAML reader
//! stdout: WorkerResponse
//! ```

use std::io::{Read, Write};
use std::process::ExitCode;

use serde_json::{Map, Value, json};

use super::ffi::{CallError, HelmLibrary};
use super::protocol::{
    Document, EngineVersion, Failure, LayerContent, Outcome, Output, PROTOCOL, RenderedFile, Stage,
    WorkerRequest, WorkerResponse,
};

/// The largest request the worker reads (values documents are bounded by the source's read
/// limits; this is a backstop).
const MAX_REQUEST_BYTES: u64 = 512 << 20;

/// Used only by the dry-run install, which swaps in fake clients and never dials it; loopback,
/// so that a mistake could not leave the machine (and the worker has no network anyway).
const OFFLINE_KUBECONFIG: &str = "apiVersion: v1
kind: Config
clusters: [{name: offline, cluster: {server: \"https://127.0.0.1:1\"}}]
contexts: [{name: offline, context: {cluster: offline, user: offline}}]
users: [{name: offline, user: {token: offline}}]
current-context: offline
";

/// The worker's `main`: one request from stdin, one response on stdout. Exits 0 whenever it
/// could answer (a failed render is an answer), 2 when it could not.
pub fn worker_main() -> ExitCode {
    let mut input = Vec::new();
    let read = std::io::stdin()
        .take(MAX_REQUEST_BYTES)
        .read_to_end(&mut input);
    let outcome = match read {
        Err(error) => failed(
            Stage::Request,
            0,
            format!("cannot read the request: {error}"),
        ),
        Ok(_) => match serde_json::from_slice::<WorkerRequest>(&input) {
            Err(error) => failed(Stage::Request, 0, format!("unreadable request: {error}")),
            Ok(request) if request.protocol != PROTOCOL => failed(
                Stage::Request,
                0,
                format!(
                    "the request speaks protocol {}, this worker {PROTOCOL}: the worker binary is from another build",
                    request.protocol
                ),
            ),
            Ok(request) => render(&request),
        },
    };
    let response = WorkerResponse {
        protocol: PROTOCOL,
        outcome,
    };
    let mut stdout = std::io::stdout().lock();
    let written = serde_json::to_writer(&mut stdout, &response)
        .map_err(std::io::Error::other)
        .and_then(|()| stdout.flush());
    if written.is_err() {
        return ExitCode::from(2);
    }
    ExitCode::SUCCESS
}

fn failed(stage: Stage, code: i32, message: String) -> Outcome {
    Outcome::Failed(Failure {
        stage,
        code,
        message,
    })
}

fn call_failed(stage: Stage, error: CallError) -> Outcome {
    failed(stage, error.code, error.message)
}

/// The Helm CLI's merge of `-f` files: maps merge key by key, anything else replaces.
pub(crate) fn merge_values(base: &mut Map<String, Value>, layer: Map<String, Value>) {
    for (key, value) in layer {
        match (base.get_mut(&key), value) {
            (Some(Value::Object(existing)), Value::Object(incoming)) => {
                merge_values(existing, incoming)
            }
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

fn render(request: &WorkerRequest) -> Outcome {
    let library = match HelmLibrary::load(&request.library) {
        Ok(library) => library,
        Err(message) => return failed(Stage::Library, 0, message),
    };
    let (helm_c, helm_sdk) = library.versions();

    let mut values = Map::new();
    for layer in &request.values {
        let parsed = match &layer.content {
            LayerContent::Json(value) => value.clone(),
            LayerContent::Yaml(text) => {
                let json = match library.values_from_yaml(text) {
                    Ok(json) => json,
                    Err(error) => {
                        return failed(
                            Stage::Values,
                            error.code,
                            format!("values from {}: {}", layer.origin, error.message),
                        );
                    }
                };
                match serde_json::from_str(&json) {
                    Ok(value) => value,
                    Err(error) => {
                        return failed(
                            Stage::Values,
                            0,
                            format!("values from {}: {error}", layer.origin),
                        );
                    }
                }
            }
        };
        match parsed {
            Value::Object(map) => merge_values(&mut values, map),
            Value::Null => {}
            _ => {
                return failed(
                    Stage::Values,
                    -22,
                    format!("values from {} are not a map", layer.origin),
                );
            }
        }
    }
    let values_json = Value::Object(values).to_string();

    let mut render_options = json!({
        "name": request.release,
        "namespace": request.namespace,
        "is_install": true,
    });
    let mut install_options = json!({"dry_run": "client", "namespace": request.namespace});
    if let Some(version) = &request.kube_version {
        render_options["kube_version"] = json!(version);
        install_options["kube_version"] = json!(version);
    }

    // helm_render skips `helm template`'s pre-flight; a client-side dry-run install runs it
    // with the same engine. Each step gets its own chart handle: a render prunes disabled
    // subcharts from the handle it renders.
    let preflight = library
        .config(
            &json!({"kubeconfig_content": OFFLINE_KUBECONFIG, "storage_driver": "memory"})
                .to_string(),
        )
        .and_then(|config| {
            let chart = library.load_chart(&request.chart_dir)?;
            chart.dry_run_install(
                &config,
                &request.release,
                &values_json,
                &install_options.to_string(),
            )
        });
    if let Err(error) = preflight {
        return call_failed(Stage::Preflight, error);
    }
    let chart = match library.load_chart(&request.chart_dir) {
        Ok(chart) => chart,
        Err(error) => return call_failed(Stage::Render, error),
    };
    let rendered = match chart.render(&values_json, &render_options.to_string()) {
        Ok(rendered) => rendered,
        Err(error) => return call_failed(Stage::Render, error),
    };
    // After the render the handle holds only the enabled subcharts: their CRDs are the set
    // `helm install` applies.
    let crds = match chart.crds() {
        Ok(crds) => crds,
        Err(error) => return call_failed(Stage::Render, error),
    };
    let templates: std::collections::BTreeMap<String, String> =
        match serde_json::from_str(&rendered) {
            Ok(templates) => templates,
            Err(error) => {
                return failed(
                    Stage::Render,
                    0,
                    format!("unreadable render output: {error}"),
                );
            }
        };
    let crd_files: Vec<Value> = match serde_json::from_str(&crds) {
        Ok(files) => files,
        Err(error) => return failed(Stage::Render, 0, format!("unreadable crds: {error}")),
    };

    let mut output = Output {
        engine: EngineVersion { helm_c, helm_sdk },
        ..Output::default()
    };
    for (path, text) in &templates {
        if path.ends_with("NOTES.txt") {
            continue;
        }
        match parse_file(&library, path, text) {
            Ok(file) => output.templates.push(file),
            Err(outcome) => return outcome,
        }
    }
    for file in &crd_files {
        let path = file["filename"].as_str().unwrap_or_default();
        let data = file["data"].as_str().unwrap_or_default();
        match parse_file(&library, path, data) {
            Ok(file) => output.crds.push(file),
            Err(outcome) => return outcome,
        }
    }
    Outcome::Rendered(output)
}

/// Helm's `releaseutil.SplitManifests`: a document starts at every line that begins with
/// `---`; the rest of that line (after blanks) belongs to it.
pub(crate) fn split_manifests(text: &str) -> Vec<&str> {
    let mut documents = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if let Some(rest) = line.strip_prefix("---") {
            documents.push(&text[start..offset]);
            let blanks = rest.len() - rest.trim_start().len();
            start = offset + 3 + blanks.min(rest.len());
        }
        offset += line.len();
    }
    documents.push(&text[start..]);
    documents
}

/// One template or CRD file: its non-empty documents, each parsed by Helm's YAML reader.
fn parse_file(library: &HelmLibrary, path: &str, text: &str) -> Result<RenderedFile, Outcome> {
    let mut documents = Vec::new();
    for (index, document) in split_manifests(text).into_iter().enumerate() {
        if document.trim().is_empty() {
            continue;
        }
        let json = library.values_from_yaml(document).map_err(|error| {
            failed(
                Stage::Parse,
                error.code,
                format!(
                    "YAML parse error on {path} (document {}): {}",
                    index + 1,
                    error.message
                ),
            )
        })?;
        let object: Value = serde_json::from_str(&json).map_err(|error| {
            failed(
                Stage::Parse,
                0,
                format!(
                    "YAML parse error on {path} (document {}): {error}",
                    index + 1
                ),
            )
        })?;
        // Only comments: nothing to apply.
        if object.as_object().is_some_and(Map::is_empty) {
            continue;
        }
        documents.push(Document {
            index: index + 1,
            object,
        });
    }
    Ok(RenderedFile {
        path: path.to_owned(),
        documents,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_split_as_helm_splits_them() {
        let text =
            "# Source: x\napiVersion: v1\n---\nkind: A\n--- # trailing comment\nkind: B\n---\n\n";
        let documents = split_manifests(text);
        assert_eq!(
            documents,
            [
                "# Source: x\napiVersion: v1\n",
                "kind: A\n",
                "# trailing comment\nkind: B\n",
                "\n"
            ]
        );
        assert_eq!(split_manifests("---\nkind: A\n"), ["", "kind: A\n"]);
        assert_eq!(split_manifests("kind: A"), ["kind: A"]);
    }

    #[test]
    fn values_merge_as_the_helm_cli_merges_files() {
        let mut base =
            json!({"image": {"repo": "r", "tag": "1"}, "list": [1, 2], "gone": {"a": 1}})
                .as_object()
                .cloned()
                .expect("object");
        let layer = json!({"image": {"tag": "2"}, "list": [3], "gone": null, "new": true})
            .as_object()
            .cloned()
            .expect("object");
        merge_values(&mut base, layer);
        assert_eq!(
            Value::Object(base),
            json!({"image": {"repo": "r", "tag": "2"}, "list": [3], "gone": null, "new": true})
        );
    }
}

//! Post-renderers of a chart (`render.helm.postRenderers`): kustomize's own engine over Helm's
//! output, as Flux's helm-controller runs them.
//!
//! ```text
//! Helm output ─► templates' objects that are not hooks, in template-path order
//!             ─► scratch dir: helm-output.yaml + kustomization.yaml {resources, patches, images}
//!             ─► kubectl kustomize (the same limits as a Kustomize render)
//!             ─► the next post-renderer, … ─► the objects, in kustomize's order
//! crds/ and hooks ─► unchanged (Helm does not post-render them either)
//! ```
//!
//! The result is what the render cache keeps, so clusters that share their values share one
//! run of every post-renderer.

use std::path::Path;

use fleet::resources::PostRenderer;
use serde_json::{Value, json};

use crate::RenderError;
use crate::helm::protocol::{Document, Output, RenderedFile};
use crate::kustomize;
use crate::process::ProcessLimits;

/// The file the post-rendered objects are said to come from, under the chart's path.
pub(crate) const POST_RENDERED: &str = "helm/post-renderers";

/// `output` with its templates' objects (hooks aside) run through `renderers` in order.
pub(crate) fn post_render(
    kubectl: &Path,
    mut output: Output,
    renderers: &[PostRenderer],
    limits: &ProcessLimits,
) -> Result<Output, RenderError> {
    let mut objects = Vec::new();
    let mut hooks = Vec::new();
    for file in std::mem::take(&mut output.templates) {
        let (hook_documents, documents): (Vec<_>, Vec<_>) = file
            .documents
            .into_iter()
            .filter(|document| !document.object.is_null())
            .partition(|document| is_hook(&document.object));
        objects.extend(documents.into_iter().map(|document| document.object));
        if !hook_documents.is_empty() {
            hooks.push(RenderedFile {
                path: file.path,
                documents: hook_documents,
            });
        }
    }
    for (index, renderer) in renderers.iter().enumerate() {
        objects = run_one(kubectl, &objects, renderer, limits).map_err(|error| match error {
            RenderError::Engine {
                engine, message, ..
            } => RenderError::Engine {
                engine,
                subject: format!("render.helm.postRenderers[{index}]"),
                message,
            },
            other => other,
        })?;
    }
    let documents = objects
        .into_iter()
        .enumerate()
        .map(|(index, object)| Document {
            index: index + 1,
            object,
        })
        .collect();
    output.templates = std::iter::once(RenderedFile {
        path: POST_RENDERED.to_owned(),
        documents,
    })
    .chain(hooks)
    .collect();
    Ok(output)
}

fn is_hook(object: &Value) -> bool {
    object
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|annotations| annotations.contains_key("helm.sh/hook"))
}

/// One kustomize build over `objects`.
fn run_one(
    kubectl: &Path,
    objects: &[Value],
    renderer: &PostRenderer,
    limits: &ProcessLimits,
) -> Result<Vec<Value>, RenderError> {
    let failed = |message: String| RenderError::Engine {
        engine: "kustomize",
        subject: String::new(),
        message,
    };
    let scratch =
        tempfile::tempdir().map_err(|error| failed(format!("a scratch directory: {error}")))?;
    let mut input = String::new();
    for object in objects {
        input.push_str("---\n");
        input.push_str(
            &serde_yaml_ng::to_string(object)
                .map_err(|error| failed(format!("the chart's output as YAML: {error}")))?,
        );
    }
    let mut kustomization = json!({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["helm-output.yaml"],
    });
    let settings = &renderer.kustomize;
    if !settings.patches.is_empty() {
        kustomization["patches"] = json!(settings.patches);
    }
    if !settings.images.is_empty() {
        kustomization["images"] = json!(settings.images);
    }
    let write = |name: &str, text: &str| {
        std::fs::write(scratch.path().join(name), text)
            .map_err(|error| failed(format!("writing {name}: {error}")))
    };
    write("helm-output.yaml", &input)?;
    write("kustomization.yaml", &kustomization.to_string())?;
    let built = kustomize::build(kubectl, scratch.path(), "", limits)?;
    let mut out = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(&built) {
        let value = serde::Deserialize::deserialize(document)
            .map_err(|error: serde_yaml_ng::Error| failed(format!("kustomize printed: {error}")))?;
        if !matches!(value, Value::Null) {
            out.push(value);
        }
    }
    Ok(out)
}

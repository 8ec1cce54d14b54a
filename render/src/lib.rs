//! Render: from an artifact (or a directory) and a Sync's template, the objects to apply, by
//! one of three renderers: plain YAML, kustomize's own build, or Helm's own engine.
//!
//! ```text
//! artifact ─files::read_tree─► the tree (manifests, and every file name) ─► path checked
//!   ─detect (render.type, Auto: kustomization file → Kustomize, Chart.yaml → Helm, else Plain)
//!   Plain:     .yaml/.yml/.json under `path`, sorted ─► documents ─► substitute ─► objects
//!   Kustomize: whole tree copied to scratch ─► refuse remote/escaping entries
//!              ─► `kubectl kustomize` (process limits) ─► documents ─► substitute ─► objects
//!   Helm:      chart copied to scratch; values layers substituted (helm/values.rs)
//!              ─► render worker process (libhelm_c) ─► crds/ + templates as documents
//!              ─► objects, each hook annotated with its phase (hooks.rs)
//!   ─► check apiVersion, kind, metadata.name; refuse duplicates ─► Rendered
//! ```
//!
//! Plain manifests and Kustomize's output are substituted per document: a variable can stand
//! for any YAML scalar (`replicas: ${REPLICAS}` becomes a number). A YAML document annotated
//! `starling.dev/substitute: disabled` is taken literally (shell scripts in ConfigMaps).
//! Documents are numbered from 1 in their file, counting empty ones, so an error's number
//! matches what an editor shows; items of a `List` are numbered from 1 too. Helm output is not
//! substituted: variables go into its values, before the engine sees them.
//!
//! The engines run out of the caller's process with a time limit, a memory limit, an output
//! cap and no network ([`process`]); a failed render is an error that quotes the engine's
//! message, file and line included.

pub mod cache;
pub mod detect;
pub mod engines;
mod files;
pub mod helm;
pub mod hooks;
pub mod kustomize;
pub mod object;
mod parse;
mod post_render;
pub mod probe;
pub mod process;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use fleet::resources::{ObjectRef, RenderSpec, RenderType};
use fleet::vars::{ClusterContext, VarError};
use serde_json::Value;

use crate::cache::Cached;
use crate::object::{ObjectKey, describe};

pub use cache::{CacheStats, RenderCache};
pub use engines::{DEFAULT_CONCURRENT_RENDERS, EngineSlots, Engines, WorkerCommand};
pub use files::{
    ArtifactSource, MAX_VISIBLE_MANIFESTS, ManifestFile, ReadLimits, is_manifest, normalize_path,
    read_file, read_manifests,
};
pub use helm::ValuesDocument;
pub use hooks::{Hook, HookDeletePolicy, HookEvent, HookPhase};
pub use parse::SUBSTITUTE_ANNOTATION;
pub use process::{NetworkIsolation, ProcessLimits};

/// Where in the render an object came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// Path of the file, relative to the artifact's root.
    pub file: String,
    /// 1-based document index in the file.
    pub document: usize,
    /// 1-based item index inside a `kind: List` document.
    pub item: Option<usize>,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, document {}", self.file, self.document)?;
        if let Some(item) = self.item {
            write!(f, ", item {item}")?;
        }
        Ok(())
    }
}

/// One object to apply.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderedObject {
    pub origin: Origin,
    /// `apiVersion`, `kind`, namespace (as written; `None` when absent) and name.
    pub reference: ObjectRef,
    /// The manifest after substitution.
    pub manifest: Value,
    /// Set on a Helm hook: when it runs and what becomes of it. Hooks are applied around the
    /// release's objects, not with them.
    pub hook: Option<Hook>,
}

/// Why a render failed. Every error names the file and, inside it, the document.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath { path: String, reason: String },
    #[error("path {path:?} not found in the {artifact}")]
    PathNotFound { path: String, artifact: String },
    #[error("cannot read {what}: {message}")]
    Read { what: String, message: String },
    #[error("{message}")]
    Limit { message: String },
    #[error("{at}: {error}")]
    Variable { at: Origin, error: VarError },
    #[error("{at}: invalid {format}: {message}")]
    Syntax {
        at: Origin,
        format: &'static str,
        message: String,
    },
    #[error("{at}: the document is not an object")]
    NotAnObject { at: Origin },
    #[error("{at}: missing {field}")]
    MissingField { at: Origin, field: &'static str },
    #[error("{at}: a List must have an array of items")]
    BadList { at: Origin },
    #[error("{at}: duplicate object {object}, first defined in {first}")]
    Duplicate {
        at: Origin,
        object: String,
        first: Origin,
    },
    /// An engine (kubectl, the Helm library) is not installed where it was looked for.
    #[error("{engine} was not found; looked at: {}; {hint}", looked.join(", "))]
    EngineMissing {
        engine: &'static str,
        looked: Vec<String>,
        hint: String,
    },
    /// The engine refused the input; the message is the engine's own (file and line
    /// included when it names them).
    #[error("{engine} render of {subject} failed: {message}")]
    Engine {
        engine: &'static str,
        subject: String,
        message: String,
    },
    /// Refused before any engine ran: a remote base, a path leaving the source tree.
    #[error("refused: {message}")]
    Refused { message: String },
    #[error("{what}: {message}")]
    Values { what: String, message: String },
    /// The artifact's archive could not be opened: the store lost it. A failure of the source
    /// side, not of the input.
    #[error("cannot open {what}: {message}")]
    ArtifactGone { what: String, message: String },
}

impl RenderError {
    /// Where the error is, when it is inside a document.
    pub fn origin(&self) -> Option<&Origin> {
        match self {
            RenderError::Variable { at, .. }
            | RenderError::Syntax { at, .. }
            | RenderError::NotAnObject { at }
            | RenderError::MissingField { at, .. }
            | RenderError::BadList { at }
            | RenderError::Duplicate { at, .. } => Some(at),
            _ => None,
        }
    }
}

/// What to render: the Sync's `path`, `render` and `substitute`, the target cluster, and how
/// the engines run.
#[derive(Clone, Debug, Default)]
pub struct RenderOptions {
    pub path: Option<String>,
    /// The template's `render`; `Auto` when unset.
    pub spec: Option<RenderSpec>,
    pub variables: BTreeMap<String, String>,
    pub cluster: ClusterContext,
    pub limits: ReadLimits,
    /// `.Release.Name` when `render.helm.releaseName` is unset: the Sync's name, or its
    /// SyncGroup's.
    pub release_name: String,
    /// `.Capabilities.KubeVersion` (`v1.33.1`): the target's version; Helm's default when
    /// `None`.
    pub kube_version: Option<String>,
    /// The `valuesFrom` documents, in order, as the caller read them.
    pub values_from: Vec<ValuesDocument>,
    pub engines: Engines,
}

/// A render's objects, and how they were made.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    /// The renderer that ran (never `Auto`).
    pub renderer: RenderType,
    /// In render order: for Helm, the `crds/` files first, then the templates by path, hooks
    /// among them (marked). Apply order is the sync engine's business.
    pub objects: Vec<RenderedObject>,
    /// The namespace of namespaced objects that name none (Helm's release namespace, as
    /// `helm install -n` gives it); the target's default namespace when `None`.
    pub namespace: Option<String>,
}

impl Rendered {
    /// The objects that are not hooks.
    pub fn release_objects(&self) -> impl Iterator<Item = &RenderedObject> {
        self.objects.iter().filter(|object| object.hook.is_none())
    }

    /// The hooks Starling runs (install and upgrade hooks), in Helm's order: weight, then
    /// kind (Helm's install order), then name.
    pub fn hooks(&self) -> Vec<&RenderedObject> {
        let mut hooks: Vec<&RenderedObject> = self
            .objects
            .iter()
            .filter(|object| object.hook.as_ref().is_some_and(Hook::ever_runs))
            .collect();
        hooks.sort_by_key(|object| {
            (
                object.hook.as_ref().map_or(0, |hook| hook.weight),
                object::install_rank(&object.reference.kind),
                object.reference.name.clone(),
            )
        });
        hooks
    }
}

/// Renders the options' path with the renderer its spec (or its files) call for.
pub fn render(source: &ArtifactSource, options: &RenderOptions) -> Result<Rendered, RenderError> {
    prepare(source, options)?.render(options)
}

/// A source read and its renderer decided, not rendered yet: a caller that needs to know the
/// renderer first (the sync engine asks the target for its version only for Helm) renders in
/// two steps.
pub struct Prepared {
    source: ArtifactSource,
    tree: files::Tree,
    path: String,
    spec: RenderSpec,
    renderer: RenderType,
}

impl Prepared {
    /// The renderer that will run (never `Auto`).
    pub fn renderer(&self) -> RenderType {
        self.renderer
    }

    /// Renders; `options` are the ones given to [`prepare`], with `kube_version` and the like
    /// filled in since.
    pub fn render(self, options: &RenderOptions) -> Result<Rendered, RenderError> {
        let Prepared {
            source,
            tree,
            path,
            spec,
            renderer,
        } = self;
        match renderer {
            RenderType::Helm => render_helm(&source, &path, &spec, options),
            RenderType::Kustomize => render_kustomize(&source, &path, options),
            RenderType::Plain | RenderType::Auto => {
                let files = tree.manifests_under(&path)?;
                Ok(Rendered {
                    renderer: RenderType::Plain,
                    objects: render_files(&files, &options.variables, &options.cluster)?,
                    namespace: None,
                })
            }
        }
    }
}

/// Reads the source (its manifests, and every file's name), checks the path and decides the
/// renderer.
pub fn prepare(source: &ArtifactSource, options: &RenderOptions) -> Result<Prepared, RenderError> {
    let mut path = normalize_path(options.path.as_deref())?;
    let spec = options.spec.clone().unwrap_or_default();
    let tree = files::read_tree(source, false, &options.limits)?;
    // A chart archive (from a Helm repository or a registry) keeps its chart in one top
    // directory: a Sync that names no path renders that chart.
    if path.is_empty()
        && let Some(chart) = tree.packaged_chart()
    {
        path = chart.to_owned();
    }
    tree.check_path(&path, source)?;
    let renderer = detect::detect(spec.type_, tree.names_in(&path));
    if renderer != RenderType::Helm && (spec.helm.is_some() || !spec.overrides.is_empty()) {
        return Err(RenderError::Refused {
            message: format!(
                "render.helm and render.overrides are Helm settings, and {} renders with {} (no {} there)",
                shown(&path),
                renderer.as_str(),
                detect::CHART_FILE
            ),
        });
    }
    Ok(Prepared {
        source: source.clone(),
        tree,
        path,
        spec,
        renderer,
    })
}

fn shown(path: &str) -> &str {
    if path.is_empty() { "." } else { path }
}

/// The source on disk for an engine: a directory source as it is, an artifact's `tree`
/// written to a scratch directory (only `copy` under it; `""` for all). The scratch directory
/// lives as long as the returned guard.
fn on_disk(
    source: &ArtifactSource,
    tree: &files::Tree,
    copy: &str,
    options: &RenderOptions,
) -> Result<(std::path::PathBuf, Option<tempfile::TempDir>), RenderError> {
    if let ArtifactSource::Directory(dir) = source {
        // The engines run in other working directories: the path must be absolute.
        let dir = dir.canonicalize().map_err(|error| RenderError::Read {
            what: source.describe(),
            message: error.to_string(),
        })?;
        return Ok((dir, None));
    }
    let scratch = options
        .engines
        .scratch()
        .map_err(|error| RenderError::Read {
            what: "a scratch directory for the render".to_owned(),
            message: error.to_string(),
        })?;
    tree.write_to(copy, scratch.path())?;
    Ok((scratch.path().to_path_buf(), Some(scratch)))
}

/// A cached output of the other engine under a key: only an xxh3-128 collision does that.
fn cache_mixed_up() -> RenderError {
    RenderError::Read {
        what: "the render cache".to_owned(),
        message: "a cached output is of the other engine (a digest collision); render again"
            .to_owned(),
    }
}

fn render_kustomize(
    source: &ArtifactSource,
    path: &str,
    options: &RenderOptions,
) -> Result<Rendered, RenderError> {
    let kubectl = kustomize::find_kubectl(options.engines.kubectl.as_deref())?;
    let key = cache::key_of(cache::artifact_identity(source), &("kustomize", path));
    let output = options.engines.cache.get_or_render(key, || {
        // Bases may be anywhere in the tree: the whole tree is copied.
        let tree = files::read_tree(source, true, &options.limits)?;
        let (root, _scratch) = on_disk(source, &tree, "", options)?;
        let _slot = options
            .engines
            .slots
            .acquire(options.engines.limits.timeout)?;
        let yaml = kustomize::build(&kubectl, &root, path, &options.engines.limits)?;
        let bytes = yaml.len();
        Ok::<_, RenderError>((Cached::Kustomize(Arc::new(yaml)), bytes))
    })?;
    let Cached::Kustomize(yaml) = output else {
        return Err(cache_mixed_up());
    };
    // Substitution runs on the cached build, per cluster.
    let file = ManifestFile {
        path: format!("kustomize build {}", shown(path)),
        text: yaml.as_str().to_owned(),
    };
    Ok(Rendered {
        renderer: RenderType::Kustomize,
        objects: render_files(&[file], &options.variables, &options.cluster)?,
        namespace: None,
    })
}

/// Where an object of the engine's file `<chart name>/templates/x.yaml` is in the source:
/// `<path>/templates/x.yaml`.
fn source_path(chart_path: &str, engine_path: &str) -> String {
    let rest = engine_path
        .split_once('/')
        .map_or(engine_path, |(_, rest)| rest);
    if chart_path.is_empty() {
        rest.to_owned()
    } else {
        format!("{chart_path}/{rest}")
    }
}

fn render_helm(
    source: &ArtifactSource,
    path: &str,
    spec: &RenderSpec,
    options: &RenderOptions,
) -> Result<Rendered, RenderError> {
    let helm_spec = spec.helm.as_ref();
    let release = helm_spec
        .and_then(|helm| helm.release_name.clone())
        .unwrap_or_else(|| options.release_name.clone());
    if release.is_empty() {
        return Err(RenderError::Values {
            what: "render.helm.releaseName".to_owned(),
            message: "no release name: set it, or render for a named Sync".to_owned(),
        });
    }
    let namespace = helm_spec
        .and_then(|helm| helm.namespace.clone())
        .unwrap_or_else(|| "default".to_owned());
    let tree = files::read_tree(source, true, &options.limits)?;
    let layers = helm::values::layers(
        &helm::values::ValuesInputs {
            helm: helm_spec,
            overrides: &spec.overrides,
            values_from: &options.values_from,
            variables: &options.variables,
            cluster: &options.cluster,
        },
        &tree,
        path,
    )?;
    let key = cache::key_of(
        cache::artifact_identity(source),
        &(
            "helm",
            path,
            &release,
            &namespace,
            &options.kube_version,
            &layers,
            helm_spec.map(|helm| &helm.post_renderers),
        ),
    );
    let output = options.engines.cache.get_or_render(key, || {
        let (root, scratch) = on_disk(source, &tree, path, options)?;
        let chart_dir = helm::values::chart_directory(&root, path);
        let _slot = options
            .engines
            .slots
            .acquire(options.engines.limits.timeout)?;
        let output = helm::render_chart(
            &options.engines,
            helm::ChartRequest {
                chart_dir: &chart_dir,
                chart_path: path,
                release: &release,
                namespace: &namespace,
                kube_version: options.kube_version.as_deref(),
                values: layers,
                scratch: scratch
                    .as_ref()
                    .map(tempfile::TempDir::path)
                    .or(Some(Path::new(&root))),
            },
        )?;
        let post_renderers = helm_spec.map_or(&[][..], |helm| &helm.post_renderers);
        let output = if post_renderers.is_empty() {
            output
        } else {
            let kubectl = kustomize::find_kubectl(options.engines.kubectl.as_deref())?;
            post_render::post_render(&kubectl, output, post_renderers, &options.engines.limits)?
        };
        let bytes = output.size();
        Ok::<_, RenderError>((Cached::Helm(Arc::new(output)), bytes))
    })?;
    let Cached::Helm(output) = output else {
        return Err(cache_mixed_up());
    };
    let mut objects = Vec::new();
    for file in output.crds.iter().chain(output.templates.iter()) {
        let file_path = source_path(path, &file.path);
        let origin = |document: usize, item: Option<usize>| Origin {
            file: file_path.clone(),
            document,
            item,
        };
        for document in &file.documents {
            parse::collect(
                document.object.clone(),
                document.index,
                &origin,
                &mut objects,
            )?;
        }
    }
    for object in &mut objects {
        object.hook = Hook::of(&object.manifest);
    }
    check_duplicates(&objects)?;
    Ok(Rendered {
        renderer: RenderType::Helm,
        objects,
        namespace: Some(namespace),
    })
}

fn check_duplicates(objects: &[RenderedObject]) -> Result<(), RenderError> {
    let mut seen: HashMap<ObjectKey, &Origin> = HashMap::new();
    for object in objects {
        let key = ObjectKey::of(&object.reference);
        if let Some(first) = seen.get(&key) {
            return Err(RenderError::Duplicate {
                at: object.origin.clone(),
                object: describe(&object.reference),
                first: (*first).clone(),
            });
        }
        seen.insert(key, &object.origin);
    }
    Ok(())
}

/// Renders files already read (sorted by the caller).
pub fn render_files(
    files: &[ManifestFile],
    variables: &BTreeMap<String, String>,
    cluster: &ClusterContext,
) -> Result<Vec<RenderedObject>, RenderError> {
    let mut objects = Vec::new();
    for file in files {
        objects.extend(parse::render_file(file, variables, cluster)?);
    }
    check_duplicates(&objects)?;
    Ok(objects)
}

/// The objects as multi-document YAML, each preceded by a comment naming its origin.
pub fn to_yaml(objects: &[RenderedObject]) -> Result<String, serde_yaml_ng::Error> {
    let mut output = String::new();
    for object in objects {
        output.push_str("---\n# source: ");
        output.push_str(&object.origin.to_string());
        output.push('\n');
        output.push_str(&serde_yaml_ng::to_string(&object.manifest)?);
    }
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, text: &str) -> ManifestFile {
        ManifestFile {
            path: path.to_owned(),
            text: text.to_owned(),
        }
    }

    fn cluster() -> ClusterContext {
        ClusterContext {
            name: "edge-1".into(),
            namespace: "fleet".into(),
            labels: [("region".to_owned(), "eu".to_owned())].into(),
            annotations: BTreeMap::new(),
        }
    }

    #[test]
    fn duplicates_name_both_places() {
        let files = [
            file(
                "a.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
            ),
            file(
                "b.yaml",
                "---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
            ),
        ];
        let error = render_files(&files, &BTreeMap::new(), &cluster()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "b.yaml, document 2: duplicate object v1 ConfigMap x, first defined in a.yaml, document 1"
        );
        let other_namespace = [
            file(
                "a.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
            ),
            file(
                "b.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  namespace: y\n",
            ),
        ];
        assert_eq!(
            render_files(&other_namespace, &BTreeMap::new(), &cluster())
                .expect("distinct objects")
                .len(),
            2
        );
    }

    #[test]
    fn yaml_output_renders_back_to_the_same_objects() {
        let files = [file(
            "app.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  region: ${cluster.labels.region}\n",
        )];
        let objects = render_files(&files, &BTreeMap::new(), &cluster()).expect("render");
        let yaml = to_yaml(&objects).expect("yaml");
        assert!(
            yaml.starts_with("---\n# source: app.yaml, document 1\n"),
            "{yaml}"
        );
        let again =
            render_files(&[file("out.yaml", &yaml)], &BTreeMap::new(), &cluster()).expect("again");
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].manifest, objects[0].manifest);
        assert_eq!(again[0].manifest["data"]["region"], "eu");
    }
}

//! `starling render`: prints the objects a cluster would get from an artifact (or a checkout)
//! for a Sync's path, renderer, values and variables, as multi-document YAML in the order they
//! would be applied: CRDs first, then Namespaces, then the rest by kind, with Helm's
//! pre-install hooks before the release's objects and its post-install hooks after them. Each
//! object is preceded by a comment naming its file and document (and its hook phase). It runs
//! the same render as the sync engine (`starling_render`, the engines out of process) and talks
//! to no cluster. `--engines` instead says which engines this installation has and their
//! versions (`starling_render::probe`), failing when Helm's or kustomize's is missing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use fleet::resources::{HelmSpec, RenderSpec, RenderType};
use fleet::vars::ClusterContext;
use starling_sync::order::kind_rank;
use starling_sync::render::{
    ArtifactSource, Engines, HookPhase, RenderOptions, Rendered, RenderedObject, ValuesDocument,
    render,
};

/// Which renderer `--renderer` asks for.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RendererArg {
    /// Kustomize when the path holds a kustomization, Helm when it holds Chart.yaml, else plain.
    #[default]
    Auto,
    Plain,
    Kustomize,
    Helm,
}

impl RendererArg {
    fn render_type(self) -> RenderType {
        match self {
            RendererArg::Auto => RenderType::Auto,
            RendererArg::Plain => RenderType::Plain,
            RendererArg::Kustomize => RenderType::Kustomize,
            RendererArg::Helm => RenderType::Helm,
        }
    }
}

#[derive(clap::Args, Debug)]
#[command(group(
    clap::ArgGroup::new("input")
        .required(true)
        .args(["artifact", "source_dir", "engines"])
))]
pub struct RenderArgs {
    /// Prints the render engines found (Helm's library, kubectl with its kustomize, sops when
    /// installed) and their versions, each checked by running it; fails when Helm's or
    /// kubectl is missing or broken.
    #[arg(long)]
    pub engines: bool,
    /// A tar.gz artifact, as the source store keeps them.
    #[arg(long, value_name = "FILE")]
    pub artifact: Option<PathBuf>,
    /// A directory (a git checkout) instead of an artifact.
    #[arg(long, value_name = "DIR")]
    pub source_dir: Option<PathBuf>,
    /// The Sync's path inside the source; the whole tree when unset.
    #[arg(long, value_name = "P")]
    pub path: Option<String>,
    /// The renderer (the Sync's `render.type`).
    #[arg(long, value_enum, default_value = "auto")]
    pub renderer: RendererArg,
    /// Helm: the release name (`.Release.Name`).
    #[arg(long, value_name = "NAME", default_value = "release")]
    pub release_name: String,
    /// Helm: the release namespace, and that of namespaced objects that name none.
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Helm: a values file, merged in order over the chart's values.yaml (repeatable). It is
    /// substituted like a `valuesFrom` document.
    #[arg(long = "values", value_name = "FILE")]
    pub values: Vec<PathBuf>,
    /// Helm: a values file inside the source, relative to the chart (`render.helm.valuesFiles`,
    /// repeatable).
    #[arg(long = "values-file", value_name = "PATH")]
    pub values_files: Vec<String>,
    /// Helm: `.Capabilities.KubeVersion` (`v1.33.1`); the engine's default when unset.
    #[arg(long, value_name = "V")]
    pub kube_version: Option<String>,
    /// A variable of the Sync's `substitute` map (repeatable).
    #[arg(long = "var", value_name = "K=V", value_parser = parse_pair)]
    pub vars: Vec<(String, String)>,
    /// A label of the target cluster, for `${cluster.labels.KEY}` (repeatable).
    #[arg(long = "cluster-label", value_name = "K=V", value_parser = parse_pair)]
    pub cluster_labels: Vec<(String, String)>,
    /// An annotation of the target cluster, for `${cluster.annotations.KEY}` (repeatable).
    #[arg(long = "cluster-annotation", value_name = "K=V", value_parser = parse_pair)]
    pub cluster_annotations: Vec<(String, String)>,
    /// The target cluster's name, for `${cluster.name}`.
    #[arg(long, value_name = "N", default_value = "cluster")]
    pub cluster_name: String,
    /// The target cluster's namespace, for `${cluster.namespace}`.
    #[arg(long, value_name = "NS", default_value = "default")]
    pub cluster_namespace: String,
    /// The kubectl that runs kustomize's build (else $STARLING_KUBECTL, PATH, usual places).
    #[arg(long, value_name = "FILE", env = "STARLING_KUBECTL")]
    pub kubectl: Option<PathBuf>,
    /// Helm's engine, libhelm_c.so (else $STARLING_HELM_LIBRARY, usual places).
    #[arg(long, value_name = "FILE", env = "STARLING_HELM_LIBRARY")]
    pub helm_library: Option<PathBuf>,
    /// Time limit of the engine's render.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    pub render_timeout: Duration,
}

/// `KEY=VALUE`; the value may contain `=`.
fn parse_pair(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("expected KEY=VALUE, got {text:?}")),
    }
}

impl RenderArgs {
    /// Rejects variable names that manifests could never refer to.
    pub fn validate(&self) -> anyhow::Result<()> {
        for (name, value) in &self.vars {
            fleet::vars::check_name(name).with_context(|| format!("--var {name}={value}"))?;
            fleet::vars::check_value(name, value)
                .with_context(|| format!("--var {name}={value}"))?;
        }
        fleet::validate::check_release_name(&self.release_name)
            .map_err(|reason| anyhow::anyhow!("--release-name {}: {reason}", self.release_name))?;
        if self.render_timeout.is_zero() {
            anyhow::bail!("--render-timeout must be positive");
        }
        Ok(())
    }

    fn source(&self) -> anyhow::Result<ArtifactSource> {
        match (&self.artifact, &self.source_dir) {
            (Some(file), None) => Ok(ArtifactSource::Archive(file.clone())),
            (None, Some(dir)) => Ok(ArtifactSource::Directory(dir.clone())),
            _ => anyhow::bail!("give exactly one of --artifact and --source-dir"),
        }
    }

    fn options(&self) -> anyhow::Result<RenderOptions> {
        let helm_settings = self.namespace.is_some() || !self.values_files.is_empty();
        let helm = (helm_settings || self.renderer == RendererArg::Helm).then(|| HelmSpec {
            namespace: self.namespace.clone(),
            values_files: self.values_files.clone(),
            ..HelmSpec::default()
        });
        let mut values_from = Vec::new();
        for file in &self.values {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("cannot read --values {}", file.display()))?;
            values_from.push(ValuesDocument {
                origin: file.display().to_string(),
                text,
                secret: false,
            });
        }
        let mut engines = Engines {
            kubectl: self.kubectl.clone(),
            helm_library: self.helm_library.clone(),
            ..Engines::default()
        };
        engines.limits.timeout = self.render_timeout;
        Ok(RenderOptions {
            path: self.path.clone(),
            spec: Some(RenderSpec {
                type_: self.renderer.render_type(),
                helm,
                overrides: Vec::new(),
            }),
            variables: self.vars.iter().cloned().collect(),
            cluster: ClusterContext {
                name: self.cluster_name.clone(),
                namespace: self.cluster_namespace.clone(),
                labels: self
                    .cluster_labels
                    .iter()
                    .cloned()
                    .collect::<BTreeMap<_, _>>(),
                annotations: self.cluster_annotations.iter().cloned().collect(),
            },
            release_name: self.release_name.clone(),
            kube_version: self.kube_version.clone(),
            values_from,
            engines,
            ..RenderOptions::default()
        })
    }
}

/// The objects in the order a sync applies them on a first install, without a cluster to say
/// which kinds are namespaced: CRDs, Namespaces, then the rest by kind (the engine's order),
/// with pre-install hooks after the CRDs and post-install hooks last. Hooks Starling never
/// runs (tests, delete and rollback hooks) are left out.
pub fn apply_order(rendered: &Rendered) -> Vec<(&RenderedObject, Option<&'static str>)> {
    let group = |object: &RenderedObject| {
        if starling_sync::object::is_crd(&object.reference) {
            0
        } else if starling_sync::object::is_namespace(&object.reference) {
            1
        } else {
            2
        }
    };
    let mut release: Vec<&RenderedObject> = rendered.release_objects().collect();
    release.sort_by_key(|object| (group(object), kind_rank(&object.reference.kind)));
    let crds = release
        .iter()
        .take_while(|object| group(object) == 0)
        .count();
    let hooks = rendered.hooks();
    let phase = |wanted: HookPhase| {
        hooks.iter().copied().filter(move |object| {
            object
                .hook
                .as_ref()
                .is_some_and(|hook| hook.runs_in(wanted, true))
        })
    };
    let mut ordered: Vec<(&RenderedObject, Option<&'static str>)> = Vec::new();
    ordered.extend(release[..crds].iter().map(|object| (*object, None)));
    ordered.extend(phase(HookPhase::BeforeApply).map(|object| (object, Some("pre-install"))));
    ordered.extend(release[crds..].iter().map(|object| (*object, None)));
    ordered.extend(phase(HookPhase::AfterApply).map(|object| (object, Some("post-install"))));
    ordered
}

/// The rendered objects as YAML, in apply order, each preceded by comments naming its origin.
pub fn to_yaml(rendered: &Rendered) -> anyhow::Result<String> {
    let mut output = format!("# renderer: {}", rendered.renderer.as_str());
    if let Some(namespace) = &rendered.namespace {
        output.push_str(&format!(
            " (namespaced objects that name no namespace go to {namespace})"
        ));
    }
    output.push('\n');
    for (object, hook) in apply_order(rendered) {
        output.push_str("---\n# source: ");
        output.push_str(&object.origin.to_string());
        output.push('\n');
        if let (Some(phase), Some(declared)) = (hook, &object.hook) {
            output.push_str(&format!("# {phase} hook: {}\n", declared.describe()));
        }
        output.push_str(
            &serde_yaml_ng::to_string(&object.manifest)
                .context("cannot print the rendered objects as yaml")?,
        );
    }
    Ok(output)
}

/// Renders and returns the YAML (separate from printing for tests).
pub fn render_to_string(args: &RenderArgs) -> anyhow::Result<String> {
    args.validate()?;
    let source = args.source()?;
    let rendered = render(&source, &args.options()?)
        .with_context(|| format!("cannot render the {}", source.describe()))?;
    to_yaml(&rendered)
}

pub fn run(args: RenderArgs) -> anyhow::Result<()> {
    if args.engines {
        return print_engines(&args);
    }
    print!("{}", render_to_string(&args)?);
    Ok(())
}

/// `--engines`: one line per engine; an error naming every engine that is missing or broken.
fn print_engines(args: &RenderArgs) -> anyhow::Result<()> {
    use starling_sync::render::probe;
    let mut engines = Engines {
        kubectl: args.kubectl.clone(),
        helm_library: args.helm_library.clone(),
        ..Engines::default()
    };
    engines.limits.timeout = args.render_timeout;
    let mut missing = Vec::new();
    match probe::helm(&engines) {
        Ok(helm) => println!(
            "helm: {} (Helm {}, helm-c {})",
            helm.library.display(),
            helm.version.helm_sdk,
            helm.version.helm_c
        ),
        Err(error) => missing.push(format!("helm: {error}")),
    }
    match probe::kubectl(&engines) {
        Ok(kubectl) => println!(
            "kustomize: {} (kubectl {}, kustomize {})",
            kubectl.path.display(),
            kubectl.kubectl,
            kubectl.kustomize
        ),
        Err(error) => missing.push(format!("kustomize: {error}")),
    }
    match probe::sops(&engines) {
        Some(Ok(sops)) => println!("sops: {} ({})", sops.path.display(), sops.version),
        Some(Err(error)) => missing.push(format!("sops: {error}")),
        None => println!(
            "sops: not installed (optional: no render uses it yet; ${} or PATH)",
            probe::SOPS_ENV
        ),
    }
    if !missing.is_empty() {
        anyhow::bail!(
            "{} of the render engines cannot run:\n{}",
            missing.len(),
            missing.join("\n")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(clap::Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: RenderArgs,
    }

    fn args(line: &[&str]) -> RenderArgs {
        Wrapper::try_parse_from(std::iter::once("render").chain(line.iter().copied()))
            .expect("arguments parse")
            .args
    }

    #[test]
    fn renders_a_directory_with_variables() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("app")).expect("create the test directory");
        std::fs::write(
            dir.path().join("app/web.yaml"),
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web-${cluster.labels.region}\n  annotations:\n    owner: ${cluster.annotations.team}\nspec:\n  replicas: ${REPLICAS}\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: apps\n",
        )
        .expect("write a manifest");
        let source = dir.path().to_str().expect("utf-8");
        let yaml = render_to_string(&args(&[
            "--source-dir",
            source,
            "--path",
            "app",
            "--var",
            "REPLICAS=2",
            "--cluster-label",
            "region=eu",
            "--cluster-annotation",
            "team=payments",
        ]))
        .expect("render");
        assert!(yaml.starts_with("# renderer: Plain\n"), "{yaml}");
        assert!(
            yaml.contains("# source: app/web.yaml, document 1"),
            "{yaml}"
        );
        assert!(yaml.contains("name: web-eu"), "{yaml}");
        assert!(yaml.contains("owner: payments"), "{yaml}");
        assert!(yaml.contains("replicas: 2"), "{yaml}");
        // The Namespace comes first, as it is applied first.
        let namespace = yaml.find("kind: Namespace").expect("namespace");
        let deployment = yaml.find("kind: Deployment").expect("deployment");
        assert!(namespace < deployment, "{yaml}");
    }

    #[test]
    fn engines_is_an_input_of_its_own() {
        assert!(args(&["--engines"]).engines);
        assert!(
            Wrapper::try_parse_from(["render", "--engines", "--source-dir", "."]).is_err(),
            "--engines with a source"
        );
        assert!(Wrapper::try_parse_from(["render"]).is_err(), "no input");
    }

    #[test]
    fn pairs_names_and_settings_are_checked() {
        assert_eq!(
            parse_pair("a=b=c").expect("pair"),
            ("a".into(), "b=c".into())
        );
        assert!(parse_pair("novalue").is_err());
        assert!(parse_pair("=x").is_err());
        let bad = args(&["--source-dir", ".", "--var", "1X=v"]);
        assert!(bad.validate().is_err());
        let bad = args(&["--source-dir", ".", "--release-name", "Bad_Name"]);
        let error = bad.validate().unwrap_err().to_string();
        assert!(error.contains("--release-name Bad_Name"), "{error}");
        let helm = args(&[
            "--source-dir",
            ".",
            "--namespace",
            "shop",
            "--values-file",
            "v.yaml",
        ]);
        let options = helm.options().expect("options");
        let spec = options.spec.expect("a spec");
        assert_eq!(spec.type_, RenderType::Auto);
        let helm = spec.helm.expect("helm settings");
        assert_eq!(helm.namespace.as_deref(), Some("shop"));
        assert_eq!(helm.values_files, ["v.yaml"]);
    }
}

//! `starling render`: prints the manifests a cluster would get from an artifact (or a
//! checkout) for a Sync's path and variables, as multi-document YAML, each object preceded by
//! a comment naming its file and document. Operators use it to check a change before it rolls
//! out; it runs the same render as the sync engine (`starling_sync::render`) and talks to no
//! cluster.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use fleet::vars::ClusterContext;
use starling_sync::render::{ArtifactSource, RenderOptions, render, to_yaml};

#[derive(clap::Args, Debug)]
#[command(group(
    clap::ArgGroup::new("input")
        .required(true)
        .args(["artifact", "source_dir"])
))]
pub struct RenderArgs {
    /// A tar.gz artifact, as the source store keeps them.
    #[arg(long, value_name = "FILE")]
    pub artifact: Option<PathBuf>,
    /// A directory (a git checkout) instead of an artifact.
    #[arg(long, value_name = "DIR")]
    pub source_dir: Option<PathBuf>,
    /// The Sync's path inside the source; the whole tree when unset.
    #[arg(long, value_name = "P")]
    pub path: Option<String>,
    /// A variable of the Sync's `substitute` map (repeatable).
    #[arg(long = "var", value_name = "K=V", value_parser = parse_pair)]
    pub vars: Vec<(String, String)>,
    /// A label of the target cluster, for `${cluster.labels.KEY}` (repeatable).
    #[arg(long = "cluster-label", value_name = "K=V", value_parser = parse_pair)]
    pub cluster_labels: Vec<(String, String)>,
    /// The target cluster's name, for `${cluster.name}`.
    #[arg(long, value_name = "N", default_value = "cluster")]
    pub cluster_name: String,
    /// The target cluster's namespace, for `${cluster.namespace}`.
    #[arg(long, value_name = "NS", default_value = "default")]
    pub cluster_namespace: String,
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
        Ok(())
    }

    fn source(&self) -> anyhow::Result<ArtifactSource> {
        match (&self.artifact, &self.source_dir) {
            (Some(file), None) => Ok(ArtifactSource::Archive(file.clone())),
            (None, Some(dir)) => Ok(ArtifactSource::Directory(dir.clone())),
            _ => anyhow::bail!("give exactly one of --artifact and --source-dir"),
        }
    }

    fn options(&self) -> RenderOptions {
        RenderOptions {
            path: self.path.clone(),
            variables: self.vars.iter().cloned().collect(),
            cluster: ClusterContext {
                name: self.cluster_name.clone(),
                namespace: self.cluster_namespace.clone(),
                labels: self
                    .cluster_labels
                    .iter()
                    .cloned()
                    .collect::<BTreeMap<_, _>>(),
            },
            ..RenderOptions::default()
        }
    }
}

/// Renders and returns the YAML (separate from printing for tests).
pub fn render_to_string(args: &RenderArgs) -> anyhow::Result<String> {
    args.validate()?;
    let source = args.source()?;
    let objects = render(&source, &args.options())
        .with_context(|| format!("cannot render the {}", source.describe()))?;
    to_yaml(&objects).context("cannot print the rendered objects as yaml")
}

pub fn run(args: RenderArgs) -> anyhow::Result<()> {
    print!("{}", render_to_string(&args)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(dir: PathBuf) -> RenderArgs {
        RenderArgs {
            artifact: None,
            source_dir: Some(dir),
            path: Some("app".into()),
            vars: vec![("REPLICAS".into(), "2".into())],
            cluster_labels: vec![("region".into(), "eu".into())],
            cluster_name: "edge-1".into(),
            cluster_namespace: "default".into(),
        }
    }

    #[test]
    fn renders_a_directory_with_variables() {
        let dir = std::env::temp_dir().join(format!("starling-render-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("app")).expect("create the test directory");
        std::fs::write(
            dir.join("app/web.yaml"),
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web-${cluster.labels.region}\nspec:\n  replicas: ${REPLICAS}\n",
        )
        .expect("write a manifest");
        let yaml = render_to_string(&args(dir.clone())).expect("render");
        std::fs::remove_dir_all(&dir).ok();
        assert!(
            yaml.contains("# source: app/web.yaml, document 1"),
            "{yaml}"
        );
        assert!(yaml.contains("name: web-eu"), "{yaml}");
        assert!(yaml.contains("replicas: 2"), "{yaml}");
    }

    #[test]
    fn pairs_and_variable_names_are_checked() {
        assert_eq!(
            parse_pair("a=b=c").expect("pair"),
            ("a".into(), "b=c".into())
        );
        assert!(parse_pair("novalue").is_err());
        assert!(parse_pair("=x").is_err());
        let mut bad = args(PathBuf::from("."));
        bad.vars = vec![("1X".into(), "v".into())];
        assert!(bad.validate().is_err());
    }
}

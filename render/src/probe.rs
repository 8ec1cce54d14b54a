//! Which render engines this installation has, and their versions (`starling render
//! --engines`): Helm's library, asked through a render worker rendering a one-template chart
//! (so the check goes through the same process a sync uses), kubectl and the kustomize built
//! into it, and `sops` when one is installed. Every engine runs with the render limits.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::RenderError;
use crate::engines::Engines;
use crate::helm::{self, EngineVersion};
use crate::kustomize;
use crate::process;

/// The environment variable naming the sops binary.
pub const SOPS_ENV: &str = "STARLING_SOPS";

/// Helm's engine: where the library is and what it says it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelmEngine {
    pub library: PathBuf,
    pub version: EngineVersion,
}

/// kubectl and the kustomize inside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubectlEngine {
    pub path: PathBuf,
    pub kubectl: String,
    pub kustomize: String,
}

/// A sops binary and its version line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SopsEngine {
    pub path: PathBuf,
    pub version: String,
}

/// Loads Helm's library in a render worker, by rendering a chart of one ConfigMap.
pub fn helm(engines: &Engines) -> Result<HelmEngine, RenderError> {
    let library = helm::library::find_library(engines.helm_library.as_deref())?;
    let scratch = engines.scratch().map_err(|error| RenderError::Read {
        what: "a scratch directory for the engine check".to_owned(),
        message: error.to_string(),
    })?;
    let chart = scratch.path().join("probe");
    let written = std::fs::create_dir_all(chart.join("templates"))
        .and_then(|()| {
            std::fs::write(
                chart.join("Chart.yaml"),
                "apiVersion: v2\nname: probe\nversion: 0.1.0\n",
            )
        })
        .and_then(|()| {
            std::fs::write(
                chart.join("templates/probe.yaml"),
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n",
            )
        });
    written.map_err(|error| RenderError::Read {
        what: format!("the engine check's chart in {}", chart.display()),
        message: error.to_string(),
    })?;
    let mut with_library = engines.clone();
    with_library.helm_library = Some(library.clone());
    let output = helm::render_chart(
        &with_library,
        helm::ChartRequest {
            chart_dir: &chart,
            chart_path: "probe",
            release: "probe",
            namespace: "default",
            kube_version: None,
            values: Vec::new(),
            scratch: Some(scratch.path()),
        },
    )?;
    if output.engine.helm_sdk.is_empty() {
        return Err(RenderError::Engine {
            engine: "helm",
            subject: library.display().to_string(),
            message: "the library did not say which Helm it is".to_owned(),
        });
    }
    Ok(HelmEngine {
        library,
        version: output.engine,
    })
}

/// Runs `kubectl version --client -o json` and reads kubectl's and kustomize's versions.
pub fn kubectl(engines: &Engines) -> Result<KubectlEngine, RenderError> {
    let path = kustomize::find_kubectl(engines.kubectl.as_deref())?;
    let failed = |message: String| RenderError::Engine {
        engine: "kubectl",
        subject: path.display().to_string(),
        message,
    };
    let stdout = run(&path, &["version", "--client", "-o", "json"], engines).map_err(failed)?;
    let json: serde_json::Value = serde_json::from_str(&stdout)
        .map_err(|error| failed(format!("unreadable `kubectl version` output: {error}")))?;
    let field = |value: &serde_json::Value| value.as_str().map(str::to_owned);
    let kubectl = field(&json["clientVersion"]["gitVersion"])
        .ok_or_else(|| failed("`kubectl version` names no clientVersion.gitVersion".to_owned()))?;
    let kustomize = field(&json["kustomizeVersion"]).ok_or_else(|| {
        failed("`kubectl version` names no kustomizeVersion: kubectl 1.27 or later carries kustomize v5".to_owned())
    })?;
    Ok(KubectlEngine {
        path,
        kubectl,
        kustomize,
    })
}

/// `sops --version` of `$STARLING_SOPS` or the first `sops` on `PATH`; `None` when there is
/// none (no render needs sops yet).
pub fn sops(engines: &Engines) -> Option<Result<SopsEngine, RenderError>> {
    let path = find_sops(std::env::var_os(SOPS_ENV), std::env::var_os("PATH"))?;
    let version = run(&path, &["--version", "--disable-version-check"], engines)
        .map_err(|message| RenderError::Engine {
            engine: "sops",
            subject: path.display().to_string(),
            message,
        })
        .and_then(|stdout| {
            stdout
                .lines()
                .map(str::trim)
                .find(|line| line.starts_with("sops "))
                .map(str::to_owned)
                .ok_or_else(|| RenderError::Engine {
                    engine: "sops",
                    subject: path.display().to_string(),
                    message: format!("`sops --version` printed no version: {stdout:?}"),
                })
        });
    Some(version.map(|version| SopsEngine { path, version }))
}

fn find_sops(
    variable: Option<std::ffi::OsString>,
    path_variable: Option<std::ffi::OsString>,
) -> Option<PathBuf> {
    if let Some(path) = variable.filter(|value| !value.is_empty()) {
        return Some(PathBuf::from(path));
    }
    std::env::split_paths(&path_variable?)
        .map(|dir| dir.join("sops"))
        .find(|candidate| candidate.is_file())
}

/// Runs an engine binary with the render limits and a scrubbed environment; its standard
/// output, or what went wrong.
fn run(program: &Path, args: &[&str], engines: &Engines) -> Result<String, String> {
    let home = std::env::temp_dir();
    let command = || {
        let mut command = Command::new(program);
        command
            .args(args)
            .env_clear()
            .env("KUBECONFIG", "/dev/null")
            .env("HOME", &home)
            .env("LANG", "C");
        if let Some(path) = std::env::var_os("PATH") {
            command.env("PATH", path);
        }
        command
    };
    let finished = process::run(&command, None, &engines.limits).map_err(|e| e.to_string())?;
    if !finished.status.success() {
        return Err(format!(
            "exited with {}: {}",
            finished.status,
            finished.stderr.trim()
        ));
    }
    String::from_utf8(finished.stdout).map_err(|_| "printed output that is not UTF-8".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sops_is_the_variable_then_the_first_on_path() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (first, second) = (dir.path().join("a"), dir.path().join("b"));
        for bin in [&first, &second] {
            std::fs::create_dir_all(bin).expect("mkdir");
            std::fs::write(bin.join("sops"), "").expect("write");
        }
        let path =
            std::env::join_paths([dir.path().join("none"), first.clone(), second]).expect("a PATH");
        assert_eq!(
            find_sops(None, Some(path.clone())),
            Some(first.join("sops"))
        );
        assert_eq!(
            find_sops(Some("/opt/sops".into()), Some(path)),
            Some(PathBuf::from("/opt/sops"))
        );
        assert_eq!(find_sops(None, Some(dir.path().join("none").into())), None);
    }

    /// An executable shell script in `dir` that prints `output`.
    fn fake(dir: &Path, name: &str, output: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\ncat <<'EOF'\n{output}\nEOF\n")).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    #[test]
    fn kubectl_versions_are_read_and_an_old_kubectl_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let good = fake(
            dir.path(),
            "kubectl",
            r#"{"clientVersion": {"gitVersion": "v1.32.5"}, "kustomizeVersion": "v5.5.0"}"#,
        );
        let engines = Engines {
            kubectl: Some(good.clone()),
            ..Engines::default()
        };
        assert_eq!(
            kubectl(&engines).expect("versions"),
            KubectlEngine {
                path: good,
                kubectl: "v1.32.5".into(),
                kustomize: "v5.5.0".into(),
            }
        );
        let old = fake(
            dir.path(),
            "kubectl-old",
            r#"{"clientVersion": {"gitVersion": "v1.20.0"}}"#,
        );
        let engines = Engines {
            kubectl: Some(old),
            ..Engines::default()
        };
        let error = kubectl(&engines).unwrap_err().to_string();
        assert!(error.contains("names no kustomizeVersion"), "{error}");
    }
}

//! Where Helm's engine is: `libhelm_c.so`, the C library (helm-c-sdk, Helm's Go SDK v4 inside)
//! that PyPI's `helm-python-sdk` ships. It is looked for in the configured path, then
//! `STARLING_HELM_LIBRARY`, then beside the binary, then the usual install locations, then in
//! Python virtual environments (the active one, and a `chart-venv` beside the binary's
//! directory, as `scripts/install-render-engines` makes it in `target/`).

use std::path::{Path, PathBuf};

use crate::RenderError;

/// The environment variable naming the library.
pub const LIBRARY_ENV: &str = "STARLING_HELM_LIBRARY";
/// The library's file name.
pub const LIBRARY_FILE: &str = "libhelm_c.so";

/// How to get the library, for the error that says it is missing.
pub const INSTALL_HINT: &str = "install PyPI's helm-python-sdk (python3 -m venv V && \
V/bin/pip install 'helm-python-sdk>=0.2,<0.3', or scripts/install-render-engines) and set \
STARLING_HELM_LIBRARY to V/lib/python3.*/site-packages/helm_python/lib/libhelm_c.so, or copy \
that file to /usr/local/lib/starling/";

const KNOWN_DIRECTORIES: &[&str] = &[
    "/usr/local/lib/starling",
    "/usr/lib/starling",
    "/usr/local/lib",
    "/usr/lib",
];

/// Where a Python virtual environment keeps the library.
fn in_venv(venv: &Path) -> Vec<PathBuf> {
    let lib = venv.join("lib");
    let Ok(entries) = std::fs::read_dir(&lib) else {
        return vec![
            lib.join("python3.*/site-packages/helm_python/lib")
                .join(LIBRARY_FILE),
        ];
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("python3"))
        })
        .map(|python| {
            python
                .join("site-packages/helm_python/lib")
                .join(LIBRARY_FILE)
        })
        .collect();
    found.sort();
    if found.is_empty() {
        found.push(
            lib.join("python3.*/site-packages/helm_python/lib")
                .join(LIBRARY_FILE),
        );
    }
    found
}

/// Every place the library is looked for, in order (the configured path and the variable
/// first).
fn candidates(
    configured: Option<&Path>,
    variable: Option<PathBuf>,
    executable: Option<&Path>,
    virtual_env: Option<PathBuf>,
) -> Vec<(PathBuf, &'static str)> {
    let mut places = Vec::new();
    if let Some(path) = configured {
        places.push((path.to_path_buf(), "configured"));
    }
    if let Some(path) = variable {
        places.push((path, "$STARLING_HELM_LIBRARY"));
    }
    if let Some(dir) = executable.and_then(Path::parent) {
        places.push((dir.join(LIBRARY_FILE), "beside the binary"));
        places.push((
            dir.join("../lib/starling").join(LIBRARY_FILE),
            "beside the binary",
        ));
    }
    for dir in KNOWN_DIRECTORIES {
        places.push((Path::new(dir).join(LIBRARY_FILE), "installed"));
    }
    if let Some(venv) = virtual_env {
        for path in in_venv(&venv) {
            places.push((path, "$VIRTUAL_ENV"));
        }
    }
    // target/debug/starling → target/chart-venv (a development build and its tests).
    let mut ancestor = executable.and_then(Path::parent);
    for _ in 0..3 {
        let Some(dir) = ancestor else { break };
        for path in in_venv(&dir.join("chart-venv")) {
            places.push((path, "development virtual environment"));
        }
        ancestor = dir.parent();
    }
    places
}

/// The library to load, or an error naming every place it looked and how to install it.
pub fn find_library(configured: Option<&Path>) -> Result<PathBuf, RenderError> {
    let executable = std::env::current_exe().ok();
    search(candidates(
        configured,
        std::env::var_os(LIBRARY_ENV)
            .filter(|value| !value.is_empty())
            .map(PathBuf::from),
        executable.as_deref(),
        std::env::var_os("VIRTUAL_ENV").map(PathBuf::from),
    ))
}

fn search(places: Vec<(PathBuf, &'static str)>) -> Result<PathBuf, RenderError> {
    let mut looked = Vec::new();
    for (path, why) in places {
        if path.is_file() {
            return Ok(path);
        }
        let described = match why {
            "configured" | "$STARLING_HELM_LIBRARY" => format!("{} ({why})", path.display()),
            _ => path.display().to_string(),
        };
        if !looked.contains(&described) {
            looked.push(described);
        }
    }
    Err(RenderError::EngineMissing {
        engine: "helm (libhelm_c.so)",
        looked,
        hint: INSTALL_HINT.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configured_path_comes_first_and_a_miss_lists_every_place() {
        let dir = tempfile::tempdir().expect("temp dir");
        let library = dir.path().join("custom.so");
        std::fs::write(&library, b"not really a library").expect("write");
        let found = search(candidates(
            Some(&library),
            Some(dir.path().join("other.so")),
            None,
            None,
        ))
        .expect("found");
        assert_eq!(found, library);

        let venv = dir.path().join("venv");
        std::fs::create_dir_all(venv.join("lib/python3.11/site-packages/helm_python/lib"))
            .expect("mkdir");
        let error = search(candidates(
            Some(Path::new("/missing/libhelm_c.so")),
            None,
            Some(Path::new("/opt/starling/bin/starling")),
            Some(venv.clone()),
        ))
        .unwrap_err()
        .to_string();
        for expected in [
            "helm (libhelm_c.so) was not found; looked at: /missing/libhelm_c.so (configured)",
            "/opt/starling/bin/libhelm_c.so",
            "/usr/local/lib/starling/libhelm_c.so",
            "venv/lib/python3.11/site-packages/helm_python/lib/libhelm_c.so",
            "/opt/starling/chart-venv/lib/python3.*/site-packages/helm_python/lib/libhelm_c.so",
            "helm-python-sdk",
            "STARLING_HELM_LIBRARY",
        ] {
            assert!(error.contains(expected), "{expected:?} not in {error}");
        }
    }
}

//! The differential test: every case of the corpus (`tests/corpus/`, 38 kustomizations and 20
//! charts written as platform teams write them) rendered by Starling's renderer and by the
//! reference engines (`tests/reference.py`: `kubectl kustomize`, and helm-python-sdk's Helm
//! engine), compared object for object. A difference fails the test naming the case, the
//! object and the field. A case that must fail (`expectError`) must fail in both, with the
//! expected text in Starling's message.
//!
//! Starling renders each case from a tar.gz of its directory, as a replica renders an
//! artifact, with the render worker binary of this crate. The `${cluster.*}` placeholders of
//! the corpus go through Starling's substitution with a cluster whose name, labels and
//! annotations are the placeholders themselves (substitution never re-reads its output), so
//! the output must equal the reference engines', which leave them alone.
//!
//! The reference engines are required: without them the test fails and says what installs
//! them (`scripts/install-render-engines`, run by `scripts/test`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use bytes::Bytes;
use fleet::resources::{HelmSpec, RenderSpec, RenderType};
use fleet::vars::ClusterContext;
use serde_json::Value;
use starling_render::{
    ArtifactSource, Engines, ProcessLimits, RenderOptions, Rendered, RenderedObject, WorkerCommand,
    render,
};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate is in the repository")
        .to_path_buf()
}

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

const INSTALL: &str = "run scripts/install-render-engines (it puts helm-python-sdk into \
target/chart-venv and checks kubectl; scripts/test runs it first)";

/// The Python with helm-python-sdk: `$STARLING_REFERENCE_PYTHON`, or `target/chart-venv`.
fn python() -> PathBuf {
    std::env::var_os("STARLING_REFERENCE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repository().join("target/chart-venv/bin/python"))
}

fn reference(args: &[&str]) -> Value {
    let python = python();
    assert!(
        python.is_file(),
        "the reference engines are not installed: no {} ; {INSTALL}",
        python.display()
    );
    let script = corpus().join("../reference.py");
    let output = Command::new(&python)
        .arg(&script)
        .args(args)
        .env("KUBECONFIG", "/dev/null")
        .output()
        .unwrap_or_else(|error| panic!("cannot run {}: {error}; {INSTALL}", python.display()));
    assert!(
        output.status.success(),
        "reference.py {args:?} failed ({}): {}; {INSTALL}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "reference.py {args:?} printed no JSON ({error}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// A deterministic tar.gz of a case directory, as the source store makes artifacts.
fn archive(dir: &Path) -> Bytes {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    let mut pending = vec![dir.to_path_buf()];
    let mut files = Vec::new();
    while let Some(current) = pending.pop() {
        for entry in std::fs::read_dir(&current).expect("read the case") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    for file in files {
        let name = file.strip_prefix(dir).expect("inside the case");
        let data = std::fs::read(&file).expect("read a case file");
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        builder
            .append_data(&mut header, name, data.as_slice())
            .expect("append");
    }
    let encoder = builder.into_inner().expect("finish the tar");
    Bytes::from(encoder.finish().expect("finish the gzip"))
}

/// Every `${NAME}` in a text.
fn placeholders(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else { break };
        names.insert(
            after[..end]
                .split(":=")
                .next()
                .unwrap_or_default()
                .to_owned(),
        );
        rest = &after[end..];
    }
    names
}

/// A cluster and variables under which substitution gives back every placeholder unchanged.
fn identity(names: &BTreeSet<String>) -> (ClusterContext, BTreeMap<String, String>) {
    let mut cluster = ClusterContext {
        name: "${cluster.name}".into(),
        namespace: "${cluster.namespace}".into(),
        ..ClusterContext::default()
    };
    let mut variables = BTreeMap::new();
    for name in names {
        if let Some(key) = name.strip_prefix("cluster.labels.") {
            cluster.labels.insert(key.into(), format!("${{{name}}}"));
        } else if let Some(key) = name.strip_prefix("cluster.annotations.") {
            cluster
                .annotations
                .insert(key.into(), format!("${{{name}}}"));
        } else if !name.starts_with("cluster.") {
            // `$${` is the escape: the value reads back as `${NAME}`.
            variables.insert(name.clone(), format!("$${{{name}}}"));
        }
    }
    (cluster, variables)
}

/// Numbers compare by value (`1` and `1.0` are one number to the API server).
fn same_scalar(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// The first field where two objects differ: its JSON pointer and both values.
fn first_difference(ours: &Value, theirs: &Value, at: &str) -> Option<(String, String, String)> {
    let show = |value: Option<&Value>| value.map_or("<absent>".to_owned(), Value::to_string);
    match (ours, theirs) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let path = format!("{at}/{key}");
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => {
                        if let Some(found) = first_difference(x, y, &path) {
                            return Some(found);
                        }
                    }
                    (x, y) => return Some((path, show(x), show(y))),
                }
            }
            None
        }
        (Value::Array(a), Value::Array(b)) => {
            for index in 0..a.len().max(b.len()) {
                let path = format!("{at}/{index}");
                match (a.get(index), b.get(index)) {
                    (Some(x), Some(y)) => {
                        if let Some(found) = first_difference(x, y, &path) {
                            return Some(found);
                        }
                    }
                    (x, y) => return Some((path, show(x), show(y))),
                }
            }
            None
        }
        _ if same_scalar(ours, theirs) => None,
        _ => Some((at.to_owned(), ours.to_string(), theirs.to_string())),
    }
}

fn name_of(object: &Value) -> String {
    format!(
        "{} {} {}",
        object["apiVersion"].as_str().unwrap_or("?"),
        object["kind"].as_str().unwrap_or("?"),
        object["metadata"]["name"].as_str().unwrap_or("?")
    )
}

/// Compares two lists of objects in order; the differences as lines.
fn compare_lists(what: &str, ours: &[Value], theirs: &[Value]) -> Vec<String> {
    let mut problems = Vec::new();
    if ours.len() != theirs.len() {
        let names = |list: &[Value]| list.iter().map(name_of).collect::<Vec<_>>().join(", ");
        problems.push(format!(
            "{what}: starling has {} [{}], the reference {} [{}]",
            ours.len(),
            names(ours),
            theirs.len(),
            names(theirs)
        ));
        return problems;
    }
    for (index, (a, b)) in ours.iter().zip(theirs).enumerate() {
        if let Some((field, mine, reference)) = first_difference(a, b, "") {
            problems.push(format!(
                "{what} {} ({}): field {field}: starling {mine}, reference {reference}",
                index + 1,
                name_of(b)
            ));
        }
    }
    problems
}

/// Whether an object came from a chart's `crds/` directory (the chart's or a subchart's).
fn from_crds_dir(object: &RenderedObject, chart: &str) -> bool {
    let Some(rest) = object.origin.file.strip_prefix(&format!("{chart}/")) else {
        return false;
    };
    let parts: Vec<&str> = rest.split('/').collect();
    parts.first() == Some(&"crds")
        || (parts.len() > 3 && parts[parts.len() - 2] == "crds" && parts.contains(&"charts"))
}

fn compare(kind: &str, rendered: &Rendered, expected: &Value) -> Vec<String> {
    let list = |key: &str| expected[key].as_array().cloned().unwrap_or_default();
    let manifests = |objects: Vec<&RenderedObject>| -> Vec<Value> {
        objects.into_iter().map(|o| o.manifest.clone()).collect()
    };
    if kind == "kustomize" {
        let ours = manifests(rendered.objects.iter().collect());
        return compare_lists("object", &ours, &list("objects"));
    }
    let crds = manifests(
        rendered
            .objects
            .iter()
            .filter(|o| from_crds_dir(o, "chart"))
            .collect(),
    );
    let objects = manifests(
        rendered
            .objects
            .iter()
            .filter(|o| o.hook.is_none() && !from_crds_dir(o, "chart"))
            .collect(),
    );
    let mut problems = compare_lists("crd", &crds, &list("crds"));
    problems.extend(compare_lists("object", &objects, &list("objects")));
    let hooks: Vec<&RenderedObject> = rendered
        .objects
        .iter()
        .filter(|o| o.hook.is_some())
        .collect();
    let theirs = list("hooks");
    if hooks.len() != theirs.len() {
        problems.push(format!(
            "hooks: starling has {}, the reference {}",
            hooks.len(),
            theirs.len()
        ));
        return problems;
    }
    for (index, (ours, theirs)) in hooks.iter().zip(&theirs).enumerate() {
        // The engine names files by the chart's name, Starling by their place in the source.
        let mut theirs = theirs.clone();
        if let Some(path) = theirs["path"].as_str() {
            let rest = path.split_once('/').map_or(path, |(_, rest)| rest);
            theirs["path"] = Value::String(format!("chart/{rest}"));
        }
        let theirs = &theirs;
        let hook = ours.hook.as_ref().expect("a hook");
        let events: Vec<&str> = hook.events.iter().map(|e| e.as_str()).collect();
        let policies: Vec<&str> = hook.delete_policies.iter().map(|p| p.as_str()).collect();
        let described = serde_json::json!({
            "path": ours.origin.file,
            "events": events,
            "weight": hook.weight,
            "deletePolicies": policies,
            "object": ours.manifest,
        });
        if let Some((field, mine, reference)) = first_difference(&described, theirs, "") {
            problems.push(format!(
                "hook {} ({}): field {field}: starling {mine}, reference {reference}",
                index + 1,
                name_of(&theirs["object"])
            ));
        }
    }
    problems
}

fn engines(versions: &Value) -> Engines {
    let library = versions["helmLibrary"]
        .as_str()
        .unwrap_or_else(|| panic!("reference.py names no Helm library: {versions}; {INSTALL}"));
    let kubectl = versions["kubectl"]
        .as_str()
        .unwrap_or_else(|| panic!("reference.py names no kubectl: {versions}; {INSTALL}"));
    Engines {
        worker: WorkerCommand::binary(env!("CARGO_BIN_EXE_starling-render-worker")),
        kubectl: Some(PathBuf::from(kubectl)),
        helm_library: Some(PathBuf::from(library)),
        limits: ProcessLimits::default(),
        ..Engines::default()
    }
}

fn options_for(kind: &str, case: &Value, reference_text: &str, engines: &Engines) -> RenderOptions {
    let (cluster, variables) = identity(&placeholders(reference_text));
    let mut options = RenderOptions {
        variables,
        cluster,
        engines: engines.clone(),
        ..RenderOptions::default()
    };
    if kind == "kustomize" {
        options.path = Some(case["path"].as_str().expect("a path").to_owned());
        options.spec = Some(RenderSpec {
            type_: RenderType::Kustomize,
            ..RenderSpec::default()
        });
        return options;
    }
    let values_files = case["valuesFiles"]
        .as_array()
        .map(|files| {
            files
                .iter()
                .filter_map(Value::as_str)
                .map(|file| format!("../{file}")) // case files are relative to the case
                .collect()
        })
        .unwrap_or_default();
    options.path = Some("chart".to_owned());
    options.kube_version = case["kubeVersion"].as_str().map(str::to_owned);
    options.spec = Some(RenderSpec {
        type_: RenderType::Helm,
        helm: Some(HelmSpec {
            release_name: case["release"].as_str().map(str::to_owned),
            namespace: case["namespace"].as_str().map(str::to_owned),
            values_files,
            values: case.get("values").filter(|v| !v.is_null()).cloned(),
            post_renderers: case
                .get("postRenderers")
                .filter(|v| !v.is_null())
                .map(|v| serde_json::from_value(v.clone()).expect("postRenderers parse"))
                .unwrap_or_default(),
            ..HelmSpec::default()
        }),
        overrides: Vec::new(),
    });
    options
}

#[test]
fn every_corpus_case_renders_as_the_reference_engines_render_it() {
    let versions = reference(&["versions"]);
    let engines = engines(&versions);
    let mut failures = Vec::new();
    let mut checked = 0;
    for kind in ["kustomize", "helm"] {
        let mut cases: Vec<PathBuf> = std::fs::read_dir(corpus().join(kind))
            .expect("the corpus")
            .map(|entry| entry.expect("entry").path())
            .filter(|path| path.is_dir())
            .collect();
        cases.sort();
        for case_dir in cases {
            let name = format!(
                "{kind}/{}",
                case_dir.file_name().unwrap_or_default().to_string_lossy()
            );
            let case: Value = serde_yaml_ng::from_str(
                &std::fs::read_to_string(case_dir.join("case.yaml")).expect("case.yaml"),
            )
            .expect("case.yaml parses");
            let expected = reference(&[kind, case_dir.to_str().expect("utf-8 path")]);
            let options = options_for(kind, &case, &expected.to_string(), &engines);
            let source = ArtifactSource::ArchiveBytes(archive(&case_dir));
            let result = render(&source, &options);
            checked += 1;
            let expect_error = case["expectError"].as_str();
            match (result, expected["error"].as_str(), expect_error) {
                (Err(error), Some(_), Some(wanted)) => {
                    let message = error.to_string();
                    if !message.contains(wanted) {
                        failures.push(format!(
                            "{name}: starling failed without {wanted:?}: {message}"
                        ));
                    }
                }
                (Ok(rendered), None, None) => {
                    for problem in compare(kind, &rendered, &expected) {
                        failures.push(format!("{name}: {problem}"));
                    }
                }
                (Ok(_), reference_error, _) => failures.push(format!(
                    "{name}: starling rendered, the reference failed: {reference_error:?}"
                )),
                (Err(error), reference_error, _) => failures.push(format!(
                    "{name}: starling failed: {error}; the reference: {}",
                    reference_error.unwrap_or("rendered")
                )),
            }
        }
    }
    assert!(
        checked >= 42,
        "only {checked} cases in the corpus: the issue asks for 30 kustomizations and 12 charts"
    );
    assert!(
        failures.is_empty(),
        "{} of {checked} cases differ from the reference engines ({versions}):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn differences_name_the_field() {
    let ours = serde_json::json!({"spec": {"replicas": 3, "ports": [{"port": 80}]}});
    let theirs = serde_json::json!({"spec": {"replicas": 3.0, "ports": [{"port": 8080}]}});
    assert_eq!(
        first_difference(&ours, &theirs, ""),
        Some(("/spec/ports/0/port".into(), "80".into(), "8080".into()))
    );
    assert_eq!(
        first_difference(&serde_json::json!({"a": 1}), &serde_json::json!({}), ""),
        Some(("/a".into(), "1".into(), "<absent>".into()))
    );
}

/// The render cache: clusters with the same values share one engine run per node; each
/// distinct value set (after per-cluster values) costs one.
#[test]
fn one_engine_run_per_distinct_value_set() {
    let versions = reference(&["versions"]);
    let engines = engines(&versions);
    let cluster = |name: &str| ClusterContext {
        name: name.to_owned(),
        namespace: "default".to_owned(),
        ..ClusterContext::default()
    };

    let case_dir = corpus().join("kustomize/02-overlay-namespace-prefix");
    let case: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(case_dir.join("case.yaml")).expect("case.yaml"),
    )
    .expect("case.yaml parses");
    let source = ArtifactSource::ArchiveBytes(archive(&case_dir));
    let mut options = options_for("kustomize", &case, "", &engines);
    let mut outputs = Vec::new();
    for index in 0..20 {
        options.cluster = cluster(&format!("c{index:03}"));
        outputs.push(render(&source, &options).expect("kustomize renders"));
    }
    assert!(outputs.windows(2).all(|pair| pair[0] == pair[1]));
    let stats = engines.cache.stats();
    assert_eq!((stats.renders, stats.hits), (1, 19), "{stats:?}");

    let case_dir = corpus().join("helm/01-web-helpers");
    let case: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(case_dir.join("case.yaml")).expect("case.yaml"),
    )
    .expect("case.yaml parses");
    let source = ArtifactSource::ArchiveBytes(archive(&case_dir));
    let mut options = options_for("helm", &case, "", &engines);
    for index in 0..10 {
        options.cluster = cluster(&format!("c{index:03}"));
        render(&source, &options).expect("the chart renders");
    }
    let stats = engines.cache.stats();
    assert_eq!((stats.renders, stats.hits), (2, 28), "{stats:?}");
    // Per-cluster values: one engine run per cluster, then hits again.
    if let Some(helm) = options.spec.as_mut().and_then(|spec| spec.helm.as_mut()) {
        helm.values = Some(serde_json::json!({"podAnnotations": {"cluster": "${cluster.name}"}}));
    }
    for round in 0..2 {
        for index in 0..5 {
            options.cluster = cluster(&format!("c{index:03}"));
            render(&source, &options).expect("the chart renders");
        }
        let stats = engines.cache.stats();
        assert_eq!(stats.renders, 7, "round {round}: {stats:?}");
    }
}

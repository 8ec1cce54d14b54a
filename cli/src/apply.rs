//! `starling apply -f FILE|DIR|-`: send manifests to Starling and report, per object, whether
//! it was created, configured or left unchanged (as `kubectl apply` does).
//!
//! ```text
//! -f paths ──collect (dirs: *.yaml|*.yml|*.json, sorted; -R recursive)──► files
//!   ──parse_manifests each (fails fast: "web.yaml: document 2: …")──► one body (`---` joined)
//!   ──one Apply request──► "syncgroup.starling.dev/web created|configured|unchanged"
//! ```
//!
//! Validation happens locally first so a typo is reported before anything is sent; the node
//! validates again, and its rejection is reported as `rejected: …`. One request means one
//! commit: either every object of the invocation is applied or none is.

use std::collections::HashSet;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};
use fleet::manifest::{ObjectKey, Resource, parse_manifests};
use proto::limits::MAX_API_MESSAGE_BYTES;

use super::output::{emit, object_name_from};
use crate::client::{Client, ServerArgs, block_on};

/// Extensions of the files taken from a directory.
const MANIFEST_EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// What `-f -` reads from.
pub const STDIN: &str = "-";

#[derive(clap::Args, Debug)]
pub struct ApplyArgs {
    /// A manifest file, a directory of them (.yaml, .yml, .json) or `-` for stdin; repeatable.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "FILE|DIR|-",
        required = true
    )]
    pub files: Vec<String>,
    /// Also read the directories under each directory given with -f.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// Validate on the server and report what would change, without changing anything.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// One manifest file's text and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// The path as found, or `<stdin>`.
    pub origin: String,
    pub text: String,
}

/// The resources of every input, validated; the first bad document fails it all.
pub fn parse_inputs(inputs: &[Input]) -> anyhow::Result<Vec<Resource>> {
    let mut resources = Vec::new();
    for input in inputs {
        // The error's own text already includes its causes: display it alone, not as a chain.
        let parsed =
            parse_manifests(&input.text).map_err(|error| anyhow!("{}: {error}", input.origin))?;
        resources.extend(parsed);
    }
    Ok(resources)
}

pub fn run(args: ApplyArgs) -> anyhow::Result<()> {
    let inputs = read_inputs(&args.files, args.recursive)?;
    let resources = parse_inputs(&inputs)?;
    if resources.is_empty() {
        bail!("no objects to apply in {}", origins(&inputs));
    }
    let request = build_request(&inputs, &resources, args.dry_run)?;
    let lines = block_on(async {
        let client = Client::connect(&args.server).await?;
        apply(&client, request).await
    })?;
    emit(&lines)
}

/// Sends one Apply request and renders its results, one line per object.
pub async fn apply(client: &Client, request: proto::ApplyRequest) -> anyhow::Result<String> {
    let dry_run = request.dry_run;
    let response = client.apply(request).await?;
    Ok(render_results(&response.results, dry_run))
}

pub fn render_results(results: &[proto::ApplyResult], dry_run: bool) -> String {
    let mut text = String::new();
    for result in results {
        let name = match &result.object {
            Some(object) => object_name_from(&object.kind, &object.name),
            None => "<unnamed object>".to_owned(),
        };
        let action = match proto::ApplyAction::try_from(result.action) {
            Ok(proto::ApplyAction::Created) => "created",
            Ok(proto::ApplyAction::Configured) => "configured",
            Ok(proto::ApplyAction::Unchanged) => "unchanged",
            Ok(proto::ApplyAction::Unspecified) | Err(_) => "applied",
        };
        let suffix = if dry_run { " (dry run)" } else { "" };
        text.push_str(&format!("{name} {action}{suffix}\n"));
    }
    text
}

/// One request for every input. A single input goes as it is (so the node's errors count
/// documents as the file does); several are joined with `---`, JSON files first turned into
/// YAML documents. The join is parsed again and must give the same objects.
pub fn build_request(
    inputs: &[Input],
    resources: &[Resource],
    dry_run: bool,
) -> anyhow::Result<proto::ApplyRequest> {
    let manifests = match inputs {
        [single] => single.text.clone(),
        _ => {
            let mut joined = String::new();
            for input in inputs {
                let text = as_yaml(input)?;
                joined.push_str("---\n");
                joined.push_str(&text);
                if !text.ends_with('\n') {
                    joined.push('\n');
                }
            }
            let keys = |resources: &[Resource]| {
                resources
                    .iter()
                    .map(Resource::key)
                    .collect::<Vec<ObjectKey>>()
            };
            let rejoined = parse_manifests(&joined).ok().map(|parsed| keys(&parsed));
            if rejoined.as_deref() != Some(keys(resources).as_slice()) {
                bail!(
                    "cannot join {} into one request (a document end marker or directive?); \
                     apply them one at a time",
                    origins(inputs)
                );
            }
            joined
        }
    };
    if manifests.len() > MAX_API_MESSAGE_BYTES {
        bail!(
            "the manifests are {} bytes, over the {MAX_API_MESSAGE_BYTES} byte limit of one \
             request; apply them in smaller parts",
            manifests.len()
        );
    }
    Ok(proto::ApplyRequest {
        manifests: manifests.into_bytes(),
        origin: origins(inputs),
        dry_run,
    })
}

/// A JSON file's values as YAML documents; YAML as it is.
fn as_yaml(input: &Input) -> anyhow::Result<String> {
    if !input.text.trim_start().starts_with(['{', '[']) {
        return Ok(input.text.clone());
    }
    let mut text = String::new();
    for value in serde_json::Deserializer::from_str(&input.text).into_iter::<serde_json::Value>() {
        let value = value.with_context(|| format!("{}: invalid json", input.origin))?;
        if !text.is_empty() {
            text.push_str("---\n");
        }
        text.push_str(
            &serde_yaml_ng::to_string(&value)
                .with_context(|| format!("{}: cannot convert to yaml", input.origin))?,
        );
    }
    Ok(text)
}

/// The inputs named in a message: up to three, then a count.
fn origins(inputs: &[Input]) -> String {
    const NAMED: usize = 3;
    let names: Vec<&str> = inputs
        .iter()
        .take(NAMED)
        .map(|input| input.origin.as_str())
        .collect();
    match inputs.len() {
        0 => "no files".to_owned(),
        count if count > NAMED => format!("{} and {} more", names.join(", "), count - NAMED),
        _ => names.join(", "),
    }
}

/// Reads every `-f` argument: files as named, directories' manifest files in sorted order,
/// `-` from stdin (once).
pub fn read_inputs(paths: &[String], recursive: bool) -> anyhow::Result<Vec<Input>> {
    let mut inputs = Vec::new();
    let mut stdin_read = false;
    for path in paths {
        if path == STDIN {
            if stdin_read {
                bail!("-f - (stdin) given more than once");
            }
            stdin_read = true;
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("cannot read stdin")?;
            inputs.push(Input {
                origin: "<stdin>".to_owned(),
                text,
            });
            continue;
        }
        for file in collect_files(Path::new(path), recursive)? {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            inputs.push(Input {
                origin: file.display().to_string(),
                text,
            });
        }
    }
    Ok(inputs)
}

/// The files a `-f PATH` stands for: the file itself, or a directory's `.yaml`, `.yml` and
/// `.json` files sorted by path (with `recursive`, its subdirectories' too, in the same order).
pub fn collect_files(path: &Path, recursive: bool) -> anyhow::Result<Vec<PathBuf>> {
    let metadata =
        std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    if !metadata.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    let mut visited = HashSet::new();
    walk(path, recursive, &mut visited, &mut files)?;
    if files.is_empty() {
        let also = if recursive { " or below it" } else { "" };
        return Err(anyhow!(
            "no .yaml, .yml or .json files in {}{also}",
            path.display()
        ));
    }
    Ok(files)
}

fn walk(
    directory: &Path,
    recursive: bool,
    visited: &mut HashSet<PathBuf>,
    files: &mut Vec<PathBuf>,
) -> anyhow::Result<()> {
    let cannot = || format!("cannot read directory {}", directory.display());
    // A symlink loop under -R would otherwise never end.
    if !visited.insert(std::fs::canonicalize(directory).with_context(cannot)?) {
        return Ok(());
    }
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(directory).with_context(cannot)? {
        entries.push(entry.with_context(cannot)?.path());
    }
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            if recursive {
                walk(&entry, recursive, visited, files)?;
            }
        } else if has_manifest_extension(&entry) {
            files.push(entry);
        }
    }
    Ok(())
}

fn has_manifest_extension(path: &Path) -> bool {
    path.extension()
        .and_then(|extension| extension.to_str())
        .is_some_and(|extension| {
            MANIFEST_EXTENSIONS.contains(&extension.to_ascii_lowercase().as_str())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::testing;

    const SOURCE: &str = "apiVersion: starling.dev/v1alpha1\nkind: Source\nmetadata:\n  name: app\nspec:\n  git:\n    url: https://git.example.com/app.git\n    ref:\n      branch: main\n";
    const GROUP: &str = "apiVersion: starling.dev/v1alpha1\nkind: SyncGroup\nmetadata:\n  name: web\nspec:\n  sourceRef:\n    name: app\n  clusterSelector: {}\n";

    fn input(origin: &str, text: &str) -> Input {
        Input {
            origin: origin.to_owned(),
            text: text.to_owned(),
        }
    }

    /// A fresh directory under the system's temporary directory, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let path =
                std::env::temp_dir().join(format!("starling-apply-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).expect("create a temporary directory");
            TempDir(path)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("create dir");
        std::fs::write(path, text).expect("write file");
    }

    #[test]
    fn directories_give_their_manifest_files_sorted() {
        let dir = TempDir::new("sorted");
        let root = dir.path();
        write(&root.join("b.yml"), GROUP);
        write(&root.join("a.yaml"), SOURCE);
        write(&root.join("c.JSON"), "{}");
        write(&root.join("notes.txt"), "not a manifest");
        write(&root.join("sub/d.yaml"), SOURCE);
        let names = |files: Vec<PathBuf>| {
            files
                .iter()
                .map(|file| {
                    file.strip_prefix(root)
                        .expect("under root")
                        .display()
                        .to_string()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(collect_files(root, false).unwrap()),
            ["a.yaml", "b.yml", "c.JSON"]
        );
        assert_eq!(
            names(collect_files(root, true).unwrap()),
            ["a.yaml", "b.yml", "c.JSON", "sub/d.yaml"]
        );
        // A file is taken whatever its extension.
        let notes = root.join("notes.txt");
        assert_eq!(
            collect_files(&notes, false).unwrap(),
            std::slice::from_ref(&notes)
        );
    }

    #[test]
    fn empty_directories_and_missing_paths_are_errors() {
        let dir = TempDir::new("empty");
        write(&dir.path().join("sub/a.yaml"), SOURCE);
        let error = collect_files(dir.path(), false).unwrap_err().to_string();
        assert!(
            error.starts_with("no .yaml, .yml or .json files in"),
            "{error}"
        );
        assert_eq!(collect_files(dir.path(), true).unwrap().len(), 1);
        let error = format!(
            "{:#}",
            collect_files(&dir.path().join("nope"), false).unwrap_err()
        );
        assert!(
            error.starts_with("cannot read ") && error.contains("nope"),
            "{error}"
        );
    }

    #[test]
    fn a_bad_document_names_its_file_once() {
        let bad = format!("{SOURCE}---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n");
        let error = parse_inputs(&[input("ok.yaml", SOURCE), input("bad.yaml", &bad)]).unwrap_err();
        assert_eq!(
            format!("{error:#}"),
            "bad.yaml: document 2: unknown kind \"Pod\" (expected Source, Cluster, Sync, SyncGroup or Secret)"
        );
        let cluster = "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: c1\n";
        let error = parse_inputs(&[input("c.yaml", cluster)]).unwrap_err();
        assert_eq!(
            format!("{error:#}"),
            "c.yaml: document 1: Cluster \"c1\": missing field `spec`"
        );
    }

    #[test]
    fn one_input_is_sent_as_it_is() {
        let inputs = [input("a.yaml", SOURCE)];
        let resources = parse_inputs(&inputs).unwrap();
        let request = build_request(&inputs, &resources, true).unwrap();
        assert_eq!(request.manifests, SOURCE.as_bytes());
        assert_eq!(request.origin, "a.yaml");
        assert!(request.dry_run);
    }

    #[test]
    fn several_inputs_are_joined_with_json_converted() {
        let json = r#"{"apiVersion":"starling.dev/v1alpha1","kind":"Cluster","metadata":{"name":"c1","labels":{"env":"prod"}},"spec":{}}"#;
        let no_newline = GROUP.trim_end();
        let inputs = [
            input("a.yaml", SOURCE),
            input("b.json", json),
            input("c.yaml", no_newline),
        ];
        let resources = parse_inputs(&inputs).unwrap();
        let request = build_request(&inputs, &resources, false).unwrap();
        let text = String::from_utf8(request.manifests).unwrap();
        assert_eq!(parse_manifests(&text).unwrap(), resources);
        assert_eq!(request.origin, "a.yaml, b.json, c.yaml");
    }

    #[test]
    fn results_read_like_kubectl() {
        let result = |kind: &str, name: &str, action: proto::ApplyAction| proto::ApplyResult {
            object: Some(proto::ObjectRef {
                kind: kind.into(),
                namespace: "default".into(),
                name: name.into(),
            }),
            action: action.into(),
            generation: 1,
        };
        let results = [
            result("SyncGroup", "web", proto::ApplyAction::Created),
            result("Source", "app", proto::ApplyAction::Configured),
            result("Secret", "c1-kubeconfig", proto::ApplyAction::Unchanged),
        ];
        assert_eq!(
            render_results(&results, false),
            "syncgroup.starling.dev/web created\nsource.starling.dev/app configured\nsecret/c1-kubeconfig unchanged\n"
        );
        assert_eq!(
            render_results(&results[..1], true),
            "syncgroup.starling.dev/web created (dry run)\n"
        );
    }

    #[tokio::test]
    async fn applying_twice_reports_unchanged_and_rejections_are_one_line() {
        let server = testing::serve().await;
        let client = Client::connect(&server).await.unwrap();
        let inputs = [input("a.yaml", SOURCE), input("b.yaml", GROUP)];
        let resources = parse_inputs(&inputs).unwrap();
        let request = build_request(&inputs, &resources, false).unwrap();
        assert_eq!(
            apply(&client, request.clone()).await.unwrap(),
            "source.starling.dev/app created\nsyncgroup.starling.dev/web created\n"
        );
        assert_eq!(
            apply(&client, request).await.unwrap(),
            "source.starling.dev/app unchanged\nsyncgroup.starling.dev/web unchanged\n"
        );
        let forbidden = [input(
            "f.yaml",
            &SOURCE.replace("name: app", "name: forbidden"),
        )];
        let resources = parse_inputs(&forbidden).unwrap();
        let error = apply(
            &client,
            build_request(&forbidden, &resources, false).unwrap(),
        )
        .await
        .unwrap_err();
        assert_eq!(
            format!("{error:#}"),
            "rejected: specs are read-only in operator mode"
        );
    }
}

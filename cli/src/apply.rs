//! `starling apply -f FILE|DIR|-`: send manifests to Starling and report, per object, whether
//! it was created, configured or left unchanged (as `kubectl apply` does).
//!
//! ```text
//! -f paths ──collect (dirs: *.yaml|*.yml|*.json, sorted; -R recursive)──► files
//!   ──parse_manifests_with each (fails fast: "web.yaml: document 2: …"; --validate=warn:
//!     "warning: web.yaml: document 2: … unknown field …" on stderr)──► one body (`---` joined)
//!   ──one Apply request (with the --validate mode)──► "syncgroup.starling.dev/web created|configured|unchanged"
//! ```
//!
//! Validation happens locally first so a typo is reported before anything is sent; the node
//! validates again with the same `--validate` rule, and its rejection is reported as
//! `rejected: …`. One request means one commit: either every object of the invocation is
//! applied or none is.

use std::collections::HashSet;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};
use fleet::manifest::{FieldValidation, ObjectKey, Resource, parse_manifests_with};
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
    /// What a field its kind does not know (a misspelled or obsolete one) does, as kubectl's
    /// --validate: `strict` (or `true`) refuses the manifest naming every such field and the
    /// nearest known one, `warn` prints each on stderr and applies without them, `ignore` (or
    /// `false`) drops them without a word. The node applies the same rule.
    #[arg(
        long,
        value_enum,
        value_name = "MODE",
        default_value_t = Validate::Strict,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "strict"
    )]
    pub validate: Validate,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `--validate`: what unknown fields do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Validate {
    /// Refuse the manifest.
    #[default]
    #[value(alias = "true")]
    Strict,
    /// Print each unknown field on stderr; apply without them.
    Warn,
    /// Apply without them, silently.
    #[value(alias = "false")]
    Ignore,
}

impl Validate {
    pub fn field_validation(self) -> FieldValidation {
        match self {
            Validate::Strict => FieldValidation::Strict,
            Validate::Warn => FieldValidation::Warn,
            Validate::Ignore => FieldValidation::Ignore,
        }
    }

    fn to_proto(self) -> proto::FieldValidation {
        match self {
            Validate::Strict => proto::FieldValidation::Strict,
            Validate::Warn => proto::FieldValidation::Warn,
            Validate::Ignore => proto::FieldValidation::Ignore,
        }
    }
}

/// One manifest file's text and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// The path as found, or `<stdin>`.
    pub origin: String,
    pub text: String,
}

/// The resources of every input, validated; the first bad document fails it all.
pub fn parse_inputs(
    inputs: &[Input],
    validation: FieldValidation,
) -> anyhow::Result<Vec<Resource>> {
    Ok(parse_inputs_warning(inputs, validation)?.0)
}

/// [`parse_inputs`], with the warnings of `--validate=warn`, one line per unknown field, each
/// naming its file (`web.yaml: document 2: SyncGroup "web": unknown field spec.selector; …`).
pub fn parse_inputs_warning(
    inputs: &[Input],
    validation: FieldValidation,
) -> anyhow::Result<(Vec<Resource>, Vec<String>)> {
    let mut resources = Vec::new();
    let mut warnings = Vec::new();
    for input in inputs {
        // The error's own text already includes its causes: display it alone, not as a chain.
        let parsed = parse_manifests_with(&input.text, validation)
            .map_err(|error| anyhow!("{}: {error}", input.origin))?;
        resources.extend(parsed.resources);
        for warning in &parsed.warnings {
            warnings.extend(
                warning
                    .lines()
                    .into_iter()
                    .map(|line| format!("{}: {line}", input.origin)),
            );
        }
    }
    Ok((resources, warnings))
}

pub fn run(args: ApplyArgs) -> anyhow::Result<()> {
    let inputs = read_inputs(&args.files, args.recursive)?;
    let (resources, warnings) = parse_inputs_warning(&inputs, args.validate.field_validation())?;
    // The node's response lists the same warnings; these name the files.
    for warning in &warnings {
        eprintln!("warning: {warning}");
    }
    if resources.is_empty() {
        bail!("no objects to apply in {}", origins(&inputs));
    }
    let request = build_request(&inputs, &resources, args.dry_run, args.validate)?;
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
    validate: Validate,
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
            let rejoined = parse_manifests_with(&joined, validate.field_validation())
                .ok()
                .map(|parsed| keys(&parsed.resources));
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
        field_validation: validate.to_proto().into(),
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
mod tests;

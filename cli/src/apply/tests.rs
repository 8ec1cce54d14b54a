//! `starling apply`: reading inputs, joining them into one request, `--validate`, and the
//! results against a canned node.

use super::*;
use crate::client::testing;
use fleet::manifest::parse_manifests;

const STRICT: FieldValidation = FieldValidation::Strict;

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
    let error =
        parse_inputs(&[input("ok.yaml", SOURCE), input("bad.yaml", &bad)], STRICT).unwrap_err();
    assert_eq!(
        format!("{error:#}"),
        "bad.yaml: document 2: unknown kind \"Pod\" (expected Source, Cluster, Sync, SyncGroup, Secret, Provider or Alert)"
    );
    let cluster = "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: c1\n";
    let error = parse_inputs(&[input("c.yaml", cluster)], STRICT).unwrap_err();
    assert_eq!(
        format!("{error:#}"),
        "c.yaml: document 1: Cluster \"c1\": missing field `spec`"
    );
}

#[test]
fn one_input_is_sent_as_it_is() {
    let inputs = [input("a.yaml", SOURCE)];
    let resources = parse_inputs(&inputs, STRICT).unwrap();
    let request = build_request(&inputs, &resources, true, Validate::Strict).unwrap();
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
    let resources = parse_inputs(&inputs, STRICT).unwrap();
    let request = build_request(&inputs, &resources, false, Validate::Strict).unwrap();
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
    let resources = parse_inputs(&inputs, STRICT).unwrap();
    let request = build_request(&inputs, &resources, false, Validate::Strict).unwrap();
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
    let resources = parse_inputs(&forbidden, STRICT).unwrap();
    let error = apply(
        &client,
        build_request(&forbidden, &resources, false, Validate::Strict).unwrap(),
    )
    .await
    .unwrap_err();
    assert_eq!(
        format!("{error:#}"),
        "rejected: specs are read-only in operator mode"
    );
}

const TYPO: &str = "apiVersion: starling.dev/v1alpha1\nkind: SyncGroup\nmetadata:\n  name: web\nspec:\n  sourceRef:\n    name: app\n  selector: {}\n";

#[test]
fn a_misspelled_field_is_refused_before_anything_is_sent() {
    let error =
        parse_inputs(&[input("ok.yaml", SOURCE), input("web.yaml", TYPO)], STRICT).unwrap_err();
    assert_eq!(
        format!("{error:#}"),
        "web.yaml: document 1: SyncGroup \"web\": unknown field spec.selector; did you mean spec.clusterSelector?"
    );
}

#[test]
fn warn_names_each_unknown_field_with_its_file_and_the_request_carries_the_mode() {
    let inputs = [input("ok.yaml", SOURCE), input("web.yaml", TYPO)];
    let (resources, warnings) = parse_inputs_warning(&inputs, FieldValidation::Warn).unwrap();
    assert_eq!(resources.len(), 2);
    assert_eq!(
        warnings,
        [
            "web.yaml: document 1: SyncGroup \"web\": unknown field spec.selector; did you mean spec.clusterSelector?"
        ]
    );
    // Joined again (several inputs), the body parses under the same mode.
    let request = build_request(&inputs, &resources, false, Validate::Warn).unwrap();
    assert_eq!(
        request.field_validation,
        proto::FieldValidation::Warn as i32
    );
    let (_, silent) = parse_inputs_warning(&inputs, FieldValidation::Ignore).unwrap();
    assert!(silent.is_empty());
}

#[test]
fn validate_reads_like_kubectl() {
    #[derive(clap::Parser)]
    struct Command {
        #[command(flatten)]
        apply: ApplyArgs,
    }
    let parse = |extra: &[&str]| {
        use clap::Parser as _;
        let mut args = vec!["apply", "-f", "x.yaml"];
        args.extend_from_slice(extra);
        Command::try_parse_from(args).map(|command| command.apply.validate)
    };
    assert_eq!(parse(&[]).unwrap(), Validate::Strict);
    assert_eq!(parse(&["--validate"]).unwrap(), Validate::Strict);
    assert_eq!(parse(&["--validate=true"]).unwrap(), Validate::Strict);
    assert_eq!(parse(&["--validate=warn"]).unwrap(), Validate::Warn);
    assert_eq!(parse(&["--validate=ignore"]).unwrap(), Validate::Ignore);
    assert_eq!(parse(&["--validate=false"]).unwrap(), Validate::Ignore);
    assert!(parse(&["--validate=loose"]).is_err());
}

#[tokio::test]
async fn the_node_refuses_unknown_fields_unless_told_otherwise() {
    let server = testing::serve().await;
    let client = Client::connect(&server).await.unwrap();
    let inputs = [input("web.yaml", TYPO)];
    let resources = parse_inputs(&inputs, FieldValidation::Ignore).unwrap();
    // A request without a mode (an older client) is strict.
    let mut request = build_request(&inputs, &resources, false, Validate::Ignore).unwrap();
    request.field_validation = proto::FieldValidation::Unspecified.into();
    let error = apply(&client, request).await.unwrap_err();
    assert!(
        format!("{error:#}")
            .contains("unknown field spec.selector; did you mean spec.clusterSelector?"),
        "{error:#}"
    );
    let request = build_request(&inputs, &resources, false, Validate::Ignore).unwrap();
    assert_eq!(
        apply(&client, request).await.unwrap(),
        "syncgroup.starling.dev/web created\n"
    );
}

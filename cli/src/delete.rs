//! `starling delete`: remove objects named on the command line (`KIND NAME...`,
//! `KIND/NAME...`) or by the manifests that created them (`-f FILE|DIR|-`), in one request,
//! reporting `… deleted` or `… not found` per object. Any object not found makes the exit code
//! non-zero unless `--ignore-not-found`. Syncs, SyncGroups and Clusters prune what they
//! applied from their clusters before they go (`--cascade=orphan` leaves it), like kubectl's
//! cascading deletion.

use anyhow::{anyhow, bail};
use fleet::manifest::{DEFAULT_NAMESPACE, FieldValidation, Kind, ObjectKey};

use super::apply::{parse_inputs, read_inputs};
use super::output::{emit, object_name_from};
use crate::client::{Client, ServerArgs, block_on};

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["targets", "files"])))]
pub struct DeleteArgs {
    /// What to delete: a kind and names (`sg web api`), or kind/name pairs (`sg/web src/app`).
    #[arg(value_name = "KIND NAME...|KIND/NAME...", conflicts_with = "files")]
    pub targets: Vec<String>,
    /// Delete the objects of these manifests (file, directory or `-`); repeatable.
    #[arg(short = 'f', long = "filename", value_name = "FILE|DIR|-")]
    pub files: Vec<String>,
    /// Also read the directories under each directory given with -f.
    #[arg(short = 'R', long, requires = "files")]
    pub recursive: bool,
    /// Namespace of objects that name none; `default` when unset.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Succeed, silently, for objects that do not exist.
    #[arg(long)]
    pub ignore_not_found: bool,
    /// `background` (the default): a Sync, SyncGroup or Cluster goes once its owners have
    /// deleted what it applied from the clusters (`starling get syncs` shows them `Retiring`
    /// meanwhile). `orphan`: it goes at once and its objects stay on the clusters.
    #[arg(long, value_enum, default_value_t = Cascade::Background)]
    pub cascade: Cascade,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// What happens to what a deleted object applied (`--cascade`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Cascade {
    /// Pruned from the clusters first, then the object goes.
    Background,
    /// Left on the clusters; the object goes at once.
    Orphan,
}

pub fn run(args: DeleteArgs) -> anyhow::Result<()> {
    let namespace = args.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
    let keys = if args.files.is_empty() {
        keys_from_targets(&args.targets, namespace)?
    } else {
        keys_from_files(&args.files, args.recursive, args.namespace.as_deref())?
    };
    let report = block_on(async {
        let client = Client::connect(&args.server).await?;
        delete(&client, &keys, args.cascade).await
    })?;
    emit(&report.render(args.ignore_not_found))?;
    match report.not_found {
        0 => Ok(()),
        _ if args.ignore_not_found => Ok(()),
        missing => Err(anyhow!(
            "{missing} of {} objects not found",
            report.lines.len()
        )),
    }
}

/// What the node answered, in request order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// The object's name and whether it was deleted.
    pub lines: Vec<(String, bool)>,
    pub not_found: usize,
}

impl Report {
    pub fn render(&self, ignore_not_found: bool) -> String {
        let mut text = String::new();
        for (name, deleted) in &self.lines {
            match deleted {
                true => text.push_str(&format!("{name} deleted\n")),
                false if ignore_not_found => {}
                false => text.push_str(&format!("{name} not found\n")),
            }
        }
        text
    }
}

/// Deletes every object in one request.
pub async fn delete(
    client: &Client,
    keys: &[ObjectKey],
    cascade: Cascade,
) -> anyhow::Result<Report> {
    let objects = keys
        .iter()
        .map(|key| proto::ObjectRef {
            kind: key.kind.as_str().to_owned(),
            namespace: key.namespace.clone(),
            name: key.name.clone(),
        })
        .collect();
    let response = client
        .delete(proto::DeleteRequest {
            objects,
            orphan: cascade == Cascade::Orphan,
        })
        .await?;
    let mut report = Report::default();
    for result in response.results {
        let name = match &result.object {
            Some(object) => object_name_from(&object.kind, &object.name),
            None => "<unnamed object>".to_owned(),
        };
        if !result.deleted {
            report.not_found += 1;
        }
        report.lines.push((name, result.deleted));
    }
    Ok(report)
}

/// `KIND NAME...` or `KIND/NAME...` (each `KIND/NAMESPACE/NAME` also accepted), without
/// repeats.
pub fn keys_from_targets(targets: &[String], namespace: &str) -> anyhow::Result<Vec<ObjectKey>> {
    let Some(first) = targets.first() else {
        bail!("name what to delete: KIND NAME... or KIND/NAME..., or -f FILE");
    };
    let mut keys = Vec::new();
    if first.contains('/') {
        for target in targets {
            let key = match target.split('/').collect::<Vec<_>>().as_slice() {
                [kind, name] if !name.is_empty() => ObjectKey::new(kind.parse()?, namespace, *name),
                [_, _, _] => target.parse::<ObjectKey>()?,
                _ => bail!("invalid object {target:?}: expected KIND/NAME"),
            };
            push_unique(&mut keys, key);
        }
    } else {
        let kind: Kind = first.parse()?;
        let names = &targets[1..];
        if names.is_empty() {
            bail!("name the {} to delete: {first} NAME...", kind.plural());
        }
        for name in names {
            if name.contains('/') || name.is_empty() {
                bail!(
                    "invalid name {name:?}: mix neither KIND NAME with KIND/NAME nor empty names"
                );
            }
            push_unique(&mut keys, ObjectKey::new(kind, namespace, name.as_str()));
        }
    }
    Ok(keys)
}

/// The objects of manifest files; those that name no namespace are in `namespace` (or the
/// default one).
pub fn keys_from_files(
    files: &[String],
    recursive: bool,
    namespace: Option<&str>,
) -> anyhow::Result<Vec<ObjectKey>> {
    let inputs = read_inputs(files, recursive)?;
    let mut keys = Vec::new();
    // Only the identities are needed, as kubectl's delete: an object applied with
    // `--validate=ignore` can be deleted with the same file.
    for resource in parse_inputs(&inputs, FieldValidation::Ignore)? {
        let namespace = match &resource.metadata().namespace {
            Some(own) => own.as_str(),
            None => namespace.unwrap_or(DEFAULT_NAMESPACE),
        };
        push_unique(
            &mut keys,
            ObjectKey::new(resource.kind(), namespace, resource.name()),
        );
    }
    if keys.is_empty() {
        bail!("no objects to delete in the given files");
    }
    Ok(keys)
}

fn push_unique(keys: &mut Vec<ObjectKey>, key: ObjectKey) {
    if !keys.contains(&key) {
        keys.push(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::testing;

    fn targets(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn kind_and_names_become_keys() {
        let keys = keys_from_targets(&targets("sg web api web"), "prod").unwrap();
        assert_eq!(
            keys,
            [
                ObjectKey::new(Kind::SyncGroup, "prod", "web"),
                ObjectKey::new(Kind::SyncGroup, "prod", "api")
            ]
        );
        let keys =
            keys_from_targets(&targets("src/app secret/kc clusters/other/c1"), "default").unwrap();
        assert_eq!(
            keys,
            [
                ObjectKey::new(Kind::Source, "default", "app"),
                ObjectKey::new(Kind::Secret, "default", "kc"),
                ObjectKey::new(Kind::Cluster, "other", "c1"),
            ]
        );
    }

    #[test]
    fn bad_targets_are_explained() {
        let error = |text: &str| {
            keys_from_targets(&targets(text), "default")
                .unwrap_err()
                .to_string()
        };
        assert_eq!(error("sg"), "name the syncgroups to delete: sg NAME...");
        assert!(error("pods x").starts_with("unknown kind \"pods\""));
        assert!(error("sg a/b").starts_with("invalid name \"a/b\""));
        assert!(error("sg/").starts_with("invalid object \"sg/\""));
        assert!(error("sg/a b").starts_with("invalid object \"b\""));
    }

    #[test]
    fn reports_list_missing_objects_unless_ignored() {
        let report = Report {
            lines: vec![
                ("syncgroup.starling.dev/web".into(), true),
                ("source.starling.dev/app".into(), false),
            ],
            not_found: 1,
        };
        assert_eq!(
            report.render(false),
            "syncgroup.starling.dev/web deleted\nsource.starling.dev/app not found\n"
        );
        assert_eq!(report.render(true), "syncgroup.starling.dev/web deleted\n");
    }

    #[tokio::test]
    async fn deleting_reports_each_object() {
        let server = testing::serve().await;
        let client = Client::connect(&server).await.unwrap();
        let manifest =
            "apiVersion: starling.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: c1\nspec: {}\n";
        let resources = fleet::manifest::parse_manifests(manifest).unwrap();
        let request = proto::ApplyRequest {
            manifests: manifest.into(),
            origin: "c.yaml".into(),
            dry_run: false,
            ..Default::default()
        };
        client.apply(request).await.unwrap();
        assert_eq!(resources.len(), 1);
        let keys = keys_from_targets(&targets("clusters c1 c2"), "default").unwrap();
        let report = delete(&client, &keys, Cascade::Background).await.unwrap();
        assert_eq!(report.not_found, 1);
        assert_eq!(
            report.render(false),
            "cluster.starling.dev/c1 deleted\ncluster.starling.dev/c2 not found\n"
        );
    }
}

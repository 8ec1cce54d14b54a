//! What a new render would change on one cluster (`starling diff`): the objects it would
//! create, change and prune, each with a unified diff of its YAML, computed without contacting
//! the target.
//!
//! ```text
//! before = the render of the revision the cluster last applied   (what it holds)
//! after  = the render of the new revision                         (what it would hold)
//! held   = the inventory Starling recorded on the cluster         (what it owns there)
//!
//! in after, not in before or held  → create
//! in after and before, different   → update (the diff of the two manifests)
//! in held, not in after            → prune (orphan when the Sync does not prune)
//! ```
//!
//! Both sides leave out the fields the Sync's `ignoreDifferences` names, so that what another
//! controller owns never shows as a change. Helm hooks are run by each sync, not held, and are
//! left out. A Secret shows as changed or not, never its values: its diff is empty and
//! `secret` is set. The changes of a cluster have a [`digest`]: clusters with the same digest
//! would see the identical change, which is how the fleet-wide diff groups them.

use std::collections::{BTreeMap, BTreeSet};

use fleet::fieldpath::IgnoreRules;
use fleet::resources::ObjectRef;
use serde::Serialize;
use serde_json::Value;

use crate::render::RenderedObject;

/// The largest diff kept for one object; a longer one is cut with a line saying so.
pub const MAX_OBJECT_DIFF_BYTES: usize = 64 * 1024;

/// What the new render does to one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    Create,
    Update,
    Prune,
    /// Left out of the new render, but kept on the cluster: the Sync does not prune.
    Orphan,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Create => "create",
            Change::Update => "update",
            Change::Prune => "prune",
            Change::Orphan => "orphan",
        }
    }
}

/// One object's change, with the unified diff of its YAML (`a/` before, `b/` after).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ObjectChange {
    pub api_version: String,
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    pub change: Change,
    /// Empty for a Secret, and for a prune whose old manifest is not known.
    pub diff: String,
    /// A Secret: its values are never shown.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub secret: bool,
}

impl ObjectChange {
    /// `apps/v1 Deployment demo/web`, as messages name an object.
    pub fn describe(&self) -> String {
        match &self.namespace {
            Some(namespace) => format!(
                "{} {} {namespace}/{}",
                self.api_version, self.kind, self.name
            ),
            None => format!("{} {} {}", self.api_version, self.kind, self.name),
        }
    }
}

/// The two renders and the inventory of one cluster.
pub struct DiffInput<'a> {
    /// The render of the revision the cluster last applied (empty when it applied none, or
    /// when that render is not known: then every object held shows as updated from nothing).
    pub before: &'a [RenderedObject],
    pub after: &'a [RenderedObject],
    /// What Starling recorded on the cluster.
    pub held: &'a [ObjectRef],
    /// The namespace of namespaced objects that name none (the render's, else the target's
    /// default).
    pub default_namespace: &'a str,
    pub ignore: &'a IgnoreRules,
    /// Whether the Sync prunes what leaves its render.
    pub prune: bool,
}

/// The object's identity for the diff: group (not version: a new version of the same object
/// is an update), kind, namespace (`""` when none is written) and name.
type Key = (String, String, String, String);

fn key_of(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Key {
    let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
    (
        group.to_owned(),
        kind.to_owned(),
        namespace.unwrap_or_default().to_owned(),
        name.to_owned(),
    )
}

fn rendered_key(object: &RenderedObject) -> Key {
    let reference = &object.reference;
    key_of(
        &reference.api_version,
        &reference.kind,
        reference.namespace.as_deref(),
        &reference.name,
    )
}

/// Whether `key` is held, given that the inventory records the namespace an object without
/// one got (the default), while the render leaves it unwritten.
fn held_as(held: &BTreeSet<Key>, key: &Key, default_namespace: &str) -> Option<Key> {
    if held.contains(key) {
        return Some(key.clone());
    }
    let (group, kind, namespace, name) = key;
    let other = if namespace.is_empty() {
        default_namespace
    } else if namespace == default_namespace {
        ""
    } else {
        return None;
    };
    let alias = (group.clone(), kind.clone(), other.to_owned(), name.clone());
    held.contains(&alias).then_some(alias)
}

/// The manifests of `objects` without hooks, keyed, each without its ignored fields.
fn manifests(objects: &[RenderedObject], ignore: &IgnoreRules) -> BTreeMap<Key, Value> {
    let mut out = BTreeMap::new();
    for object in objects.iter().filter(|o| o.hook.is_none()) {
        let reference = &object.reference;
        let mut manifest = object.manifest.clone();
        ignore
            .for_object(
                &reference.api_version,
                &reference.kind,
                reference.namespace.as_deref(),
                &reference.name,
            )
            .strip(&mut manifest);
        out.insert(rendered_key(object), manifest);
    }
    out
}

fn yaml(manifest: &Value) -> String {
    serde_yaml_ng::to_string(manifest).unwrap_or_else(|error| format!("# not YAML: {error}\n"))
}

/// The unified diff of two YAML texts, bounded by [`MAX_OBJECT_DIFF_BYTES`].
fn unified(label: &str, before: &str, after: &str) -> String {
    let diff = similar::TextDiff::from_lines(before, after);
    let mut text = diff
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{label}"), &format!("b/{label}"))
        .to_string();
    if text.len() > MAX_OBJECT_DIFF_BYTES {
        let mut end = MAX_OBJECT_DIFF_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("\n... (diff cut at 64 KiB)\n");
    }
    text
}

fn is_secret(key: &Key) -> bool {
    key.0.is_empty() && key.1 == "Secret"
}

/// The changes `input.after` makes to a cluster holding `input.held`, in a stable order
/// (group, kind, namespace, name).
pub fn diff(input: &DiffInput<'_>) -> Vec<ObjectChange> {
    let before = manifests(input.before, input.ignore);
    let after = manifests(input.after, input.ignore);
    let held: BTreeSet<Key> = input
        .held
        .iter()
        .map(|r| key_of(&r.api_version, &r.kind, r.namespace.as_deref(), &r.name))
        .collect();
    let api_versions: BTreeMap<Key, &str> = input
        .after
        .iter()
        .chain(input.before)
        .map(|o| (rendered_key(o), o.reference.api_version.as_str()))
        .chain(input.held.iter().map(|r| {
            (
                key_of(&r.api_version, &r.kind, r.namespace.as_deref(), &r.name),
                r.api_version.as_str(),
            )
        }))
        .collect();
    let mut changes = Vec::new();
    let mut covered = BTreeSet::new();
    let mut push = |key: &Key, change: Change, old: Option<&Value>, new: Option<&Value>| {
        let secret = is_secret(key);
        let (group, kind, namespace, name) = key;
        let label = match namespace.is_empty() {
            true => format!("{kind}/{name}"),
            false => format!("{kind}/{namespace}/{name}"),
        };
        let text = |value: Option<&Value>| value.map(yaml).unwrap_or_default();
        let diff = if secret || (old.is_none() && new.is_none()) {
            String::new()
        } else {
            unified(&label, &text(old), &text(new))
        };
        let api_version = api_versions.get(key).map_or_else(
            || match group.is_empty() {
                true => "v1".to_owned(),
                false => format!("{group}/v1"),
            },
            |v| (*v).to_owned(),
        );
        changes.push(ObjectChange {
            api_version,
            kind: kind.clone(),
            namespace: (!namespace.is_empty()).then(|| namespace.clone()),
            name: name.clone(),
            change,
            diff,
            secret,
        });
    };
    for (key, new) in &after {
        let was_held = held_as(&held, key, input.default_namespace);
        if let Some(alias) = &was_held {
            covered.insert(alias.clone());
        }
        covered.insert(key.clone());
        match before.get(key) {
            Some(old) if old == new => {}
            Some(old) => push(key, Change::Update, Some(old), Some(new)),
            // Held, but the old render is not known: shown against nothing.
            None if was_held.is_some() => push(key, Change::Update, None, Some(new)),
            None => push(key, Change::Create, None, Some(new)),
        }
    }
    for key in &held {
        if covered.contains(key) {
            continue;
        }
        let change = if input.prune {
            Change::Prune
        } else {
            Change::Orphan
        };
        let old = before.get(key).or_else(|| {
            // The inventory's namespace is the one the render left unwritten.
            let (group, kind, namespace, name) = key;
            (namespace == input.default_namespace)
                .then(|| before.get(&(group.clone(), kind.clone(), String::new(), name.clone())))
                .flatten()
        });
        push(key, change, old, None);
    }
    changes
        .sort_by_cached_key(|c| key_of(&c.api_version, &c.kind, c.namespace.as_deref(), &c.name));
    changes
}

/// The identity of a cluster's changes: equal for clusters that would see the identical
/// change (the same objects, the same diffs).
pub fn digest(changes: &[ObjectChange]) -> u128 {
    let text = serde_json::to_vec(changes).unwrap_or_default();
    xxhash_rust::xxh3::xxh3_128(&text)
}

/// Counts of a cluster's changes by kind of change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ChangeCounts {
    pub create: u64,
    pub update: u64,
    pub prune: u64,
    pub orphan: u64,
}

impl ChangeCounts {
    pub fn of(changes: &[ObjectChange]) -> ChangeCounts {
        let mut counts = ChangeCounts::default();
        for change in changes {
            match change.change {
                Change::Create => counts.create += 1,
                Change::Update => counts.update += 1,
                Change::Prune => counts.prune += 1,
                Change::Orphan => counts.orphan += 1,
            }
        }
        counts
    }
}

#[cfg(test)]
mod tests;

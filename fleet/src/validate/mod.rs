//! Validation of resources before they enter the fleet state: every rule the types cannot
//! express, each error naming the field path (`spec.git.ref`, `spec.rollout.maxUnavailable`, …)
//! and the bad value.
//!
//! ```text
//! Resource::validate --> per kind (validate_source, validate_cluster, validate_sync, validate_sync_group,
//!                        validate_provider, validate_alert)
//!                        ├─ metadata: DNS-1123 names, labels, annotations within 256 KiB
//!                        ├─ spec: refs, urls, paths, selectors, durations, variables, budgets
//!                        └─ size: the object within 1.5 MiB as JSON (a Secret's data within 1 MiB)
//! ```
//!
//! All problems of a resource are reported together ([`ValidationError::Several`]) so that a
//! user fixes a manifest in one round. The module also resolves the defaults that depend on
//! validated fields: [`max_unavailable`] and the intervals and time-outs.

//!
//! ```text
//! validate.rs        the error, the per-kind validators, the checks of whole sections
//! validate/rules.rs  single-field rules: names, git url and ref, semver, commit, path, selector
//! validate/render.rs the render spec: Helm fields, release name, values, overrides
//! validate/notify.rs the notification kinds: Provider urls and time-out, Alert sources and filters
//! validate/defaults.rs  resolved values: maxUnavailable budget, intervals, time-outs
//! validate/size.rs   size limits, the same as a Kubernetes API server's
//! ```

mod defaults;
mod notify;
mod render;
mod rules;
mod size;

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

pub use defaults::*;
pub use notify::{
    EVENT_SOURCE_KINDS, check_notify_url, check_regex, validate_alert, validate_provider,
};
pub use render::{MAX_RELEASE_NAME, check_release_name};
pub use rules::*;
pub use size::{
    MAX_ANNOTATIONS_BYTES, MAX_OBJECT_BYTES, MAX_SECRET_DATA_BYTES, check_annotations_size,
    check_object_size, check_secret_data_size, json_size,
};

use crate::duration::{DurationError, parse_duration};
use crate::fieldpath::IgnoreRules;
use crate::health::HealthChecks;
use crate::resources::{
    Cluster, HealthCheck, IgnoreDifference, NamespaceMetadata, RolloutPolicy, Source, SourceSpec,
    Sync, SyncGroup, SyncTemplate,
};
use crate::selector::{SelectorError, check_label_key, check_label_value};
use crate::vars::{self, VarError};

/// A rule a resource breaks. Every variant names the field path; most carry the bad value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    #[error("{field}: {value:?} is not a valid name: {reason}")]
    Name {
        field: String,
        value: String,
        reason: String,
    },
    #[error("{field}: must not be empty")]
    Required { field: String },
    #[error("{field}: exactly one of branch, tag, semver or commit must be set, {found}")]
    GitRef { field: String, found: String },
    #[error("{field}: {value:?} is not a valid git {what}: {reason}")]
    GitName {
        field: String,
        what: &'static str,
        value: String,
        reason: String,
    },
    #[error("{field}: {value:?} is not a commit: expected 7 to 40 hexadecimal characters")]
    Commit { field: String, value: String },
    #[error("{field}: {value:?} is not a valid semver range: {reason}")]
    SemverRange {
        field: String,
        value: String,
        reason: String,
    },
    #[error("{field}: {value:?} is not a supported git url: {reason}")]
    GitUrl {
        field: String,
        value: String,
        reason: String,
    },
    #[error("{field}: {source}")]
    Selector {
        field: String,
        source: SelectorError,
    },
    #[error("{field}: {value:?} is not a valid label: {reason}")]
    Label {
        field: String,
        value: String,
        reason: String,
    },
    #[error("{field}: {value} is out of range: {reason}")]
    MaxUnavailable {
        field: String,
        value: String,
        reason: String,
    },
    #[error("{field}: {value:?} is not a valid path: {reason}")]
    Path {
        field: String,
        value: String,
        reason: String,
    },
    #[error("{field}: {source}")]
    Variable { field: String, source: VarError },
    #[error("{field}: duplicate dependency {name:?}")]
    DuplicateDependency { field: String, name: String },
    #[error("{field}: {name:?} depends on itself")]
    SelfDependency { field: String, name: String },
    #[error("{field}: {source}")]
    Duration {
        field: String,
        source: DurationError,
    },
    #[error("{field}: {value:?} must be greater than zero")]
    ZeroDuration { field: String, value: String },
    /// Over a size limit of the Kubernetes API (see [`MAX_OBJECT_BYTES`] and the others).
    #[error(
        "{field}: too large: {size} bytes {what}, over the limit of {limit} bytes ({limit_text})"
    )]
    TooLarge {
        field: String,
        what: &'static str,
        size: usize,
        limit: usize,
        limit_text: &'static str,
    },
    /// A reference into another namespace that tenancy never allows.
    #[error(
        "{field}: {value:?} is another namespace; a {kind} may only use Sources in its own namespace ({own})"
    )]
    CrossNamespaceSource {
        field: String,
        value: String,
        kind: &'static str,
        own: String,
    },
    #[error("{field}: at most {limit} namespaces, found {found}")]
    TooManyNamespaces {
        field: String,
        limit: usize,
        found: usize,
    },
    #[error("{field}: {reason}")]
    Render { field: String, reason: String },
    /// A Provider's `address` or `proxy` that is not an http(s) url (the value is not
    /// repeated: it may carry a token).
    #[error("{field}: {reason}")]
    NotifyUrl { field: String, reason: String },
    #[error(
        "{field}: unknown kind {value:?}: expected SyncGroup, Sync, Source, Cluster, Replica or *"
    )]
    EventSourceKind { field: String, value: String },
    /// `kind: Replica` on an Alert outside the installation's namespace.
    #[error(
        "{field}: Replica events are the installation's, not namespace {namespace:?}'s: only an Alert in namespace starling-system may watch them"
    )]
    InstallationEvents { field: String, namespace: String },
    #[error("{field}: {value:?} is not a valid regular expression: {reason}")]
    Regex {
        field: String,
        value: String,
        reason: String,
    },
    /// A Source that names no kind, or several, or a malformed Helm or OCI field.
    #[error("{field}: {reason}")]
    Source { field: String, reason: String },
    /// An `ignoreDifferences` path that does not parse, with the position.
    #[error(transparent)]
    IgnorePath(#[from] crate::fieldpath::RuleError),
    #[error("{field}: {reason}")]
    NamespaceMetadata { field: String, reason: String },
    /// A `healthChecks` expression that does not compile, with the position.
    #[error(transparent)]
    HealthExpression(#[from] crate::health::CheckError),
    #[error("{field}: {reason}")]
    HealthCheck { field: String, reason: String },
    /// An `ignoreDifferences` rule that names no objects or gives away no field.
    #[error("{field}: {reason}")]
    IgnoreRule { field: String, reason: String },
    #[error("{}", join(.0))]
    Several(Vec<ValidationError>),
}

fn join(errors: &[ValidationError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl ValidationError {
    /// Every single error (a `Several` flattened).
    pub fn errors(&self) -> Vec<&ValidationError> {
        match self {
            ValidationError::Several(errors) => {
                errors.iter().flat_map(ValidationError::errors).collect()
            }
            single => vec![single],
        }
    }
}

/// Collects the problems of one resource.
#[derive(Default)]
struct Problems(Vec<ValidationError>);

impl Problems {
    fn push(&mut self, error: ValidationError) {
        self.0.push(error);
    }

    fn check(&mut self, result: Result<(), ValidationError>) {
        if let Err(error) = result {
            self.push(error);
        }
    }

    fn finish(mut self) -> Result<(), ValidationError> {
        match self.0.len() {
            0 => Ok(()),
            1 => Err(self.0.remove(0)),
            _ => Err(ValidationError::Several(self.0)),
        }
    }
}

/// Validates a Secret: its name and the size of its data.
pub fn validate_secret(secret: &k8s_openapi::api::core::v1::Secret) -> Result<(), ValidationError> {
    let mut problems = Problems::default();
    check_metadata(&mut problems, &secret.metadata);
    problems.check(check_secret_data_size(secret));
    problems.check(check_object_size(secret));
    problems.finish()
}

/// Validates a Source: its name, git url, exactly one ref, durations and secret reference.
pub fn validate_source(source: &Source) -> Result<(), ValidationError> {
    let mut problems = Problems::default();
    check_metadata(&mut problems, &source.metadata);
    check_source_spec(&mut problems, &source.spec);
    problems.check(check_object_size(source));
    problems.finish()
}

fn check_source_spec(problems: &mut Problems, spec: &SourceSpec) {
    let kinds: Vec<&str> = [
        ("git", spec.git.is_some()),
        ("helm", spec.helm.is_some()),
        ("oci", spec.oci.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, present)| present.then_some(name))
    .collect();
    if kinds.len() != 1 {
        let found = if kinds.is_empty() {
            "found none".to_owned()
        } else {
            format!("found {}", kinds.join(", "))
        };
        problems.push(ValidationError::Source {
            field: "spec".into(),
            reason: format!("exactly one of git, helm or oci must be set, {found}"),
        });
    }
    if let Some(git) = &spec.git {
        problems.check(check_git_url("spec.git.url", &git.url));
        problems.check(check_git_ref("spec.git.ref", &git.reference));
    }
    if let Some(helm) = &spec.helm {
        problems.check(rules::check_http_url("spec.helm.url", &helm.url));
        problems.check(rules::check_chart_name("spec.helm.chart", &helm.chart));
        if let Some(version) = &helm.version {
            problems.check(rules::check_version_policy("spec.helm.version", version));
        }
    }
    if let Some(oci) = &spec.oci {
        problems.check(rules::check_oci_url("spec.oci.url", &oci.url));
        match (&oci.tag, &oci.semver) {
            (Some(tag), None) => problems.check(rules::check_oci_tag("spec.oci.tag", tag)),
            (None, Some(range)) => problems.check(check_semver_range("spec.oci.semver", range)),
            (tag, _) => problems.push(ValidationError::Source {
                field: "spec.oci".into(),
                reason: format!(
                    "exactly one of tag or semver must be set, found {}",
                    if tag.is_some() { "both" } else { "none" }
                ),
            }),
        }
    }
    check_duration(problems, "spec.interval", spec.interval.as_deref(), false);
    check_duration(problems, "spec.timeout", spec.timeout.as_deref(), false);
    if let Some(secret) = &spec.secret_ref {
        problems.check(check_object_name("spec.secretRef.name", &secret.name));
    }
}

/// Validates a Cluster: its name, labels (they are what selectors see) and kubeconfig reference.
pub fn validate_cluster(cluster: &Cluster) -> Result<(), ValidationError> {
    let mut problems = Problems::default();
    check_metadata(&mut problems, &cluster.metadata);
    if let Some(reference) = &cluster.spec.kubeconfig_secret_ref {
        problems.check(check_object_name(
            "spec.kubeconfigSecretRef.name",
            &reference.name,
        ));
        if let Some(key) = &reference.key {
            problems.check(check_secret_key("spec.kubeconfigSecretRef.key", key));
        }
    }
    check_namespaces(
        &mut problems,
        "spec.allowedNamespaces",
        &cluster.spec.allowed_namespaces,
        true,
    );
    problems.check(check_object_size(cluster));
    problems.finish()
}

/// Validates a Sync: its name, references and template.
pub fn validate_sync(sync: &Sync) -> Result<(), ValidationError> {
    let mut problems = Problems::default();
    check_metadata(&mut problems, &sync.metadata);
    problems.check(check_object_name(
        "spec.sourceRef.name",
        &sync.spec.source_ref.name,
    ));
    problems.check(check_object_name(
        "spec.clusterRef.name",
        &sync.spec.cluster_ref.name,
    ));
    check_source_namespace(&mut problems, "Sync", &sync.metadata, &sync.spec.source_ref);
    if let Some(namespace) = &sync.spec.cluster_ref.namespace {
        problems.check(name_error(
            "spec.clusterRef.namespace",
            namespace,
            check_dns1123_label(namespace),
        ));
    }
    let own_name = sync.metadata.name.as_deref().unwrap_or_default();
    check_template(&mut problems, "spec", &sync.spec.template, own_name);
    problems.check(check_object_size(sync));
    problems.finish()
}

/// Validates a SyncGroup: its name, source reference, selectors, template and rollout policy.
pub fn validate_sync_group(group: &SyncGroup) -> Result<(), ValidationError> {
    let mut problems = Problems::default();
    check_metadata(&mut problems, &group.metadata);
    problems.check(check_object_name(
        "spec.sourceRef.name",
        &group.spec.source_ref.name,
    ));
    check_source_namespace(
        &mut problems,
        "SyncGroup",
        &group.metadata,
        &group.spec.source_ref,
    );
    if let Some(selector) = &group.spec.cluster_selector {
        problems.check(check_selector("spec.clusterSelector", selector));
    }
    check_namespaces(
        &mut problems,
        "spec.clusterNamespaces",
        &group.spec.cluster_namespaces,
        false,
    );
    let own_name = group.metadata.name.as_deref().unwrap_or_default();
    check_template(
        &mut problems,
        "spec.template",
        &group.spec.template,
        own_name,
    );
    check_rollout(&mut problems, "spec.rollout", &group.spec.rollout);
    problems.check(check_object_size(group));
    problems.finish()
}

/// The most namespaces a Cluster may admit or a SyncGroup may select from.
pub const MAX_NAMESPACES: usize = 256;

/// Tenancy: a Source is always in the referrer's own namespace.
fn check_source_namespace(
    problems: &mut Problems,
    kind: &'static str,
    metadata: &ObjectMeta,
    reference: &crate::resources::NamespacedObjectReference,
) {
    let own = metadata.namespace.as_deref().unwrap_or("default");
    if let Some(namespace) = reference.namespace.as_deref().filter(|n| *n != own) {
        problems.push(ValidationError::CrossNamespaceSource {
            field: "spec.sourceRef.namespace".into(),
            value: namespace.into(),
            kind,
            own: own.into(),
        });
    }
}

/// A list of namespace names (`*` too where `wildcard`), bounded.
fn check_namespaces(problems: &mut Problems, field: &str, namespaces: &[String], wildcard: bool) {
    if namespaces.len() > MAX_NAMESPACES {
        problems.push(ValidationError::TooManyNamespaces {
            field: field.into(),
            limit: MAX_NAMESPACES,
            found: namespaces.len(),
        });
    }
    for (i, namespace) in namespaces.iter().enumerate() {
        if wildcard && namespace == "*" {
            continue;
        }
        problems.check(name_error(
            &format!("{field}[{i}]"),
            namespace,
            check_dns1123_label(namespace),
        ));
    }
}

fn check_metadata(problems: &mut Problems, metadata: &ObjectMeta) {
    problems.check(check_object_name(
        "metadata.name",
        metadata.name.as_deref().unwrap_or_default(),
    ));
    if let Some(namespace) = &metadata.namespace {
        problems.check(name_error(
            "metadata.namespace",
            namespace,
            check_dns1123_label(namespace),
        ));
    }
    problems.check(check_annotations_size(metadata));
    check_labels(
        problems,
        "metadata.labels",
        metadata.labels.iter().flatten(),
    );
}

/// Each label's key and value, named `{field}["key"]`.
fn check_labels<'a>(
    problems: &mut Problems,
    field: &str,
    labels: impl IntoIterator<Item = (&'a String, &'a String)>,
) {
    for (key, value) in labels {
        let field = format!("{field}[{key:?}]");
        if let Err(reason) = check_label_key(key) {
            problems.push(ValidationError::Label {
                field: field.clone(),
                value: key.clone(),
                reason,
            });
        }
        if let Err(reason) = check_label_value(value) {
            problems.push(ValidationError::Label {
                field,
                value: value.clone(),
                reason,
            });
        }
    }
}

fn check_template(problems: &mut Problems, prefix: &str, template: &SyncTemplate, own_name: &str) {
    if let Some(path) = &template.path {
        problems.check(check_path(&format!("{prefix}.path"), path));
    }
    if let Some(render) = &template.render {
        render::check_render(problems, &format!("{prefix}.render"), render);
    }
    for (name, value) in &template.substitute {
        let field = format!("{prefix}.substitute[{name:?}]");
        if let Err(source) = vars::check_name(name) {
            problems.push(ValidationError::Variable {
                field: field.clone(),
                source,
            });
        }
        if let Err(source) = vars::check_value(name, value) {
            problems.push(ValidationError::Variable { field, source });
        }
    }
    let mut seen = BTreeSet::new();
    for (index, dependency) in template.depends_on.iter().enumerate() {
        let field = format!("{prefix}.dependsOn[{index}].name");
        if let Err(error) = check_object_name(&field, &dependency.name) {
            problems.push(error);
            continue;
        }
        if dependency.name == own_name {
            problems.push(ValidationError::SelfDependency {
                field: field.clone(),
                name: dependency.name.clone(),
            });
        }
        if !seen.insert(dependency.name.as_str()) {
            problems.push(ValidationError::DuplicateDependency {
                field,
                name: dependency.name.clone(),
            });
        }
    }
    check_ignore_differences(problems, prefix, &template.ignore_differences);
    check_health_checks(problems, prefix, &template.health_checks);
    if let Some(metadata) = &template.namespace_metadata {
        check_namespace_metadata(problems, prefix, template.create_namespace, metadata);
    }
    check_duration(
        problems,
        &format!("{prefix}.interval"),
        template.interval.as_deref(),
        false,
    );
    check_duration(
        problems,
        &format!("{prefix}.timeout"),
        template.timeout.as_deref(),
        false,
    );
}

fn check_health_checks(problems: &mut Problems, prefix: &str, checks: &[HealthCheck]) {
    let prefix = format!("{prefix}.healthChecks");
    let mut seen = BTreeSet::new();
    for (index, check) in checks.iter().enumerate() {
        for (name, value) in [("apiVersion", &check.api_version), ("kind", &check.kind)] {
            if value.is_empty() {
                problems.push(ValidationError::Required {
                    field: format!("{prefix}[{index}].{name}"),
                });
            }
        }
        if !seen.insert((&check.api_version, &check.kind)) {
            problems.push(ValidationError::HealthCheck {
                field: format!("{prefix}[{index}]"),
                reason: format!(
                    "a second rule for {} {}: one rule per kind",
                    check.api_version, check.kind
                ),
            });
        }
    }
    if let Err(errors) = HealthChecks::compile(&prefix, checks) {
        for error in errors {
            problems.push(error.into());
        }
    }
}

fn check_namespace_metadata(
    problems: &mut Problems,
    prefix: &str,
    create: bool,
    metadata: &NamespaceMetadata,
) {
    let field = format!("{prefix}.namespaceMetadata");
    if !create {
        problems.push(ValidationError::NamespaceMetadata {
            field: field.clone(),
            reason: "has no effect without createNamespace: true".to_owned(),
        });
    }
    check_labels(problems, &format!("{field}.labels"), &metadata.labels);
    for key in metadata.annotations.keys() {
        if let Err(reason) = check_label_key(key) {
            problems.push(ValidationError::Label {
                field: format!("{field}.annotations[{key:?}]"),
                value: key.clone(),
                reason,
            });
        }
    }
}

fn check_ignore_differences(problems: &mut Problems, prefix: &str, rules: &[IgnoreDifference]) {
    let prefix = format!("{prefix}.ignoreDifferences");
    for (index, rule) in rules.iter().enumerate() {
        let field = format!("{prefix}[{index}]");
        if rule.kind.is_empty() {
            problems.push(ValidationError::IgnoreRule {
                field: format!("{field}.kind"),
                reason: "must name a kind (Deployment), or * for any".to_owned(),
            });
        }
        if rule.json_pointers.is_empty()
            && rule.jq_path_expressions.is_empty()
            && rule.managed_fields_managers.is_empty()
        {
            problems.push(ValidationError::IgnoreRule {
                field,
                reason:
                    "names no field: set jsonPointers, jqPathExpressions or managedFieldsManagers"
                        .to_owned(),
            });
        }
        for (at, manager) in rule.managed_fields_managers.iter().enumerate() {
            if manager.is_empty() || manager.len() > 128 {
                problems.push(ValidationError::IgnoreRule {
                    field: format!("{prefix}[{index}].managedFieldsManagers[{at}]"),
                    reason: "a field manager's name has 1 to 128 characters".to_owned(),
                });
            }
        }
    }
    if let Err(errors) = IgnoreRules::compile(&prefix, rules) {
        for error in errors {
            problems.push(error.into());
        }
    }
}

fn check_rollout(problems: &mut Problems, prefix: &str, rollout: &RolloutPolicy) {
    if let Some(value) = &rollout.max_unavailable {
        problems.check(parse_max_unavailable(value).map(drop).map_err(|reason| {
            ValidationError::MaxUnavailable {
                field: format!("{prefix}.maxUnavailable"),
                value: describe_int_or_string(value),
                reason,
            }
        }));
    }
    for (index, partition) in rollout.partitions.iter().enumerate() {
        problems.check(check_selector(
            &format!("{prefix}.partitions[{index}]"),
            partition,
        ));
    }
    check_duration(
        problems,
        &format!("{prefix}.jitter"),
        rollout.jitter.as_deref(),
        true,
    );
    check_duration(
        problems,
        &format!("{prefix}.progressDeadline"),
        rollout.progress_deadline.as_deref(),
        false,
    );
}

fn describe_int_or_string(value: &IntOrString) -> String {
    match value {
        IntOrString::Int(number) => number.to_string(),
        IntOrString::String(text) => format!("{text:?}"),
    }
}

fn check_duration(problems: &mut Problems, field: &str, value: Option<&str>, zero_allowed: bool) {
    let Some(value) = value else { return };
    match parse_duration(value) {
        Err(source) => problems.push(ValidationError::Duration {
            field: field.to_owned(),
            source,
        }),
        Ok(duration) if duration.is_zero() && !zero_allowed => {
            problems.push(ValidationError::ZeroDuration {
                field: field.to_owned(),
                value: value.to_owned(),
            })
        }
        Ok(_) => {}
    }
}

//! `ignoreDifferences` rules, parsed once per sync and matched against each object it applies.
//!
//! ```text
//! [IgnoreDifference]  ─compile─►  IgnoreRules   (a malformed path: RuleError with its field)
//! IgnoreRules.for_object(apiVersion, kind, namespace, name) ─► Ignored
//! Ignored.strip(manifest)       the pointers' and expressions' fields left out of the apply
//! Ignored.leaves_to(manager)    a conflict with this manager: its field is left to it
//! ```

use serde_json::Value;

use super::{Field, JqPath, PathError, Pointer, remove};
use crate::resources::IgnoreDifference;

/// A path of a rule that does not parse, with the field that holds it
/// (`ignoreDifferences[0].jqPathExpressions[1]`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {path:?} {error}")]
pub struct RuleError {
    pub field: String,
    pub path: String,
    pub error: PathError,
}

/// Every rule of a template, its paths parsed.
#[derive(Clone, Debug, Default)]
pub struct IgnoreRules {
    rules: Vec<Rule>,
}

#[derive(Clone, Debug)]
struct Rule {
    group: String,
    kind: String,
    name: Option<String>,
    namespace: Option<String>,
    pointers: Vec<Pointer>,
    expressions: Vec<JqPath>,
    managers: Vec<String>,
}

impl IgnoreRules {
    /// Parses every path of `rules`; those that do not parse are the error, each named by its
    /// field under `prefix` (`spec.ignoreDifferences`).
    pub fn compile(
        prefix: &str,
        rules: &[IgnoreDifference],
    ) -> Result<IgnoreRules, Vec<RuleError>> {
        let mut errors = Vec::new();
        let mut compiled = Vec::with_capacity(rules.len());
        for (index, rule) in rules.iter().enumerate() {
            let field = |list: &str, at: usize| format!("{prefix}[{index}].{list}[{at}]");
            let pointers = parse_all(&rule.json_pointers, Pointer::parse, &mut errors, |at| {
                field("jsonPointers", at)
            });
            let expressions = parse_all(
                &rule.jq_path_expressions,
                JqPath::parse,
                &mut errors,
                |at| field("jqPathExpressions", at),
            );
            compiled.push(Rule {
                group: rule.group.clone().unwrap_or_default(),
                kind: rule.kind.clone(),
                name: rule.name.clone(),
                namespace: rule.namespace.clone(),
                pointers,
                expressions,
                managers: rule.managed_fields_managers.clone(),
            });
        }
        if errors.is_empty() {
            Ok(IgnoreRules { rules: compiled })
        } else {
            Err(errors)
        }
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules that name an object: its `apiVersion` (`apps/v1`, `v1`), kind, namespace
    /// (`None` for a cluster-scoped one) and name.
    pub fn for_object(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Ignored<'_> {
        let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
        let rules = self
            .rules
            .iter()
            .filter(|rule| rule.group == "*" || rule.group == group)
            .filter(|rule| rule.kind == "*" || rule.kind == kind)
            .filter(|rule| rule.name.as_deref().is_none_or(|wanted| wanted == name))
            .filter(|rule| {
                rule.namespace
                    .as_deref()
                    .is_none_or(|wanted| Some(wanted) == namespace)
            })
            .collect();
        Ignored { rules }
    }
}

/// Each of `texts` parsed; those that do not parse go to `errors`, named by `field(index)`.
fn parse_all<T>(
    texts: &[String],
    parser: fn(&str) -> Result<T, PathError>,
    errors: &mut Vec<RuleError>,
    field: impl Fn(usize) -> String,
) -> Vec<T> {
    let mut parsed = Vec::with_capacity(texts.len());
    for (at, text) in texts.iter().enumerate() {
        match parser(text) {
            Ok(path) => parsed.push(path),
            Err(error) => errors.push(RuleError {
                field: field(at),
                path: text.clone(),
                error,
            }),
        }
    }
    parsed
}

/// The rules that name one object.
#[derive(Debug, Default)]
pub struct Ignored<'a> {
    rules: Vec<&'a Rule>,
}

impl Ignored<'_> {
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The concrete fields of `manifest` that the rules' pointers and expressions name.
    pub fn fields(&self, manifest: &Value) -> Vec<Field> {
        let mut fields = Vec::new();
        for rule in &self.rules {
            fields.extend(rule.pointers.iter().filter_map(|p| p.resolve(manifest)));
            for expression in &rule.expressions {
                fields.extend(expression.resolve(manifest));
            }
        }
        fields
    }

    /// Leaves out of `manifest` every field the rules' pointers and expressions name; the
    /// number of fields left out.
    pub fn strip(&self, manifest: &mut Value) -> usize {
        let fields = self.fields(manifest);
        remove(manifest, &fields);
        fields.len()
    }

    /// Whether a field that `manager` owns is left to it.
    pub fn leaves_to(&self, manager: &str) -> bool {
        self.rules
            .iter()
            .any(|rule| rule.managers.iter().any(|m| m == manager))
    }
}

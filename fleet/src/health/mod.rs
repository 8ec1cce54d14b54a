//! Health checks users write (`healthChecks` on a Sync or a SyncGroup's template): CEL
//! expressions, as Flux's kustomize-controller accepts them, that decide the readiness of a
//! kind kstatus does not know. Compiled at apply time (a malformed one is refused with the
//! position) and evaluated by the sync engine on each object it reads back.
//!
//! ```text
//! HealthCheck{apiVersion, kind, current, inProgress?, failed?} ─compile─► HealthChecks
//! judge(object) ─► None                     no rule for its kind: kstatus decides
//!               ─► InProgress               status.observedGeneration behind metadata.generation
//!               ─► first of inProgress, failed, current that holds; InProgress when none does
//!               ─► Unknown (with the message) when an expression fails or is not a bool
//! ```
//!
//! Bounds: an expression has at most [`MAX_EXPRESSION`] characters, and CEL has no loops but
//! its macros over the object's own lists, so an evaluation is bounded by the object's size.
//! `metadata.managedFields` is left out of what the expressions see.

use std::fmt;

use cel::{Context, Program, Value as Cel};
use serde_json::Value;

use crate::resources::{HealthCheck, ResourceStatus};

/// The longest expression accepted, in characters.
pub const MAX_EXPRESSION: usize = 4096;

/// An expression that does not compile, named by its field (`spec.healthChecks[0].current`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {expression:?} does not compile: {message}")]
pub struct CheckError {
    pub field: String,
    pub expression: String,
    pub message: String,
}

/// Every health check of a template, compiled.
#[derive(Default)]
pub struct HealthChecks {
    rules: Vec<Rule>,
}

impl fmt::Debug for HealthChecks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(
                self.rules
                    .iter()
                    .map(|rule| (&rule.api_version, &rule.kind)),
            )
            .finish()
    }
}

struct Rule {
    api_version: String,
    kind: String,
    /// In the order they are tried.
    expressions: Vec<Expression>,
}

struct Expression {
    outcome: ResourceStatus,
    text: String,
    program: Program,
}

impl HealthChecks {
    /// Compiles every expression of `checks`; those that do not compile are the error, each
    /// named by its field under `prefix` (`spec.healthChecks`).
    pub fn compile(prefix: &str, checks: &[HealthCheck]) -> Result<HealthChecks, Vec<CheckError>> {
        let mut errors = Vec::new();
        let mut rules = Vec::with_capacity(checks.len());
        for (index, check) in checks.iter().enumerate() {
            let mut expressions = Vec::new();
            let wanted = [
                (
                    "inProgress",
                    ResourceStatus::InProgress,
                    check.in_progress.as_deref(),
                ),
                ("failed", ResourceStatus::Failed, check.failed.as_deref()),
                (
                    "current",
                    ResourceStatus::Current,
                    Some(check.current.as_str()),
                ),
            ];
            for (name, outcome, text) in wanted {
                let Some(text) = text else { continue };
                match compile_one(text) {
                    Ok(program) => expressions.push(Expression {
                        outcome,
                        text: text.to_owned(),
                        program,
                    }),
                    Err(message) => errors.push(CheckError {
                        field: format!("{prefix}[{index}].{name}"),
                        expression: text.to_owned(),
                        message,
                    }),
                }
            }
            rules.push(Rule {
                api_version: check.api_version.clone(),
                kind: check.kind.clone(),
                expressions,
            });
        }
        if errors.is_empty() {
            Ok(HealthChecks { rules })
        } else {
            Err(errors)
        }
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The status of `object` by the first rule for its kind, with a message; `None` when no
    /// rule names its kind (kstatus decides).
    pub fn judge(&self, object: &Value) -> Option<(ResourceStatus, String)> {
        let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
        let (api_version, kind) = (text("/apiVersion")?, text("/kind")?);
        let rule = self
            .rules
            .iter()
            .find(|rule| rule.api_version == api_version && rule.kind == kind)?;
        Some(judge(rule, object))
    }
}

fn compile_one(text: &str) -> Result<Program, String> {
    if text.trim().is_empty() {
        return Err("an empty expression".to_owned());
    }
    let length = text.chars().count();
    if length > MAX_EXPRESSION {
        return Err(format!(
            "{length} characters, more than the {MAX_EXPRESSION} accepted"
        ));
    }
    Program::compile(text).map_err(|errors| errors.to_string().replace('\n', "; "))
}

/// `(generation, observed)` when the object's controller has not seen its latest spec yet
/// (`status.observedGeneration` behind `metadata.generation`): in progress whatever else its
/// status says, for kstatus and for the rules alike.
pub fn generation_behind(object: &Value) -> Option<(i64, i64)> {
    let generation = object
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)?;
    let observed = object
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64)?;
    (observed < generation).then_some((generation, observed))
}

fn judge(rule: &Rule, object: &Value) -> (ResourceStatus, String) {
    if let Some((generation, observed)) = generation_behind(object) {
        return (
            ResourceStatus::InProgress,
            format!("status.observedGeneration {observed} is behind generation {generation}"),
        );
    }
    let context = match context_of(object) {
        Ok(context) => context,
        Err(message) => return (ResourceStatus::Unknown, message),
    };
    for expression in &rule.expressions {
        match expression.program.execute(&context) {
            Ok(Cel::Bool(true)) => {
                let message = match expression.outcome {
                    ResourceStatus::Current => String::new(),
                    ResourceStatus::Failed => message_of(object)
                        .unwrap_or_else(|| format!("health check failed: {}", expression.text)),
                    _ => message_of(object).unwrap_or_else(|| {
                        format!("health check in progress: {}", expression.text)
                    }),
                };
                return (expression.outcome, message);
            }
            Ok(Cel::Bool(false)) => {}
            Ok(other) => {
                return (
                    ResourceStatus::Unknown,
                    format!(
                        "health check {:?} gave {}, not a bool",
                        expression.text,
                        shown(&other)
                    ),
                );
            }
            Err(error) => {
                return (
                    ResourceStatus::Unknown,
                    format!("health check {:?} failed: {error}", expression.text),
                );
            }
        }
    }
    (
        ResourceStatus::InProgress,
        "no health check holds yet".to_owned(),
    )
}

/// `self` and the object's top-level fields, without `metadata.managedFields`.
fn context_of(object: &Value) -> Result<Context<'static, 'static>, String> {
    let mut object = object.clone();
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    let converted = |value: &Value| {
        cel::to_value(value).map_err(|error| format!("the object is not CEL: {error}"))
    };
    let mut context = Context::default();
    if let Value::Object(fields) = &object {
        for (name, value) in fields {
            context.add_variable_from_value(name.clone(), converted(value)?);
        }
    }
    context.add_variable_from_value("self", converted(&object)?);
    Ok(context)
}

/// The object's own account of itself: its Ready condition's message, or `status.message`.
fn message_of(object: &Value) -> Option<String> {
    let conditions = object
        .pointer("/status/conditions")
        .and_then(Value::as_array);
    let ready = conditions.into_iter().flatten().find(|condition| {
        matches!(
            condition.get("type").and_then(Value::as_str),
            Some("Ready" | "Available")
        )
    });
    ready
        .and_then(|condition| condition.get("message"))
        .or_else(|| object.pointer("/status/message"))
        .and_then(Value::as_str)
        .filter(|message| !message.is_empty())
        .map(str::to_owned)
}

fn shown(value: &Cel) -> String {
    let text = format!("{value:?}");
    match text.char_indices().nth(80) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text,
    }
}

#[cfg(test)]
mod tests;

//! Kubernetes label selectors: parsed, validated and matched against an object's labels.
//!
//! Two inputs give the same [`Selector`]:
//!
//! ```text
//! LabelSelector { matchLabels, matchExpressions }  --Selector::parse-----\
//!                                                                          >--> Selector --matches(labels)--> bool
//! "a=b,c!=d,e in (x,y),!f"  (kubectl -l syntax)   --Selector::parse_str--/
//! ```
//!
//! A selector is a conjunction of requirements. Requirements are kept sorted and without
//! duplicates, so two selectors that select the same way by construction compare equal, and a
//! stored selector serializes the same on every replica.
//!
//! The rules are the API server's: keys are qualified names (`[prefix/]name`, the prefix a
//! DNS-1123 subdomain), values are at most 63 characters of `[A-Za-z0-9._-]` starting and ending
//! with an alphanumeric (or empty); `In` and `NotIn` need at least one value, `Exists` and
//! `DoesNotExist` take none. `NotIn` (and `!=`) also matches objects without the label.

mod text;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use serde::{Deserialize, Serialize};

use text::StrParser;

pub use crate::names::{check_label_key, check_label_value};

/// Labels a selector can be matched against: a label's value by key.
pub trait Labels {
    /// The value of the label `key`, `None` when the object has no such label.
    fn label(&self, key: &str) -> Option<&str>;
}

impl Labels for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// Why a label selector was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("invalid label key {key:?}: {reason}")]
    InvalidKey { key: String, reason: String },
    #[error("invalid value {value:?} for label key {key:?}: {reason}")]
    InvalidValue {
        key: String,
        value: String,
        reason: String,
    },
    #[error(
        "unknown operator {operator:?} for label key {key:?} (expected In, NotIn, Exists or DoesNotExist)"
    )]
    UnknownOperator { key: String, operator: String },
    #[error("operator {operator} for label key {key:?} needs at least one value")]
    ValuesRequired { key: String, operator: Operator },
    #[error("operator {operator} for label key {key:?} takes no values")]
    ValuesNotAllowed { key: String, operator: Operator },
    #[error("invalid label selector {input:?} at position {position}: {reason}")]
    Syntax {
        input: String,
        position: usize,
        reason: String,
    },
}

/// How a requirement compares a label with its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Operator {
    /// The label is present and its value is one of the values.
    In,
    /// The label is absent, or its value is none of the values.
    NotIn,
    /// The label is present, whatever its value.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

impl Operator {
    /// The operator as written in `matchExpressions`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
        }
    }

    fn takes_values(self) -> bool {
        matches!(self, Operator::In | Operator::NotIn)
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One condition on one label.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    /// Empty for `Exists` and `DoesNotExist`, non-empty for `In` and `NotIn`.
    pub values: BTreeSet<String>,
}

impl Requirement {
    /// Checks the key, the values and that the operator's arity fits.
    pub fn new(
        key: &str,
        operator: Operator,
        values: impl IntoIterator<Item = String>,
    ) -> Result<Requirement, SelectorError> {
        check_label_key(key).map_err(|reason| SelectorError::InvalidKey {
            key: key.to_owned(),
            reason,
        })?;
        let values: BTreeSet<String> = values.into_iter().collect();
        if operator.takes_values() && values.is_empty() {
            return Err(SelectorError::ValuesRequired {
                key: key.to_owned(),
                operator,
            });
        }
        if !operator.takes_values() && !values.is_empty() {
            return Err(SelectorError::ValuesNotAllowed {
                key: key.to_owned(),
                operator,
            });
        }
        for value in &values {
            check_label_value(value).map_err(|reason| SelectorError::InvalidValue {
                key: key.to_owned(),
                value: value.clone(),
                reason,
            })?;
        }
        Ok(Requirement {
            key: key.to_owned(),
            operator,
            values,
        })
    }

    /// Whether a set of labels satisfies this requirement.
    pub fn matches(&self, labels: &impl Labels) -> bool {
        let value = labels.label(&self.key);
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.contains(v)),
            Operator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

impl fmt::Display for Requirement {
    /// The kubectl syntax: `k=v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let joined = || {
            self.values
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(",")
        };
        match self.operator {
            Operator::In if self.values.len() == 1 => write!(f, "{}={}", self.key, joined()),
            Operator::NotIn if self.values.len() == 1 => write!(f, "{}!={}", self.key, joined()),
            Operator::In => write!(f, "{} in ({})", self.key, joined()),
            Operator::NotIn => write!(f, "{} notin ({})", self.key, joined()),
            Operator::Exists => write!(f, "{}", self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
        }
    }
}

/// A validated label selector: the conjunction of its requirements. No requirement selects
/// everything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

impl Selector {
    /// The selector that matches every object (`{}`).
    pub fn everything() -> Selector {
        Selector::default()
    }

    /// Whether this selector matches every object.
    pub fn is_everything(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Validates a `LabelSelector` from a resource: `matchLabels` become `In` requirements with
    /// one value, `matchExpressions` keep their operator.
    pub fn parse(selector: &LabelSelector) -> Result<Selector, SelectorError> {
        let mut requirements = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            requirements.push(Requirement::new(key, Operator::In, [value.clone()])?);
        }
        for expression in selector.match_expressions.iter().flatten() {
            let operator = match expression.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(SelectorError::UnknownOperator {
                        key: expression.key.clone(),
                        operator: other.to_owned(),
                    });
                }
            };
            let values = expression.values.clone().unwrap_or_default();
            requirements.push(Requirement::new(&expression.key, operator, values)?);
        }
        Ok(Selector::from_requirements(requirements))
    }

    /// Parses the string syntax of `kubectl -l`: comma-separated requirements, each one of
    /// `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` (exists) or `!k` (does not
    /// exist). The empty string selects everything.
    pub fn parse_str(input: &str) -> Result<Selector, SelectorError> {
        let requirements = StrParser::new(input).parse()?;
        Ok(Selector::from_requirements(requirements))
    }

    /// A selector from already validated requirements, in canonical order.
    pub fn from_requirements(mut requirements: Vec<Requirement>) -> Selector {
        requirements.sort();
        requirements.dedup();
        Selector { requirements }
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether the labels satisfy every requirement.
    pub fn matches(&self, labels: &impl Labels) -> bool {
        self.requirements
            .iter()
            .all(|requirement| requirement.matches(labels))
    }

    /// The selector as a `LabelSelector`, with every requirement in `matchExpressions`.
    pub fn to_label_selector(&self) -> LabelSelector {
        let expressions: Vec<LabelSelectorRequirement> = self
            .requirements
            .iter()
            .map(|requirement| LabelSelectorRequirement {
                key: requirement.key.clone(),
                operator: requirement.operator.as_str().to_owned(),
                values: requirement
                    .operator
                    .takes_values()
                    .then(|| requirement.values.iter().cloned().collect()),
            })
            .collect();
        LabelSelector {
            match_expressions: (!expressions.is_empty()).then_some(expressions),
            match_labels: None,
        }
    }
}

impl fmt::Display for Selector {
    /// The kubectl syntax, which [`Selector::parse_str`] reads back; empty for everything.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, requirement) in self.requirements.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Selector {
    type Err = SelectorError;

    fn from_str(input: &str) -> Result<Selector, SelectorError> {
        Selector::parse_str(input)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expression(key: &str, operator: &str, values: Option<&[&str]>) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_owned(),
            operator: operator.to_owned(),
            values: values.map(|v| v.iter().map(|s| s.to_string()).collect()),
        }
    }

    #[test]
    fn empty_label_selector_selects_everything() {
        let selector = Selector::parse(&LabelSelector::default()).unwrap();
        assert!(selector.is_everything());
        assert!(selector.matches(&labels(&[])));
        assert!(selector.matches(&labels(&[("a", "b")])));
        assert_eq!(selector, Selector::everything());
    }

    #[test]
    fn match_labels_and_expressions_are_a_conjunction() {
        let selector = Selector::parse(&LabelSelector {
            match_labels: Some(labels(&[("env", "prod")])),
            match_expressions: Some(vec![
                expression("region", "In", Some(&["eu", "us"])),
                expression("tier", "NotIn", Some(&["canary"])),
                expression("team", "Exists", None),
                expression("legacy", "DoesNotExist", Some(&[])),
            ]),
        })
        .unwrap();
        let good = labels(&[("env", "prod"), ("region", "eu"), ("team", "a")]);
        assert!(selector.matches(&good));
        let mut canary = good.clone();
        canary.insert("tier".into(), "canary".into());
        assert!(!selector.matches(&canary));
        let mut legacy = good.clone();
        legacy.insert("legacy".into(), "".into());
        assert!(!selector.matches(&legacy));
        assert!(!selector.matches(&labels(&[
            ("env", "prod"),
            ("region", "asia"),
            ("team", "a")
        ])));
        assert!(!selector.matches(&labels(&[("env", "prod"), ("region", "eu")])));
    }

    #[test]
    fn operator_arity_is_checked() {
        let err = Selector::parse(&LabelSelector {
            match_expressions: Some(vec![expression("a", "In", Some(&[]))]),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "operator In for label key \"a\" needs at least one value"
        );
        let err = Selector::parse(&LabelSelector {
            match_expressions: Some(vec![expression("a", "Exists", Some(&["x"]))]),
            ..Default::default()
        })
        .unwrap_err();
        assert!(
            matches!(err, SelectorError::ValuesNotAllowed { .. }),
            "{err}"
        );
        let err = Selector::parse(&LabelSelector {
            match_expressions: Some(vec![expression("a", "Gt", Some(&["1"]))]),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("unknown operator \"Gt\""), "{err}");
    }

    #[test]
    fn keys_and_values_are_checked() {
        for key in [
            "",
            "-a",
            "a-",
            "a b",
            "x/",
            "/x",
            "Upper.Case/x",
            "a/b/c",
            &"k".repeat(64),
        ] {
            assert!(check_label_key(key).is_err(), "{key:?} should be rejected");
        }
        for key in [
            "a",
            "app.kubernetes.io/name",
            "A_b-c.d",
            "x.y/Z",
            &"k".repeat(63),
        ] {
            assert!(check_label_key(key).is_ok(), "{key:?} should be accepted");
        }
        for value in ["-x", "x y", "a/b", &"v".repeat(64)] {
            assert!(
                check_label_value(value).is_err(),
                "{value:?} should be rejected"
            );
        }
        for value in ["", "x", "1.2.3", "A_b-c"] {
            assert!(
                check_label_value(value).is_ok(),
                "{value:?} should be accepted"
            );
        }
        let err = Selector::parse(&LabelSelector {
            match_labels: Some(labels(&[("env", "pro d")])),
            ..Default::default()
        })
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("invalid value \"pro d\" for label key \"env\""),
            "{err}"
        );
    }

    #[test]
    fn string_and_structured_forms_agree() {
        let structured = Selector::parse(&LabelSelector {
            match_labels: Some(labels(&[("env", "prod")])),
            match_expressions: Some(vec![expression("zone", "In", Some(&["b", "a"]))]),
        })
        .unwrap();
        let text = structured.to_string();
        assert_eq!(text, "env=prod,zone in (a,b)");
        assert_eq!(Selector::parse_str(&text).unwrap(), structured);
        assert_eq!(
            Selector::parse(&structured.to_label_selector()).unwrap(),
            structured
        );
    }

    #[test]
    fn canonical_order_makes_equal_selectors_equal() {
        let one = Selector::parse_str("b=2,a=1,a=1").unwrap();
        let two = Selector::parse_str("a=1,b=2").unwrap();
        assert_eq!(one, two);
        let json = serde_json::to_string(&one).unwrap();
        assert_eq!(serde_json::from_str::<Selector>(&json).unwrap(), one);
    }
}

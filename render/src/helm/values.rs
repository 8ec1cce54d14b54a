//! A chart's values, in Helm's order, with the per-cluster variables substituted: the chart's
//! `values.yaml` (read by the engine), then `valuesFiles`, then `valuesFrom` (ConfigMaps and
//! Secrets, resolved by the caller), then the inline `values`, then the `overrides` whose
//! cluster selector matches the target's labels.
//!
//! Variables (`${NAME}`, `${cluster.name}`, `${cluster.labels.KEY}`, …) are substituted in the
//! text of each values file and `valuesFrom` document before it is parsed, as in plain
//! manifests (so `replicas: ${REPLICAS}` becomes a number); in the inline `values` and the
//! overrides, every string is substituted and stays a string.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use fleet::resources::{HelmSpec, ValuesOverride};
use fleet::selector::Selector;
use fleet::vars::{ClusterContext, substitute};
use serde_json::Value;

use super::protocol::{LayerContent, ValuesLayer};
use crate::files::Tree;
use crate::{Origin, RenderError};

/// A values document the caller read from a ConfigMap or Secret (`valuesFrom`).
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ValuesDocument {
    /// How messages name it: `Secret shop/web-values, key values.yaml`.
    pub origin: String,
    pub text: String,
    /// Read from a Secret: its values are redacted from every message of the sync.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub secret: bool,
}

impl ValuesDocument {
    /// What must not appear in a message when the document is secret: its string values of
    /// four characters or more (the whole text when it does not parse); nothing otherwise.
    pub fn redacted_values(&self) -> Vec<String> {
        if !self.secret {
            return Vec::new();
        }
        let Ok(value) = serde_yaml_ng::from_str::<Value>(&self.text) else {
            return vec![self.text.clone()];
        };
        let mut found = Vec::new();
        let mut pending = vec![value];
        while let Some(value) = pending.pop() {
            match value {
                Value::String(text) if text.len() >= 4 => found.push(text),
                Value::Array(items) => pending.extend(items),
                Value::Object(map) => pending.extend(map.into_iter().map(|(_, v)| v)),
                _ => {}
            }
        }
        found
    }
}

/// The text may come from a Secret: debug output shows its size only.
impl std::fmt::Debug for ValuesDocument {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValuesDocument")
            .field("origin", &self.origin)
            .field("text", &format_args!("<{} bytes>", self.text.len()))
            .finish()
    }
}

/// Everything the values are made of, besides the chart's own `values.yaml`.
pub(crate) struct ValuesInputs<'a> {
    pub helm: Option<&'a HelmSpec>,
    pub overrides: &'a [ValuesOverride],
    pub values_from: &'a [ValuesDocument],
    pub variables: &'a BTreeMap<String, String>,
    pub cluster: &'a ClusterContext,
}

/// `chart/../values/x.yaml` as a path in the source, `None` when it leaves the tree.
fn join_inside(chart_path: &str, file: &str) -> Option<String> {
    let mut parts: Vec<&str> = chart_path.split('/').filter(|p| !p.is_empty()).collect();
    for component in Path::new(file).components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::Normal(part) => parts.push(part.to_str()?),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.join("/"))
}

/// The layers, in order, substituted.
pub(crate) fn layers(
    inputs: &ValuesInputs<'_>,
    tree: &Tree,
    chart_path: &str,
) -> Result<Vec<ValuesLayer>, RenderError> {
    let mut layers = Vec::new();
    let substituted = |text: &str, origin: &str| {
        substitute(text, inputs.variables, inputs.cluster).map_err(|error| RenderError::Variable {
            at: Origin {
                file: origin.to_owned(),
                document: 1,
                item: None,
            },
            error,
        })
    };
    if let Some(helm) = inputs.helm {
        for file in &helm.values_files {
            let Some(path) = join_inside(chart_path, file) else {
                return Err(RenderError::Refused {
                    message: format!(
                        "the values file {file:?} leaves the source tree (it is relative to the chart at {chart_path:?})"
                    ),
                });
            };
            let Some(bytes) = tree.file(&path)? else {
                return Err(RenderError::Values {
                    what: format!("values file {path}"),
                    message: format!(
                        "not found (valuesFiles entry {file:?}, relative to the chart)"
                    ),
                });
            };
            let text = std::str::from_utf8(bytes).map_err(|_| RenderError::Values {
                what: format!("values file {path}"),
                message: "not valid utf-8".to_owned(),
            })?;
            layers.push(ValuesLayer {
                content: LayerContent::Yaml(substituted(text, &path)?),
                origin: path,
            });
        }
    }
    for document in inputs.values_from {
        layers.push(ValuesLayer {
            origin: document.origin.clone(),
            content: LayerContent::Yaml(substituted(&document.text, &document.origin)?),
        });
    }
    if let Some(values) = inputs.helm.and_then(|helm| helm.values.as_ref()) {
        layers.push(ValuesLayer {
            origin: "helm.values".to_owned(),
            content: LayerContent::Json(substitute_strings(values, "helm.values", inputs)?),
        });
    }
    for (index, entry) in inputs.overrides.iter().enumerate() {
        let origin = format!("overrides[{index}]");
        let selector =
            Selector::parse(&entry.cluster_selector).map_err(|error| RenderError::Values {
                what: format!("{origin}.clusterSelector"),
                message: error.to_string(),
            })?;
        if !selector.matches(&inputs.cluster.labels) {
            continue;
        }
        layers.push(ValuesLayer {
            content: LayerContent::Json(substitute_strings(&entry.values, &origin, inputs)?),
            origin,
        });
    }
    Ok(layers)
}

/// Every string of `value` (keys too) substituted; strings stay strings.
fn substitute_strings(
    value: &Value,
    at: &str,
    inputs: &ValuesInputs<'_>,
) -> Result<Value, RenderError> {
    let text = |text: &str, at: &str| {
        substitute(text, inputs.variables, inputs.cluster).map_err(|error| RenderError::Values {
            what: at.to_owned(),
            message: error.to_string(),
        })
    };
    Ok(match value {
        Value::String(string) => Value::String(text(string, at)?),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(index, item)| substitute_strings(item, &format!("{at}[{index}]"), inputs))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => {
            let mut substituted = serde_json::Map::new();
            for (key, item) in map {
                let path = format!("{at}.{key}");
                substituted.insert(text(key, &path)?, substitute_strings(item, &path, inputs)?);
            }
            Value::Object(substituted)
        }
        other => other.clone(),
    })
}

/// The chart's directory in the scratch copy.
pub(crate) fn chart_directory(root: &Path, chart_path: &str) -> PathBuf {
    if chart_path.is_empty() {
        root.to_path_buf()
    } else {
        root.join(chart_path)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn values_files_stay_inside_the_tree() {
        assert_eq!(
            join_inside("apps/web", "values/prod.yaml").as_deref(),
            Some("apps/web/values/prod.yaml")
        );
        assert_eq!(
            join_inside("apps/web", "../../shared/eu.yaml").as_deref(),
            Some("shared/eu.yaml")
        );
        assert_eq!(join_inside("apps/web", "../../../etc/passwd"), None);
        assert_eq!(join_inside("apps", "/etc/passwd"), None);
    }

    #[test]
    fn strings_are_substituted_and_stay_strings() {
        let cluster = ClusterContext {
            name: "edge-1".into(),
            labels: [("region".to_owned(), "eu".to_owned())].into(),
            ..ClusterContext::default()
        };
        let variables = [("REPLICAS".to_owned(), "3".to_owned())].into();
        let inputs = ValuesInputs {
            helm: None,
            overrides: &[],
            values_from: &[],
            variables: &variables,
            cluster: &cluster,
        };
        let value = json!({"name": "${cluster.name}", "replicas": "${REPLICAS}", "hosts": ["${cluster.labels.region}.example.com"], "n": 1});
        assert_eq!(
            substitute_strings(&value, "helm.values", &inputs).expect("substituted"),
            json!({"name": "edge-1", "replicas": "3", "hosts": ["eu.example.com"], "n": 1})
        );
        let error = substitute_strings(&json!({"a": {"b": "${MISSING}"}}), "helm.values", &inputs)
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "helm.values.a.b: undefined variable \"MISSING\" at line 1, column 1"
        );
    }
}

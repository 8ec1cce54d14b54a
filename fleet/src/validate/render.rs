//! Rules for a template's `render`: the Helm fields only where Helm renders, a release name and
//! namespace Helm accepts, values that are objects, values files inside the source, references
//! to Secrets with valid names and keys and to Sources' values files by a path inside their
//! tree, valid override selectors, and post-renderers whose patches are YAML.

use serde_json::Value;

use super::rules::{
    check_dns1123_label, check_dns1123_subdomain, check_object_name, check_secret_key,
    check_selector, name_error,
};
use super::{Problems, ValidationError};
use crate::resources::{
    KustomizePostRenderer, RenderSpec, RenderType, ValuesKind, ValuesReference,
};

/// Helm's limit on release names (`helm install` refuses longer ones).
pub const MAX_RELEASE_NAME: usize = 53;

pub(super) fn check_render(problems: &mut Problems, prefix: &str, render: &RenderSpec) {
    let helm_allowed = matches!(render.type_, RenderType::Auto | RenderType::Helm);
    if !helm_allowed && render.helm.is_some() {
        problems.push(ValidationError::Render {
            field: format!("{prefix}.helm"),
            reason: format!(
                "only the Helm renderer takes Helm settings, and the type is {}",
                render.type_.as_str()
            ),
        });
    }
    if !helm_allowed && !render.overrides.is_empty() {
        problems.push(ValidationError::Render {
            field: format!("{prefix}.overrides"),
            reason: format!(
                "overrides set Helm values, and the type is {}",
                render.type_.as_str()
            ),
        });
    }
    for (index, entry) in render.overrides.iter().enumerate() {
        let field = format!("{prefix}.overrides[{index}]");
        problems.check(check_selector(
            &format!("{field}.clusterSelector"),
            &entry.cluster_selector,
        ));
        check_object(problems, &format!("{field}.values"), &entry.values);
    }
    let Some(helm) = &render.helm else {
        return;
    };
    let prefix = format!("{prefix}.helm");
    if let Some(name) = &helm.release_name {
        let field = format!("{prefix}.releaseName");
        problems.check(name_error(&field, name, check_release_name(name)));
    }
    if let Some(namespace) = &helm.namespace {
        let field = format!("{prefix}.namespace");
        problems.check(name_error(
            &field,
            namespace,
            check_dns1123_label(namespace),
        ));
    }
    for (index, file) in helm.values_files.iter().enumerate() {
        let field = format!("{prefix}.valuesFiles[{index}]");
        let error = |reason: &str| ValidationError::Path {
            field: field.clone(),
            value: file.clone(),
            reason: reason.to_owned(),
        };
        if file.is_empty() {
            problems.push(error("must not be empty"));
        } else if file.starts_with('/') || file.starts_with('\\') {
            problems.push(error(
                "must be relative to the chart's directory, not absolute",
            ));
        } else if file.contains('\0') {
            problems.push(error("must not contain NUL"));
        }
    }
    for (index, reference) in helm.values_from.iter().enumerate() {
        let field = format!("{prefix}.valuesFrom[{index}]");
        problems.check(check_object_name(&format!("{field}.name"), &reference.name));
        if let Some(key) = &reference.key {
            problems.check(check_secret_key(&format!("{field}.key"), key));
        }
        check_values_location(problems, &field, reference);
    }
    if let Some(values) = &helm.values {
        check_object(problems, &format!("{prefix}.values"), values);
    }
    for (index, renderer) in helm.post_renderers.iter().enumerate() {
        check_post_renderer(
            problems,
            &format!("{prefix}.postRenderers[{index}].kustomize"),
            &renderer.kustomize,
        );
    }
}

/// A Source's values are a file (`path`, required); a ConfigMap's or Secret's are a key.
fn check_values_location(problems: &mut Problems, field: &str, reference: &ValuesReference) {
    let mut refuse = |field: String, reason: &str| {
        problems.push(ValidationError::Render {
            field,
            reason: reason.to_owned(),
        });
    };
    match (reference.kind, &reference.path) {
        (ValuesKind::Source, None) => refuse(
            format!("{field}.path"),
            "is required for a Source: the values file in its tree (envs/prod/values.yaml)",
        ),
        (ValuesKind::Source, Some(path)) => {
            if reference.key.is_some() {
                refuse(
                    format!("{field}.key"),
                    "names a key of a ConfigMap or Secret; a Source's values file is its path",
                );
            }
            let reason = if path.is_empty() || path.ends_with('/') {
                Some("must name a file in the Source's tree")
            } else if path.starts_with('/') || path.starts_with('\\') {
                Some("must be relative to the Source's root, not absolute")
            } else if path.contains('\0') {
                Some("must not contain NUL")
            } else if path.split('/').any(|part| part == "..") {
                Some("must not climb out of the Source's tree (`..`)")
            } else {
                None
            };
            if let Some(reason) = reason {
                problems.push(ValidationError::Path {
                    field: format!("{field}.path"),
                    value: path.clone(),
                    reason: reason.to_owned(),
                });
            }
        }
        (_, Some(_)) => refuse(
            format!("{field}.path"),
            "is for a Source's values file; a ConfigMap or Secret names its key",
        ),
        (_, None) => {}
    }
}

fn check_post_renderer(problems: &mut Problems, prefix: &str, kustomize: &KustomizePostRenderer) {
    let mut refuse = |field: String, reason: &str| {
        problems.push(ValidationError::Render {
            field,
            reason: reason.to_owned(),
        });
    };
    if kustomize.patches.is_empty() && kustomize.images.is_empty() {
        refuse(prefix.to_owned(), "names no patch and no image");
    }
    for (index, patch) in kustomize.patches.iter().enumerate() {
        let field = format!("{prefix}.patches[{index}].patch");
        match serde_yaml_ng::from_str::<Value>(&patch.patch) {
            Ok(Value::Object(_) | Value::Array(_)) => {}
            Ok(_) => refuse(
                field,
                "must be a strategic merge patch (a mapping) or a JSON 6902 patch (a list)",
            ),
            Err(error) => refuse(field, &format!("is not YAML: {error}")),
        }
    }
    for (index, image) in kustomize.images.iter().enumerate() {
        let field = format!("{prefix}.images[{index}]");
        if image.name.is_empty() {
            refuse(format!("{field}.name"), "must name the image");
        }
        if image.new_name.is_none() && image.new_tag.is_none() && image.digest.is_none() {
            refuse(field, "sets nothing: give newName, newTag or digest");
        }
    }
}

/// A release name as Helm checks it: a DNS-1123 subdomain of at most 53 characters.
pub fn check_release_name(name: &str) -> Result<(), String> {
    if name.len() > MAX_RELEASE_NAME {
        return Err(format!(
            "Helm release names have at most {MAX_RELEASE_NAME} characters, this one has {}",
            name.len()
        ));
    }
    check_dns1123_subdomain(name)
}

fn check_object(problems: &mut Problems, field: &str, values: &Value) {
    if !values.is_object() {
        problems.push(ValidationError::Render {
            field: field.to_owned(),
            reason: "values must be a map (a YAML mapping)".to_owned(),
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::resources::{HelmSpec, ValuesOverride};

    use super::*;

    fn problems_of(render: &RenderSpec) -> Vec<String> {
        let mut problems = Problems::default();
        check_render(&mut problems, "spec.render", render);
        match problems.finish() {
            Ok(()) => Vec::new(),
            Err(ValidationError::Several(all)) => all.iter().map(ToString::to_string).collect(),
            Err(one) => vec![one.to_string()],
        }
    }

    #[test]
    fn a_helm_render_with_good_fields_passes() {
        let render = RenderSpec {
            type_: RenderType::Helm,
            helm: Some(HelmSpec {
                release_name: Some("web".into()),
                namespace: Some("shop".into()),
                values_files: vec!["values/prod.yaml".into(), "../shared/eu.yaml".into()],
                values_from: vec![
                    ValuesReference {
                        kind: ValuesKind::Secret,
                        name: "web-values".into(),
                        key: Some("values.yaml".into()),
                        ..ValuesReference::default()
                    },
                    ValuesReference {
                        kind: ValuesKind::Source,
                        name: "config".into(),
                        path: Some("envs/prod/values.yaml".into()),
                        ..ValuesReference::default()
                    },
                ],
                values: Some(serde_json::json!({"replicaCount": 2})),
                post_renderers: Vec::new(),
            }),
            overrides: vec![ValuesOverride {
                cluster_selector: Default::default(),
                values: serde_json::json!({"replicaCount": 1}),
            }],
        };
        assert_eq!(problems_of(&render), Vec::<String>::new());
    }

    #[test]
    fn helm_settings_elsewhere_and_bad_fields_are_refused() {
        let render = RenderSpec {
            type_: RenderType::Kustomize,
            helm: Some(HelmSpec {
                release_name: Some("Bad_Name".into()),
                values_files: vec!["/etc/values.yaml".into()],
                values: Some(serde_json::json!([1, 2])),
                ..HelmSpec::default()
            }),
            overrides: vec![ValuesOverride {
                cluster_selector: Default::default(),
                values: serde_json::json!("x"),
            }],
        };
        let problems = problems_of(&render);
        let text = problems.join("\n");
        for expected in [
            "spec.render.helm: only the Helm renderer takes Helm settings, and the type is Kustomize",
            "spec.render.overrides: overrides set Helm values, and the type is Kustomize",
            "spec.render.overrides[0].values: values must be a map",
            "spec.render.helm.releaseName: \"Bad_Name\" is not a valid name",
            "spec.render.helm.valuesFiles[0]: \"/etc/values.yaml\" is not a valid path",
            "spec.render.helm.values: values must be a map",
        ] {
            assert!(text.contains(expected), "{expected:?} not in:\n{text}");
        }
        assert!(check_release_name(&"a".repeat(54)).is_err());
        assert!(check_release_name(&"a".repeat(53)).is_ok());
    }

    #[test]
    fn a_source_of_values_names_a_file_inside_its_tree() {
        let with = |kind: ValuesKind, key: Option<&str>, path: Option<&str>| RenderSpec {
            type_: RenderType::Helm,
            helm: Some(HelmSpec {
                values_from: vec![ValuesReference {
                    kind,
                    name: "config".into(),
                    key: key.map(Into::into),
                    path: path.map(Into::into),
                    optional: false,
                }],
                ..HelmSpec::default()
            }),
            ..RenderSpec::default()
        };
        let field = "spec.render.helm.valuesFrom[0]";
        for (render, expected) in [
            (
                with(ValuesKind::Source, None, None),
                format!("{field}.path: is required for a Source"),
            ),
            (
                with(ValuesKind::Source, Some("values.yaml"), Some("a.yaml")),
                format!("{field}.key: names a key of a ConfigMap or Secret"),
            ),
            (
                with(ValuesKind::Source, None, Some("../other/values.yaml")),
                format!("{field}.path: \"../other/values.yaml\" is not a valid path"),
            ),
            (
                with(ValuesKind::Source, None, Some("/etc/values.yaml")),
                format!("{field}.path: \"/etc/values.yaml\" is not a valid path"),
            ),
            (
                with(ValuesKind::Secret, None, Some("values.yaml")),
                format!("{field}.path: is for a Source's values file"),
            ),
        ] {
            let problems = problems_of(&render);
            assert!(
                problems.iter().any(|p| p.starts_with(&expected)),
                "{expected:?} not in {problems:?}"
            );
        }
        let good = with(ValuesKind::Source, None, Some("envs/prod/values.yaml"));
        assert_eq!(problems_of(&good), Vec::<String>::new());
    }

    #[test]
    fn post_renderers_need_yaml_patches_and_images_that_set_something() {
        use crate::resources::{KustomizeImage, KustomizePatch, PostRenderer};
        let with = |kustomize: KustomizePostRenderer| RenderSpec {
            type_: RenderType::Helm,
            helm: Some(HelmSpec {
                post_renderers: vec![PostRenderer { kustomize }],
                ..HelmSpec::default()
            }),
            ..RenderSpec::default()
        };
        let good = KustomizePostRenderer {
            patches: vec![KustomizePatch {
                patch: "- op: add\n  path: /metadata/labels\n  value: {a: b}\n".to_owned(),
                target: None,
            }],
            images: vec![KustomizeImage {
                name: "nginx".to_owned(),
                new_tag: Some("1.27".to_owned()),
                ..KustomizeImage::default()
            }],
        };
        assert_eq!(problems_of(&with(good)), Vec::<String>::new());
        let problems = problems_of(&with(KustomizePostRenderer {
            patches: vec![KustomizePatch {
                patch: "just words".to_owned(),
                target: None,
            }],
            images: vec![KustomizeImage {
                name: "nginx".to_owned(),
                ..KustomizeImage::default()
            }],
        }));
        let prefix = "spec.render.helm.postRenderers[0].kustomize";
        assert!(
            problems.iter().any(|p| p.starts_with(&format!(
                "{prefix}.patches[0].patch: must be a strategic merge patch"
            ))),
            "{problems:?}"
        );
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with(&format!("{prefix}.images[0]: sets nothing"))),
            "{problems:?}"
        );
        assert_eq!(
            problems_of(&with(KustomizePostRenderer::default())),
            [format!("{prefix}: names no patch and no image")]
        );
    }
}

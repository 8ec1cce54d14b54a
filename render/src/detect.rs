//! Which renderer a path gets when its Sync says `Auto` (or nothing): Kustomize when the
//! directory holds a kustomization file, Helm when it holds `Chart.yaml`, plain YAML
//! otherwise. A directory with both is a kustomization (Kustomize decides what to do with the
//! chart, as `kubectl kustomize` would).

use fleet::resources::RenderType;

/// The file names kustomize recognises, in its own order of preference.
pub const KUSTOMIZATION_FILES: [&str; 3] =
    ["kustomization.yaml", "kustomization.yml", "Kustomization"];
/// The file that makes a directory a Helm chart.
pub const CHART_FILE: &str = "Chart.yaml";

/// The renderer for a directory holding `names` (its files' names, not recursive), given the
/// spec's choice. Never returns `Auto`.
pub fn detect<'a>(requested: RenderType, names: impl IntoIterator<Item = &'a str>) -> RenderType {
    if requested != RenderType::Auto {
        return requested;
    }
    let names: Vec<&str> = names.into_iter().collect();
    if names.iter().any(|name| KUSTOMIZATION_FILES.contains(name)) {
        RenderType::Kustomize
    } else if names.contains(&CHART_FILE) {
        RenderType::Helm
    } else {
        RenderType::Plain
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_follows_the_files_and_an_explicit_type_wins() {
        assert_eq!(
            detect(RenderType::Auto, ["kustomization.yaml", "deploy.yaml"]),
            RenderType::Kustomize
        );
        assert_eq!(
            detect(RenderType::Auto, ["kustomization.yml"]),
            RenderType::Kustomize
        );
        assert_eq!(
            detect(RenderType::Auto, ["Kustomization"]),
            RenderType::Kustomize
        );
        assert_eq!(
            detect(RenderType::Auto, ["Chart.yaml", "values.yaml"]),
            RenderType::Helm
        );
        assert_eq!(
            detect(RenderType::Auto, ["Chart.yaml", "kustomization.yaml"]),
            RenderType::Kustomize
        );
        assert_eq!(
            detect(RenderType::Auto, ["deploy.yaml", "chart.yaml"]),
            RenderType::Plain
        );
        assert_eq!(detect(RenderType::Auto, []), RenderType::Plain);
        assert_eq!(detect(RenderType::Plain, ["Chart.yaml"]), RenderType::Plain);
        assert_eq!(detect(RenderType::Helm, ["deploy.yaml"]), RenderType::Helm);
    }
}

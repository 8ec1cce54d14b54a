//! The demo app as a Helm chart (`charts/demo`) and as a Kustomize overlay
//! (`kust/overlays/demo` over `kust/base`), beside the plain YAML of `app/`: every renderer
//! gives each cluster the same objects (namespace `demo`, config map `demo-config` with the
//! cluster's name, region and the version, deployment `demo-web`), so the demo's checks hold
//! for all three. The chart has 30 templates (`_helpers.tpl`, the config map, the deployment
//! and 27 more config maps using `include`, `toYaml`/`nindent` and `range`, rendered only with
//! `extras: true`, so that by default a cluster gets the same three objects from every
//! renderer and a benchmark compares renderers, not object counts); the overlay has a
//! generator, labels, an image override and a strategic-merge patch.

/// How the demo's SyncGroup renders the app (`starling dev --demo`, `loadtest rollout
/// --render`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Demo {
    /// The plain manifests of `app/`, with `${VAR}` substitution.
    #[default]
    Plain,
    /// The chart `charts/demo`, rendered by Helm's engine with per-cluster values.
    Helm,
    /// The overlay `kust/overlays/demo`, built by kustomize, substituted per cluster.
    Kustomize,
}

/// Config maps of the chart besides `demo-config`.
const EXTRA_TEMPLATES: usize = 27;

impl Demo {
    /// The SyncGroup template's lines (indented four spaces) for this renderer.
    pub fn template(self) -> &'static str {
        match self {
            Demo::Plain => {
                "    path: app\n    substitute:\n      REGION: \"${cluster.labels.region}\"\n"
            }
            Demo::Helm => {
                "    path: charts/demo\n    render:\n      type: Helm\n      helm:\n        namespace: demo\n        values:\n          region: \"${cluster.labels.region}\"\n          cluster: \"${cluster.name}\"\n"
            }
            Demo::Kustomize => {
                "    path: kust/overlays/demo\n    render: {type: Kustomize}\n    substitute:\n      REGION: \"${cluster.labels.region}\"\n"
            }
        }
    }

    /// The value of `--demo` / `--render` that names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Demo::Plain => "plain",
            Demo::Helm => "helm",
            Demo::Kustomize => "kustomize",
        }
    }
}

/// The chart's files at a version.
pub(crate) fn chart_files(version: &str, image: &str) -> Vec<(String, String)> {
    let mut files = vec![
        (
            "charts/demo/Chart.yaml".to_owned(),
            format!(
                "apiVersion: v2\nname: demo\ndescription: The demo app of starling dev\nversion: 1.0.0\nappVersion: \"{version}\"\n"
            ),
        ),
        (
            "charts/demo/values.yaml".to_owned(),
            format!(
                "version: \"{version}\"\nimage: {image}\nreplicas: 2\ngreeting: hello\nregion: none\ncluster: shared\nextras: false\nsettings:\n  logLevel: info\n  retries: 3\nfeatures:\n  audit: \"on\"\n  cache: \"off\"\n"
            ),
        ),
        (
            "charts/demo/templates/_helpers.tpl".to_owned(),
            "{{- define \"demo.labels\" -}}\napp.kubernetes.io/name: demo\napp.kubernetes.io/instance: {{ .Release.Name }}\napp.kubernetes.io/version: {{ .Values.version | quote }}\n{{- end }}\n".to_owned(),
        ),
        (
            "charts/demo/templates/config.yaml".to_owned(),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo-config\n  labels:\n    {{- include \"demo.labels\" . | nindent 4 }}\ndata:\n  cluster: {{ .Values.cluster | quote }}\n  region: {{ .Values.region | quote }}\n  greeting: {{ .Values.greeting | quote }}\n  version: {{ .Values.version | quote }}\n".to_owned(),
        ),
        (
            "charts/demo/templates/deployment.yaml".to_owned(),
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: demo-web\n  labels:\n    {{- include \"demo.labels\" . | nindent 4 }}\nspec:\n  replicas: {{ .Values.replicas }}\n  selector:\n    matchLabels: {app: demo-web}\n  template:\n    metadata:\n      labels: {app: demo-web}\n    spec:\n      containers:\n        - name: web\n          image: {{ .Values.image }}\n          env:\n            - name: REGION\n              value: {{ .Values.region | quote }}\n".to_owned(),
        ),
    ];
    for index in 1..=EXTRA_TEMPLATES {
        files.push((
            format!("charts/demo/templates/extra-{index:02}.yaml"),
            format!(
                "{{{{- if .Values.extras }}}}\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo-extra-{index:02}\n  labels:\n    {{{{- include \"demo.labels\" . | nindent 4 }}}}\ndata:\n  version: {{{{ .Values.version | quote }}}}\n  region: {{{{ .Values.region | quote }}}}\n  settings.yaml: |\n    {{{{- toYaml .Values.settings | nindent 4 }}}}\n{{{{- range $name, $state := .Values.features }}}}\n  feature-{{{{ $name }}}}: {{{{ $state | quote }}}}\n{{{{- end }}}}\n{{{{- end }}}}\n"
            ),
        ));
    }
    files
}

/// The overlay and its base at a version.
pub(crate) fn kustomize_files(version: &str, image: &str) -> Vec<(String, String)> {
    let (name, tag) = image.split_once(':').unwrap_or((image, "latest"));
    vec![
        (
            "kust/base/kustomization.yaml".to_owned(),
            "resources:\n  - namespace.yaml\n  - config.yaml\n  - deployment.yaml\nconfigMapGenerator:\n  - name: demo-settings\n    namespace: demo\n    literals:\n      - logLevel=info\n".to_owned(),
        ),
        (
            "kust/base/namespace.yaml".to_owned(),
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n".to_owned(),
        ),
        (
            "kust/base/config.yaml".to_owned(),
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo-config\n  namespace: demo\ndata:\n  cluster: ${{cluster.name}}\n  region: ${{REGION}}\n  greeting: ${{GREETING:=hello}}\n  version: \"{version}\"\n"
            ),
        ),
        (
            "kust/base/deployment.yaml".to_owned(),
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: demo-web\n  namespace: demo\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: demo-web}}\n  template:\n    metadata:\n      labels: {{app: demo-web}}\n    spec:\n      containers:\n        - name: web\n          image: {name}\n          envFrom:\n            - configMapRef: {{name: demo-settings}}\n          env:\n            - name: REGION\n              value: ${{REGION}}\n"
            ),
        ),
        (
            "kust/overlays/demo/kustomization.yaml".to_owned(),
            format!(
                "resources:\n  - ../../base\nlabels:\n  - pairs: {{app.kubernetes.io/part-of: demo}}\nimages:\n  - name: {name}\n    newTag: \"{tag}\"\nconfigMapGenerator:\n  - name: demo-settings\n    namespace: demo\n    behavior: merge\n    literals:\n      - version={version}\npatches:\n  - path: replicas.yaml\n"
            ),
        ),
        (
            "kust/overlays/demo/replicas.yaml".to_owned(),
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: demo-web\n  namespace: demo\nspec:\n  replicas: 2\n".to_owned(),
        ),
    ]
}

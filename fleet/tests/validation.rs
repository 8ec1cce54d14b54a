//! Every validation rule of the `starling.dev` resources, as a user meets it: a manifest that
//! passes, and manifests that break each rule, with the message the user reads (field path and
//! bad value).

mod common;

use common::{
    ALERT, CLUSTER, PROVIDER, SOURCE, SYNC, SYNC_GROUP, assert_accepted, assert_rejected, edit,
};
use fleet::manifest::Resource;
use fleet::validate::max_unavailable;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

#[test]
fn every_kind_of_git_ref_is_accepted() {
    for reference in [
        "tag: v1.2.3",
        "semver: \">=1.2.0, <2.0.0\"",
        "semver: ^1.4",
        "commit: 0a1b2c3",
        "commit: 0123456789abcdef0123456789abcdef01234567",
    ] {
        assert_accepted(&edit(SOURCE, "branch: main", reference));
    }
}

#[test]
fn every_supported_url_form_is_accepted() {
    for url in [
        "https://git.example.com/org/app.git",
        "http://localhost:8080/app.git",
        "ssh://git@git.example.com:2222/org/app.git",
        "git://git.example.com/app.git",
        "file:///srv/git/app.git",
        "git@github.com:org/app.git",
    ] {
        assert_accepted(&edit(
            SOURCE,
            "url: https://git.example.com/org/app.git",
            &format!("url: {url}"),
        ));
    }
}

#[test]
fn max_unavailable_accepts_counts_and_percentages() {
    for value in ["1", "25", "\"1%\"", "\"100%\"", "\"25%\""] {
        assert_accepted(&edit(
            SYNC_GROUP,
            "maxUnavailable: 10%",
            &format!("maxUnavailable: {value}"),
        ));
    }
}

// ---------------------------------------------------------------------------------------------
// Names
// ---------------------------------------------------------------------------------------------

#[test]
fn names_must_be_dns_subdomains() {
    assert_rejected(
        &edit(SOURCE, "  name: app\n", "  name: My_App\n"),
        &["metadata.name: \"My_App\" is not a valid name"],
    );
    assert_rejected(
        &edit(SOURCE, "  name: app\n", "  name: \"\"\n"),
        &["metadata.name: must not be empty"],
    );
    assert_rejected(
        &edit(SOURCE, "  name: app\n", "  name: app-\n"),
        &["metadata.name", "start and end"],
    );
    let long = "a".repeat(254);
    assert_rejected(
        &edit(SOURCE, "  name: app\n", &format!("  name: {long}\n")),
        &["at most 253"],
    );
    assert_rejected(
        &edit(SOURCE, "namespace: fleet", "namespace: a.b"),
        &["metadata.namespace: \"a.b\""],
    );
    assert_rejected(
        &edit(SYNC, "    name: edge-1", "    name: Edge"),
        &["spec.clusterRef.name: \"Edge\""],
    );
    assert_rejected(
        &edit(SYNC, "    name: app", "    name: \"\""),
        &["spec.sourceRef.name: must not be empty"],
    );
    assert_rejected(
        &edit(
            SOURCE,
            "    name: git-credentials",
            "    name: git credentials",
        ),
        &["spec.secretRef.name"],
    );
}

#[test]
fn cluster_labels_and_kubeconfig_key_are_checked() {
    assert_rejected(
        &edit(CLUSTER, "region: eu", "-region: eu"),
        &["metadata.labels[\"-region\"]", "not a valid label"],
    );
    assert_rejected(
        &edit(CLUSTER, "    key: value", "    key: \"a/b\""),
        &["spec.kubeconfigSecretRef.key: \"a/b\""],
    );
}

// ---------------------------------------------------------------------------------------------
// Sources
// ---------------------------------------------------------------------------------------------

#[test]
fn a_ref_needs_exactly_one_of_branch_tag_semver_commit() {
    assert_rejected(
        &edit(SOURCE, "      branch: main", "      {}"),
        &["spec.git.ref: exactly one of branch, tag, semver or commit must be set, found none"],
    );
    assert_rejected(
        &edit(SOURCE, "    ref:\n      branch: main", "    ref: {}"),
        &["found none"],
    );
    assert_rejected(
        &edit(
            SOURCE,
            "      branch: main",
            "      branch: main\n      tag: v1",
        ),
        &["spec.git.ref: exactly one", "found branch, tag"],
    );
}

const GIT_SPEC: &str =
    "  git:\n    url: https://git.example.com/org/app.git\n    ref:\n      branch: main";

#[test]
fn chart_sources_are_accepted_from_a_helm_repository_or_a_registry() {
    for spec in [
        "  helm:\n    url: https://charts.example.com/stable\n    chart: web",
        "  helm:\n    url: http://127.0.0.1:8080/\n    chart: web.app\n    version: 1.2.3",
        "  helm:\n    url: https://charts.example.com\n    chart: web\n    version: \">=1.0.0, <2\"",
        "  oci:\n    url: oci://ghcr.io/org/charts/web\n    tag: 1.2.3",
        "  oci:\n    url: oci://127.0.0.1:5000/web\n    semver: ^1\n    insecure: true",
    ] {
        assert_accepted(&edit(SOURCE, GIT_SPEC, spec));
    }
}

#[test]
fn a_source_names_exactly_one_kind_and_well_formed_chart_fields() {
    assert_rejected(
        &edit(SOURCE, GIT_SPEC, "  suspend: false"),
        &["spec: exactly one of git, helm or oci must be set, found none"],
    );
    assert_rejected(
        &edit(
            SOURCE,
            GIT_SPEC,
            &format!("{GIT_SPEC}\n  helm:\n    url: https://c.example.com\n    chart: web"),
        ),
        &["found git, helm"],
    );
    let helm = |url: &str, chart: &str, version: &str| {
        edit(
            SOURCE,
            GIT_SPEC,
            &format!("  helm:\n    url: {url}\n    chart: {chart}\n    version: \"{version}\""),
        )
    };
    assert_rejected(
        &helm("ftp://c.example.com", "web", "1.0.0"),
        &["spec.helm.url", "not an https:// or http:// url"],
    );
    assert_rejected(
        &helm("https://user:pw@c.example.com", "web", "1.0.0"),
        &["spec.helm.url", "carries credentials"],
    );
    assert_rejected(
        &helm("https://c.example.com", "../web", "1.0.0"),
        &["spec.helm.chart", "not a chart name"],
    );
    assert_rejected(
        &helm("https://c.example.com", "web", "one"),
        &["spec.helm.version: \"one\" is not a valid semver range"],
    );
    let oci = |rest: &str| edit(SOURCE, GIT_SPEC, &format!("  oci:\n{rest}"));
    assert_rejected(
        &oci("    url: https://ghcr.io/org/web\n    tag: v1"),
        &["spec.oci.url", "not an oci:// url"],
    );
    assert_rejected(
        &oci("    url: oci://ghcr.io/Org/Web\n    tag: v1"),
        &["spec.oci.url", "repository path of lower-case"],
    );
    assert_rejected(
        &oci("    url: oci://ghcr.io/org/web"),
        &["spec.oci: exactly one of tag or semver must be set, found none"],
    );
    assert_rejected(
        &oci("    url: oci://ghcr.io/org/web\n    tag: a/b"),
        &["spec.oci.tag: \"a/b\" is not an OCI tag"],
    );
    assert_rejected(
        &oci("    url: oci://ghcr.io/org/web\n    semver: nope"),
        &["spec.oci.semver"],
    );
}

#[test]
fn semver_ranges_must_parse() {
    assert_rejected(
        &edit(SOURCE, "branch: main", "semver: \"not a range\""),
        &["spec.git.ref.semver: \"not a range\" is not a valid semver range"],
    );
    assert_rejected(
        &edit(SOURCE, "branch: main", "semver: \">=1.0 <<2\""),
        &["spec.git.ref.semver"],
    );
}

#[test]
fn commits_are_7_to_40_hex_characters() {
    for commit in ["abc12", "xyz1234", &"a".repeat(41)] {
        assert_rejected(
            &edit(SOURCE, "branch: main", &format!("commit: {commit}")),
            &[&format!(
                "spec.git.ref.commit: \"{commit}\" is not a commit: expected 7 to 40 hexadecimal"
            )],
        );
    }
}

#[test]
fn branch_and_tag_names_must_be_git_ref_names() {
    assert_rejected(
        &edit(SOURCE, "branch: main", "branch: \"a..b\""),
        &["spec.git.ref.branch: \"a..b\" is not a valid git branch"],
    );
    assert_rejected(
        &edit(SOURCE, "branch: main", "tag: \"v1 beta\""),
        &["spec.git.ref.tag"],
    );
    assert_rejected(
        &edit(SOURCE, "branch: main", "branch: \"\""),
        &["spec.git.ref.branch", "must not be empty"],
    );
}

#[test]
fn urls_with_unsupported_schemes_are_rejected() {
    let cases = [
        ("ftp://example.com/app.git", "unsupported scheme \"ftp\""),
        ("s3://bucket/app", "unsupported scheme \"s3\""),
        ("app.git", "expected a scheme"),
        ("/srv/git/app.git", "expected a scheme"),
        ("https://", "missing host"),
        ("https://example.com", "missing repository path"),
        ("git@:org/app.git", "missing user or host"),
        ("git@github.com:", "missing repository path"),
        ("https://example.com/a b.git", "whitespace"),
    ];
    for (url, reason) in cases {
        let manifest = edit(
            SOURCE,
            "url: https://git.example.com/org/app.git",
            &format!("url: \"{url}\""),
        );
        assert_rejected(
            &manifest,
            &[
                &format!("spec.git.url: {url:?} is not a supported git url"),
                reason,
            ],
        );
    }
    assert_rejected(
        &edit(
            SOURCE,
            "url: https://git.example.com/org/app.git",
            "url: \"\"",
        ),
        &["spec.git.url: must not be empty"],
    );
}

#[test]
fn source_durations_must_parse_and_be_positive() {
    assert_rejected(
        &edit(SOURCE, "interval: 1m", "interval: 1 minute"),
        &["spec.interval: invalid duration \"1 minute\""],
    );
    assert_rejected(
        &edit(SOURCE, "interval: 1m", "interval: -1m"),
        &["spec.interval: negative duration \"-1m\""],
    );
    assert_rejected(
        &edit(SOURCE, "interval: 1m", "interval: 0s"),
        &["spec.interval: \"0s\" must be greater than zero"],
    );
    assert_rejected(
        &edit(SOURCE, "timeout: 30s", "timeout: \"\""),
        &["spec.timeout: empty duration"],
    );
    assert_rejected(
        &edit(SOURCE, "timeout: 30s", "timeout: \"30\""),
        &["spec.timeout", "missing unit"],
    );
    assert_rejected(
        &edit(SOURCE, "timeout: 30s", "timeout: 30"),
        &["spec.timeout: invalid type: integer `30`, expected a string"],
    );
}

// ---------------------------------------------------------------------------------------------
// Syncs and templates
// ---------------------------------------------------------------------------------------------

#[test]
fn paths_must_be_relative_without_dot_dot() {
    assert_rejected(
        &edit(SYNC, "path: ./deploy/web", "path: /etc"),
        &["spec.path: \"/etc\" is not a valid path", "absolute"],
    );
    assert_rejected(
        &edit(SYNC, "path: ./deploy/web", "path: ../other"),
        &["spec.path: \"../other\"", "'..'"],
    );
    assert_rejected(
        &edit(SYNC, "path: ./deploy/web", "path: deploy/../../x"),
        &["'..'"],
    );
    assert_rejected(
        &edit(SYNC, "path: ./deploy/web", "path: \"\""),
        &["spec.path", "must not be empty"],
    );
    assert_rejected(
        &edit(SYNC_GROUP, "path: deploy/web", "path: /abs"),
        &["spec.template.path: \"/abs\""],
    );
    assert_accepted(&edit(SYNC, "path: ./deploy/web", "path: deploy/web..v2/x"));
}

#[test]
fn substitute_names_and_values_are_checked() {
    assert_rejected(
        &edit(SYNC, "    REPLICAS: \"3\"", "    1REPLICAS: \"3\""),
        &["spec.substitute[\"1REPLICAS\"]: invalid variable name \"1REPLICAS\""],
    );
    assert_rejected(
        &edit(
            SYNC,
            "    REPLICAS: \"3\"",
            "    REPLICAS: \"${cluster.name\"",
        ),
        &[
            "spec.substitute[\"REPLICAS\"]",
            "unterminated variable reference",
        ],
    );
    assert_rejected(
        &edit(SYNC, "    REPLICAS: \"3\"", "    REPLICAS: \"${}\""),
        &["empty variable name"],
    );
    assert_rejected(
        &edit(
            SYNC,
            "    REPLICAS: \"3\"",
            "    REPLICAS: \"${cluster.id}\"",
        ),
        &["unknown built-in variable \"cluster.id\""],
    );
    assert_rejected(
        &edit(SYNC, "    REPLICAS: \"3\"", "    REPLICAS: \"${HOST}\""),
        &["refers to \"HOST\""],
    );
    assert_accepted(&edit(
        SYNC,
        "    REPLICAS: \"3\"",
        "    REPLICAS: \"${cluster.labels.replicas:=3}\"",
    ));
}

#[test]
fn dependencies_are_unique_and_not_on_oneself() {
    assert_rejected(
        &edit(SYNC, "    - name: crds", "    - name: infra"),
        &["spec.dependsOn[1].name: duplicate dependency \"infra\""],
    );
    assert_rejected(
        &edit(SYNC, "    - name: crds", "    - name: web"),
        &["spec.dependsOn[1].name: \"web\" depends on itself"],
    );
    assert_rejected(
        &edit(SYNC_GROUP, "      - name: infra", "      - name: web"),
        &["spec.template.dependsOn[0].name", "depends on itself"],
    );
    assert_rejected(
        &edit(SYNC, "    - name: crds", "    - name: Crds"),
        &["spec.dependsOn[1].name: \"Crds\""],
    );
}

#[test]
fn sync_durations_must_parse() {
    assert_rejected(
        &edit(SYNC, "interval: 10m", "interval: 10mins"),
        &["spec.interval: invalid duration \"10mins\"", "unknown unit"],
    );
    assert_rejected(
        &edit(SYNC, "timeout: 5m", "timeout: 5m-"),
        &["spec.timeout"],
    );
}

#[test]
fn ignore_differences_need_a_kind_a_field_and_paths_that_parse() {
    let with_rules =
        |rules: &str| edit(SYNC, "  interval: 10m", &format!("{rules}  interval: 10m"));
    let good = with_rules(
        "  ignoreDifferences:\n  - group: apps\n    kind: Deployment\n    jsonPointers: [/spec/replicas]\n  - kind: \"*\"\n    managedFieldsManagers: [kube-controller-manager]\n  - group: \"*\"\n    kind: MyResource\n    jqPathExpressions: ['.spec.containers[] | select(.name == \"istio-proxy\")']\n",
    );
    assert_accepted(&good);
    assert_rejected(
        &with_rules(
            "  ignoreDifferences:\n  - kind: Deployment\n    jsonPointers: [spec/replicas]\n",
        ),
        &[
            "spec.ignoreDifferences[0].jsonPointers[0]: \"spec/replicas\" at character 0",
            "starts with /",
        ],
    );
    assert_rejected(
        &with_rules(
            "  ignoreDifferences:\n  - kind: Deployment\n    jqPathExpressions: ['.spec | keys']\n",
        ),
        &[
            "spec.ignoreDifferences[0].jqPathExpressions[0]",
            "at character 8",
        ],
    );
    assert_rejected(
        &with_rules("  ignoreDifferences:\n  - kind: Deployment\n"),
        &["spec.ignoreDifferences[0]: names no field"],
    );
    assert_rejected(
        &with_rules("  ignoreDifferences:\n  - kind: \"\"\n    jsonPointers: [/spec]\n"),
        &["spec.ignoreDifferences[0].kind: must name a kind"],
    );
}

#[test]
fn namespace_metadata_needs_create_namespace_and_valid_labels() {
    let with = |lines: &str| edit(SYNC, "  interval: 10m", &format!("{lines}  interval: 10m"));
    assert_accepted(&with(
        "  createNamespace: true\n  namespaceMetadata:\n    labels: {team: shop}\n    annotations: {example.com/owner: platform}\n",
    ));
    assert_rejected(
        &with("  namespaceMetadata:\n    labels: {team: shop}\n"),
        &["spec.namespaceMetadata: has no effect without createNamespace: true"],
    );
    assert_rejected(
        &with("  createNamespace: true\n  namespaceMetadata:\n    labels: {team: \"not ok\"}\n"),
        &["spec.namespaceMetadata.labels[\"team\"]"],
    );
}

#[test]
fn health_checks_compile_and_name_one_kind_once() {
    let with = |lines: &str| edit(SYNC, "  interval: 10m", &format!("{lines}  interval: 10m"));
    let rule = "  - apiVersion: example.com/v1\n    kind: Database\n    current: \"status.phase == 'Ready'\"\n    failed: \"status.phase == 'Failed'\"\n";
    assert_accepted(&with(&format!("  healthChecks:\n{rule}")));
    assert_rejected(
        &with(&format!("  healthChecks:\n{rule}{rule}")),
        &["spec.healthChecks[1]: a second rule for example.com/v1 Database"],
    );
    assert_rejected(
        &with(
            "  healthChecks:\n  - apiVersion: example.com/v1\n    kind: Database\n    current: \"status.phase ==\"\n",
        ),
        &[
            "spec.healthChecks[0].current: \"status.phase ==\" does not compile",
            "<input>:1:",
        ],
    );
    assert_rejected(
        &with("  healthChecks:\n  - apiVersion: \"\"\n    kind: Database\n    current: \"true\"\n"),
        &["spec.healthChecks[0].apiVersion: must not be empty"],
    );
}

// ---------------------------------------------------------------------------------------------
// SyncGroups
// ---------------------------------------------------------------------------------------------

#[test]
fn cluster_selectors_must_be_valid() {
    assert_rejected(
        &edit(SYNC_GROUP, "        values: [eu, us]", "        values: []"),
        &["spec.clusterSelector: operator In for label key \"region\" needs at least one value"],
    );
    assert_rejected(
        &edit(
            SYNC_GROUP,
            "        operator: In",
            "        operator: Equals",
        ),
        &["spec.clusterSelector: unknown operator \"Equals\""],
    );
    assert_rejected(
        &edit(SYNC_GROUP, "      env: prod", "      env/: prod"),
        &["spec.clusterSelector: invalid label key \"env/\""],
    );
    assert_rejected(
        &edit(SYNC_GROUP, "      env: prod", "      env: pr od"),
        &["spec.clusterSelector: invalid value \"pr od\""],
    );
}

#[test]
fn partitions_are_checked_one_by_one() {
    assert_rejected(
        &edit(
            SYNC_GROUP,
            "            operator: Exists",
            "            operator: Exists\n            values: [x]",
        ),
        &["spec.rollout.partitions[1]: operator Exists for label key \"tier\" takes no values"],
    );
    assert_rejected(
        &edit(
            SYNC_GROUP,
            "          canary: \"true\"",
            "          canary: \"-\"",
        ),
        &["spec.rollout.partitions[0]"],
    );
}

#[test]
fn max_unavailable_is_at_least_one_and_at_most_100_percent() {
    let cases = [
        (
            "0",
            "spec.rollout.maxUnavailable: 0 is out of range: must be at least 1",
        ),
        ("-3", "spec.rollout.maxUnavailable: -3 is out of range"),
        (
            "\"0%\"",
            "spec.rollout.maxUnavailable: \"0%\" is out of range: a percentage must be between 1% and 100%",
        ),
        ("\"101%\"", "\"101%\" is out of range"),
        (
            "\"ten\"",
            "\"ten\" is out of range: expected an integer or a percentage",
        ),
        ("\"10\"", "\"10\" is out of range"),
        ("\"-5%\"", "\"-5%\""),
    ];
    for (value, message) in cases {
        assert_rejected(
            &edit(
                SYNC_GROUP,
                "maxUnavailable: 10%",
                &format!("maxUnavailable: {value}"),
            ),
            &[message],
        );
    }
}

#[test]
fn jitter_must_parse_and_may_be_zero() {
    assert_rejected(
        &edit(SYNC_GROUP, "jitter: 30s", "jitter: soon"),
        &["spec.rollout.jitter: invalid duration \"soon\""],
    );
    assert_accepted(&edit(SYNC_GROUP, "jitter: 30s", "jitter: 0s"));
}

#[test]
fn the_resolved_budget_rounds_down_with_a_floor_of_one() {
    let group = match assert_accepted(SYNC_GROUP).remove(0) {
        Resource::SyncGroup(group) => group,
        other => panic!("expected a SyncGroup, got {other:?}"),
    };
    assert_eq!(
        group.spec.rollout.max_unavailable,
        Some(IntOrString::String("10%".into()))
    );
    assert_eq!(max_unavailable(&group.spec.rollout, 100), 10);
    assert_eq!(max_unavailable(&group.spec.rollout, 19), 1);
    assert_eq!(max_unavailable(&group.spec.rollout, 5), 1);
    assert_eq!(max_unavailable(&group.spec.rollout, 0), 0);
}

// ---------------------------------------------------------------------------------------------
// Size limits (those of a Kubernetes API server)
// ---------------------------------------------------------------------------------------------

const SECRET: &str = r#"
apiVersion: v1
kind: Secret
metadata:
  name: edge-1-kubeconfig
stringData:
  value: "apiVersion: v1"
"#;

/// A manifest with `lines` added right under `metadata:` (indented as its fields).
fn with_metadata(manifest: &str, lines: &str) -> String {
    edit(manifest, "metadata:\n", &format!("metadata:\n{lines}"))
}

/// One annotation whose key and value together make `bytes` bytes.
fn annotation_of(bytes: usize) -> String {
    format!(
        "  annotations:\n    note: \"{}\"\n",
        "x".repeat(bytes - "note".len())
    )
}

#[test]
fn annotations_up_to_256_kib_in_total_are_accepted_for_every_kind() {
    for manifest in [SOURCE, CLUSTER, SYNC, SYNC_GROUP, SECRET, PROVIDER, ALERT] {
        assert_accepted(&with_metadata(manifest, &annotation_of(256 * 1024)));
    }
}

#[test]
fn annotations_over_256_kib_in_total_are_rejected_for_every_kind() {
    for (manifest, object) in [
        (SOURCE, "Source \"app\""),
        (CLUSTER, "Cluster \"edge-1\""),
        (SYNC, "Sync \"web\""),
        (SYNC_GROUP, "SyncGroup \"web\""),
        (SECRET, "Secret \"edge-1-kubeconfig\""),
        (PROVIDER, "Provider \"chat\""),
        (ALERT, "Alert \"rollouts\""),
    ] {
        // Two annotations, each under the limit, over it together: the total counts.
        let half = 128 * 1024;
        let lines = format!(
            "  annotations:\n    a: \"{}\"\n    b: \"{}\"\n",
            "x".repeat(half),
            "y".repeat(half)
        );
        assert_rejected(
            &with_metadata(manifest, &lines),
            &[
                object,
                "metadata.annotations: too large: 262146 bytes in keys and values",
                "over the limit of 262144 bytes (256 KiB)",
            ],
        );
    }
}

#[test]
fn a_cluster_with_a_5_mb_annotation_is_rejected_naming_both_limits() {
    let manifest = with_metadata(CLUSTER, &annotation_of(5_000_000));
    let message = common::rejection(&manifest);
    for fragment in [
        "Cluster \"edge-1\"",
        "metadata.annotations: too large: 5000000 bytes in keys and values, over the limit of 262144 bytes (256 KiB)",
        "the object: too large:",
        "as JSON, over the limit of 1572864 bytes (1.5 MiB)",
    ] {
        assert!(
            message.contains(fragment),
            "{message:.400} lacks {fragment:?}"
        );
    }
}

#[test]
fn objects_over_1_5_mib_as_json_are_rejected_for_every_kind() {
    // Labels are each small and valid; 20,000 of them make a ~1.9 MB object.
    let mut labels = String::from("  labels:\n");
    for index in 0..20_000 {
        labels.push_str(&format!("    label-{index:05}: {}\n", "v".repeat(63)));
    }
    for (manifest, object) in [
        (SOURCE, "Source \"app\""),
        (CLUSTER, "Cluster \"edge-1\""),
        (SYNC, "Sync \"web\""),
        (SYNC_GROUP, "SyncGroup \"web\""),
        (SECRET, "Secret \"edge-1-kubeconfig\""),
        (PROVIDER, "Provider \"chat\""),
        (ALERT, "Alert \"rollouts\""),
    ] {
        // A Cluster already has labels: replace them rather than add a second key.
        let manifest = manifest.replace(
            "  labels:\n    region: eu\n    topology.kubernetes.io/zone: eu-1a\n",
            "",
        );
        assert_rejected(
            &with_metadata(&manifest, &labels),
            &[
                object,
                "the object: too large:",
                "as JSON, over the limit of 1572864 bytes (1.5 MiB)",
            ],
        );
    }
}

#[test]
fn secret_data_over_1_mib_is_rejected() {
    let at_limit = edit(
        SECRET,
        "  value: \"apiVersion: v1\"\n",
        &format!("  value: \"{}\"\n", "x".repeat(1024 * 1024)),
    );
    assert_accepted(&at_limit);
    let over = edit(
        SECRET,
        "  value: \"apiVersion: v1\"\n",
        &format!("  value: \"{}\"\n  more: \"x\"\n", "x".repeat(1024 * 1024)),
    );
    assert_rejected(
        &over,
        &[
            "Secret \"edge-1-kubeconfig\"",
            "data: too large: 1048577 bytes in values, over the limit of 1048576 bytes (1 MiB)",
        ],
    );
}

#[test]
fn the_state_machine_refuses_what_the_manifest_parser_refuses() {
    // Objects may reach the state without a manifest (generated, or from an older client).
    let Some(Resource::Cluster(cluster)) = assert_accepted(CLUSTER).pop() else {
        panic!("CLUSTER is a Cluster");
    };
    let mut big = cluster.clone();
    big.metadata.annotations = Some(
        [("note".to_owned(), "x".repeat(300 * 1024))]
            .into_iter()
            .collect(),
    );
    let error = Resource::Cluster(big).validate().unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("metadata.annotations: too large"),
        "{error}"
    );
    assert!(Resource::Cluster(cluster).validate().is_ok());
}

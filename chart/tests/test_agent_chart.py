"""Tests of the agent's Helm chart (chart/agent/), run by scripts/test-chart after test_chart.py.

They render the chart with the real Helm engine for a few variants, lint it strictly, validate
every manifest against the Kubernetes OpenAPI schemas (the Upstream, which they do not hold,
against the openAPIV3Schema of chart/agent/crds/, with jsonschema), check that
values.schema.json refuses bad values, check the Deployment, the connection Secret and the
Upstream, the RBAC (no wildcard by default, enrolment limited by resourceNames, bookkeeping in
the namespace the sync engine uses), that every rendered flag and variable is one
`starling agent --help` lists (binary in STARLING_BIN), and NOTES.txt.

Each check prints what it did; the script exits non-zero when any failed.
"""

import base64
import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import helm_python
import jsonschema
import kubernetes_validate
import yaml

from test_chart import (
    NEWEST_KUBERNETES,
    OLDEST_KUBERNETES,
    STARLING_BIN,
    CheckFailed,
    expect,
    run_checks,
)

CHART = Path(__file__).resolve().parent.parent / "agent"
REPOSITORY = CHART.parent.parent
CRD = CHART / "crds" / "upstreams.starling.dev.yaml"
UPSTREAM_API = "starling.dev/v1alpha1"
# Where the Deployment mounts the artifact cache.
CACHE_DIRECTORY = "/var/cache/starling"

CA = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUexample\n-----END CERTIFICATE-----\n"
TOKEN = "stl_0a1b2c3d4e5f_" + "ab" * 32
CONNECTION = {
    "addresses": ["fleet.example.com:7400", "10.0.0.7:7400"],
    "token": TOKEN,
    "namespaces": ["team-a", "team-b"],
    "ca": CA,
}

# The variants every structural check runs on: (description, release name, namespace, values).
VARIANTS = [
    ("connection values", "starling-agent", "starling-system", {"connection": CONNECTION}),
    (
        "an existing Secret, another namespace",
        "agent",
        "fleet-agent",
        {"connection": {"existingSecret": "edge-1-upstream"}},
    ),
    (
        "namespaced RBAC",
        "starling-agent",
        "starling-system",
        {
            "connection": CONNECTION,
            "upstream": {"name": "fleet", "clusterName": "edge-7", "labels": {"region": "eu"}},
            "rbac": {"namespaced": True, "namespaces": ["apps", "web"]},
            "concurrency": 8,
            "logFormat": "text",
            "logFilter": "info,starling_agent=debug",
        },
    ),
    (
        "custom values, no RBAC",
        "edge",
        "ops",
        {
            "connection": CONNECTION,
            "fullnameOverride": "edge-agent",
            "image": {"repository": "registry.example.com/starling", "tag": "0.2.0", "pullPolicy": "Always"},
            "imagePullSecrets": [{"name": "registry"}],
            "serviceAccount": {"create": False, "name": "edge-agent", "annotations": {}},
            "rbac": {"create": False, "rules": [], "namespaced": False, "namespaces": []},
            "cache": {"sizeLimit": "4Gi"},
            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
            "podAnnotations": {"a": "b"},
            "podLabels": {"team": "platform"},
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"key": "edge", "operator": "Exists", "effect": "NoSchedule"}],
            "priorityClassName": "system-cluster-critical",
        },
    ),
]


def rendered(values, name, namespace):
    return helm_python.Chart.load(str(CHART)).render(
        values, name=name, namespace=namespace, is_install=True
    )


def render(values, name="starling-agent", namespace="starling-system"):
    """The rendered manifests: [(template path, manifest dict)], NOTES.txt left out."""
    manifests = []
    for path, text in sorted(rendered(values, name, namespace).items()):
        if path.endswith("NOTES.txt"):
            continue
        for document in yaml.safe_load_all(text):
            if document:
                manifests.append((path, document))
    return manifests


def notes(values, name="starling-agent", namespace="starling-system"):
    pages = rendered(values, name, namespace)
    return next(text for path, text in pages.items() if path.endswith("NOTES.txt"))


def all_of(manifests, kind):
    return [m for _, m in manifests if m["kind"] == kind]


def only(manifests, kind):
    found = all_of(manifests, kind)
    expect(len(found) == 1, f"expected one {kind}, got {len(found)}")
    return found[0]


def merged(values):
    """The chart's default values with `values` merged in, as Helm merges them."""
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())

    def merge(base, extra):
        for key, value in extra.items():
            if isinstance(value, dict) and isinstance(base.get(key), dict):
                merge(base[key], value)
            else:
                base[key] = value
        return base

    return merge(defaults, copy.deepcopy(values))


def source_constant(path, name):
    """A `const NAME: &str = "...";` of the Rust sources: the chart must agree with it."""
    text = (REPOSITORY / path).read_text()
    match = re.search(rf'const {name}: &str = "([^"]*)";', text)
    expect(match, f"{path} no longer defines {name}; update the agent chart's test")
    return match.group(1)


def system_namespace():
    return source_constant("sync/src/engine/types.rs", "SYSTEM_NAMESPACE")


def upstream_schema():
    """The Upstream's openAPIV3Schema, closed like the API server's strict field validation
    (an unknown field is an error, not silently pruned)."""
    crd = yaml.safe_load(CRD.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == UPSTREAM_API.split("/")[1])
    schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])

    def close(node):
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                node.setdefault("additionalProperties", False)
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(schema)
    # apiVersion, kind and metadata are the API server's; checked apart below.
    schema["properties"].update(
        {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}}
    )
    return crd, schema


# --- the checks -------------------------------------------------------------------------------


def check_agent_lint():
    for _, _, namespace, values in VARIANTS:
        result = helm_python.lint(
            str(CHART), values=values, strict=True, namespace=namespace, kube_version="v1.33.0"
        )
        messages = result.get("messages") or []
        # Severity 1 is information (such as "icon is recommended"); 2 a warning, 3 an error.
        problems = [m for m in messages if m.get("severity", 0) >= 2]
        problems += [{"severity": "error", "error": e} for e in result.get("errors") or []]
        expect(not problems, f"helm lint --strict with {values}: {problems}")
    return f"helm lint --strict passes for {len(VARIANTS)} value sets (kube v1.33.0)"


def check_agent_manifests_validate():
    versions = sorted({OLDEST_KUBERNETES, NEWEST_KUBERNETES})
    crd, schema = upstream_schema()
    for version in versions:
        kubernetes_validate.validate(crd, version, strict=True)
    expect(crd["spec"]["scope"] == "Namespaced", "the Upstream is namespaced")
    count = upstreams = 0
    for description, name, namespace, values in VARIANTS:
        for path, manifest in render(values, name, namespace):
            if manifest["kind"] == crd["spec"]["names"]["kind"]:
                expect(
                    manifest["apiVersion"] == f"{crd['spec']['group']}/{crd['spec']['versions'][0]['name']}",
                    f"{description}: the Upstream's apiVersion {manifest['apiVersion']}",
                )
                expect(
                    manifest["metadata"].get("namespace") == namespace,
                    f"{description}: the Upstream is in the release namespace",
                )
                try:
                    jsonschema.validate(manifest, schema)
                except jsonschema.ValidationError as error:
                    raise CheckFailed(
                        f"{description}: {path} does not match the Upstream CRD: {error.message}"
                    ) from error
                upstreams += 1
                continue
            for version in versions:
                try:
                    kubernetes_validate.validate(manifest, version, strict=True)
                except Exception as error:  # the library raises several exception types
                    raise CheckFailed(
                        f"{description}: {path} {manifest['kind']} is invalid for "
                        f"Kubernetes {version}: {error}"
                    ) from error
                count += 1
    # The closed schema does refuse what the API server would: the check above can fail.
    try:
        jsonschema.validate(
            {"apiVersion": UPSTREAM_API, "kind": "Upstream", "metadata": {},
             "spec": {"secretRef": {"name": "x"}, "cluster": "typo"}},
            schema,
        )
    except jsonschema.ValidationError:
        pass
    else:
        raise CheckFailed("the Upstream schema accepts an unknown field")
    return (
        f"{count} manifest validations of {len(VARIANTS)} variants against Kubernetes "
        f"{' and '.join(versions)} (strict), the Upstream CRD included; {upstreams} Upstreams "
        "match its openAPIV3Schema (jsonschema, unknown fields refused)"
    )


def check_agent_schema_rejects_bad_values():
    def connection(**changes):
        return {"connection": {**CONNECTION, **changes}}

    bad = [
        ("no connection at all (the defaults)", {}),
        ("no addresses without existingSecret", connection(addresses=[])),
        ("no token without existingSecret", connection(token="")),
        ("no namespaces without existingSecret", connection(namespaces=[])),
        ("no CA without existingSecret", connection(ca="")),
        ("existingSecret and a token", {"connection": {"existingSecret": "mine", "token": TOKEN}}),
        ("an address with a scheme", connection(addresses=["https://fleet.example.com:7400"])),
        ("an address without a port", connection(addresses=["fleet.example.com"])),
        ("addresses as one string", connection(addresses="a:7400,b:7400")),
        ("a bearer header for a token", connection(token="Bearer " + TOKEN)),
        ("a CA that is not PEM", connection(ca="ca.crt")),
        ("a namespace with capitals", connection(namespaces=["Team-A"])),
        ("an unknown top-level key", {**connection(), "replicaCount": 2}),
        ("an unknown connection key", connection(server="fleet:7400")),
        ("concurrency 0", {**connection(), "concurrency": 0}),
        ("an upstream name with a dot", {**connection(), "upstream": {"name": "a.b"}}),
        ("a cluster name with capitals", {**connection(), "upstream": {"clusterName": "Edge"}}),
        ("a number as a label value", {**connection(), "upstream": {"labels": {"tier": 1}}}),
        ("namespaced RBAC without namespaces", {**connection(), "rbac": {"namespaced": True}}),
        ("RBAC namespaces without namespaced", {**connection(), "rbac": {"namespaces": ["apps"]}}),
        ("a rule without verbs", {**connection(), "rbac": {"rules": [{"apiGroups": [""], "resources": ["pods"]}]}}),
        ("an unknown verb", {**connection(), "rbac": {"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["escalate"]}]}}),
        ("a text log format", {**connection(), "logFormat": "pretty"}),
        ("a cache size in days", {**connection(), "cache": {"sizeLimit": "1d"}}),
    ]
    for description, values in bad:
        try:
            render(values)
        except helm_python.HelmError as error:
            expect("schema" in str(error), f"{description}: refused, but not by the schema: {error}")
            continue
        raise CheckFailed(f"values.schema.json accepted {description}: {values}")
    return f"values.schema.json refuses {len(bad)} bad values ({', '.join(d for d, _ in bad[:5])}, ...)"


def check_agent_deployment():
    for description, name, namespace, values in VARIANTS:
        effective = merged(values)
        manifests = render(values, name, namespace)
        deployment = only(manifests, "Deployment")
        spec = deployment["spec"]
        pod = spec["template"]["spec"]
        where = f"{description}: Deployment"
        expect(spec["replicas"] == 1, f"{where}: one agent per cluster")
        expect(spec["strategy"] == {"type": "Recreate"}, f"{where}: Recreate, never two agents at once")
        expect(len(pod["containers"]) == 1, f"{where}: one container")
        container = pod["containers"][0]
        upstream = only(manifests, "Upstream")
        expect(
            container["args"]
            == [
                "agent",
                f"--upstream={upstream['metadata']['name']}",
                f"--namespace={namespace}",
                f"--cache-dir={CACHE_DIRECTORY}",
                f"--concurrency={effective['concurrency']}",
            ],
            f"{where}: args {container['args']}",
        )
        expect("ports" not in container, f"{where}: no port: the agent connects out only")
        service_account = (
            effective["serviceAccount"]["name"] or deployment["metadata"]["name"]
        )
        expect(pod["serviceAccountName"] == service_account, f"{where}: its ServiceAccount")
        accounts = all_of(manifests, "ServiceAccount")
        if effective["serviceAccount"]["create"]:
            expect(
                [a["metadata"]["name"] for a in accounts] == [service_account],
                f"{where}: the ServiceAccount is rendered",
            )
        else:
            expect(not accounts, f"{where}: no ServiceAccount when serviceAccount.create is false")
        expect(pod["automountServiceAccountToken"] is True, f"{where}: the in-cluster token is mounted")
        expect(pod["enableServiceLinks"] is False, f"{where}: no service-link variables")

        security = container["securityContext"]
        expect(security["runAsNonRoot"] is True, f"{where}: runAsNonRoot")
        expect(security["runAsUser"] == effective["securityContext"]["runAsUser"], f"{where}: uid")
        expect(security["readOnlyRootFilesystem"] is True, f"{where}: readOnlyRootFilesystem")
        expect(security["allowPrivilegeEscalation"] is False, f"{where}: allowPrivilegeEscalation")
        expect(security["capabilities"]["drop"] == ["ALL"], f"{where}: capabilities dropped")
        expect(security["seccompProfile"]["type"] == "RuntimeDefault", f"{where}: seccomp")
        expect(pod["securityContext"]["runAsNonRoot"] is True, f"{where}: pod runAsNonRoot")
        expect(pod["securityContext"]["fsGroup"] == effective["securityContext"]["fsGroup"], f"{where}: fsGroup")
        expect(container["resources"] == effective["resources"], f"{where}: resources")
        expect(container["resources"]["limits"]["memory"], f"{where}: a memory limit")

        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        cache = volumes.get(mounts.get(CACHE_DIRECTORY), {})
        expect(
            cache.get("emptyDir", {}).get("sizeLimit") == effective["cache"]["sizeLimit"],
            f"{where}: an emptyDir of cache.sizeLimit at {CACHE_DIRECTORY}: {cache}",
        )
        expect(
            all("emptyDir" in v for v in volumes.values()),
            f"{where}: no Secret mounted: the agent reads its connection through the API",
        )
        environment = {e["name"]: e.get("value") for e in container["env"]}
        expect(environment.get("STARLING_LOG_FORMAT") == effective["logFormat"], f"{where}: log format")
        expect(environment.get("STARLING_LOG") == (effective["logFilter"] or None), f"{where}: log filter")

    # A changed connection or Upstream restarts the agent, which reads them only when it starts.
    def checksum(values):
        deployment = only(render(values), "Deployment")
        return deployment["spec"]["template"]["metadata"]["annotations"]["checksum/connection"]

    base = {"connection": CONNECTION}
    first = checksum(base)
    for change in (
        {"connection": {**CONNECTION, "token": "stl_0a1b2c3d4e5f_" + "cd" * 32}},
        {"connection": {**CONNECTION, "addresses": ["fleet.example.com:7400"]}},
        {"connection": CONNECTION, "upstream": {"labels": {"region": "us"}}},
    ):
        expect(checksum(change) != first, f"the pod template changes with {change}")
    expect(checksum(base) == first, "the checksum is stable")
    return (
        f"Deployment essentials hold in {len(VARIANTS)} variants: 1 replica, Recreate, the args "
        f"(--upstream, --namespace = the release's, --cache-dir on an emptyDir, --concurrency), "
        "no port, non-root read-only security context, resources; a changed Secret or Upstream "
        "rolls the pod"
    )


def check_agent_connection():
    source = (REPOSITORY / "agent/src/lib.rs").read_text()
    enrol = re.search(r"async fn enrol\(.*?\n}\n", source, re.DOTALL)
    expect(enrol, "agent/src/lib.rs has no `async fn enrol`; update the agent chart's test")
    read_keys = set(re.findall(r'\btext\("([^"]+)"\)', enrol.group(0))) | set(
        re.findall(r'\bdata\.get\("([^"]+)"\)', enrol.group(0))
    )
    expect(
        read_keys == {"addresses", "token", "namespaces", "ca.crt"},
        f"agent/src/lib.rs reads the Secret keys {sorted(read_keys)}; update the chart",
    )
    for description, name, namespace, values in VARIANTS:
        effective = merged(values)
        manifests = render(values, name, namespace)
        upstream = only(manifests, "Upstream")
        secrets = all_of(manifests, "Secret")
        where = f"{description}: connection"
        wanted = effective["upstream"]
        expect(upstream["metadata"]["name"] == wanted["name"], f"{where}: the Upstream's name")
        expect(
            upstream["spec"].get("clusterName") == (wanted["clusterName"] or None),
            f"{where}: clusterName set only when given",
        )
        expect(upstream["spec"].get("labels", {}) == wanted["labels"], f"{where}: labels")
        reference = upstream["spec"]["secretRef"]["name"]
        existing = effective["connection"]["existingSecret"]
        if existing:
            expect(reference == existing, f"{where}: the Upstream names connection.existingSecret")
            expect(not secrets, f"{where}: no Secret made with connection.existingSecret")
            continue
        expect(len(secrets) == 1, f"{where}: one Secret")
        secret = secrets[0]
        expect(secret["metadata"]["name"] == reference, f"{where}: the Upstream names the Secret made")
        expect(secret["metadata"]["namespace"] == namespace, f"{where}: the Secret beside the Upstream")
        data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
        expect(set(data) == read_keys, f"{where}: the keys the agent reads: {sorted(data)}")
        connection = effective["connection"]
        expect(data["addresses"] == ",".join(connection["addresses"]), f"{where}: addresses")
        expect(data["namespaces"] == ",".join(connection["namespaces"]), f"{where}: namespaces")
        expect(data["token"] == connection["token"], f"{where}: token")
        expect(data["ca.crt"] == connection["ca"], f"{where}: ca.crt")
    return (
        "the Upstream names the Secret made from connection.* (keys addresses, token, namespaces, "
        "ca.crt: those agent/src/lib.rs reads, lists comma-separated) or connection.existingSecret "
        "(then no Secret); clusterName and labels as given"
    )


def check_agent_rbac():
    system = system_namespace()
    fence = source_constant("sync/src/fence.rs", "FENCE_NAME")
    inventory = source_constant("sync/src/inventory.rs", "NAME_PREFIX")
    default_rules = yaml.safe_load((CHART / "values.yaml").read_text())["rbac"]["rules"]
    for rule in default_rules:
        for field in ("apiGroups", "resources", "verbs"):
            expect("*" not in rule[field], f"default rbac.rules: a wildcard in {field}: {rule}")
        expect(
            "secrets" not in rule["resources"],
            f"default rbac.rules: Secrets are the user's to grant: {rule}",
        )
        expect(
            {"get", "list", "watch", "create", "patch"} <= set(rule["verbs"]),
            f"default rbac.rules: apply (create, patch) and health (get, list, watch): {rule}",
        )
        if rule["resources"] == ["namespaces"]:
            expect("delete" not in rule["verbs"], "default rbac.rules: namespaces are never pruned")
        else:
            expect("delete" in rule["verbs"], f"default rbac.rules: prune deletes: {rule}")
    for description, name, namespace, values in VARIANTS:
        effective = merged(values)
        manifests = render(values, name, namespace)
        roles = all_of(manifests, "Role")
        cluster_roles = all_of(manifests, "ClusterRole")
        role_bindings = all_of(manifests, "RoleBinding")
        cluster_bindings = all_of(manifests, "ClusterRoleBinding")
        rbac = effective["rbac"]
        where = f"{description}: RBAC"
        if not rbac["create"]:
            expect(
                not (roles or cluster_roles or role_bindings or cluster_bindings),
                f"{where}: nothing with rbac.create false",
            )
            continue
        account = only(manifests, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
        upstream = only(manifests, "Upstream")

        enrolment = [r for r in roles if r["metadata"]["namespace"] == namespace and r["metadata"]["name"].endswith("-enrolment")]
        expect(len(enrolment) == 1, f"{where}: an enrolment Role in {namespace}")
        expect(
            sorted((tuple(r["apiGroups"]), tuple(r["resources"]), tuple(r.get("resourceNames", ())), tuple(r["verbs"])) for r in enrolment[0]["rules"])
            == sorted([
                (("starling.dev",), ("upstreams",), (upstream["metadata"]["name"],), ("get",)),
                (("",), ("secrets",), (upstream["spec"]["secretRef"]["name"],), ("get",)),
            ]),
            f"{where}: get on the Upstream and its Secret only, by resourceNames: {enrolment[0]['rules']}",
        )
        bookkeeping = [r for r in roles if r["metadata"]["namespace"] == system]
        bookkeeping = [r for r in bookkeeping if r is not enrolment[0]]
        expect(len(bookkeeping) == 1, f"{where}: a bookkeeping Role in {system}")
        expect(
            bookkeeping[0]["rules"]
            == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "update", "patch"]}],
            f"{where}: the {fence} and {inventory}<sync> ConfigMaps: read, create, update (the "
            f"fence's compare-and-swap), patch (the inventories' apply): {bookkeeping[0]['rules']}",
        )
        expect(len(roles) == 2, f"{where}: two Roles: {[r['metadata'] for r in roles]}")

        expect(len(cluster_roles) == 1, f"{where}: one ClusterRole for rbac.rules")
        expect(cluster_roles[0]["rules"] == rbac["rules"], f"{where}: the ClusterRole holds rbac.rules")
        for binding in role_bindings + cluster_bindings:
            expect(
                binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
                f"{where}: {binding['metadata']['name']} binds the agent's ServiceAccount",
            )
            reference = binding["roleRef"]
            target = {
                "Role": [r for r in roles if r["metadata"]["namespace"] == binding["metadata"].get("namespace")],
                "ClusterRole": cluster_roles,
            }[reference["kind"]]
            expect(
                any(r["metadata"]["name"] == reference["name"] for r in target),
                f"{where}: {binding['metadata']['name']} names a rendered role",
            )
        to_cluster_role = [b for b in role_bindings if b["roleRef"]["kind"] == "ClusterRole"]
        if rbac["namespaced"]:
            expect(not cluster_bindings, f"{where}: no ClusterRoleBinding when namespaced")
            expect(
                sorted(b["metadata"]["namespace"] for b in to_cluster_role) == sorted(rbac["namespaces"]),
                f"{where}: the rules bound in rbac.namespaces only",
            )
        else:
            expect(len(cluster_bindings) == 1 and not to_cluster_role, f"{where}: the rules bound cluster-wide")
    return (
        f"RBAC: enrolment Role get-only by resourceNames (the Upstream, its Secret); configmaps "
        f"get/create/update/patch in {system} (the sync engine's SYSTEM_NAMESPACE, {fence}, "
        f"{inventory}*); rbac.rules in a ClusterRole bound cluster-wide or per namespace; default "
        "rules without wildcards or Secrets, namespaces never deleted"
    )


def check_agent_flags_known_to_binary():
    binary = Path(STARLING_BIN)
    expect(binary.is_file(), f"no starling binary at {binary} (build it, or set STARLING_BIN)")
    clean_environment = {k: v for k, v in os.environ.items() if not k.startswith("STARLING_")}
    completed = subprocess.run(
        [str(binary), "agent", "--help"],
        env=clean_environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    expect(
        completed.returncode == 0,
        f"`{binary} agent --help` exited {completed.returncode} (a binary built before "
        f"`starling agent`? rebuild it): {completed.stderr.strip()}",
    )
    help_text = completed.stdout
    known_flags = set(re.findall(r"^\s+(?:-\w, )?(--[a-z][a-z0-9-]*)", help_text, re.MULTILINE))
    known_variables = set(re.findall(r"\[env: ([A-Z0-9_]+)=", help_text))
    expect(
        {"--upstream", "--namespace", "--cache-dir", "--concurrency"} <= known_flags,
        f"`starling agent --help` lists the agent's flags: {sorted(known_flags)}",
    )
    checked = 0
    for description, name, namespace, values in VARIANTS:
        container = only(render(values, name, namespace), "Deployment")["spec"]["template"]["spec"]["containers"][0]
        args = container["args"]
        expect(args[0] == "agent", f"{description}: the container runs `starling agent`")
        for argument in args[1:]:
            flag = argument.split("=", 1)[0]
            expect(
                flag in known_flags,
                f"{description}: {flag} is not a flag of `starling agent` ({sorted(known_flags)})",
            )
            checked += 1
        for variable in container.get("env", []):
            # STARLING_LOG is the tracing filter, read by the logger rather than by clap.
            if variable["name"] == "STARLING_LOG":
                continue
            expect(
                variable["name"] in known_variables,
                f"{description}: {variable['name']} is not a variable of `starling agent`",
            )
    # The defaults the chart relies on when it passes nothing else.
    expect(
        re.search(r"--namespace <NAMESPACE>.*?\[default: " + re.escape(system_namespace()) + r"\]", help_text, re.DOTALL),
        "`starling agent --namespace` still defaults to the system namespace",
    )
    return (
        f"every rendered flag ({checked} in {len(VARIANTS)} variants) and variable is listed by "
        f"`{binary.name} agent --help`"
    )


def check_agent_notes():
    text = notes({"connection": CONNECTION})
    for needle in (
        "kubectl --namespace starling-system logs deployment/starling-agent",
        "rollout status deployment/starling-agent",
        "starling token create --role agent --tenant team-a --tenant team-b",
        "Upstream starling",
        "Secret starling-agent-connection",
        "registers the pull Cluster starling in team-a, team-b",
        "cluster-wide",
    ):
        expect(needle in text, f"NOTES.txt with connection values: {needle!r}")
    expect("create secret generic" not in text, "no Secret to create when the chart makes it")
    own = notes({"connection": {"existingSecret": "edge-1-upstream"}}, "agent", "fleet-agent")
    for needle in (
        "Secret edge-1-upstream in fleet-agent",
        "create secret generic edge-1-upstream",
        "--from-file=ca.crt=ca.crt",
        "rollout restart deployment/agent-starling-agent",
        "starling token create --role agent --tenant NAMESPACE",
    ):
        expect(needle in own, f"NOTES.txt with an existing Secret: {needle!r}")
    namespaced = notes(VARIANTS[2][3])
    for needle in ("Cluster edge-7 with the labels region=eu", "in apps, web only"):
        expect(needle in namespaced, f"NOTES.txt with namespaced RBAC: {needle!r}")
    return (
        "NOTES.txt names the Deployment, the Upstream, the Secret and the RBAC scope, shows "
        "kubectl logs and rollout status, `starling token create --role agent --tenant ...`, "
        "and how to make the Secret with connection.existingSecret"
    )


CHECKS = [
    check_agent_lint,
    check_agent_manifests_validate,
    check_agent_schema_rejects_bad_values,
    check_agent_deployment,
    check_agent_connection,
    check_agent_rbac,
    check_agent_flags_known_to_binary,
    check_agent_notes,
]


def main():
    print(f"agent chart tests: {CHART} (helm {helm_python.helm_sdk_version()}, binary {STARLING_BIN})")
    return run_checks("agent chart tests", CHECKS)


if __name__ == "__main__":
    sys.exit(main())

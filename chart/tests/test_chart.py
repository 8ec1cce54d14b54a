"""Tests of the Helm chart, run by scripts/test-chart inside its virtual environment.

They render the chart with the real Helm engine (helm-python-sdk), lint it strictly, validate
every rendered manifest against the Kubernetes OpenAPI schemas (kubernetes-validate), check that
values.schema.json refuses bad values, check the StatefulSet's, the RBAC's and the TLS
certificate's essentials, and run the rendered container's arguments and environment through
the binary (`starling node --validate-config`, path in STARLING_BIN; with STARLING_IMAGE, inside
that image, as the pod runs it: its user, a read-only root, the Secrets mounted where the chart
mounts them). Without cert-manager the
chart makes its own CA and certificate: checked with openssl, read by the binary, and kept across
an upgrade (rendered against fleetsim, FLEETSIM_BIN, so that `lookup` sees the installed Secret).

Each check prints what it did; the script exits non-zero when any failed.
"""

import atexit
import base64
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import traceback
import urllib.request
from pathlib import Path

import helm_python
import kubernetes_validate
import yaml

CHART = Path(__file__).resolve().parent.parent
REPOSITORY = CHART.parent
STARLING_BIN = os.environ.get("STARLING_BIN", str(REPOSITORY / "target/debug/starling"))
FLEETSIM_BIN = os.environ.get("FLEETSIM_BIN", str(REPOSITORY / "target/debug/fleetsim"))
# An image to run the binary in instead (scripts/test-image), with Debian's docker client.
STARLING_IMAGE = os.environ.get("STARLING_IMAGE", "")
DOCKER = "/usr/bin/docker"
OLDEST_KUBERNETES = "1.33"
NEWEST_KUBERNETES = kubernetes_validate.latest_version()
NAMESPACE = "fleet-system"

# The variants every structural check runs on: (description, release name, namespace, values).
VARIANTS = [
    ("default values", "starling", NAMESPACE, {}),
    ("standalone mode", "starling", NAMESPACE, {"mode": "standalone"}),
    ("Cluster API", "starling", NAMESPACE, {"operator": {"capi": True}}),
    ("5 replicas", "starling", NAMESPACE, {"replicaCount": 5}),
    ("disaster recovery", "starling", NAMESPACE, {"node": {"recovery": True}}),
    (
        "links in notifications",
        "starling",
        NAMESPACE,
        {"node": {"externalUrl": "https://starling.example.com"}},
    ),
    ("API tokens", "starling", NAMESPACE, {"auth": {"adminTokenSecret": "starling-admin"}}),
    (
        "API tokens, /metrics behind them",
        "starling",
        NAMESPACE,
        {"auth": {"adminTokenSecret": "starling-admin", "metricsAuth": True}},
    ),
    (
        "cert-manager issuing",
        "starling",
        NAMESPACE,
        {"tls": {"certManager": {"enabled": True}}},
    ),
    (
        "a TLS Secret of the user's",
        "starling",
        NAMESPACE,
        {"tls": {"secretName": "starling-grpc-certs", "certManager": {"enabled": False}}},
    ),
    (
        "a namespace-scoped install",
        "fleet",
        "team-a",
        {"rbac": {"namespaced": True}},
    ),
    (
        "watched namespaces",
        "fleet",
        "team-a",
        {"rbac": {"watchNamespaces": ["apps", "infra"]}},
    ),
    (
        "custom values",
        "prod",
        "ops",
        {
            "fullnameOverride": "fleet-ctl",
            "replicaCount": 7,
            "clusterDomain": "corp.internal",
            "ports": {"grpc": 9000, "http": 9001},
            "node": {
                "downAfter": "10s",
                "lease": "4s",
                "maxRtt": "150ms",
                "maxVoters": 5,
                "maxConcurrentSyncs": 64,
                "logFormat": "text",
                "logFilter": "info,starling_replica=debug",
            },
            "persistence": {"size": "50Gi", "storageClass": "fast-ssd"},
            "resources": {
                "requests": {"cpu": "1", "memory": "1Gi"},
                "limits": {"memory": "4Gi"},
            },
            "podAntiAffinity": "required",
            "topologySpread": {
                "enabled": True,
                "topologyKey": "topology.kubernetes.io/zone",
                "maxSkew": 1,
                "whenUnsatisfiable": "DoNotSchedule",
            },
            "service": {"type": "LoadBalancer", "annotations": {"a": "b"}},
            "serviceAccount": {
                "create": True,
                "name": "fleet",
                "annotations": {"iam": "role"},
                "automountToken": True,
            },
            "imagePullSecrets": [{"name": "registry"}],
            "podAnnotations": {"x": "y"},
            "podLabels": {"team": "platform"},
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "fleet", "effect": "NoSchedule"}
            ],
            "priorityClassName": "system-cluster-critical",
            "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
            "tls": {
                "secretName": "fleet-ctl-grpc",
                "certManager": {
                    "enabled": True,
                    "duration": "720h",
                    "renewBefore": "240h",
                    "caDuration": "43800h",
                    "extraDnsNames": ["fleet.example.com"],
                    "extraIpAddresses": ["203.0.113.10"],
                },
            },
        },
    ),
    (
        "spreading off",
        "starling",
        NAMESPACE,
        {
            "podAntiAffinity": "none",
            "topologySpread": {
                "enabled": False,
                "topologyKey": "topology.kubernetes.io/zone",
                "maxSkew": 1,
                "whenUnsatisfiable": "ScheduleAnyway",
            },
            "podDisruptionBudget": {"enabled": False, "maxUnavailable": 1},
            "rbac": {"create": False, "namespaced": False, "watchNamespaces": []},
        },
    ),
]

# Kinds whose schema kubernetes-validate does not hold: checked for shape only.
THIRD_PARTY_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}
# cert-manager's kinds, not in the Kubernetes schemas either: check_tls checks their essentials.
CERT_MANAGER_API = "cert-manager.io/v1"
CERT_MANAGER_KINDS = {"Issuer", "Certificate"}
# Where the StatefulSet mounts the TLS Secret, and the flags that read it.
TLS_DIRECTORY = "/etc/starling/tls"
TLS_FLAGS = [
    f"--tls-cert={TLS_DIRECTORY}/tls.crt",
    f"--tls-key={TLS_DIRECTORY}/tls.key",
    f"--tls-ca={TLS_DIRECTORY}/ca.crt",
]


class CheckFailed(Exception):
    pass


def expect(condition, message):
    if not condition:
        raise CheckFailed(message)


def render(values, name="starling", namespace=NAMESPACE):
    """The rendered manifests: [(template path, manifest dict)], NOTES.txt left out."""
    rendered = helm_python.Chart.load(str(CHART)).render(
        values, name=name, namespace=namespace, is_install=True
    )
    manifests = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        for document in yaml.safe_load_all(text):
            if document:
                manifests.append((path, document))
    return manifests


def notes(values, name="starling", namespace=NAMESPACE):
    rendered = helm_python.Chart.load(str(CHART)).render(
        values, name=name, namespace=namespace, is_install=True
    )
    return next(text for path, text in rendered.items() if path.endswith("NOTES.txt"))


def only(manifests, kind):
    found = [m for _, m in manifests if m["kind"] == kind]
    expect(len(found) == 1, f"expected one {kind}, got {len(found)}")
    return found[0]


def all_of(manifests, kind):
    return [m for _, m in manifests if m["kind"] == kind]


def cert_manager_objects(manifests):
    return [m for _, m in manifests if m["apiVersion"].startswith("cert-manager.io/")]


def uses_cert_manager(effective):
    """Offline (as these renders are), `auto` finds no cert-manager API: only `true` uses it."""
    return effective["tls"]["certManager"]["enabled"] is True


def generated_secret(manifests, secret_name):
    """The TLS Secret the chart made itself, or None."""
    found = [
        m
        for _, m in manifests
        if m["kind"] == "Secret" and m["metadata"]["name"] == secret_name
    ]
    expect(len(found) <= 1, f"at most one Secret {secret_name}")
    return found[0] if found else None


def openssl(*args, stdin=None):
    completed = subprocess.run(
        ["openssl", *args], capture_output=True, text=True, timeout=60, input=stdin
    )
    if completed.returncode != 0:
        raise CheckFailed(f"openssl {' '.join(args)} failed: {completed.stderr.strip()}")
    return completed.stdout


def write_secret_files(secret, directory):
    """The Secret's keys as the kubelet mounts them."""
    directory.mkdir(parents=True, exist_ok=True)
    for key in ("tls.crt", "tls.key", "ca.crt"):
        (directory / key).write_bytes(base64.b64decode(secret["data"][key]))


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

    return merge(defaults, values)


# --- the checks -------------------------------------------------------------------------------


def workspace_version():
    """The binary's version (Cargo.toml's workspace.package), which scripts/image tags."""
    text = (REPOSITORY / "Cargo.toml").read_text()
    match = re.search(r'^\[workspace\.package\][^\[]*?^version = "([^"]+)"', text, re.M | re.S)
    expect(match is not None, "Cargo.toml has a workspace.package version")
    return match.group(1)


def check_lint():
    for values in [None] + [v for _, _, _, v in VARIANTS]:
        result = helm_python.lint(
            str(CHART),
            values=values,
            strict=True,
            namespace=NAMESPACE,
            kube_version="v1.33.0",
        )
        messages = result.get("messages") or []
        # Severity 1 is information (such as "icon is recommended"); 2 a warning, 3 an error.
        problems = [m for m in messages if m.get("severity", 0) >= 2]
        problems += [{"severity": "error", "error": e} for e in result.get("errors") or []]
        expect(not problems, f"helm lint --strict with {values}: {problems}")
    return f"helm lint --strict passes for {len(VARIANTS) + 1} value sets (kube v1.33.0)"


def check_manifests_validate():
    count = 0
    skipped = 0
    versions = sorted({OLDEST_KUBERNETES, NEWEST_KUBERNETES})
    for description, name, namespace, values in VARIANTS:
        for path, manifest in render(values, name, namespace):
            if (manifest["apiVersion"], manifest["kind"]) in THIRD_PARTY_KINDS:
                expect(
                    manifest["spec"]["endpoints"][0]["port"] == "http",
                    f"{path}: the ServiceMonitor scrapes the http port",
                )
                continue
            if manifest["apiVersion"].startswith("cert-manager.io/"):
                # Not in the Kubernetes schemas; check_tls checks what matters in them.
                expect(
                    manifest["apiVersion"] == CERT_MANAGER_API
                    and manifest["kind"] in CERT_MANAGER_KINDS,
                    f"{description}: {path}: unexpected {manifest['apiVersion']} {manifest['kind']}",
                )
                skipped += 1
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
    return (
        f"{count} manifest validations of {len(VARIANTS)} variants against Kubernetes "
        f"{' and '.join(versions)} (strict); {skipped} cert-manager objects left to check_tls"
    )


def check_schema_rejects_bad_values():
    bad = [
        ("a string for replicaCount", {"replicaCount": "3"}),
        ("an unknown top-level key", {"replicas": 3}),
        ("an unknown nested key", {"node": {"downAfterSeconds": 3}}),
        ("an unknown mode", {"mode": "agent"}),
        ("a status write rate of 0", {"operator": {"statusWritesPerSecond": 0}}),
        ("replicaCount: 0", {"replicaCount": 0}),
        ("a malformed duration", {"node": {"downAfter": "three seconds"}}),
        ("maxVoters above 9", {"node": {"maxVoters": 10}}),
        ("a malformed maxRtt", {"node": {"maxRtt": "far"}}),
        ("an externalUrl that is not http(s)", {"node": {"externalUrl": "starling.example.com"}}),
        ("a port out of range", {"ports": {"grpc": 70000}}),
        ("an unknown podAntiAffinity", {"podAntiAffinity": "sometimes"}),
        ("an unknown resources key", {"resources": {"requests": {"gpu": 1}}}),
        ("an unknown tls key", {"tls": {"issuer": "letsencrypt"}}),
        ("a metricsAuth that is not a boolean", {"auth": {"metricsAuth": "yes"}}),
        ("a certificate duration in days", {"tls": {"certManager": {"duration": "90d"}}}),
        ("certManager.enabled neither a boolean nor auto", {"tls": {"certManager": {"enabled": "yes"}}}),
        ("a generated certificate of 0 days", {"tls": {"generated": {"validityDays": 0}}}),
        ("a Secret name with capitals", {"tls": {"secretName": "Starling_TLS"}}),
        (
            "an extra IP address that is a name",
            {"tls": {"certManager": {"extraIpAddresses": ["lb.example.com"]}}},
        ),
    ]
    for description, values in bad:
        try:
            render(values)
        except helm_python.HelmError as error:
            expect(
                "schema" in str(error),
                f"{description}: refused, but not by the schema: {error}",
            )
            continue
        raise CheckFailed(f"values.schema.json accepted {description}: {values}")
    render({"mode": "standalone", "node": {"lease": ""}})
    try:
        render({"terminationGracePeriodSeconds": 20})
    except helm_python.HelmError as error:
        expect("drainTimeoutSeconds" in str(error), f"a grace period shorter than the drain: {error}")
    else:
        raise CheckFailed("the chart accepted a grace period shorter than the drain")
    try:
        render({"auth": {"metricsAuth": True}})
    except helm_python.HelmError as error:
        expect("adminTokenSecret" in str(error), f"metricsAuth without an admin token: {error}")
    else:
        raise CheckFailed("the chart accepted auth.metricsAuth without auth.adminTokenSecret")
    try:
        render({"tls": {"secretName": "starling-ca", "certManager": {"enabled": True}}})
    except helm_python.HelmError as error:
        expect("tls.secretName" in str(error), f"a TLS Secret named as the CA's: {error}")
    else:
        raise CheckFailed("the chart accepted a TLS Secret named as the CA's Secret")
    return f"values.schema.json refuses {len(bad)} bad values ({', '.join(d for d, _ in bad[:4])}, ...)"


def check_statefulset():
    for description, name, namespace, values in VARIANTS:
        effective = merged(values)
        manifests = render(values, name, namespace)
        statefulset = only(manifests, "StatefulSet")
        spec = statefulset["spec"]
        pod = spec["template"]["spec"]
        container = pod["containers"][0]
        where = f"{description}: StatefulSet"
        expect(spec["replicas"] == effective["replicaCount"], f"{where}: replicas")
        expect(spec["podManagementPolicy"] == "Parallel", f"{where}: podManagementPolicy")
        expect(spec["ordinals"]["start"] == 1, f"{where}: ordinals start at 1 (id 0 is refused)")

        headless = [
            s
            for s in all_of(manifests, "Service")
            if s["metadata"]["name"] == spec["serviceName"]
        ]
        expect(len(headless) == 1, f"{where}: serviceName names a rendered Service")
        expect(headless[0]["spec"]["clusterIP"] == "None", f"{where}: the peers' Service is headless")
        expect(
            headless[0]["spec"]["publishNotReadyAddresses"] is True,
            f"{where}: the headless Service publishes not-ready replicas",
        )

        affinity = pod.get("affinity", {}).get("podAntiAffinity", {})
        mode = effective["podAntiAffinity"]
        if mode == "preferred":
            terms = affinity["preferredDuringSchedulingIgnoredDuringExecution"]
            expect(
                terms[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname",
                f"{where}: preferred anti-affinity by hostname",
            )
        elif mode == "required":
            terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
            expect(terms[0]["topologyKey"] == "kubernetes.io/hostname", f"{where}: required anti-affinity")
        else:
            expect(not affinity, f"{where}: no anti-affinity")
        spread = pod.get("topologySpreadConstraints", [])
        if effective["topologySpread"]["enabled"]:
            expect(
                spread and spread[0]["topologyKey"] == "topology.kubernetes.io/zone",
                f"{where}: topology spread over zones",
            )
        else:
            expect(not spread, f"{where}: no topology spread")

        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        expect(ports == effective["ports"], f"{where}: container ports {ports}")
        if effective["image"] == {"repository": "starling", "tag": "", "pullPolicy": "IfNotPresent"}:
            tagged = f"starling:{workspace_version()}"
            expect(
                container["image"] == tagged,
                f"{where}: the default image is {container['image']}, not what `scripts/image "
                f"--release` tags ({tagged}): the chart's appVersion is the binary's version",
            )
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            get = container[probe]["httpGet"]
            expect(get["path"] == path and get["port"] == "http", f"{where}: {probe} on {path}")
            expect(get.get("scheme") == "HTTPS", f"{where}: {probe} over HTTPS (the HTTP port has TLS)")

        security = container["securityContext"]
        expect(security["runAsNonRoot"] is True, f"{where}: runAsNonRoot")
        expect(security["runAsUser"] == 10001, f"{where}: the image's uid")
        expect(security["readOnlyRootFilesystem"] is True, f"{where}: readOnlyRootFilesystem")
        expect(security["allowPrivilegeEscalation"] is False, f"{where}: allowPrivilegeEscalation")
        expect(security["capabilities"]["drop"] == ["ALL"], f"{where}: capabilities dropped")
        expect(security["seccompProfile"]["type"] == "RuntimeDefault", f"{where}: seccomp")
        expect(pod["securityContext"]["runAsNonRoot"] is True, f"{where}: pod runAsNonRoot")
        expect(pod["securityContext"]["fsGroup"] == 10001, f"{where}: fsGroup")
        expect(
            pod["terminationGracePeriodSeconds"] >= effective["node"]["drainTimeoutSeconds"] + 5,
            f"{where}: the grace period covers the drain",
        )
        expect(
            f"--drain-timeout={effective['node']['drainTimeoutSeconds']}s" in container["args"],
            f"{where}: --drain-timeout",
        )
        expect(pod["enableServiceLinks"] is False, f"{where}: no service-link variables")
        expect(
            pod["automountServiceAccountToken"]
            is (effective["mode"] == "operator" or effective["serviceAccount"]["automountToken"]),
            f"{where}: the token is mounted in operator mode only (unless asked for)",
        )
        expect(f"--mode={effective['mode']}" in container["args"], f"{where}: --mode")
        for flag in TLS_FLAGS:
            expect(container["args"].count(flag) == 1, f"{where}: {flag} (TLS is required off loopback)")
        expect(
            not any(a.startswith("--insecure") for a in container["args"]),
            f"{where}: never --insecure",
        )
        expect(
            ("--recovery" in container["args"]) == effective["node"]["recovery"],
            f"{where}: --recovery only when asked for",
        )
        external = effective["node"]["externalUrl"]
        expect(
            (f"--external-url={external}" in container["args"]) == bool(external)
            and sum(a.startswith("--external-url") for a in container["args"]) == bool(external),
            f"{where}: --external-url only with node.externalUrl",
        )
        token_secret = effective["auth"]["adminTokenSecret"]
        token_flag = "--admin-token-file=/etc/starling/auth/token"
        expect(
            (token_flag in container["args"]) == bool(token_secret),
            f"{where}: --admin-token-file only with auth.adminTokenSecret",
        )
        if token_secret:
            volumes = {v["name"]: v for v in pod["volumes"]}
            expect(
                volumes.get("admin-token", {}).get("secret", {}).get("secretName")
                == token_secret,
                f"{where}: the admin token Secret is mounted",
            )
        expect(
            container["resources"]["requests"]["memory"]
            and container["resources"]["limits"]["memory"],
            f"{where}: memory request and limit",
        )

        claims = spec["volumeClaimTemplates"]
        expect(len(claims) == 1 and claims[0]["metadata"]["name"] == "data", f"{where}: one PVC")
        expect(
            claims[0]["spec"]["resources"]["requests"]["storage"] == effective["persistence"]["size"],
            f"{where}: PVC size",
        )
        storage_class = effective["persistence"]["storageClass"]
        expect(
            claims[0]["spec"].get("storageClassName", "") == storage_class,
            f"{where}: PVC storageClass",
        )
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        expect(mounts.get("data") == "/var/lib/starling", f"{where}: the PVC holds the data dir")
        expect("--data-dir=/var/lib/starling" in container["args"], f"{where}: --data-dir")

        budget = all_of(manifests, "PodDisruptionBudget")
        if effective["podDisruptionBudget"]["enabled"]:
            expect(len(budget) == 1 and budget[0]["spec"]["maxUnavailable"] == 1, f"{description}: PDB")
        else:
            expect(not budget, f"{description}: no PDB")

        service = [
            s for s in all_of(manifests, "Service") if s["metadata"]["name"] != spec["serviceName"]
        ]
        expect(len(service) == 1, f"{description}: one API Service")
        service_ports = {p["name"]: p["port"] for p in service[0]["spec"]["ports"]}
        expect(service_ports == effective["ports"], f"{description}: API Service ports")
    return (
        f"StatefulSet essentials hold in {len(VARIANTS)} variants: Parallel, ordinals from 1, "
        "headless Service, anti-affinity, zone spread, probes, security context, PVC, PDB, Service, "
        "the three TLS flags and never --insecure"
    )


def check_rbac():
    expected_resources = {
        "sources",
        "clusters",
        "syncs",
        "syncgroups",
        "providers",
        "alerts",
        "sources/status",
        "clusters/status",
        "syncs/status",
        "syncgroups/status",
        "providers/status",
        "alerts/status",
        "secrets",
        "events",
    }
    for description, name, namespace, values in VARIANTS:
        effective = merged(values)
        manifests = render(values, name, namespace)
        roles = all_of(manifests, "ClusterRole") + all_of(manifests, "Role")
        bindings = all_of(manifests, "ClusterRoleBinding") + all_of(manifests, "RoleBinding")
        rbac = effective["rbac"]
        if not rbac["create"]:
            expect(not roles and not bindings, f"{description}: no RBAC when rbac.create is false")
            continue
        if rbac["watchNamespaces"]:
            expect(
                sorted(r["metadata"]["namespace"] for r in all_of(manifests, "Role"))
                == sorted(rbac["watchNamespaces"])
                and not all_of(manifests, "ClusterRole"),
                f"{description}: one Role per watched namespace",
            )
        elif rbac["namespaced"]:
            expect(
                [r["metadata"]["namespace"] for r in all_of(manifests, "Role")] == [namespace]
                and not all_of(manifests, "ClusterRole"),
                f"{description}: a Role in the release namespace",
            )
        else:
            expect(
                len(all_of(manifests, "ClusterRole")) == 1 and not all_of(manifests, "Role"),
                f"{description}: a ClusterRole",
            )
        expect(len(bindings) == len(roles), f"{description}: one binding per role")
        service_account = only(manifests, "ServiceAccount")["metadata"]["name"]
        pod = only(manifests, "StatefulSet")["spec"]["template"]["spec"]
        expect(pod["serviceAccountName"] == service_account, f"{description}: pods run as the ServiceAccount")
        for binding in bindings:
            subject = binding["subjects"][0]
            expect(
                subject["name"] == service_account and subject["namespace"] == namespace,
                f"{description}: bindings name the ServiceAccount",
            )
            expect(
                any(r["metadata"]["name"] == binding["roleRef"]["name"] for r in roles),
                f"{description}: bindings name a rendered role",
            )
        for role in roles:
            granted = {}
            for rule in role["rules"]:
                for field in ("apiGroups", "resources", "verbs"):
                    expect("*" not in rule[field], f"{description}: wildcard in {field}: {rule}")
                for resource in rule["resources"]:
                    granted.setdefault(resource, set()).update(rule["verbs"])
            expect(set(granted) == expected_resources, f"{description}: resources {sorted(granted)}")
            capi_rules = [r for r in role["rules"] if r["apiGroups"] == ["cluster.x-k8s.io"]]
            wants_capi = effective["mode"] == "operator" and effective["operator"]["capi"]
            expect(
                capi_rules == ([{"apiGroups": ["cluster.x-k8s.io"], "resources": ["clusters"], "verbs": ["get", "list", "watch"]}] if wants_capi else []),
                f"{description}: Cluster API clusters readable only with operator.capi",
            )
            expect(granted["secrets"] == {"get", "list", "watch"}, f"{description}: secrets read-only")
            expect(granted["events"] == {"create", "patch"}, f"{description}: events")
            for kind in ("sources", "syncs", "providers", "alerts"):
                expect(granted[kind] == {"get", "list", "watch"}, f"{description}: {kind} read-only")
            for kind in ("clusters", "syncgroups"):
                expect(
                    granted[kind] == {"get", "list", "watch", "patch"},
                    f"{description}: {kind} read and patched (rollout pause/undo, cluster hold)",
                )
            for kind in ("sources", "clusters", "syncs", "syncgroups", "providers", "alerts"):
                expect(
                    granted[f"{kind}/status"] == {"get", "update", "patch"},
                    f"{description}: {kind}/status",
                )
    crd_plurals = set()
    for crd in (CHART / "crds").glob("*.yaml"):
        document = yaml.safe_load(crd.read_text())
        expect(document["spec"]["group"] == "starling.dev", f"{crd.name}: group")
        crd_plurals.add(document["spec"]["names"]["plural"])
    expect(
        crd_plurals == {"sources", "clusters", "syncs", "syncgroups", "providers", "alerts"},
        f"the RBAC names the CRDs' plurals: {sorted(crd_plurals)}",
    )
    return (
        "RBAC: no wildcard; the six CRDs get/list/watch (syncgroups and clusters also patch), their status "
        "get/update/patch, "
        "secrets get/list/watch only, events create/patch; ClusterRole, Role, Role per namespace"
    )


def check_tls():
    """The StatefulSet mounts the TLS Secret as a directory and reads it; with cert-manager, the
    chart's Issuers and Certificates issue a certificate into that Secret that every replica can
    serve and present to its peers, and that the API Service's clients can check."""
    issued = 0
    generated = 0
    for description, name, namespace, values in VARIANTS:
        effective = merged(values)
        tls = effective["tls"]
        manifests = render(values, name, namespace)
        statefulset = only(manifests, "StatefulSet")
        fullname = statefulset["metadata"]["name"]
        pod = statefulset["spec"]["template"]["spec"]
        container = pod["containers"][0]
        where = f"{description}: TLS"
        secret_name = tls["secretName"] or f"{fullname}-tls"

        volumes = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == secret_name]
        expect(len(volumes) == 1, f"{where}: the StatefulSet mounts the Secret {secret_name}")
        keys = {item["key"]: item["path"] for item in volumes[0]["secret"].get("items", [])}
        expect(
            keys in ({}, {"tls.crt": "tls.crt", "tls.key": "tls.key", "ca.crt": "ca.crt"}),
            f"{where}: the volume holds tls.crt, tls.key and ca.crt under their own names: {keys}",
        )
        mounts = [m for m in container["volumeMounts"] if m["name"] == volumes[0]["name"]]
        expect(
            len(mounts) == 1
            and mounts[0]["mountPath"] == TLS_DIRECTORY
            and mounts[0].get("readOnly") is True
            and "subPath" not in mounts[0]
            and "subPathExpr" not in mounts[0],
            f"{where}: mounted read-only at {TLS_DIRECTORY} as a directory (a subPath never "
            f"sees a renewal): {mounts}",
        )
        for flag in TLS_FLAGS:
            expect(flag in container["args"], f"{where}: {flag}")

        objects = cert_manager_objects(manifests)
        own = generated_secret(manifests, secret_name)
        if not uses_cert_manager(effective):
            expect(not objects, f"{where}: no cert-manager objects when certManager is off")
            if tls["secretName"]:
                expect(own is None, f"{where}: the user's Secret {secret_name} is not made")
            else:
                check_generated_certificate(own, effective, namespace, fullname, where)
                generated += 1
            continue
        expect(own is None, f"{where}: no Secret {secret_name} made when cert-manager issues it")
        for obj in objects:
            expect(
                obj["metadata"]["namespace"] == namespace,
                f"{where}: {obj['kind']} {obj['metadata']['name']} in the release namespace",
            )
        issuers = {i["metadata"]["name"]: i for i in all_of(manifests, "Issuer")}
        certificates = all_of(manifests, "Certificate")
        expect(len(issuers) == 2 and len(certificates) == 2, f"{where}: two Issuers, two Certificates")
        serving = [c for c in certificates if not c["spec"].get("isCA")]
        authority = [c for c in certificates if c["spec"].get("isCA")]
        expect(len(serving) == 1 and len(authority) == 1, f"{where}: one CA, one serving Certificate")
        serving, authority = serving[0]["spec"], authority[0]["spec"]

        # The chain: self-signed Issuer -> CA Certificate -> CA Issuer -> serving Certificate.
        def issuer_of(certificate):
            reference = certificate["issuerRef"]
            expect(reference["kind"] == "Issuer", f"{where}: issued by the chart's own Issuer")
            return issuers.get(reference["name"], {}).get("spec", {})

        expect(
            issuer_of(serving).get("ca", {}).get("secretName") == authority["secretName"],
            f"{where}: the serving Certificate is signed by the Issuer of the CA's Secret",
        )
        expect(issuer_of(authority).get("selfSigned") == {}, f"{where}: the CA is self-signed")
        expect(
            authority["privateKey"].get("rotationPolicy") == "Never",
            f"{where}: the CA keeps its key on renewal (the clients' ca.crt stays valid)",
        )
        expect(authority["duration"] == tls["certManager"]["caDuration"], f"{where}: CA duration")
        expect(authority["secretName"] != secret_name, f"{where}: the CA has its own Secret")

        expect(
            serving["secretName"] == secret_name,
            f"{where}: the Certificate writes the Secret the StatefulSet mounts ({secret_name}), "
            f"not {serving['secretName']}",
        )
        expect(
            set(serving["usages"])
            == {"server auth", "client auth", "digital signature", "key encipherment"},
            f"{where}: usages server and client auth (mutual TLS between replicas): "
            f"{serving['usages']}",
        )
        expect(serving["duration"] == tls["certManager"]["duration"], f"{where}: duration")
        expect(serving["renewBefore"] == tls["certManager"]["renewBefore"], f"{where}: renewBefore")

        # Every address a replica is reached by is covered: its peers dial `--peers` and
        # `--advertise`, the clients the API Service's names or a port-forward on loopback.
        names = serving["dnsNames"]
        wildcards = {n[2:] for n in names if n.startswith("*.")}
        arguments = dict(a.split("=", 1) for a in container["args"] if a.startswith("--") and "=" in a)
        advertise_host = arguments["--advertise"].rsplit(":", 1)[0]
        peer_hosts = [peer.rsplit(":", 1)[0] for peer in arguments["--peers"].split(",")]
        for host in [advertise_host, *peer_hosts]:
            label, _, domain = host.partition(".")
            expect(
                host in names or (domain in wildcards and "." not in label),
                f"{where}: the peer name {host} is covered by {names}",
            )
        expect(
            f"*.{fullname}-headless.{namespace}.svc.{effective['clusterDomain']}" in names,
            f"{where}: the wildcard over the headless Service: {names}",
        )
        api_service = [
            s["metadata"]["name"]
            for s in all_of(manifests, "Service")
            if s["metadata"]["name"] != statefulset["spec"]["serviceName"]
        ][0]
        for dns_name in (
            api_service,
            f"{api_service}.{namespace}",
            f"{api_service}.{namespace}.svc",
            f"{api_service}.{namespace}.svc.{effective['clusterDomain']}",
            "localhost",
            *tls["certManager"]["extraDnsNames"],
        ):
            expect(dns_name in names, f"{where}: the SAN {dns_name}: {names}")
        for address in ("127.0.0.1", *tls["certManager"]["extraIpAddresses"]):
            expect(address in serving["ipAddresses"], f"{where}: the IP SAN {address}")
        issued += 1
    return (
        f"TLS Secret mounted as a directory at {TLS_DIRECTORY} with the three flags in "
        f"{len(VARIANTS)} variants; in {issued} with cert-manager, the serving Certificate "
        "writes that Secret, signed by the chart's CA, server and client auth, SANs covering "
        "the peers (wildcard), the API Service and loopback; in "
        f"{generated} without cert-manager, the chart's own CA and certificate (same SANs and "
        "usages, checked with openssl)"
    )


def check_generated_certificate(secret, effective, namespace, fullname, where):
    """The Secret the chart makes without cert-manager: a CA and a certificate that chains to
    it, for server and client auth, with the SANs cert-manager's would have."""
    expect(secret is not None, f"{where}: the chart makes the Secret itself without cert-manager")
    expect(secret["type"] == "kubernetes.io/tls", f"{where}: type kubernetes.io/tls")
    expect(
        set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"},
        f"{where}: keys tls.crt, tls.key, ca.crt: {sorted(secret['data'])}",
    )
    scratch = Path(tempfile.mkdtemp(prefix="starling-tls-"))
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    write_secret_files(secret, scratch)
    crt, key, ca = (str(scratch / k) for k in ("tls.crt", "tls.key", "ca.crt"))
    verified = openssl("verify", "-CAfile", ca, crt)
    expect(verified.strip().endswith("OK"), f"{where}: the certificate chains to ca.crt: {verified}")
    expect(
        openssl("x509", "-in", crt, "-noout", "-pubkey") == openssl("pkey", "-in", key, "-pubout"),
        f"{where}: tls.key is the certificate's key",
    )
    text = openssl("x509", "-in", crt, "-noout", "-text")
    for usage in ("TLS Web Server Authentication", "TLS Web Client Authentication"):
        expect(usage in text, f"{where}: extended key usage {usage}")
    domain = effective["clusterDomain"]
    extra_names = effective["tls"]["certManager"]["extraDnsNames"]
    extra_addresses = effective["tls"]["certManager"]["extraIpAddresses"]
    for name in (
        f"*.{fullname}-headless.{namespace}.svc.{domain}",
        fullname,
        f"{fullname}.{namespace}",
        f"{fullname}.{namespace}.svc",
        f"{fullname}.{namespace}.svc.{domain}",
        "localhost",
        *extra_names,
    ):
        expect(f"DNS:{name}" in text, f"{where}: the SAN {name}")
    for address in ("127.0.0.1", "0:0:0:0:0:0:0:1", *extra_addresses):
        expect(f"IP Address:{address}" in text, f"{where}: the IP SAN {address}")
    authority = openssl("x509", "-in", ca, "-noout", "-text")
    expect("CA:TRUE" in authority, f"{where}: ca.crt is a CA")


class Fleetsim:
    """A fleetsim with one cluster, as the Kubernetes API `lookup` reads during an upgrade."""

    def __init__(self):
        binary = Path(FLEETSIM_BIN)
        expect(binary.is_file(), f"no fleetsim binary at {binary} (cargo build -p fleetsim)")
        self.directory = Path(tempfile.mkdtemp(prefix="starling-fleetsim-"))
        atexit.register(shutil.rmtree, self.directory, ignore_errors=True)
        self.process = subprocess.Popen(
            [str(binary), "--clusters", "1", "--listen", "127.0.0.1:0",
             "--kubeconfig-dir", str(self.directory)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        atexit.register(self.process.kill)
        ready = json.loads(self.process.stdout.readline())
        self.kubeconfig = next(
            p for p in sorted(self.directory.glob("*.kubeconfig")) if p.name != "all.kubeconfig"
        )
        config = yaml.safe_load(self.kubeconfig.read_text())
        self.server = config["clusters"][0]["cluster"]["server"]
        expect(self.server.startswith(ready["base_url"]), f"a cluster of fleetsim: {self.server}")
        self.token = (config["users"][0]["user"] or {}).get("token")
        # fleetsim serves HTTPS with a CA made for the run, which the kubeconfig carries.
        ca_data = config["clusters"][0]["cluster"].get("certificate-authority-data")
        self.context = (
            ssl.create_default_context(cadata=base64.b64decode(ca_data).decode())
            if ca_data else None
        )

    def call(self, method, path, body=None):
        request = urllib.request.Request(
            self.server + path,
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Content-Type": "application/json"},
        )
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(request, timeout=30, context=self.context) as response:
            return json.loads(response.read() or b"{}")

    def render(self, values, name, namespace, upgrade):
        config = helm_python.Config(kubeconfig_path=str(self.kubeconfig))
        rendered = config.render(
            helm_python.Chart.load(str(CHART)),
            values,
            name=name,
            namespace=namespace,
            is_install=not upgrade,
            is_upgrade=upgrade,
        )
        manifests = []
        for path, text in sorted(rendered.items()):
            if not path.endswith("NOTES.txt"):
                manifests.extend((path, d) for d in yaml.safe_load_all(text) if d)
        return manifests


def check_generated_tls_kept_across_upgrades():
    """`lookup` during an upgrade finds the Secret made at install and keeps it; a Secret of
    that name the release does not manage (made by hand, or by cert-manager before) is used as
    it is, not replaced."""
    sim = Fleetsim()
    name, namespace = "starling", NAMESPACE
    secret_name = f"{name}-tls"
    installed = generated_secret(sim.render({}, name, namespace, upgrade=False), secret_name)
    expect(installed is not None, "the install makes the TLS Secret")
    again = generated_secret(sim.render({}, name, namespace, upgrade=False), secret_name)
    expect(
        again["data"] != installed["data"],
        "with nothing installed yet, each render makes a new CA (the check below can fail)",
    )
    # What `helm install` leaves in the cluster: the Secret, with Helm's ownership marks.
    sim.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": namespace}})
    stored = json.loads(json.dumps(installed))
    stored["metadata"].setdefault("annotations", {}).update(
        {"meta.helm.sh/release-name": name, "meta.helm.sh/release-namespace": namespace}
    )
    sim.call("POST", f"/api/v1/namespaces/{namespace}/secrets", stored)
    upgraded = generated_secret(sim.render({}, name, namespace, upgrade=True), secret_name)
    expect(
        upgraded is not None and upgraded["data"] == installed["data"],
        "an upgrade keeps the CA and certificate made at install",
    )
    # Someone else's Secret of that name: used as it is.
    sim.call("DELETE", f"/api/v1/namespaces/{namespace}/secrets/{secret_name}")
    foreign = json.loads(json.dumps(installed))
    foreign["metadata"] = {"name": secret_name, "namespace": namespace}
    sim.call("POST", f"/api/v1/namespaces/{namespace}/secrets", foreign)
    manifests = sim.render({}, name, namespace, upgrade=True)
    expect(
        generated_secret(manifests, secret_name) is None,
        "a Secret the release does not manage is left alone",
    )
    statefulset = only(manifests, "StatefulSet")
    volumes = statefulset["spec"]["template"]["spec"]["volumes"]
    expect(
        any(v.get("secret", {}).get("secretName") == secret_name for v in volumes),
        "the replicas mount it",
    )
    return (
        "against fleetsim's API: an upgrade keeps the Secret made at install (lookup), a "
        "Secret of that name the release does not manage is left as it is and mounted"
    )


def expand_kubernetes_references(text, environment):
    """Expands `$(VAR)` as the kubelet does in args and env values: a variable defined earlier
    is replaced, an unknown reference stays as written, and `$$(` escapes to a literal `$(`."""

    def replace(match):
        if match.group(0).startswith("$$"):
            return match.group(0)[1:]
        return environment.get(match.group(1), match.group(0))

    return re.sub(r"\$?\$\(([A-Za-z_][A-Za-z0-9_]*)\)", replace, text)


def container_environment(container, pod_name, namespace):
    environment = {}
    for variable in container.get("env", []):
        if "value" in variable:
            environment[variable["name"]] = expand_kubernetes_references(variable["value"], environment)
        else:
            field = variable["valueFrom"]["fieldRef"]["fieldPath"]
            known = {"metadata.name": pod_name, "metadata.namespace": namespace}
            expect(field in known, f"env {variable['name']} from an unexpected field {field}")
            environment[variable["name"]] = known[field]
    return environment


MOUNTED = "/etc/starling/"


def mounted_files(root):
    """What the chart mounts under /etc/starling/, made under `root` for --validate-config to
    read as a start would: an admin token of 48 characters, and a CA with a replica's
    certificate and key made by openssl (P-256)."""
    tls = root / "tls"
    auth = root / "auth"
    tls.mkdir(parents=True)
    auth.mkdir(parents=True)
    (auth / "token").write_text("t" * 48 + "\n")

    def openssl(*args):
        completed = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=60)
        if completed.returncode != 0:
            raise RuntimeError(f"openssl {' '.join(args)} failed: {completed.stderr.strip()}")

    curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl("req", "-x509", *curve, "-keyout", str(tls / "ca.key"), "-out", str(tls / "ca.crt"),
            "-subj", "/CN=starling-test-ca", "-days", "2")
    openssl("req", *curve, "-keyout", str(tls / "tls.key"), "-out", str(tls / "tls.csr"),
            "-subj", "/CN=starling")
    extensions = tls / "san.cnf"
    extensions.write_text("subjectAltName=DNS:starling,DNS:*.starling\n")
    openssl("x509", "-req", "-in", str(tls / "tls.csr"), "-CA", str(tls / "ca.crt"),
            "-CAkey", str(tls / "ca.key"), "-CAcreateserial", "-out", str(tls / "tls.crt"),
            "-days", "2", "-extfile", str(extensions))


def run_binary(args, environment, mounted, security=None):
    """`starling ARGS` with `environment`: the host binary (the mounted files under `mounted`
    standing for /etc/starling/), or with STARLING_IMAGE a container of the image, run as the
    pod's securityContext says, with `mounted` mounted at /etc/starling/ and a tmpfs for the
    data volume."""
    if not STARLING_IMAGE:
        args = [a.replace(MOUNTED, f"{mounted}/") for a in args]
        clean = {k: v for k, v in os.environ.items() if not k.startswith("STARLING_")}
        return subprocess.run([STARLING_BIN, *args], env={**clean, **environment},
                              capture_output=True, text=True, timeout=60)
    security = security or {"runAsUser": 10001, "runAsGroup": 10001, "readOnlyRootFilesystem": True}
    user, group = security["runAsUser"], security["runAsGroup"]
    command = [DOCKER, "run", "--rm", "--user", f"{user}:{group}", "--cap-drop", "ALL",
               "--security-opt", "no-new-privileges", "--tmpfs", "/tmp",
               "--tmpfs", f"/var/lib/starling:uid={user},gid={group},mode=0750",
               "--volume", f"{mounted}:{MOUNTED}:ro"]
    if security.get("readOnlyRootFilesystem"):
        command.append("--read-only")
    for name, value in environment.items():
        command += ["--env", f"{name}={value}"]
    return subprocess.run([*command, STARLING_IMAGE, *args], capture_output=True, text=True,
                          timeout=120)


def readable_by_all(root):
    """As a Secret volume's files are (mode 0644): the container's user reads them."""
    for directory, _, files in os.walk(root):
        os.chmod(directory, 0o755)
        for name in files:
            os.chmod(os.path.join(directory, name), 0o644)


def check_binary_accepts_rendered_args():
    binary = Path(STARLING_BIN)
    if not STARLING_IMAGE:
        expect(binary.is_file(), f"no starling binary at {binary} (build it, or set STARLING_BIN)")
    scratch = Path(tempfile.mkdtemp(prefix="starling-chart-"))
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    mounted_files(scratch)
    runs = 0
    generated = 0
    for description, name, namespace, values in VARIANTS:
        manifests = render(values, name, namespace)
        statefulset = only(manifests, "StatefulSet")
        spec = statefulset["spec"]
        container = spec["template"]["spec"]["containers"][0]
        start = spec["ordinals"]["start"]
        pods = [f"{statefulset['metadata']['name']}-{start + i}" for i in range(spec["replicas"])]
        # The first and the last pod: both ends of the ordinals.
        # Without cert-manager, the certificate the chart made: the binary must read it.
        effective = merged(values)
        root = scratch
        own = generated_secret(manifests, effective["tls"]["secretName"] or f"{statefulset['metadata']['name']}-tls")
        if own is not None:
            root = scratch / f"generated-{runs}"
            shutil.copytree(scratch / "auth", root / "auth")
            write_secret_files(own, root / "tls")
            generated += 1
        for pod_name in sorted({pods[0], pods[-1]}):
            environment = container_environment(container, pod_name, namespace)
            args = [expand_kubernetes_references(a, environment) for a in container["args"]]
            expect(args[0] == "node", f"{description}: the container runs `starling node`")
            unexpanded = [a for a in args if "$(" in a]
            expect(not unexpanded, f"{description}: unexpanded references {unexpanded}")
            readable_by_all(root)
            completed = run_binary([*args, "--validate-config"], environment, root,
                                   container.get("securityContext"))
            expect(
                completed.returncode == 0,
                f"{description}: `starling {' '.join(args)} --validate-config` with "
                f"STARLING_ID={pod_name} exited {completed.returncode}: "
                f"{completed.stderr.strip()}",
            )
            summary = completed.stdout.strip()
            ordinal = int(pod_name.rsplit("-", 1)[1])
            expect(
                f"valid configuration: id {ordinal} " in summary,
                f"{description}: {pod_name} runs as id {ordinal}: {summary}",
            )
            for peer in pods:
                expect(f"={peer}." in summary, f"{description}: {peer} is a peer: {summary}")
            expect(
                f"advertise {pod_name}." in summary,
                f"{description}: {pod_name} advertises its own name: {summary}",
            )
            effective = merged(values)
            auth = "tokens" if effective["auth"]["adminTokenSecret"] else "open"
            expect(f" auth {auth} " in summary, f"{description}: auth {auth}: {summary}")
            metrics_auth = bool(effective["auth"].get("metricsAuth"))
            expect(
                (" metrics-auth " in summary) == metrics_auth,
                f"{description}: /metrics behind tokens is {metrics_auth}: {summary}",
            )
            expect(" tls on " in summary, f"{description}: TLS on the gRPC port: {summary}")
            if effective["mode"] == "operator":
                rbac = effective["rbac"]
                watched = ",".join(sorted(rbac["watchNamespaces"])) or (
                    namespace if rbac["namespaced"] else "all"
                )
                expect(
                    f"mode operator kubeconfig inferred watch-namespaces {watched} " in summary,
                    f"{description}: operator mode watching {watched}: {summary}",
                )
                capi = "on" if effective["operator"]["capi"] else "off"
                expect(summary.endswith(f"capi {capi}"), f"{description}: capi {capi}: {summary}")
            else:
                expect(summary.endswith("mode standalone"), f"{description}: standalone: {summary}")
            runs += 1
    # The binary refuses what it must: the check above can fail.
    refused = run_binary(["node", "--data-dir", "/nonexistent", "--validate-config"],
                         {"STARLING_ID": "starling-0"}, scratch)
    expect(
        refused.returncode != 0 and "id 0" in refused.stderr,
        f"the binary refuses id 0: exit {refused.returncode}, {refused.stderr.strip()}",
    )
    where = f"inside {STARLING_IMAGE}" if STARLING_IMAGE else f"the host binary {binary}"
    return (
        f"`starling node --validate-config` ({where}) accepts the rendered args and env of {runs} pods "
        f"({len(VARIANTS)} variants, STARLING_ID from the pod name, TLS on; {generated} with "
        "the certificate the chart made itself), and refuses starling-0"
    )


def check_notes():
    text = notes({})
    for needle in ("rollout status statefulset/starling", "port-forward", "members list", "kubectl apply -f"):
        expect(needle in text, f"NOTES.txt tells the user to run {needle!r}")
    standalone = notes({"mode": "standalone"})
    expect("apply -f fleet/" in standalone and "kubectl apply" not in standalone, "standalone NOTES")
    expect(
        "get secret starling-tls -o jsonpath='{.data.ca\\.crt}' | base64 -d > ca.crt" in text,
        "NOTES.txt says how to take ca.crt out of the TLS Secret",
    )
    for page in (text, standalone):
        commands = [line.strip() for line in page.splitlines() if line.strip().startswith("starling ")]
        expect(
            commands and all("--tls-ca ca.crt" in c for c in commands),
            f"every starling command in NOTES.txt passes --tls-ca: {commands}",
        )
    expect("ContainerCreating" not in text, "no Secret to create when the chart makes it")
    for needle in ("made a CA", "delete secret starling-tls", "helm upgrade"):
        expect(needle in text, f"NOTES.txt says how to rotate the generated certificate: {needle!r}")
    issued = notes({"tls": {"certManager": {"enabled": True}}})
    expect(
        "made a CA" not in issued and "ContainerCreating" not in issued,
        "NOTES.txt with cert-manager: nothing to make, nothing to rotate by hand",
    )
    own = notes(
        {
            "auth": {"adminTokenSecret": "starling-admin"},
            "tls": {"secretName": "grpc-certs", "certManager": {"enabled": False}},
        }
    )
    for needle in (
        "get secret grpc-certs",
        "Secret grpc-certs exists",
        "tls.crt, tls.key and ca.crt",
        "server auth and client auth",
        "*.starling-headless.fleet-system.svc.cluster.local",
        "STARLING_TOKEN",
        "starling-admin",
    ):
        expect(needle in own, f"NOTES.txt with the user's own TLS Secret and a token: {needle!r}")
    return (
        "NOTES.txt shows rollout status, the port-forward, ca.crt from the TLS Secret and "
        "--tls-ca, `starling members list`, kubectl apply (operator mode) or starling apply "
        "(standalone), the Secret to create without cert-manager, and the admin token"
    )


CHECKS = [
    check_lint,
    check_manifests_validate,
    check_schema_rejects_bad_values,
    check_statefulset,
    check_rbac,
    check_tls,
    check_generated_tls_kept_across_upgrades,
    check_binary_accepts_rendered_args,
    check_notes,
]


def run_checks(label, checks):
    """Runs every check, printing one line each; the exit code (1 when any failed)."""
    failures = 0
    for check in checks:
        try:
            print(f"ok   {check.__name__}: {check()}")
        except CheckFailed as error:
            failures += 1
            print(f"FAIL {check.__name__}: {error}")
        except Exception:  # an unexpected error is a failure too, with its trace
            failures += 1
            print(f"FAIL {check.__name__}: unexpected error")
            traceback.print_exc()
    if failures:
        print(f"{label}: {failures} of {len(checks)} checks failed")
        return 1
    print(f"{label}: all {len(checks)} checks passed")
    return 0


def main():
    """Every check, or the ones named on the command line (`check_lint ...`)."""
    names = sys.argv[1:]
    unknown = [n for n in names if n not in {c.__name__ for c in CHECKS}]
    if unknown:
        print(f"unknown checks {unknown}; the checks: {[c.__name__ for c in CHECKS]}")
        return 2
    checks = [c for c in CHECKS if not names or c.__name__ in names]
    where = f"image {STARLING_IMAGE}" if STARLING_IMAGE else f"binary {STARLING_BIN}"
    print(f"chart tests: {CHART} (helm {helm_python.helm_sdk_version()}, {where})")
    return run_checks("chart tests", checks)


if __name__ == "__main__":
    sys.exit(main())

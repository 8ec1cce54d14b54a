#!/usr/bin/env python3
"""Reference renders for Starling's differential tests.

    reference.py kustomize|helm CASE_DIR
    reference.py versions

Prints {"objects": [...], "crds": [...], "hooks": [...], "error": null|"message"}
as JSON on stdout. A failed render is a result (exit 0, "error" set); bad
usage or a broken case directory exits 2.

kustomize: `kubectl kustomize CASE_DIR/<path>`, after refusing any remote
base reachable from it. helm: libhelm_c (Helm v4) through helm_python, in
target/chart-venv. Both run offline. See HELM_C_ABI.md for the engine facts
this relies on.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV = HERE.parent.parent / "target" / "chart-venv"


def _reexec_in_venv() -> None:
    py = VENV / "bin" / "python"
    if py.exists() and not os.environ.get("STARLING_REFERENCE_REEXEC"):
        os.environ["STARLING_REFERENCE_REEXEC"] = "1"
        os.execv(str(py), [str(py), *sys.argv])


try:
    import yaml
    import helm_python  # noqa: F401  (checked here so both engines use one interpreter)
except ImportError:
    _reexec_in_venv()
    raise


class Loader(yaml.SafeLoader):
    """SafeLoader that keeps timestamps as strings, as Kubernetes decoders do."""


Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_docs(text: str) -> list:
    return [d for d in yaml.load_all(text, Loader) if d not in (None, {})]


def result(objects=(), crds=(), hooks=(), error=None) -> dict:
    return {"objects": list(objects), "crds": list(crds), "hooks": list(hooks), "error": error}


# --------------------------------------------------------------------------- kustomize

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
# Fields whose string entries may name another kustomization (or a remote one).
REFERENCE_FIELDS = ("resources", "bases", "components", "generators", "transformers", "validators")
REMOTE = re.compile(
    r"""^(?:[a-z][a-z0-9+.-]*://      # https://, ssh://, file://, ...
        | git::                       # go-getter style
        | [^/\s:]+@[^/\s:]+:          # git@host:org/repo
        | (?:[a-z0-9-]+\.)+[a-z]{2,}(?::\d+)?/   # github.com/org/repo shorthand
        )""",
    re.IGNORECASE | re.VERBOSE,
)


def kustomization_file(directory: Path) -> Path | None:
    return next((directory / n for n in KUSTOMIZATION_FILES if (directory / n).is_file()), None)


def find_remote(root: Path, case_dir: Path) -> str | None:
    """Walk every kustomization reachable from root; describe the first remote entry."""
    seen: set[Path] = set()
    pending = [root.resolve()]
    while pending:
        directory = pending.pop()
        if directory in seen:
            continue
        seen.add(directory)
        kfile = kustomization_file(directory)
        if kfile is None:
            continue
        doc = yaml.load(kfile.read_text(), Loader)
        if not isinstance(doc, dict):
            continue  # kubectl reports malformed kustomizations itself
        for field in REFERENCE_FIELDS:
            for entry in doc.get(field) or []:
                if not isinstance(entry, str):
                    continue
                local = directory / entry
                if local.exists():
                    if local.is_dir():
                        pending.append(local.resolve())
                elif REMOTE.match(entry):
                    where = os.path.relpath(kfile, case_dir)
                    return (f"remote {field} entry refused, the build runs offline: "
                            f"'{entry}' in {where}")
    return None


def kubectl_error(stderr: str) -> str:
    """The message of kubectl's klog 'command failed' line, or its plain error text."""
    m = re.search(r'err="((?:[^"\\]|\\.)*)"', stderr)
    if m:
        try:
            return json.loads(f'"{m.group(1)}"')
        except json.JSONDecodeError:
            return m.group(1)
    m = re.search(r"err=<\n(.*?)\n\s*>", stderr, re.S)
    if m:
        return "\n".join(line.lstrip("\t") for line in m.group(1).splitlines())
    lines = [l for l in stderr.splitlines() if l.strip() and not l.startswith("# Warning")]
    return "\n".join(lines).removeprefix("error: ")


# The gcloud kubectl on PATH is a dispatcher: it asks the current kubeconfig's
# API server for its version before running kubectl.<major>.<minor>. Use that
# versioned binary directly (1.32 is the one it falls back to offline here),
# and hide any kubeconfig so no cluster is asked either way.
PINNED_KUBECTL = "kubectl.1.32"


def kubectl() -> str:
    if os.environ.get("STARLING_KUBECTL"):
        return os.environ["STARLING_KUBECTL"]
    found = shutil.which("kubectl")
    if found:
        pinned = Path(found).resolve().parent / PINNED_KUBECTL
        if pinned.is_file():
            return str(pinned)
    return "kubectl"


def run_kubectl(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, KUBECONFIG=os.devnull)
    return subprocess.run([kubectl(), *args], capture_output=True, text=True,
                          timeout=300, env=env)


def render_kustomize(case_dir: Path, spec: dict) -> dict:
    target = case_dir / spec["path"]
    remote = find_remote(target, case_dir)
    if remote:
        return result(error=remote)
    proc = run_kubectl("kustomize", str(target))
    if proc.returncode != 0:
        return result(error=kubectl_error(proc.stderr).replace(f"{case_dir}/", ""))
    return result(objects=load_docs(proc.stdout))


# --------------------------------------------------------------------------- helm

# Only used by the client-side dry-run install, which swaps in fake clients and
# never dials it; loopback so that a mistake could not leave the machine.
OFFLINE_KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: offline, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: offline, context: {cluster: offline, user: offline}}]
users: [{name: offline, user: {token: offline}}]
current-context: offline
"""


def merge_values(base: dict, override: dict) -> dict:
    """The Helm CLI's mergeMaps for -f files: maps merge, anything else replaces."""
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge_values(base[key], value)
        else:
            base[key] = value
    return base


def hook_entry(path: str, doc: dict, annotations: dict) -> dict:
    try:
        weight = int(str(annotations.get("helm.sh/hook-weight", "0")).strip())
    except ValueError:
        weight = 0  # Helm's strconv.Atoi failure also means 0
    split = lambda s: [p.strip() for p in str(s or "").split(",") if p.strip()]  # noqa: E731
    return {
        "path": path,
        "events": split(annotations["helm.sh/hook"]),
        "weight": weight,
        "deletePolicies": split(annotations.get("helm.sh/hook-delete-policy")),
        "object": doc,
    }


def render_helm(case_dir: Path, spec: dict) -> dict:
    import helm_python as helm
    from helm_python import _native

    values: dict = {}
    for name in spec.get("valuesFiles") or []:
        merge_values(values, helm.values_from_yaml((case_dir / name).read_text()))
    merge_values(values, spec.get("values") or {})
    values_json = json.dumps(values)
    release, namespace = spec["release"], spec["namespace"]
    kube_version = spec.get("kubeVersion")
    chart_dir = str(case_dir / "chart")

    render_opts = {"name": release, "namespace": namespace, "is_install": True}
    install_opts = {"dry_run": "client", "namespace": namespace}
    if kube_version is not None:
        render_opts["kube_version"] = install_opts["kube_version"] = str(kube_version)

    try:
        # helm_render skips helm template's pre-flight (dependencies present in
        # charts/, Chart.yaml kubeVersion, release name); a client-side dry-run
        # install runs it with the same engine. Each call gets a fresh chart
        # handle because rendering prunes disabled subcharts from the handle.
        with helm.Config(kubeconfig_content=OFFLINE_KUBECONFIG, storage_driver="memory") as cfg, \
                helm.Chart.load(chart_dir) as chart:
            _native.call_string("helm_install", cfg._raw(), _native.HANDLE(0), chart._raw(),
                                None, release, values_json, json.dumps(install_opts))
        with helm.Chart.load(chart_dir) as chart:
            rendered = json.loads(_native.call_string(
                "helm_render", chart._raw(), values_json, json.dumps(render_opts)))
            # After the render the handle holds only enabled subcharts, so this is
            # the crds/ set `helm install` would apply.
            crd_files = chart.crds
    except helm.HelmError as exc:
        return result(error=str(exc))

    objects, hooks = [], []
    for path, text in rendered.items():  # Go marshals the map sorted by template path
        if path.endswith("NOTES.txt"):
            continue
        for doc in load_docs(text):
            annotations = (doc.get("metadata") or {}).get("annotations") or {}
            if "helm.sh/hook" in annotations:
                hooks.append(hook_entry(path, doc, annotations))
            else:
                objects.append(doc)
    crds = [doc for f in crd_files for doc in load_docs(f["data"])]
    for index, renderer in enumerate(spec.get("postRenderers") or []):
        objects = post_render(objects, renderer["kustomize"])
        if isinstance(objects, str):
            return result(error=f"postRenderers[{index}]: {objects}")
    return result(objects=objects, crds=crds, hooks=hooks)


def post_render(objects: list, kustomize: dict) -> list | str:
    """`kubectl kustomize` over the chart's objects (not its crds/ nor its hooks), with the
    post-renderer's patches and images, as Flux's helm-controller runs it."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        Path(scratch, "helm-output.yaml").write_text(yaml.safe_dump_all(objects))
        kustomization = {"resources": ["helm-output.yaml"]}
        for field in ("patches", "images"):
            if kustomize.get(field):
                kustomization[field] = kustomize[field]
        Path(scratch, "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        proc = run_kubectl("kustomize", scratch)
        if proc.returncode != 0:
            return kubectl_error(proc.stderr)
        return load_docs(proc.stdout)


# --------------------------------------------------------------------------- main

ENGINES = {"kustomize": render_kustomize, "helm": render_helm}


def versions() -> dict:
    import helm_python as helm
    from helm_python import _native

    client = run_kubectl("version", "--client", "-o", "json")
    info = json.loads(client.stdout) if client.returncode == 0 else {}
    return {
        "kubectl": kubectl(),
        "kubectlVersion": (info.get("clientVersion") or {}).get("gitVersion"),
        "kustomizeVersion": info.get("kustomizeVersion"),
        "helmLibrary": str(_native.library_path),
        "helmC": helm.helm_c_version(),
        "helmSdk": helm.helm_sdk_version(),
    }


def main(argv: list[str]) -> int:
    if argv[1:] == ["versions"]:
        print(json.dumps(versions()))
        return 0
    if len(argv) != 3 or argv[1] not in ENGINES:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    case_dir = Path(argv[2]).resolve()
    spec_file = case_dir / "case.yaml"
    if not spec_file.is_file():
        print(f"no case.yaml in {case_dir}", file=sys.stderr)
        return 2
    spec = yaml.load(spec_file.read_text(), Loader) or {}
    out = ENGINES[argv[1]](case_dir, spec)
    json.dump(out, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/env python3
"""Run reference.py on every corpus case and check it succeeds or fails as expected.

    check_corpus.py [kustomize|helm] [CASE_NAME_SUBSTRING]

A case without expectError must render at least one object, CRD or hook with
no error; a case with expectError must fail with a message containing it.
Prints one line per case and a total; exits 1 on any mismatch.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
REFERENCE = HERE / "reference.py"
CASE_KEYS = {
    "kustomize": {"path", "expectError"},
    "helm": {"release", "namespace", "values", "valuesFiles", "kubeVersion", "expectError",
             "postRenderers"},
}
REQUIRED_KEYS = {"kustomize": {"path"}, "helm": {"release", "namespace"}}


def check_case(kind: str, case: Path) -> tuple[bool, str]:
    import yaml

    spec = yaml.safe_load((case / "case.yaml").read_text()) or {}
    unknown = set(spec) - CASE_KEYS[kind]
    missing = REQUIRED_KEYS[kind] - set(spec)
    if unknown or missing:
        return False, f"bad case.yaml: unknown {sorted(unknown)}, missing {sorted(missing)}"
    proc = subprocess.run([sys.executable, str(REFERENCE), kind, str(case)],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return False, f"reference.py exited {proc.returncode}: {proc.stderr.strip()[-300:]}"
    out = json.loads(proc.stdout)
    if set(out) != {"objects", "crds", "hooks", "error"}:
        return False, f"unexpected output keys {sorted(out)}"
    error, expect = out["error"], spec.get("expectError")
    counts = f"{len(out['objects'])} objects, {len(out['crds'])} crds, {len(out['hooks'])} hooks"
    if expect is not None:
        if error is None:
            return False, f"expected error containing {expect!r}, got {counts}"
        if expect not in error:
            return False, f"error does not contain {expect!r}: {error[:300]}"
        return True, f"failed as expected: {error.splitlines()[0][:110]}"
    if error is not None:
        return False, f"unexpected error: {error[:300]}"
    if not (out["objects"] or out["crds"] or out["hooks"]):
        return False, "rendered nothing"
    return True, counts


def main(argv: list[str]) -> int:
    kinds = [argv[1]] if len(argv) > 1 else ["kustomize", "helm"]
    pattern = argv[2] if len(argv) > 2 else ""
    engines = subprocess.run([sys.executable, str(REFERENCE), "versions"],
                             capture_output=True, text=True, timeout=120)
    print(f"engines: {engines.stdout.strip() or engines.stderr.strip()[-200:]}")
    passed = failed = 0
    for kind in kinds:
        for case in sorted(p for p in (CORPUS / kind).iterdir() if p.is_dir()):
            if pattern not in case.name:
                continue
            try:
                ok, detail = check_case(kind, case)
            except Exception as exc:  # a broken case must not hide the others
                ok, detail = False, f"{type(exc).__name__}: {exc}"
            passed += ok
            failed += not ok
            print(f"{'PASS' if ok else 'FAIL'} {kind}/{case.name}: {detail}", flush=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    try:
        import yaml  # noqa: F401
    except ImportError:
        venv_python = HERE.parent.parent / "target" / "chart-venv" / "bin" / "python"
        import os
        os.execv(str(venv_python), [str(venv_python), *sys.argv])
    sys.exit(main(sys.argv))

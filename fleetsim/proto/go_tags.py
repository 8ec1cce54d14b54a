#!/usr/bin/env python3
"""Writes fleetsim/src/schema/go_tags.rs: the JSON facts of the Kubernetes API types that the
.proto files do not carry, read from the Go struct tags of k8s.io/api, k8s.io/apimachinery and
k8s.io/apiextensions-apiserver at the release the .proto files come from.

    go_tags.py API_CHECKOUT APIMACHINERY_CHECKOUT APIEXTENSIONS_CHECKOUT > ../src/schema/go_tags.rs

Each checkout is a git work tree (or bare repository, with GIT_REF naming the tag to read,
default v0.33.0). Only fields with a fact that differs from the default mapping are written:

- EMIT_ZERO: a scalar whose zero value Go's encoding/json writes (a pointer, or no omitempty);
  every other scalar is omitted when zero.
- NULL_WHEN_EMPTY: a list or map without omitempty (Go writes `null` for an empty one).
- INLINE: an embedded struct (`json:",inline"`): its fields appear in the parent's JSON.
- DROP: a field that has a protobuf tag but no JSON form (`json:"-"`).
- a JSON name that differs from the protobuf field name (`$ref`, `x-kubernetes-...`);
- the strategic merge patch strategy and merge key (`patchStrategy`, `patchMergeKey`).
"""

import os
import re
import subprocess
import sys

REF = os.environ.get("GIT_REF", "v0.33.0")

# (checkout index, Go package directory, protobuf package)
PACKAGES = [
    (0, "core/v1", "api.core.v1"),
    (0, "apps/v1", "api.apps.v1"),
    (0, "batch/v1", "api.batch.v1"),
    (0, "rbac/v1", "api.rbac.v1"),
    (0, "coordination/v1", "api.coordination.v1"),
    (0, "events/v1", "api.events.v1"),
    (0, "networking/v1", "api.networking.v1"),
    (0, "policy/v1", "api.policy.v1"),
    (0, "autoscaling/v2", "api.autoscaling.v2"),
    (1, "pkg/apis/meta/v1", "apimachinery.pkg.apis.meta.v1"),
    (1, "pkg/runtime", "apimachinery.pkg.runtime"),
    (2, "pkg/apis/apiextensions/v1", "apiextensions_apiserver.pkg.apis.apiextensions.v1"),
]

SCALARS = {"string", "bool", "int", "int32", "int64", "uint32", "uint64", "float32", "float64", "[]byte"}

FIELD = re.compile(r"^\t(?:(\w+)\s+)?([\w.\[\]*]+(?:\[[\w.]+\][\w.*\[\]]+)?)\s+`([^`]*)`")
TAG = re.compile(r'(\w+):"([^"]*)"')


def git_files(checkout, directory):
    out = subprocess.run(["git", "-C", checkout, "ls-tree", "--name-only", REF, directory + "/"],
                         check=True, capture_output=True, text=True).stdout.split()
    for path in out:
        name = path.rsplit("/", 1)[-1]
        if not name.endswith(".go") or name.endswith("_test.go") or name.startswith("zz_") \
                or name.startswith("generated") or "swagger_doc" in name or "fuzz" in name:
            continue
        yield subprocess.run(["git", "-C", checkout, "show", f"{REF}:{path}"],
                             check=True, capture_output=True, text=True).stdout


def lower_camel(name):
    return name[:1].lower() + name[1:]


def main():
    checkouts = sys.argv[1:4]
    sources = []
    aliases = {}
    for index, directory, package in PACKAGES:
        for text in git_files(checkouts[index], directory):
            sources.append((package, text))
            for name, base in re.findall(r"^type (\w+) (\S+)\s*$", text, re.M):
                aliases[name] = base
    rows = []
    for package, text in sources:
        for struct, body in re.findall(r"^type (\w+) struct \{\n(.*?)^\}", text, re.M | re.S):
            for line in body.splitlines():
                match = FIELD.match(line)
                if not match:
                    continue
                go_name, go_type, tags = match.groups()
                tags = dict(TAG.findall(tags))
                if "protobuf" not in tags:
                    continue
                proto = dict(p.split("=", 1) for p in tags["protobuf"].split(",") if "=" in p)
                embedded = go_name is None
                if embedded:
                    go_name = go_type.lstrip("*").rsplit(".", 1)[-1]
                field = proto.get("name", lower_camel(go_name))
                json_parts = tags.get("json", "").split(",")
                json_name = json_parts[0]
                omitempty = "omitempty" in json_parts[1:]
                inline = "inline" in json_parts[1:]
                pointer = go_type.startswith("*")
                base = go_type.lstrip("*")
                resolved = aliases.get(base.rsplit(".", 1)[-1], base) if base not in SCALARS else base
                flags = []
                if json_name == "-":
                    flags.append("DROP")
                elif inline:
                    flags.append("INLINE")
                elif resolved in SCALARS:
                    if pointer or not omitempty:
                        flags.append("EMIT_ZERO")
                elif (resolved.startswith("[]") or resolved.startswith("map[")) and not pointer \
                        and not omitempty:
                    flags.append("NULL_WHEN_EMPTY")
                json_out = json_name if json_name not in ("", "-") and json_name != field else ""
                strategy = tags.get("patchStrategy", "")
                merge_key = tags.get("patchMergeKey", "")
                if flags or json_out or strategy or merge_key:
                    rows.append((f"{package}.{struct}", field, "|".join(flags) or "0",
                                 json_out, strategy, merge_key))
    rows.sort()
    print("//! The JSON facts of the built-in types that their .proto files do not carry, from the Go")
    print(f"//! struct tags of k8s.io/api, apimachinery and apiextensions-apiserver {REF}.")
    print("//! Generated by `fleetsim/proto/go_tags.py`: do not edit by hand.")
    print()
    print("use super::facts::{DROP, EMIT_ZERO, GoField, INLINE, NULL_WHEN_EMPTY};")
    print()
    print("#[rustfmt::skip]")
    print("pub(crate) const GO_FIELDS: &[GoField] = &[")
    for message, field, flags, json_out, strategy, merge_key in rows:
        print(f'    GoField::new("{message}", "{field}", {flags}, "{json_out}", "{strategy}", "{merge_key}"),')
    print("];")


main()

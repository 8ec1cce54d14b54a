# syntax=docker/dockerfile:1
# The image the Helm chart (chart/) runs: the `starling` binary on a small Debian runtime, as a
# non-root user whose uid (10001) the chart's securityContext uses.
#
#   docker build -t starling:0.1.0 .
#
# The binary links OpenSSL (git2's https transport) and zlib from the system; libgit2, libssh2
# and jemalloc (its allocator) are built into it. It never runs the git command.

FROM rust:1.95-bookworm AS builder
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends pkg-config libssl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Every workspace member, so that cargo can load the workspace; the build is only `starling`,
# without its `dev` feature: the image holds no fleetsim and no demo (`starling dev` is for a
# developer's machine).
COPY Cargo.toml Cargo.lock ./
COPY agent agent
COPY chaos chaos
COPY cli cli
COPY dev dev
COPY fleet fleet
COPY fleetsim fleetsim
COPY loadtest loadtest
COPY operator operator
COPY proto proto
COPY raft raft
COPY render render
COPY replica replica
COPY secret secret
COPY shard shard
COPY source source
COPY starling starling
COPY sync sync
COPY transport transport
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p starling --no-default-features \
 && cp target/release/starling /usr/local/bin/starling

# The render engines (README, "What a cluster gets"): Helm's engine as the C library inside
# PyPI's helm-python-sdk wheel (Helm v4, built from Go; it needs only libc), and kubectl for
# kustomize's build (its published SHA-256 checked). The runtime image holds the two files and
# no Python.
FROM python:3.11-slim-bookworm AS engines
ARG KUBECTL_VERSION=v1.32.0
RUN pip download --quiet --no-deps --only-binary=:all: --dest /wheels 'helm-python-sdk>=0.2,<0.3' \
 && python -m zipfile -e /wheels/helm_python_sdk-*.whl /wheels/sdk \
 && install -D -m 0755 "$(find /wheels/sdk -name 'libhelm_c.so*' -type f | sort | tail -n 1)" \
      /engines/lib/starling/libhelm_c.so \
 && python - <<'PY'
import hashlib, os, urllib.request
base = f"https://dl.k8s.io/release/{os.environ['KUBECTL_VERSION']}/bin/linux/amd64/kubectl"
binary = urllib.request.urlopen(base).read()
expected = urllib.request.urlopen(base + ".sha256").read().decode().split()[0]
assert hashlib.sha256(binary).hexdigest() == expected, "kubectl's digest does not match"
with open("/engines/kubectl", "wb") as out:
    out.write(binary)
PY
RUN chmod 0755 /engines/kubectl

FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libssl3 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 starling \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/starling --no-create-home \
      --shell /usr/sbin/nologin starling \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/starling
COPY --from=builder /usr/local/bin/starling /usr/local/bin/starling
COPY --from=engines /engines/lib/starling/libhelm_c.so /usr/lib/starling/libhelm_c.so
COPY --from=engines /engines/kubectl /usr/local/bin/kubectl
# Fails the build here, not in the cluster, when a shared library is missing.
RUN starling --version && kubectl version --client
USER 10001:10001
WORKDIR /var/lib/starling
# gRPC (Raft, API, heartbeats, artifacts) and HTTP (/healthz, /readyz, /metrics).
EXPOSE 7400 7401
ENTRYPOINT ["starling"]
CMD ["--help"]

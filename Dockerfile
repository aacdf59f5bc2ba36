# syntax=docker/dockerfile:1
# service-serving-signer: the kubernetes.io/service-serving PodCertificateRequest signer
# and ClusterTrustBundle publisher.
#
#   docker build -t service-serving-signer:0.1.0 .
#
# Dependencies are pinned in requirements.lock (the runtime closure of pyproject's
# dependencies at the tested versions) and installed with --no-deps, so nothing
# unpinned reaches the image; `pip check` proves the closure is complete.

ARG PYTHON_IMAGE=python:3.11-slim

# --- build: a venv with the pinned dependencies and our wheel --------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src

# Build tools live in their own venv and never reach the runtime image.
RUN python -m venv /opt/build \
 && /opt/build/bin/pip install setuptools==80.9.0 wheel==0.45.1

RUN python -m venv /opt/venv
COPY requirements.lock ./
RUN /opt/venv/bin/pip install --no-deps --only-binary=:all: -r requirements.lock

COPY pyproject.toml README.md ./
COPY kube ./kube
COPY trust ./trust
COPY signer ./signer
COPY publisher ./publisher
COPY manager ./manager
COPY controlplane ./controlplane
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /wheels . \
 && /opt/venv/bin/pip install --no-deps /wheels/*.whl \
 && /opt/venv/bin/pip check \
 && /opt/venv/bin/service-serving-signer version

# --- runtime: the venv only, as a non-root numeric user --------------------------------
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="service-serving-signer" \
      org.opencontainers.image.description="kubernetes.io/service-serving PodCertificateRequest signer (KEP-6283)" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/venv /opt/venv
# 65532 = "nonroot" in distroless images; numeric so runAsNonRoot can verify it.
USER 65532:65532
EXPOSE 10358 10359
ENTRYPOINT ["service-serving-signer", "run"]

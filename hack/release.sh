#!/usr/bin/env bash
# `make release`: what a team needs to vouch for a release, into dist/:
#   service-serving-signer-<v>.oci.tar        the image (hack/image.sh; reused when current)
#   service-serving-signer-<v>.spdx.json      its SBOM, SPDX 2.3 (hack/sbom.sh, syft)
#   service-serving-signer-<v>.cdx.json       the same SBOM, CycloneDX
#   service_serving_signer-<v>-py3-none-any.whl  the CLI and controller (hack/dist.sh)
#   service_serving_signer-<v>.tar.gz         its sdist
#   service-serving-signer-<v>.tgz            the chart (helm package)
#   service-serving-signer-<v>.image.json     the image's manifest digest and OCI labels
#   SHA256SUMS                                sha256 of every file above
# docs/release.md says how to verify and mirror them. A release is built from a clean
# tree (the image's revision label names the commit); RELEASE_ALLOW_DIRTY=1 overrides
# that for a trial run, and the labels then say `-dirty`. Its base image is pinned by
# digest (BASE_IMAGE=…@sha256:…, pulled by hack/image.sh); RELEASE_ALLOW_UNPINNED_BASE=1
# builds a trial on the floating base.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml)
CHART_VERSION=$(sed -n 's/^version: *//p' charts/service-serving-signer/Chart.yaml)
APP_VERSION=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/service-serving-signer/Chart.yaml)
NAME=service-serving-signer-$VERSION
log() { printf '[release %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

[ "$APP_VERSION" = "$VERSION" ] || { log "Chart.yaml appVersion $APP_VERSION != pyproject version $VERSION"; exit 1; }
dirty=$(git status --porcelain 2>/dev/null || true)
if [ -n "$dirty" ] && [ "${RELEASE_ALLOW_DIRTY:-}" != 1 ]; then
  log "the tree has uncommitted changes; commit them (or RELEASE_ALLOW_DIRTY=1 for a trial):"
  printf '%s\n' "$dirty" | sed 's/^/  /' >&2
  exit 1
fi
# docs/install.md "The image": a release pins its base image by digest, so the same
# release rebuilds the same image.
base=${BASE_IMAGE:-$(sed -n 's/^ARG BASE_IMAGE=//p' Dockerfile | head -1)}
case "$base" in
  *@sha256:*) ;;
  *)
    if [ "${RELEASE_ALLOW_UNPINNED_BASE:-}" != 1 ]; then
      log "the base image $base is not pinned by digest: export BASE_IMAGE=<image>@sha256:<digest> (docs/release.md), or RELEASE_ALLOW_UNPINNED_BASE=1 for a trial"
      exit 1
    fi
    log "warning: the base image $base is not pinned by digest (RELEASE_ALLOW_UNPINNED_BASE=1)"
    ;;
esac

archive=$(hack/image.sh | tail -1)
[ "$archive" = "dist/$NAME.oci.tar" ] || { log "unexpected image archive $archive"; exit 1; }

log "SBOM of $archive (syft)"
hack/sbom.sh "$archive" "dist/$NAME"

log "wheel and sdist"
hack/dist.sh >/dev/null

log "helm package"
HELM=${HELM:-$(.venv/bin/python -c 'from controlplane.binaries import tool; print(tool("helm"))')}
rm -f "dist/service-serving-signer-$CHART_VERSION.tgz"
HELM_CACHE_HOME=${HELM_CACHE_HOME:-/tmp/helm-cache} "$HELM" package charts/service-serving-signer \
    --destination dist >&2

log "image digest and labels"
# The archive's index names one manifest; its digest is what a registry serves after
# `skopeo copy --preserve-digests`, and what the chart's image.digest pins.
python3 - "$archive" "dist/$NAME.image.json" <<'PY'
import json, sys, tarfile
archive, out = sys.argv[1], sys.argv[2]
with tarfile.open(archive) as tar:
    def blob(digest):
        algo, hexa = digest.split(":")
        return json.load(tar.extractfile(f"blobs/{algo}/{hexa}"))
    index = json.load(tar.extractfile("index.json"))
    (desc,) = index["manifests"]
    manifest = blob(desc["digest"])
    config = blob(manifest["config"]["digest"])
labels = config.get("config", {}).get("Labels") or {}
wanted = ["title", "description", "version", "revision", "created", "source", "licenses", "base.name"]
missing = [k for k in wanted if not labels.get(f"org.opencontainers.image.{k}")]
if missing:
    sys.exit(f"image labels missing: {missing}")
json.dump({"reference": desc.get("annotations", {}).get("org.opencontainers.image.ref.name", ""),
           "digest": desc["digest"], "labels": labels}, open(out, "w"), indent=2, sort_keys=True)
print(f"{desc['digest']} revision={labels['org.opencontainers.image.revision']}", file=sys.stderr)
PY

log "checksums"
files=("$NAME.oci.tar" "$NAME.spdx.json" "$NAME.cdx.json" "service-serving-signer-$CHART_VERSION.tgz" "$NAME.image.json"
  "service_serving_signer-$VERSION-py3-none-any.whl" "service_serving_signer-$VERSION.tar.gz")
(cd dist && sha256sum "${files[@]}" > SHA256SUMS && sha256sum -c --quiet SHA256SUMS)
(cd dist && ls -l "${files[@]}" SHA256SUMS) >&2

# What to do with it (README "Quick install"): no image is published, so push this one.
digest=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["digest"])' "dist/$NAME.image.json")
cat <<EOF
image digest: $digest
push it with crane (go-containerregistry), then install by that digest:
  mkdir -p dist/oci && tar -xf dist/$NAME.oci.tar -C dist/oci
  crane push dist/oci REGISTRY/service-serving-signer:$VERSION    # prints REGISTRY/service-serving-signer@$digest
  (cd config/image && kustomize edit set image service-serving-signer=REGISTRY/service-serving-signer@$digest)
  helm install ... --set image.repository=REGISTRY/service-serving-signer --set image.digest=$digest
the CLI: pipx install dist/service_serving_signer-$VERSION-py3-none-any.whl
EOF

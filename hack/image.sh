#!/usr/bin/env bash
# `make image`: build the real Dockerfile into an OCI archive under dist/, daemonless.
#
#   hack/image.sh                     -> dist/service-serving-signer-<version>.oci.tar
#                                        (podman load -i …, ctr image import …, skopeo copy oci-archive:…)
#
# No registry of images is reachable from CI, so the base (debian:bookworm-slim) is made
# here from Debian's own packages with mmdebstrap (the minbase variant plus the dpkg
# excludes Debian's official slim image uses) and stored under that name in a private
# buildah store; the Dockerfile's FROM then resolves locally (--pull=never). The image
# is built by Debian's buildah with the vfs driver and chroot isolation, which need no
# daemon, no overlay mounts and no user namespaces. What this machine lacks
# (buildah, mmdebstrap) is installed with apt-get, as CI starts from a fresh machine.
#
# Cache: ${XDG_CACHE_HOME:-~/.cache}/service-serving-signer/image/ holds the buildah
# store (the base image and the build's layers, so a second build reuses them); after a
# build the previous builds' untagged images are removed, so it stays at a few GB.
# Environment: IMAGE_CACHE (the cache dir), IMAGE_NAME (default
# localhost/service-serving-signer), SUITE (default bookworm), MIRROR (Debian mirror),
# IMAGE_BUILD_CA (CA bundle pip trusts in the build; default the machine's), BASE_IMAGE
# (a base to pull instead of making one, e.g. a release's digest-pinned debian).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=${IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/service-serving-signer/image}
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
NAME=${IMAGE_NAME:-localhost/service-serving-signer}
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml)
COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
# org.opencontainers.image.created: the commit's time (UTC), so a rebuild of one commit
# labels the image the same.
CREATED=$(TZ=UTC git log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd 2>/dev/null || echo 1970-01-01T00:00:00Z)
# The runtime packages (the image's build context; .dockerignore and the Dockerfile name the same).
PACKAGES=(kube trust signer publisher injector distributor managedca manager troubleshoot cli)
CONTEXT=(Dockerfile .dockerignore pyproject.toml README.md requirements.lock
  hack/build-requirements.lock "${PACKAGES[@]}")
# -dirty: the build context differs from the commit (changes elsewhere do not count).
if [ -n "$(git status --porcelain -- "${CONTEXT[@]}" 2>/dev/null)" ]; then COMMIT="$COMMIT-dirty"; fi
# BASE_IMAGE (a release's digest-pinned base, docs/install.md "The image") is pulled once;
# unset, the base is made here from Debian's packages under the tag below.
BASE=${BASE_IMAGE:-docker.io/library/debian:$SUITE-slim}
OUT=dist/service-serving-signer-$VERSION.oci.tar
log() { printf '[image %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

need_tools() {
  local missing=()
  command -v buildah >/dev/null 2>&1 || missing+=(buildah)
  command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo -n)
  log "installing ${missing[*]} with apt-get (Debian packages)"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" uidmap >&2 \
    || { "${sudo[@]}" apt-get update -q >&2 \
         && "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" uidmap >&2; }
}

bah() {  # buildah on the project's private store (never the machine's default one)
  buildah --root "$CACHE/storage" --runroot "$CACHE/run" --storage-driver vfs "$@"
}

make_base() {
  if bah inspect --type image "$BASE" >/dev/null 2>&1; then
    log "base $BASE: reusing the one in $CACHE"
    return 0
  fi
  if [ -n "${BASE_IMAGE:-}" ]; then
    log "base $BASE: pulling it"
    bah pull --quiet "$BASE" >/dev/null
    return 0
  fi
  local tmp ctr
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  log "base $BASE: mmdebstrap --variant=minbase $SUITE from $MIRROR"
  # The dpkg path excludes and apt settings of Debian's official -slim images.
  mmdebstrap --quiet --variant=minbase --format=tar \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/lintian/*' \
    --aptopt='APT::Install-Recommends "false"' \
    --aptopt='Acquire::Languages "none"' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/log/*.log' \
    "$SUITE" "$tmp/rootfs.tar" "deb $MIRROR $SUITE main" \
    "deb $MIRROR $SUITE-updates main" "deb ${MIRROR%/debian}/debian-security $SUITE-security main"
  ctr=$(bah from --pull=never scratch)
  bah add "$ctr" "$tmp/rootfs.tar" / >/dev/null
  bah config --cmd bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
  bah commit --quiet --rm "$ctr" "$BASE" >/dev/null
  log "base $BASE: $(bah inspect --type image --format '{{.FromImageID}}' "$BASE" 2>/dev/null | cut -c1-12) committed"
}

build() {
  log "building $NAME:$VERSION (commit $COMMIT) from Dockerfile"
  mkdir -p dist
  # pip in the build stage trusts the machine's CA bundle (a TLS-inspecting proxy in
  # front of PyPI, as on this CI); integrity still rests on the lock files' hashes.
  local ca=${IMAGE_BUILD_CA:-/etc/ssl/certs/ca-certificates.crt} trust=()
  [ -s "$ca" ] && trust=(--volume "$ca:/run/build-ca.crt:ro" --build-arg PIP_CERT=/run/build-ca.crt)
  bah bud --quiet --isolation chroot --pull=never --layers "${trust[@]}" \
    --build-arg "BASE_IMAGE=$BASE" --build-arg "VERSION=$VERSION" \
    --build-arg "VERSION_COMMIT=$COMMIT" --build-arg "CREATED=$CREATED" \
    --tag "$NAME:$VERSION" -f Dockerfile "$ROOT" >&2
  rm -f "$OUT.partial"
  bah push --quiet "$NAME:$VERSION" "oci-archive:$ROOT/$OUT.partial:$NAME:$VERSION" >&2
  mv "$OUT.partial" "$OUT"
  log "wrote $OUT ($(du -h "$OUT" | cut -f1); image $(bah images --format '{{.Size}}' "$NAME:$VERSION" | head -1))"
}

prune_store() {  # keep the store bounded: vfs keeps a full copy of every layer
  # Every commit re-stamps the last layers, so each build leaves the previous image and its
  # commit-specific layers untagged (about 0.8 GB a build). Remove the dangling images
  # older than this build's, leaf first (a removed image's parent may become dangling);
  # the layer cache this build used has children or tags and is kept; images a container
  # (another build in progress) uses are refused by rmi.
  local pass ids
  for pass in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do
    ids=$(bah images -a -q --filter dangling=true --filter "before=$NAME:$VERSION" 2>/dev/null)
    [ -n "$ids" ] || break
    for id in $ids; do bah rmi "$id" >/dev/null 2>&1 || true; done
  done
  log "store: $(bah images -a -q | wc -l) images after pruning ($pass passes)"
}

inputs_digest() {  # what the build reads: the Dockerfile, the context, the base, the commit
  { cat Dockerfile .dockerignore pyproject.toml README.md requirements.lock \
      hack/build-requirements.lock
    find "${PACKAGES[@]}" -type f -name '*.py' -o -type f -name py.typed \
      | LC_ALL=C sort | xargs cat
    echo "$BASE $COMMIT $VERSION"; } | sha256sum | cut -c1-16
}

if [ "${1:-}" = "--print-env" ]; then  # for the image test: where the image is
  printf 'IMAGE_REF=%s\nIMAGE_ROOT=%s\nIMAGE_RUNROOT=%s\nIMAGE_ARCHIVE=%s\n' \
    "$NAME:$VERSION" "$CACHE/storage" "$CACHE/run" "$ROOT/$OUT"
  exit 0
fi
start=$(date +%s)
need_tools
mkdir -p "$CACHE"
digest=$(inputs_digest)
if [ -f "$OUT" ] && [ "$(cat "$OUT.inputs" 2>/dev/null)" = "$digest" ] \
   && bah inspect --type image "$NAME:$VERSION" >/dev/null 2>&1; then
  log "$OUT is up to date (inputs $digest)"
  echo "$OUT"
  exit 0
fi
make_base
build
prune_store
echo "$digest" > "$OUT.inputs"
log "done in $(( $(date +%s) - start ))s"
echo "$OUT"

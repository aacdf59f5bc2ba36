#!/bin/sh
# Run syft (Anchore's SBOM generator), building it on first use from its Go module with
# `go install` (the Go module proxy; no prebuilt binary is downloaded) into the project's
# cache. Order: $SYFT, the cache, then build. A pinned version, so an SBOM is reproducible
# by the same tool.
#   hack/syft.sh scan oci-archive:dist/IMAGE.oci.tar -o spdx-json=dist/IMAGE.spdx.json
#   hack/syft.sh --path                  (print the binary's path only)
set -eu

VERSION=${SYFT_VERSION:-v1.57.1}
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/service-serving-signer/tools/syft-$VERSION"
CACHED="$CACHE/syft"

if [ -n "${SYFT:-}" ] && [ -x "$SYFT" ]; then
    bin=$SYFT
elif [ -x "$CACHED" ]; then
    bin=$CACHED
else
    command -v go >/dev/null 2>&1 || { echo "syft: not found and no Go toolchain to build it; set SYFT" >&2; exit 1; }
    echo "syft: building github.com/anchore/syft/cmd/syft@$VERSION into $CACHE (one time, a few minutes)" >&2
    mkdir -p "$CACHE"
    # The version stamp syft prints and writes into every SBOM's creator field.
    CGO_ENABLED=0 GOBIN="$CACHE/bin.partial" go install -trimpath \
        -ldflags "-s -w -X main.version=${VERSION#v}" "github.com/anchore/syft/cmd/syft@$VERSION"
    mv "$CACHE/bin.partial/syft" "$CACHED"
    rmdir "$CACHE/bin.partial"
    bin=$CACHED
fi
if [ "${1:-}" = "--path" ]; then
    echo "$bin"
    exit 0
fi
# No update check (no network but the registries) and no telemetry.
SYFT_CHECK_FOR_APP_UPDATE=false exec "$bin" "$@"

#!/bin/sh
# The SBOM of an image archive, made by syft (hack/syft.sh) from what the image holds:
# the Debian packages (dpkg's status database) and the Python packages (the venv's
# *.dist-info), with their versions, licenses and purls — one scan, two formats:
#   hack/sbom.sh dist/IMAGE.oci.tar OUT_PREFIX
#     -> OUT_PREFIX.spdx.json (SPDX 2.3) and OUT_PREFIX.cdx.json (CycloneDX)
set -eu
archive=$1 prefix=$2
cd "$(dirname "$0")/.."
# The SBOM names the image service-serving-signer at the package version.
hack/syft.sh scan "oci-archive:$archive" --quiet --scope squashed \
    --source-name service-serving-signer \
    --source-version "$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml)" \
    -o "spdx-json=$prefix.spdx.json" -o "cyclonedx-json=$prefix.cdx.json"

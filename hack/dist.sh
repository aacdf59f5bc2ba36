#!/usr/bin/env bash
# `make dist`: the CLI (and the controller) as a Python package, into dist/:
#   service_serving_signer-<v>-py3-none-any.whl   `pipx install` / `pip install` it
#   service_serving_signer-<v>.tar.gz             the sdist of the same files
# Built as the image builds its wheel: from the runtime packages only (pyproject's package
# list without the controlplane/ test harness, which `demo` and the tests need from a
# checkout), with setuptools and wheel from hack/build-requirements.lock (hash-pinned) in
# a build venv cached under ${XDG_CACHE_HOME:-~/.cache}/service-serving-signer/tools/, and
# the commit stamped into manager/COMMIT so `service-serving-signer version` names it
# (`-dirty` when the package sources differ from the commit). Prints the two paths.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
log() { printf '[dist %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# The runtime packages: pyproject's [tool.setuptools.packages.find] include, less the harness.
mapfile -t PACKAGES < <(python3 - <<'PY'
import tomllib
with open("pyproject.toml", "rb") as f:
    include = tomllib.load(f)["tool"]["setuptools"]["packages"]["find"]["include"]
print("\n".join(p for p in include if p.split(".")[0] != "controlplane"))
PY
)
COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain -- pyproject.toml README.md "${PACKAGES[@]}" 2>/dev/null)" ]; then
  COMMIT="$COMMIT-dirty"
fi

lock=hack/build-requirements.lock
TOOLS=${XDG_CACHE_HOME:-$HOME/.cache}/service-serving-signer/tools
BUILD_VENV=$TOOLS/build-venv-$(sha256sum "$lock" | cut -c1-12)
if [ ! -f "$BUILD_VENV/.installed" ]; then
  log "build venv (setuptools + wheel from $lock) in $BUILD_VENV"
  rm -rf "$BUILD_VENV"
  python3 -m venv "$BUILD_VENV"
  "$BUILD_VENV/bin/pip" install -q --require-hashes --no-deps --only-binary=:all: -r "$lock" >&2
  touch "$BUILD_VENV/.installed"
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp pyproject.toml README.md "$stage/"
for p in "${PACKAGES[@]}"; do
  [ -d "$p" ] || continue  # a subpackage (a.b) came with its parent
  (tar -cf - --exclude=__pycache__ --exclude='*.pyc' "$p") | tar -xf - -C "$stage"
done
printf '%s\n' "$COMMIT" > "$stage/manager/COMMIT"
mkdir -p dist
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml)
rm -f "dist/service_serving_signer-$VERSION"-*.whl "dist/service_serving_signer-$VERSION.tar.gz"
log "wheel and sdist of $VERSION (commit $COMMIT)"
# setuptools says every file it copies (~550 lines): kept in a log, shown only on failure.
build_log="$stage.log"
if ! (cd "$stage" && "$BUILD_VENV/bin/python" - "$ROOT/dist" >"$build_log" 2>&1 <<'PY'
import sys
from setuptools import build_meta

out = sys.argv[1]
print(f"{out}/{build_meta.build_sdist(out)}")
print(f"{out}/{build_meta.build_wheel(out)}")
PY
); then
  cat "$build_log" >&2
  rm -f "$build_log"
  log "building the wheel and sdist failed (its output above)"
  exit 1
fi
rm -f "$build_log"
ls "dist/service_serving_signer-$VERSION.tar.gz" "dist/service_serving_signer-$VERSION"-py3-none-any.whl

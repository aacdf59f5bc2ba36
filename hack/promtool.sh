#!/bin/sh
# Run promtool, fetching it on first use without root and without installing anything:
# `apt-get download` Debian's `prometheus` package into the cache and unpack it with
# `dpkg-deb -x`. Order: $PROMTOOL, promtool on PATH, the cache, then fetch.
#   hack/promtool.sh check rules FILE...      hack/promtool.sh test rules TEST.yaml
#   hack/promtool.sh --path                   (print the binary's path only)
set -eu

CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/service-serving-signer/promtool"
CACHED="$CACHE/usr/bin/promtool"

find_promtool() {
    if [ -n "${PROMTOOL:-}" ] && [ -x "$PROMTOOL" ]; then echo "$PROMTOOL"; return 0; fi
    if command -v promtool >/dev/null 2>&1; then command -v promtool; return 0; fi
    if [ -x "$CACHED" ]; then echo "$CACHED"; return 0; fi
    return 1
}

fetch_promtool() {
    command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 || {
        echo "promtool: not found; install promtool or set PROMTOOL (needs apt-get + dpkg-deb to fetch)" >&2
        return 1
    }
    mkdir -p "$CACHE"
    tmp=$(mktemp -d "$CACHE/fetch.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    echo "promtool: fetching Debian's prometheus package into $CACHE (one time, ~20 MB)" >&2
    (cd "$tmp" && apt-get download -q prometheus >/dev/null 2>"$tmp/apt.err") || {
        # Package lists may be missing on a fresh machine: fetch them into a private
        # state directory (no root, no lock on the system's lists), then retry.
        apt_opts="-qq -o Dir::State::Lists=$CACHE/apt/lists -o Dir::Cache=$CACHE/apt/cache -o Debug::NoLocking=1"
        mkdir -p "$CACHE/apt/lists/partial" "$CACHE/apt/cache/archives/partial"
        # shellcheck disable=SC2086
        (cd "$tmp" && apt-get $apt_opts update >"$tmp/apt.err" 2>&1 \
            && apt-get $apt_opts download prometheus >>"$tmp/apt.err" 2>&1) || {
            cat "$tmp/apt.err" >&2
            echo "promtool: apt-get download failed; install promtool or set PROMTOOL" >&2
            return 1
        }
    }
    dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/root"
    mkdir -p "$CACHE/usr/bin"
    mv "$tmp/root/usr/bin/promtool" "$CACHED.partial"
    mv "$CACHED.partial" "$CACHED"
    rm -rf "$tmp"
    trap - EXIT
}

bin=$(find_promtool) || { fetch_promtool; bin="$CACHED"; }
if [ "${1:-}" = "--path" ]; then
    echo "$bin"
    exit 0
fi
exec "$bin" "$@"

"""Where the control-plane binaries come from: found, or built from Go modules and cached.

Search order (controller-runtime envtest's, so existing setup-envtest users just point at
their binaries): `TEST_ASSET_<NAME>`, `$KUBEBUILDER_ASSETS/<name>`, the project cache
`${XDG_CACHE_HOME:-~/.cache}/service-serving-signer/controlplane/<k8s-version>/`. When a
binary is absent it is built there by `build-binaries.sh` from Go modules (`CGO_ENABLED=0`,
Go toolchain `GO_TOOLCHAIN` unless `GOTOOLCHAIN` is set: Kubernetes 1.38's go.mod says
`go 1.27.0`, so the go command fetches go1.27.3 from the module proxy once, ~76 MB, and
builds every version with it); the first build takes many minutes, later runs none. If
the etcd build fails, Debian's `etcd-server` package is unpacked instead; kube-apiserver
has no fallback and fails loudly.

Versions: `KUBERNETES_VERSION` (1.37) is the plane every test uses. `NEXT_VERSION` (1.38
as it ships: v1.38.0 — later its newest patch — once the Go module proxy serves it, else
the newest 1.38 pre-release it serves, and the build says which and why; `resolve_next`,
asked once a day — the proxy's version list and, directly, v1.38.0, its patches and
pre-releases, since a proxy's list may omit versions it serves —
`KUBERNETES_NEXT_VERSION` to pin one) and
`OLDER_VERSIONS` (1.36) are kube-apiservers the API-version-sensitive tests also run
against (`TESTED_VERSIONS`). 1.38 serves what 1.37 does plus ML-DSA key types behind
`PodCertificateMLDSA`, which `controlplane.server` turns on; 1.36 serves
PodCertificateRequest and ClusterTrustBundle as v1beta1, behind feature gates
`controlplane.server` passes. Each version has its own cache directory; one etcd
(3.7, built into the main version's directory) serves them all. `TEST_ASSET_*` and
`KUBEBUILDER_ASSETS` name binaries of the main version only: another version's binaries
come from its cache directory.

Traefik (`traefik()`, the Gateway tests' data plane) is cached in its own directory,
`.../service-serving-signer/traefik/<version>/`, or named by `TEST_ASSET_TRAEFIK`.

The node-capable cluster (`controlplane.cluster`) also needs `kube-controller-manager`
(cmd/kube-controller-manager) and `hollow-node` (a hollow kubelet built on the release's
own kubelet packages from `hollownode/`, see there): `NODE_BINARIES`, found the same way
(`TEST_ASSET_KUBE_CONTROLLER_MANAGER`, `TEST_ASSET_HOLLOW_NODE`, ...), for the main version
and for `NEXT_VERSION`. They share most packages with kube-apiserver, so once it is built
they take a few minutes more.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

KUBERNETES_VERSION = "v1.37.2"
# The next minor release (`NEXT_VERSION` below is chosen among its builds).
NEXT_MINOR = 38
# The newest 1.38 build the Go module proxy served when last checked by hand (v1.38.0,
# -rc.1, -rc.0 and -beta.1 answer 403 "not available" on 2026-12-06; GA is planned for
# 2026-12-16): the choice when the proxy cannot be asked.
NEXT_KNOWN = "v1.38.0-beta.0"
# How long the proxy's answer is reused (a file beside the version caches).
NEXT_CHECK_EVERY = 24 * 3600
# The newest 1.36 patch the Go module proxy serves (v1.36.6 answers 403 "not available").
OLDER_VERSIONS = ("v1.36.5",)
# The Go toolchain builds use unless GOTOOLCHAIN is set: Kubernetes 1.38 needs Go 1.27.
GO_TOOLCHAIN = "go1.27.3"
ETCD_VERSION = "v3.7.3"
KUSTOMIZE_VERSION = "v5.8.2"

BUILD_SCRIPT = Path(__file__).with_name("build-binaries.sh")
NODE_BINARIES = ("kube-controller-manager", "hollow-node")
# The Gateway tests' data plane (controlplane/traefik.py): the newest Traefik the Go module
# proxy can build here. v3.7.11-13 cannot: 8 of their dependencies' versions are refused by
# the proxy (lego DNS-provider SDKs, containous/go-http-auth). About 5 min cold on 2 cores.
TRAEFIK_VERSION = "v3.6.12"
# Binaries built from this repository's Go source: a cached one counts only while the
# `<name>.sha256` stamp beside it matches its source (otherwise it is rebuilt).
PROJECT_SOURCES = {"hollow-node": Path(__file__).with_name("hollownode")}
RESYNC_NODE_PREFIX = "hollow-node-resync-"
"""`hollow-node-resync-<N>`: hollownode built with a Pod resync (`SyncFrequency`) of N s
instead of its 10 s — a real kubelet's default is 60 (`hollow_node_binary`)."""


def hollow_node_binary(resync_seconds: int | None = None) -> str:
    """The hollow kubelet's binary name: hollownode's 10 s Pod resync, or `resync_seconds`."""
    if resync_seconds is None:
        return "hollow-node"
    if resync_seconds < 1:
        raise ValueError(f"a Pod resync of {resync_seconds} s")
    return f"{RESYNC_NODE_PREFIX}{resync_seconds}"


def _project_source(name: str) -> Path | None:
    if name.startswith(RESYNC_NODE_PREFIX):
        return PROJECT_SOURCES["hollow-node"]
    return PROJECT_SOURCES.get(name)


class BinaryError(RuntimeError):
    """A binary could not be found or built; the message says what to do."""


@dataclass(frozen=True)
class Binaries:
    kube_apiserver: Path
    etcd: Path


def cache_dir(version: str = KUBERNETES_VERSION) -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "service-serving-signer" / "controlplane" / version


# the next version: 1.38.0 as it ships ----------------------------------------------------

_PRE_RELEASE = re.compile(r"^v1\.(\d+)\.0-(alpha|beta|rc)\.(\d+)$")
_RELEASE = re.compile(r"^v1\.(\d+)\.(\d+)$")
_STAGES = ("alpha", "beta", "rc")


@dataclass(frozen=True)
class NextChoice:
    version: str
    why: str  # one line, printed when its binaries are built


def choose_next(served: Iterable[str], minor: int = NEXT_MINOR) -> NextChoice:
    """Among the k8s.io/kubernetes versions the Go module proxy serves: the newest
    release of `minor` (v1.38.0 on the day it ships, later its newest patch); else its
    newest pre-release (rc > beta > alpha), saying that GA is not served; else
    `NEXT_KNOWN`."""
    releases = []
    pre_releases = []
    for version in served:
        if (found := _RELEASE.match(version)) and int(found.group(1)) == minor:
            releases.append((int(found.group(2)), version))
        elif (found := _PRE_RELEASE.match(version)) and int(found.group(1)) == minor:
            pre_releases.append((_STAGES.index(found.group(2)), int(found.group(3)), version))
    if releases:
        version = max(releases)[1]
        return NextChoice(version, f"Kubernetes 1.{minor}: {version}, released")
    if pre_releases:
        version = max(pre_releases)[2]
        return NextChoice(
            version,
            f"Kubernetes 1.{minor}: v1.{minor}.0 is not served by the Go module proxy yet; "
            f"using the newest 1.{minor} pre-release it serves, {version}",
        )
    return NextChoice(
        NEXT_KNOWN,
        f"Kubernetes 1.{minor}: the Go module proxy serves no 1.{minor} build (or could not "
        f"be asked); using {NEXT_KNOWN}, the newest served when last checked",
    )


GO_PROXY_DEFAULT = "https://proxy.golang.org,direct"
# How many consecutive patch releases (or pre-releases of a stage) are asked for directly
# at most, beyond the first one missing.
_PROBE_LIMIT = 30


def goproxy() -> list[str]:
    """The module proxies the build goes through, in order: `$GOPROXY`, else `go env
    GOPROXY`, else Go's default (`direct` and `off` are not proxies to ask)."""
    value = os.environ.get("GOPROXY")
    if value is None and shutil.which("go") is not None:
        try:
            value = subprocess.run(
                ["go", "env", "GOPROXY"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
                cwd=tempfile.gettempdir(),
                env={**os.environ, "GOTOOLCHAIN": "local"},
            ).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            value = None
    entries = re.split(r"[,|]", value or GO_PROXY_DEFAULT)
    return [e.rstrip("/") for e in entries if e and e not in ("direct", "off")]


def _escape(module: str) -> str:
    """The Go module proxy protocol's case escaping (`A` → `!a`)."""
    return re.sub(r"[A-Z]", lambda m: "!" + m.group(0).lower(), module)


def _proxy_get(url: str) -> str | None:
    """The body of a 200 answer; None for any other answer (404, 410, or the 403 "not
    available" a proxy gives for a version it will not serve) or no answer."""
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return str(answer.read().decode())
    except (OSError, ValueError):  # URLError and HTTPError are OSErrors
        return None


def served_versions(module: str = "k8s.io/kubernetes", minor: int = NEXT_MINOR) -> list[str] | None:
    """The versions of `module` the first answering Go module proxy serves, as far as
    the next minor release goes: its `@v/list` — which on some proxies omits versions
    they serve (v1.36.5 and v1.37.1 answer, yet are not listed) — and, asked directly
    (`@v/<version>.info`), `v1.<minor>.0` and its patch releases, else its release
    candidates and betas, each series until the first one missing. None if no proxy
    answers."""
    for proxy in goproxy():
        base = f"{proxy}/{_escape(module)}/@v/"
        listed = _proxy_get(base + "list")
        if listed is not None:
            served = listed.split()
            return served + [v for v in _asked(base, minor, served) if v not in served]
    return None


def _asked(base: str, minor: int, listed: list[str]) -> list[str]:
    """The next minor's builds the proxy at `base` serves, asked for directly."""

    def serves(version: str) -> bool:
        return version in listed or _proxy_get(f"{base}{version}.info") is not None

    found: list[str] = []
    if serves(f"v1.{minor}.0"):
        found.append(f"v1.{minor}.0")
        for patch in range(1, _PROBE_LIMIT):
            if not serves(f"v1.{minor}.{patch}"):
                break
            found.append(f"v1.{minor}.{patch}")
        return found
    for stage in ("rc", "beta"):
        for n in range(_PROBE_LIMIT):
            if not serves(f"v1.{minor}.0-{stage}.{n}"):
                break
            found.append(f"v1.{minor}.0-{stage}.{n}")
    return found


def resolve_next() -> NextChoice:
    """The 1.38 build to test against: `KUBERNETES_NEXT_VERSION` if set; else the Go module
    proxy's answer (`choose_next`), asked at most once a day (the answer is kept in
    `next-version.json` beside the version caches); if it cannot be asked, the last answer,
    else `NEXT_KNOWN`."""
    explicit = os.environ.get("KUBERNETES_NEXT_VERSION")
    if explicit:
        return NextChoice(explicit, f"set by KUBERNETES_NEXT_VERSION: {explicit}")
    record = cache_dir().parent / "next-version.json"
    kept: NextChoice | None = None
    try:
        data = json.loads(record.read_text())
        kept = NextChoice(str(data["version"]), str(data["why"]))
        if time.time() - record.stat().st_mtime < NEXT_CHECK_EVERY:
            return kept
    except (OSError, ValueError, KeyError, TypeError):
        kept = None
    served = served_versions()
    if served is None:
        return kept or choose_next(())
    choice = choose_next(served)
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        partial = record.with_name(f".{record.name}.{os.getpid()}")
        partial.write_text(json.dumps({"version": choice.version, "why": choice.why}) + "\n")
        partial.replace(record)  # atomic: a concurrent reader sees the old or the new
    except OSError:
        pass
    return choice


def _env_name(name: str) -> str:
    return "TEST_ASSET_" + "".join(c if c.isalnum() else "_" for c in name.upper())


def find(name: str, version: str = KUBERNETES_VERSION) -> Path | None:
    if version == KUBERNETES_VERSION:
        explicit = os.environ.get(_env_name(name))
        if explicit:
            return Path(explicit)
        assets = os.environ.get("KUBEBUILDER_ASSETS")
        if assets and (Path(assets) / name).is_file():
            return Path(assets) / name
    cached = cache_dir(version) / name
    if cached.is_file() and os.access(cached, os.X_OK) and _up_to_date(name, version):
        return cached
    return None


def source_digest(name: str) -> str | None:
    """SHA-256 over the paths and contents of a project-built binary's source directory
    (None for upstream binaries)."""
    source = _project_source(name)
    if source is None:
        return None
    digest = hashlib.sha256()
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(source)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _stamp(name: str, version: str) -> Path:
    return cache_dir(version) / f"{name}.sha256"


def _up_to_date(name: str, version: str) -> bool:
    digest = source_digest(name)
    if digest is None:
        return True
    stamp = _stamp(name, version)
    return stamp.is_file() and stamp.read_text().strip() == digest


def missing(names: tuple[str, ...], version: str = KUBERNETES_VERSION) -> list[str]:
    """Which of `names` would have to be built (etcd is looked up in the main version's
    directory, as `ensure` does)."""
    return [n for n in names if find(n, KUBERNETES_VERSION if n == "etcd" else version) is None]


def build(names: list[str], version: str = KUBERNETES_VERSION) -> None:
    """Build the named binaries into the cache, printing progress to stderr."""
    if shutil.which("go") is None:
        raise BinaryError(
            f"cannot build {', '.join(names)}: `go` is not on PATH; install Go >= 1.21 (it "
            f"fetches {GO_TOOLCHAIN} itself) or set "
            "KUBEBUILDER_ASSETS to a directory with kube-apiserver and etcd"
        )
    out = cache_dir(version)
    if version == NEXT_VERSION:
        print(f"[controlplane] {NEXT.why}", file=sys.stderr, flush=True)
    print(
        f"[controlplane] building {', '.join(names)} {version} from Go modules into {out}; "
        "the first build takes about 6-8 minutes on 2 cores, later runs reuse the cache",
        file=sys.stderr,
        flush=True,
    )
    started = time.monotonic()
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT), str(out), version, ETCD_VERSION, KUSTOMIZE_VERSION, *names],
        check=False,
        env=build_env(stale=[n for n in names if not _up_to_date(n, version)]),
    )
    if result.returncode != 0:
        raise BinaryError(f"building {', '.join(names)} failed (exit {result.returncode})")
    for name in names:
        digest = source_digest(name)
        if digest is not None:
            _stamp(name, version).write_text(digest + "\n")
    print(
        f"[controlplane] built {', '.join(names)} in {time.monotonic() - started:.0f}s",
        file=sys.stderr,
        flush=True,
    )


def build_env(stale: list[str] | None = None) -> dict[str, str]:
    """The build's environment: the caller's, with `GOTOOLCHAIN` defaulting to
    `GO_TOOLCHAIN`, and `REBUILD` naming the `stale` binaries (built from older source:
    build-binaries.sh replaces them instead of keeping them)."""
    env = dict(os.environ)
    env.setdefault("GOTOOLCHAIN", GO_TOOLCHAIN)
    env["REBUILD"] = " ".join(stale or ())
    return env


def _debian_etcd(version: str) -> Path:
    """Unpack Debian's etcd-server (no root needed) as the last-resort etcd."""
    target = cache_dir(version) / "debian-etcd"
    binary = target / "usr" / "bin" / "etcd"
    if binary.is_file():
        return binary
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["apt-get", "download", "etcd-server"], cwd=tmp, check=True)
        deb = next(Path(tmp).glob("etcd-server_*.deb"))
        subprocess.run(["dpkg-deb", "-x", str(deb), str(target)], check=True)
    return binary


def ensure(version: str = KUBERNETES_VERSION, *, extra: tuple[str, ...] = ()) -> Binaries:
    """Find kube-apiserver of `version` and etcd (and any `extra` tools of `version`),
    building what is missing."""
    if find("etcd") is None:
        try:
            build(["etcd"])
        except BinaryError as err:
            print(f"[controlplane] {err}; using Debian's etcd-server", file=sys.stderr)
            _debian_etcd(KUBERNETES_VERSION)
    missing = [n for n in ("kube-apiserver", *extra) if find(n, version) is None]
    if missing:
        build(missing, version)
    apiserver = find("kube-apiserver", version)
    etcd = find("etcd") or _debian_etcd(KUBERNETES_VERSION)
    if apiserver is None:
        raise BinaryError("kube-apiserver is missing after the build; see the build output")
    return Binaries(kube_apiserver=apiserver, etcd=etcd)


def tool(name: str, version: str = KUBERNETES_VERSION) -> Path:
    """A helper tool built the same way (e.g. `kustomize`)."""
    found = find(name, version)
    if found is None:
        build([name], version)
        found = find(name, version)
    if found is None:
        raise BinaryError(f"{name} is missing after the build")
    return found


def traefik_dir(version: str = TRAEFIK_VERSION) -> Path:
    """Traefik's own cache directory (it is not a Kubernetes version's tool)."""
    return cache_dir(version).parent.parent / "traefik" / version


def traefik(version: str = TRAEFIK_VERSION) -> Path:
    """Traefik (`TEST_ASSET_TRAEFIK`, else the cache), built there from its module source
    when absent — inside a copy of the module directory, as its `replace` directives need."""
    explicit = os.environ.get(_env_name("traefik"))
    if explicit:
        return Path(explicit)
    binary = traefik_dir(version) / "traefik"
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        if shutil.which("go") is None:
            raise BinaryError(
                "cannot build traefik: `go` is not on PATH (or set TEST_ASSET_TRAEFIK)"
            )
        print(
            f"[controlplane] building traefik {version} from its Go module into "
            f"{binary.parent}; about 5 minutes cold on 2 cores",
            file=sys.stderr,
            flush=True,
        )
        started = time.monotonic()
        result = subprocess.run(
            [
                "bash",
                str(BUILD_SCRIPT),
                str(binary.parent),
                KUBERNETES_VERSION,
                ETCD_VERSION,
                KUSTOMIZE_VERSION,
                "traefik",
            ],
            env={**build_env(), "TRAEFIK_VERSION": version},
            check=False,
        )
        if result.returncode != 0:
            raise BinaryError(f"building traefik {version} failed (exit {result.returncode})")
        print(
            f"[controlplane] built traefik in {time.monotonic() - started:.0f}s",
            file=sys.stderr,
            flush=True,
        )
    return binary


# Chosen once per process, when the module is imported (what it reads is defined above).
NEXT = resolve_next()
# The 1.38 build every 1.38 test uses (`resolve_next`).
NEXT_VERSION = NEXT.version
# The kube-apiservers the version-sensitive tests run on, the main version first.
TESTED_VERSIONS = (KUBERNETES_VERSION, NEXT_VERSION, *OLDER_VERSIONS)


def main() -> None:
    """`python -m controlplane.binaries`: find or build everything (the node-capable
    cluster's binaries of the main and the next version, and the other kube-apiservers, so
    `make test` builds them once up front), print the main version's directory."""
    bins = ensure(extra=("kustomize", *NODE_BINARIES))
    ensure(NEXT_VERSION, extra=NODE_BINARIES)
    for version in OLDER_VERSIONS:
        ensure(version)
    traefik()
    print(bins.kube_apiserver.parent)


if __name__ == "__main__":
    main()

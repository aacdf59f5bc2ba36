"""Gateway API's CRDs on the test control plane, from the Go module.

The CRDs come from the `sigs.k8s.io/gateway-api` module (`config/crd/<channel>/`, the
files its release's `<channel>-install.yaml` concatenates), fetched with `go mod download`
into the machine's module cache — the same `go` and cache the control-plane build uses,
so a cold CI run fetches each version once (~1 MiB) and later runs read the cache. They
are read from the module's zip: v1.7.0's go.mod asks for Go 1.27, so `go mod download`
with the machine's Go 1.26 (`GOTOOLCHAIN=local`) fetches and verifies the zip but refuses
to unpack it, and nothing here compiles the module.

Two bundles are used: `GATEWAY_API_VERSION` standard (the ConfigMap reference every
conformant implementation supports) and `EXPERIMENTAL_VERSION` experimental (GEP-5075's
ClusterTrustBundle references, and the TCPRoute/TLSRoute kinds that Traefik's
experimental channel watches). One cluster holds one copy of each CRD: `install` replaces
a CRD of another bundle (version or channel) by the one asked for, so a session that
needs the experimental channel gets it whatever ran before; the experimental bundle
serves every version the standard one does. The release's ValidatingAdmissionPolicy
(`vap_safeupgrades`, which refuses a downgrade to experimental CRDs) is not installed: it
guards upgrades, and the tests only create objects.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import zipfile
from pathlib import Path
from typing import Any

import yaml

from kube.client import Client, is_already_exists

GATEWAY_API_MODULE = "sigs.k8s.io/gateway-api"
GATEWAY_API_VERSION = "v1.6.3"
EXPERIMENTAL_VERSION = "v1.7.0"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
BUNDLE_ANNOTATION = "gateway.networking.k8s.io/bundle-version"
CHANNEL_ANNOTATION = "gateway.networking.k8s.io/channel"


def module_zip(version: str = GATEWAY_API_VERSION) -> Path:
    """The module's zip in the Go module cache (downloaded if absent)."""
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"}
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{GATEWAY_API_MODULE}@{version}"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=Path.home(),
    )
    try:
        found = json.loads(out.stdout)
    except ValueError:
        found = {}
    zipped = found.get("Zip")
    if not zipped or not Path(zipped).is_file():
        raise RuntimeError(f"go mod download {GATEWAY_API_MODULE}@{version}: {out.stderr}")
    return Path(zipped)


def crds(version: str = GATEWAY_API_VERSION, channel: str = "standard") -> list[dict[str, Any]]:
    """Every CustomResourceDefinition of `channel` ("standard" or "experimental")."""
    prefix = f"{GATEWAY_API_MODULE}@{version}/config/crd/{channel}/"
    found = []
    with zipfile.ZipFile(module_zip(version)) as archive:
        for name in sorted(archive.namelist()):
            if not (name.startswith(prefix) and name.endswith(".yaml")):
                continue
            for doc in yaml.safe_load_all(archive.read(name)):
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    found.append(doc)
    if not found:
        raise RuntimeError(f"no CRDs under {prefix}")
    return found


def standard_crds(version: str = GATEWAY_API_VERSION) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition of the standard channel."""
    return crds(version, "standard")


def install(
    client: Client,
    version: str = GATEWAY_API_VERSION,
    timeout: float = 60.0,
    *,
    channel: str = "standard",
) -> None:
    """Create the CRDs of `version`/`channel`, replace those of another bundle, and wait
    until each is Established. A standard install where the experimental bundle is
    already in place keeps it (a superset)."""
    names = []
    for crd in crds(version, channel):
        name = crd["metadata"]["name"]
        names.append(name)
        try:
            client.create(CRD_PATH, crd)
            continue
        except Exception as err:
            if not is_already_exists(err):
                raise
        current = client.get(f"{CRD_PATH}/{name}")
        if channel == "standard" or _bundle(current) == _bundle(crd):
            continue
        replacement = {**crd, "metadata": {**crd["metadata"]}}
        replacement["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        client.replace(f"{CRD_PATH}/{name}", replacement)
    deadline = time.monotonic() + timeout
    for name in names:
        while not _established(client.get(f"{CRD_PATH}/{name}")):
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout}s")
            time.sleep(0.2)


def _bundle(crd: dict[str, Any]) -> tuple[str | None, str | None]:
    annotations = (crd.get("metadata") or {}).get("annotations") or {}
    return annotations.get(BUNDLE_ANNOTATION), annotations.get(CHANNEL_ANNOTATION)


def _established(crd: dict[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

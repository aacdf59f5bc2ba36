"""Gateway API's standard-channel CRDs on the test control plane, from the Go module.

The CRDs come from the `sigs.k8s.io/gateway-api` module at `GATEWAY_API_VERSION`
(`config/crd/standard/`, the files its release's `standard-install.yaml` concatenates),
fetched with `go mod download` into the machine's module cache — the same `go` and cache
the control-plane build uses, so a cold CI run fetches it once (~1 MiB) and later runs
read the cache. The release's ValidatingAdmissionPolicy (`vap_safeupgrades`, which
refuses a downgrade to experimental CRDs) is not installed: it guards upgrades, and
the tests only create objects.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from kube.client import Client, is_already_exists

GATEWAY_API_MODULE = "sigs.k8s.io/gateway-api"
GATEWAY_API_VERSION = "v1.6.3"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def module_dir(version: str = GATEWAY_API_VERSION) -> Path:
    """The module's directory in the Go module cache (downloaded if absent)."""
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"}
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{GATEWAY_API_MODULE}@{version}"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=Path.home(),
    )
    if out.returncode != 0:
        raise RuntimeError(f"go mod download {GATEWAY_API_MODULE}@{version}: {out.stderr}")
    return Path(json.loads(out.stdout)["Dir"])


def standard_crds(version: str = GATEWAY_API_VERSION) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition of the standard channel."""
    crds = []
    for path in sorted((module_dir(version) / "config" / "crd" / "standard").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                crds.append(doc)
    return crds


def install(client: Client, version: str = GATEWAY_API_VERSION, timeout: float = 60.0) -> None:
    """Create the standard-channel CRDs (idempotent) and wait until each is Established."""
    names = []
    for crd in standard_crds(version):
        names.append(crd["metadata"]["name"])
        try:
            client.create(CRD_PATH, crd)
        except Exception as err:
            if not is_already_exists(err):
                raise
    deadline = time.monotonic() + timeout
    for name in names:
        while not _established(client.get(f"{CRD_PATH}/{name}")):
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout}s")
            time.sleep(0.2)


def _established(crd: dict[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

"""The release's SBOM lists what the image actually contains: hack/sbom.sh
(syft) scans the image archive `make image` wrote, and every Debian package dpkg knows
in a container of that image, and every Python distribution (`*.dist-info`) on its
filesystem, is in the SPDX and the CycloneDX document with the same version — and the
SBOM claims no Python package the image does not hold. The image's OCI labels name the
version, the commit and the base."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from tests.integration.image_harness import ROOT, Image, built_image

pytestmark = pytest.mark.timeout(1800)

# Run inside the image: every *.dist-info on its filesystem (venv and system; not the
# kernel's /proc, /sys, /dev or /run, and no symlink followed), as JSON.
LIST_PYTHON = """
import email.parser, json, os
found = {}
for top, dirs, files in os.walk("/"):
    if top == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev", "run")]
    if top.endswith(".dist-info") and "METADATA" in files:
        text = open(os.path.join(top, "METADATA"), encoding="utf-8").read()
        msg = email.parser.Parser().parsestr(text, headersonly=True)
        found[msg["Name"]] = msg["Version"]
print(json.dumps(found))
"""


def normal(name: str) -> str:
    """PEP 503 normalisation: purls and METADATA spell names differently."""
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def image() -> Image:
    return built_image()


@pytest.fixture(scope="module")
def contents(image: Image) -> dict[str, dict[str, str]]:
    """{"deb": {package: version}, "pypi": {normalised name: version}}, read in a
    container of the image with its own dpkg and python."""
    container = image.container()
    try:
        dpkg = image.run(container, ["dpkg-query", "-W", "-f", "${Package} ${Version}\\n"])
        assert dpkg.returncode == 0, dpkg.stderr
        python = image.run(container, ["python3", "-c", LIST_PYTHON])
        assert python.returncode == 0, python.stderr
    finally:
        subprocess.run([*image.buildah, "rm", container], capture_output=True, check=False)
    debs = dict(line.split(" ", 1) for line in dpkg.stdout.splitlines() if line.strip())
    dists = {normal(k): v for k, v in json.loads(python.stdout).items()}
    assert "python3" in debs and "libc6" in debs
    assert {"service-serving-signer", "kubernetes", "cryptography"} <= set(dists)
    return {"deb": debs, "pypi": dists}


@pytest.fixture(scope="module")
def sbom(image: Image, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    prefix = tmp_path_factory.mktemp("sbom") / "image"
    result = subprocess.run(
        [str(ROOT / "hack" / "sbom.sh"), str(image.archive), str(prefix)],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return {
        "spdx": json.loads(Path(f"{prefix}.spdx.json").read_text()),
        "cdx": json.loads(Path(f"{prefix}.cdx.json").read_text()),
    }


def purls(kind: str, entries: list[str]) -> dict[str, str]:
    """{name: version} of the `pkg:<kind>/…` purls (deb names carry a namespace)."""
    out = {}
    for purl in entries:
        match = re.match(rf"pkg:{kind}/(?:[^/]+/)?([^@/]+)@([^?#]+)", purl)
        if match:
            name = unquote(match.group(1))  # `libstdc%2B%2B6`
            out[normal(name) if kind == "pypi" else name] = unquote(match.group(2))
    return out


def spdx_purls(doc: dict[str, Any]) -> list[str]:
    return [
        ref["referenceLocator"]
        for package in doc["packages"]
        for ref in package.get("externalRefs", [])
        if ref.get("referenceType") == "purl"
    ]


def cdx_purls(doc: dict[str, Any]) -> list[str]:
    return [c["purl"] for c in doc.get("components", []) if c.get("purl")]


@pytest.mark.parametrize("document", ["spdx", "cdx"])
def test_the_sbom_lists_every_debian_package_of_the_image_at_its_version(
    contents: dict[str, dict[str, str]], sbom: dict[str, Any], document: str
) -> None:
    listed = purls("deb", (spdx_purls if document == "spdx" else cdx_purls)(sbom[document]))
    missing = {p: v for p, v in contents["deb"].items() if listed.get(p) != v}
    assert not missing, f"{document}: Debian packages absent or at another version: {missing}"


@pytest.mark.parametrize("document", ["spdx", "cdx"])
def test_the_sbom_lists_exactly_the_python_packages_of_the_image(
    contents: dict[str, dict[str, str]], sbom: dict[str, Any], document: str
) -> None:
    listed = purls("pypi", (spdx_purls if document == "spdx" else cdx_purls)(sbom[document]))
    assert listed == contents["pypi"]


def test_the_sbom_is_spdx_2_3_and_cyclonedx_made_by_syft(sbom: dict[str, Any]) -> None:
    spdx, cdx = sbom["spdx"], sbom["cdx"]
    assert spdx["spdxVersion"] == "SPDX-2.3"
    assert any(c.startswith("Tool: syft-") for c in spdx["creationInfo"]["creators"])
    assert cdx["bomFormat"] == "CycloneDX"
    tools = cdx["metadata"]["tools"]
    names = [t["name"] for t in tools.get("components", tools if isinstance(tools, list) else [])]
    assert "syft" in names


def test_the_image_labels_name_version_commit_and_base(image: Image) -> None:
    labels = image.config()["Labels"]
    version = re.search(r'^version = "(.*)"$', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert version is not None
    assert labels["org.opencontainers.image.version"] == version.group(1)
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", labels["org.opencontainers.image.revision"])
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", labels["org.opencontainers.image.created"]
    )
    assert labels["org.opencontainers.image.base.name"].startswith("docker.io/library/debian:")
    assert labels["org.opencontainers.image.source"].startswith("https://")
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"

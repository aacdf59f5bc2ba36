"""Documented shell blocks, read from the docs and run as written.

`sh_blocks(page, heading)` reads the ```sh blocks under a heading of a page, so a test
runs what the page says and the two cannot drift. `Shell` runs such a script with bash
(`set -euo pipefail`) in a directory holding copies of config/ and charts/ (a documented
relative path such as `config/managed` resolves as in a checkout, and files a block
writes, such as `ca/ca.key`, stay out of the checkout), with the cluster in
`$KUBECONFIG`, the real kubectl and helm on PATH, and `service-serving-signer` being the
CLI of this checkout.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from controlplane.binaries import tool
from controlplane.cluster import Cluster

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def section(page: Path, heading: str) -> str:
    """The text under `heading` up to the next heading of the same or a higher level."""
    text = page.read_text()
    level = heading.split(" ", 1)[0]
    start = text.index(f"\n{heading}\n")
    following = re.compile(rf"\n#{{1,{len(level)}}} ")
    end = following.search(text, start + 1)
    return text[start : end.start() if end else len(text)]


def sh_blocks(page: Path, heading: str) -> list[str]:
    """Every ```sh block under `heading` of `page`, in order."""
    blocks = re.findall(r"```sh\n(.*?)```", section(page, heading), re.S)
    assert blocks, f"{page.name}: no sh block under {heading!r}"
    return [str(b) for b in blocks]


def sh_block_with(page: Path, heading: str, text: str) -> str:
    """The one ```sh block under `heading` that contains `text`."""
    found = [b for b in sh_blocks(page, heading) if text in b]
    assert len(found) == 1, f"{page.name} {heading!r}: {len(found)} sh blocks hold {text!r}"
    return found[0]


class Shell:
    """Where documented commands run (see the module docstring)."""

    def __init__(self, cluster: Cluster, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for tree in ("config", "charts"):
            if not (directory / tree).exists():
                # Symlinks kept as links: the chart's files/ point into ../../../config.
                shutil.copytree(ROOT / tree, directory / tree, symlinks=True)
        self.directory = directory
        tools = os.pathsep.join(str(tool(name).parent) for name in ("kubectl", "helm"))
        self.env = {
            **os.environ,
            "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
            "KUBECONFIG": str(cluster.plane.kubeconfig),
            "HELM_CACHE_HOME": "/tmp/helm-cache",
        }

    def run(self, script: str, *, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run `script`; a failing command fails the run (its output in the message)."""
        cli = shlex.join([sys.executable, "-m", "cli"])
        preamble = f'set -euo pipefail\nservice-serving-signer() {{ {cli} "$@"; }}\n'
        done = subprocess.run(
            ["bash", "-c", preamble + script],
            cwd=self.directory,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert done.returncode == 0, (
            f"exit {done.returncode}:\n{script}\n--- stdout\n{done.stdout}"
            f"\n--- stderr\n{done.stderr}"
        )
        return done

"""The shipped image for the integration tests: `make image`'s OCI image in
hack/image.sh's private buildah store, built (or found up to date) and run with buildah."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
UID = GID = 65532


class Image:
    """The image in hack/image.sh's private buildah store."""

    def __init__(self) -> None:
        env = subprocess.run(
            ["bash", str(ROOT / "hack" / "image.sh"), "--print-env"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        values = dict(line.split("=", 1) for line in env.splitlines() if "=" in line)
        self.ref = values["IMAGE_REF"]
        self.archive = Path(values["IMAGE_ARCHIVE"])
        self.buildah = [
            "buildah",
            "--root",
            values["IMAGE_ROOT"],
            "--runroot",
            values["IMAGE_RUNROOT"],
            "--storage-driver",
            "vfs",
        ]

    def config(self) -> dict[str, Any]:
        out = subprocess.run(
            [*self.buildah, "inspect", "--type", "image", self.ref],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        config: dict[str, Any] = json.loads(out)["OCIv1"]["config"]
        return config

    def container(self) -> str:
        return subprocess.run(
            [*self.buildah, "from", "--pull=never", self.ref],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    def run(self, container: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
        """Run a short command in the container. Under heavy load buildah's chroot runner
        now and then exits before copying a fast child's output; such an empty answer is
        retried (a real failure prints something or exits non-zero every time)."""
        for _ in range(3):
            result = subprocess.run(
                self.run_argv(container, argv),
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            if result.stdout or result.stderr:
                return result
        return result

    def rootfs(self, container: str) -> Path:
        """The container's root directory (vfs: a plain directory; `buildah mount`)."""
        return Path(
            subprocess.run(
                [*self.buildah, "mount", container], capture_output=True, text=True, check=True
            ).stdout.strip()
        )

    def files(self, container: str) -> list[str]:
        """Every path of the container's root filesystem."""
        root = self.rootfs(container)
        try:
            return [
                "/" + os.path.relpath(os.path.join(d, n), root)
                for d, dirs, names in os.walk(root)
                for n in [*dirs, *names]
            ]
        finally:
            subprocess.run([*self.buildah, "umount", container], capture_output=True, check=False)

    def remove(self, container: str) -> None:
        subprocess.run([*self.buildah, "rm", container], capture_output=True, check=False)

    def run_argv(
        self,
        container: str,
        argv: list[str],
        *,
        user: str = f"{UID}:{GID}",
        volumes: Sequence[tuple[Path, str, bool]] = (),
        env: dict[str, str] | None = None,
        cap_drop: Sequence[str] = (),
    ) -> list[str]:
        """`buildah run` of `argv`; `volumes`: (host directory, container path, read-only)."""
        cmd = [*self.buildah, "run", "--isolation", "chroot", "--user", user]
        for src, dst, read_only in volumes:
            cmd += ["--volume", f"{src}:{dst}" + (":ro" if read_only else "")]
        for key, value in (env or {}).items():
            cmd += ["--env", f"{key}={value}"]
        for cap in cap_drop:
            cmd += ["--cap-drop", cap]
        return [*cmd, container, "--", *argv]


def built_image() -> Image:
    """hack/image.sh builds the image, or finds it up to date."""
    build = subprocess.run(
        ["bash", str(ROOT / "hack" / "image.sh")], capture_output=True, text=True, check=False
    )
    assert build.returncode == 0, build.stderr[-4000:]
    return Image()

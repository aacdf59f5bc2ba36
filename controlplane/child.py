"""A child process of the local control plane that is not kube-apiserver or etcd
(kube-controller-manager, a hollow kubelet).

Decides how such a child runs: its output appended to its own log file; started, then
polled every 0.2 s until `ready(client)` holds with an admin client of the plane, for at
most `START_TIMEOUT` (an early exit fails at once, with the log's tail); stopped with
SIGTERM (SIGKILL after 20 s)."""

from __future__ import annotations

import subprocess
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import IO, Any

from controlplane.server import START_TIMEOUT, ControlPlane, ControlPlaneError, terminate


class ChildProcess(ABC):
    """`what` names the child in errors; subclasses say how it runs and when it is ready."""

    what: str

    def __init__(self, plane: ControlPlane, log_path: Path) -> None:
        self.plane = plane
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @abstractmethod
    def args(self) -> list[str]: ...

    @abstractmethod
    def ready(self, client: Any) -> bool: ...

    def env(self) -> dict[str, str] | None:
        """The child's environment; None inherits ours."""
        return None

    def _launch(self) -> None:
        self._log = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            self.args(), stdout=self._log, stderr=subprocess.STDOUT, env=self.env()
        )
        client = self.plane.client()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ControlPlaneError(
                    f"{self.what} exited with {self._proc.returncode}:\n{self.tail()}"
                )
            if self.ready(client):
                return
            time.sleep(0.2)
        raise ControlPlaneError(f"{self.what} not ready after {START_TIMEOUT:.0f}s:\n{self.tail()}")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        terminate(self._proc)
        self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

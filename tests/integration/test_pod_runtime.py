"""The Pod runtime stand-in (pod_runtime.Runtime) tells a signer that exited on its own
from one stopped with its Pod: only a signer still running when its Pod is deleted is
stopped and counted among the Pod's exits; one that had already exited (started before
its volume files were written, say) is a restart, even when its Pod is deleted before the
next round would start it again."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from tests.integration.pod_runtime import Runtime


class Exited:
    """A signer process that exited on its own with status 1."""

    def alive(self) -> bool:
        return False

    def stop(self) -> int:
        return 1


class Running:
    """A signer process that exits 0 on SIGTERM."""

    def alive(self) -> bool:
        return True

    def stop(self) -> int:
        return 0


class Pods:
    """The API server's Pods, each being deleted and held by the runtime's finalizer."""

    def __init__(self, *uids: str) -> None:
        self.items = [
            {
                "metadata": {
                    "uid": uid,
                    "name": f"pod-{uid}",
                    "deletionTimestamp": "2026-01-01T00:00:00Z",
                    "finalizers": ["test.service-serving-signer/container-running"],
                }
            }
            for uid in uids
        ]
        self.released: list[str] = []

    def get(self, path: str, params: object = None) -> dict[str, Any]:
        return {"items": self.items}

    def patch(self, path: str, body: object) -> None:
        self.released.append(path.rsplit("/", 1)[1])


def test_a_signer_that_exited_before_its_pod_was_deleted_is_a_restart_not_its_exit(
    tmp_path: Path,
) -> None:
    pods = Pods("a", "b")
    runtime = Runtime(cast(Any, None), cast(Any, pods), tmp_path)
    runtime.signers = cast(Any, {"a": Exited(), "b": Running()})

    runtime.sync()

    assert runtime.exits == [("pod-b", 0)]
    assert runtime.restarts == 1
    assert runtime.clean_exits()
    assert sorted(pods.released) == ["pod-a", "pod-b"]

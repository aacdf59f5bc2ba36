"""Connection liveness against the real API server (docs/reference.md §6):
when every established connection goes silent without closing — a NAT or load balancer
dropping its state, a partitioned server — the signer notices by itself and carries on
over fresh connections. A `FreezingProxy` between signer and kube-apiserver stops
forwarding on its open connections while accepting new ones; the kernel behind it keeps
ACKing, so only the read timeouts (the bookmark-derived watch timeout, the request
timeout) can tell."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane import ControlPlane
from kube.client import ApiError, Client
from kube.informer import WATCH_READ_TIMEOUT
from tests.integration.freezing_proxy import FreezingProxy
from tests.integration.signer_harness import RunningSigner, condition, wait_terminal

# Far below what the signer took before (the watch read timeout was timeoutSeconds + 30,
# 330-630 s), far above what it needs now (about WATCH_READ_TIMEOUT); the machine is slow.
ISSUE_BOUND = 150.0


@pytest.fixture
def proxy(control_plane: ControlPlane) -> Iterator[FreezingProxy]:
    port = int(control_plane.host.rsplit(":", 1)[1])
    running = FreezingProxy("127.0.0.1", port).start()
    yield running
    running.close()


def proxied_client(control_plane: ControlPlane, proxy: FreezingProxy, tmp_path: Path) -> Client:
    config: dict[str, Any] = control_plane.kubeconfig_for()
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    return Client.from_kubeconfig(str(path), qps=0, burst=1000)


def test_request_created_after_every_connection_went_silent_is_issued(
    control_plane: ControlPlane,
    proxy: FreezingProxy,
    client: Client,
    namespace: str,
    tmp_path: Path,
    record_property: Any,
) -> None:
    with RunningSigner(proxied_client(control_plane, proxy, tmp_path)) as signer:
        kubelet = signer.kubelet.__class__(client, signer.signer_name)
        pod = kubelet.create_pod("web-0", namespace, labels={"app": "web"})
        kubelet.create_service("web", namespace, selector={"app": "web"})
        warm, _ = kubelet.create_pcr(pod, annotations={"kubernetes.io/service-names": "web"})
        assert condition(wait_terminal(client, warm))["type"] == "Issued"

        assert proxy.freeze() >= 3  # at least the three watches
        silent_at = time.monotonic()
        created, _ = kubelet.create_pcr(pod, annotations={"kubernetes.io/service-names": "web"})

        stored = wait_terminal(client, created, timeout=ISSUE_BOUND)
        seconds = time.monotonic() - silent_at
        record_property("silent_to_issued_seconds", round(seconds, 1))
        print(f"\nconnections silent -> Issued: {seconds:.1f} s")
        assert condition(stored)["type"] == "Issued"
        assert seconds >= WATCH_READ_TIMEOUT * 0.5, "the watch cannot have seen it sooner"


def all_at_once(call: Callable[[int], object], n: int = 4) -> None:
    """`call(0)` … `call(n - 1)` on n threads released together, as busy workers make
    their requests; returns when all are done."""
    barrier = threading.Barrier(n)

    def run(i: int) -> None:
        barrier.wait(10)
        call(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)


def fill_the_pool_then_freeze(proxy: FreezingProxy, call: Callable[[int], object]) -> int:
    """Leave several idle keep-alive connections in the pool (as busy workers do), then
    silence them all; how many were dialled."""
    all_at_once(call)
    dialled = proxy.accepted
    assert dialled >= 2
    assert proxy.freeze() == dialled
    return dialled


def test_request_on_a_silent_connection_times_out_and_the_retry_dials_a_fresh_one(
    control_plane: ControlPlane, proxy: FreezingProxy, tmp_path: Path
) -> None:
    signer_client = proxied_client(control_plane, proxy, tmp_path)
    dialled = fill_the_pool_then_freeze(
        proxy, lambda _: signer_client.get("/api/v1/namespaces/default")
    )

    with pytest.raises(ApiError) as stuck:
        signer_client.get("/api/v1/namespaces/default", timeout=2.0)
    assert stuck.value.status == 0 and stuck.value.transient

    # The retries — several at once, as four workers and the event recorder make them —
    # go out on new connections, none on the other dead idle ones.
    results: list[BaseException | str] = []

    def retry(_: int) -> None:
        try:
            results.append(signer_client.get("/api/v1/namespaces/default", timeout=5.0)["kind"])
        except ApiError as err:
            results.append(err)

    all_at_once(retry)
    assert results == ["Namespace"] * 4
    assert proxy.accepted > dialled


def test_a_write_on_a_silent_connection_times_out_and_the_retry_dials_a_fresh_one(
    control_plane: ControlPlane, proxy: FreezingProxy, tmp_path: Path, namespace: str
) -> None:
    """The same for writes, which take `kube.http1`'s connections (a status PATCH)."""
    signer_client = proxied_client(control_plane, proxy, tmp_path)
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    dialled = fill_the_pool_then_freeze(
        proxy, lambda i: signer_client.create(path, {"metadata": {"name": f"warm-{i}"}})
    )

    with pytest.raises(ApiError) as stuck:
        signer_client.patch(f"{path}/warm-0", {"data": {"k": "v"}}, timeout=2.0)
    assert stuck.value.status == 0 and stuck.value.transient

    results: list[BaseException | str] = []

    def retry(i: int) -> None:
        try:
            patched = signer_client.patch(f"{path}/warm-{i}", {"data": {"k": "v"}}, timeout=5.0)
            results.append(patched["kind"])
        except ApiError as err:
            results.append(err)

    all_at_once(retry)
    assert results == ["ConfigMap"] * 4
    assert proxy.accepted > dialled

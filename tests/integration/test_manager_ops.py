"""The process's operational surface against a real API server:
/readyz is 503 until the caches are synced and the material is loaded and 200 after;
/healthz stays 200 while the API server is down; JSON log lines parse with the expected
keys; SIGTERM exits 0; start-up failures are one line naming the file."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane import ControlPlane
from controlplane.process import http_get
from controlplane.server import free_port
from manager import app
from manager.ops import run_checks
from manager.options import BindAddress, Options
from tests.integration.manager_process import eventually, signer_with_a_new_ca
from trust.ca import write_ca


@pytest.fixture(scope="module")
def private_plane() -> Iterator[ControlPlane]:
    """A control plane of our own: this module stops its API server."""
    with ControlPlane.start() as plane:
        yield plane


def test_readyz_waits_for_synced_caches_and_healthz_ignores_the_api_server(
    private_plane: ControlPlane, tmp_path: Path
) -> None:
    files = write_ca(tmp_path / "ca")
    health_port = free_port()
    opts = Options(
        service_serving_key=str(files.key),
        service_serving_cert=str(files.cert),
        service_serving_trust_bundle=str(files.trust_bundle),
        kubeconfig=str(private_plane.kubeconfig),
        signer_name="ops.kubernetes.io/service-serving",
        leader_elect=False,
        metrics_bind_address=BindAddress("127.0.0.1", free_port()),
        health_probe_bind_address=BindAddress("127.0.0.1", health_port),
    )
    proc = app.build(opts)
    ready, lines = run_checks("readyz", proc.checks.snapshot("readyz"))
    assert not ready
    assert "[+]signing-material ok" in lines
    assert "[-]signer-informers-synced failed: reason withheld" in lines

    private_plane.stop_apiserver()
    thread = threading.Thread(target=app.serve, args=(proc,), daemon=True)
    try:
        thread.start()
        readyz = f"http://127.0.0.1:{health_port}/readyz"
        healthz = f"http://127.0.0.1:{health_port}/healthz"
        assert eventually(lambda: http_get(healthz)[0] == 200, 10)
        # API server down: caches cannot sync, so not ready — but alive.
        for _ in range(10):
            code, body = http_get(readyz)
            assert code == 503
            assert "[-]signer-informers-synced failed" in body
            assert "[-]publisher-informers-synced failed" in body
            assert http_get(healthz) == (200, "ok\n")
            time.sleep(0.3)

        private_plane.start_apiserver()
        assert eventually(lambda: http_get(readyz)[0] == 200, 30)

        # Down again after syncing: still healthy (never restart for an API outage).
        private_plane.stop_apiserver()
        for _ in range(15):
            assert http_get(healthz) == (200, "ok\n")
            time.sleep(0.2)
    finally:
        stopping = time.monotonic()
        proc.stop.set()
        thread.join(30)
        print(f"serve() stopped in {time.monotonic() - stopping:.1f}s with the API server down")
        if not private_plane_running(private_plane):
            private_plane.start_apiserver()
    assert not thread.is_alive(), "serve() returns after stop"


def private_plane_running(plane: ControlPlane) -> bool:
    return getattr(plane, "_apiserver", None) is not None


def test_json_logs_parse_and_sigterm_exits_zero(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    signer = signer_with_a_new_ca(
        control_plane,
        tmp_path,
        "--leader-elect=false",
        "-v2",
        signer_name="logs.kubernetes.io/service-serving",
    )
    try:
        assert eventually(signer.ready, 30)
    finally:
        assert signer.stop() == 0
    entries = signer.json_logs()
    assert entries
    for entry in entries:
        assert isinstance(entry["ts"], float)
        assert entry["level"] in ("debug", "info", "warning", "error", "critical")
        assert isinstance(entry["msg"], str) and entry["msg"]
        assert isinstance(entry["logger"], str)
        if entry["level"] in ("debug", "info"):
            assert isinstance(entry["v"], int)
    messages = [e["msg"] for e in entries]
    assert "leader election disabled; running controllers" in messages
    assert messages[-1] == "stopped"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args], capture_output=True, text=True, timeout=60
    )


def test_startup_failures_are_one_line_naming_the_file(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    one = write_ca(tmp_path / "one")
    two = write_ca(tmp_path / "two")
    cases = [
        # key of one CA, certificate of another
        (
            [
                f"--service-serving-key={one.key}",
                f"--service-serving-cert={two.cert}",
                f"--service-serving-trust-bundle={two.trust_bundle}",
            ],
            str(one.key),
        ),
        # cert does not chain to the bundle
        (
            [
                f"--service-serving-key={one.key}",
                f"--service-serving-cert={one.cert}",
                f"--service-serving-trust-bundle={two.trust_bundle}",
            ],
            str(one.cert),
        ),
        # missing file
        (
            [
                f"--service-serving-key={tmp_path / 'absent.key'}",
                f"--service-serving-cert={one.cert}",
                f"--service-serving-trust-bundle={one.trust_bundle}",
            ],
            str(tmp_path / "absent.key"),
        ),
    ]
    for files, named in cases:
        result = run_cli("run", f"--kubeconfig={control_plane.kubeconfig}", *files)
        assert result.returncode == 1, result.stderr
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith(f"error: {named}: ")
        assert "Traceback" not in result.stderr
        assert "PRIVATE KEY" not in result.stderr and "BEGIN" not in result.stderr


def test_unreachable_kubeconfig_is_one_line(tmp_path: Path) -> None:
    files = write_ca(tmp_path / "ca")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("not: [a kubeconfig")
    result = run_cli(
        "run",
        f"--kubeconfig={kubeconfig}",
        f"--service-serving-key={files.key}",
        f"--service-serving-cert={files.cert}",
        f"--service-serving-trust-bundle={files.trust_bundle}",
    )
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: kubeconfig: ")

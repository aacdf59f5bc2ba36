"""The built image (issue 13): `make image`'s OCI image, run the way the shipped Deployment
runs it — its ENTRYPOINT with the Deployment's args, as uid/gid 65532, with the in-cluster
configuration (KUBERNETES_SERVICE_HOST/PORT and a ServiceAccount token mounted at
/var/run/secrets/kubernetes.io/serviceaccount) and the Secret/ConfigMap volumes mounted at
the Deployment's paths in kubelet's atomic-writer layout (`..data` symlinks, fsGroup
65532, the Deployment's modes) — against the local control plane with only config/rbac
applied. It must get a certificate issued and publish the bundle.

The image runs under `buildah run --isolation chroot` (no daemon, host network, so the
loopback API server is reachable); hack/image.sh builds it, or finds it up to date.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from controlplane import ControlPlane
from controlplane.kubelet import Kubelet, pcr_path
from controlplane.server import free_port
from kube.client import Client
from manager.demo import http_get
from signer.ca import write_ca
from tests.integration.manager_process import eventually, issue_one, wait_issued
from tests.integration.test_manager_rbac import (
    NS,
    apply,
    ensure_namespace,
    service_account_token,
)
from tests.unit.manager.kustomize import CONFIG, find, render

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

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

    def files(self, container: str) -> list[str]:
        """Every path of the container's root filesystem (buildah mount)."""
        root = subprocess.run(
            [*self.buildah, "mount", container], capture_output=True, text=True, check=True
        ).stdout.strip()
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
        volumes: dict[Path, str] | None = None,
        env: dict[str, str] | None = None,
    ) -> list[str]:
        cmd = [*self.buildah, "run", "--isolation", "chroot", "--user", f"{UID}:{GID}"]
        for src, dst in (volumes or {}).items():
            cmd += ["--volume", f"{src}:{dst}"]
        for key, value in (env or {}).items():
            cmd += ["--env", f"{key}={value}"]
        return [*cmd, container, "--", *argv]


@pytest.fixture(scope="module")
def image() -> Image:
    build = subprocess.run(
        ["bash", str(ROOT / "hack" / "image.sh")], capture_output=True, text=True, check=False
    )
    assert build.returncode == 0, build.stderr[-4000:]
    return Image()


@pytest.fixture
def container(image: Image) -> Iterator[str]:
    name = image.container()
    try:
        yield name
    finally:
        image.remove(name)


def atomic_volume(directory: Path, files: dict[str, bytes], mode: int) -> Path:
    """A volume directory as kubelet's atomic writer leaves it: the files in a timestamped
    directory, `..data` pointing at it, and one symlink per file through `..data`;
    group-owned by the Pod's fsGroup."""
    stamp = directory / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.000000001"
    stamp.mkdir(parents=True)
    for name, content in files.items():
        path = stamp / name
        path.write_bytes(content)
        os.chown(path, 0, GID)
        path.chmod(mode)
        (directory / name).symlink_to(f"..data/{name}")
    (directory / "..data").symlink_to(stamp.name)
    for path in (directory, stamp):
        os.chown(path, 0, GID)
        path.chmod(0o755 if path == directory else 0o750)
    return directory


def deployment_container() -> dict[str, Any]:
    deployment = find(render(CONFIG / "default"), "Deployment", "service-serving-signer")
    containers: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["containers"]
    return containers[0]


def deployment_args(metrics_port: int, health_port: int, lease: str) -> list[str]:
    """The shipped Deployment's args, with loopback ports (the chroot shares the host's
    network) and a Lease of this test's own."""
    out = []
    for arg in deployment_container()["args"]:
        if arg.startswith("--metrics-bind-address="):
            arg = f"--metrics-bind-address=127.0.0.1:{metrics_port}"
        elif arg.startswith("--health-probe-bind-address="):
            arg = f"--health-probe-bind-address=127.0.0.1:{health_port}"
        elif arg.startswith("--leader-elect-resource-name="):
            arg = f"--leader-elect-resource-name={lease}"
        out.append(arg)
    return out


def in_rootfs(path: str) -> str:
    """A mount destination with the image's symlinks resolved, as runc resolves it inside
    the root filesystem: Debian's /var/run is a symlink to /run, and buildah's chroot
    isolation would otherwise follow it on the host, hiding the mount from the container."""
    return "/run/" + path.removeprefix("/var/run/") if path.startswith("/var/run/") else path


def mounted_volumes(tmp_path: Path, control_plane: ControlPlane, token: str) -> dict[Path, str]:
    """Host directory → the Deployment's mountPath, for each volume the Pod gets."""
    ca = write_ca(tmp_path / "ca-files")
    by_name = {m["name"]: m["mountPath"] for m in deployment_container()["volumeMounts"]}
    service_account = atomic_volume(
        tmp_path / "serviceaccount",
        {
            "token": token.encode(),
            "ca.crt": control_plane.pki.serving_ca.cert_pem,
            "namespace": NS.encode(),
        },
        0o644,
    )
    signing = atomic_volume(
        tmp_path / "signing-ca",
        {"tls.key": ca.key.read_bytes(), "tls.crt": ca.cert.read_bytes()},
        0o440,
    )
    bundle = atomic_volume(
        tmp_path / "trust-bundle",
        {"trust-bundle.pem": ca.trust_bundle.read_bytes()},
        0o444,
    )
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    os.chown(scratch, 0, GID)
    scratch.chmod(0o1777)
    return {
        service_account: in_rootfs("/var/run/secrets/kubernetes.io/serviceaccount") + ":ro",
        signing: in_rootfs(by_name["signing-ca"]) + ":ro",
        bundle: in_rootfs(by_name["trust-bundle"]) + ":ro",
        scratch: in_rootfs(by_name["tmp"]),
    }


def test_image_config_is_the_shipped_entrypoint_as_uid_65532(image: Image) -> None:
    config = image.config()
    assert config["Entrypoint"] == ["service-serving-signer", "run"]
    assert config["User"] == f"{UID}:{GID}"
    assert image.archive.is_file() and image.archive.stat().st_size > 0


def test_image_reports_its_commit_and_carries_no_test_harness(image: Image, container: str) -> None:
    version = image.run(container, ["service-serving-signer", "version", "-o", "json"])
    assert version.returncode == 0, version.stderr
    info = json.loads(version.stdout)
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert info["version"] and info["commit"].startswith(head)
    paths = image.files(container)
    assert any(p.endswith("/site-packages/signer/controller.py") for p in paths)
    harness = [
        p
        for p in paths
        if re.search(r"/site-packages/(controlplane|tests|bench)(/|$)", p)
        or p.endswith(("/bin/pip", "/bin/pip3"))
        or "/site-packages/setuptools" in p
    ]
    assert harness == []
    demo = image.run(container, ["service-serving-signer", "demo"])
    assert demo.returncode == 1
    assert demo.stderr.startswith("error: demo needs the local control plane"), demo.stderr


def test_image_entrypoint_as_65532_in_cluster_issues_a_certificate(
    image: Image,
    container: str,
    control_plane: ControlPlane,
    client: Client,
    kubelet: Kubelet,
    namespace: str,
    tmp_path: Path,
) -> None:
    ensure_namespace(client, NS)
    for obj in render(CONFIG / "rbac"):
        apply(client, obj, dry_run=False, namespace=NS)
    volumes = mounted_volumes(tmp_path, control_plane, service_account_token(client))
    metrics_port, health_port = free_port(), free_port()
    argv = [
        *image.config()["Entrypoint"],
        *deployment_args(metrics_port, health_port, f"image-test-{namespace[-6:]}"),
    ]
    env = {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(control_plane.port),
        "POD_NAMESPACE": NS,
    }
    log_path = tmp_path / "signer.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            image.run_argv(container, argv, volumes=volumes, env=env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def logs() -> str:
        return log_path.read_text(errors="replace")[-4000:]

    def ready() -> bool:
        return http_get(f"http://127.0.0.1:{health_port}/readyz")[0] == 200

    try:
        assert eventually(ready, 120, 0.5), logs()
        kubelet.create_service("web", namespace, selector={"app": "web"})
        name = issue_one(client, kubelet, namespace, "web-0")
        assert wait_issued(client, namespace, name, 60), logs()
        status = client.get(pcr_path(namespace, "v1", name))["status"]
        leaf = x509.load_pem_x509_certificates(status["certificateChain"].encode())[0]
        sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert sans.get_values_for_type(x509.DNSName) == [
            f"web.{namespace}.svc.cluster.local",
            f"web.{namespace}.svc",
        ]
        metrics = http_get(f"http://127.0.0.1:{metrics_port}/metrics")[1]
        # At least ours: requests other tests left waiting in other namespaces of this
        # shared control plane are this signer's to issue too.
        issued = re.search(
            r'^service_serving_ca_controller_requests_total\{result="issued"\} (\S+)$',
            metrics,
            re.MULTILINE,
        )
        assert issued is not None and float(issued.group(1)) >= 1.0, metrics[-2000:]
        lines = [json.loads(line) for line in logs().splitlines() if line.startswith("{")]
        assert lines, "the Deployment's --log-format=json gives JSON lines"
        assert not [line for line in logs().splitlines() if "forbidden" in line.lower()]
    finally:
        # SIGTERM to the signer itself, as the kubelet's runtime sends it; buildah's exit
        # status is then the signer's (a signal to buildah would kill the child instead).
        for pid in container_processes(proc.pid, b"service-serving-signer"):
            os.kill(pid, signal.SIGTERM)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait(10)
    assert code == 0, logs()
    assert "shutting down" in logs()


def container_processes(session: int, marker: bytes) -> list[int]:
    """The processes of `buildah run`'s session (started with start_new_session) whose
    command line names `marker`, buildah's own runner processes excluded."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == session:
            continue
        try:
            if os.getsid(int(entry)) != session:
                continue
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not argv[0].startswith(b"buildah") and any(marker in arg for arg in argv):
            found.append(int(entry))
    return found

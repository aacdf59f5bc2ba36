"""The built image: `make image`'s OCI image run as the shipped Deployment's
Pod — the Pod `config/default` gets on the cluster (real kube-apiserver, KCM, the real
kubelet on a hollow node, see tests/integration/shipped.py) — so the image, the manifests
and the in-cluster configuration are tested together:

- the container's command as Kubernetes composes it (`command`/`args` over the image's
  ENTRYPOINT/CMD), only its two bind addresses moved to free loopback ports;
- its user and group from the Pod's securityContext, its capabilities dropped, its root
  filesystem read-only when it declares readOnlyRootFilesystem;
- every volumeMount bind-mounted from the directory the kubelet wrote for that volume (the
  Secret and ConfigMap with fsGroup and modes, the ServiceAccount admission's projected
  token volume, the `/tmp` emptyDir), read-only where the mount says so;
- the environment the kubelet gives the container (`KUBERNETES_SERVICE_HOST`/`PORT` from
  the `kubernetes` Service's loopback ClusterIP, whose kube-proxy rule a forwarding proxy
  stands in for; POD_NAMESPACE from its fieldRef).

It must lead, publish the bundle, and issue the certificate a workload Pod's kubelet asks
for; the workload Pod reaches Running with a chain that verifies against that bundle.

The container runs under `buildah run --isolation chroot` (no daemon, host network, so the
loopback API server is reachable). buildah has no read-only-root option, so a private mount
namespace makes the container's root directory a read-only bind mount before `buildah
run` starts in it (runc likewise creates the mount points first, then remounts the root
read-only). hack/image.sh builds the image, or finds it up to date.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from subprocess import Popen
from typing import IO, Any

import pytest

from controlplane.cluster import Cluster
from controlplane.server import free_port
from kube.client import Client
from tests.integration.freezing_proxy import FreezingProxy
from tests.integration.image_harness import GID, ROOT, UID, Image, built_image
from tests.integration.manager_process import SignerProcess, eventually
from tests.integration.nodes import (
    chain_of,
    create_service,
    dns_sans,
    running_files,
    service_sans,
    serving_pod,
    verify_against_bundle,
)
from tests.integration.shipped import (
    ShippedPod,
    deploy,
    kubelet_env,
    kubernetes_service_proxy,
    loopback_args,
    undeploy,
)
from trust.ca import CertificateAuthority, cert_pem, generate_ca, key_pem

pytestmark = pytest.mark.timeout(1800)

SIGNER = "kubernetes.io/service-serving"


@pytest.fixture(scope="module")
def image() -> Image:
    return built_image()


@pytest.fixture
def container(image: Image) -> Iterator[str]:
    name = image.container()
    try:
        yield name
    finally:
        image.remove(name)


def in_rootfs(root: Path, path: str) -> str:
    """`path` with the image's symlinks resolved inside `root`, as runc resolves a mount
    destination in the container's root filesystem (securejoin). buildah's chroot
    isolation would follow them on the host instead — Debian's /var/run → /run would
    put the ServiceAccount volume on the host's /run, hidden from the container."""
    parts = [p for p in path.split("/") if p]
    resolved: list[str] = []
    for _ in range(64):  # symlink hops, as the kernel bounds them
        if not parts:
            return "/" + "/".join(resolved)
        part = parts.pop(0)
        if part == "..":
            resolved = resolved[:-1]
            continue
        candidate = root.joinpath(*resolved, part)
        if candidate.is_symlink():
            target = os.readlink(candidate)
            if target.startswith("/"):
                resolved = []
            parts = [p for p in target.split("/") if p and p != "."] + parts
        else:
            resolved.append(part)
    raise ValueError(f"too many symlinks resolving {path} in {root}")


def container_command(spec: dict[str, Any], image_config: dict[str, Any]) -> list[str]:
    """The process Kubernetes starts for a container: `command` replaces the image's
    ENTRYPOINT (and then its CMD is ignored); `args` replace the CMD."""
    if spec.get("command"):
        return [*spec["command"], *spec.get("args", [])]
    entrypoint = image_config.get("Entrypoint") or []
    args = spec["args"] if "args" in spec else image_config.get("Cmd") or []
    return [*entrypoint, *args]


class PodContainer:
    """The signer container of a Pod of the shipped Deployment, run from the image in a
    buildah container as the kubelet's runtime would run it (module docstring)."""

    def __init__(self, image: Image, container: str, pod: ShippedPod, env: dict[str, str]) -> None:
        self.image, self.container, self.pod, self.env = image, container, pod, env
        self.spec = pod.container()
        pod_security = pod.pod["spec"].get("securityContext") or {}
        self.security = {**pod_security, **(self.spec.get("securityContext") or {})}
        self.read_only_root = bool(self.security.get("readOnlyRootFilesystem"))
        user, _, group = (image.config().get("User") or "0").partition(":")
        self.uid = int(self.security.get("runAsUser", user))
        self.gid = int(self.security.get("runAsGroup", group or 0))
        # buildah run cannot add supplementary groups: the fsGroup (owner of the Secret's
        # 0440 files) must then be the primary group, as it is in config/manager.
        fs_group = pod_security.get("fsGroup")
        assert fs_group in (None, self.gid), f"fsGroup {fs_group} is not runAsGroup {self.gid}"
        mounts = pod.mounts()
        self.root = image.rootfs(container)
        self.volumes: list[tuple[Path, str, bool]] = []
        for mount in self.spec.get("volumeMounts", []):
            assert "subPath" not in mount, "subPath mounts are not run here"
            target = in_rootfs(self.root, mount["mountPath"])
            # The runtime creates the mount point in the container's (throwaway) layer
            # before the root becomes read-only.
            self.root.joinpath(target.lstrip("/")).mkdir(parents=True, exist_ok=True)
            read_only = bool(mount.get("readOnly"))
            self.volumes.append((mounts[mount["mountPath"]], target, read_only))
        # buildah's own mount point (its container marker) likewise.
        self.root.joinpath("run", ".containerenv").touch()

    def start(self, command: list[str], stdout: IO[Any] | int, timeout: float = 120) -> Popen[Any]:
        """Start `command` in the container (its own session; stderr to `stdout`).

        A read-only root: buildah has no option for it, so `buildah run` starts in a
        private mount namespace where the container's root directory is a read-only bind
        mount; the container's own mount namespace, copied from that one, keeps it
        read-only. Once the container's namespace exists, the root is made writable again
        in buildah's namespace only: buildah (1.28) removes the mount points it used from
        the root after the command exits and panics when it cannot, losing the command's
        exit status."""
        caps = (self.security.get("capabilities") or {}).get("drop", [])
        run = self.image.run_argv(
            self.container,
            command,
            user=f"{self.uid}:{self.gid}",
            volumes=self.volumes,
            env=self.env,
            cap_drop=[c if c == "ALL" else f"CAP_{c}" for c in caps],
        )
        root = shlex.quote(str(self.root))
        script = []
        if self.read_only_root:
            script += [f"mount --bind {root} {root}", f"mount -o remount,bind,ro {root}"]
        script.append("exec " + shlex.join(run))
        proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-ec", "; ".join(script)],
            stdout=stdout,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if self.read_only_root:
            if not eventually(lambda: container_namespace_exists(proc.pid), timeout, 0.01):
                proc.kill()
                raise AssertionError(f"no container mount namespace in {timeout}s")
            writable = ["mount", "-o", "remount,bind,rw", str(self.root)]
            subprocess.run(["nsenter", f"--target={proc.pid}", "--mount", *writable], check=True)
        return proc


def container_namespace_exists(session: int) -> bool:
    """Whether a process of the session runs in a mount namespace other than the host's
    and the session leader's (`unshare`'s, once it has unshared): buildah's container."""
    try:
        host = os.readlink("/proc/self/ns/mnt")
        leader = os.readlink(f"/proc/{session}/ns/mnt")
    except OSError:
        return False
    if leader == host:
        return False
    for pid in session_processes(session):
        try:
            if os.readlink(f"/proc/{pid}/ns/mnt") not in (host, leader):
                return True
        except OSError:
            continue
    return False


class ImageSigner(SignerProcess):
    """The Pod's container command, run by `PodContainer`. SIGTERM goes to the signer
    inside, as the kubelet's runtime sends it (a signal to buildah kills its child
    uncleanly); buildah's exit status is then the signer's."""

    def __init__(self, run: PodContainer, log_path: Path) -> None:
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.log_path = log_path
        command = container_command(run.spec, run.image.config())
        self.args = loopback_args(command, self.metrics_port, self.health_port)
        self._log = log_path.open("ab")
        self.proc = run.start(self.args, self._log)

    def terminate(self) -> None:
        for pid in container_processes(self.proc.pid, self.args[0].encode()):
            os.kill(pid, signal.SIGTERM)

    def kill(self) -> None:
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)


def session_processes(session: int) -> list[int]:
    """The processes of a session (`start_new_session`) other than its leader."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != session:
            try:
                if os.getsid(int(entry)) == session:
                    found.append(int(entry))
            except OSError:
                continue
    return found


def container_processes(session: int, marker: bytes) -> list[int]:
    """The processes of `buildah run`'s session whose command line names `marker`,
    buildah's own runner processes excluded."""
    found = []
    for pid in session_processes(session):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not argv[0].startswith(b"buildah") and any(marker in arg for arg in argv):
            found.append(pid)
    return found


@pytest.fixture(scope="module")
def signing_ca() -> CertificateAuthority:
    return generate_ca("image test root")


@pytest.fixture(scope="module")
def shipped(
    cluster: Cluster, cluster_client: Client, signing_ca: CertificateAuthority
) -> Iterator[ShippedPod]:
    """config/default on the cluster; its first Running Pod."""
    root = cert_pem(signing_ca.cert)
    pods = deploy(cluster, cluster_client, key_pem(signing_ca.key), root, root)
    yield pods[0]
    undeploy(cluster_client)


@pytest.fixture(scope="module")
def kube_proxy(cluster: Cluster, cluster_client: Client) -> Iterator[FreezingProxy]:
    proxy = kubernetes_service_proxy(cluster, cluster_client)
    yield proxy
    proxy.close()


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


def test_shipped_pods_container_has_a_read_only_root_its_user_and_no_capabilities(
    image: Image, container: str, cluster_client: Client, shipped: ShippedPod
) -> None:
    """What the harness claims of the container, seen from inside it: a read-only root
    (readOnlyRootFilesystem), a writable /tmp that is the Pod's emptyDir, the Pod's
    uid/gid, no effective capabilities, and the Secret's key readable through fsGroup."""
    run = PodContainer(image, container, shipped, kubelet_env(cluster_client, shipped))
    assert run.read_only_root, "config/manager declares readOnlyRootFilesystem"
    go = shipped.volume("/tmp") / "probe-go"
    probe = (
        # Start once the harness has set the container up (PodContainer.start).
        "i=0; while [ ! -e /tmp/probe-go ]; do i=$((i+1)); [ $i -lt 3000 ]; sleep 0.1; done; "
        "id -u; id -g; grep CapEff /proc/self/status; "
        "touch /probe 2>&1 || true; touch /tmp/probe-from-image && echo tmp-ok; "
        "head -c 27 /var/run/secrets/service-serving-signer/ca/tls.key; echo; "
        "cat /var/run/secrets/kubernetes.io/serviceaccount/namespace; echo"
    )
    emptydir = shipped.volume("/tmp") / "probe-from-image"
    try:
        proc = run.start(["sh", "-ec", probe], subprocess.PIPE)
        go.touch()
        out = proc.communicate(timeout=600)[0].decode(errors="replace")
        assert proc.returncode == 0, out[-3000:]
        lines = out.splitlines()
        assert lines[:3] == [str(UID), str(GID), "CapEff:\t0000000000000000"], out
        assert "Read-only file system" in lines[3], out
        assert lines[4] == "tmp-ok" and emptydir.is_file()
        assert lines[5] == "-----BEGIN PRIVATE KEY-----"
        assert lines[6] == "service-serving-signer"
    finally:
        emptydir.unlink(missing_ok=True)
        go.unlink(missing_ok=True)


def test_image_runs_as_the_shipped_pod_on_its_kubelet_written_volumes_and_issues(
    image: Image,
    container: str,
    cluster: Cluster,
    cluster_client: Client,
    shipped: ShippedPod,
    kube_proxy: FreezingProxy,
    signing_ca: CertificateAuthority,
    node_namespace: str,
    tmp_path: Path,
) -> None:
    env = kubelet_env(cluster_client, shipped)
    service_range = ipaddress.ip_network(cluster.plane.service_cidr)
    assert ipaddress.ip_address(env["KUBERNETES_SERVICE_HOST"]) in service_range
    assert env["KUBERNETES_SERVICE_PORT"] == "443"
    run = PodContainer(image, container, shipped, env)
    assert not any(a.startswith("--kubeconfig") for a in container_command(run.spec, {}))
    signer = ImageSigner(run, tmp_path / "signer.log")

    def logs() -> str:
        return "\n".join(signer.log_lines()[-40:])

    try:
        assert eventually(lambda: signer.leading() or not signer.alive(), 180, 0.5)
        assert signer.leading(), logs()
        # In-cluster: the signer dialled the `kubernetes` Service's ClusterIP.
        assert kube_proxy.accepted >= 1
        create_service(cluster_client, node_namespace, "web", {"app": "web"})
        serving_pod(cluster, cluster_client, node_namespace, "web-0", app="web", signer_name=SIGNER)
        _, files = running_files(cluster, cluster_client, node_namespace, "web-0")
        names = service_sans("web", node_namespace)
        verify_against_bundle(files.chain, files.bundle, names)
        leaf = chain_of(files.chain)[0]
        assert leaf.issuer == signing_ca.cert.subject, "issued by this container's signing CA"
        assert dns_sans(leaf) == names
        assert signer.issued() >= 1.0
        assert signer.json_logs(), "the Deployment's --log-format=json gives JSON lines"
        forbidden = [line for line in signer.log_lines() if "forbidden" in line.lower()]
        assert not forbidden, forbidden[:3]
    finally:
        code = signer.stop()
    assert code == 0, logs()
    assert "shutting down" in logs()

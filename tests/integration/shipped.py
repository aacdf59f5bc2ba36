"""The shipped installation on the cluster, and the signer run on exactly what its Pod got.

`deploy()` applies `config/default` (server-side apply of the rendered tree), creates the
signing material as the README says (a `kubernetes.io/tls` Secret and a ConfigMap), and
waits until the Deployment's Pods are bound to hollow nodes and Running: the kubelet has
then written the Secret, the ConfigMap and the ServiceAccount volume (token, `ca.crt`
from KCM's `kube-root-ca.crt`, namespace) into each Pod's volume directories.

`ShippedSigner` runs `service-serving-signer run` with the Deployment's own arguments in
a private mount namespace (`unshare --mount`, as root) where a fresh tmpfs covers `/run`
(= `/var/run`) and each of the container's volume mounts is a bind mount of the
directory the kubelet wrote — so the process sees the same paths, files and `..data`
symlink swaps as the container would (the emptyDir at `/tmp` too: the host's `/tmp` is
hidden from it), and nothing on the machine changes. With
`KUBERNETES_SERVICE_HOST`/`PORT` set and no `--kubeconfig`, the official client's
in-cluster loader authenticates it with the kubelet-written token. Only the bind
addresses are moved to free loopback ports.

Reusable by other tests: the image test runs the built image's container on the same
directories, with the environment the kubelet gives the container (`kubelet_env`: the
`kubernetes` Service's variables and the container's own `env`) and a stand-in for
kube-proxy's rule for that Service (`kubernetes_service_proxy`).
"""

from __future__ import annotations

import copy
import json
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from controlplane.cluster import Cluster
from controlplane.hollow_node import HollowNode
from controlplane.server import free_port
from controlplane.workload import wait_running
from kube.client import ApiError, Client, is_not_found
from kube.types import JSON
from tests.integration.freezing_proxy import FreezingProxy
from tests.integration.manager_process import SignerProcess
from tests.integration.manifests import apply, create_or_replace
from tests.unit.deploy.kustomize import CONFIG, find, render
from trust.ca import CertificateAuthority, cert_pem, key_pem

NS = "service-serving-signer"
DEPLOYMENT = "service-serving-signer"
SECRET = "service-serving-signer-ca"
CONFIGMAP = "service-serving-signer-trust-bundle"
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def token_file_kubeconfig(cluster: Cluster, path: Path) -> None:
    """A kubeconfig at `path` naming the ServiceAccount volume's token file and CA, as the
    signer in the Pod reads it (the kubelet rewrites the token; the client re-reads it)."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": cluster.plane.host,
                            "certificate-authority": f"{SA_MOUNT}/ca.crt",
                        },
                    }
                ],
                "users": [{"name": "u", "user": {"tokenFile": f"{SA_MOUNT}/token"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )


def manifests(*, token_expiration: int | None = None, replicas: int | None = None) -> list[JSON]:
    """`config/namespace` and `config/default` rendered. `token_expiration`: replace the
    ServiceAccount volume the admission plugin would inject (token valid 3607 s) by the
    same projected volume with a shorter token, so a test sees the kubelet refresh it."""
    objects = copy.deepcopy(render(CONFIG / "namespace") + render(CONFIG / "default"))
    deployment = find(objects, "Deployment", DEPLOYMENT)
    if replicas is not None:
        deployment["spec"]["replicas"] = replicas
    if token_expiration is not None:
        spec = deployment["spec"]["template"]["spec"]
        spec["automountServiceAccountToken"] = False
        spec["volumes"].append(service_account_volume(token_expiration))
        for container in spec["containers"]:
            container["volumeMounts"].append(
                {"name": "kube-api-access", "mountPath": SA_MOUNT, "readOnly": True}
            )
    return objects


def service_account_volume(expiration: int) -> JSON:
    """What the ServiceAccount admission plugin injects, with `expiration` seconds."""
    return {
        "name": "kube-api-access",
        "projected": {
            "defaultMode": 0o644,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": expiration, "path": "token"}},
                {
                    "configMap": {
                        "name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "namespace",
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                            }
                        ]
                    }
                },
            ],
        },
    }


def put_signing_material(client: Client, key_pem: bytes, cert_pem: bytes) -> None:
    """Create or replace the Secret the Deployment mounts (README: `kubectl create secret
    tls`)."""
    _put(
        client,
        "secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET, "namespace": NS},
            "type": "kubernetes.io/tls",
            "stringData": {"tls.key": key_pem.decode(), "tls.crt": cert_pem.decode()},
        },
    )


def put_trust_bundle(client: Client, bundle_pem: bytes) -> None:
    _put(
        client,
        "configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": CONFIGMAP, "namespace": NS},
            "data": {"trust-bundle.pem": bundle_pem.decode()},
        },
    )


def shipped_fixture(ca_fixture: str) -> Callable[..., Iterator[list[ShippedPod]]]:
    """A module-scoped `shipped` fixture: config/default deployed on the cluster, signing
    with the CA of fixture `ca_fixture` (its certificate the trust bundle), its Running
    Pods; removed after the module (`shipped = shipped_fixture("my_ca")`)."""

    @pytest.fixture(scope="module")
    def shipped(
        cluster: Cluster, cluster_client: Client, request: pytest.FixtureRequest
    ) -> Iterator[list[ShippedPod]]:
        ca: CertificateAuthority = request.getfixturevalue(ca_fixture)
        root = cert_pem(ca.cert)
        yield deploy(cluster, cluster_client, key_pem(ca.key), root, root)
        undeploy(cluster_client)

    return shipped


def _put(client: Client, plural: str, body: JSON) -> None:
    create_or_replace(client, f"/api/v1/namespaces/{NS}/{plural}", body)


@dataclass(frozen=True)
class ShippedPod:
    """One Pod of the shipped Deployment, Running on a hollow node."""

    pod: JSON
    node: HollowNode

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])

    def container(self) -> JSON:
        [container] = [c for c in self.pod["spec"]["containers"] if c["name"] == "signer"]
        return dict(container)

    def mounts(self) -> dict[str, Path]:
        """The container's mount path → the directory the kubelet wrote for that volume."""
        volumes = {v["name"]: v for v in self.pod["spec"]["volumes"]}
        uid = self.pod["metadata"]["uid"]
        result: dict[str, Path] = {}
        for mount in self.container()["volumeMounts"]:
            volume = volumes[mount["name"]]
            plugin = next(k for k in volume if k != "name")
            result[mount["mountPath"]] = self.node.volume_dir(uid, mount["name"], plugin)
        return result

    def volume(self, mount_path: str) -> Path:
        return self.mounts()[mount_path]


def deploy(
    # The Deployment's inputs, one a line.
    cluster: Cluster,
    client: Client,
    key_pem: bytes,
    cert_pem: bytes,
    bundle_pem: bytes,
    *,
    token_expiration: int | None = None,
    replicas: int | None = None,
    timeout: float = 240,
) -> list[ShippedPod]:
    """Apply config/default with this signing material; return its Running Pods."""
    objects = manifests(token_expiration=token_expiration, replicas=replicas)

    def material() -> None:
        put_signing_material(client, key_pem, cert_pem)
        put_trust_bundle(client, bundle_pem)

    return deploy_objects(cluster, client, objects, before=material, timeout=timeout)


def deploy_objects(
    cluster: Cluster,
    client: Client,
    objects: list[JSON],
    *,
    before: Callable[[], object] = lambda: None,
    timeout: float = 240,
) -> list[ShippedPod]:
    """Apply rendered `objects` into a fresh namespace (`before()` runs once the Namespace
    exists, before the rest); return the Deployment's Running Pods."""
    wait_namespace_gone(client, timeout)
    for obj in [o for o in objects if o["kind"] == "Namespace"]:
        apply(client, obj, dry_run=False)
    before()
    for obj in [o for o in objects if o["kind"] != "Namespace"]:
        apply(client, obj, dry_run=False)
    return running_pods(cluster, client, find(objects, "Deployment", DEPLOYMENT), timeout)


def running_pods(
    cluster: Cluster, client: Client, deployment: JSON, timeout: float = 240
) -> list[ShippedPod]:
    """The Deployment's Pods, once as many as it wants are Running."""
    want = int(deployment["spec"]["replicas"])
    selector = ",".join(
        f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items()
    )
    deadline = time.monotonic() + timeout
    while True:
        pods = [
            p
            for p in client.get(f"/api/v1/namespaces/{NS}/pods", {"labelSelector": selector})[
                "items"
            ]
            if not p["metadata"].get("deletionTimestamp")
        ]
        if len(pods) >= want and all(
            (p.get("status") or {}).get("phase") == "Running" for p in pods
        ):
            return [ShippedPod(p, cluster.node_of(p)) for p in pods]
        if time.monotonic() > deadline:
            raise TimeoutError(f"{DEPLOYMENT} Pods not Running: {[p.get('status') for p in pods]}")
        time.sleep(0.5)


def wait_namespace_gone(client: Client, timeout: float = 240) -> None:
    """A previous `undeploy()` may still be finishing (KCM's namespace controller)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ns = client.get(f"/api/v1/namespaces/{NS}")
        except ApiError as err:
            if is_not_found(err):
                return
            raise
        if not ns["metadata"].get("deletionTimestamp"):
            return
        time.sleep(0.5)
    raise TimeoutError(f"namespace {NS} still terminating after {timeout:.0f}s")


def undeploy(client: Client) -> None:
    """Delete the namespace (KCM finishes it; the Pods go with it)."""
    try:
        client.delete(f"/api/v1/namespaces/{NS}")
    except ApiError as err:
        if not is_not_found(err):
            raise


def wait_pod_running(client: Client, pod: ShippedPod, timeout: float = 120) -> JSON:
    return wait_running(client, NS, pod.name, timeout)


def service_env(services: list[JSON]) -> dict[str, str]:
    """The variables kubelet derives from Services (a port of pkg/kubelet/envvars'
    `FromServices`): `<NAME>_SERVICE_HOST`/`_PORT`, one per named port, and the
    Docker-link `<NAME>_PORT…` set; Services without a ClusterIP give none."""
    env: dict[str, str] = {}
    for service in services:
        ip = service["spec"].get("clusterIP") or "None"
        if ip == "None":
            continue
        prefix = service["metadata"]["name"].replace("-", "_").upper()
        ports = service["spec"]["ports"]
        env[f"{prefix}_SERVICE_HOST"] = ip
        env[f"{prefix}_SERVICE_PORT"] = str(ports[0]["port"])
        for port in ports:
            if port.get("name"):
                name = port["name"].replace("-", "_").upper()
                env[f"{prefix}_SERVICE_PORT_{name}"] = str(port["port"])
        for i, port in enumerate(ports):
            protocol = port.get("protocol") or "TCP"
            url = f"{protocol.lower()}://{ip}:{port['port']}"  # IPv4 ClusterIPs here
            if i == 0:
                env[f"{prefix}_PORT"] = url
            each = f"{prefix}_PORT_{port['port']}_{protocol.upper()}"
            env[each] = url
            env[f"{each}_PROTO"] = protocol.lower()
            env[f"{each}_PORT"] = str(port["port"])
            env[f"{each}_ADDR"] = ip
    return env


# What an env var's `fieldRef` may name, as the kubelet resolves it (podFieldSelectorRuntimeValue).
_FIELD_PATHS = {
    "metadata.name": lambda pod: pod["metadata"]["name"],
    "metadata.namespace": lambda pod: pod["metadata"]["namespace"],
    "metadata.uid": lambda pod: pod["metadata"]["uid"],
    "spec.nodeName": lambda pod: pod["spec"]["nodeName"],
    "spec.serviceAccountName": lambda pod: pod["spec"]["serviceAccountName"],
}


def kubelet_env(client: Client, pod: ShippedPod) -> dict[str, str]:
    """The environment the kubelet gives `pod`'s signer container (makeEnvironmentVariables):
    the variables of the `kubernetes` Service in `default` (always) and of the Pod's own
    namespace's Services (when `enableServiceLinks`), then the container's `env` — literal
    values and the `fieldRef`s above; any other source fails loudly (extend this then).
    (`$(VAR)` references in values are not expanded; the shipped manifests have none.)"""
    spec = pod.pod["spec"]
    services = [client.get("/api/v1/namespaces/default/services/kubernetes")]
    if spec.get("enableServiceLinks", True):
        # Later wins: a `kubernetes` Service of the Pod's namespace shadows the master's.
        services += client.get(f"/api/v1/namespaces/{NS}/services")["items"]
    env = service_env(services)
    for var in pod.container().get("env", []):
        if "value" in var or "valueFrom" not in var:
            env[var["name"]] = var.get("value", "")
            continue
        field = var["valueFrom"].get("fieldRef", {}).get("fieldPath")
        if field not in _FIELD_PATHS:
            raise NotImplementedError(f"env {var['name']}: {var['valueFrom']} is not resolved here")
        env[var["name"]] = str(_FIELD_PATHS[field](pod.pod))
    return env


def kubernetes_service_proxy(cluster: Cluster, client: Client) -> FreezingProxy:
    """What kube-proxy does for the `kubernetes` Service on a node: connections to its
    ClusterIP:port reach the API server. (The plane runs with
    `--endpoint-reconciler-type=none`, so its one endpoint is the plane's own address.)
    The ClusterIP is in the plane's loopback Service range; the caller closes it."""
    service = client.get("/api/v1/namespaces/default/services/kubernetes")
    listen = (service["spec"]["clusterIP"], int(service["spec"]["ports"][0]["port"]))
    return FreezingProxy("127.0.0.1", cluster.plane.port, listen=listen).start()


def loopback_args(args: list[str], metrics_port: int, health_port: int) -> list[str]:
    """The container's args with its two servers moved to these loopback ports (the
    processes here share the machine's network, so the Deployment's ports may be taken)."""
    moved = {
        "--metrics-bind-address": f"127.0.0.1:{metrics_port}",
        "--health-probe-bind-address": f"127.0.0.1:{health_port}",
    }
    kept = [a for a in args if a.split("=", 1)[0] not in moved]
    return [*kept, *(f"{flag}={address}" for flag, address in moved.items())]


def _code_paths() -> set[Path]:
    """What the signer's command runs from: this checkout, the venv, Python's own prefix."""
    root = Path(__file__).resolve().parents[2]
    return {root, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}


def _paths_hidden_by(mounts: dict[str, Path], paths: set[Path]) -> list[Path]:
    """The `paths` that a mount target covers, outermost first; for each, its mount point
    is made inside the volume's host directory (one empty directory there)."""
    hidden: list[Path] = []
    for path in sorted(paths, key=lambda p: len(p.parts)):
        for target, source in mounts.items():
            if path.is_relative_to(target) and path != Path(target):
                if not any(path.is_relative_to(h) for h in hidden):
                    (source / path.relative_to(target)).mkdir(parents=True, exist_ok=True)
                    hidden.append(path)
                break
    return hidden


class ShippedSigner(SignerProcess):
    """The Deployment's container command for `pod`, in a private mount namespace with
    the kubelet-written volumes bind-mounted at their mount paths and the in-cluster
    environment. `extra_args` come after the Deployment's (later flags win)."""

    @property
    def lease_name(self) -> str:
        names = [
            a.split("=", 1)[1] for a in self.args if a.startswith("--leader-elect-resource-name=")
        ]
        return names[-1] if names else "service-serving-signer"

    def __init__(
        self,
        cluster: Cluster,
        pod: ShippedPod,
        log_path: Path,
        *extra_args: str,
    ) -> None:
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.log_path = log_path
        container = pod.container()
        self.args = [
            sys.executable,
            "-m",
            "cli",
            "run",
            *loopback_args(container.get("args", []), self.metrics_port, self.health_port),
            *extra_args,
        ]
        script = ["mount -t tmpfs -o mode=0755 tmpfs /run"]
        mounts = pod.mounts()
        sources = [str(s) for s in mounts.values()]

        def hides_a_source(target: str) -> bool:  # e.g. the emptyDir at /tmp
            return any(s.startswith(target.rstrip("/") + "/") for s in sources)

        # This checkout, its venv and Python itself may live under a mount target (a clone
        # in /tmp, under the emptyDir): park them on the fresh /run, mount the volumes,
        # then put them back at their own paths so the command still finds its code.
        kept = _paths_hidden_by(mounts, _code_paths())
        for i, path in enumerate(kept):
            script.append(f"mkdir -p /run/.keep/{i}")
            script.append(f"mount --bind {shlex.quote(str(path))} /run/.keep/{i}")
        for target in sorted(mounts, key=hides_a_source):
            source = mounts[target]
            script.append(f"mkdir -p {shlex.quote(target)}")
            script.append(f"mount --bind -o ro {shlex.quote(str(source))} {shlex.quote(target)}")
        for i, path in enumerate(kept):
            script.append(f"mount --bind /run/.keep/{i} {shlex.quote(str(path))}")
        script.append("exec " + shlex.join(self.args))
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(cluster.plane.port),
            "POD_NAMESPACE": NS,
            "HOME": "/tmp",
        }
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-ec", "; ".join(script)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
        )

"""The README's quick install and docs/install.md's upgrade and uninstall, run as written.

The shell blocks are read from the two pages and run with bash on a kube-apiserver of
this module's own (the commands use the real namespace and cluster-scoped names), with
the tools they name on PATH: crane (go-containerregistry, which also serves the OCI
registry on loopback the image is pushed to), kustomize, kubectl and helm, all built from
Go modules and cached (controlplane/binaries.py), and the CLI installed from the wheel
`make dist` builds into a fresh venv, as the README says. What differs from a user's
machine is said where it happens: `make` runs in the checkout while the commands run in a
copy of config/ and charts/ (`kustomize edit` edits its directory), the registry address
replaces the README's example, and the signer runs as a local process of the installed
CLI instead of the Deployment's Pods (this plane has no nodes).

Checked: the Deployment names the image by the digest the registry serves for the pushed
tag, which is the archive's own manifest digest; the CLI from the wheel alone answers
`status` and `kubectl service-serving-signer status`; every upgrade and uninstall command
exits 0; the namespace, the CA Secret, the trust-bundle ConfigMap and the published
ClusterTrustBundle survive each of them; prune deletes an object the new version no longer
ships; and the injector gives its fields back before it is removed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from controlplane import ControlPlane
from controlplane.binaries import tool
from controlplane.server import free_port
from kube.client import ApiError, Client, is_not_found
from tests.integration.image_harness import ROOT, built_image
from tests.integration.signer_harness import eventually

pytestmark = pytest.mark.timeout(1800)

NAMESPACE = "service-serving-signer"
EXAMPLE_REGISTRY = "registry.example.com/platform"
PART_OF = "app.kubernetes.io/part-of=service-serving-signer"
INJECTOR = "service-serving-signer-injector"
VWC = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


def section(page: Path, heading: str) -> str:
    """The text under `heading` up to the next heading of the same or a higher level."""
    text = page.read_text()
    level = heading.split(" ", 1)[0]
    start = text.index(f"\n{heading}\n")
    following = re.compile(rf"\n#{{1,{len(level)}}} ")
    end = following.search(text, start + 1)
    return text[start : end.start() if end else len(text)]


def sh_blocks(page: Path, heading: str) -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", section(page, heading), re.S)
    assert blocks, f"{page.name}: no sh block under {heading!r}"
    return blocks


README = ROOT / "README.md"
INSTALL = ROOT / "docs" / "install.md"


@dataclass
class Workspace:
    """Where the documented commands run: a copy of config/ and charts/, dist/ pointing
    at the checkout's, a HOME of its own, the tools on PATH, the cluster in KUBECONFIG."""

    directory: Path
    env: dict[str, str]

    def run(
        self, script: str, *, check: bool = True, timeout: float = 900
    ) -> subprocess.CompletedProcess[str]:
        """Run `script` as bash does with `set -euo pipefail`; `make` runs in the
        checkout (the workspace's dist/ is the checkout's)."""
        preamble = f'set -euo pipefail\nmake() {{ command make -C "{ROOT}" "$@"; }}\n'
        result = subprocess.run(
            ["bash", "-c", preamble + script],
            cwd=self.directory,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check:
            assert result.returncode == 0, (
                f"exit {result.returncode}:\n{script}\n--- stdout\n{result.stdout}"
                f"\n--- stderr\n{result.stderr}"
            )
        return result


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    with ControlPlane.start() as started:
        yield started


@pytest.fixture(scope="module")
def admin(plane: ControlPlane) -> Client:
    client: Client = plane.client()
    return client


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`crane registry serve` on a loopback port: a real OCI distribution registry."""
    port = free_port()
    log = (tmp_path_factory.mktemp("registry") / "registry.log").open("wb")
    server = subprocess.Popen(
        [str(tool("crane")), "registry", "serve", "--address", f"127.0.0.1:{port}"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def serving() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    try:
        eventually(serving, timeout=30, what="crane registry serve")
        yield f"127.0.0.1:{port}/platform"
    finally:
        server.terminate()
        server.wait(10)
        log.close()


@pytest.fixture(scope="module")
def workspace(plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    directory = tmp_path_factory.mktemp("checkout")
    shutil.copytree(ROOT / "config", directory / "config")
    # symlinks=False: the chart's files/ links into config/ become files, as helm package does.
    shutil.copytree(ROOT / "charts", directory / "charts", symlinks=False)
    (ROOT / "dist").mkdir(exist_ok=True)
    (directory / "dist").symlink_to(ROOT / "dist")
    tools = directory / ".tools"
    tools.mkdir()
    for name in ("crane", "kustomize", "kubectl", "helm"):
        (tools / name).symlink_to(tool(name))
    home = directory / ".home"
    home.mkdir()
    env = {
        "PATH": f"{home}/.local/share/sss/bin:{tools}:{os.environ['PATH']}",
        "HOME": str(home),
        "KUBECONFIG": str(plane.kubeconfig),
        "HELM_CACHE_HOME": "/tmp/helm-cache",
        "LANG": "C.UTF-8",
        # The caches stay the machine's (pip's, the build venv of hack/dist.sh, the image's).
        "XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache"),
        **{k: v for k, v in os.environ.items() if k == "GOTOOLCHAIN"},
        **{k: v for k, v in os.environ.items() if k.startswith(("IMAGE_", "PIP_"))},
    }
    return Workspace(directory, env)


def manifest_digest(archive: Path) -> str:
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        assert member is not None
        (descriptor,) = json.load(member)["manifests"]
    return str(descriptor["digest"])


@dataclass
class Installed:
    image: str
    archive_digest: str


class LocalSigner:
    """The installed CLI's `run` with the evaluation CA, as the Deployment's Pod would run
    it (signer, publisher and injector), on loopback ports."""

    def __init__(self, work: Workspace) -> None:
        self.work = work
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        ca = self.work.directory / "ca"
        log = (self.work.directory / "signer.log").open("ab")
        self.process = subprocess.Popen(
            [
                str(self.work.directory / ".home/.local/share/sss/bin/service-serving-signer"),
                "run",
                "--controllers=*,injector",
                f"--service-serving-key={ca / 'ca.key'}",
                f"--service-serving-cert={ca / 'ca.crt'}",
                f"--service-serving-trust-bundle={ca / 'trust-bundle.pem'}",
                f"--kubeconfig={self.work.env['KUBECONFIG']}",
                f"--leader-elect-resource-namespace={NAMESPACE}",
                # The Deployment's Lease (a process running more controllers than `*`
                # would otherwise take a Lease named after them).
                f"--leader-elect-resource-name={NAMESPACE}",
                f"--metrics-bind-address=127.0.0.1:{free_port()}",
                f"--health-probe-bind-address=127.0.0.1:{free_port()}",
            ],
            cwd=self.work.directory,
            env=self.work.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(30)


def bundles(client: Client) -> list[str]:
    listed = client.get(
        "/apis/certificates.k8s.io/v1/clustertrustbundles",
        {"labelSelector": "app.kubernetes.io/managed-by=service-serving-signer"},
    )
    return sorted(item["metadata"]["name"] for item in listed["items"])


def exists(client: Client, path: str) -> bool:
    try:
        obj = client.get(path)
    except ApiError as err:
        if is_not_found(err):
            return False
        raise
    return not obj["metadata"].get("deletionTimestamp")


def assert_what_is_yours_survives(client: Client, published: list[str]) -> None:
    assert exists(client, f"/api/v1/namespaces/{NAMESPACE}"), "the namespace is gone"
    assert exists(client, f"/api/v1/namespaces/{NAMESPACE}/secrets/service-serving-signer-ca")
    assert exists(
        client, f"/api/v1/namespaces/{NAMESPACE}/configmaps/service-serving-signer-trust-bundle"
    )
    assert published and set(published) <= set(bundles(client)), "a published bundle is gone"


@pytest.fixture(scope="module")
def signer(workspace: Workspace) -> Iterator[LocalSigner]:
    running = LocalSigner(workspace)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def installed(workspace: Workspace, registry: str, admin: Client, signer: LocalSigner) -> Installed:
    """The README's quick install, steps 1 to 3, with kustomize."""
    archive = built_image().archive  # what `make image` (hack/image.sh) writes
    image_block, cli_block, apply_block = (
        b.replace(EXAMPLE_REGISTRY, registry) for b in sh_blocks(README, "## Quick install")[:3]
    )
    assert "crane push" in image_block and "make image" in image_block
    out = workspace.run(image_block + '\nprintf "IMAGE=%s\\n" "$IMAGE"\n').stdout
    (image,) = re.findall(r"^IMAGE=(.+)$", out, re.M)

    # Step 2: pipx installs the wheel into a venv of its own; the README's alternative
    # without pipx does exactly that, and runs here as written.
    assert "pipx install dist/service_serving_signer-" in cli_block
    without_pipx = re.search(r"\(or `(python3 -m venv [^`]+)`", README.read_text())
    assert without_pipx, "README: the pip alternative to pipx"
    workspace.run(cli_block.replace("pipx install", "true") + without_pipx.group(1) + "\n")

    workspace.run(f'IMAGE="{image}"\n' + apply_block)
    signer.start()
    eventually(lambda: bundles(admin), timeout=60, what="the local signer's ClusterTrustBundle")
    return Installed(image=image, archive_digest=manifest_digest(archive))


def deployment_images(client: Client) -> list[str]:
    deployment = client.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{NAMESPACE}")
    return [c["image"] for c in deployment["spec"]["template"]["spec"]["containers"]]


def test_the_quick_install_deploys_the_image_by_the_digest_the_registry_serves(
    installed: Installed, workspace: Workspace, registry: str, admin: Client
) -> None:
    repository, digest = installed.image.split("@")
    assert repository == f"{registry}/service-serving-signer"
    served = workspace.run(f"crane digest {registry}/service-serving-signer:0.1.0").stdout.strip()
    assert digest == served == installed.archive_digest
    assert deployment_images(admin) == [installed.image]
    # The registry serves that manifest by digest, as a kubelet pulls it.
    manifest = json.loads(workspace.run(f"crane manifest {installed.image}").stdout)
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"


def test_the_cli_from_the_wheel_alone_answers_status_and_as_a_kubectl_plugin(
    installed: Installed, workspace: Workspace
) -> None:
    """The wheel's venv holds no checkout: its `service-serving-signer` and the kubectl
    plugin find the running signer through KUBECONFIG."""
    venv = workspace.directory / ".home/.local/share/sss"
    where = workspace.run(f"{venv}/bin/python -c 'import cli; print(cli.__file__)'").stdout
    assert where.startswith(str(venv)), where
    plain = workspace.run("service-serving-signer status", check=False)
    plugin = workspace.run("kubectl service-serving-signer status", check=False)
    for result in (plain, plugin):
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Signer kubernetes.io/service-serving" in result.stdout
    # The README's step 4, but `rollout status`: this plane has no node to run the Pods.
    (verify,) = (b for b in sh_blocks(README, "## Quick install") if "rollout status" in b)
    lines = [line for line in verify.splitlines() if "rollout status" not in line]
    out = workspace.run("\n".join(lines)).stdout
    assert "service-serving-signer 0.1.0" in out
    assert f"deployed: {NAMESPACE}/{NAMESPACE}: {installed.image}" in out


def run_documented(work: Workspace, page: Path, heading: str, image: str) -> None:
    for block in sh_blocks(page, heading):
        work.run(f'IMAGE="{image}"\n' + block, timeout=300)


def extra_role(name: str) -> dict[str, Any]:
    """An object the previous version shipped and this one does not."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/part-of": "service-serving-signer"},
        },
        "rules": [],
    }


def test_the_documented_kustomize_upgrade_and_uninstall_keep_what_is_yours(
    installed: Installed, workspace: Workspace, admin: Client
) -> None:
    published = bundles(admin)
    # The previous version shipped one more object, applied as `kubectl apply -k` did.
    old = workspace.directory / "old.json"
    old.write_text(json.dumps(extra_role("service-serving-signer-dropped")))
    workspace.run(f"kubectl apply -f {old}")
    # kubectl's default prune allowlist holds Namespace: the bare prune the page used to
    # give must not take the namespace either (config/namespace carries no part-of).
    workspace.run(f"kubectl apply -k config/default --prune -l {PART_OF}")
    assert_what_is_yours_survives(admin, published)

    run_documented(workspace, INSTALL, "### Upgrade with kustomize", installed.image)
    role = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/roles"
    assert not exists(admin, f"{role}/service-serving-signer-dropped"), "prune kept it"
    assert exists(admin, f"{role}/service-serving-signer-leader-election")
    assert deployment_images(admin) == [installed.image]
    assert_what_is_yours_survives(admin, published)

    # The injector (in the local signer) owns an annotated webhook's caBundle.
    webhook = injected_webhook(admin)
    run_documented(workspace, INSTALL, "### Before removing the injector", installed.image)
    released = admin.get(f"{VWC}/{webhook}")
    assert INJECTOR not in managers(released), "the injector kept its fields"
    assert released["webhooks"][0]["clientConfig"].get("caBundle"), "the caBundle stays"

    run_documented(workspace, INSTALL, "### Uninstall with kustomize", installed.image)
    assert not exists(admin, f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{NAMESPACE}")
    assert not exists(admin, f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{NAMESPACE}")
    assert_what_is_yours_survives(admin, published)
    # Run again (a second uninstall, or one after a partial delete): still exit 0.
    run_documented(workspace, INSTALL, "### Uninstall with kustomize", installed.image)


def managers(obj: dict[str, Any]) -> list[str]:
    return [entry["manager"] for entry in obj["metadata"].get("managedFields") or []]


def injected_webhook(client: Client) -> str:
    name = f"documented-{int(time.time())}"
    selector = json.dumps({"signerName": "kubernetes.io/service-serving", "labelSelector": {}})
    client.create(
        VWC,
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {
                "name": name,
                "annotations": {"service-serving-signer/ca-bundle-from": selector},
            },
            "webhooks": [
                {
                    "name": f"{name}.example.com",
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Ignore",
                    "clientConfig": {"service": {"namespace": "default", "name": "absent"}},
                    "rules": [],
                }
            ],
        },
    )
    eventually(
        lambda: INJECTOR in managers(client.get(f"{VWC}/{name}")),
        timeout=60,
        what="the injector to fill the caBundle",
    )
    return name


def test_the_documented_helm_install_upgrade_and_uninstall_keep_what_is_yours(
    installed: Installed, workspace: Workspace, admin: Client
) -> None:
    published = bundles(admin)
    # After the kustomize uninstall (idempotent: --ignore-not-found), as a user switching.
    run_documented(workspace, INSTALL, "### Uninstall with kustomize", installed.image)
    (helm_block,) = (b for b in sh_blocks(README, "## Quick install") if "helm install" in b)
    workspace.run(f'IMAGE="{installed.image}"\n' + helm_block)
    assert deployment_images(admin) == [installed.image]
    assert_what_is_yours_survives(admin, published)

    run_documented(workspace, INSTALL, "### Upgrade with Helm", installed.image)
    assert deployment_images(admin) == [installed.image]
    values = json.loads(workspace.run(f"helm get values {NAMESPACE} -n {NAMESPACE} -o json").stdout)
    assert values["image"]["digest"] == installed.archive_digest
    assert_what_is_yours_survives(admin, published)

    run_documented(workspace, INSTALL, "### Uninstall with Helm", installed.image)
    assert not exists(admin, f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{NAMESPACE}")
    assert_what_is_yours_survives(admin, published)

"""The managed CA's injector gate engages in every documented install, through the
arguments each install ships: one process (`--controllers=*,injector` added to
config/managed's signer, docs/inject.md), the injector apart (an overlay of
config/default with the managed-ca and injector components), config/managed with the
injector component, and Helm with the injector on under a release name other than the
default. Each install is rendered (kustomize, `helm template`); its Deployments'
container args run as processes (`run`) with the Leases it ships, each as its
Deployment's ServiceAccount (a TokenRequest token) with the RBAC the install ships
applied (and, for one process, the injector's ClusterRole bound to the signer's
ServiceAccount, as docs/inject.md says): the gates hold where RBAC is what it ships.

Only what does not choose the report or the gate is changed from the shipped args: the
bind addresses (loopback ports), the namespace the Pod would be told (POD_NAMESPACE →
the test's namespace), a per-test signer name (no other test's bundles on the plane)
and a short propagation delay (the gate under test is the injector's, not the kubelet
refresh's).

One opted-in ValidatingWebhookConfiguration is frozen by a ValidatingAdmissionPolicy
refusing its UPDATEs: the swap is held, `ca status` and the leader's
`managed_ca_waiting_object` naming that object; once the policy is gone and the owner has
touched the object, the injector writes the next CA and the swap follows."""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane import ControlPlane
from controlplane.process import PRODUCT_SIGNER
from kube.client import ApiError, Client
from managedca.material import DEFAULT_SECRET_NAME, pem_fingerprints
from tests.integration import identities
from tests.integration.chart_harness import CHART, CONFIG, docs, helm, kustomize
from tests.integration.injector_harness import VWC_PATH, delete_quietly, validating_webhook
from tests.integration.managed_ca_harness import ca_cli, edit, phase
from tests.integration.manager_process import SignerProcess, eventually
from tests.integration.manifests import apply, object_path

POLICY_PATH = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
BINDING_PATH = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
# The test's own flags replace these of the shipped args (see the module's docstring).
REPLACED = (
    "--metrics-bind-address",
    "--health-probe-bind-address",
    "--log-format",
    "--signer-name",
    "--managed-ca-propagation-delay",
)

WAITING_OBJECT = "service_serving_ca_controller_managed_ca_waiting_object"
RBAC_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")

Install = list[dict[str, Any]]


def _overlay(tmp_path: Path, resources: list[str], components: list[str]) -> Path:
    directory = tmp_path / "overlay"
    directory.mkdir()
    rel = os.path.relpath(CONFIG, directory)
    (directory / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [f"{rel}/{r}" for r in resources],
                "components": [f"{rel}/{c}" for c in components],
            }
        )
    )
    return directory


def one_process(tmp_path: Path) -> Install:
    """docs/inject.md: config/managed's signer with `--controllers=*,injector`, and the
    injector's ClusterRole bound to the signer's ServiceAccount too."""
    objects = kustomize(CONFIG / "managed")
    [signer] = deployments(objects)
    pod = signer["spec"]["template"]["spec"]
    pod["containers"][0]["args"].append("--controllers=*,injector")
    role = yaml.safe_load((CONFIG / "injector" / "cluster_role.yaml").read_text())
    account = pod["serviceAccountName"]
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"{account}-injector"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": role["metadata"]["name"],
        },
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": account,
                "namespace": signer["metadata"]["namespace"],
            }
        ],
    }
    return [*objects, role, binding]


def injector_apart(tmp_path: Path) -> Install:
    """An overlay of config/default with the managed-ca and injector components."""
    return kustomize(_overlay(tmp_path, ["default"], ["managed-ca", "injector"]))


def managed_with_injector(tmp_path: Path) -> Install:
    """config/managed with the injector component."""
    return kustomize(_overlay(tmp_path, ["managed"], ["injector"]))


def helm_other_release(tmp_path: Path) -> Install:
    """`helm install sss … --set managedCA.enabled=true --set injector.enabled=true`."""
    result = helm(
        "template",
        "sss",
        str(CHART),
        "--namespace",
        "ops",
        "--set",
        "managedCA.enabled=true",
        "--set",
        "injector.enabled=true",
    )
    assert result.returncode == 0, result.stderr
    return docs(result.stdout)


TOPOLOGIES: dict[str, Callable[[Path], Install]] = {
    "one-process": one_process,
    "injector-apart": injector_apart,
    "managed-with-injector": managed_with_injector,
    "helm-other-release": helm_other_release,
}


def deployments(objects: Install) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == "Deployment"]


def container_args(deployment: dict[str, Any]) -> list[str]:
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return list(container.get("args", []))


def flag(args: list[str], name: str) -> str | None:
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")]
    return values[-1] if values else None


def grant(client: Client, objects: Install, namespace: str, signer_name: str) -> list[str]:
    """The install's RBAC on the plane as it would be in `namespace`: ServiceAccounts,
    Roles and RoleBindings there; its ClusterRoles and ClusterRoleBindings under names of
    this test's own (other tests apply the shipped ones), the signer's `sign`/`attest`
    rule naming this test's signer as the shipped one names the product's (what
    `--signer-name` asks of an install). Returns the cluster-scoped objects' paths."""
    suffix = uuid.uuid4().hex[:6]
    made = []
    for obj in [o for o in objects if o["kind"] in RBAC_KINDS]:
        body = copy.deepcopy(obj)
        cluster = body["kind"].startswith("Cluster")
        if cluster:
            body["metadata"]["name"] += f"-{suffix}"
        ref = body.get("roleRef") or {}
        if ref.get("kind") == "ClusterRole":
            ref["name"] += f"-{suffix}"
        for subject in body.get("subjects") or []:
            if subject.get("kind") == "ServiceAccount":
                subject["namespace"] = namespace
        for rule in body.get("rules") or []:
            if "signers" in rule.get("resources", []):
                names = rule.get("resourceNames", [])
                rule["resourceNames"] = [signer_name if n == PRODUCT_SIGNER else n for n in names]
        apply(client, body, dry_run=False, namespace=namespace)
        if cluster:
            made.append(object_path(body))
    return made


def kubeconfig_of(
    control_plane: ControlPlane,
    client: Client,
    deployment: dict[str, Any],
    namespace: str,
    directory: Path,
) -> Path:
    """A kubeconfig holding a TokenRequest token of the Deployment's ServiceAccount."""
    account = deployment["spec"]["template"]["spec"].get("serviceAccountName", "default")
    token = identities.service_account_token(client, namespace, account)
    path = directory / f"{account}.kubeconfig"
    return Path(control_plane.write_kubeconfig(path, token=token))


def shipped_leases(client: Client, objects: Install, namespace: str) -> None:
    """The Leases the install ships (empty), in the test's namespace."""
    for lease in [o for o in objects if o["kind"] == "Lease"]:
        body = copy.deepcopy(lease)
        body["metadata"] = {"name": lease["metadata"]["name"], "namespace": namespace}
        client.create(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", body)


class Running:
    """A documented install running in `namespace`: its shipped Leases and RBAC, each of
    its Deployments as a process under its own ServiceAccount with the rendered
    arguments (the test's namespace and a signer name of its own in place of what the
    Pod would get), stopped and its grants removed on leaving."""

    def __init__(
        self,
        topology: str,
        control_plane: ControlPlane,
        client: Client,
        namespace: str,
        tmp_path: Path,
    ) -> None:
        self.control_plane, self.client, self.namespace = control_plane, client, namespace
        self.objects = TOPOLOGIES[topology](tmp_path)
        self.signer_name = f"t{uuid.uuid4().hex[:10]}.example.com/managed"
        self.secret_path = f"/api/v1/namespaces/{namespace}/secrets/{DEFAULT_SECRET_NAME}"
        own = [
            f"--leader-elect-resource-namespace={namespace}",  # what POD_NAMESPACE tells
            f"--signer-name={self.signer_name}",
            "--managed-ca-propagation-delay=2s",
            "--managed-ca-allow-short-propagation-delay",
        ]
        shipped_leases(client, self.objects, namespace)
        self.granted = grant(client, self.objects, namespace, self.signer_name)
        self.processes: list[SignerProcess] = []
        self.lease = "service-serving-signer"
        for deployment in deployments(self.objects):
            args = [a for a in container_args(deployment) if a.split("=", 1)[0] not in REPLACED]
            if flag(args, "--ca-mode") == "managed":
                self.lease = flag(args, "--leader-elect-resource-name") or self.lease
                extra = own
            else:  # the injector's own Deployment: no signer flags
                extra = own[:1]
            self.processes.append(
                SignerProcess(
                    kubeconfig_of(control_plane, client, deployment, namespace, tmp_path),
                    None,
                    tmp_path / f"{deployment['metadata']['name']}.log",
                    *args,
                    *extra,
                    signer_name=None,
                )
            )

    def __enter__(self) -> Running:
        return self

    def __exit__(self, *_: object) -> None:
        for proc in self.processes:
            proc.stop()
        for path in self.granted:
            with contextlib.suppress(ApiError):
                self.client.delete(path)

    def ca(self, *args: str) -> Any:
        """`ca <args>` for this install's signer, as the admin."""
        return ca_cli(
            self.control_plane.kubeconfig,
            *args,
            f"--signer-namespace={self.namespace}",
            f"--signer-name={self.signer_name}",
        )

    def status(self) -> dict[str, Any]:
        out = self.ca("status", "-o", "json", f"--lease-name={self.lease}")
        assert out.returncode == 0, out.stderr
        return dict(json.loads(out.stdout))


def freeze(client: Client, hook: str) -> str:
    """A ValidatingAdmissionPolicy (and its binding) refusing every UPDATE of `hook`."""
    name = f"freeze-{hook}"
    client.create(
        POLICY_PATH,
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": ["admissionregistration.k8s.io"],
                            "apiVersions": ["*"],
                            "operations": ["UPDATE"],
                            "resources": ["validatingwebhookconfigurations"],
                            "resourceNames": [hook],
                        }
                    ]
                },
                "validations": [{"expression": "false", "message": f"{hook} is frozen"}],
            },
        },
    )
    client.create(
        BINDING_PATH,
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        },
    )
    return name


def thaw(client: Client, name: str) -> None:
    delete_quietly(client, BINDING_PATH, name)
    delete_quietly(client, POLICY_PATH, name)


def frozen(client: Client, hook: str) -> bool:
    """The policy refuses an UPDATE of `hook` now (a server-side dry run)."""
    vwc = client.get(f"{VWC_PATH}/{hook}")
    vwc["metadata"].setdefault("labels", {})["probe"] = uuid.uuid4().hex[:6]
    try:
        client.replace(f"{VWC_PATH}/{hook}", vwc, params={"dryRun": "All"})
    except ApiError:
        return True
    return False


def _touch(vwc: dict[str, Any]) -> None:
    vwc["metadata"].setdefault("annotations", {})["example.com/thawed"] = "true"


def held(client: Client, hook: str) -> set[str]:
    ca_bundle = client.get(f"{VWC_PATH}/{hook}")["webhooks"][0]["clientConfig"].get("caBundle")
    return set(pem_fingerprints(base64.b64decode(ca_bundle))) if ca_bundle else set()


@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
def test_a_frozen_injected_webhook_holds_the_swap_in_every_documented_install(
    topology: str, control_plane: ControlPlane, client: Client, namespace: str, tmp_path: Path
) -> None:
    with Running(topology, control_plane, client, namespace, tmp_path) as install:
        processes, lease, secret_path = install.processes, install.lease, install.secret_path
        signer_name, ca, status = install.signer_name, install.ca, install.status
        assert any("injector" in " ".join(p.args) for p in processes), "an injector runs"
        hook = f"gate-{uuid.uuid4().hex[:8]}"
        selector = json.dumps({"signerName": signer_name, "labelSelector": {}})
        client.create(VWC_PATH, validating_webhook(hook, f"unused-{hook}", "svc", selector))
        policy = ""
        try:
            assert eventually(lambda: phase(client, secret_path) == "Stable", 60)
            assert eventually(lambda: len(held(client, hook)) == 1, 30), "the webhook is injected"
            [old] = held(client, hook)
            policy = freeze(client, hook)
            assert eventually(lambda: frozen(client, hook), 30), "the policy is in force"
            assert ca("rotate").returncode == 0
            seen: list[dict[str, Any]] = []

            def waits_naming_the_hook() -> bool:
                seen.append(status())
                return seen[-1].get("reason") == "injector-not-converged" and hook in str(
                    seen[-1].get("waitingFor")
                )

            assert eventually(waits_naming_the_hook, 60), seen[-2:]
            assert phase(client, secret_path) == "Staged", "held"
            assert held(client, hook) == {old}, "the frozen webhook kept only the old root"
            text = ca("status", f"--lease-name={lease}")
            assert "[injector-not-converged]" in text.stdout and hook in text.stdout, text.stdout
            named = (
                f'kind="ValidatingWebhookConfiguration",name="{hook}",'
                'reason="injector-not-converged"'
            )
            assert eventually(
                lambda: any(p.metric(WAITING_OBJECT, named) == 1 for p in processes), 30
            )

            # Thawed: the policy goes and the owner touches the object. A write the API
            # refused is sent again at once when the object or the bundle changes, else only
            # after its back-off (decide.REFUSAL_FIRST, a minute): the touch keeps this short.
            thaw(client, policy)
            assert eventually(lambda: not frozen(client, hook), 30), "the policy is gone"
            edit(client, f"{VWC_PATH}/{hook}", _touch)
            assert eventually(lambda: phase(client, secret_path) == "Retiring", 90), status()
            assert len(held(client, hook)) == 2, "the swap followed the webhook holding both roots"
            # RBAC's refusals name the ServiceAccount (the frozen webhook's are the policy's).
            refused = [
                line
                for p in processes
                for line in p.log_lines()
                if "system:serviceaccount:" in line and " cannot " in line
            ]
            assert not refused, refused[:3]
            assert not any(p.metric(WAITING_OBJECT, named) for p in processes), "no longer held"
        finally:
            if policy:
                thaw(client, policy)
            delete_quietly(client, VWC_PATH, hook)

"""The opt-in ValidatingAdmissionPolicy component (config/injector-admission-policy): with
it, the injector's ServiceAccount — a stolen token of it — may write the leaves the
injector writes (caBundle of opted-in webhook configurations, APIServices and CRD
conversion; `ca.crt` and the truststore key of labelled ConfigMaps) and its own mark, and
nothing else: no ownerReferences (the garbage collector would delete the object), no
finalizers, no other label or annotation, no other spec field, no managedFields entry for
a manager that had none, and no change to another manager's entry on any kind but what
the injector's writes cause (the server taking the injector's leaves, or folding old
Update entries into `ancient-changes`) and what its release hands over — so no key of a
ConfigMap can be moved into a GitOps applier's entry for its next apply to delete. With
config/injector-distribution it may create and delete only ConfigMaps shaped like the
distributor's copies, and fill the distribution key once.

Against the real kube-apiserver, 1.37 and 1.38, as that ServiceAccount (a TokenRequest
token): a table of forbidden writes, each refused with its rule's message; the writes the
injector and the distributor make, each admitted; the real process (injector and
distributor) under the token with the policy on, refused nothing; and every field the API
server's OpenAPI schema gives those kinds is compared by the policy, so a field a new
version adds fails here instead of passing unchecked."""

from __future__ import annotations

import copy
import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives.serialization import Encoding

from controlplane import ControlPlane, binaries
from distributor import decide
from distributor.key import KEY_SECRET
from injector.configmaps import departed_record
from injector.kinds import API_SERVICE, CRD, VALIDATING_WEBHOOK, to_target
from injector.targets import Kind, release_ops
from kube.client import ApiError, Client, is_not_found
from tests.integration.identities import can, service_account_token
from tests.integration.injector_harness import (
    LEASE,
    NS,
    RBAC_KINDS,
    SA,
    SUBJECT,
    VWC_PATH,
    api_service,
    b64,
    conversion_crd,
    delete_quietly,
    validating_webhook,
)
from tests.integration.manager_process import SignerProcess
from tests.integration.manifests import apply as apply_manifest
from tests.integration.manifests import ensure_namespace
from tests.integration.publisher_harness import ctb_path, ctb_version
from tests.integration.signer_harness import eventually
from tests.integration.test_injector_distribution import configuration
from tests.unit.deploy.kustomize import CONFIG, render
from trust.bundle import bundle_name, normalize_bundle
from trust.ca import generate_ca
from trust.consumers import ANNOTATION, FIELD_MANAGER, LABEL, TRUSTSTORE_ANNOTATION

POLICY = CONFIG / "injector-admission-policy" / "policy.yaml"
JSON_PATCH = "application/json-patch+json"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
MWC_PATH = f"{ADMISSION}/mutatingwebhookconfigurations"
APISERVICES = "/apis/apiregistration.k8s.io/v1/apiservices"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
KEY_PATH = f"/api/v1/namespaces/{NS}/secrets/{KEY_SECRET}"
PATHS = {
    "ValidatingAdmissionPolicy": f"{ADMISSION}/validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": f"{ADMISSION}/validatingadmissionpolicybindings",
}
MARK_LABEL = "service-serving-signer/ca-injected"
STORE_KEY = "truststore.p12"
OPS = "ops"
"""A field manager that added a key to a ConfigMap by hand (a merge patch: an Update)."""
MERGE = "application/merge-patch+json"
APPLY = "application/apply-patch+yaml"
INJECTED = "service-serving-signer/injected"
TEAM = "example.com/team"
"""An annotation of the administrator's on the objects to release."""
VERSIONS = [binaries.KUBERNETES_VERSION, binaries.NEXT_VERSION]
on_both = pytest.mark.parametrize(
    "plane", VERSIONS, indirect=True, ids=lambda v: "kube-" + ".".join(v[1:].split(".")[:2])
)


def refused(write: Callable[[], Any]) -> str:
    """The API's refusal of `write()` ("" when it succeeded)."""
    try:
        write()
    except ApiError as err:
        return str(err)
    return ""


def patch(client: Client, path: str, *ops: dict[str, Any], dry_run: bool = False) -> Any:
    params = {"fieldManager": FIELD_MANAGER, **({"dryRun": "All"} if dry_run else {})}
    return client.patch(path, list(ops), patch_type=JSON_PATCH, params=params)


def escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def distribution_objects() -> list[dict[str, Any]]:
    """config/injector-distribution's RBAC and its (empty) key Secret."""
    return [
        o for o in render(CONFIG / "injector-distribution") if o["kind"] in RBAC_KINDS | {"Secret"}
    ]


@dataclass
class Installed:
    plane: ControlPlane
    admin: Client
    injector: Client
    kubeconfig: Path


@pytest.fixture
def installed(plane: ControlPlane, plane_client: Client, tmp_path: Path) -> Iterator[Installed]:
    """config/injector and config/injector-distribution (RBAC, key Secret) and the policy
    component on `plane`, a client with the injector's ServiceAccount token; the policy
    and the distribution RBAC removed afterwards (the injector's own RBAC tests pin what
    it may do without them)."""
    admin = plane_client
    ensure_namespace(admin, NS)
    for obj in render(CONFIG / "injector"):
        if obj["kind"] in RBAC_KINDS:
            apply_manifest(admin, obj, dry_run=False, namespace=NS)
    extra = distribution_objects()
    delete_quietly(admin, f"/api/v1/namespaces/{NS}/secrets", KEY_SECRET)  # empty again
    for obj in extra:
        apply_manifest(admin, obj, dry_run=False, namespace=NS)
    policies = [d for d in yaml.safe_load_all(POLICY.read_text()) if d]
    for obj in policies:
        delete_quietly(admin, PATHS[obj["kind"]], obj["metadata"]["name"])
        admin.create(PATHS[obj["kind"]], obj)
    kubeconfig = plane.write_kubeconfig(
        tmp_path / "injector.kubeconfig", token=service_account_token(admin, NS, SA)
    )
    injector = Client.from_kubeconfig(str(kubeconfig))
    try:
        wait_for_policies(admin, injector)
        yield Installed(plane, admin, injector, kubeconfig)
    finally:
        for obj in reversed(policies):
            delete_quietly(admin, PATHS[obj["kind"]], obj["metadata"]["name"])
        for obj in extra:
            if obj["kind"] in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
                kind = {
                    "ClusterRole": "clusterroles",
                    "ClusterRoleBinding": "clusterrolebindings",
                    "Role": f"namespaces/{NS}/roles",
                    "RoleBinding": f"namespaces/{NS}/rolebindings",
                }[obj["kind"]]
                delete_quietly(
                    admin, f"/apis/rbac.authorization.k8s.io/v1/{kind}", obj["metadata"]["name"]
                )
        eventually(lambda: not can(admin, SUBJECT, "create", "configmaps", namespace=NS))


def wait_for_policies(admin: Client, injector: Client) -> None:
    """Until kube-apiserver enforces every policy (each loads on its own): a dry-run write
    each one refuses, made as the injector."""
    suffix = uuid.uuid4().hex[:6]
    probe_ns = f"policy-probe-{suffix}"
    ensure_namespace(admin, probe_ns)
    hook = f"policy-probe-{suffix}"
    admin.create(VWC_PATH, validating_webhook(hook, f"unused-{hook}", "svc", None))
    admin.create(f"/api/v1/namespaces/{probe_ns}/configmaps", {"metadata": {"name": "probe"}})
    label = {"op": "add", "path": "/metadata/labels", "value": {"probe": "x"}}
    probes: dict[str, Callable[[], Any]] = {
        "webhooks": lambda: patch(injector, f"{VWC_PATH}/{hook}", label, dry_run=True),
        "configmaps": lambda: patch(
            injector, f"/api/v1/namespaces/{probe_ns}/configmaps/probe", label, dry_run=True
        ),
        "configmap-copies": lambda: injector.create(
            f"/api/v1/namespaces/{probe_ns}/configmaps",
            {"metadata": {"name": "not-a-copy"}},
            params={"dryRun": "All"},
        ),
        "distribution-key": lambda: injector.replace(
            KEY_PATH,
            (lambda s: s | {"metadata": s["metadata"] | {"labels": {"probe": "x"}}})(
                injector.get(KEY_PATH)
            ),
            params={"dryRun": "All"},
        ),
    }
    try:
        for name, probe in probes.items():
            eventually(
                partial(enforced, probe),
                timeout=60,
                interval=0.25,
                what=f"the {name} policy to be enforced",
            )
    finally:
        delete_quietly(admin, VWC_PATH, hook)
        admin.delete(f"/api/v1/namespaces/{probe_ns}")
    # The APIService and CRD policies load with the others; each table row below names
    # its message, so one that was not yet enforced fails there, not silently.


def enforced(probe: Callable[[], Any]) -> bool:
    return "ValidatingAdmissionPolicy" in refused(probe)


def mutating_webhook(name: str, annotation: str | None) -> dict[str, Any]:
    obj = validating_webhook(name, f"unused-{name}", "svc", annotation)
    obj["kind"] = "MutatingWebhookConfiguration"
    for hook in obj["webhooks"]:
        hook["reinvocationPolicy"] = "Never"
    return obj


def copy_shaped(name: str, **extra_data: str) -> dict[str, Any]:
    """A ConfigMap of a distributor copy's shape (`decide.copy_body`)."""
    return {
        "metadata": {
            "name": name,
            "labels": {LABEL: "true", decide.FROM_LABEL: "trust"},
            "annotations": {
                ANNOTATION: '{"name": "x"}',
                decide.MARK_ANNOTATION: "0" * 64,
            },
        },
        "data": {"ca.crt": "pem", **extra_data},
    }


GHOST_CLUSTER_OWNER = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "name": "ghost",
    "uid": "00000000-0000-0000-0000-000000000001",
}
GHOST_OWNER = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "name": "ghost",
    "uid": GHOST_CLUSTER_OWNER["uid"],
}
FOREIGN_ENTRY = {
    "manager": "argocd-controller",
    "operation": "Apply",
    "apiVersion": "v1",
    "fieldsType": "FieldsV1",
    "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}}}},
}

MSG_META = "may not change ownerReferences, finalizers or generateName"
MSG_MANAGED = "may not add a managedFields entry for another manager"
MSG_OTHERS = "may change another manager's managedFields entry only"
MSG_OWN = "may not add to its own managedFields entry"
MSG_GONE = "may remove another manager's managedFields entry only"
MSG_ANCIENT = "may fold only Update entries it removes into ancient-changes"
MSG_LABELS = "may change only its own labels"
MSG_ANNOTATIONS = "may change only its own annotations"
MSG_HOOKS = "may change only webhooks[].clientConfig.caBundle"
MSG_OPT_IN = "only where service-serving-signer/ca-bundle-from asks"
MSG_APISERVICE = "may change only spec.caBundle"
MSG_CRD = "may change only spec.conversion.webhook.clientConfig.caBundle"
MSG_DATA = "may change only data[ca.crt]"
MSG_IMMUTABLE = "may not change immutable"
MSG_UNLABELLED = "only into ConfigMaps labelled"
MSG_COPIES = "may create or delete only trust distributor copies"
MSG_KEY = "may only fill an empty distribution key"


@dataclass
class Objects:
    vwc: str
    plain_vwc: str
    mwc: str
    apiservice: str
    crd: str
    cms: str
    """The ConfigMaps' collection path (in the test's namespace)."""
    released_vwc: str
    released_api: str
    released_crd: str
    """Objects the injector wrote (the first webhook's caBundle of two; the APIService's;
    the CRD's; each with its note annotation) whose annotation an administrator then
    removed, adding an annotation `TEAM` of their own: to be released."""
    released_cm: str
    """A ConfigMap the injector wrote (`ca.crt`, the truststore `STORE_KEY`, its note and
    mark) beside the administrator's `app.conf` and `OPS`' `db-password-ref`, whose
    opt-in label the administrator then removed: to be released."""
    marked_cm: str
    """A ConfigMap whose `ca.crt` `OPS` wrote and where the injector wrote only its mark,
    whose opt-in label the administrator then removed: to be released, with no `ca.crt`
    of the injector's to hand over."""


@pytest.fixture
def objects(installed: Installed, plane_namespace: str) -> Iterator[Objects]:
    """One of each kind, made by an administrator: opted-in webhook configurations
    (validating and mutating), one that never opted in, an opted-in APIService and CRD,
    and ConfigMaps: labelled `trust`, unlabelled `app`, a tenant's labelled `web-ca`, a
    distributor copy `copy`, and `lookalike` (a copy's label and mark, and a key of its
    own); and one of each caBundle kind to release (`Objects.released_vwc`)."""
    admin = installed.admin
    suffix = uuid.uuid4().hex[:6]
    selector = '{"signerName": "example.com/policy", "labelSelector": {}}'
    made = Objects(
        vwc=f"policy-opted-{suffix}",
        plain_vwc=f"policy-plain-{suffix}",
        mwc=f"policy-mutating-{suffix}",
        apiservice=f"v1alpha1.p{suffix}.policy.example.com",
        crd=f"things.p{suffix}.policy.example.com",
        cms=f"/api/v1/namespaces/{plane_namespace}/configmaps",
        released_vwc=f"policy-released-{suffix}",
        released_api=f"v1alpha1.r{suffix}.policy.example.com",
        released_crd=f"things.r{suffix}.policy.example.com",
        released_cm=f"/api/v1/namespaces/{plane_namespace}/configmaps/released",
        marked_cm=f"/api/v1/namespaces/{plane_namespace}/configmaps/marked",
    )
    admin.create(VWC_PATH, validating_webhook(made.vwc, f"unused-{suffix}", "svc", selector))
    admin.create(VWC_PATH, validating_webhook(made.plain_vwc, f"unused-{suffix}", "svc", None))
    admin.create(MWC_PATH, mutating_webhook(made.mwc, selector))
    admin.create(
        APISERVICES, api_service(f"p{suffix}.policy.example.com", f"unused-{suffix}", selector)
    )
    admin.create(
        CRDS, conversion_crd(f"p{suffix}.policy.example.com", f"unused-{suffix}", selector)
    )
    admin.create(
        made.cms,
        {
            "metadata": {
                "name": "trust",
                "labels": {LABEL: "true"},
                "annotations": {ANNOTATION: selector},
            },
            "data": {"ca.crt": "old", "app.conf": "x"},
        },
    )
    admin.create(
        made.cms, {"metadata": {"name": "app"}, "data": {"ca.crt": "old", "app.conf": "x"}}
    )
    admin.patch(
        f"{made.cms}/app",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "app"},
            "data": {"mode": "a"},
        },
        patch_type=APPLY,
        params={"fieldManager": "flux"},
    )
    admin.create(
        made.cms,
        {
            "metadata": {
                "name": "web-ca",
                "labels": {LABEL: "true"},
                "annotations": {ANNOTATION: selector},
            },
            "data": {"ca.crt": "the real anchors"},
        },
    )
    admin.create(made.cms, copy_shaped("copy"))
    admin.create(
        made.cms,
        {
            "metadata": {
                "name": "released",
                "labels": {LABEL: "true"},
                "annotations": {ANNOTATION: selector, TRUSTSTORE_ANNOTATION: STORE_KEY},
            },
            "data": {"app.conf": "x"},
        },
    )
    admin.patch(
        made.released_cm,
        {"data": {"db-password-ref": "vault:db"}},
        patch_type=MERGE,
        params={"fieldManager": OPS},
    )
    patch(
        installed.injector,
        made.released_cm,
        {"op": "add", "path": "/data/ca.crt", "value": "anchors"},
        {"op": "add", "path": "/binaryData", "value": {STORE_KEY: b64("store")}},
        {"op": "add", "path": f"/metadata/annotations/{escape(INJECTED)}", "value": "{}"},
        {"op": "add", "path": f"/metadata/labels/{escape(MARK_LABEL)}", "value": "true"},
    )
    admin.patch(made.released_cm, {"metadata": {"labels": {LABEL: None}}})
    admin.create(
        made.cms,
        {
            "metadata": {
                "name": "marked",
                "labels": {LABEL: "true"},
                "annotations": {ANNOTATION: selector},
            },
            "data": {"app.conf": "x"},
        },
    )
    admin.patch(
        made.marked_cm,
        {"data": {"ca.crt": "theirs"}},
        patch_type=MERGE,
        params={"fieldManager": OPS},
    )
    patch(
        installed.injector,
        made.marked_cm,
        {"op": "add", "path": f"/metadata/labels/{escape(MARK_LABEL)}", "value": "true"},
    )
    admin.patch(made.marked_cm, {"metadata": {"labels": {LABEL: None}}})
    admin.create(made.cms, copy_shaped("lookalike", Corefile=".:53 {}"))
    released = f"r{suffix}.policy.example.com"
    admin.create(
        VWC_PATH,
        validating_webhook(made.released_vwc, f"unused-{suffix}", "svc", selector, webhooks=2),
    )
    admin.create(APISERVICES, api_service(released, f"unused-{suffix}", selector))
    admin.create(CRDS, conversion_crd(released, f"unused-{suffix}", selector))
    ca = b64(generate_ca("released").cert.public_bytes(Encoding.PEM))
    for path, leaf in (
        (f"{VWC_PATH}/{made.released_vwc}", "/webhooks/0/clientConfig/caBundle"),
        (f"{APISERVICES}/{made.released_api}", "/spec/caBundle"),
        (f"{CRDS}/{made.released_crd}", "/spec/conversion/webhook/clientConfig/caBundle"),
    ):
        note = {"op": "add", "path": f"/metadata/annotations/{escape(INJECTED)}", "value": "{}"}
        patch(installed.injector, path, {"op": "add", "path": leaf, "value": ca}, note)
        admin.patch(path, {"metadata": {"annotations": {ANNOTATION: None, TEAM: "a"}}})
    try:
        yield made
    finally:
        delete_quietly(admin, VWC_PATH, made.released_vwc)
        delete_quietly(admin, APISERVICES, made.released_api)
        delete_quietly(admin, CRDS, made.released_crd)
        delete_quietly(admin, VWC_PATH, made.vwc)
        delete_quietly(admin, VWC_PATH, made.plain_vwc)
        delete_quietly(admin, MWC_PATH, made.mwc)
        delete_quietly(admin, APISERVICES, made.apiservice)
        delete_quietly(admin, CRDS, made.crd)


def forbidden_writes(injector: Client, o: Objects) -> dict[str, tuple[Callable[[], Any], str]]:
    """Every write a stolen token might try, and the message of the rule that refuses it."""
    vwc, mwc = f"{VWC_PATH}/{o.vwc}", f"{MWC_PATH}/{o.mwc}"
    plain = f"{VWC_PATH}/{o.plain_vwc}"
    api, crd = f"{APISERVICES}/{o.apiservice}", f"{CRDS}/{o.crd}"
    trust, app, copy_ = f"{o.cms}/trust", f"{o.cms}/app", f"{o.cms}/copy"

    def add(path: str, at: str, value: Any) -> Callable[[], Any]:
        return lambda: patch(injector, path, {"op": "add", "path": at, "value": value})

    def replace(path: str, at: str, value: Any) -> Callable[[], Any]:
        return lambda: patch(injector, path, {"op": "replace", "path": at, "value": value})

    def remove(path: str, at: str) -> Callable[[], Any]:
        return lambda: patch(injector, path, {"op": "remove", "path": at})

    def forged_manager(path: str) -> Callable[[], Any]:
        def write() -> Any:
            live = injector.get(path)
            entries = live["metadata"].get("managedFields") or []
            entry = {
                **FOREIGN_ENTRY,
                "apiVersion": live["apiVersion"],
                "time": "2026-01-01T00:00:00Z",
            }
            return patch(
                injector,
                path,
                {"op": "replace", "path": "/metadata/managedFields", "value": [*entries, entry]},
            )

        return write

    def create(body: dict[str, Any]) -> Callable[[], Any]:
        return lambda: injector.create(o.cms, body)

    def entries(
        path: str, change: Callable[[list[dict[str, Any]]], Any], release: bool = False
    ) -> Callable[[], Any]:
        """`change` made to the object's managedFields (and our entries removed, for
        `release`): one replace of the list."""

        def write() -> Any:
            managed = copy.deepcopy(injector.get(path)["metadata"]["managedFields"])
            change(managed)
            if release:
                managed = [e for e in managed if e["manager"] != FIELD_MANAGER]
            return patch(
                injector,
                path,
                {"op": "replace", "path": "/metadata/managedFields", "value": managed},
            )

        return write

    team = f"/metadata/annotations/{escape(TEAM)}"

    def released_and(kind: Kind, path: str, *more: dict[str, Any]) -> Callable[[], Any]:
        """The injector's own release of `path` (`release_ops`), with `more` in its patch."""

        def write() -> Any:
            target = to_target(kind, injector.get(path))
            assert target.note is not None, f"no note to remove on {path}"
            return patch(injector, path, *release_ops(target), *more)

        return write

    def other(managed: list[dict[str, Any]]) -> dict[str, Any]:
        """The fieldsV1 of the administrator's entry (what made the object; not the
        API server's status entry)."""
        fields: dict[str, Any] = next(
            e for e in managed if e["manager"] != FIELD_MANAGER and not e.get("subresource")
        )["fieldsV1"]
        return fields

    def mine(managed: list[dict[str, Any]]) -> dict[str, Any]:
        """The fieldsV1 of the injector's entry (made, if an earlier write took it)."""
        found = [e for e in managed if e["manager"] == FIELD_MANAGER]
        if not found:
            found = [{**managed[0], "manager": FIELD_MANAGER, "operation": "Update"}]
            managed.append(found[0])
        fields: dict[str, Any] = found[0].setdefault("fieldsV1", {})
        return fields

    def hook_config(fields: dict[str, Any], index: int) -> dict[str, Any]:
        """The clientConfig of the `index`th webhook in `fields` (by name)."""
        hooks = fields["f:webhooks"]
        item: dict[str, Any] = hooks[sorted(k for k in hooks if k.startswith("k:"))[index]]
        config: dict[str, Any] = item.setdefault("f:clientConfig", {})
        return config

    def own_a_label(managed: list[dict[str, Any]]) -> None:
        other(managed).setdefault("f:metadata", {})["f:labels"] = {"f:team": {}}

    def forget_the_opt_in(managed: list[dict[str, Any]]) -> None:
        other(managed)["f:metadata"]["f:annotations"].pop(f"f:{ANNOTATION}")

    def forget_rules(managed: list[dict[str, Any]]) -> None:
        for item in other(managed)["f:webhooks"].values():
            item.pop("f:rules", None)

    def hand(index: int) -> Callable[[list[dict[str, Any]]], None]:
        def change(managed: list[dict[str, Any]]) -> None:
            hook_config(other(managed), index)["f:caBundle"] = {}

        return change

    def hand_with_url(managed: list[dict[str, Any]]) -> None:
        hook_config(other(managed), 0).update({"f:caBundle": {}, "f:url": {}})

    def hand_api_with_skip(managed: list[dict[str, Any]]) -> None:
        other(managed)["f:spec"].update({"f:caBundle": {}, "f:insecureSkipTLSVerify": {}})

    def hand_crd_with_versions(managed: list[dict[str, Any]]) -> None:
        spec = other(managed)["f:spec"]
        spec["f:conversion"]["f:webhook"]["f:clientConfig"]["f:caBundle"] = {}
        spec["f:preserveUnknownFields"] = {}

    def claim_second(managed: list[dict[str, Any]]) -> None:
        mine(managed).setdefault("f:webhooks", {}).update(
            {
                k: {"f:clientConfig": {"f:caBundle": {}}}
                for k in other(managed)["f:webhooks"]
                if k.startswith("k:")
            }
        )

    def forged_own_entry(managed: list[dict[str, Any]]) -> None:
        keys = [k for k in other(managed)["f:webhooks"] if k.startswith("k:")]
        managed.append(
            {
                "manager": FIELD_MANAGER,
                "operation": "Update",
                "apiVersion": "admissionregistration.k8s.io/v1",
                "time": "2026-01-01T00:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:webhooks": {k: {"f:clientConfig": {"f:caBundle": {}}} for k in keys}
                },
            }
        )

    def forget_a_key(managed: list[dict[str, Any]]) -> None:
        owner = next(e for e in managed if "f:app.conf" in e["fieldsV1"].get("f:data", {}))
        owner["fieldsV1"]["f:data"].pop("f:app.conf")

    def drop_ops(managed: list[dict[str, Any]]) -> None:
        managed.remove(next(e for e in managed if e["manager"] == OPS))

    def hand_ca_crt(managed: list[dict[str, Any]]) -> None:
        other(managed)["f:data"]["f:ca.crt"] = {}

    def move_the_ops_key(managed: list[dict[str, Any]]) -> None:
        # What would make the owner's next apply delete db-password-ref.
        other(managed)["f:data"]["f:db-password-ref"] = {}
        next(e for e in managed if e["manager"] == OPS)["fieldsV1"]["f:data"].pop(
            "f:db-password-ref"
        )

    def move_their_ca_crt(managed: list[dict[str, Any]]) -> None:
        managed.remove(next(e for e in managed if e["manager"] == OPS))
        other(managed)["f:data"]["f:ca.crt"] = {}

    def forged_ca_crt_entry(managed: list[dict[str, Any]]) -> None:
        managed.append(
            {
                "manager": FIELD_MANAGER,
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2026-01-01T00:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {"f:ca.crt": {}}},
            }
        )

    def ancient(fields: dict[str, Any]) -> dict[str, Any]:
        return {
            "manager": "ancient-changes",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2026-01-01T00:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": fields,
        }

    def fold_flux(managed: list[dict[str, Any]]) -> None:
        # The API server folds only Update entries into ancient-changes.
        flux = next(e for e in managed if e["manager"] == "flux")
        managed.remove(flux)
        managed.append(ancient(flux["fieldsV1"]))

    def forge_ancient_label(managed: list[dict[str, Any]]) -> None:
        entry = ancient({"f:metadata": {"f:labels": {"f:team": {}}}})
        managed.append({**entry, "apiVersion": managed[0]["apiVersion"]})

    def forge_ancient_changes(managed: list[dict[str, Any]]) -> None:
        managed.append(ancient({"f:data": {"f:app.conf": {}}}))

    def claim_a_key(managed: list[dict[str, Any]]) -> None:
        mine(managed)["f:data"]["f:app.conf"] = {}

    hook = "/webhooks/0"
    done = f"{VWC_PATH}/{o.released_vwc}"
    done_api, done_crd = f"{APISERVICES}/{o.released_api}", f"{CRDS}/{o.released_crd}"
    return {
        # ownerReferences (the garbage collector deletes an object whose owner is gone),
        # finalizers (they block deletion), on every kind, opted in or not.
        "webhook: ownerReference": (
            add(vwc, "/metadata/ownerReferences", [GHOST_CLUSTER_OWNER]),
            MSG_META,
        ),
        "never-opted webhook: ownerReference": (
            add(plain, "/metadata/ownerReferences", [GHOST_CLUSTER_OWNER]),
            MSG_META,
        ),
        "webhook: finalizer": (add(vwc, "/metadata/finalizers", ["example.com/stuck"]), MSG_META),
        "mutating webhook: ownerReference": (
            add(mwc, "/metadata/ownerReferences", [GHOST_CLUSTER_OWNER]),
            MSG_META,
        ),
        "APIService: ownerReference": (
            add(api, "/metadata/ownerReferences", [GHOST_CLUSTER_OWNER]),
            MSG_META,
        ),
        "APIService: finalizer": (
            add(api, "/metadata/finalizers", ["example.com/stuck"]),
            MSG_META,
        ),
        "CRD: ownerReference": (
            add(crd, "/metadata/ownerReferences", [GHOST_CLUSTER_OWNER]),
            MSG_META,
        ),
        "CRD: finalizer": (add(crd, "/metadata/finalizers", ["example.com/stuck"]), MSG_META),
        "labelled ConfigMap: ownerReference": (
            add(trust, "/metadata/ownerReferences", [GHOST_OWNER]),
            MSG_META,
        ),
        "unlabelled ConfigMap: ownerReference": (
            add(app, "/metadata/ownerReferences", [GHOST_OWNER]),
            MSG_META,
        ),
        "unlabelled ConfigMap: finalizer": (
            add(app, "/metadata/finalizers", ["example.com/stuck"]),
            MSG_META,
        ),
        "copy: ownerReference": (add(copy_, "/metadata/ownerReferences", [GHOST_OWNER]), MSG_META),
        # managedFields: another manager made the owner of fields it never applied.
        "webhook: managedFields entry for another manager": (forged_manager(vwc), MSG_MANAGED),
        "ConfigMap: managedFields entry for another manager": (forged_manager(trust), MSG_MANAGED),
        # managedFields: another manager's entry changed, beyond the release's handover
        # (an owner made to own a field applies it away; one made to forget a field can
        # no longer remove it).
        "webhook: another manager made to own a label": (entries(vwc, own_a_label), MSG_OTHERS),
        "webhook: another manager made to forget its rules": (
            entries(vwc, forget_rules),
            MSG_OTHERS,
        ),
        "webhook: another manager made to forget its annotation": (
            entries(vwc, forget_the_opt_in),
            MSG_OTHERS,
        ),
        "APIService: another manager made to own a label": (
            entries(api, own_a_label),
            MSG_OTHERS,
        ),
        "CRD: another manager made to own a label": (entries(crd, own_a_label), MSG_OTHERS),
        # An entry of another manager removed (here every entry, the API server's way
        # to strip managedFields) leaves its fields to nobody: its next apply no longer
        # removes a field it stops applying.
        "webhook: every managedFields entry stripped": (
            replace(vwc, "/metadata/managedFields", [{}]),
            MSG_GONE,
        ),
        "APIService: every managedFields entry stripped": (
            replace(api, "/metadata/managedFields", [{}]),
            MSG_GONE,
        ),
        "CRD: every managedFields entry stripped": (
            replace(crd, "/metadata/managedFields", [{}]),
            MSG_GONE,
        ),
        "ConfigMap: another manager made to own a label": (
            entries(trust, own_a_label),
            MSG_OTHERS,
        ),
        "unlabelled ConfigMap: another manager made to forget a key": (
            entries(app, forget_a_key),
            MSG_OTHERS,
        ),
        "released ConfigMap: ca.crt handed over, the injector's entry kept": (
            entries(o.released_cm, hand_ca_crt),
            MSG_OTHERS,
        ),
        "released ConfigMap: another manager's key handed to the owner at the release": (
            entries(o.released_cm, move_the_ops_key, release=True),
            MSG_OTHERS,
        ),
        "webhook: an ancient-changes entry owning what no entry folded into it did": (
            entries(vwc, forge_ancient_label),
            MSG_ANCIENT,
        ),
        "APIService: an ancient-changes entry owning what no entry folded into it did": (
            entries(api, forge_ancient_label),
            MSG_ANCIENT,
        ),
        "CRD: an ancient-changes entry owning what no entry folded into it did": (
            entries(crd, forge_ancient_label),
            MSG_ANCIENT,
        ),
        "unlabelled ConfigMap: an ancient-changes entry owning what no entry folded into it did": (
            entries(app, forge_ancient_changes),
            MSG_ANCIENT,
        ),
        "released ConfigMap: a ca.crt the injector never owned handed over": (
            entries(o.marked_cm, move_their_ca_crt, release=True),
            MSG_OTHERS,
        ),
        "released webhook: caBundle handed over, the injector's entry kept": (
            entries(done, hand(0)),
            MSG_OTHERS,
        ),
        "released webhook: a caBundle the injector never owned handed over": (
            entries(done, hand(1), release=True),
            MSG_OTHERS,
        ),
        "released webhook: url handed over with the caBundle": (
            entries(done, hand_with_url, release=True),
            MSG_OTHERS,
        ),
        "released APIService: insecureSkipTLSVerify handed over with the caBundle": (
            entries(done_api, hand_api_with_skip, release=True),
            MSG_OTHERS,
        ),
        "released CRD: preserveUnknownFields handed over with the caBundle": (
            entries(done_crd, hand_crd_with_versions, release=True),
            MSG_OTHERS,
        ),
        # The release removes the injector's note annotation, never another one.
        "released webhook: the release removes another annotation too": (
            released_and(VALIDATING_WEBHOOK, done, {"op": "remove", "path": team}),
            MSG_ANNOTATIONS,
        ),
        "released APIService: the release rewrites another annotation": (
            released_and(API_SERVICE, done_api, {"op": "replace", "path": team, "value": "b"}),
            MSG_ANNOTATIONS,
        ),
        # ... or first made the injector's own, to be handed over next.
        "never-opted webhook: an entry of the injector's owning its caBundle": (
            entries(plain, forged_own_entry),
            MSG_OWN,
        ),
        "released webhook: the injector's entry made to own another caBundle": (
            entries(done, claim_second),
            MSG_OWN,
        ),
        "unlabelled ConfigMap: an entry of the injector's owning its ca.crt": (
            entries(app, forged_ca_crt_entry),
            MSG_OWN,
        ),
        "released ConfigMap: the injector's entry made to own another key": (
            entries(o.released_cm, claim_a_key),
            MSG_OWN,
        ),
        # (After the rows that need the entries: a removal admitted by mistake would
        # make them fail for another reason.)
        "ConfigMap: another manager's entry removed": (
            entries(o.released_cm, drop_ops),
            MSG_GONE,
        ),
        "unlabelled ConfigMap: an Apply entry folded into ancient-changes": (
            entries(app, fold_flux),
            MSG_GONE,
        ),
        "unlabelled ConfigMap: every managedFields entry stripped": (
            replace(app, "/metadata/managedFields", [{}]),
            MSG_GONE,
        ),
        # other labels and annotations
        "webhook: another label": (add(vwc, "/metadata/labels", {"team": "attacker"}), MSG_LABELS),
        "webhook: its opt-in annotation removed": (
            remove(vwc, f"/metadata/annotations/{escape(ANNOTATION)}"),
            MSG_ANNOTATIONS,
        ),
        "APIService: another annotation": (
            add(api, "/metadata/annotations/example.com~1x", "y"),
            MSG_ANNOTATIONS,
        ),
        "CRD: another label": (add(crd, "/metadata/labels", {"team": "attacker"}), MSG_LABELS),
        "ConfigMap: another label": (add(trust, "/metadata/labels/team", "attacker"), MSG_LABELS),
        "copy: distributed-from changed": (
            replace(copy_, f"/metadata/labels/{escape(decide.FROM_LABEL)}", "other"),
            MSG_LABELS,
        ),
        "copy: mark removed": (
            remove(copy_, f"/metadata/annotations/{escape(decide.MARK_ANNOTATION)}"),
            MSG_ANNOTATIONS,
        ),
        "copy: another annotation": (
            add(copy_, "/metadata/annotations/example.com~1x", "y"),
            MSG_ANNOTATIONS,
        ),
        # spec fields other than caBundle
        "webhook: service redirected": (
            replace(vwc, f"{hook}/clientConfig/service/name", "attacker"),
            MSG_HOOKS,
        ),
        "webhook: fails open": (replace(vwc, f"{hook}/failurePolicy", "Ignore"), MSG_HOOKS),
        "webhook: rules widened": (replace(vwc, f"{hook}/rules/0/operations", ["*"]), MSG_HOOKS),
        "webhook: removed": (remove(vwc, hook), MSG_HOOKS),
        "webhook: selector emptied": (replace(vwc, f"{hook}/namespaceSelector", {}), MSG_HOOKS),
        "mutating webhook: reinvocation": (
            replace(mwc, f"{hook}/reinvocationPolicy", "IfNeeded"),
            MSG_HOOKS,
        ),
        "APIService: service redirected": (
            replace(api, "/spec/service/name", "attacker"),
            MSG_APISERVICE,
        ),
        "APIService: priority": (replace(api, "/spec/versionPriority", 100), MSG_APISERVICE),
        "CRD: conversion redirected": (
            replace(crd, "/spec/conversion/webhook/clientConfig/service/name", "attacker"),
            MSG_CRD,
        ),
        "CRD: a version no longer served": (
            replace(crd, "/spec/versions/1/served", False),
            MSG_CRD,
        ),
        "ConfigMap: another key": (replace(trust, "/data/app.conf", "attacker"), MSG_DATA),
        "ConfigMap: made immutable": (add(trust, "/immutable", True), MSG_IMMUTABLE),
        # the leaves, where nobody opted in
        "never-opted webhook: caBundle": (
            add(plain, f"{hook}/clientConfig/caBundle", b64("attacker")),
            MSG_OPT_IN,
        ),
        "unlabelled ConfigMap: ca.crt": (replace(app, "/data/ca.crt", "attacker"), MSG_UNLABELLED),
        # CREATE and DELETE (the distribution component's verbs)
        "delete a tenant's labelled ConfigMap": (
            lambda: injector.delete(f"{o.cms}/web-ca"),
            MSG_COPIES,
        ),
        "delete an unlabelled ConfigMap": (lambda: injector.delete(app), MSG_COPIES),
        "delete a lookalike holding its own key": (
            lambda: injector.delete(f"{o.cms}/lookalike"),
            MSG_COPIES,
        ),
        "create a ConfigMap of another shape": (
            create({"metadata": {"name": "planted"}, "data": {"ca.crt": "attacker"}}),
            MSG_COPIES,
        ),
        "create a copy holding another key": (
            create(copy_shaped("planted", Corefile="x")),
            MSG_COPIES,
        ),
        "create a copy with an ownerReference": (
            create(
                copy_shaped("planted")
                | {
                    "metadata": copy_shaped("planted")["metadata"]
                    | {"ownerReferences": [GHOST_OWNER]}
                }
            ),
            MSG_COPIES,
        ),
        "create a copy with another label": (
            create(
                copy_shaped("planted")
                | {
                    "metadata": copy_shaped("planted")["metadata"]
                    | {"labels": {LABEL: "true", decide.FROM_LABEL: "trust", "team": "x"}}
                }
            ),
            MSG_COPIES,
        ),
    }


def admitted_writes(injector: Client, o: Objects, admin: Client) -> dict[str, Callable[[], Any]]:
    """What the injector and the distributor write, as they write it (the release by the
    injector's own code: `injector.targets.release_ops`)."""
    vwc, mwc = f"{VWC_PATH}/{o.vwc}", f"{MWC_PATH}/{o.mwc}"
    api, crd = f"{APISERVICES}/{o.apiservice}", f"{CRDS}/{o.crd}"
    trust, copy_ = f"{o.cms}/trust", f"{o.cms}/copy"
    ca = b64(generate_ca("admitted").cert.public_bytes(Encoding.PEM))  # CRDs parse it
    injected = {"op": "add", "path": f"/metadata/annotations/{escape(INJECTED)}", "value": "{}"}
    mark = {"op": "add", "path": "/metadata/labels", "value": {MARK_LABEL: "true"}}

    def release(path: str) -> Any:
        live = injector.get(path)
        entries = live["metadata"].get("managedFields") or []
        ops: list[dict[str, Any]] = []
        for i in reversed(range(len(entries))):
            if entries[i].get("manager") == FIELD_MANAGER:
                at = f"/metadata/managedFields/{i}"
                ops += [
                    {"op": "test", "path": f"{at}/manager", "value": FIELD_MANAGER},
                    {"op": "remove", "path": at},
                ]
        assert ops, "nothing of ours to release"
        return patch(injector, path, *ops)

    def release_handing_over(kind: Kind, path: str) -> Any:
        target = to_target(kind, injector.get(path))
        assert target.handover, f"nothing to hand over on {path}"
        assert target.note is not None, f"no note to remove on {path}"
        patch(injector, path, *release_ops(target))
        after = injector.get(path)["metadata"]
        assert FIELD_MANAGER not in [e["manager"] for e in after["managedFields"]]
        # The release removes the injector's note, and no other annotation.
        assert after["annotations"] == {TEAM: "a"}
        return after

    def take_back_a_hand_edit() -> Any:
        # An administrator edits the caBundle by hand (their own entry owns it now); the
        # injector restores it, and the server moves the leaf out of their entry.
        hand_edit = {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": b64("x")}
        admin.patch(mwc, [hand_edit], patch_type=JSON_PATCH)
        return patch(
            injector, mwc, {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": ca}
        )

    def take_back_the_note() -> Any:
        # An administrator writes the injector's note annotation (their entry owns it
        # now); the injector's next write takes it back.
        admin.patch(api, {"metadata": {"annotations": {INJECTED: "by hand"}}})
        return patch(injector, api, {**injected, "value": '{"sha256": "x"}'})

    def write_into_a_crowded_config_map() -> Any:
        # Ten Update entries already (the administrator's and nine of teams'): the
        # injector's makes eleven, and the API server folds the two oldest into one
        # `ancient-changes` entry, in the injector's write.
        path = f"{o.cms}/crowded"
        admin.create(
            o.cms,
            {
                "metadata": {
                    "name": "crowded",
                    "labels": {LABEL: "true"},
                    "annotations": {ANNOTATION: '{"signerName": "example.com/x"}'},
                },
                "data": {"ca.crt": "old", "app.conf": "x"},
            },
        )
        for i in range(9):
            admin.patch(
                path,
                {"metadata": {"annotations": {f"example.com/team-{i}": "a"}}},
                patch_type=MERGE,
                params={"fieldManager": f"team-{i}"},
            )
        written = patch(
            injector,
            path,
            {"op": "replace", "path": "/data/ca.crt", "value": "x"},
            {"op": "add", "path": f"/metadata/annotations/{escape(INJECTED)}", "value": "{}"},
        )
        managers = [e["manager"] for e in written["metadata"]["managedFields"]]
        assert "ancient-changes" in managers, managers
        return written

    def write_into_a_crowded(collection: str, body: dict[str, Any], leaf: str) -> Any:
        """`body` created, nine teams' Update entries added (the administrator's and
        the API server's status entry make eleven or ten), then the injector's caBundle
        write, in which the API server folds the oldest into `ancient-changes`."""
        name = body["metadata"]["name"]
        admin.create(collection, body)
        path = f"{collection}/{name}"
        try:
            for i in range(9):
                admin.patch(
                    path,
                    {"metadata": {"annotations": {f"example.com/team-{i}": "a"}}},
                    patch_type=MERGE,
                    params={"fieldManager": f"team-{i}"},
                )
            written = patch(injector, path, {"op": "add", "path": leaf, "value": ca}, injected)
            managers = [e["manager"] for e in written["metadata"]["managedFields"]]
            assert "ancient-changes" in managers, managers
            return written
        finally:
            delete_quietly(admin, collection, name)

    selector = '{"signerName": "example.com/policy", "labelSelector": {}}'
    crowd = f"crowded-{uuid.uuid4().hex[:6]}"

    def take_back_a_hand_written_ca_crt() -> Any:
        # Someone writes ca.crt by hand (an entry of theirs owns it, and nothing else);
        # the injector restores it, and the server drops their entry, left empty.
        admin.patch(
            trust, {"data": {"ca.crt": "by hand"}}, patch_type=MERGE, params={"fieldManager": OPS}
        )
        assert OPS in [e["manager"] for e in injector.get(trust)["metadata"]["managedFields"]]
        written = patch(injector, trust, {"op": "replace", "path": "/data/ca.crt", "value": "x"})
        assert OPS not in [e["manager"] for e in written["metadata"]["managedFields"]]
        return written

    def release_config_map_handing_over() -> Any:
        # The injector's own release of a ConfigMap whose label went (its departed
        # record, `release_ops`): as a webhook's caBundle, the leaves our entry owned
        # (ca.crt, the truststore key) go to the owner's entry in the patch that removes
        # ours — here an entry without binaryData, which gets the map whole.
        path = o.released_cm
        target = departed_record(injector.get(path))
        owners = {hand.manager for hand in target.handover}
        assert len(target.handover) == 2 and len(owners) == 1, target.handover
        after = patch(injector, path, *release_ops(target))
        entries = {e["manager"]: e["fieldsV1"] for e in after["metadata"]["managedFields"]}
        assert FIELD_MANAGER not in entries
        owner = owners.pop()
        assert "f:ca.crt" in entries[owner]["f:data"]
        assert f"f:{STORE_KEY}" in entries[owner]["f:binaryData"]
        assert after["data"]["ca.crt"] == "anchors"  # the values stay
        return after

    def fill_key() -> Any:
        secret = injector.get(KEY_PATH)
        secret["data"] = {"key": b64("k" * 32)}
        return injector.replace(KEY_PATH, secret, params={"fieldManager": FIELD_MANAGER})

    return {
        "webhook: caBundle, its annotation and mark": lambda: patch(
            injector,
            vwc,
            {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": ca},
            injected,
            mark,
        ),
        "mutating webhook: caBundle": lambda: patch(
            injector, mwc, {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": ca}
        ),
        "APIService: caBundle": lambda: patch(
            injector, api, {"op": "add", "path": "/spec/caBundle", "value": ca}, injected
        ),
        "CRD: conversion caBundle": lambda: patch(
            injector,
            crd,
            {"op": "add", "path": "/spec/conversion/webhook/clientConfig/caBundle", "value": ca},
            injected,
        ),
        "labelled ConfigMap: ca.crt, its annotation and mark": lambda: patch(
            injector,
            trust,
            {"op": "replace", "path": "/data/ca.crt", "value": "anchors"},
            injected,
            {"op": "add", "path": f"/metadata/labels/{escape(MARK_LABEL)}", "value": "true"},
        ),
        "webhook: the release": lambda: release(vwc),
        "mutating webhook: caBundle taken back from a hand edit": take_back_a_hand_edit,
        "APIService: its note annotation taken back from a hand edit": take_back_the_note,
        "released webhook: the release hands the caBundle to the owner": lambda: (
            release_handing_over(VALIDATING_WEBHOOK, f"{VWC_PATH}/{o.released_vwc}")
        ),
        "released APIService: the release hands the caBundle to the owner": lambda: (
            release_handing_over(API_SERVICE, f"{APISERVICES}/{o.released_api}")
        ),
        "released CRD: the release hands the caBundle to the owner": lambda: release_handing_over(
            CRD, f"{CRDS}/{o.released_crd}"
        ),
        "labelled ConfigMap: ca.crt taken back from a hand edit": take_back_a_hand_written_ca_crt,
        # The API server takes the owner's `f:data` "." with its only key.
        "a tenant's labelled ConfigMap holding only ca.crt: ca.crt": lambda: patch(
            injector, f"{o.cms}/web-ca", {"op": "replace", "path": "/data/ca.crt", "value": "x"}
        ),
        "labelled ConfigMap with ten Update entries: ca.crt, folded by the API server": (
            write_into_a_crowded_config_map
        ),
        "webhook with ten Update entries: caBundle, folded by the API server": lambda: (
            write_into_a_crowded(
                VWC_PATH,
                validating_webhook(crowd, "unused", "svc", selector),
                "/webhooks/0/clientConfig/caBundle",
            )
        ),
        "APIService with ten Update entries: caBundle, folded by the API server": lambda: (
            write_into_a_crowded(
                APISERVICES,
                api_service(f"{crowd}.policy.example.com", "unused", selector),
                "/spec/caBundle",
            )
        ),
        "CRD with ten Update entries: conversion caBundle, folded by the API server": lambda: (
            write_into_a_crowded(
                CRDS,
                conversion_crd(f"{crowd}.policy.example.com", "unused", selector),
                "/spec/conversion/webhook/clientConfig/caBundle",
            )
        ),
        "labelled ConfigMap: the release": lambda: release(trust),
        "released ConfigMap: the release hands ca.crt and the truststore to the owner": (
            release_config_map_handing_over
        ),
        "copy: re-annotated and re-labelled": lambda: injector.patch(
            copy_,
            {
                "metadata": {
                    "labels": {LABEL: "true"},
                    "annotations": {
                        ANNOTATION: '{"name": "y"}',
                        "service-serving-signer/truststore-pkcs12": None,
                    },
                }
            },
            params={"fieldManager": FIELD_MANAGER},
        ),
        "copy: created": lambda: injector.create(
            o.cms, copy_shaped("service-ca.crt"), params={"fieldManager": FIELD_MANAGER}
        ),
        "copy: deleted": lambda: injector.delete(f"{o.cms}/service-ca.crt"),
        "distribution key: filled once": fill_key,
    }


@on_both
def test_a_stolen_injector_token_is_refused_everything_but_what_the_injector_writes(
    installed: Installed, objects: Objects
) -> None:
    outcome = {
        case: refused(write)
        for case, (write, _) in forbidden_writes(installed.injector, objects).items()
    }
    wrong = {
        case: outcome[case] or "ADMITTED"
        for case, (_, message) in forbidden_writes(installed.injector, objects).items()
        if message not in outcome[case]
    }
    assert not wrong, json.dumps(wrong, indent=1)
    # The garbage collector had nothing to act on: every object is still there.
    for path in (f"{VWC_PATH}/{objects.plain_vwc}", f"{objects.cms}/app", f"{objects.cms}/web-ca"):
        installed.admin.get(path)
    assert installed.admin.get(f"{objects.cms}/web-ca")["data"] == {"ca.crt": "the real anchors"}


@on_both
def test_every_write_the_injector_and_distributor_make_is_admitted(
    installed: Installed, objects: Objects
) -> None:
    outcome = {
        case: refused(write)
        for case, write in admitted_writes(installed.injector, objects, installed.admin).items()
    }
    assert not any(outcome.values()), json.dumps({k: v for k, v in outcome.items() if v}, indent=1)
    # Filled once; replacing or removing the key is refused.
    secret = installed.injector.get(KEY_PATH)
    secret["data"] = {"key": b64("attacker" * 4)}
    assert MSG_KEY in refused(lambda: installed.injector.replace(KEY_PATH, secret))


@on_both
def test_a_stolen_token_cannot_make_a_gitops_owner_delete_a_config_map_key(
    installed: Installed,
) -> None:
    """A key an operator added by hand to a ConfigMap that GitOps applies (server-side
    apply, as Flux does): moving the key's ownership into the applier's entry would make
    its next apply of the unchanged configuration delete the key. As the injector's
    ServiceAccount, on an unlabelled ConfigMap in another namespace, that move is refused,
    and the applier's next apply keeps the key."""
    admin, token = installed.admin, installed.injector
    ns = f"victim-{uuid.uuid4().hex[:6]}"
    ensure_namespace(admin, ns)
    path = f"/api/v1/namespaces/{ns}/configmaps/app-config"
    gitops = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "app-config"},
        "data": {"mode": "prod"},
    }
    try:
        admin.patch(path, gitops, patch_type=APPLY, params={"fieldManager": "flux"})
        admin.patch(
            path,
            {"data": {"db-password-ref": "vault:db"}},
            patch_type=MERGE,
            params={"fieldManager": OPS},
        )
        live = admin.get(path)
        moved = copy.deepcopy(live["metadata"]["managedFields"])
        flux = next(e for e in moved if e["manager"] == "flux")
        ops = next(e for e in moved if e["manager"] == OPS)
        flux["fieldsV1"]["f:data"]["f:db-password-ref"] = {}
        del ops["fieldsV1"]["f:data"]["f:db-password-ref"]
        refusal = refused(
            lambda: patch(
                token,
                path,
                {
                    "op": "test",
                    "path": "/metadata/resourceVersion",
                    "value": live["metadata"]["resourceVersion"],
                },
                {"op": "replace", "path": "/metadata/managedFields", "value": moved},
            )
        )
        assert MSG_OTHERS in refusal, refusal or "ADMITTED"
        after = admin.patch(path, gitops, patch_type=APPLY, params={"fieldManager": "flux"})
        assert after["data"] == {"mode": "prod", "db-password-ref": "vault:db"}
    finally:
        admin.delete(f"/api/v1/namespaces/{ns}")


@on_both
def test_the_policy_compares_every_field_the_api_server_serves(installed: Installed) -> None:
    """For each kind, each field in the API server's OpenAPI schema (but caBundle and
    server-set metadata) is named by the policy's rules for that kind: a field a new
    Kubernetes version adds (as 1.15 added `matchPolicy`) fails this test, not the
    policy's promise."""
    admin = installed.admin
    policies = {
        d["metadata"]["name"]: d
        for d in yaml.safe_load_all(POLICY.read_text())
        if d and d["kind"] == "ValidatingAdmissionPolicy"
    }

    def rules(policy: str) -> str:
        spec = policies[f"service-serving-signer-injector-{policy}"]["spec"]
        return " ".join(v["expression"] for v in [*spec["validations"], *spec.get("variables", [])])

    def fields(api: str, *schemas: str) -> set[str]:
        served = admin.get(f"/openapi/v3/{api}")["components"]["schemas"]
        return {p for name in schemas for p in served[name].get("properties", {})}

    server_set = {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
        "apiVersion",
        "kind",
        "metadata",
        "status",
        "caBundle",
    }
    reg, ext = (
        "io.k8s.api.admissionregistration.v1",
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1",
    )
    agg = "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1"
    meta = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    kinds = {
        "webhooks": fields(
            "apis/admissionregistration.k8s.io/v1",
            meta,
            f"{reg}.ValidatingWebhookConfiguration",
            f"{reg}.MutatingWebhookConfiguration",
            f"{reg}.ValidatingWebhook",
            f"{reg}.MutatingWebhook",
            f"{reg}.WebhookClientConfig",
        ),
        "apiservices": fields(
            "apis/apiregistration.k8s.io/v1", meta, f"{agg}.APIService", f"{agg}.APIServiceSpec"
        ),
        "crds": fields(
            "apis/apiextensions.k8s.io/v1",
            meta,
            f"{ext}.CustomResourceDefinition",
            f"{ext}.CustomResourceDefinitionSpec",
            f"{ext}.CustomResourceConversion",
            f"{ext}.WebhookConversion",
            f"{ext}.WebhookClientConfig",
        ),
        "configmaps": fields("api/v1", meta, "io.k8s.api.core.v1.ConfigMap"),
    }
    missing = {
        policy: sorted(
            f for f in served - server_set if not re.search(rf"\.\??{f}\b", rules(policy))
        )
        for policy, served in kinds.items()
    }
    assert not any(missing.values()), missing


@on_both
def test_the_injector_and_distributor_refuse_nothing_under_the_policy(
    installed: Installed, plane_namespace: str, tmp_path: Path
) -> None:
    """The real process (`--controllers=injector,trust-distributor`) under the token, the
    policy on: first writes on every kind, a copy created filled, re-labelled, deleted,
    the key filled, a ConfigMap's release and a webhook configuration's (its caBundle
    handed to the owner) — and not one request refused."""
    admin, namespace = installed.admin, plane_namespace
    suffix = uuid.uuid4().hex[:8]
    signer = f"p{suffix}.example.com/roots"
    pem = normalize_bundle(generate_ca("policy root").cert.public_bytes(Encoding.PEM))
    ctb = bundle_name(signer, pem)
    admin.create(
        ctb_path(admin),
        {
            "apiVersion": f"certificates.k8s.io/{ctb_version(admin)}",
            "kind": "ClusterTrustBundle",
            "metadata": {"name": ctb},
            "spec": {"signerName": signer, "trustBundle": pem},
        },
    )
    selector = json.dumps({"signerName": signer, "labelSelector": {}})
    cms = f"/api/v1/namespaces/{namespace}/configmaps"
    # A GitOps owner's ConfigMap asking for injection: labels and annotations, no data.
    gitops: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "trust",
            "labels": {LABEL: "true"},
            "annotations": {ANNOTATION: selector, TEAM: "a"},
        },
    }
    admin.patch(f"{cms}/trust", gitops, patch_type=APPLY, params={"fieldManager": "gitops"})
    hook, group = f"policy-run-{suffix}", f"r{suffix}.policy.example.com"
    admin.create(VWC_PATH, validating_webhook(hook, f"unused-{suffix}", "svc", selector))
    admin.create(MWC_PATH, mutating_webhook(hook, selector))
    admin.create(APISERVICES, api_service(group, f"unused-{suffix}", selector))
    admin.create(CRDS, conversion_crd(group, f"unused-{suffix}", selector))
    target = f"policy-target-{suffix}"
    admin.create(
        "/api/v1/namespaces",
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": target, "labels": {"trust": suffix}},
        },
    )
    config = f"policy-{suffix}"
    configuration(admin, NS, config, "service-ca.crt", selector, suffix)
    copy_path = f"/api/v1/namespaces/{target}/configmaps/service-ca.crt"

    def get(path: str) -> dict[str, Any]:
        try:
            found: dict[str, Any] = admin.get(path)
        except ApiError as err:
            if is_not_found(err):
                return {}
            raise
        return found

    def ca_of(path: str) -> str:
        obj = get(path)
        if "webhooks" in obj:
            return str(obj["webhooks"][0]["clientConfig"].get("caBundle") or "")
        spec = obj.get("spec") or {}
        if obj.get("kind") == "APIService":
            return str(spec.get("caBundle") or "")
        return str(spec["conversion"]["webhook"]["clientConfig"].get("caBundle") or "")

    def injected(path: str) -> bool:
        return ca_of(path) == b64(pem)

    process = SignerProcess(
        installed.kubeconfig,
        None,
        tmp_path / "injector.log",
        "--controllers=injector,trust-distributor",
        f"--leader-elect-resource-namespace={NS}",
        f"--leader-elect-resource-name={LEASE}",  # the only one its Role lets it write
        signer_name=None,
    )
    try:
        eventually(
            lambda: (get(f"{cms}/trust").get("data") or {}).get("ca.crt") == pem,
            timeout=60,
            what="ca.crt",
        )
        for path in (
            f"{VWC_PATH}/{hook}",
            f"{MWC_PATH}/{hook}",
            f"{APISERVICES}/v1alpha1.{group}",
            f"{CRDS}/things.{group}",
        ):
            eventually(partial(injected, path), timeout=30, what=f"caBundle of {path}")
        eventually(
            lambda: (get(copy_path).get("data") or {}).get("ca.crt") == pem,
            timeout=30,
            what="the copy",
        )
        assert (get(KEY_PATH).get("data") or {}).get("key"), "the key filled"
        # Someone removes the copy's opt-in label: the distributor puts it back.
        admin.patch(copy_path, {"metadata": {"labels": {LABEL: None}}})
        eventually(
            lambda: (get(copy_path).get("metadata") or {}).get("labels", {}).get(LABEL) == "true",
            timeout=30,
            what="the copy re-labelled",
        )
        # The namespace stops matching: the copy is deleted.
        admin.patch(f"/api/v1/namespaces/{target}", {"metadata": {"labels": {"trust": "no"}}})
        eventually(lambda: not get(copy_path), timeout=30, what="the copy deleted")
        # The release passes too: the owner applies its ConfigMap without the opt-in
        # label; ca.crt stays and goes to the owner's entry, so its next apply of the
        # same configuration (no ca.crt in it) prunes ca.crt, as any key it stops applying.
        del gitops["metadata"]["labels"]
        del gitops["metadata"]["annotations"][ANNOTATION]
        admin.patch(f"{cms}/trust", gitops, patch_type=APPLY, params={"fieldManager": "gitops"})
        eventually(
            lambda: MARK_LABEL not in (get(f"{cms}/trust").get("metadata") or {}).get("labels", {}),
            timeout=30,
            what="the release",
        )
        released = get(f"{cms}/trust")
        assert released["data"] == {"ca.crt": pem}
        assert INJECTED not in (released["metadata"].get("annotations") or {})
        entries = {e["manager"]: e["fieldsV1"] for e in released["metadata"]["managedFields"]}
        assert FIELD_MANAGER not in entries and "f:ca.crt" in entries["gitops"]["f:data"]
        pruned = admin.patch(
            f"{cms}/trust", gitops, patch_type=APPLY, params={"fieldManager": "gitops"}
        )
        assert "ca.crt" not in (pruned.get("data") or {})
        # And a webhook configuration's: its caBundle handed to the administrator's entry.
        admin.patch(f"{VWC_PATH}/{hook}", {"metadata": {"annotations": {ANNOTATION: None}}})

        def handed_over() -> bool:
            managed = get(f"{VWC_PATH}/{hook}")["metadata"]["managedFields"]
            owners = [e for e in managed if "f:caBundle" in json.dumps(e["fieldsV1"])]
            return [e["manager"] for e in owners] == ["service-serving-signer"]

        eventually(handed_over, timeout=30, what="the webhook's release")
        assert ca_of(f"{VWC_PATH}/{hook}") == b64(pem)
        denied = [
            line
            for line in process.log_lines()
            if "ValidatingAdmissionPolicy" in line
            or "denied request" in line
            or "forbidden" in line.lower()
        ]
        assert not denied, denied[:3]
    finally:
        assert process.stop() == 0
        admin.delete(f"/api/v1/namespaces/{NS}/configmaps/{config}")
        admin.delete(f"/api/v1/namespaces/{target}")
        delete_quietly(admin, VWC_PATH, hook)
        delete_quietly(admin, MWC_PATH, hook)
        delete_quietly(admin, APISERVICES, f"v1alpha1.{group}")
        delete_quietly(admin, CRDS, f"things.{group}")
        admin.delete(f"{ctb_path(admin)}/{ctb}")

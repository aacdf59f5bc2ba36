"""Distribution against the real kube-apiserver: a configuration in the
injector's namespace puts a named trust ConfigMap, kept by the ConfigMap target, into
every matching namespace; a namespace that stops matching loses it; removing the
configuration removes every copy; a ConfigMap of that name the distribution did not
make is never overwritten."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.serialization import Encoding
from prometheus_client import CollectorRegistry

from controlplane import ControlPlane
from controlplane.controller_manager import ControllerManager
from distributor import decide
from distributor.controller import DistributionController, informers
from distributor.key import KEY_SECRET
from injector.configmaps import CA_KEY, LABEL
from injector.targets import ANNOTATION
from kube.client import ApiError, Client, is_already_exists, is_not_found
from kube.events import EventRecorder
from kube.factory import InformerFactory
from tests.integration.identities import can, service_account_token
from tests.integration.injector_harness import (
    LEASE,
    NS,
    RBAC_KINDS,
    SA,
    SUBJECT,
    Delivered,
    RunningInjector,
    cache_key,
)
from tests.integration.manager_process import SignerProcess
from tests.integration.manifests import apply as apply_manifest
from tests.integration.manifests import ensure_namespace
from tests.integration.publisher_harness import ctb_path, ctb_version
from tests.integration.signer_harness import eventually
from tests.unit.deploy.kustomize import CONFIG, render
from trust.bundle import bundle_name, normalize_bundle
from trust.ca import generate_ca


def create_namespace(client: Client, labels: dict[str, str]) -> str:
    name = f"dist-{uuid.uuid4().hex[:8]}"
    client.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
    )
    return name


def get_or_none(client: Client, path: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = client.get(path)
    except Exception as err:
        if is_not_found(err):
            return None
        raise
    return found


class RunningDistributor:
    def __init__(
        self, client: Client, namespace: str, registry: CollectorRegistry | None = None
    ) -> None:
        # The installation key's Secret, shipped empty (config/injector-distribution).
        try:
            client.create(
                f"/api/v1/namespaces/{namespace}/secrets",
                {"metadata": {"name": KEY_SECRET}, "type": "Opaque"},
            )
        except ApiError as err:
            if not is_already_exists(err):
                raise
        self.recorder = EventRecorder(client, "service-serving-signer", "distributor-test")
        self.informers = InformerFactory(client)
        self.controller = DistributionController(
            client,
            informers(self.informers, namespace=namespace, ctb_version=ctb_version(client)),
            self.recorder,
            namespace=namespace,
            registry=registry,
        )
        # After the controller's own handlers: what `delivered` waits on.
        self.deliveries = {
            "namespaces": Delivered(self.controller.namespaces, lambda ns: str(ns.name)),
            "configs": Delivered(self.controller.configs, lambda d: f"{namespace}/{d.name}"),
            "copies": Delivered(self.controller.copies, cache_key),
        }
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.controller.run, args=(self.stop,), daemon=True)

    def __enter__(self) -> RunningDistributor:
        self.informers.start(self.stop)
        self.thread.start()
        eventually(self.controller.has_synced, timeout=30, what="distributor synced")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)
        self.recorder.stop()

    def delivered(self, cache: str, key: str, resource_version: str | None) -> None:
        """As `RunningInjector.delivered`: the informer `cache` (`namespaces`, `configs`,
        `copies`) has handed `key` at `resource_version` or later (None: its deletion) to
        its handlers, and the queue is idle."""
        self.deliveries[cache].wait(key, resource_version, self.controller.queue.idle)


@pytest.fixture
def bundle(client: Client) -> Iterator[tuple[str, str]]:
    """(selector, PEM) of one hand-made ClusterTrustBundle of a unique signer."""
    signer = f"d{uuid.uuid4().hex[:8]}.example.com/roots"
    pem = normalize_bundle(generate_ca("distribution root").cert.public_bytes(Encoding.PEM))
    name = bundle_name(signer, pem)
    client.create(
        ctb_path(client),
        {
            "apiVersion": f"certificates.k8s.io/{ctb_version(client)}",
            "kind": "ClusterTrustBundle",
            "metadata": {"name": name},
            "spec": {"signerName": signer, "trustBundle": pem},
        },
    )
    yield json.dumps({"signerName": signer, "labelSelector": {}}), pem
    client.delete(f"{ctb_path(client)}/{name}")


def test_distributes_to_matching_namespaces_and_cleans_up(
    client: Client, namespace: str, bundle: tuple[str, str]
) -> None:
    selector, pem = bundle
    team = uuid.uuid4().hex[:8]
    matching = create_namespace(client, {"trust": team})
    other = create_namespace(client, {"trust": "elsewhere"})
    foreign_ns = create_namespace(client, {"trust": team})
    # A ConfigMap of the distributed name that someone else made: never overwritten.
    client.create(
        f"/api/v1/namespaces/{foreign_ns}/configmaps",
        {"metadata": {"name": "service-ca.crt"}, "data": {CA_KEY: "theirs"}},
    )
    config_path = f"/api/v1/namespaces/{namespace}/configmaps"
    client.create(
        config_path,
        {
            "metadata": {
                "name": "service-ca",
                "labels": {decide.CONFIG_LABEL: "true"},
                "annotations": {ANNOTATION: selector},
            },
            "data": {
                decide.NAME_KEY: "service-ca.crt",
                decide.NAMESPACE_SELECTOR_KEY: json.dumps({"matchLabels": {"trust": team}}),
            },
        },
    )

    def copy_in(ns: str) -> dict[str, Any] | None:
        return get_or_none(client, f"/api/v1/namespaces/{ns}/configmaps/service-ca.crt")

    with RunningInjector(client), RunningDistributor(client, namespace):
        # Created where the selector matches, and filled by the ConfigMap target.
        eventually(lambda: ((copy_in(matching) or {}).get("data") or {}).get(CA_KEY) == pem)
        labels = copy_in(matching)["metadata"]["labels"]  # type: ignore[index]
        assert labels[decide.FROM_LABEL] == "service-ca"
        assert copy_in(other) is None
        foreign = copy_in(foreign_ns)
        assert foreign is not None and foreign["data"] == {CA_KEY: "theirs"}

        def not_ours_warned() -> bool:
            events = client.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
            return any(e.get("reason") == decide.REASON_NOT_OURS for e in events["items"])

        eventually(not_ours_warned, timeout=30)

        # A namespace that starts matching gets one; one that stops matching loses it.
        client.patch(f"/api/v1/namespaces/{other}", {"metadata": {"labels": {"trust": team}}})
        eventually(lambda: copy_in(other) is not None, timeout=30)
        # Someone removes the opt-in label from a copy: the injector releases ca.crt, the
        # distributor puts the label back, and the injector fills ca.crt again.
        client.patch(
            f"/api/v1/namespaces/{other}/configmaps/service-ca.crt",
            {"metadata": {"labels": {LABEL: None}}},
        )
        eventually(
            lambda: (
                ((copy_in(other) or {}).get("metadata") or {}).get("labels", {}).get(LABEL)
                == "true"
                and ((copy_in(other) or {}).get("data") or {}).get(CA_KEY) == pem
            ),
            timeout=30,
        )
        client.patch(f"/api/v1/namespaces/{matching}", {"metadata": {"labels": {"trust": "no"}}})
        eventually(lambda: copy_in(matching) is None, timeout=30)

        # The configuration removed: every copy it made goes; the foreign one stays.
        client.delete(f"{config_path}/service-ca")
        eventually(lambda: copy_in(other) is None, timeout=30)
        foreign = copy_in(foreign_ns)
        assert foreign is not None and foreign["data"] == {CA_KEY: "theirs"}
    for ns in (matching, other, foreign_ns):
        client.delete(f"/api/v1/namespaces/{ns}")


def test_distributes_as_the_injector_with_only_the_components_rbac(
    control_plane: ControlPlane, client: Client, bundle: tuple[str, str], tmp_path: Path
) -> None:
    """`run --controllers=injector,trust-distributor` as the injector's ServiceAccount,
    with exactly config/injector's and config/injector-distribution's RBAC."""
    selector, pem = bundle
    ensure_namespace(client, NS)
    rbac = [o for o in render(CONFIG / "injector") if o["kind"] in RBAC_KINDS]
    rbac += [
        o for o in render(CONFIG / "injector-distribution") if o["kind"] in RBAC_KINDS | {"Secret"}
    ]
    for obj in rbac:
        apply_manifest(client, obj, dry_run=False, namespace=NS)
    team = uuid.uuid4().hex[:8]
    target = create_namespace(client, {"trust": team})
    config_name = f"trust-{team}"
    client.create(
        f"/api/v1/namespaces/{NS}/configmaps",
        {
            "metadata": {
                "name": config_name,
                "labels": {decide.CONFIG_LABEL: "true"},
                "annotations": {ANNOTATION: selector},
            },
            "data": {
                decide.NAME_KEY: "service-ca.crt",
                decide.NAMESPACE_SELECTOR_KEY: json.dumps({"matchLabels": {"trust": team}}),
            },
        },
    )
    kubeconfig = control_plane.write_kubeconfig(
        tmp_path / "injector.kubeconfig", token=service_account_token(client, NS, SA)
    )
    process = SignerProcess(
        kubeconfig,
        None,
        tmp_path / "injector.log",
        "--controllers=injector,trust-distributor",
        f"--leader-elect-resource-namespace={NS}",
        f"--leader-elect-resource-name={LEASE}",  # the only one its Role lets it write
        signer_name=None,
    )
    copy_path = f"/api/v1/namespaces/{target}/configmaps/service-ca.crt"
    try:
        eventually(process.leading, timeout=60, what="the injector leading")
        eventually(
            lambda: ((get_or_none(client, copy_path) or {}).get("data") or {}).get(CA_KEY) == pem,
            timeout=30,
            what="the copy, filled",
        )
        client.delete(f"/api/v1/namespaces/{NS}/configmaps/{config_name}")
        eventually(lambda: get_or_none(client, copy_path) is None, timeout=30)
        forbidden = [line for line in process.log_lines() if "forbidden" in line.lower()]
        assert not forbidden, forbidden[:3]
    finally:
        assert process.stop() == 0
        client.delete(f"/api/v1/namespaces/{target}")
        # The injector's own RBAC tests (same plane) pin that it cannot create or delete
        # ConfigMaps without this component.
        for obj in rbac:
            if obj["metadata"]["name"].endswith("trust-distributor"):
                kind = {
                    "ClusterRole": "clusterroles",
                    "ClusterRoleBinding": "clusterrolebindings",
                    "Role": f"namespaces/{NS}/roles",
                    "RoleBinding": f"namespaces/{NS}/rolebindings",
                }
                client.delete(
                    f"/apis/rbac.authorization.k8s.io/v1/{kind[obj['kind']]}/{obj['metadata']['name']}"
                )
        eventually(lambda: not can(client, SUBJECT, "create", "configmaps", namespace=NS))


def configuration(
    client: Client, home: str, name: str, target: str, selector: str, team: str
) -> str:
    """Create a distribution configuration; return its resourceVersion."""
    created = client.create(
        f"/api/v1/namespaces/{home}/configmaps",
        {
            "metadata": {
                "name": name,
                "labels": {decide.CONFIG_LABEL: "true"},
                "annotations": {ANNOTATION: selector},
            },
            "data": {
                decide.NAME_KEY: target,
                decide.NAMESPACE_SELECTOR_KEY: json.dumps({"matchLabels": {"trust": team}}),
            },
        },
    )
    return str(created["metadata"]["resourceVersion"])


def test_a_tenant_label_cannot_make_the_distributor_delete_or_overwrite(
    client: Client, namespace: str, bundle: tuple[str, str]
) -> None:
    """The label is no mark. A ConfigMap someone labelled
    `distributed-from=<our configuration>` (coredns, say) is neither overwritten while
    the configuration wants its name, nor deleted when the configuration goes."""
    selector, _ = bundle
    team = uuid.uuid4().hex[:8]
    tenant = create_namespace(client, {"trust": team})
    victim = {
        "metadata": {
            "name": "coredns",
            "labels": {decide.FROM_LABEL: "trust", LABEL: "true"},
        },
        "data": {"Corefile": ".:53 { forward . /etc/resolv.conf }"},
    }
    client.create(f"/api/v1/namespaces/{tenant}/configmaps", victim)
    # An imitation without foreign keys: the label and a made-up mark.
    imitation = {
        "metadata": {
            "name": "lookalike",
            "labels": {decide.FROM_LABEL: "trust"},
            "annotations": {decide.MARK_ANNOTATION: "0" * 64},
        },
    }
    client.create(f"/api/v1/namespaces/{tenant}/configmaps", imitation)
    configuration(client, namespace, "trust", "coredns", selector, team)
    path = f"/api/v1/namespaces/{tenant}/configmaps"
    with RunningDistributor(client, namespace) as running:

        def reported() -> bool:
            events = client.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
            return any(e.get("reason") == decide.REASON_NOT_OURS for e in events["items"])

        eventually(reported, timeout=30)
        assert client.get(f"{path}/coredns")["data"] == victim["data"]
        # The configuration goes, and the namespace stops matching: nothing is deleted.
        client.delete(f"/api/v1/namespaces/{namespace}/configmaps/trust")
        moved = client.patch(
            f"/api/v1/namespaces/{tenant}", {"metadata": {"labels": {"trust": "no"}}}
        )
        # Judged once the distributor has handled both changes.
        running.delivered("configs", f"{namespace}/trust", None)
        running.delivered("namespaces", tenant, moved["metadata"]["resourceVersion"])
        for key in running.controller.every_namespace():
            running.controller.sync(key)
        assert client.get(f"{path}/coredns")["data"] == victim["data"]
        assert get_or_none(client, f"{path}/lookalike") is not None
    client.delete(f"/api/v1/namespaces/{tenant}")


def test_a_namespace_at_its_config_map_quota_is_an_event_and_a_count_not_an_error(
    client: Client, namespace: str, bundle: tuple[str, str]
) -> None:
    """A tenant namespace whose ResourceQuota allows no more ConfigMaps: the copy's POST
    is refused 403 "exceeded quota" by the real quota admission. The distributor warns
    `ConfigMapQuotaExceeded` on the configuration and counts it, and no sync fails (the
    alert on sync errors stays quiet); once the quota has room, the next sync of the
    namespace creates the copy."""
    selector, _ = bundle
    team = uuid.uuid4().hex[:8]
    tenant = create_namespace(client, {"trust": team})
    quota = f"/api/v1/namespaces/{tenant}/resourcequotas"

    def limit(count: str) -> None:
        # The hard limit, and the status kube-controller-manager's quota controller would
        # write (admission refuses everything while a quota has no status).
        client.patch(f"{quota}/cms", {"spec": {"hard": {"count/configmaps": count}}})
        client.patch(
            f"{quota}/cms/status",
            {"status": {"hard": {"count/configmaps": count}, "used": {"count/configmaps": "0"}}},
        )

    client.create(quota, {"metadata": {"name": "cms"}, "spec": {"hard": {"count/configmaps": "0"}}})
    limit("0")
    registry = CollectorRegistry()
    copy_path = f"/api/v1/namespaces/{tenant}/configmaps/service-ca.crt"
    configuration(client, namespace, "quota", "service-ca.crt", selector, team)
    try:
        with RunningDistributor(client, namespace, registry) as running:

            def warned() -> bool:
                events = client.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
                return any(
                    e.get("reason") == decide.REASON_QUOTA and tenant in str(e.get("note"))
                    for e in events["items"]
                )

            eventually(warned, timeout=30, what="ConfigMapQuotaExceeded on the configuration")
            assert running.controller.metrics.refusals("quota") >= 1
            assert get_or_none(client, copy_path) is None
            limit("5")

            def resynced() -> bool:
                # What the next resync does (again until the quota admission's cache has
                # the new limit).
                running.controller.queue.add(tenant)
                return get_or_none(client, copy_path) is not None

            eventually(resynced, timeout=30, what="the copy created once the quota has room")
            errors = registry.get_sample_value(
                "controller_sync_total", {"controller": "trust-distributor", "result": "error"}
            )
            assert errors == 0, f"{errors} failed distributor syncs"
    finally:
        client.delete(f"/api/v1/namespaces/{namespace}/configmaps/quota")
        client.delete(f"/api/v1/namespaces/{tenant}")


def test_two_installations_coexist(client: Client, namespace: str, bundle: tuple[str, str]) -> None:
    """Two injectors' distributors (homes `namespace` and another), each with its own
    configuration into the same namespaces: each keeps its own copies, never deletes the
    other's, and one that also wants the other's name reports it instead."""
    selector, pem = bundle
    team = uuid.uuid4().hex[:8]
    other_home = create_namespace(client, {})
    shared = create_namespace(client, {"trust": team})
    configuration(client, namespace, "trust", "a-bundle", selector, team)
    configuration(client, other_home, "trust", "b-bundle", selector, team)
    path = f"/api/v1/namespaces/{shared}/configmaps"

    def data(name: str) -> dict[str, str]:
        return dict((get_or_none(client, f"{path}/{name}") or {}).get("data") or {})

    with RunningDistributor(client, namespace) as a, RunningDistributor(client, other_home) as b:
        # Created filled: no empty window, no injector running here at all.
        eventually(lambda: data("a-bundle") == {CA_KEY: pem} == data("b-bundle"), timeout=30)
        created = client.get(f"{path}/a-bundle")["metadata"]["uid"]
        # Several resyncs of both: nothing deleted or re-created.
        for running in (a, b, a, b):
            for key in running.controller.every_namespace():
                running.controller.sync(key)
        assert client.get(f"{path}/a-bundle")["metadata"]["uid"] == created
        assert data("b-bundle") == {CA_KEY: pem}
        # B also wants a-bundle: A's copy is reported, not overwritten.
        configuration(client, other_home, "also", "a-bundle", selector, team)

        def reported() -> bool:
            events = client.get(f"/apis/events.k8s.io/v1/namespaces/{other_home}/events")
            return any(e.get("reason") == decide.REASON_NOT_OURS for e in events["items"])

        eventually(reported, timeout=30)
        # A's configuration goes: only A's copy goes; B's stays.
        client.delete(f"/api/v1/namespaces/{namespace}/configmaps/trust")
        eventually(lambda: get_or_none(client, f"{path}/a-bundle") is None, timeout=30)
        assert data("b-bundle") == {CA_KEY: pem}
    for ns in (shared, other_home):
        client.delete(f"/api/v1/namespaces/{ns}")


def test_a_mark_computed_from_readable_data_owns_nothing(
    client: Client, namespace: str, bundle: tuple[str, str]
) -> None:
    """Everything but Secrets is readable cluster-wide (the injector namespace's UID
    among it): a tenant who computes the mark from it gets a ConfigMap that is still not
    ours — reported, not overwritten, and not deleted when the configuration goes."""
    selector, _ = bundle
    team = uuid.uuid4().hex[:8]
    tenant = create_namespace(client, {"trust": team})
    readable_uid = client.get(f"/api/v1/namespaces/{namespace}")["metadata"]["uid"]
    path = f"/api/v1/namespaces/{tenant}/configmaps"
    client.create(
        path,
        {
            "metadata": {
                "name": "service-ca.crt",
                "labels": {decide.FROM_LABEL: "trust", LABEL: "true"},
                "annotations": {
                    ANNOTATION: selector,
                    decide.MARK_ANNOTATION: decide.ownership_mark(
                        readable_uid, "trust", tenant, "service-ca.crt"
                    ),
                },
            },
            "data": {CA_KEY: "the tenant's"},
        },
    )
    configuration(client, namespace, "trust", "service-ca.crt", selector, team)
    with RunningDistributor(client, namespace) as running:

        def reported() -> bool:
            events = client.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
            return any(e.get("reason") == decide.REASON_NOT_OURS for e in events["items"])

        eventually(reported, timeout=30, what="ConfigMapNotOurs")
        client.delete(f"/api/v1/namespaces/{namespace}/configmaps/trust")
        # Judged once the distributor has handled the configuration's deletion.
        running.delivered("configs", f"{namespace}/trust", None)
        for key in running.controller.every_namespace():
            running.controller.sync(key)
        assert get_or_none(client, f"{path}/service-ca.crt") is not None
    client.delete(f"/api/v1/namespaces/{tenant}")


@pytest.fixture
def namespace_controller(control_plane: ControlPlane) -> Iterator[ControllerManager]:
    """A real kube-controller-manager: its namespace controller empties a deleted
    namespace, so the same name can be made again."""
    kcm = ControllerManager(control_plane).start()
    try:
        yield kcm
    finally:
        kcm.stop()


def test_copies_stay_ours_when_the_injectors_namespace_is_re_created_with_its_key(
    client: Client, bundle: tuple[str, str], namespace_controller: ControllerManager
) -> None:
    """A reinstall that deletes and re-creates the injector's namespace, with the key
    Secret restored from a backup: the copies it made before are still ours (removing
    the configuration deletes them) and none is reported as someone else's."""
    selector, pem = bundle
    team = uuid.uuid4().hex[:8]
    home = create_namespace(client, {})
    target = create_namespace(client, {"trust": team})
    copy_path = f"/api/v1/namespaces/{target}/configmaps/service-ca.crt"
    configuration(client, home, "trust", "service-ca.crt", selector, team)
    with RunningDistributor(client, home):
        eventually(
            lambda: ((get_or_none(client, copy_path) or {}).get("data") or {}).get(CA_KEY) == pem,
            timeout=30,
            what="the copy",
        )
    copy_meta = client.get(copy_path)["metadata"]
    made, copy_version = copy_meta["uid"], copy_meta["resourceVersion"]
    backup = client.get(f"/api/v1/namespaces/{home}/secrets/{KEY_SECRET}")["data"]
    client.delete(f"/api/v1/namespaces/{home}")
    eventually(
        lambda: get_or_none(client, f"/api/v1/namespaces/{home}") is None,
        timeout=120,
        what="the injector's namespace gone",
    )
    client.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": home}},
    )
    client.create(
        f"/api/v1/namespaces/{home}/secrets",
        {"metadata": {"name": KEY_SECRET}, "type": "Opaque", "data": backup},
    )
    configured = configuration(client, home, "trust", "service-ca.crt", selector, team)
    with RunningDistributor(client, home) as running:
        # The copy was judged: the distributor has handled the new configuration and the
        # copy the first installation made.
        running.delivered("configs", f"{home}/trust", configured)
        running.delivered("copies", f"{target}/service-ca.crt", copy_version)
        assert client.get(copy_path)["metadata"]["uid"] == made
        assert running.controller.metrics.count("not_ours") == 0
        client.delete(f"/api/v1/namespaces/{home}/configmaps/trust")
        eventually(lambda: get_or_none(client, copy_path) is None, timeout=30, what="deleted")
    for ns in (home, target):
        client.delete(f"/api/v1/namespaces/{ns}")

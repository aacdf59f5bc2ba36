"""What the injector's integration tests share: an issuer (our signer and publisher for a
signer name unique to the test), a serving certificate issued through a kubelet-style PCR
for a Service, the injector running in-process, and the annotated objects.

Services here have one port, `https` = `SERVICE_PORT`; the test server binds to the
Service's ClusterIP and that port, which is where kube-apiserver's ClusterIP service
resolver (`--enable-aggregator-routing=false`, the default) sends webhook, aggregated
API and conversion traffic. APIService availability also needs an EndpointSlice with a
ready endpoint for the port name; without kube-controller-manager, `endpoint_slice`
writes it by hand.
"""

from __future__ import annotations

import base64
import json
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from injector.configmaps import LABEL
from injector.controller import InjectorController, informers
from injector.targets import ANNOTATION
from kube.client import Client, is_not_found, path_segment
from kube.events import EventRecorder
from kube.factory import InformerFactory
from kube.leases import LeaseRef
from kube.types import JSON
from tests.integration.identities import service_account_subject
from tests.integration.publisher_harness import RunningPublisher, ctb_version
from tests.integration.signer_harness import RunningSigner, eventually, wait_terminal
from tests.integration.webhook_server import WebhookServer
from trust.ca import CertificateAuthority, key_pem

SERVICE_PORT = 8443
VWC_PATH = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
APISERVICE_PATH = "/apis/apiregistration.k8s.io/v1/apiservices"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


class Issuer:
    """Our signer and publisher for one test's signer name, sharing one MaterialSource."""

    def __init__(self, client: Client, ca: CertificateAuthority | None = None) -> None:
        self.client = client
        self.signer = RunningSigner(client, ca=ca)
        self.publisher = RunningPublisher(
            client,
            Path(self.signer.files.key).parent,
            self.signer.signer_name,
            material=self.signer.material,
        )

    @property
    def signer_name(self) -> str:
        return self.signer.signer_name

    def selector(self) -> str:
        return json.dumps({"signerName": self.signer_name, "labelSelector": {}})

    def bundle(self) -> str:
        return self.signer.material.current().trust_bundle

    def __enter__(self) -> Issuer:
        self.signer.start()
        self.publisher.start(with_material=False)
        eventually(self.publisher.published, timeout=30, what="our ClusterTrustBundle")
        return self

    def __exit__(self, *exc: object) -> None:
        self.publisher.close()
        self.signer.close()

    def serving_certificate(self, namespace: str, service: str) -> tuple[bytes, bytes]:
        """(chain PEM, key PEM) for `service`, issued through a PCR as kubelet sends it."""
        kubelet = self.signer.kubelet
        pod = kubelet.create_pod(
            f"{service}-{uuid.uuid4().hex[:5]}", namespace, labels={"app": service}
        )
        pcr, key = kubelet.create_pcr(pod, annotations={"kubernetes.io/service-names": service})
        issued = wait_terminal(self.client, pcr, timeout=60)
        chain = (issued.get("status") or {}).get("certificateChain")
        assert chain, issued.get("status")
        return str(chain).encode(), key_pem(key)


def create_service(client: Client, namespace: str, name: str) -> str:
    """A ClusterIP Service with one `https` port; returns its ClusterIP."""
    created = client.create(
        f"/api/v1/namespaces/{namespace}/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "selector": {"app": name},
                "ports": [{"name": "https", "port": SERVICE_PORT, "targetPort": SERVICE_PORT}],
            },
        },
    )
    return str(created["spec"]["clusterIP"])


def endpoint_slice(client: Client, namespace: str, service: str) -> None:
    """The EndpointSlice the endpoint-slice controller would write: APIService
    availability requires a ready endpoint for the Service's port name. Its address is
    never dialled (traffic goes to the ClusterIP), and the API refuses loopback
    addresses, so it is one from TEST-NET-1 (RFC 5737)."""
    client.create(
        f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{service}-manual",
                "namespace": namespace,
                "labels": {"kubernetes.io/service-name": service},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["192.0.2.10"], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": SERVICE_PORT, "protocol": "TCP"}],
        },
    )


def serve(issuer: Issuer, namespace: str, service: str) -> WebhookServer:
    """A started test server for `service`, on its ClusterIP, with an issued certificate."""
    cluster_ip = create_service(issuer.client, namespace, service)
    chain, key = issuer.serving_certificate(namespace, service)
    return WebhookServer(cluster_ip, SERVICE_PORT, chain, key).start()


class RunningInjector:
    """One InjectorController in a thread, with its own registry and event recorder."""

    def __init__(
        self,
        client: Client,
        *,
        resync_period: float = 300.0,
        report: LeaseRef | None = None,
        identity: str = "injector-test",
    ) -> None:
        self.client = client
        self.registry = CollectorRegistry()
        self.recorder = EventRecorder(client, "service-serving-signer", "injector-test")
        self.informers = InformerFactory(client)
        self.controller = InjectorController(
            client,
            informers(self.informers, ctb_version=ctb_version(client)),
            self.recorder,
            registry=self.registry,
            resync_period=resync_period,
            report=report,
            identity=identity,
        )
        # After the controller's own handlers: what `delivered` waits on.
        caches: dict[str, Any] = {**self.controller.caches, "bundles": self.controller.bundles}
        # The departed informers, per kind (`departed-<Kind>`); `departed` is the
        # ConfigMaps', the one kind released by label.
        for kind_name, cache in self.controller.departed.items():
            caches[f"departed-{kind_name}"] = cache
        caches["departed"] = caches["departed-ConfigMap"]
        self.deliveries = {name: Delivered(cache, cache_key) for name, cache in caches.items()}
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=self.controller.run, args=(self.stop,), name="injector", daemon=True
        )

    def __enter__(self) -> RunningInjector:
        self.informers.start(self.stop)
        self.thread.start()
        eventually(self.controller.has_synced, timeout=30, what="injector informers synced")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)
        self.recorder.stop()

    def delivered(self, cache: str, key: str, resource_version: str | None) -> None:
        """Wait for the fact a test's own write caused: the informer `cache` (a kind,
        `bundles` or `departed`) has handed `key` at `resource_version` or later (None: its
        deletion) to its handlers, and the queue is idle — so every sync that version can
        cause has run (not merely an idle queue, which holds before the write's event has
        even arrived)."""
        self.deliveries[cache].wait(key, resource_version, self.controller.queue.idle)


class Delivered:
    """Which version of each object an informer has handed to its handlers. Added after
    the controller's own handlers, and handlers run in order on the informer's thread:
    once this one has been handed a version, the controller's has enqueued what that
    version concerns. (The cache alone is no such fact: the informer stores a record
    before it calls the handlers.)

    A relist (after 410 Gone) hands over only the records that changed
    (kube/informer.py, "Relisting"): a write whose event the relist folded in and whose
    record equals the cached one reaches no handler. Its fact holds all the same — the
    handlers have seen the key as it is at the relist's version — so the key also counts
    as handed at the informer's version while the cache still holds the very record
    instance last handed here. Identity, not `==`: the informer stores a new instance for
    every event and keeps the cached one only when a relist found it unchanged, so an
    event whose record is equal to the cached one, stored but not yet handed, does not
    count."""

    def __init__(self, informer: Any, key_of: Callable[[Any], str]) -> None:
        self.informer = informer
        self.key_of = key_of
        self._lock = threading.Lock()
        # key -> (resourceVersion, present, the record handed)
        self._handed: dict[str, tuple[str, bool, Any]] = {}
        informer.add_handler(self._present, lambda _, new: self._present(new), self._gone)

    def _present(self, record: Any) -> None:
        self._note(record, present=True)

    def _gone(self, record: Any) -> None:
        self._note(record, present=False)

    def _note(self, record: Any, *, present: bool) -> None:
        # On the informer's thread: the version it applies now is this event's (or, for
        # a list, the list's).
        version = str(self.informer.resource_version)
        with self._lock:
            self._handed[self.key_of(record)] = (version, present, record)

    def handed(self, key: str, resource_version: str | None) -> bool:
        """`key` at `resource_version` or later (None: its deletion) reached the handlers."""
        with self._lock:
            version, present, record = self._handed.get(key, ("", False, None))
        if resource_version is None:
            return bool(version) and not present
        if not present:
            return False
        if at_or_after(version, resource_version):
            return True
        # Read the version before the record: the record handed was stored before it
        # was handed, and an instance once replaced never comes back, so finding it
        # cached now means it was the key's record at that version too.
        current = str(self.informer.resource_version)
        return at_or_after(current, resource_version) and self.informer.get(key) is record

    def wait(self, key: str, resource_version: str | None, idle: Callable[[], bool]) -> None:
        """Until `handed(key, resource_version)` and `idle()` (the controller's queue)."""
        eventually(
            lambda: self.handed(key, resource_version) and idle(),
            timeout=30,
            what=f"{key} at {resource_version or 'its deletion'} handed over and synced",
        )


def at_or_after(seen: str, resource_version: str) -> bool:
    """`seen` is `resource_version` or a later one (resourceVersions compared as numbers,
    as kube-apiserver's etcd revisions are; otherwise only equal ones)."""
    if seen == resource_version:
        return True
    return seen.isdigit() and resource_version.isdigit() and int(seen) > int(resource_version)


def cache_key(record: Any) -> str:
    """The informer's cache key of a record: `namespace/name`, or `name`."""
    if isinstance(record, dict):
        meta = record.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name", ""))
    else:
        namespace, name = record.namespace, record.name
    return f"{namespace}/{name}" if namespace else name


# the annotated objects ------------------------------------------------------------------


def b64(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    return base64.b64encode(data).decode()


def validating_webhook(
    name: str,
    namespace: str,
    service: str,
    annotation: str | None,
    *,
    ca_bundle: str | None = None,
    webhooks: int = 1,
) -> JSON:
    """A VWC whose webhooks validate ConfigMap creates in `namespace` only
    (`failurePolicy: Fail`, so a TLS failure is a failed create)."""
    meta: JSON = {"name": name}
    if annotation is not None:
        meta["annotations"] = {ANNOTATION: annotation}
    client_config: JSON = {
        "service": {
            "namespace": namespace,
            "name": service,
            "path": "/validate",
            "port": SERVICE_PORT,
        }
    }
    if ca_bundle is not None:
        client_config["caBundle"] = ca_bundle
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": meta,
        "webhooks": [
            {
                "name": f"w{i}.{name}.example.com",
                "clientConfig": client_config,
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["configmaps"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 10,
            }
            for i in range(webhooks)
        ],
    }


def consumer_config_map(name: str, annotation: str, **extra: Any) -> JSON:
    """A ConfigMap opted in to injection (the label) with its selection `annotation`;
    `extra`: more top-level fields (`data`, `immutable`)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": {LABEL: "true"},
            "annotations": {ANNOTATION: annotation},
        },
        **extra,
    }


def api_service(group: str, namespace: str, annotation: str) -> JSON:
    """An annotated APIService `v1alpha1.<group>` served by Service `api` in `namespace`."""
    return {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": f"v1alpha1.{group}", "annotations": {ANNOTATION: annotation}},
        "spec": {
            "group": group,
            "version": "v1alpha1",
            "groupPriorityMinimum": 1000,
            "versionPriority": 15,
            "service": {"namespace": namespace, "name": "api", "port": SERVICE_PORT},
        },
    }


def ca_bundles(obj: JSON) -> list[str]:
    """Every caBundle field of a VWC/MWC, APIService or CRD, in order ('' when unset)."""
    if "webhooks" in obj:
        return [str((w.get("clientConfig") or {}).get("caBundle") or "") for w in obj["webhooks"]]
    spec = obj.get("spec") or {}
    if obj.get("kind") == "APIService":
        return [str(spec.get("caBundle") or "")]
    webhook = (spec.get("conversion") or {}).get("webhook") or {}
    return [str((webhook.get("clientConfig") or {}).get("caBundle") or "")]


def delete_quietly(client: Client, path: str, name: str) -> None:
    try:
        client.delete(f"{path}/{path_segment(name)}")
    except Exception as err:
        if not is_not_found(err):
            raise


def config_map(client: Client, namespace: str, name: str, *, reject: bool) -> str | None:
    """Create a ConfigMap; return None on success, else the API error message."""
    from kube.client import ApiError

    labels = {"reject": "true"} if reject else {}
    try:
        client.create(
            f"/api/v1/namespaces/{namespace}/configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
            },
        )
    except ApiError as err:
        return str(err)
    return None


def events_about(client: Client, name: str, reason: str) -> list[JSON]:
    """Events (namespace `default`: the objects are cluster-scoped) about `name`."""
    items = client.get("/apis/events.k8s.io/v1/namespaces/default/events")["items"]
    return [
        e
        for e in items
        if (e.get("regarding") or {}).get("name") == name and e.get("reason") == reason
    ]


# The injector's shipped identity (config/injector).
NS = "service-serving-signer"
SA = "service-serving-signer-injector"
SUBJECT = service_account_subject(NS, SA)
# What the injector's ServiceAccount needs to run: its RBAC, and its two Leases (shipped:
# its Role may get and update them by name, never create one).
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Lease"}
LEASE = "service-serving-signer-injector"


def conversion_crd(group: str, namespace: str, annotation: str) -> dict[str, Any]:
    def version(name: str, storage: bool, field: str) -> dict[str, Any]:
        return {
            "name": name,
            "served": True,
            "storage": storage,
            "schema": {
                "openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "properties": {field: {"type": "integer"}}}
                    },
                }
            },
        }

    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"things.{group}", "annotations": {ANNOTATION: annotation}},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
            "versions": [version("v1", True, "size"), version("v2", False, "replicas")],
            "conversion": {
                "strategy": "Webhook",
                "webhook": {
                    "conversionReviewVersions": ["v1"],
                    "clientConfig": {
                        "service": {
                            "namespace": namespace,
                            "name": "convert",
                            "path": "/convert",
                            "port": SERVICE_PORT,
                        }
                    },
                },
            },
        },
    }

"""The four kinds of object whose caBundle fields the injector keeps, as compact records.

What it decides (pure; no client):

* **Which kinds and where their caBundle lives.** `webhooks[*].clientConfig.caBundle` of
  Validating/MutatingWebhookConfigurations (every webhook of the configuration),
  APIService `spec.caBundle`, CRD `spec.conversion.webhook.clientConfig.caBundle`.
* **The record an informer keeps** (`Target`): kind, name, uid, our annotation's value
  (at most `MAX_ANNOTATION` characters of it), the SHA-256 of each slot's current
  caBundle, and the few fields that say whether a caBundle may be set at all. Digests,
  never content: a CRD's schema can be hundreds of KiB, and a ConfigMap 1 MiB.
* **When a caBundle cannot be set**, so the object is left alone with a reason instead
  of a write kube-apiserver would reject: a local APIService (no `spec.service`), an
  APIService with `insecureSkipTLSVerify: true` (validation forbids both together), a
  CRD whose conversion strategy is not `Webhook`.
* **The server-side apply body**: only the caBundle fields and the list-map keys that
  locate them (`webhooks[].name`), so the injector's field manager owns exactly the
  caBundles and nothing a user, Helm or a GitOps tool writes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from trust.consumers import ANNOTATION as ANNOTATION
from trust.consumers import FIELD_MANAGER as FIELD_MANAGER


@dataclass(frozen=True)
class Kind:
    """One of the four kinds: how to list it and how to write its apply body."""

    kind: str
    group: str
    version: str
    resource: str
    namespaced: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def path(self) -> str:
        """The collection across namespaces (what an informer lists)."""
        if not self.group:
            return f"/api/{self.version}/{self.resource}"
        return f"/apis/{self.group}/{self.version}/{self.resource}"

    def object_path(self, name: str, namespace: str = "") -> str:
        root = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        where = f"/namespaces/{quote(namespace, safe='')}" if self.namespaced else ""
        return f"{root}{where}/{self.resource}/{quote(name, safe='')}"


VALIDATING_WEBHOOK = Kind(
    "ValidatingWebhookConfiguration",
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
)
MUTATING_WEBHOOK = Kind(
    "MutatingWebhookConfiguration",
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
)
API_SERVICE = Kind("APIService", "apiregistration.k8s.io", "v1", "apiservices")
CRD = Kind("CustomResourceDefinition", "apiextensions.k8s.io", "v1", "customresourcedefinitions")

CONFIG_MAP = Kind("ConfigMap", "", "v1", "configmaps", namespaced=True)
"""The fourth target kind (`injector.configmaps`): watched only with the injector's label."""

KINDS: tuple[Kind, ...] = (VALIDATING_WEBHOOK, MUTATING_WEBHOOK, API_SERVICE, CRD)
"""The kinds with caBundle fields, each watched whole (there are few of them)."""
KINDS_BY_NAME: Mapping[str, Kind] = {k.kind: k for k in (*KINDS, CONFIG_MAP)}


MAX_ANNOTATION = 4096
"""The longest selector annotation kept in a record; a longer one is cached cut to one
character more and decided `Invalid` (a selector is a few hundred bytes; the API allows
256 KiB of annotations per object, which a tenant could repeat on every labelled ConfigMap)."""


def value_digest(value: str) -> str:
    """SHA-256 (hex) of a field's text: what a record keeps instead of the text."""
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Slot:
    """One caBundle field: `webhook` names the webhook of a configuration (None for the
    single field of an APIService or CRD); `digest` is `value_digest` of its current value
    (base64 text for a caBundle, PEM for a ConfigMap's `ca.crt`; "" hashes an unset one)."""

    webhook: str | None
    digest: str


@dataclass(frozen=True)
class Truststore:
    """A ConfigMap's PKCS#12 truststore key: where, with which password, the digest of
    its current base64 text ("" when absent) and the digest annotation we wrote beside it
    (`injector.configmaps.DIGEST_ANNOTATION`; "" when absent)."""

    key: str
    password: str
    digest: str
    recorded: str


@dataclass(frozen=True)
class Target:
    """The compact record of one target object (see the module docstring)."""

    kind: str
    name: str
    uid: str
    annotation: str | None
    slots: tuple[Slot, ...]
    not_applicable: str | None = None
    """Why no caBundle can be set on this object, or None."""
    managed: bool = False
    """Our field manager owns fields of the object (an entry in its managedFields)."""
    namespace: str = ""
    truststore: Truststore | None = None

    @property
    def key(self) -> str:
        return target_key(self.kind, self.name, self.namespace)

    @property
    def path(self) -> str:
        return KINDS_BY_NAME[self.kind].object_path(self.name, self.namespace)


def target_key(kind: str, name: str, namespace: str = "") -> str:
    """The work-queue key: `<Kind>/<name>`, or `<Kind>/<namespace>/<name>` for a
    ConfigMap; what follows `<Kind>/` is the informer's cache key."""
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


def split_key(key: str) -> tuple[Kind, str]:
    """(kind, the cache key within that kind's informer)."""
    kind, _, name = key.partition("/")
    return KINDS_BY_NAME[kind], name


def owned_by_us(meta: Mapping[str, Any]) -> bool:
    """Whether `metadata.managedFields` has an apply entry of the injector's manager."""
    return any(
        isinstance(entry, Mapping)
        and entry.get("manager") == FIELD_MANAGER
        and entry.get("operation") == "Apply"
        for entry in meta.get("managedFields") or ()
    )


def annotation_of(meta: Mapping[str, Any]) -> str | None:
    """Our selector annotation as a record keeps it (cut to `MAX_ANNOTATION` + 1)."""
    value = (meta.get("annotations") or {}).get(ANNOTATION)
    return value[: MAX_ANNOTATION + 1] if isinstance(value, str) else None


def to_target(kind: Kind, raw: Mapping[str, Any]) -> Target:
    """The informer transform for `kind`."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    slots: tuple[Slot, ...]
    not_applicable: str | None = None
    if kind in (VALIDATING_WEBHOOK, MUTATING_WEBHOOK):
        slots = tuple(
            Slot(str(w.get("name", "")), _ca_bundle_digest(w.get("clientConfig")))
            for w in raw.get("webhooks") or []
        )
        if not slots:
            not_applicable = "the configuration has no webhooks"
    elif kind == API_SERVICE:
        slots = (Slot(None, value_digest(str(spec.get("caBundle") or ""))),)
        if not spec.get("service"):
            not_applicable = (
                "a local APIService (no spec.service) is served by kube-apiserver itself "
                "and may not have a caBundle"
            )
        elif spec.get("insecureSkipTLSVerify"):
            not_applicable = (
                "spec.insecureSkipTLSVerify is true; kube-apiserver forbids a caBundle with "
                "it (set it to false to verify the server against the injected bundle)"
            )
    else:
        conversion = spec.get("conversion") or {}
        webhook = conversion.get("webhook") or {}
        slots = (Slot(None, _ca_bundle_digest(webhook.get("clientConfig"))),)
        if conversion.get("strategy") != "Webhook" or not webhook.get("clientConfig"):
            not_applicable = (
                "spec.conversion.strategy is not Webhook with a webhook.clientConfig; "
                "a CRD has a caBundle only for its conversion webhook"
            )
    return Target(
        kind=kind.kind,
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        annotation=annotation_of(meta),
        slots=slots,
        not_applicable=not_applicable,
        managed=owned_by_us(meta),
    )


def _ca_bundle_digest(client_config: Any) -> str:
    if not isinstance(client_config, Mapping):
        return value_digest("")
    return value_digest(str(client_config.get("caBundle") or ""))


def is_current(target: Target, ca_bundle: str) -> bool:
    """Every caBundle slot already holds `ca_bundle` (base64), by digest."""
    wanted = value_digest(ca_bundle)
    return all(slot.digest == wanted for slot in target.slots)


def release_body(target: Target) -> dict[str, Any]:
    """The apply configuration that releases every field we own: one that names the
    object and sets nothing (kube-apiserver then drops our managedFields entry, and
    removes the values only we owned), guarded by the object's uid so that an object
    deleted meanwhile is not re-created by the apply."""
    kind = KINDS_BY_NAME[target.kind]
    meta: dict[str, Any] = {"name": target.name, "uid": target.uid}
    if target.namespace:
        meta["namespace"] = target.namespace
    return {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": meta}


def apply_body(target: Target, ca_bundle: str) -> dict[str, Any]:
    """The server-side apply configuration that sets every slot to `ca_bundle` (base64)."""
    kind = KINDS_BY_NAME[target.kind]
    body: dict[str, Any] = {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "metadata": {"name": target.name, "uid": target.uid},
    }
    client_config = {"caBundle": ca_bundle}
    if kind in (VALIDATING_WEBHOOK, MUTATING_WEBHOOK):
        body["webhooks"] = [
            {"name": slot.webhook, "clientConfig": dict(client_config)} for slot in target.slots
        ]
    elif kind == API_SERVICE:
        body["spec"] = {"caBundle": ca_bundle}
    else:
        body["spec"] = {"conversion": {"webhook": {"clientConfig": client_config}}}
    return body

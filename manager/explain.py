"""`service-serving-signer explain (pod|pcr) NAMESPACE/NAME`: why a certificate waits.

What it decides: nothing of its own. It reads the request(s) from the cluster and asks the
signer's own decision function — `SignerController.decide`, the code the running signer
uses — what it would do now, with the controller's stores reading live from the API
server instead of informer caches. So explain cannot drift from the signer: a wait it
reports is the wait the signer is in. It writes nothing (no status, no Event, no index).

What it adds is presentation: for a wait, each Service that blocks the request, why, and
for a selector mismatch the selector keys whose values differ from the Pod's labels; for
a deny, the reason, the signer's message and what to change.

Exit status (for scripts; the `Outcome` values): 0 the request is (or would be) issued,
2 it waits, 3 it is (or would be) Denied or Failed, 4 the Pod has no request for this
signer; 1 an error (not found, no access, no cluster). For a Pod with several requests
the most severe wins: deny, then wait, then no request, then issue.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from kube.client import ApiError, Client, is_not_found, path_segment
from kube.events import ObjectRef
from kube.types import JSON
from signer.controller import PCR_GROUP, Final, SignerController, Wait
from signer.records import (
    PCRRecord,
    PodRecord,
    ServiceRecord,
    pcr_record,
    pod_record,
    service_record,
    terminal_condition,
)
from trust.material import SigningMaterial


class Outcome(enum.IntEnum):
    ISSUE = 0
    WAIT = 2
    DENY = 3
    NO_REQUEST = 4


SEVERITY = (Outcome.DENY, Outcome.WAIT, Outcome.NO_REQUEST, Outcome.ISSUE)

# What to change, by the reason the signer gives (docs/reference.md §5.2;
# docs/troubleshoot.md).
FIXES: Mapping[str, str] = {
    "InvalidUnverifiedUserAnnotations": (
        "fix the podCertificate projection's userAnnotations: kubernetes.io/service-names "
        "(comma-separated Service names of the Pod's namespace) and/or "
        'kubernetes.io/add-pod-fqdn: "true", nothing else; then recreate the Pod'
    ),
    "UnsupportedKeyType": (
        "set the projection's keyType to one the signer signs (ECDSAP256, ECDSAP384, "
        "ECDSAP521, RSA3072, RSA4096, ED25519); then recreate the Pod"
    ),
    "InvalidStubPKCS10Request": (
        "the stub CSR must be empty (kubelet writes one); a client other than kubelet "
        "created this request"
    ),
    "PodNotFound": "the Pod is gone or was recreated; kubelet creates a new request",
    "PodMismatch": (
        "the request's node or ServiceAccount differs from the Pod's; only the Pod's "
        "kubelet may request for it"
    ),
    "PodTerminating": "the Pod is being deleted; its replacement gets its own request",
    "PodHostnameRequired": (
        "set spec.hostname and spec.subdomain (a StatefulSet does) and a headless Service "
        "named like spec.subdomain; Pod specs are immutable, so recreate the Pod"
    ),
    "ServiceNotFound": "create the Service in the Pod's namespace (or fix the name)",
    "ServiceSelectorMismatch": (
        "make the Service's selector match the Pod's labels (or relabel the Pod)"
    ),
    "ServiceNotHeadless": "recreate the Service with clusterIP: None (it is immutable)",
}


class ExplainError(RuntimeError):
    """The object could not be read; the message is one line."""


@dataclass(frozen=True)
class Blocking:
    service: str
    reason: str
    message: str
    fix: str
    # key → (the Service's selector value, the Pod's label value or None)
    differing_keys: Mapping[str, tuple[str, str | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class RequestReport:
    name: str
    created: str | None
    outcome: Outcome
    summary: str
    reason: str | None = None
    message: str | None = None
    fix: str | None = None
    dns_names: tuple[str, ...] = ()
    blocking: tuple[Blocking, ...] = ()
    already: str | None = None  # the terminal condition written, if any


@dataclass(frozen=True)
class Report:
    namespace: str
    pod: str
    signer_name: str
    requests: tuple[RequestReport, ...]
    note: str | None = None

    @property
    def outcome(self) -> Outcome:
        outcomes = {r.outcome for r in self.requests} or {Outcome.NO_REQUEST}
        return next(o for o in SEVERITY if o in outcomes)


# live stores: the controller's Store protocol, answered by the API server -------------


class _LiveStore:
    def __init__(self, client: Client, plural: str, transform: Callable[[JSON], Any]) -> None:
        self._client = client
        self._plural = plural
        self._transform = transform
        self.seen: dict[str, Any] = {}

    def get(self, key: str) -> Any:
        if key in self.seen:
            return self.seen[key]
        namespace, _, name = key.partition("/")
        try:
            obj = self._client.get(
                f"/api/v1/namespaces/{path_segment(namespace)}/{self._plural}/{path_segment(name)}"
            )
        except ApiError as err:
            if not is_not_found(err):
                raise
            record = None
        else:
            record = self._transform(obj)
        self.seen[key] = record
        return record


class _NoMaterial:
    """decide() never signs; explain holds no key material."""

    def current(self) -> SigningMaterial:
        raise RuntimeError("explain does not sign")

    def add_listener(self, listener: Callable[[SigningMaterial], object]) -> None:
        return None


class _NoEvents:
    def warning(
        self,
        regarding: ObjectRef,
        reason: str,
        note: str,
        action: str,
        related: ObjectRef | None = None,
    ) -> None:
        return None


class Explainer:
    def __init__(
        self,
        client: Client,
        *,
        signer_name: str,
        domain: str,
        pcr_version: str,
    ) -> None:
        self.client = client
        self.signer_name = signer_name
        self.pcr_version = pcr_version
        self.controller = SignerController(
            client,
            _NoMaterial(),
            signer_name=signer_name,
            domain=domain,
            pcr_version=pcr_version,
            registry=CollectorRegistry(),
            recorder=_NoEvents(),
        )
        self._pods = _LiveStore(client, "pods", pod_record)
        self._services = _LiveStore(client, "services", service_record)
        self.controller.pods = self._pods
        self.controller.services = self._services

    def _pcr_base(self, namespace: str) -> str:
        return (
            f"/apis/{PCR_GROUP}/{self.pcr_version}/namespaces/{path_segment(namespace)}"
            "/podcertificaterequests"
        )

    def _read(self, path: str, what: str) -> JSON:
        try:
            return self.client.get(path)
        except ApiError as err:
            if is_not_found(err):
                raise ExplainError(f"{what} not found") from None
            raise ExplainError(f"{what}: {err}") from None

    def explain_pcr(self, namespace: str, name: str) -> Report:
        what = f"PodCertificateRequest {namespace}/{name}"
        raw = self._read(f"{self._pcr_base(namespace)}/{path_segment(name)}", what)
        pcr = pcr_record(raw)
        if pcr.signer_name != self.signer_name:
            raise ExplainError(
                f"{what} is for signer {pcr.signer_name!r}, not {self.signer_name!r}"
            )
        return Report(namespace, pcr.pod_name, self.signer_name, (self._request(pcr, raw),))

    def explain_pod(self, namespace: str, name: str) -> Report:
        pod_raw = self._read(
            f"/api/v1/namespaces/{path_segment(namespace)}/pods/{path_segment(name)}",
            f"Pod {namespace}/{name}",
        )
        uid = (pod_raw.get("metadata") or {}).get("uid")
        try:
            listed = self.client.get(
                self._pcr_base(namespace), {"fieldSelector": f"spec.signerName={self.signer_name}"}
            )
        except ApiError as err:
            raise ExplainError(f"listing PodCertificateRequests in {namespace}: {err}") from None
        raws = [
            item
            for item in listed.get("items") or []
            if (item.get("spec") or {}).get("podName") == name
            and (item.get("spec") or {}).get("podUID") == uid
        ]
        raws.sort(key=lambda item: (item.get("metadata") or {}).get("creationTimestamp") or "")
        reports = tuple(self._request(pcr_record(raw), raw) for raw in raws)
        note = None
        if not reports:
            projects = _projects_signer(pod_raw, self.signer_name)
            note = (
                "kubelet has not created a request yet (it does once the Pod is bound to a "
                "node and its volumes are set up)"
                if projects
                else f"the Pod projects no podCertificate volume for {self.signer_name}"
            )
        return Report(namespace, name, self.signer_name, reports, note)

    def _request(self, pcr: PCRRecord, raw: JSON) -> RequestReport:
        created = (raw.get("metadata") or {}).get("creationTimestamp")
        terminal = terminal_condition(raw.get("status") or {})
        if terminal is not None:
            condition = _condition(raw, terminal)
            reason = condition.get("reason")
            outcome = Outcome.ISSUE if terminal == "Issued" else Outcome.DENY
            return RequestReport(
                name=pcr.name,
                created=created,
                outcome=outcome,
                summary=f"already {terminal}",
                reason=reason,
                message=condition.get("message"),
                fix=None if terminal == "Issued" else FIXES.get(str(reason)),
                already=terminal,
            )
        decision = self.controller.decide(pcr)
        if isinstance(decision, Final):
            return RequestReport(
                name=pcr.name,
                created=created,
                outcome=Outcome.DENY,
                summary=f"would be {decision.condition} ({decision.reason})",
                reason=decision.reason,
                message=decision.message,
                fix=FIXES.get(decision.reason),
            )
        if isinstance(decision, Wait):
            blocking = tuple(
                Blocking(
                    service=b.service_key,
                    reason=b.reason,
                    message=b.message,
                    fix=FIXES.get(b.reason, ""),
                    differing_keys=(
                        _differing_keys(self._services.get(b.service_key), decision.pod)
                        if b.reason == "ServiceSelectorMismatch"
                        else {}
                    ),
                )
                for b in decision.blockers
            )
            return RequestReport(
                name=pcr.name,
                created=created,
                outcome=Outcome.WAIT,
                summary=f"waits on {len(blocking)} Service(s)",
                blocking=blocking,
            )
        return RequestReport(
            name=pcr.name,
            created=created,
            outcome=Outcome.ISSUE,
            summary="would be issued now",
            dns_names=decision.dns_names,
        )


def _condition(raw: JSON, kind: str) -> Mapping[str, Any]:
    for condition in (raw.get("status") or {}).get("conditions") or ():
        if condition.get("type") == kind:
            found: Mapping[str, Any] = condition
            return found
    return {}


def _differing_keys(
    service: ServiceRecord | None, pod: PodRecord
) -> dict[str, tuple[str, str | None]]:
    if service is None:
        return {}
    return {
        key: (value, pod.labels.get(key))
        for key, value in sorted(service.selector.items())
        if pod.labels.get(key) != value
    }


def _projects_signer(pod: JSON, signer_name: str) -> bool:
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        for source in (volume.get("projected") or {}).get("sources") or ():
            if (source.get("podCertificate") or {}).get("signerName") == signer_name:
                return True
    return False


# rendering -----------------------------------------------------------------------------


def render_text(report: Report) -> str:
    lines = [
        f"Pod {report.namespace}/{report.pod} (signer {report.signer_name}): "
        f"{report.outcome.name.lower().replace('_', ' ')}"
    ]
    if report.note:
        lines.append(f"  {report.note}")
    for request in report.requests:
        lines.append(
            f"  PodCertificateRequest {request.name} (created {request.created}): {request.summary}"
        )
        if request.dns_names:
            lines.append(f"    names: {', '.join(request.dns_names)}")
        if request.reason and request.already != "Issued":
            lines.append(f"    reason: {request.reason}")
        if request.message and request.already != "Issued":
            lines.append(f"    message: {request.message}")
        if request.fix:
            lines.append(f"    fix: {request.fix}")
        for block in request.blocking:
            lines.append(f"    Service {block.service}: {block.reason}")
            lines.append(f"      {block.message}")
            for key, (wanted, has) in block.differing_keys.items():
                shown = "no such label" if has is None else f"{has!r}"
                lines.append(f"      selector key {key}: Service wants {wanted!r}, Pod has {shown}")
            if block.fix:
                lines.append(f"      fix: {block.fix}")
    return "\n".join(lines) + "\n"


def render_json(report: Report) -> str:
    body = asdict(report)
    body["outcome"] = report.outcome.name.lower()
    for request, raw in zip(body["requests"], report.requests, strict=True):
        request["outcome"] = raw.outcome.name.lower()
        for block in request["blocking"]:
            block["differing_keys"] = {
                k: {"service": v[0], "pod": v[1]} for k, v in block["differing_keys"].items()
            }
    return json.dumps(body, indent=2) + "\n"

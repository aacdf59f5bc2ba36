"""What to change so the next request succeeds — naming the value that would pass, and
where to write it. Pure: no client; `troubleshoot.explain` supplies what it read.

Decisions:

* **A value, not a rule.** For an annotation the signer denied, the advice is the whole
  corrected `userAnnotations` map, each Service name made a lowercase DNS-1035 label (a
  letter first; what every Kubernetes version accepts as a Service name) and checked
  against the signer's own parser, so following the advice cannot lead to a second
  denial. When no valid value can be derived (nothing left of the name), the advice
  says what the rule is instead.
* **Where.** A Pod's spec is immutable and a controller re-creates its Pods from a
  template, so a fix to the projection (annotations, key type, hostname) or to the
  labels goes into the owner's Pod template — the Deployment behind a ReplicaSet, the
  CronJob behind a Job — named with the field path; only a bare Pod is re-created by
  hand. Relabelling a controlled Pod would be undone by its next rollout.
* **Selector mismatches** are offered both ways with values: the labels to add to the
  template, or the selector that matches the Pod as it is (without
  `pod-template-hash`, `controller-revision-hash` and other per-revision labels).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from signer import policy
from trust import keys

# Labels a controller stamps per revision or per Pod; a Service must not select on them.
REVISION_LABELS = frozenset(
    {
        "pod-template-hash",
        "controller-revision-hash",
        "statefulset.kubernetes.io/pod-name",
        "apps.kubernetes.io/pod-index",
        "batch.kubernetes.io/controller-uid",
        "batch.kubernetes.io/job-name",
        "controller-uid",
        "job-name",
        "batch.kubernetes.io/job-completion-index",
    }
)
TRUE_WORDS = frozenset({"true", "yes", "1", "on"})


@dataclass(frozen=True)
class Owner:
    """Where the Pod's spec comes from: `kind` and `name` of the top controller and the
    field path of its Pod template (empty for a bare Pod)."""

    kind: str
    name: str
    template: str

    @property
    def bare(self) -> bool:
        return self.kind == "Pod"

    def where(self, namespace: str, field: str) -> str:
        if self.bare:
            return f"Pod {namespace}/{self.name}'s {field}"
        return f"{self.kind} {namespace}/{self.name}'s Pod template ({self.template}.{field})"

    def then(self) -> str:
        if self.bare:
            return "Pod specs are immutable: delete the Pod and create it again with the change"
        return f"the {self.kind} replaces its Pods with ones that carry the change"


TEMPLATE_PATHS = {
    "Deployment": "spec.template",
    "StatefulSet": "spec.template",
    "DaemonSet": "spec.template",
    "ReplicaSet": "spec.template",
    "ReplicationController": "spec.template",
    "Job": "spec.template",
    "CronJob": "spec.jobTemplate.spec.template",
}


def owner(kind: str, name: str) -> Owner:
    if kind in TEMPLATE_PATHS:
        return Owner(kind, name, TEMPLATE_PATHS[kind])
    return Owner("Pod", name, "")


def passing_service_name(entry: str) -> str | None:
    """The Service name a (denied) `kubernetes.io/service-names` entry most likely meant;
    the signer's own suggestion (`signer.policy.suggested_service_name`), so explain and
    the signer's Event never advise different values."""
    return policy.suggested_service_name(entry)


def passing_annotations(annotations: Mapping[str, str]) -> dict[str, str] | None:
    """The `userAnnotations` the signer would accept, closest to `annotations`: unknown
    keys dropped, Service names corrected, `add-pod-fqdn` spelled "true" (or dropped when
    it said no). None when nothing is left to ask for."""
    fixed: dict[str, str] = {}
    raw = annotations.get(policy.SERVICE_NAMES)
    if raw is not None:
        names: dict[str, None] = {}
        for entry in raw.split(","):
            name = passing_service_name(entry)
            if name is not None:
                names.setdefault(name, None)
        if names:
            fixed[policy.SERVICE_NAMES] = ",".join(list(names)[: policy.MAX_SERVICE_NAMES])
    fqdn = annotations.get(policy.ADD_POD_FQDN)
    if fqdn is not None and fqdn.strip().lower() in TRUE_WORDS:
        fixed[policy.ADD_POD_FQDN] = "true"
    if not fixed or isinstance(policy.decide_names(fixed), policy.Denial):
        return None
    return fixed


def annotations_literal(annotations: Mapping[str, str]) -> str:
    return "{" + ", ".join(f'{k}: "{v}"' for k, v in annotations.items()) + "}"


def matching_selector(pod_labels: Mapping[str, str]) -> dict[str, str]:
    """A selector that matches the Pod as it is, without per-revision labels."""
    return {k: v for k, v in sorted(pod_labels.items()) if k not in REVISION_LABELS}


def labels_literal(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels.items())


@dataclass(frozen=True)
class Context:
    """What the advice may name: the Pod's namespace, its owner, the projection volume,
    the request's annotations and the Pod's labels."""

    namespace: str
    owner: Owner
    volume: str = ""
    annotations: Mapping[str, str] | None = None
    pod_labels: Mapping[str, str] | None = None


def _projection(ctx: Context) -> str:
    volume = f"[name={ctx.volume}]" if ctx.volume else ""
    return f"spec.volumes{volume}.projected.sources[].podCertificate"


def for_denial(reason: str, ctx: Context) -> str:
    """What to change after a final Denied/Failed reason."""
    where = ctx.owner.where
    ns = ctx.namespace
    if reason == policy.INVALID_ANNOTATIONS:
        fixed = passing_annotations(ctx.annotations or {})
        field = f"{_projection(ctx)}.userAnnotations"
        if fixed is None:
            return (
                f"set {where(ns, field)} to kubernetes.io/service-names (comma-separated "
                "names of Services in the Pod's namespace, lowercase letters, digits and "
                f"'-') and/or kubernetes.io/add-pod-fqdn: \"true\"; {ctx.owner.then()}"
            )
        return f"set {where(ns, field)} to {annotations_literal(fixed)}; {ctx.owner.then()}"
    if reason == policy.UNSUPPORTED_KEY:
        key_type = where(ns, _projection(ctx) + ".keyType")
        return f"set {key_type} to {keys.DEFAULT_KEY_TYPE}; {ctx.owner.then()}"
    if reason == "PodHostnameRequired":
        if ctx.owner.kind == "StatefulSet":
            return (
                f"set StatefulSet {ns}/{ctx.owner.name}'s spec.serviceName to a headless "
                "Service selecting its Pods (the StatefulSet then sets each Pod's hostname "
                "and subdomain)"
            )
        return (
            "kubernetes.io/add-pod-fqdn needs spec.hostname and spec.subdomain, which a "
            "StatefulSet (spec.serviceName: a headless Service) sets per Pod; run the "
            f"workload as a StatefulSet, or remove add-pod-fqdn from {where(ns, 'spec')}"
        )
    if reason in (policy.INVALID_STUB, policy.INVALID_PKIX):
        return "kubelet writes a valid request; a client other than kubelet created this one"
    if reason == "PodNotFound":
        return "the Pod is gone or was re-created; kubelet makes a new request for the new Pod"
    if reason == "PodMismatch":
        return "only the Pod's own kubelet may request for it; this request is not from it"
    if reason == "PodTerminating":
        return "the Pod is being deleted; its replacement gets its own request"
    return ""


def for_blocker(
    reason: str,
    service: str,
    ctx: Context,
    selector: Mapping[str, str] | None = None,
) -> str:
    """What unblocks a request waiting on Service `service` (its name)."""
    ns = ctx.namespace
    labels = matching_selector(ctx.pod_labels or {})
    if reason == "ServiceNotFound":
        example = f" with selector {labels_literal(labels)}" if labels else ""
        return (
            f"create Service {ns}/{service}{example}, or name an existing Service in "
            f"{ctx.owner.where(ns, _projection(ctx) + '.userAnnotations')}"
        )
    if reason == "ServiceSelectorMismatch":
        if not selector:
            return (
                f"give Service {ns}/{service} a selector that matches the Pod "
                f"({labels_literal(labels) or 'the Pod has no labels'})"
            )
        missing = {k: v for k, v in sorted(selector.items()) if (ctx.pod_labels or {}).get(k) != v}
        return (
            f"add labels {labels_literal(missing)} to "
            f"{ctx.owner.where(ns, 'metadata.labels')}, or set Service {ns}/{service}'s "
            f"selector to {labels_literal(labels) or '(the Pod has no labels)'}"
        )
    if reason == "ServiceNotHeadless":
        return (
            f"Service {ns}/{service} must be headless: spec.clusterIP is immutable, so "
            "delete it and create it again with clusterIP: None (same name and selector)"
        )
    return ""

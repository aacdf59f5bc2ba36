"""The signer's decision for one PodCertificateRequest, from start to outcome.

`Decider.decide(pcr)` is the whole decision, read top to bottom in the order the signer
applies it; the controller (`signer.controller`) only acts on the outcome, and
`service-serving-signer explain` asks the same `Decider`, over its own stores, what the
signer would do — so the two cannot drift. Nothing here writes, records an Event or
touches the waiting index. The steps are numbered as docs/reference.md §5.2 numbers them.

0. **Before step 1, the key material.** A v1 request carrying no stub CSR can only be a
   pre-1.36 kubelet's `pkixPublicKey` request, which the v1 view hides: its key is read
   once through v1beta1 (`Lookups.legacy_pkix_key`), so a v1 signer also serves skewed
   kubelets. It is read first, before anything is parsed, so everything after it is a
   function of what the request holds.
1. **Annotations** (`signer.policy.decide_names`, pure) → the Service names and the Pod
   FQDN flag; a problem is final: Denied.
2. **Public key** (`signer.policy.public_key_from_request`, pure); a problem is final:
   Denied.
3. **The Pod** must exist with the uid the request names, on the request's node, as its
   ServiceAccount, and not be terminating (Failed `PodNotFound`/`PodTerminating`,
   Denied `PodMismatch`). Step 5's rule on the Pod itself (`add-pod-fqdn` needs its
   hostname and subdomain, else Denied `PodHostnameRequired`) is checked here too, as
   it is final and needs no Service.
4. **The Services** it names must exist, not be ExternalName, and select the Pod.
5. **The Pod FQDN's Service** (named like the Pod's subdomain) must exist, select the
   Pod and be headless.
6. **Waiting**: each Service of step 4 or 5 that does not qualify is a `Blocker`; any
   blocker means `Wait` (nothing is final: a Service can appear or change).

Otherwise **Sign** (§5.3) for the Services' and the Pod's DNS names (`policy.sans_for`),
and, with `cluster_ip_sans` (`--cluster-ip-sans`, KEP-6283), the cluster IPs of the
named Services that have one (a headless Service has none; the Pod FQDN's Service is
headless by step 5).

Lookups trust the cache for what can only get better (a Service appearing re-drives the
request anyway) and confirm with one live read before anything final: a Pod absent from
the cache, or one whose uid/node/ServiceAccount disagree with the request, is read from
the API server before the request is Failed or Denied on its account, because a lagging
Pod informer must never make a permanent decision. A Service absent from the cache is
read live too (a wait costs an Event), once per decision even when named twice.

The stores are protocols: the controller passes its informer caches, `explain` stores
that read the API server; both pass `signer.lookups.ApiLookups` for the live reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from signer import policy
from signer.records import PCRRecord, PodRecord, ServiceRecord

T = TypeVar("T", covariant=True)


class Store(Protocol[T]):
    """A read by `namespace/name`: an informer's cache, or explain's live store."""

    def get(self, key: str) -> T | None: ...


class Lookups(Protocol):
    """The reads a decision makes of the API server itself (one GET each; None when
    not found). `signer.lookups.ApiLookups` is the one implementation."""

    def pod(self, namespace: str, name: str) -> PodRecord | None: ...

    def service(self, namespace: str, name: str) -> ServiceRecord | None: ...

    def legacy_pkix_key(self, namespace: str, name: str) -> bytes | str | None: ...


# outcomes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Terminal:
    """Denied or Failed: written once, never retried."""

    condition: str  # "Denied" | "Failed"
    reason: str
    message: str


@dataclass(frozen=True)
class Blocker:
    """One Service that keeps a request waiting, and the Event that says why."""

    service_key: str
    reason: str  # ServiceNotFound | ServiceSelectorMismatch | ServiceNotHeadless
    message: str


@dataclass(frozen=True)
class Wait:
    pod: PodRecord
    blockers: tuple[Blocker, ...]
    # Cache contents the decision was made from, so the controller can close the race
    # with an event that arrived before the request entered the waiting index.
    seen_services: Mapping[str, ServiceRecord | None] = field(default_factory=dict)
    seen_pod: PodRecord | None = None


@dataclass(frozen=True)
class Sign:
    pod: PodRecord
    public_key: policy.PublicKey
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...] = ()
    key_type: str = ""
    """The key's kubelet `keyType` spelling, for the issued metric's label."""


Decision = Terminal | Wait | Sign


# the decision ------------------------------------------------------------------------


class Decider:
    def __init__(
        self,
        pods: Store[PodRecord],
        services: Store[ServiceRecord],
        lookups: Lookups,
        *,
        domain: str,
        pcr_version: str,
        cluster_ip_sans: bool = False,
    ) -> None:
        self.pods = pods
        self.services = services
        self.lookups = lookups
        self.domain = domain
        self.pcr_version = pcr_version
        self.cluster_ip_sans = cluster_ip_sans

    def decide(self, pcr: PCRRecord) -> Decision:
        """docs/reference.md §5.2, steps 1-6 in order (the module docstring)."""
        # Before step 1: the key a pre-1.36 kubelet sent, hidden by the v1 view.
        pkix: bytes | str | None = pcr.pkix_public_key
        if pcr.stub_pkcs10 is None and pkix is None and self.pcr_version == "v1":
            pkix = self.lookups.legacy_pkix_key(pcr.namespace, pcr.name)

        # Steps 1 and 2: what the request asks for.
        names = policy.decide_names(pcr.annotations)
        if isinstance(names, policy.Denial):
            return Terminal("Denied", names.reason, names.message)
        public_key = policy.public_key_from_request(pcr.stub_pkcs10, pkix)
        if isinstance(public_key, policy.Denial):
            return Terminal("Denied", public_key.reason, public_key.message)

        # Step 3 (with step 5's rule on the Pod itself).
        seen_pod = self.pods.get(pcr.pod_key)
        pod = self._pod(pcr, seen_pod)
        problem = pod_problem(pcr, pod, pod_fqdn=names.pod_fqdn)
        if problem is not None:
            return problem
        assert pod is not None  # pod_problem says PodNotFound otherwise

        # Steps 4 and 5: each Service that does not qualify is a blocker; step 6: wait.
        services = _ServiceReads(self.services, self.lookups, pod.namespace)
        blockers = [
            service_blocker(pcr, pod, name, services.get(name), headless=False)
            for name in names.service_names
        ]
        if names.pod_fqdn:
            blockers.append(
                service_blocker(pcr, pod, pod.subdomain, services.get(pod.subdomain), headless=True)
            )
        waiting_on = unique_blockers(b for b in blockers if b is not None)
        if waiting_on:
            return Wait(pod, tuple(waiting_on), services.seen, seen_pod)

        dns_names = policy.sans_for(
            pod.namespace,
            self.domain,
            names.service_names,
            (pod.hostname, pod.subdomain) if names.pod_fqdn else None,
        )
        ips: dict[str, None] = {}
        if self.cluster_ip_sans:
            for name in names.service_names:
                service = services.get(name)
                ips.update(dict.fromkeys(service.virtual_ips if service else ()))
        return Sign(pod, public_key, tuple(dns_names), tuple(ips), policy.key_type_of(public_key))

    def _pod(self, pcr: PCRRecord, cached: PodRecord | None) -> PodRecord | None:
        """The cached Pod if it agrees with the request, else one live read: a decision
        against a lagging cache would be final."""
        if cached is not None and pod_agrees(cached, pcr):
            return cached
        return self.lookups.pod(pcr.namespace, pcr.pod_name)


class _ServiceReads:
    """The Services of one decision: from the cache, else one live read, each read once
    — a Service named twice (`service-names: db` and `add-pod-fqdn` with subdomain `db`)
    is judged on one read. `seen` keeps what the cache held at that first read: the
    controller's lost-wake-up check compares against it, so a Service added after it is
    never mistaken for one the decision already saw."""

    def __init__(self, cache: Store[ServiceRecord], lookups: Lookups, namespace: str) -> None:
        self._cache = cache
        self._lookups = lookups
        self._namespace = namespace
        self.seen: dict[str, ServiceRecord | None] = {}
        self._resolved: dict[str, ServiceRecord | None] = {}

    def get(self, name: str) -> ServiceRecord | None:
        key = f"{self._namespace}/{name}"
        if key not in self._resolved:
            cached = self.seen[key] = self._cache.get(key)
            self._resolved[key] = (
                cached if cached is not None else self._lookups.service(self._namespace, name)
            )
        return self._resolved[key]


# the rules (pure) ----------------------------------------------------------------------


def pod_problem(pcr: PCRRecord, pod: PodRecord | None, *, pod_fqdn: bool) -> Terminal | None:
    """What makes a request final on its Pod's account (§5.2 step 3, and step 5's
    `PodHostnameRequired`), or None."""
    if pod is None or pod.uid != pcr.pod_uid:
        return Terminal(
            "Failed",
            "PodNotFound",
            f"Pod {pcr.pod_key} with uid {pcr.pod_uid} does not exist",
        )
    if pod.node_name != pcr.node_name or pod.service_account_name != pcr.service_account_name:
        return Terminal(
            "Denied",
            "PodMismatch",
            f"request names node {pcr.node_name!r} and ServiceAccount "
            f"{pcr.service_account_name!r}, but Pod {pod.key} runs on node "
            f"{pod.node_name!r} as ServiceAccount {pod.service_account_name!r}",
        )
    if pod.deleting:
        return Terminal(
            "Failed", "PodTerminating", f"Pod {pod.key} is being deleted; not signing for it"
        )
    if pod_fqdn and (not pod.hostname or not pod.subdomain):
        return Terminal(
            "Denied",
            "PodHostnameRequired",
            f"kubernetes.io/add-pod-fqdn needs Pod {pod.key} to set spec.hostname "
            "and spec.subdomain (and a headless Service named like spec.subdomain "
            "selecting it); Pod specs are immutable, so recreate the Pod with both",
        )
    return None


def service_blocker(
    pcr: PCRRecord,
    pod: PodRecord,
    name: str,
    service: ServiceRecord | None,
    *,
    headless: bool,
) -> Blocker | None:
    """Why Service `name` keeps the request waiting (§5.2 steps 4 and 5, `headless` for
    step 5's), or None when it does not."""
    key = f"{pod.namespace}/{name}"
    waits = f"PodCertificateRequest {pcr.key} waits until it does"
    if service is None:
        return Blocker(
            key,
            "ServiceNotFound",
            f"Service {name!r} does not exist in namespace {pod.namespace!r}; {waits}",
        )
    if service.type == "ExternalName":
        return Blocker(
            key,
            "ServiceSelectorMismatch",
            f"Service {name!r} is of type ExternalName, which selects no Pod; "
            f"PodCertificateRequest {pcr.key} waits until it selects Pod {pod.name!r}",
        )
    if not service.selector or not selects(service.selector, pod.labels):
        selector = ",".join(f"{k}={v}" for k, v in sorted(service.selector.items()))
        return Blocker(
            key,
            "ServiceSelectorMismatch",
            f"Service {name!r} selector {{{selector}}} does not select Pod {pod.name!r}; "
            f"PodCertificateRequest {pcr.key} waits until it does",
        )
    if headless and not service.headless:
        return Blocker(
            key,
            "ServiceNotHeadless",
            f"Service {name!r} (the Pod's spec.subdomain) is not headless "
            f"(clusterIP: {service.cluster_ip or 'unset'}); set clusterIP: None; "
            f"PodCertificateRequest {pcr.key} waits until it is",
        )
    return None


def pod_agrees(pod: PodRecord, pcr: PCRRecord) -> bool:
    """The Pod is the one the request names, where the request says it runs."""
    return (
        pod.uid == pcr.pod_uid
        and pod.node_name == pcr.node_name
        and pod.service_account_name == pcr.service_account_name
    )


def selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """A Service selects a Pod when its non-empty selector is a subset of the labels."""
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def unique_blockers(blockers: Iterable[Blocker]) -> list[Blocker]:
    """One blocker per (Service, reason), in first-seen order: one Event each."""
    seen: set[tuple[str, str]] = set()
    out = []
    for blocker in blockers:
        if (blocker.service_key, blocker.reason) not in seen:
            seen.add((blocker.service_key, blocker.reason))
            out.append(blocker)
    return out

"""`status` (and `explain --all`): the signer's health and every request that is not
issued, grouped by namespace and reason, oldest first — one command for on-call.

What it decides:

* **Which requests.** The signer's requests (field selector `spec.signerName`) in every
  namespace, or in one (`-n`), read in pages (`kube.pager`, `PAGE_SIZE` a page). Issued
  requests are counted, not shown; waiting, denied, failed and stuck ones are shown.
  kube-controller-manager deletes every request 15 minutes after creation, so the list
  is the last quarter-hour of the cluster's traffic.
* **Bounded work.** No Pod or Service cache: each shown request costs the reads its
  decision needs (its Pod, the Services it names, the Pod's owner), each read once per
  run. At most `max_shown` requests (oldest first) are decided and shown; the rest are
  counted by state and the reader is told how many were left out.
* **Grouping.** Namespace (sorted), then (state, reason) — `waiting ServiceNotFound`,
  `Denied InvalidUnverifiedUserAnnotations` — largest group first, then each group's
  requests oldest first, with the advice `explain` gives.
* **Exit status** (`EXIT_*`): 0 when a signer acts, its bundle is published and nothing
  is waiting, denied, failed or stuck; 5 when nothing will act — no signer process runs
  (its presence report is missing or expired), none leads, or a shown request says so
  (as `explain` judges it); 6 when a signer acts but no ClusterTrustBundle is published
  for it (clients that trust through a projection cannot verify what it issues); 2 when
  requests wait, were denied or failed. The first that holds, in that order (5, 6, 2).
  When we may read neither the leader Lease's holder nor the presence, "nothing acts" is
  concluded only from the Lease or a shown request, never from what we cannot see.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from cryptography import x509

from kube.client import ApiError
from kube.pager import RESTART, pages
from kube.types import JSON
from signer.lookups import PCR_GROUP
from signer.records import pcr_record, terminal_condition
from troubleshoot import advice
from troubleshoot.access import denied_or_raise
from troubleshoot.explain import Explainer, Outcome, RequestReport
from troubleshoot.leasehealth import Anchor, Health, Leader, describe_anchor
from troubleshoot.render import health_json, health_lines, request_json, request_lines

PAGE_SIZE = 500
MAX_SHOWN = 200

EXIT_OK = 0
EXIT_REQUESTS = 2  # requests wait, were denied or failed
EXIT_NOTHING_ACTS = int(Outcome.NOTHING_ACTS)  # 5
EXIT_NOT_PUBLISHED = 6


@dataclass(frozen=True)
class Shown:
    namespace: str
    pod: str
    owner: advice.Owner | None
    request: RequestReport

    @property
    def state(self) -> str:
        r = self.request
        if r.outcome is Outcome.NOTHING_ACTS:
            return "nothing will act"
        if r.already:
            return r.already
        if r.outcome is Outcome.WAIT:
            return "waiting"
        if r.outcome is Outcome.DENY:
            return r.summary.split(" (")[0]  # "would be Denied"
        return "would be issued"

    @property
    def reason(self) -> str:
        r = self.request
        if r.blocking:
            return "+".join(dict.fromkeys(b.reason for b in r.blocking))
        return r.reason or ""


@dataclass
class SignerStatus:
    """What `status` shows: the signer's health and its requests, grouped and counted
    (not the API's `Status` kind, nor the managed CA's `troubleshoot.castatus.CaStatus`)."""

    health: Health
    namespace: str | None
    counts: Counter[str] = field(default_factory=Counter)  # state → requests
    shown: list[Shown] = field(default_factory=list)
    left_out: int = 0

    @property
    def exit_status(self) -> int:
        """The module docstring's exit status: 5, 6, 2 or 0."""
        if self.nothing_acts:
            return EXIT_NOTHING_ACTS
        if self.health.bundle.published is False:
            return EXIT_NOT_PUBLISHED
        return EXIT_REQUESTS if self.shown or self.left_out else EXIT_OK

    @property
    def nothing_acts(self) -> bool:
        """No signer acts: a shown request says so, or the health does (`Health.acting`);
        when the health cannot tell, a leader Lease nobody renews with no shown request
        carrying a trace of a signer acting anyway (with no Lease at all and no trace,
        explain cannot tell)."""
        if any(item.request.outcome is Outcome.NOTHING_ACTS for item in self.shown):
            return True
        traced = any(item.request.acting for item in self.shown)
        acting = self.health.acting
        if acting is not None:
            return not acting and not (traced and self.health.presence_missing)
        lease = self.health.lease
        return lease.acting is False and not traced and lease.leader is not Leader.MISSING

    def groups(self) -> list[tuple[str, list[tuple[tuple[str, str], list[Shown]]]]]:
        by_ns: dict[str, dict[tuple[str, str], list[Shown]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for item in self.shown:
            by_ns[item.namespace][(item.state, item.reason)].append(item)
        out = []
        for ns in sorted(by_ns):
            groups = sorted(by_ns[ns].items(), key=lambda kv: (-len(kv[1]), kv[0]))
            out.append((ns, [(k, sorted(v, key=_created)) for k, v in groups]))
        return out


def _created(item: Shown) -> tuple[datetime, str, str]:
    """Oldest first; within the API's one-second resolution, by Pod and request name."""
    return (
        item.request.created or datetime.min.replace(tzinfo=UTC),
        item.pod,
        item.request.name,
    )


def _age_order(raw: JSON) -> tuple[str, str, str, str]:
    meta = raw.get("metadata") or {}
    return (
        str(meta.get("creationTimestamp") or ""),
        str(meta.get("namespace") or ""),
        str((raw.get("spec") or {}).get("podName") or ""),
        str(meta.get("name") or ""),
    )


def collect(
    explainer: Explainer,
    health: Health,
    *,
    namespace: str | None,
    max_shown: int = MAX_SHOWN,
) -> SignerStatus:
    """List the signer's requests and decide the oldest `max_shown` that are not issued."""
    status = SignerStatus(health, namespace)
    pending: list[JSON] = []
    newest_issued: tuple[str, str] | None = None  # (creationTimestamp, chain)
    for raw in _requests(explainer, namespace):
        meta = raw.get("metadata") or {}
        st = raw.get("status") or {}
        if st.get("certificateChain"):
            status.counts["Issued"] += 1
            created = str(meta.get("creationTimestamp") or "")
            if newest_issued is None or created > newest_issued[0]:
                newest_issued = (created, str(st["certificateChain"]))
            continue
        pending.append(raw)
    pending.sort(key=_age_order)
    for raw in pending[:max_shown]:
        item = _decide(explainer, raw)
        status.counts[item.state] += 1
        status.shown.append(item)
    for raw in pending[max_shown:]:
        status.left_out += 1
        status.counts[_cheap_state(raw)] += 1
    if newest_issued is not None:
        material = _signing_cert(newest_issued[1], health.bundle.anchors)
        status.health = replace(health, material=material)
    return status


def _requests(explainer: Explainer, namespace: str | None) -> Iterable[JSON]:
    params = {"fieldSelector": f"spec.signerName={explainer.signer_name}", "limit": PAGE_SIZE}
    try:
        for page in pages(
            explainer.client, explainer.pcr_base(namespace), params, threading.Event()
        ):
            if page is RESTART:
                continue  # the unpaged relist follows; duplicates cannot arise
            yield from page.get("items") or ()
    except ApiError as err:
        raise denied_or_raise(
            err, "list", "podcertificaterequests", PCR_GROUP, namespace or ""
        ) from None


def _decide(explainer: Explainer, raw: JSON) -> Shown:
    pcr = pcr_record(raw)
    pod_raw = explainer.pod_raw(pcr.namespace, pcr.pod_name)
    if pod_raw is not None and (pod_raw.get("metadata") or {}).get("uid") != pcr.pod_uid:
        pod_raw = None
    owner = explainer.owner_of(pcr.namespace, pcr.pod_name, pod_raw) if pod_raw else None
    request = explainer.request(pcr, raw, pod_raw, owner or advice.owner("Pod", pcr.pod_name))
    return Shown(pcr.namespace, pcr.pod_name, owner, request)


def _cheap_state(raw: JSON) -> str:
    """The state of a request not decided here: its terminal condition as the signer
    reads it (`signer.records.terminal_condition`), else pending."""
    return terminal_condition(raw.get("status") or {}) or "pending (not decided here)"


def _signing_cert(chain: str, anchors: tuple[Anchor, ...]) -> Anchor | None:
    """The certificate that signed an issued chain: its intermediate, or — a chain
    carries no self-signed root — the published anchor named as the leaf's issuer."""
    try:
        certs = x509.load_pem_x509_certificates(chain.encode())
    except ValueError:
        return None
    if len(certs) > 1:
        return describe_anchor(certs[1])
    issuer = certs[0].issuer.rfc4514_string()
    return next((a for a in anchors if a.subject == issuer), None)


def status_json(status: SignerStatus) -> dict[str, Any]:
    return {
        "signer": health_json(status.health),
        "namespace": status.namespace,
        "counts": dict(sorted(status.counts.items())),
        "leftOut": status.left_out,
        "exitStatus": status.exit_status,
        "namespaces": [
            {
                "namespace": ns,
                "groups": [
                    {
                        "state": state,
                        "reason": reason,
                        "requests": [
                            {
                                "pod": item.pod,
                                "owner": (
                                    {"kind": item.owner.kind, "name": item.owner.name}
                                    if item.owner
                                    else None
                                ),
                                **request_json(item.request),
                            }
                            for item in items
                        ],
                    }
                    for (state, reason), items in groups
                ],
            }
            for ns, groups in status.groups()
        ],
    }


def render_status(status: SignerStatus, now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    lines = [f"Signer {status.health.signer_name}"]
    lines += [f"  {line}" for line in health_lines(status.health, now, full=True)]
    scope = f"in namespace {status.namespace}" if status.namespace else "in all namespaces"
    total = sum(status.counts.values())
    counts = ", ".join(f"{n} {state}" for state, n in sorted(status.counts.items()))
    lines.append(f"Requests {scope}: {total}" + (f" ({counts})" if counts else ""))
    if status.left_out:
        lines.append(
            f"  {status.left_out} more not shown (the oldest {len(status.shown)} are); "
            "narrow with -n NAMESPACE or raise --max-requests"
        )
    for ns, groups in status.groups():
        lines.append("")
        lines.append(f"Namespace {ns}")
        for (state, reason), items in groups:
            head = f"{state} {reason}".strip()
            lines.append(f"  {head}: {len(items)} request(s)")
            for item in items:
                owner = ""
                if item.owner is not None and not item.owner.bare:
                    owner = f", {item.owner.kind} {ns}/{item.owner.name}"
                lines.append(f"    Pod {item.pod}{owner}")
                lines += request_lines(item.request, now, indent="      ")
    return "\n".join(lines) + "\n"

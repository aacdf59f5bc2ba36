"""What `ca rotate --emergency` asks of the managed CA's leader, computed from the CA Secret
as read (read-only: `cli/ca.py` shows the plan, asks for confirmation and writes it).

The Secret is read part by part (`read_ca_secret`): an operator reaches for the emergency
exactly when something is wrong, e.g. a hand edit deleted `ca.key`, so a part that does
not decode is noted, never a traceback. Only the current certificate is required.

The plan (`plan_emergency`) is safe to run twice, at 3 a.m.:

- Roots are named by any unique prefix of their sha256 fingerprint (`ca status` prints the
  first 16 hex digits and `…`); the default is the current CA.
- A request still pending (the leader has not acted: it is down, or its syncs fail) is
  merged with, never replaced: `ca-revoke` becomes the union, `ca-emergency-requested-at`
  keeps the first request's time. Asking again for what is pending writes nothing.
- While an emergency is in progress (the current CA was made by one and no rotation has
  swapped since), revoking the current CA — which is then the fresh emergency CA — is
  refused without `force`: run twice by mistake, the default would revoke the clean CA.
- Already revoked roots are reported, not requested again.
- Revoking only previous roots (or a staged next CA) keeps the signing CA: no new CA.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from kube.times import format_time, read_time
from managedca.codec import (
    EMERGENCY,
    EMERGENCY_REQUESTED_AT,
    ISSUED_LIFETIME,
    REVOKE,
    SWAPPED_AT,
    ca_info,
)
from managedca.layout import (
    CONFIRMED_AT,
    CURRENT_CERT,
    CURRENT_KEY,
    NEXT_CERT,
    PREVIOUS_CERTS,
    REVOKED,
    split_pem,
)

MIN_PREFIX = 8
"""Hex digits a `--revoke` prefix needs at least: shorter ones are too easy to mistype
into another root's."""
KUBELET_REFRESH = "6.5 min"
"""kubelet's clusterTrustBundle projection refresh, worst case (the propagation delay's
floor)."""


class RotateRefused(Exception):
    """One line saying why nothing was requested, and what to do instead."""


@dataclass(frozen=True)
class Root:
    role: str  # "current", "next" or "previous"
    fingerprint: str
    not_before: datetime
    not_after: datetime

    @property
    def short(self) -> str:
        return f"{self.fingerprint[:16]}…"


@dataclass(frozen=True)
class CaSecret:
    """The CA Secret as far as it can be read."""

    where: str
    resource_version: str
    roots: tuple[Root, ...]
    requested_at: datetime | None  # a pending emergency request
    pending: frozenset[str]  # its `ca-revoke`
    revoked: frozenset[str]
    emergency: bool  # the current CA was made by an emergency rotation
    confirmed_at: datetime | None
    swapped_at: datetime | None
    issued_lifetime: timedelta | None
    problems: tuple[str, ...]  # parts that could not be read (a hand edit?)

    @property
    def current(self) -> Root:
        return self.roots[0]

    def emergency_in_progress(self) -> bool:
        """The current CA was made by `ca rotate --emergency` and no rotation has swapped
        it out since (the leader's emergency state starts with no swap)."""
        return self.emergency and self.swapped_at is None


def read_ca_secret(secret: Mapping[str, Any]) -> CaSecret:
    """The Secret's roots and emergency annotations; raises `RotateRefused` only when the
    current CA certificate itself cannot be read."""
    meta = secret.get("metadata") or {}
    where = f"{meta.get('namespace')}/{meta.get('name')}"
    annotations = meta.get("annotations") or {}
    problems: list[str] = []
    data: dict[str, bytes] = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            data[key] = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError, TypeError):
            problems.append(f"{key} is not base64")
    if CURRENT_KEY not in data:
        problems.append(f"{CURRENT_KEY} is missing")
    roots: list[Root] = []
    for role, key in (("current", CURRENT_CERT), ("next", NEXT_CERT), ("previous", PREVIOUS_CERTS)):
        for pem in split_pem(data.get(key, b"")):
            try:
                info = ca_info(pem)
            except ValueError:
                problems.append(f"{key} holds a certificate that does not parse")
                continue
            roots.append(Root(role, info.fingerprint, info.not_before, info.not_after))
    if not roots or roots[0].role != "current":
        raise RotateRefused(
            f"secret {where}: its current CA ({CURRENT_CERT}) cannot be read"
            + (f" ({'; '.join(problems)})" if problems else "")
            + ": nothing to revoke by; mend the Secret or delete it (docs/managed-ca.md)"
        )

    def time(key: str) -> datetime | None:
        text = annotations.get(key)
        if not text:
            return None
        try:
            return read_time(str(text))
        except ValueError:
            problems.append(f"annotation {key} is not a time")
            return None

    lifetime: timedelta | None = None
    try:
        if annotations.get(ISSUED_LIFETIME):
            lifetime = timedelta(seconds=int(str(annotations[ISSUED_LIFETIME])))
    except (ValueError, OverflowError):
        problems.append(f"annotation {ISSUED_LIFETIME} is not a number of seconds")
    return CaSecret(
        where=where,
        resource_version=str(meta.get("resourceVersion", "")),
        roots=tuple(roots),
        requested_at=time(EMERGENCY_REQUESTED_AT),
        pending=_fingerprints(annotations.get(REVOKE)),
        revoked=_fingerprints(annotations.get(REVOKED)),
        emergency=annotations.get(EMERGENCY) == "true",
        confirmed_at=time(CONFIRMED_AT),
        swapped_at=time(SWAPPED_AT),
        issued_lifetime=lifetime,
        problems=tuple(problems),
    )


def _fingerprints(text: object) -> frozenset[str]:
    return frozenset(f.strip().lower() for f in str(text or "").split(",") if f.strip())


def _normalise(prefix: str) -> str:
    text = prefix.strip().lower().rstrip("…").rstrip(".")
    text = text.removeprefix("sha256:").replace(":", "")
    return text


def resolve(prefixes: Iterable[str], secret: CaSecret) -> frozenset[str]:
    """The fingerprints `prefixes` name: each a unique prefix (at least `MIN_PREFIX` hex
    digits; `sha256:`, colons and a trailing `…` are ignored) of a root of the Secret or
    of one already revoked or requested. Raises `RotateRefused` naming the bad one."""
    known = {r.fingerprint for r in secret.roots} | secret.revoked | secret.pending
    out = set()
    for prefix in prefixes:
        text = _normalise(prefix)
        if len(text) < MIN_PREFIX or any(c not in "0123456789abcdef" for c in text):
            raise RotateRefused(
                f"--revoke {prefix!r}: give at least {MIN_PREFIX} hex digits of the root's "
                "sha256 fingerprint, as `ca status` prints it"
            )
        matches = sorted(f for f in known if f.startswith(text))
        if not matches:
            listed = ", ".join(r.short for r in secret.roots)
            raise RotateRefused(
                f"--revoke {prefix!r} is not a root of {secret.where} (its roots: {listed})"
            )
        if len(matches) > 1:
            raise RotateRefused(
                f"--revoke {prefix!r} names {len(matches)} roots "
                f"({', '.join(m[:16] + '…' for m in matches)}); give more digits"
            )
        out.add(matches[0])
    return frozenset(out)


@dataclass(frozen=True)
class EmergencyPlan:
    """What a run asks for. `annotations` None: nothing to write (`note` says why)."""

    secret: CaSecret
    revoke: tuple[Root, ...]  # roots this run adds to the request
    kept_pending: frozenset[str]  # roots an earlier request already names
    annotations: dict[str, str] | None
    note: str = ""

    @property
    def new_ca(self) -> bool:
        """Whether the leader makes a new CA (the current one is revoked)."""
        names = {r.fingerprint for r in self.revoke} | self.kept_pending
        return self.secret.current.fingerprint in names

    def effects(self) -> list[str]:
        """What stops verifying and what pauses, in words, for the confirmation."""
        s = self.secret
        out: list[str] = []
        for root in self.revoke:
            signed = (
                f"leaves of up to {s.issued_lifetime} were signed with it"
                if root.role == "current" and s.issued_lifetime
                else "every leaf it signed"
            )
            out.append(
                f"{root.role} root {root.fingerprint} (valid until {format_time(root.not_after)}): "
                f"{signed}; they stop verifying as soon as a client's bundle drops it — "
                f"injected caBundles and ConfigMaps within seconds, kubelet-projected bundles "
                f"within {KUBELET_REFRESH}; kubelet replaces them at their refresh (delete "
                "the Pods to replace them now)"
            )
        nxt = [r for r in s.roots if r.role == "next"]
        if self.new_ca:
            out.append(
                "a new CA is made at once; nothing is issued until the ClusterTrustBundle "
                "read back holds it (about a second; requests wait, then are issued); its "
                f"leaves do not verify for a client whose bundle is older, for up to "
                f"{KUBELET_REFRESH}"
            )
            out += [f"the staged next CA {r.short} is discarded (its key sat beside)" for r in nxt]
        else:
            out.append(f"the signing CA {s.current.short} is kept: no new CA, issuance goes on")
        return out


def plan_emergency(
    secret: CaSecret, prefixes: Iterable[str], *, force: bool, now: datetime
) -> EmergencyPlan:
    """The request `ca rotate --emergency [--revoke PREFIX…] [--force]` makes of
    `secret` (see the module's rules). Raises `RotateRefused`."""
    named = resolve(prefixes, secret)
    wanted = named or frozenset({secret.current.fingerprint})
    fresh = secret.current.fingerprint
    if fresh in wanted - secret.pending and secret.emergency_in_progress() and not force:
        since = f" (confirmed {format_time(secret.confirmed_at)})" if secret.confirmed_at else ""
        raise RotateRefused(
            f"an emergency rotation is in progress: the current CA {secret.current.short} was "
            f"made by it{since}, and revoking it would stop its leaves verifying at once; "
            "see `ca status`. If that CA's key is compromised too, run again with --force"
        )
    already = sorted(wanted & secret.revoked)
    wanted -= secret.revoked
    adding = wanted - secret.pending
    by_fp = {r.fingerprint: r for r in secret.roots}
    if not adding:
        if secret.requested_at is not None:
            note = (
                f"an emergency rotation was already requested at "
                f"{format_time(secret.requested_at)}, revoking "
                f"{', '.join(f[:16] + '…' for f in sorted(secret.pending))}; nothing more to "
                "ask. The leader acts within seconds: if `ca status` shows nothing "
                "happening, is the signer running?"
            )
        else:
            note = f"already revoked: {', '.join(f[:16] + '…' for f in already)}; nothing to do"
        return EmergencyPlan(secret, (), secret.pending, None, note)
    at = secret.requested_at or now
    annotations = {
        EMERGENCY_REQUESTED_AT: format_time(at),
        REVOKE: ",".join(sorted(secret.pending | adding)),
    }
    revoke = tuple(by_fp[f] for f in sorted(adding, key=lambda f: _order(by_fp, f)))
    return EmergencyPlan(secret, revoke, secret.pending, annotations)


def _order(by_fp: Mapping[str, Root], fp: str) -> tuple[int, str]:
    return (("current", "next", "previous").index(by_fp[fp].role), fp)

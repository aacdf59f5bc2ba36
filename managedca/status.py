"""The leader's decision as `ca status` shows it: a typed `Decision`, published as JSON on
the leader's report Lease (`managedca.report.DECISION`), so `ca status` needs no access to
the CA Secret (the key).

`Decision.of(...)` builds it from what a step saw and decided; `to_json()` is what the
Lease carries and `Decision.from_json()` reads it back. The JSON is input from whoever can
write that Lease: `from_json` takes what it can read as the types below and drops the
rest, never raises on a value. The fields:

- `at`: when it was decided; `phase` (`decide.PHASES`, None: no CA yet);
- `cas`: each CA of the state (`role` current/next/previous, fingerprint, validity,
  whether the bundle read back holds it, a previous root's retire time) — never a key;
- `times`: the rotation under way only (stagedAt, publishedAt, swapNotBefore; swappedAt;
  or rotationDue; rotateRequestedAt);
- `replicas`: each replica's report as judged (live, has loaded the next CA, signs with,
  ready to sign with);
- `step`: the action's name (`Wait` while waiting), and for a wait its `reason`
  (`decide.WAIT_REASONS`, or `sync-failing`), `why` in words, `until` and `since`;
- `revoked`: the roots revoked for good; `issuancePaused`: the current CA was revoked and
  its replacement is not confirmed yet (nothing is signed meanwhile);
- `revokeRequested`, `emergencyRequestedAt`: a `ca rotate --emergency` not acted on yet;
- `consumersSkipped`: the swap to the staged (or just swapped-in) CA does not wait / did
  not wait for the injector's report (`ca-consumers-skipped-for`): `for` (the CA) and
  `by` (who, as `ca skip-consumers` recorded it; "unknown" when the annotation came from
  elsewhere), stated by the leader.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from kube.times import format_time
from managedca import decide as d

UNKNOWN_SKIPPER = "unknown"
"""`consumersSkipped.by` when the annotation was not written by `ca skip-consumers`."""


@dataclass(frozen=True)
class CaRecord:
    role: str  # current, next, previous
    fingerprint: str
    not_before: str
    not_after: str
    published: bool
    retire_at: str | None = None  # a previous root's

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "role": self.role,
            "fingerprint": self.fingerprint,
            "notBefore": self.not_before,
            "notAfter": self.not_after,
            "published": self.published,
        }
        if self.role == "previous":
            out["retireAt"] = self.retire_at
        return out

    @classmethod
    def from_json(cls, raw: object) -> CaRecord | None:
        if not isinstance(raw, Mapping):
            return None
        retire = raw.get("retireAt")
        return cls(
            _str(raw.get("role")),
            _str(raw.get("fingerprint")),
            _str(raw.get("notBefore")),
            _str(raw.get("notAfter")),
            raw.get("published") is True,
            retire if isinstance(retire, str) else None,
        )


@dataclass(frozen=True)
class ReplicaRecord:
    replica: str
    live: bool
    loaded_next: bool
    signing_ca: str | None
    ready_to_sign: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "replica": self.replica,
            "live": self.live,
            "loadedNext": self.loaded_next,
            "signingCA": self.signing_ca,
            "readyToSign": self.ready_to_sign,
        }

    @classmethod
    def from_json(cls, raw: object) -> ReplicaRecord | None:
        if not isinstance(raw, Mapping):
            return None
        return cls(
            _str(raw.get("replica")),
            raw.get("live") is True,
            raw.get("loadedNext") is True,
            _opt(raw.get("signingCA")),
            _opt(raw.get("readyToSign")),
        )


@dataclass(frozen=True)
class Decision:
    """See the module docstring."""

    at: str
    phase: str | None = None
    cas: tuple[CaRecord, ...] = ()
    times: Mapping[str, str] = field(default_factory=dict)
    replicas: tuple[ReplicaRecord, ...] = ()
    step: str | None = None
    reason: str | None = None
    why: str | None = None
    until: str | None = None
    since: str | None = None
    revoked: tuple[str, ...] = ()
    issuance_paused: bool = False
    revoke_requested: tuple[str, ...] = ()
    emergency_requested_at: str | None = None
    consumers_skipped_for: str | None = None
    consumers_skipped_by: str | None = None

    @classmethod
    def of(
        cls,
        state: d.State | None,
        obs: d.Observations,
        action: d.Action | None,
        now: datetime,
        since: datetime | None,
        config: d.Config,
    ) -> Decision:
        """What a step saw (`state`, `obs`) and decided (`action`; None: the step failed
        before deciding), at `now`, waiting since `since`."""
        out = cls(at=format_time(now), replicas=_replicas(state, obs))
        if state is not None:
            out = replace(
                out,
                phase=state.phase,
                cas=_cas(state, obs),
                times=_times(state, config),
                revoked=tuple(sorted(state.revoked)),
                issuance_paused=state.emergency and state.confirmed_at is None,
            )
            skipped = state.consumers_skipped_for
            rotating = {state.current.fingerprint} | (
                {state.next.fingerprint} if state.next is not None else set()
            )
            if skipped and skipped in rotating:
                out = replace(
                    out,
                    consumers_skipped_for=skipped,
                    consumers_skipped_by=state.consumers_skipped_by or UNKNOWN_SKIPPER,
                )
            if state.emergency_requested_at is not None:
                out = replace(
                    out,
                    revoke_requested=tuple(sorted(state.revoke or {state.current.fingerprint})),
                    emergency_requested_at=format_time(state.emergency_requested_at),
                )
        if isinstance(action, d.Wait):
            return replace(
                out,
                step="Wait",
                reason=action.reason,
                why=action.why,
                until=format_time(action.until) if action.until else None,
                since=format_time(since) if since else None,
            )
        if action is not None:
            return replace(out, step=type(action).__name__)
        return out

    def failing(self, reason: str, why: str, since: datetime) -> Decision:
        """This record, for a step that failed: `reason` (sync-failing) since `since`."""
        return replace(
            self, step=None, reason=reason, why=why, until=None, since=format_time(since)
        )

    def same_as(self, other: Decision | None) -> bool:
        """Equal but for `at` (a republish of the same decision is not a change)."""
        return other is not None and replace(self, at="") == replace(other, at="")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "at": self.at,
            "phase": self.phase,
            "cas": [c.to_json() for c in self.cas],
            "times": dict(self.times),
            "replicas": [r.to_json() for r in self.replicas],
            "revoked": list(self.revoked),
            "issuancePaused": self.issuance_paused,
        }
        if self.emergency_requested_at is not None:
            out["revokeRequested"] = list(self.revoke_requested)
            out["emergencyRequestedAt"] = self.emergency_requested_at
        if self.consumers_skipped_for is not None:
            out["consumersSkipped"] = {
                "for": self.consumers_skipped_for,
                "by": self.consumers_skipped_by or UNKNOWN_SKIPPER,
            }
        if self.step is not None or self.reason is not None:
            out.update(
                step=self.step,
                reason=self.reason,
                why=self.why,
                until=self.until,
                since=self.since,
            )
        return out

    @classmethod
    def from_json(cls, raw: object) -> Decision | None:
        """The decision a Lease carries (None: not one)."""
        if not isinstance(raw, Mapping) or not isinstance(raw.get("at"), str):
            return None
        times = raw.get("times")
        skipped = raw.get("consumersSkipped")
        if not isinstance(skipped, Mapping):
            skipped = {}
        return cls(
            at=str(raw["at"]),
            phase=_opt(raw.get("phase")),
            cas=tuple(c for c in map(CaRecord.from_json, _list(raw.get("cas"))) if c),
            times={str(k): v for k, v in times.items() if isinstance(v, str)}
            if isinstance(times, Mapping)
            else {},
            replicas=tuple(
                r for r in map(ReplicaRecord.from_json, _list(raw.get("replicas"))) if r
            ),
            step=_opt(raw.get("step")),
            reason=_opt(raw.get("reason")),
            why=_opt(raw.get("why")),
            until=_opt(raw.get("until")),
            since=_opt(raw.get("since")),
            revoked=tuple(str(f) for f in _list(raw.get("revoked")) if isinstance(f, str)),
            issuance_paused=raw.get("issuancePaused") is True,
            revoke_requested=tuple(
                str(f) for f in _list(raw.get("revokeRequested")) if isinstance(f, str)
            ),
            emergency_requested_at=_opt(raw.get("emergencyRequestedAt")),
            consumers_skipped_for=_opt(skipped.get("for")),
            consumers_skipped_by=_opt(skipped.get("by")),
        )


def _cas(state: d.State, obs: d.Observations) -> tuple[CaRecord, ...]:
    def ca(info: d.CaInfo, role: str, retire: datetime | None = None) -> CaRecord:
        return CaRecord(
            role,
            info.fingerprint,
            format_time(info.not_before),
            format_time(info.not_after),
            info.fingerprint in obs.published,
            format_time(retire) if retire else None,
        )

    out = [ca(state.current, "current")]
    if state.next is not None:
        out.append(ca(state.next, "next"))
    out += [ca(p.ca, "previous", p.retire_at) for p in state.previous]
    return tuple(out)


def _times(state: d.State, config: d.Config) -> dict[str, str]:
    times: dict[str, datetime | None]
    if state.confirmed_at is None:
        times = {"publishedAt": state.published_at, "signNotBefore": state.swap_not_before}
    elif state.next is not None:  # only the rotation under way
        times = {
            "stagedAt": state.staged_at,
            "publishedAt": state.published_at,
            "swapNotBefore": state.swap_not_before,
        }
    elif state.previous:
        times = {"swappedAt": state.swapped_at}
    else:
        times = {"rotationDue": d.rotation_due(state.current, config)}
    times["rotateRequestedAt"] = state.rotate_requested_at
    return {k: format_time(v) for k, v in times.items() if v is not None}


def _replicas(state: d.State | None, obs: d.Observations) -> tuple[ReplicaRecord, ...]:
    nxt = state.next if state is not None else None
    return tuple(
        ReplicaRecord(
            r.replica,
            r.live,
            nxt is not None and nxt.fingerprint in r.anchors,
            r.signing,
            r.ready,
        )
        for r in obs.reports
    )


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _opt(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []

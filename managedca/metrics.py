"""The managed CA's metrics (docs/managed-ca.md "When an alert fires"): what it waits for,
the objects named as holding that wait, and since when, its phase and since when, the CAs'
expiry, when the rotation is due, and how long rotation steps took. Exported by the leader;
kept through failed steps (the last state read), with `waiting{reason="sync-failing"}`
while its steps fail."""

from __future__ import annotations

import contextlib
from datetime import datetime

from prometheus_client import CollectorRegistry, Gauge, Histogram

from managedca import decide as d

SYNC_FAILING = "sync-failing"
"""The waiting reason while the leader's steps fail (any error: the API, an unreadable
Secret, a bug)."""


class ManagedCAMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        registry = registry if registry is not None else CollectorRegistry()
        self.registry = registry
        prefix = "service_serving_ca_controller_managed_ca"
        self.waiting = Gauge(
            f"{prefix}_waiting",
            "1 for what the managed CA waits for now, by reason (docs/managed-ca.md); "
            "sync-failing while its steps fail.",
            ["reason"],
            registry=registry,
        )
        for reason in (*d.WAIT_REASONS, SYNC_FAILING):
            self.waiting.labels(reason)
        self.waiting_object = Gauge(
            f"{prefix}_waiting_object",
            "1 for each object named as holding the current wait (injector-not-converged: "
            "the consumers that do not hold the new CA, at most the convergence report's "
            "first 10 names); no series while nothing is named.",
            ["reason", "kind", "name"],
            registry=registry,
        )
        self._named: frozenset[tuple[str, str, str]] = frozenset()
        self.waiting_since = Gauge(
            f"{prefix}_waiting_since_timestamp_seconds",
            "Since when the managed CA waits for its current reason (0: not waiting).",
            registry=registry,
        )
        self.phase = Gauge(
            f"{prefix}_phase",
            "1 for the managed CA's current phase (on the leader).",
            ["phase"],
            registry=registry,
        )
        for phase in d.PHASES:
            self.phase.labels(phase)
        self.expiry = Gauge(
            f"{prefix}_expiry_timestamp_seconds",
            "notAfter of the managed CAs, by role (current, next).",
            ["role"],
            registry=registry,
        )
        self.phase_since = Gauge(
            f"{prefix}_phase_since_timestamp_seconds",
            "When the managed CA entered its current phase.",
            registry=registry,
        )
        self.rotation_due = Gauge(
            f"{prefix}_rotation_due_timestamp_seconds",
            "When the current CA's rotation is due (stage at that point of its life).",
            registry=registry,
        )
        self.step = Histogram(
            f"{prefix}_step_duration_seconds",
            "Time a rotation step took: swap (stage → swap), retire (swap → retire).",
            ["step"],
            buckets=(1, 10, 60, 600, 3600, 6 * 3600, 86400, 7 * 86400, 60 * 86400),
            registry=registry,
        )

    def wait(
        self,
        reason: str | None,
        since: datetime | None,
        objects: tuple[tuple[str, str], ...] = (),
    ) -> None:
        """Waiting for `reason` (None: not waiting) since `since`, held by `objects`
        ((kind, name), bounded by the caller): each a `waiting_object` series, and the
        series of objects no longer named are removed."""
        for known in (*d.WAIT_REASONS, SYNC_FAILING):
            self.waiting.labels(known).set(1 if known == reason else 0)
        self.waiting_since.set(since.timestamp() if reason and since else 0)
        named = frozenset((reason, kind, name) for kind, name in objects) if reason else frozenset()
        for gone in self._named - named:
            with contextlib.suppress(KeyError):
                self.waiting_object.remove(*gone)
        for labels in named:
            self.waiting_object.labels(*labels).set(1)
        self._named = named

    def show(self, state: d.State | None, config: d.Config) -> None:
        for phase in d.PHASES:
            self.phase.labels(phase).set(1 if state is not None and state.phase == phase else 0)
        if state is None:
            return
        self.expiry.labels("current").set(state.current.not_after.timestamp())
        if state.next is not None:
            self.expiry.labels("next").set(state.next.not_after.timestamp())
        else:
            with contextlib.suppress(KeyError):
                self.expiry.remove("next")
        since = state.staged_at if state.next is not None else state.swapped_at
        since = since or state.confirmed_at or state.current.not_before
        self.phase_since.set(since.timestamp())
        self.rotation_due.set(d.rotation_due(state.current, config).timestamp())

    def durations(self, observed: tuple[tuple[str, float], ...]) -> None:
        """Observe what a step measured (`managedca.step.Step.durations`)."""
        for step, seconds in observed:
            self.step.labels(step).observe(seconds)

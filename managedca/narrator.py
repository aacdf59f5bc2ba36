"""What operators see of each managed-CA step: the metrics (`managedca.metrics`), an Event
on the Secret for each step written (reason `ManagedCA<Step>`) and a log line, a Warning
Event `ManagedCAWaiting` once when a gate starts holding a rotation until something is
mended (`HELD`), and the typed `status.Decision` that `ca status` shows (handed to
`on_decision`, which publishes it on the leader's report Lease, whenever it changes). A
failed step is `sync-failing`: the waiting reason, the Decision, a Warning Event once per
failure, the phase and expiry gauges from the state last read. Notes name fingerprints and
times, never a key.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from kube.events import ObjectRef, StepRecorder
from managedca import decide as d
from managedca.metrics import SYNC_FAILING, ManagedCAMetrics
from managedca.observe import Observed
from managedca.status import Decision
from managedca.step import Step

log = logging.getLogger(__name__)

HELD = frozenset(d.waits(d.HELD))
"""Waits that last until something is mended (a replica, the injector): each start is a
Warning Event `ManagedCAWaiting`. The calendar and the passing gates (the delay, the
publisher's second) are not (`decide.WAIT_KINDS`, the one statement)."""


class Narrator:
    def __init__(
        self,
        metrics: ManagedCAMetrics,
        config: d.Config,
        secret: ObjectRef,
        *,
        recorder: StepRecorder | None = None,
        on_written: Callable[[Mapping[str, Any]], object] | None = None,
        on_decision: Callable[[Mapping[str, Any] | None], object] | None = None,
    ) -> None:
        self.metrics = metrics
        self.config = config
        self.secret = secret
        self.recorder = recorder
        self.on_written = on_written
        self.on_decision = on_decision
        self.decision: Decision | None = None  # what `ca status` reads
        self.last_action: d.Action | None = None
        self._waiting: tuple[str, datetime] | None = None  # (reason, since)
        self._named: frozenset[tuple[str, str]] = frozenset()  # named in this wait

    def record(
        self,
        seen: Observed,
        action: d.Action,
        taken: Step | None,
        written: Mapping[str, Any] | None,
        now: datetime,
    ) -> None:
        """A step decided `action` on what was `seen`; `taken` was written (`written`, the
        Secret as the API returned it), or nothing was (a Wait)."""
        self.last_action = action
        self.decided(seen.state, seen.observations, action, now)
        self.metrics.show(taken.state if taken is not None else seen.state, self.config)
        if taken is None or written is None:
            return
        self.metrics.durations(taken.durations)
        log.info(
            "managed CA: " + taken.note,
            extra={
                "reason": taken.reason,
                "phase": taken.state.phase,
                "secret": f"{self.secret.namespace}/{self.secret.name}",
            },
        )
        if self.recorder is not None:
            uid = str((written.get("metadata") or {}).get("uid", ""))
            ref = ObjectRef("Secret", self.secret.namespace, self.secret.name, uid)
            self.recorder.normal(ref, taken.reason, taken.note, "Rotate")
        if self.on_written is not None:
            self.on_written(written)

    def decided(
        self, state: d.State | None, obs: d.Observations, action: d.Action, now: datetime
    ) -> None:
        """The waiting reason and since when, a Warning for a gate that holds, the Decision."""
        wait = action if isinstance(action, d.Wait) else None
        reason = wait.reason if wait is not None else None
        objects = wait.objects if wait is not None else ()
        started = reason is not None and (self._waiting is None or self._waiting[0] != reason)
        if reason is None:
            self._waiting = None
        elif started:
            self._waiting = (reason, now)
            self._named = frozenset()
        if wait is not None and wait.reason in HELD and self.recorder is not None:
            # A gate that holds a rotation until something is mended: said once, and
            # again only when it names an object it had not named yet in this wait.
            new = frozenset(objects) - self._named
            if started or new:
                note = f"[{wait.reason}] {wait.why}"
                self.recorder.warning(self.secret, "ManagedCAWaiting", note, "Rotate")
            self._named |= new
        since = self._waiting[1] if self._waiting else None
        self.metrics.wait(reason, since, objects)
        self._publish(Decision.of(state, obs, action, now, since, self.config))

    def failed(
        self, state: d.State | None, why: str, now: datetime, *, event: str | None = None
    ) -> None:
        """A step failed (`why`); `state` is the one last read. `event`: the Warning's
        reason, once per failure (not again while it keeps failing)."""
        self.metrics.show(state, self.config)
        if self._waiting is None or self._waiting[0] != SYNC_FAILING:
            self._waiting = (SYNC_FAILING, now)
            if event and self.recorder is not None:
                self.recorder.warning(self.secret, event, why[:1000], "Rotate")
            log.error("managed CA: sync failed", extra={"err": why})
        self.metrics.wait(SYNC_FAILING, self._waiting[1])
        empty = d.Observations(frozenset())
        record = Decision.of(state, empty, None, now, None, self.config)
        self._publish(record.failing(SYNC_FAILING, why, self._waiting[1]))

    def stopped(self) -> None:
        """Not leading any more: the next leader publishes its own decision."""
        if self.on_decision is not None:
            self.on_decision(None)

    def _publish(self, decision: Decision) -> None:
        changed = not decision.same_as(self.decision)
        self.decision = decision
        if changed and self.on_decision is not None:
            self.on_decision(decision.to_json())

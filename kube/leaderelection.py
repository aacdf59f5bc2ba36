"""Leader election on a coordination.k8s.io/v1 Lease with client-go's semantics.

What it decides:

* **Acquire.** Every `retry_period` (jittered by up to +120%, like client-go's
  `wait.JitterUntil`), GET the Lease (create it if missing) and take it only if it has
  no holder, is ours, or has *expired*. Expiry is judged by our own monotonic clock: a
  lease is expired when its record (spec) has not changed for `leaseDurationSeconds`
  since we first saw it so (client-go's `observedTime`) — never by comparing the
  holder's `renewTime` with our wall clock, so clock skew between nodes does not matter.
* **Write.** Every write is a PUT carrying the resourceVersion we read (optimistic
  concurrency: a 409 means someone else wrote first, and we did not get the lease).
  Taking over from another holder sets `acquireTime` and bumps `leaseTransitions`.
  Times are RFC 3339 MicroTime (`….ffffffZ`).
* **Renew.** While leading, renew every `retry_period`, first by a direct PUT of the
  lease we hold (no GET), falling back to GET + PUT. Each request of a renewal is
  bounded by the time left to `renew_deadline` (client-go's renew context), so a
  renewal in flight against a black-holed server cannot outlive it; the observed time
  of a record is taken after the read or write that returned it. If no renewal
  succeeds within `renew_deadline`, leadership is lost: the `leader_stop` event given to
  `on_started_leading` is set and `on_stopped_leading()` is called (the manager exits
  the process, as client-go controllers do). We never try to lead again in this run.
* **Release.** When `stop` is set while leading: set `leader_stop`, give the leader
  callback until the Lease we last renewed would expire (at least `renew_deadline`) to
  return — its syncs in flight finish while no standby can lead — then PUT the lease with
  `holderIdentity` cleared and `leaseDurationSeconds: 1` so a standby takes over at its
  next retry instead of waiting out the lease. `on_stopped_leading` is *not* called on a
  release we asked for (stopping is not losing).
* **Its own limiter.** Lease requests go through a view of the given client with a write
  limiter of its own (`Client.with_own_limiter()`, same qps and burst), as
  kube-controller-manager gives leader election a client of its own: a renewal never
  queues behind a burst of the workers' writes, which could otherwise outlast
  `renew_deadline` and cost the lease.
* **Health.** `healthy()` is False only while we believe we lead but have not renewed
  for longer than `lease_duration` (+ `health_tolerance`): a stuck renew loop.
* **Metric.** `leader_election_master_status{name}` is 1 while leading, else 0.
"""

from __future__ import annotations

import copy
import logging
import math
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from kube import _metrics
from kube.client import ApiError, Client, is_not_found
from kube.leases import API_VERSION, LeaseRef
from kube.times import micro_time
from kube.types import JSON

log = logging.getLogger(__name__)

JITTER_FACTOR = 1.2


def _make_gauge(registry: CollectorRegistry | None) -> Gauge:
    return Gauge(
        "leader_election_master_status",
        "Gauge of if the reporting system is master of the relevant lease, 0 indicates "
        "backup, 1 indicates master. 'name' is the string used to identify the lease.",
        ["name"],
        registry=registry,
    )


class LeaderElector:
    """Run for leadership of one Lease (see the module docstring)."""

    def __init__(
        self,
        client: Client,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float,
        renew_deadline: float,
        retry_period: float,
        on_started_leading: Callable[[threading.Event], None],
        on_stopped_leading: Callable[[], None],
        registry: CollectorRegistry | None = None,
        *,
        release_on_cancel: bool = True,
        health_tolerance: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        rng: random.Random | None = None,
    ) -> None:
        if not identity:
            raise ValueError("leader election identity must not be empty")
        if lease_duration <= renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if renew_deadline <= JITTER_FACTOR * retry_period:
            raise ValueError(f"renew_deadline must be greater than {JITTER_FACTOR} * retry_period")
        if retry_period <= 0:
            raise ValueError("retry_period must be positive")
        self.client = client.with_own_limiter()
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.release_on_cancel = release_on_cancel
        self.health_tolerance = health_tolerance
        self.ref = LeaseRef(namespace, name)
        self.path = self.ref.path
        self._clock = clock
        self._now = now
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._leading = False
        self._lease: JSON | None = None  # the Lease as last read or written by us
        self._observed_spec: JSON | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0
        self._gauge = _metrics.family(registry, "leader_election", _make_gauge).labels(name=name)
        self._gauge.set(0)

    # public -------------------------------------------------------------------------------

    def is_leader(self) -> bool:
        with self._lock:
            return self._leading

    def healthy(self) -> bool:
        with self._lock:
            if not self._leading:
                return True
            overdue = self._clock() - self._last_renew
        return overdue <= self.lease_duration + self.health_tolerance

    def run(self, stop: threading.Event) -> None:
        """Acquire, lead, renew; return when `stop` is set (after releasing the lease) or
        when leadership is lost (after `on_stopped_leading`)."""
        if not self._acquire(stop):
            return
        leader_stop = threading.Event()
        leader = threading.Thread(
            target=self._lead, args=(leader_stop,), name=f"leader-{self.name}", daemon=True
        )
        leader.start()
        lost = self._renew_loop(stop)
        leader_stop.set()
        if lost:
            self._set_leading(False)
            log.error("leader election: lost lease %s/%s", self.namespace, self.name)
            try:
                self.on_stopped_leading()
            except Exception:
                log.exception("leader election: on_stopped_leading failed")
            return
        # Syncs in flight finish before the Lease is released (a standby must not start
        # while we still write). Waiting is safe for as long as the Lease we last renewed
        # is valid; after that a standby may take it anyway, so release regardless.
        with self._lock:
            valid_until = self._last_renew + self.lease_duration
        leader.join(max(self.renew_deadline, valid_until - self._clock()))
        if leader.is_alive():
            log.warning("leader election: leader work still running; releasing anyway")
        if self.release_on_cancel:
            self._release()
        self._set_leading(False)

    # the loops ----------------------------------------------------------------------------

    def _acquire(self, stop: threading.Event) -> bool:
        log.info("leader election: %s trying to acquire lease %s/%s", *self._who())
        while not stop.is_set():
            if self._try_acquire_or_renew():
                log.info("leader election: %s acquired lease %s/%s", *self._who())
                self._set_leading(True)
                return True
            delay = self.retry_period * (1.0 + self._rng.random() * JITTER_FACTOR)
            stop.wait(delay)
        return False

    def _renew_loop(self, stop: threading.Event) -> bool:
        """Renew until `stop` (False) or until renewals fail for `renew_deadline` (True).

        The deadline bounds every request of every try, as client-go's renew context
        does: a renewal stuck on a black-holed server is cut off when the deadline
        passes, not `renew_deadline` later, so we stop leading before a standby (which
        waits `lease_duration` from its own read) can take the Lease."""
        while not stop.wait(self.retry_period):
            deadline = self._clock() + self.renew_deadline
            while not self._try_acquire_or_renew(deadline):
                remaining = deadline - self._clock()
                if remaining <= 0:
                    return True
                if stop.wait(min(self.retry_period, remaining)):
                    return False
        return False

    def _lead(self, leader_stop: threading.Event) -> None:
        try:
            self.on_started_leading(leader_stop)
        except Exception:
            log.exception("leader election: on_started_leading failed")

    # one attempt ----------------------------------------------------------------------------

    def _try_acquire_or_renew(self, deadline: float | None = None) -> bool:
        """One attempt. Every request is bounded by the time left to `deadline` (renewals)
        or by `renew_deadline` (acquisition); past the deadline nothing is sent."""
        sent = self._clock()  # a renewal counts from before it was sent (health)
        wall = micro_time(self._now())
        with self._lock:
            held = self._lease if self._leading else None
        if held is not None:
            # Fast path (client-go ≥ 1.28): we hold it, so PUT without reading first.
            spec = held.get("spec") or {}
            timeout = self._time_left(deadline)
            if timeout is None:
                return False
            if spec.get("holderIdentity") == self.identity and self._put(
                held, self._spec(spec, wall, ours=True), sent, timeout
            ):
                return True
        timeout = self._time_left(deadline)
        if timeout is None:
            return False
        try:
            lease = self.client.get(self.path, timeout=timeout)
        except ApiError as err:
            if not is_not_found(err):
                log.warning("leader election: reading lease failed: %s", err)
                return False
            timeout = self._time_left(deadline)
            return timeout is not None and self._create(wall, sent, timeout)
        # client-go takes the observed time after the read: a read that took long must
        # not make the holder's lease look older than it is (a standby taking over early).
        read_at = self._clock()
        spec = lease.get("spec") or {}
        if spec != self._observed_spec:
            self._observed_spec = copy.deepcopy(spec)
            self._observed_at = read_at
        holder = spec.get("holderIdentity") or ""
        duration = spec.get("leaseDurationSeconds") or self.lease_duration
        if holder and holder != self.identity and read_at < self._observed_at + float(duration):
            return False  # held by someone else, not expired
        timeout = self._time_left(deadline)
        if timeout is None:
            return False
        return self._put(lease, self._spec(spec, wall, ours=holder == self.identity), sent, timeout)

    def _time_left(self, deadline: float | None) -> float | None:
        """The timeout for the next request: what is left to `deadline` (None when it
        has passed), or `renew_deadline` without one."""
        if deadline is None:
            return self.renew_deadline
        left = deadline - self._clock()
        return left if left > 0 else None

    def _spec(self, old: JSON, wall: str, *, ours: bool) -> JSON:
        transitions = int(old.get("leaseTransitions") or 0)
        return {
            **old,
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, math.ceil(self.lease_duration)),
            "acquireTime": old.get("acquireTime", wall) if ours else wall,
            "renewTime": wall,
            "leaseTransitions": transitions if ours else transitions + 1,
        }

    def _create(self, wall: str, sent: float, timeout: float) -> bool:
        body: JSON = {
            "apiVersion": API_VERSION,
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, math.ceil(self.lease_duration)),
                "acquireTime": wall,
                "renewTime": wall,
                "leaseTransitions": 0,
            },
        }
        collection = self.ref.collection
        try:
            created = self.client.create(collection, body, timeout=timeout)
        except ApiError as err:
            log.info("leader election: creating lease failed: %s", err)
            return False
        self._record(created, sent)
        return True

    def _put(self, lease: JSON, spec: JSON, sent: float, timeout: float) -> bool:
        body: dict[str, Any] = {**lease, "spec": spec}
        try:
            written = self.client.replace(self.path, body, timeout=timeout)
        except ApiError as err:
            log.info("leader election: writing lease failed: %s", err)
            return False
        self._record(written, sent)
        return True

    def _record(self, lease: JSON, sent: float) -> None:
        with self._lock:
            self._lease = lease
            self._observed_spec = copy.deepcopy(lease.get("spec") or {})
            self._observed_at = self._clock()  # after the write, as client-go
            self._last_renew = sent

    def _release(self) -> None:
        with self._lock:
            lease = self._lease
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        wall = micro_time(self._now())
        spec = {
            **(lease.get("spec") or {}),
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "acquireTime": wall,
            "renewTime": wall,
        }
        try:
            self.client.replace(self.path, {**lease, "spec": spec}, timeout=self.renew_deadline)
            log.info("leader election: %s released lease %s/%s", *self._who())
        except ApiError as err:
            log.warning("leader election: releasing lease failed: %s", err)

    def _set_leading(self, leading: bool) -> None:
        with self._lock:
            self._leading = leading
            if leading:
                self._last_renew = self._clock()
        self._gauge.set(1 if leading else 0)

    def _who(self) -> tuple[str, str, str]:
        return self.identity, self.namespace, self.name

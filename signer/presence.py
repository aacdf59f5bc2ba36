"""The signer's presence report: every process that runs the signer controller renews one
Lease beside its leader Lease, with or without leader election (`kube.presence`), so
`status` and `explain` can tell a running signer from none with `get` on that one Lease —
no Secret, no Pod, no other Lease.

Its name is the leader Lease's (`--leader-elect-resource-name`, which has its default
with leader election off too) with `-presence` appended; the annotations say which
signer name the process serves, whether it elects a leader, its CA mode, its version, and where its
API writes waited since the renewal before (`API_WAITS`): in its own client budget
(`--kube-api-qps`/`--kube-api-burst`) or on the API server.
"""

from __future__ import annotations

from dataclasses import dataclass

from kube.clientmetrics import WaitTotals

PREFIX = "service-serving-signer/"
SIGNER_NAME = PREFIX + "signer-name"
LEADER_ELECT = PREFIX + "leader-elect"  # "true" / "false"
VERSION = PREFIX + "version"
CA_MODE = PREFIX + "ca-mode"  # "file" / "managed" (run's --ca-mode)
LABEL = PREFIX + "presence"  # value: "signer"
API_WAITS = PREFIX + "api-waits"  # "writes=37 budget=2.104 server=0.315 window=10"
SUFFIX = "-presence"


def presence_name(lease_name: str) -> str:
    """The presence Lease of the signer whose leader Lease is `lease_name`."""
    return lease_name + SUFFIX


@dataclass(frozen=True)
class ApiWaits:
    """A window's API writes and the mean seconds each waited in the client's own budget
    (its rate limiter) and past it (the wire and the API server)."""

    writes: int
    budget: float
    server: float
    window: float

    @property
    def on_budget(self) -> bool:
        """Writes waited longer in the signer's own budget than on the API server."""
        return self.writes > 0 and self.budget > self.server

    def annotation(self) -> str:
        return (
            f"writes={self.writes} budget={self.budget:.3f} server={self.server:.3f} "
            f"window={self.window:g}"
        )


def api_waits(window: WaitTotals, seconds: float) -> ApiWaits:
    """The `ApiWaits` of the writes of one window of `seconds`."""
    n = window.writes
    if n <= 0:
        return ApiWaits(0, 0.0, 0.0, seconds)
    return ApiWaits(n, window.limiter_seconds / n, window.server_seconds / n, seconds)


def parse_api_waits(text: str | None) -> ApiWaits | None:
    """The `API_WAITS` annotation read back; None when absent or not ours."""
    if not text:
        return None
    try:
        fields = dict(part.split("=", 1) for part in text.split())
        return ApiWaits(
            int(fields["writes"]),
            float(fields["budget"]),
            float(fields["server"]),
            float(fields["window"]),
        )
    except (KeyError, ValueError):
        return None

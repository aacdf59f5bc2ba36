"""How `make test` spreads the suite over worker processes (pytest-xdist, `-n N --dist
loadfile`; tests/conftest.py hands xdist `FileScheduling`).

The integration tests mostly wait (for leader elections, Lease durations, propagation
delays, real timeouts), so a few workers overlap those waits even on 2 cores. Each test
file runs whole in one worker, with its module fixtures; each worker starts its own session
control planes on first use (free ports, a temporary directory each), so a test shares a
control plane with fewer tests than in a serial run, never with more. What else is
shared is the checkout: the files in `TOGETHER` write the same `dist/` files, so they run
in one worker, one after the other. The files whose tests hold no module state and take
minutes each (`SPREAD`) are scheduled test by test instead.

Order: the files known to take longest (`FIRST`, from `--durations`) start first, then the
other integration files, then the unit tests, which fill the gaps at the end (a long file
started last would leave the other workers idle). The order and grouping change where and
when a test runs, never what it does."""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadFileScheduling

INTEGRATION = "tests/integration/"

# Files writing the checkout's dist/ (hack/dist.sh removes and rebuilds its wheel).
TOGETHER = {
    f"{INTEGRATION}test_dist_output.py": "dist/",
    f"{INTEGRATION}test_documented_install.py": "dist/",
}

# Files of independent minute-long tests (function-scoped fixtures, a namespace each).
SPREAD = {f"{INTEGRATION}test_deleted_report_lease.py"}

# Longest first, as `--durations` measured them on 2 cores (the file's total), a unit
# test file among them where it takes as long.
FIRST = (
    "tests/integration/test_managed_ca.py",
    "tests/unit/managedca/test_knock_outs.py",
    "tests/integration/test_ca_mode_switch.py",
    "tests/integration/test_deleted_report_lease.py",
    "tests/integration/test_documented_install.py",
    "tests/unit/injector/test_knock_outs.py",
    "tests/integration/test_connection_liveness.py",
    "tests/integration/test_gate_topologies.py",
    "tests/unit/injector/test_tenant_bounds.py",
    "tests/integration/test_kubelet_managed_ca.py",
    "tests/integration/test_kubelet_shipped.py",
    "tests/integration/test_manager_ops.py",
    "tests/integration/test_faults.py",
    "tests/unit/managedca/test_properties.py",
    "tests/integration/test_injector_admission_policy.py",
    "tests/integration/test_gateway_traefik.py",
    "tests/integration/test_release.py",
    "tests/integration/test_image.py",
)


def scope_of(nodeid: str) -> str:
    """The unit of work `nodeid` belongs to: its file, its group, or itself."""
    path = nodeid.split("::", 1)[0]
    if path in SPREAD:
        return nodeid
    return TOGETHER.get(path, path)


def rank(scope: str) -> tuple[int, int]:
    """Known long files first (in `FIRST`'s order), then integration, then unit files; a
    group as its first member."""
    paths = [p for p, group in TOGETHER.items() if group == scope] or [scope.split("::")[0]]
    return min(_rank_of_file(path) for path in paths)


def _rank_of_file(path: str) -> tuple[int, int]:
    if path in FIRST:
        return (0, FIRST.index(path))
    return (1, 0) if path.startswith(INTEGRATION) else (2, 0)


class FileScheduling(LoadFileScheduling):  # type: ignore[misc]  # xdist has no type hints
    """xdist's `loadfile` with `scope_of`'s units handed out in `rank` order."""

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)

    def _assign_work_unit(self, node: Any) -> None:
        first = min(self.workqueue, key=rank)  # the first of the lowest rank
        self.workqueue.move_to_end(first, last=False)
        super()._assign_work_unit(node)

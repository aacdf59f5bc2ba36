"""How the shipped Deployment is scheduled (issue 13): it gates every Pod that projects a
certificate, so it runs at system-cluster-critical priority and its two replicas never
share a node (hard spread on hostname) and prefer different zones (soft spread)."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from tests.unit.manager.kustomize import CONFIG, find, render


def pod_spec() -> dict[str, Any]:
    deployment = find(render(CONFIG / "default"), "Deployment", "service-serving-signer")
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def pod_labels() -> dict[str, str]:
    deployment = find(render(CONFIG / "default"), "Deployment", "service-serving-signer")
    labels: dict[str, str] = deployment["spec"]["selector"]["matchLabels"]
    return labels


def test_runs_at_system_cluster_critical_priority() -> None:
    assert pod_spec()["priorityClassName"] == "system-cluster-critical"


def test_replicas_spread_hard_over_nodes_and_soft_over_zones() -> None:
    constraints = {c["topologyKey"]: c for c in pod_spec()["topologySpreadConstraints"]}
    assert set(constraints) == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    assert constraints["kubernetes.io/hostname"]["whenUnsatisfiable"] == "DoNotSchedule"
    assert constraints["topology.kubernetes.io/zone"]["whenUnsatisfiable"] == "ScheduleAnyway"
    for constraint in constraints.values():
        assert constraint["maxSkew"] == 1
        assert constraint["labelSelector"] == {"matchLabels": pod_labels()}
        assert constraint["matchLabelKeys"] == ["pod-template-hash"]


def test_keeps_the_hostname_anti_affinity() -> None:
    terms = pod_spec()["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert [t["podAffinityTerm"]["topologyKey"] for t in terms] == ["kubernetes.io/hostname"]


def test_the_shutdown_bound_is_one_and_fits_the_termination_grace_period() -> None:
    """Syncs in flight get `SHUTDOWN_GRACE` (all controllers together), then the Lease is
    released (one renew-bounded request) and the process exits — all before the kubelet's
    SIGKILL, or the Lease is never released and a standby waits it out."""
    from kube.controller import SHUTDOWN_GRACE, Controller
    from manager.app import SHUTDOWN_TIMEOUT
    from manager.options import Options

    assert SHUTDOWN_TIMEOUT == SHUTDOWN_GRACE
    default = inspect.signature(Controller.__init__).parameters["shutdown_timeout"].default
    assert default == SHUTDOWN_GRACE, "each controller loop waits no longer than the process"
    fields = {f.name: f for f in dataclasses.fields(Options)}
    release: float = fields["leader_elect_renew_deadline"].default  # type: ignore[assignment]
    assert SHUTDOWN_GRACE + release <= pod_spec()["terminationGracePeriodSeconds"]

"""How the shipped Deployments are scheduled. The signer gates every Pod that
projects a certificate, and the optional injector keeps webhook, APIService and CRD
caBundles current through a rotation (without it admission calls start failing once
the old root leaves): both run at system-cluster-critical priority, and the two
replicas of each prefer different nodes and zones (soft spreads plus a preferred
anti-affinity: a one-node cluster still runs both)."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

import pytest

from tests.unit.deploy.kustomize import find, render, write_overlay

DEPLOYMENTS = ["service-serving-signer", "service-serving-signer-injector"]


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """config/default with the injector component."""
    overlay: Path = write_overlay(tmp_path_factory.mktemp("overlay"))
    return render(overlay)


def deployment(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    found: dict[str, Any] = find(objects, "Deployment", name)
    return found


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_runs_at_system_cluster_critical_priority(objects: list[dict[str, Any]], name: str) -> None:
    spec = deployment(objects, name)["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "system-cluster-critical"


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_replicas_spread_softly_over_nodes_and_zones_so_one_node_runs_both(
    objects: list[dict[str, Any]], name: str
) -> None:
    found = deployment(objects, name)
    spec = found["spec"]["template"]["spec"]
    constraints = {c["topologyKey"]: c for c in spec["topologySpreadConstraints"]}
    assert set(constraints) == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    # A hard hostname spread leaves replica 2 Pending on a one-node cluster.
    assert constraints["kubernetes.io/hostname"]["whenUnsatisfiable"] == "ScheduleAnyway"
    assert constraints["kubernetes.io/hostname"]["nodeTaintsPolicy"] == "Honor"
    assert constraints["topology.kubernetes.io/zone"]["whenUnsatisfiable"] == "ScheduleAnyway"
    for constraint in constraints.values():
        assert constraint["maxSkew"] == 1
        assert constraint["labelSelector"] == {
            "matchLabels": found["spec"]["selector"]["matchLabels"]
        }
        assert constraint["matchLabelKeys"] == ["pod-template-hash"]


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_keeps_the_hostname_anti_affinity(objects: list[dict[str, Any]], name: str) -> None:
    spec = deployment(objects, name)["spec"]["template"]["spec"]
    terms = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert [t["podAffinityTerm"]["topologyKey"] for t in terms] == ["kubernetes.io/hostname"]


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_the_shutdown_bound_is_one_and_fits_the_termination_grace_period(
    objects: list[dict[str, Any]], name: str
) -> None:
    """Syncs in flight get `SHUTDOWN_GRACE` (all controllers together), then the Lease is
    released (one renew-bounded request) and the process exits — all before the kubelet's
    SIGKILL, or the Lease is never released and a standby waits it out."""
    from kube.controller import SHUTDOWN_GRACE, Loop
    from manager.app import SHUTDOWN_TIMEOUT
    from manager.options import Options

    assert SHUTDOWN_TIMEOUT == SHUTDOWN_GRACE
    default = inspect.signature(Loop.__init__).parameters["shutdown_timeout"].default
    assert default == SHUTDOWN_GRACE, "each controller loop waits no longer than the process"
    fields = {f.name: f for f in dataclasses.fields(Options)}
    release: float = fields["leader_elect_renew_deadline"].default  # type: ignore[assignment]
    spec = deployment(objects, name)["spec"]["template"]["spec"]
    assert SHUTDOWN_GRACE + release <= spec["terminationGracePeriodSeconds"]

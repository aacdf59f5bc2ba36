"""What the managed CA's unit tests build again and again: the clocks, the rotation
configuration they decide with, a CA's key and certificate, a replica's report Lease."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from kube.times import micro_time
from managedca.decide import Config
from managedca.report import REPORT_LABEL
from trust.ca import cert_pem, generate_ca, key_pem

NOW = datetime.now(UTC).replace(microsecond=0)  # for CAs that must be valid when read
T0 = datetime(2026, 1, 1, tzinfo=UTC)  # for decisions on a fixed clock
H = timedelta(hours=1)
CFG = Config(
    ca_lifetime=timedelta(days=100),
    propagation_delay=timedelta(minutes=10),
    max_leaf_lifetime=24 * H,
    retire_margin=H,
)


def ca_pems(name: str, *, days: int = 100) -> tuple[bytes, bytes]:
    """A new CA valid from a day before NOW for `days`: (key PEM, certificate PEM)."""
    ca = generate_ca(name, validity=timedelta(days=days), not_before=NOW - timedelta(days=1))
    return key_pem(ca.key), cert_pem(ca.cert)


def replica_lease(
    name: str, annotations: dict[str, str], renewed: datetime | str = NOW, *, duration: int = 30
) -> dict[str, Any]:
    """Replica `name`'s report Lease saying `annotations`, renewed at `renewed`."""
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "labels": {REPORT_LABEL: "ca"},
            "annotations": annotations,
        },
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": duration,
            "renewTime": renewed if isinstance(renewed, str) else micro_time(renewed),
        },
    }

"""The signing-material metrics every source reports (`trust.files`, `managedca.material`):
`service_serving_ca_controller_material_reload_total{result}`, `…_material_invalid` and
`…_material_info{trust_bundle,signing_certificate}` (docs/reference.md §6). One set per
registry: a process has one material source.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from trust.bundle import TrustBundle
from trust.material import SigningMaterial


class MaterialMetrics:
    """`material_reload_total{result}`, `material_invalid` and `material_info{...}`."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        registry = registry if registry is not None else CollectorRegistry()
        self.reloads = Counter(
            "service_serving_ca_controller_material_reload_total",
            "Reloads of the signing key, certificate and trust bundle files, by result.",
            ["result"],
            registry=registry,
        )
        for result in ("ok", "invalid"):
            self.reloads.labels(result)
        self.invalid = Gauge(
            "service_serving_ca_controller_material_invalid",
            "1 while the signing-material files on disk are rejected (the last good set "
            "stays in use; the reason is logged), else 0.",
            registry=registry,
        )
        self.info = Gauge(
            "service_serving_ca_controller_material_info",
            "Always 1; the labels fingerprint the material in use: trust_bundle (the hash "
            "that ends the ClusterTrustBundle name) and signing_certificate (sha256 of DER).",
            ["trust_bundle", "signing_certificate"],
            registry=registry,
        )

    def show(self, bundle: TrustBundle, material: SigningMaterial | None) -> None:
        self.info.clear()
        signing = material.signing_fingerprint if material is not None else ""
        self.info.labels(bundle.digest, signing).set(1)

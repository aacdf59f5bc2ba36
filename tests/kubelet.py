"""Re-export of the kubelet stand-in for tests (it lives in `controlplane.kubelet` so the
demo and benchmarks share it)."""

from controlplane.kubelet import (
    KEY_TYPES,
    Kubelet,
    generate_key,
    pcr_manifest,
    pcr_path,
    pod_manifest,
    service_manifest,
    stub_csr,
)

__all__ = [
    "KEY_TYPES",
    "Kubelet",
    "generate_key",
    "pcr_manifest",
    "pcr_path",
    "pod_manifest",
    "service_manifest",
    "stub_csr",
]

"""A local kube-apiserver + etcd (an envtest analogue) for tests, benchmarks and `demo`:
binaries found or built from Go modules (`binaries`), their certificates (`pki`), the
running processes (`server`), and a kubelet stand-in that creates PodCertificateRequests
exactly as kubelet does (`kubelet`)."""

from controlplane.server import ControlPlane, ControlPlaneError

__all__ = ["ControlPlane", "ControlPlaneError"]

"""A local kube-apiserver + etcd (an envtest analogue) for tests, benchmarks and `demo`:
binaries found or built from Go modules (`binaries`), their certificates (`pki`), the
running processes (`server`), a kubelet stand-in that creates PodCertificateRequests
exactly as kubelet does (`kubelet`), and the node-capable cluster: the real
kube-controller-manager (`controller_manager`) and hollow kubelets (`hollow_node`) beside
the control plane (`cluster`), with workload Pods and the files their kubelet wrote
(`workload`)."""

from controlplane.server import ControlPlane, ControlPlaneError

__all__ = ["ControlPlane", "ControlPlaneError"]

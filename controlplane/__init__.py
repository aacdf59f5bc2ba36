"""A local kube-apiserver + etcd (an envtest analogue) for tests, benchmarks and `demo`."""

"""The trust distributor (opt-in): a labelled ConfigMap for the injector in every
selected namespace, the way kube-root-ca.crt is in every namespace (docs/inject.md)."""

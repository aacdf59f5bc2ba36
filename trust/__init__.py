"""What every controller shares about trust: bundle normalisation and naming,
ClusterTrustBundleSelector resolution, and the signing material (load, validate, hot
reload). Pure or file-level: no controller, no Kubernetes client beyond the `Client`
protocol a resolver is handed."""

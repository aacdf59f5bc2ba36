"""The `service-serving-signer` command line: a click shell, one module per command group
(`main` holds the root, `run`, `bundle` and `version`; `ca` the whole `ca` group;
`explain` the troubleshooting commands). Commands parse flags and print; what they
decide lives in `manager`, `troubleshoot` and `managedca`."""

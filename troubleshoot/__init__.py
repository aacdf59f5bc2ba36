"""Read-only troubleshooting tools for app teams and on-call engineers: `explain` (why a
request is where it is), `status` (the whole signer at a glance), the Lease-health reader,
advice and the access checks they share. Nothing here writes to the cluster."""

"""The opt-in managed CA (docs/reference.md §12, docs/managed-ca.md): bootstrap, rotation
gated on observation, and a crash-safe state machine persisted in the API."""

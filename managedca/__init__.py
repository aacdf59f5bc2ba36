"""The opt-in managed CA (SPEC §12, docs/managed-ca.md): bootstrap, rotation gated on
observation, and a crash-safe state machine persisted in the API."""

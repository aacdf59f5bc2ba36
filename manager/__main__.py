"""`python -m manager` runs the `service-serving-signer` command line."""

from manager.cli import entrypoint

entrypoint()

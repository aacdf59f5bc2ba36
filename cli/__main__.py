"""`python -m cli` runs the `service-serving-signer` command line."""

from cli.main import entrypoint

entrypoint()

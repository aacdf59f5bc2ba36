"""Benchmarks (bench/README.md "Scenarios"): burst, steady, wake-up, memory, the Go peer and
the ceiling, on the local control plane. Run with `make bench` or `python -m bench`."""

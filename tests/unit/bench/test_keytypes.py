"""The `keytypes` bench scenario measures every key type it names on the path the signer
takes, and its table line reads from what it reported."""

from __future__ import annotations

from bench.__main__ import table
from bench.keytypes import KEY_TYPES, keytypes


def test_keytypes_reports_cpu_and_sizes_for_mldsa_beside_p256() -> None:
    result = keytypes(n=4, rounds=1)

    assert set(KEY_TYPES) == {"ECDSAP256", "MLDSA44", "MLDSA65", "MLDSA87"}
    for key_type in KEY_TYPES:
        entry = result[key_type]
        assert entry["cpu_s_per_1000"] > 0 and entry["builder_cpu_s_per_1000"] > 0
    sizes = [result[k]["stub_csr_bytes"] for k in ("ECDSAP256", "MLDSA44", "MLDSA65", "MLDSA87")]
    assert sizes == sorted(sizes)  # ML-DSA keys and signatures grow with the level
    assert result["mldsa65_over_p256"] > 0
    assert "CPU ML-DSA-65/P-256" in table([result])

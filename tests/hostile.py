"""Hostile inputs the unit tests and the benchmarks share: a PKCS#12 truststore that
claims a KDF iteration count no reader may run (a tenant's ConfigMap in
bench/injector_tenant.py, a unit input in tests/unit/trust/test_truststore.py)."""

from __future__ import annotations


def _der(tag: int, content: bytes) -> bytes:
    n = len(content)
    if n < 0x80:
        return bytes([tag, n]) + content
    size = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(size)]) + size + content


def _children(der: bytes) -> list[bytes]:
    """The complete TLVs inside one constructed TLV (what rebuilding one needs)."""
    i = 2 + (der[1] & 0x7F if der[1] & 0x80 else 0)
    out = []
    while i < len(der):
        head = der[i + 1]
        extra = head & 0x7F if head & 0x80 else 0
        length = int.from_bytes(der[i + 2 : i + 2 + extra], "big") if extra else head
        end = i + 2 + extra + length
        out.append(der[i:end])
        i = end
    return out


def with_mac_iterations(store: bytes, iterations: int) -> bytes:
    """The same PKCS#12 file whose MacData claims `iterations` (the MAC no longer checks,
    but a reader that runs the KDF first spends the whole count before it knows)."""
    version, auth_safe, mac = _children(store)
    digest, salt, _ = _children(mac)
    count = _der(0x02, iterations.to_bytes((iterations.bit_length() + 8) // 8, "big"))
    return _der(0x30, version + auth_safe + _der(0x30, digest + salt + count))

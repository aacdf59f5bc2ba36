"""Signing-material validation (docs/reference.md §2) and hot reload (docs/reference.md §3)."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from prometheus_client import CollectorRegistry

from tests.unit import pki
from trust.bundle import TrustBundle
from trust.ca import CertificateAuthority, cert_pem, generate_ca, key_pem, write_ca
from trust.files import FileMaterialSource, load_material
from trust.material import MaterialError, MaterialSource


@pytest.fixture()
def ca_dir(tmp_path: Path) -> Path:
    write_ca(tmp_path, ca=pki.ca("material"))
    return tmp_path


def paths(d: Path) -> tuple[str, str, str]:
    return str(d / "ca.key"), str(d / "ca.crt"), str(d / "trust-bundle.pem")


def reload_count(registry: CollectorRegistry, result: str) -> float:
    value = registry.get_sample_value(
        "service_serving_ca_controller_material_reload_total", {"result": result}
    )
    assert value is not None
    return value


# start-up: the good cases --------------------------------------------------------------


def test_loads_root_ca_files_written_by_ca_init(ca_dir: Path) -> None:
    material = load_material(*paths(ca_dir))
    assert material.signing_cert == pki.ca("material").cert
    assert material.anchors == (pki.ca("material").cert,)
    assert material.trust_bundle == cert_pem(pki.ca("material").cert).decode()


@pytest.mark.parametrize("key_type", ["ECDSAP384", "ECDSAP521", "ED25519", "RSA2048"])
def test_loads_each_ca_key_type(tmp_path: Path, key_type: str) -> None:
    write_ca(tmp_path, ca=pki.ca(f"mat-{key_type}", key_type))
    assert load_material(*paths(tmp_path)).signing_cert == pki.ca(f"mat-{key_type}", key_type).cert


@pytest.mark.parametrize(
    "fmt",
    [serialization.PrivateFormat.PKCS8, serialization.PrivateFormat.TraditionalOpenSSL],
    ids=["pkcs8", "sec1-or-pkcs1"],
)
@pytest.mark.parametrize("key_type", ["ECDSAP256", "RSA2048"])
def test_accepts_pkcs8_pkcs1_and_sec1_keys(
    tmp_path: Path, fmt: serialization.PrivateFormat, key_type: str
) -> None:
    authority = pki.ca(f"fmt-{key_type}", key_type)
    files = write_ca(tmp_path, ca=authority)
    files.key.write_bytes(
        authority.key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption())
    )
    material = load_material(*paths(tmp_path))
    assert material.signing_cert == authority.cert
    assert material.key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) == authority.cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def test_loads_intermediate_chaining_to_root_in_bundle(tmp_path: Path) -> None:
    files = write_ca(tmp_path, ca=pki.intermediate())
    material = load_material(*paths(tmp_path))
    assert material.signing_cert == pki.intermediate().cert
    assert files.trust_bundle.read_bytes() == cert_pem(pki.ca("root").cert)


def test_loads_when_bundle_also_holds_other_roots(ca_dir: Path) -> None:
    bundle = ca_dir / "trust-bundle.pem"
    bundle.write_bytes(cert_pem(pki.ca("other").cert) + bundle.read_bytes())
    assert len(load_material(*paths(ca_dir)).anchors) == 2


def test_warns_when_key_file_is_group_readable(
    ca_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    os.chmod(ca_dir / "ca.key", 0o644)
    with caplog.at_level(logging.WARNING):
        load_material(*paths(ca_dir))
    assert "group/world-accessible (mode 0644)" in caplog.text


def test_key_file_written_with_mode_0600(ca_dir: Path) -> None:
    assert (ca_dir / "ca.key").stat().st_mode & 0o777 == 0o600


# start-up: the failure table -----------------------------------------------------------

Breaker = Callable[[Path], tuple[tuple[str, str, str], str, str]]


def _missing(d: Path) -> tuple[tuple[str, str, str], str, str]:
    (d / "ca.crt").unlink()
    return paths(d), str(d / "ca.crt"), "does not exist"


def _same_path(d: Path) -> tuple[tuple[str, str, str], str, str]:
    key, _, bundle = paths(d)
    return (key, key, bundle), key, "same file as the key"


def _same_file_via_symlink(d: Path) -> tuple[tuple[str, str, str], str, str]:
    key, _, bundle = paths(d)
    os.symlink(d / "ca.key", d / "link.crt")
    return (key, str(d / "link.crt"), bundle), str(d / "link.crt"), "same file as the key"


def _unreadable(d: Path) -> tuple[tuple[str, str, str], str, str]:
    (d / "ca.key").chmod(0)
    return paths(d), str(d / "ca.key"), "not readable"


def _directory(d: Path) -> tuple[tuple[str, str, str], str, str]:
    (d / "trust-bundle.pem").unlink()
    (d / "trust-bundle.pem").mkdir()
    return paths(d), str(d / "trust-bundle.pem"), "is a directory"


def _non_ca_cert(d: Path) -> tuple[tuple[str, str, str], str, str]:
    (d / "ca.crt").write_bytes(cert_pem(pki.non_ca_cert()))
    return paths(d), str(d / "ca.crt"), "is not a CA"


def _no_key_cert_sign(d: Path) -> tuple[tuple[str, str, str], str, str]:
    import datetime as dt

    from cryptography import x509

    key = pki.ca("material").key
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "no certsign")])
    cert = pki.hand_made_ca(key, name, now, serial=5, cert_sign=False)
    (d / "ca.crt").write_bytes(cert_pem(cert))
    (d / "trust-bundle.pem").write_bytes(cert_pem(cert))
    return paths(d), str(d / "ca.crt"), "lacks keyUsage keyCertSign"


def _mismatched_key(d: Path) -> tuple[tuple[str, str, str], str, str]:
    (d / "ca.key").write_bytes(key_pem(pki.ca("other").key))
    return paths(d), str(d / "ca.key"), "does not match the public key"


def _expired(d: Path) -> tuple[tuple[str, str, str], str, str]:
    old = generate_ca(
        "expired",
        not_before=datetime.now(UTC) - timedelta(days=10),
        validity=timedelta(days=1),
    )
    write_ca(d, ca=old, overwrite=True)
    return paths(d), str(d / "ca.crt"), "expired at"


def _not_yet_valid(d: Path) -> tuple[tuple[str, str, str], str, str]:
    future = generate_ca("future", not_before=datetime.now(UTC) + timedelta(days=1))
    write_ca(d, ca=future, overwrite=True)
    return paths(d), str(d / "ca.crt"), "not valid yet"


def _not_chaining(d: Path) -> tuple[tuple[str, str, str], str, str]:
    (d / "trust-bundle.pem").write_bytes(cert_pem(pki.ca("other").cert))
    return paths(d), str(d / "ca.crt"), "does not chain"


def _intermediate_missing_from_file(d: Path) -> tuple[tuple[str, str, str], str, str]:
    deep = generate_ca("deep", parent=pki.intermediate())
    write_ca(d, ca=deep, overwrite=True)
    (d / "ca.crt").write_bytes(cert_pem(deep.cert))  # without the intermediate
    return paths(d), str(d / "ca.crt"), "does not chain"


def _non_ca_in_bundle(d: Path) -> tuple[tuple[str, str, str], str, str]:
    bundle = d / "trust-bundle.pem"
    bundle.write_bytes(bundle.read_bytes() + cert_pem(pki.non_ca_cert()))
    return paths(d), str(bundle), "certificate 1"


def _garbage_key(d: Path) -> tuple[tuple[str, str, str], str, str]:
    (d / "ca.key").write_bytes(b"this is not a key\n")
    return paths(d), str(d / "ca.key"), "does not hold a PEM private key"


def _garbage_cert(d: Path) -> tuple[tuple[str, str, str], str, str]:
    (d / "ca.crt").write_bytes(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    return paths(d), str(d / "ca.crt"), "does not parse as an X.509 certificate"


def _half_written_cert(d: Path) -> tuple[tuple[str, str, str], str, str]:
    data = (d / "ca.crt").read_bytes()
    (d / "ca.crt").write_bytes(data[: len(data) // 2])
    return paths(d), str(d / "ca.crt"), "truncated or half-written"


def _garbage_bundle(d: Path) -> tuple[tuple[str, str, str], str, str]:
    (d / "trust-bundle.pem").write_bytes(b"garbage")
    return paths(d), str(d / "trust-bundle.pem"), "no certificates"


def _swapped_key_and_cert(d: Path) -> tuple[tuple[str, str, str], str, str]:
    key, cert, bundle = paths(d)
    return (cert, key, bundle), cert, "holds a CERTIFICATE, not a private key"


def _key_in_cert_file(d: Path) -> tuple[tuple[str, str, str], str, str]:
    cert = d / "ca.crt"
    cert.write_bytes(cert.read_bytes() + (d / "ca.key").read_bytes())
    return paths(d), str(cert), "must not contain the key"


def _encrypted_key(d: Path) -> tuple[tuple[str, str, str], str, str]:
    (d / "ca.key").write_bytes(
        pki.ca("material").key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pw"),
        )
    )
    return paths(d), str(d / "ca.key"), "encrypted"


def _unsupported_curve(d: Path) -> tuple[tuple[str, str, str], str, str]:
    (d / "ca.key").write_bytes(key_pem(ec.generate_private_key(ec.SECP256K1())))
    return paths(d), str(d / "ca.key"), "secp256k1 is not supported"


FAILURES: dict[str, Breaker] = {
    "missing-file": _missing,
    "same-path": _same_path,
    "same-file-via-symlink": _same_file_via_symlink,
    "directory": _directory,
    "non-ca-cert": _non_ca_cert,
    "no-keycertsign": _no_key_cert_sign,
    "mismatched-key": _mismatched_key,
    "expired-cert": _expired,
    "not-yet-valid-cert": _not_yet_valid,
    "not-chaining-to-bundle": _not_chaining,
    "intermediate-missing": _intermediate_missing_from_file,
    "non-ca-in-bundle": _non_ca_in_bundle,
    "garbage-key": _garbage_key,
    "garbage-cert": _garbage_cert,
    "half-written-cert": _half_written_cert,
    "garbage-bundle": _garbage_bundle,
    "swapped-key-and-cert": _swapped_key_and_cert,
    "key-in-cert-file": _key_in_cert_file,
    "encrypted-key": _encrypted_key,
    "unsupported-curve": _unsupported_curve,
}
if os.geteuid() != 0:  # root reads any file, so the case only exists for other users
    FAILURES["unreadable"] = _unreadable


@pytest.mark.parametrize("breaker", FAILURES.values(), ids=FAILURES.keys())
def test_startup_failure_is_one_line_naming_the_file(ca_dir: Path, breaker: Breaker) -> None:
    args, path, fragment = breaker(ca_dir)
    secret = key_pem(pki.ca("material").key).decode().splitlines()[1]
    with pytest.raises(MaterialError) as info:
        load_material(*args)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(f"{path}: "), text
    assert fragment in text, text
    assert secret[:20] not in text
    assert "PRIVATE KEY-----" not in text


# hot reload ---------------------------------------------------------------------------


@pytest.fixture()
def source_dir(tmp_path: Path) -> Path:
    """Files laid out like a Secret volume: `ca.key -> ..data/ca.key`, `..data -> ..v1`."""
    version = tmp_path / "..v1"
    write_ca(version, ca=pki.ca("material"))
    (tmp_path / "..data").symlink_to("..v1")
    for name in ("ca.key", "ca.crt", "trust-bundle.pem"):
        (tmp_path / name).symlink_to(f"..data/{name}")
    return tmp_path


def swap_data(d: Path, version: str, authority: CertificateAuthority, bundle: bytes) -> None:
    """An atomic `..data` swap, as kubelet does for Secret and ConfigMap volumes."""
    write_ca(d / version, ca=authority)
    (d / version / "trust-bundle.pem").write_bytes(bundle)
    (d / "..data_tmp").symlink_to(version)
    os.replace(d / "..data_tmp", d / "..data")


def test_swaps_in_new_set_on_data_symlink_swap_and_calls_listeners(source_dir: Path) -> None:
    registry = CollectorRegistry()
    source = FileMaterialSource(*paths(source_dir), registry)
    seen: list[str] = []
    source.add_listener(lambda m: seen.append(m.fingerprint))
    assert source.poll() is False
    new = pki.ca("material-2")
    swap_data(source_dir, "..v2", new, cert_pem(new.cert, pki.ca("material").cert))
    assert source.poll() is True
    assert source.current().signing_cert == new.cert
    assert len(source.current().anchors) == 2
    assert seen == [source.current().fingerprint]
    assert reload_count(registry, "ok") == 1
    assert reload_count(registry, "invalid") == 0


def test_picks_up_in_place_rewrite(tmp_path: Path) -> None:
    write_ca(tmp_path, ca=pki.ca("material"))
    source = FileMaterialSource(*paths(tmp_path), CollectorRegistry())
    bundle = tmp_path / "trust-bundle.pem"
    bundle.write_bytes(bundle.read_bytes() + cert_pem(pki.ca("other").cert))
    assert source.poll() is True
    assert len(source.current().anchors) == 2


def test_keeps_last_good_set_on_mismatched_pair_then_takes_the_fixed_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_ca(tmp_path, ca=pki.ca("material"))
    registry = CollectorRegistry()
    source = FileMaterialSource(*paths(tmp_path), registry)
    good = source.current()
    new = pki.ca("material-2")
    # The bundle gains the new root first (runbook step 1) ...
    (tmp_path / "trust-bundle.pem").write_bytes(cert_pem(good.signing_cert, new.cert))
    assert source.poll() is True
    good = source.current()
    # ... then the key lands before the cert: a mismatched pair.
    (tmp_path / "ca.key").write_bytes(key_pem(new.key))
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            assert source.poll() is False
    assert source.current() is good
    assert reload_count(registry, "invalid") == 1  # once per distinct failure
    errors = [str(getattr(r, "err", "")) for r in caplog.records]
    assert sum("does not match" in e for e in errors) == 1
    (tmp_path / "ca.crt").write_bytes(cert_pem(new.cert))
    assert source.poll() is True
    assert source.current().signing_cert == new.cert
    assert reload_count(registry, "ok") == 2


def test_keeps_last_good_set_when_a_file_disappears(tmp_path: Path) -> None:
    write_ca(tmp_path, ca=pki.ca("material"))
    registry = CollectorRegistry()
    source = FileMaterialSource(*paths(tmp_path), registry)
    good = source.current()
    shutil.move(tmp_path / "ca.crt", tmp_path / "away.crt")
    assert source.poll() is False
    assert source.current() is good
    shutil.move(tmp_path / "away.crt", tmp_path / "ca.crt")
    assert source.poll() is False  # back to the good content: nothing to swap
    assert reload_count(registry, "invalid") == 1


def test_retries_a_set_that_becomes_valid_with_time(tmp_path: Path) -> None:
    write_ca(tmp_path, ca=pki.ca("material"))
    now = [datetime.now(UTC)]
    registry = CollectorRegistry()
    source = FileMaterialSource(*paths(tmp_path), registry, clock=lambda: now[0])
    future = generate_ca("soon", not_before=now[0] + timedelta(seconds=30))
    write_ca(tmp_path, ca=future, overwrite=True)
    source.poll()  # the new bundle alone is valid and swapped in; the signing set is not
    assert source.poll() is False
    assert source.current().signing_cert != future.cert
    now[0] += timedelta(minutes=1)
    assert source.poll() is True
    assert source.current().signing_cert == future.cert
    assert reload_count(registry, "invalid") == 1


def test_initial_load_failure_raises(tmp_path: Path) -> None:
    write_ca(tmp_path, ca=pki.ca("material"))
    (tmp_path / "ca.key").write_bytes(key_pem(pki.ca("other").key))
    with pytest.raises(MaterialError, match="does not match"):
        FileMaterialSource(*paths(tmp_path), CollectorRegistry())


def test_reload_counters_start_at_zero(ca_dir: Path) -> None:
    registry = CollectorRegistry()
    FileMaterialSource(*paths(ca_dir), registry)
    assert reload_count(registry, "ok") == 0
    assert reload_count(registry, "invalid") == 0


def test_run_polls_until_stopped(ca_dir: Path) -> None:
    import threading

    source = FileMaterialSource(*paths(ca_dir), CollectorRegistry(), poll_interval=0.01)
    swapped = threading.Event()
    source.add_listener(lambda _m: swapped.set())
    stop = threading.Event()
    thread = threading.Thread(target=source.run, args=(stop,))
    thread.start()
    bundle = ca_dir / "trust-bundle.pem"
    bundle.write_bytes(bundle.read_bytes() + cert_pem(pki.ca("other").cert))
    assert swapped.wait(5)
    stop.set()
    thread.join(5)
    assert not thread.is_alive()


# two units: the trust bundle (publisher) and the signing set (signer) -----------------


def sample(registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None) -> float:
    value = registry.get_sample_value(name, labels or {})
    assert value is not None, name
    return value


def info_labels(registry: CollectorRegistry) -> dict[str, str]:
    for metric in registry.collect():
        if metric.name == "service_serving_ca_controller_material_info":
            (s,) = [s for s in metric.samples if s.value == 1]
            return dict(s.labels)
    raise AssertionError("no material_info")


def test_new_bundle_is_taken_while_the_key_is_broken(tmp_path: Path) -> None:
    write_ca(tmp_path, ca=pki.ca("material"))
    registry = CollectorRegistry()
    source = FileMaterialSource(*paths(tmp_path), registry)
    bundles: list[str] = []
    source.add_bundle_listener(lambda b: bundles.append(b.pem))
    good = source.current()
    (tmp_path / "ca.key").write_bytes(key_pem(pki.ca("other").key))  # mismatched key
    both = cert_pem(pki.ca("material").cert, pki.ca("material-2").cert)
    (tmp_path / "trust-bundle.pem").write_bytes(both)
    assert source.poll() is True
    assert len(source.trust_bundle().anchors) == 2
    assert bundles == [source.trust_bundle().pem]
    assert source.current() is good  # the signing set keeps the last good one
    assert sample(registry, "service_serving_ca_controller_material_invalid") == 1


def test_bad_bundle_is_refused_naming_the_bundle_file_and_the_old_one_kept(tmp_path: Path) -> None:
    write_ca(tmp_path, ca=pki.ca("material"))
    source = FileMaterialSource(*paths(tmp_path), CollectorRegistry())
    good = source.trust_bundle()
    (tmp_path / "trust-bundle.pem").write_text("-----BEGIN CERTIFICATE-----\nMII")
    assert source.poll() is False
    assert source.trust_bundle() is good
    with pytest.raises(MaterialError, match=r"trust-bundle\.pem: invalid trust bundle"):
        FileMaterialSource(*paths(tmp_path), CollectorRegistry())


def test_bundle_only_source_needs_no_key_or_cert(tmp_path: Path) -> None:
    write_ca(tmp_path, ca=pki.ca("material"))
    (tmp_path / "ca.key").unlink()
    registry = CollectorRegistry()
    source = FileMaterialSource(None, None, tmp_path / "trust-bundle.pem", registry)
    assert source.trust_bundle().anchors == (pki.ca("material").cert,)
    with pytest.raises(RuntimeError):
        source.current()
    assert info_labels(registry) == {
        "trust_bundle": source.trust_bundle().digest,
        "signing_certificate": "",
    }


def test_invalid_gauge_is_one_while_files_are_rejected_and_info_names_what_is_in_use(
    tmp_path: Path,
) -> None:
    from trust.bundle import bundle_name

    write_ca(tmp_path, ca=pki.ca("material"))
    registry = CollectorRegistry()
    source = FileMaterialSource(*paths(tmp_path), registry)
    assert sample(registry, "service_serving_ca_controller_material_invalid") == 0
    first = info_labels(registry)
    assert bundle_name("x/y", source.trust_bundle().pem).endswith(":" + first["trust_bundle"])
    expected = pki.ca("material").cert.fingerprint(hashes.SHA256()).hex()
    assert first["signing_certificate"] == expected
    (tmp_path / "ca.key").write_bytes(key_pem(pki.ca("other").key))
    source.poll()
    assert sample(registry, "service_serving_ca_controller_material_invalid") == 1
    source.poll()
    assert sample(registry, "service_serving_ca_controller_material_invalid") == 1
    assert info_labels(registry) == first
    write_ca(tmp_path, ca=pki.ca("other"), overwrite=True)
    assert source.poll() is True
    assert sample(registry, "service_serving_ca_controller_material_invalid") == 0
    now = info_labels(registry)
    assert now["signing_certificate"] == pki.ca("other").cert.fingerprint(hashes.SHA256()).hex()
    assert now["trust_bundle"] != first["trust_bundle"]


def test_expired_anchor_is_kept_but_warned_about_once_per_bundle(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old = generate_ca(
        "expired root",
        not_before=datetime(2019, 1, 1, tzinfo=UTC),
        validity=timedelta(days=365),
    )
    write_ca(tmp_path, ca=pki.ca("material"))
    (tmp_path / "trust-bundle.pem").write_bytes(cert_pem(pki.ca("material").cert, old.cert))
    with caplog.at_level(logging.WARNING):
        source = FileMaterialSource(*paths(tmp_path), CollectorRegistry())
        source.poll()
        source.poll()
    assert len(source.trust_bundle().anchors) == 2
    warnings = [r for r in caplog.records if "expired anchor" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].__dict__["anchor"] == "CN=expired root"


def test_reload_now_polls_without_waiting_for_the_interval(ca_dir: Path) -> None:
    import threading

    # Typed as the protocol the signer and the publisher read (mypy checks the file
    # source satisfies it).
    source: MaterialSource = FileMaterialSource(
        *paths(ca_dir), CollectorRegistry(), poll_interval=3600
    )
    swapped = threading.Event()
    seen: list[TrustBundle] = []

    def on_bundle(bundle: TrustBundle) -> None:
        seen.append(bundle)
        swapped.set()

    source.add_bundle_listener(on_bundle)
    stop = threading.Event()
    thread = threading.Thread(target=source.run, args=(stop,))
    thread.start()
    try:
        bundle = ca_dir / "trust-bundle.pem"
        bundle.write_bytes(bundle.read_bytes() + cert_pem(pki.ca("other").cert))
        source.reload_now()
        assert swapped.wait(10)
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
    assert seen == [source.trust_bundle()]
    assert len(seen[0].anchors) == 2

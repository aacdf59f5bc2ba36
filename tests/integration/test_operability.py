"""Operability of `service-serving-signer run` as a real process against the real API
server: a rejected rotation is visible in metrics, the publisher's bundle is
validated on its own, a replica with a stale ConfigMap volume does not take a new root
back out, and the process behaves on IPv6, on a busy port and on SIGHUP."""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization

from controlplane import ControlPlane
from kube.client import Client
from kube.times import read_time
from kube.types import JSON
from tests.integration.manager_process import SignerProcess, eventually
from trust.bundle import (
    anchor_ders,
    bundle_digest,
    bundle_name,
    normalize_bundle,
    stable_bundle_name,
)
from trust.ca import CaFiles, CertificateAuthority, cert_pem, generate_ca, key_pem, write_ca

PUBLISHER_SUCCESS = 'controller="publisher",result="success"'
CTB = "/apis/certificates.k8s.io/v1/clustertrustbundles"
LEASE = (
    "--leader-elect-lease-duration=6s",
    "--leader-elect-renew-deadline=4s",
    "--leader-elect-retry-period=1s",
)


def unique_signer() -> str:
    return f"t{uuid.uuid4().hex[:10]}.example.com/serving"


def bundles_of(client: Client, signer: str) -> list[JSON]:
    return list(client.get(CTB, {"fieldSelector": f"spec.signerName={signer}"})["items"])


def bundle_names(client: Client, signer: str) -> set[str]:
    """The hash-named bundles (the stable one is always there beside them)."""
    return {b["metadata"]["name"] for b in bundles_of(client, signer)} - {
        stable_bundle_name(signer)
    }


def cleanup(client: Client, signer: str) -> None:
    for name in {b["metadata"]["name"] for b in bundles_of(client, signer)}:
        client.delete(f"{CTB}/{name.replace(':', '%3A')}")


def put(path: Path, data: bytes) -> None:
    """Replace a file atomically (a poll never sees it half-written)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def material_info(process: SignerProcess) -> dict[str, str] | None:
    """The labels of `service_serving_ca_controller_material_info` (one series)."""
    code, text = process.get("/metrics")
    if code != 200:
        return None
    for line in text.splitlines():
        if line.startswith("service_serving_ca_controller_material_info{"):
            return dict(re.findall(r'(\w+)="([^"]*)"', line.split("}", 1)[0]))
    return None


def invalid(process: SignerProcess) -> float | None:
    return process.metric("service_serving_ca_controller_material_invalid")


@contextmanager
def running(
    client: Client,
    plane: ControlPlane,
    ca_dir: Path,
    log: Path,
    signer: str,
    *args: str,
    **kw: object,
) -> Iterator[SignerProcess]:
    """A `run` process for `signer`; stopped (SIGTERM must exit 0) and its bundles deleted
    afterwards."""
    process = start(plane, ca_dir, log, signer, *args, **kw)
    try:
        yield process
    finally:
        code = process.stop()
        cleanup(client, signer)
    assert code == 0, "SIGTERM exits 0"


RunSigner = Callable[..., AbstractContextManager[SignerProcess]]


@pytest.fixture
def run_signer(
    client: Client, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> RunSigner:
    """`running(...)` with this test's client, plane, CA directory (`tmp_path/ca`), log
    file and Lease namespace filled in: `with run_signer(signer, *args) as process:`."""

    def run(
        signer: str, *args: str, log: str = "signer.log", **kw: object
    ) -> AbstractContextManager[SignerProcess]:
        lease_ns = f"--leader-elect-resource-namespace={namespace}"
        ca_dir = tmp_path / "ca"
        return running(client, control_plane, ca_dir, tmp_path / log, signer, lease_ns, *args, **kw)

    return run


def rotation(
    tmp_path: Path, label: str
) -> tuple[str, CertificateAuthority, CertificateAuthority, CaFiles]:
    """A fresh signer name, CAs `<label> old` and `<label> new`, and the old one's files
    in `tmp_path/ca` (where `run_signer` reads them)."""
    old, new = generate_ca(f"{label} old"), generate_ca(f"{label} new")
    return unique_signer(), old, new, write_ca(tmp_path / "ca", ca=old)


def start(
    plane: ControlPlane, ca_dir: Path, log: Path, signer: str, *args: str, **kw: object
) -> SignerProcess:
    return SignerProcess(plane.kubeconfig, ca_dir, log, *args, signer_name=signer, **kw)  # type: ignore[arg-type]


# item 2: a rejected rotation is loud -------------------------------------------------


def test_rejected_rotation_shows_material_invalid_and_keeps_the_fingerprint_until_fixed(
    client: Client, tmp_path: Path, run_signer: RunSigner
) -> None:
    signer, old, new, files = rotation(tmp_path, "rejected")
    with run_signer(signer) as process:
        assert eventually(process.ready, 60), "ready"
        before = material_info(process)
        assert before is not None
        assert before["signing_certificate"] == old.cert.fingerprint(hashes.SHA256()).hex()
        assert invalid(process) == 0
        assert eventually(
            lambda: (
                bundle_names(client, signer)
                == {f"{signer.replace('/', ':')}:{before['trust_bundle']}"}
            ),
            30,
        ), "the published bundle's name ends with the metric's trust_bundle label"

        put(files.key, key_pem(new.key))  # the key lands without its cert
        assert eventually(lambda: invalid(process) == 1, 30), "material_invalid rises"
        assert material_info(process) == before, "the old set stays in use"
        assert process.ready(), "still ready: it signs with the last good set"
        errors = [e for e in process.json_logs() if e["level"] == "error"]
        assert len(errors) == 1, errors
        assert errors[0]["err"].startswith(f"{files.key}: private key does not match")

        put(files.trust_bundle, cert_pem(old.cert, new.cert))
        put(files.cert, cert_pem(new.cert))
        assert eventually(lambda: invalid(process) == 0, 30), "accepted again"
        after = material_info(process)
        assert after is not None
        assert after["signing_certificate"] == new.cert.fingerprint(hashes.SHA256()).hex()
        both = normalize_bundle(cert_pem(old.cert, new.cert))
        assert after["trust_bundle"] == bundle_digest(both)


# item 4: the bundle is the publisher's unit ------------------------------------------


def test_publisher_only_runs_without_a_ca_key(
    control_plane: ControlPlane, client: Client, namespace: str, tmp_path: Path
) -> None:
    signer = unique_signer()
    files = write_ca(tmp_path / "ca")
    files.key.unlink()
    files.cert.unlink()
    with running(
        client,
        control_plane,
        files.key.parent,
        tmp_path / "publisher.log",
        signer,
        "--controllers=publisher",
        f"--leader-elect-resource-namespace={namespace}",
        key_and_cert=False,
    ) as process:
        bundle = normalize_bundle(files.trust_bundle.read_bytes())
        assert eventually(lambda: bundle_names(client, signer) == {bundle_name(signer, bundle)}, 60)
        assert material_info(process) == {
            "trust_bundle": bundle_digest(bundle),
            "signing_certificate": "",
        }


def test_new_bundle_is_published_while_the_signers_key_is_broken(
    client: Client, tmp_path: Path, run_signer: RunSigner
) -> None:
    signer, old, new, files = rotation(tmp_path, "broken-key")
    with run_signer(signer) as process:
        assert eventually(lambda: len(bundle_names(client, signer)) == 1, 60)
        put(files.key, key_pem(new.key))  # broken: does not match the cert
        assert eventually(lambda: invalid(process) == 1, 30)
        put(files.trust_bundle, cert_pem(old.cert, new.cert))
        both = normalize_bundle(cert_pem(old.cert, new.cert))
        assert eventually(lambda: bundle_names(client, signer) == {bundle_name(signer, both)}, 30)
        assert invalid(process) == 1, "the signing set is still rejected"
        assert material_info(process) == {
            "trust_bundle": bundle_digest(both),
            "signing_certificate": old.cert.fingerprint(hashes.SHA256()).hex(),
        }


# item 5: a new leader with a stale ConfigMap volume --------------------------------


def test_new_leader_with_a_stale_bundle_file_keeps_the_new_root_published(
    control_plane: ControlPlane, client: Client, namespace: str, tmp_path: Path
) -> None:
    signer = unique_signer()
    old, new = generate_ca("stale old"), generate_ca("stale new")
    a_dir = write_ca(tmp_path / "a", ca=old).key.parent
    b_dir = tmp_path / "b"
    shutil.copytree(a_dir, b_dir)  # same files, as two Pods mount one ConfigMap/Secret
    args = (
        f"--leader-elect-resource-namespace={namespace}",
        f"--leader-elect-resource-name=stale-{uuid.uuid4().hex[:8]}",
        *LEASE,
    )
    one = normalize_bundle(cert_pem(old.cert))
    both = normalize_bundle(cert_pem(old.cert, new.cert))
    a = start(control_plane, a_dir, tmp_path / "a.log", signer, *args)
    b: SignerProcess | None = None
    try:
        assert eventually(a.leading, 60), "A leads"
        b = start(control_plane, b_dir, tmp_path / "b.log", signer, *args)
        assert eventually(b.ready, 60), "B is a warm standby"
        assert eventually(lambda: bundle_names(client, signer) == {bundle_name(signer, one)}, 30)

        # Runbook step 1 reaches A's node first: A publishes old + new root.
        put(a_dir / "trust-bundle.pem", cert_pem(old.cert, new.cert))
        assert eventually(lambda: bundle_names(client, signer) == {bundle_name(signer, both)}, 30)
        # What the runbook has the operator watch (asserted below): B reports the old bundle.
        a_info, b_info = material_info(a), material_info(b)

        # A goes away (rollout, node drain); B, whose volume is still stale, leads.
        syncs_before = b.metric("controller_sync_total", PUBLISHER_SUCCESS) or 0
        a.terminate()
        assert a.wait(30) == 0
        assert eventually(b.leading, 15), "B leads"
        assert eventually(
            lambda: (b.metric("controller_sync_total", PUBLISHER_SUCCESS) or 0) > syncs_before,
            30,
        ), "B has reconciled"
        names = bundle_names(client, signer)
        assert bundle_name(signer, both) in names, "the new root was not taken back out"
        assert (a_info or {}).get("trust_bundle") == bundle_digest(both)
        assert (b_info or {}).get("trust_bundle") == bundle_digest(one)

        # B's volume catches up: one bundle again, with both roots.
        put(b_dir / "trust-bundle.pem", cert_pem(old.cert, new.cert))
        assert eventually(lambda: bundle_names(client, signer) == {bundle_name(signer, both)}, 30)
        kept = [
            e for e in b.json_logs() if e["msg"].startswith("keeping a newer ClusterTrustBundle")
        ]
        assert kept and kept[0]["bundle"] == bundle_name(signer, both)
    finally:
        for process in (a, b):
            if process is not None:
                process.stop()
        cleanup(client, signer)


# the file mode's compromised-key procedure (docs/operate.md) ------------------------


def test_the_compromised_key_procedure_leaves_only_the_new_root_published(
    control_plane: ControlPlane,
    client: Client,
    namespace: str,
    tmp_path: Path,
    run_signer: RunSigner,
) -> None:
    """docs/operate.md "A compromised key (file mode)": scale to 0, replace the key, the
    certificate and the bundle (the new root only), scale up. The new replica signs with
    the new CA and no bundle of the signer holds the old root any more (the stable one
    included): the old root's bundle was published by a replica from an older file, so
    it is not kept."""
    signer, old, new, files = rotation(tmp_path, "compromised")
    lease = f"--leader-elect-resource-namespace={namespace}"
    before = start(control_plane, files.key.parent, tmp_path / "before.log", signer, lease)
    try:
        only_old = normalize_bundle(cert_pem(old.cert))
        assert eventually(
            lambda: bundle_names(client, signer) == {bundle_name(signer, only_old)}, 60
        ), before.log_path.read_text()[-2000:]
    finally:
        assert before.stop() == 0  # scaled to 0: nothing signs; the old root stays published
    # The files are replaced after the old root's bundle was published, as in the
    # procedure. creationTimestamp has whole seconds, so a file written within the second
    # the bundle was created cannot be told from an older file and the publisher keeps
    # that bundle (its point 4): write them once that second has passed.
    created = max(read_time(b["metadata"]["creationTimestamp"]) for b in bundles_of(client, signer))
    assert eventually(lambda: time.time() >= created.timestamp() + 1, 5)
    put(files.key, key_pem(new.key))
    put(files.cert, cert_pem(new.cert))
    put(files.trust_bundle, cert_pem(new.cert))
    with run_signer(signer, log="after.log") as after:
        only_new = normalize_bundle(cert_pem(new.cert))
        assert eventually(
            lambda: bundle_names(client, signer) == {bundle_name(signer, only_new)}, 60
        ), after.log_path.read_text()[-2000:]
        old_der = old.cert.public_bytes(serialization.Encoding.DER)
        for published in bundles_of(client, signer):  # the stable one too
            assert old_der not in anchor_ders(published["spec"]["trustBundle"])
        signing = new.cert.fingerprint(hashes.SHA256()).hex()
        assert eventually(
            lambda: (material_info(after) or {}).get("signing_certificate") == signing, 30
        )


# items 6 and 7: IPv6, a busy port, SIGHUP -------------------------------------------


def test_ops_endpoints_serve_on_ipv6_loopback(tmp_path: Path, run_signer: RunSigner) -> None:
    write_ca(tmp_path / "ca")
    with run_signer(unique_signer(), host="::1") as process:
        assert eventually(process.ready, 60), process.log_path.read_text()[-2000:]
        assert process.url("/readyz").startswith("http://[::1]:")
        assert process.get("/healthz")[0] == 200
        assert process.metric("service_serving_ca_controller_material_invalid") == 0


def test_sighup_rereads_the_files_and_keeps_running_and_leading(
    client: Client, namespace: str, tmp_path: Path, run_signer: RunSigner
) -> None:
    signer = unique_signer()
    write_ca(tmp_path / "ca")
    lease = f"hup-{uuid.uuid4().hex[:8]}"
    with run_signer(signer, f"--leader-elect-resource-name={lease}") as process:
        assert eventually(process.leading, 60)
        process.proc.send_signal(signal.SIGHUP)
        assert eventually(
            lambda: any(e.get("signal") == "SIGHUP" for e in process.json_logs()), 60
        ), "the SIGHUP is logged"
        assert process.alive(), "SIGHUP does not kill the process"
        assert process.leading()
        holder = client.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{lease}")
        assert holder["spec"].get("holderIdentity")
    released = client.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{lease}")
    assert not released["spec"].get("holderIdentity"), "SIGTERM after SIGHUP still releases"


@pytest.mark.parametrize("flag", ["--metrics-bind-address", "--health-probe-bind-address"])
def test_bind_address_in_use_is_one_line_and_exit_1(
    control_plane: ControlPlane, tmp_path: Path, flag: str
) -> None:
    files = write_ca(tmp_path / "ca")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        other = (
            "--health-probe-bind-address"
            if flag == "--metrics-bind-address"
            else ("--metrics-bind-address")
        )
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "cli",
                "run",
                f"--kubeconfig={control_plane.kubeconfig}",
                f"--service-serving-key={files.key}",
                f"--service-serving-cert={files.cert}",
                f"--service-serving-trust-bundle={files.trust_bundle}",
                f"--signer-name={unique_signer()}",
                "--leader-elect=false",
                f"{flag}=127.0.0.1:{port}",
                f"{other}=127.0.0.1:0",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert lines == [f"error: {flag}=127.0.0.1:{port}: Address already in use"], result.stderr

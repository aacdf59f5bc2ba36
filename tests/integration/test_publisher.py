"""The ClusterTrustBundle publisher and signing-material hot reload against the real
kube-apiserver: published form, self-healing, content changes
without a gap, CA rotation with zero failed requests, bad material never used, and the
start-up failure table of the `run` command."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from controlplane import ControlPlane
from kube.client import Client, is_not_found, path_segment
from kube.types import JSON
from publisher.decide import MANAGED_BY, MANAGED_BY_LABEL
from tests.integration.publisher_harness import (
    RunningPublisher,
    bundles_of,
    create_ctb,
    ctb_path,
    delete_ctb,
    swap_key_and_cert,
)
from tests.integration.signer_harness import (
    RunningSigner,
    condition,
    eventually,
    looping,
    wait_terminal,
)
from trust.bundle import anchor_ders, bundle_name, normalize_bundle, stable_bundle_name
from trust.ca import cert_pem, generate_ca, key_pem, write_ca
from trust.clustertrustbundles import anchors_of


@pytest.fixture
def signer_name() -> str:
    return f"t{uuid.uuid4().hex[:10]}.example.com/serving"


@pytest.fixture
def ca_dir(tmp_path: Path) -> Path:
    write_ca(tmp_path)
    return tmp_path


@pytest.fixture
def publisher(client: Client, ca_dir: Path, signer_name: str) -> Iterator[RunningPublisher]:
    running = RunningPublisher(client, ca_dir, signer_name).start()
    try:
        yield running
    finally:
        running.close()


# 1. what is published --------------------------------------------------------------


def test_publishes_normalised_bundle_with_hash_name_signer_and_label(
    plane_client: Client, tmp_path: Path, signer_name: str
) -> None:
    """On every tested kube-apiserver: v1 on 1.37, v1beta1 on 1.36 (the version the
    publisher finds served)."""
    client = plane_client
    root, other = generate_ca("pub root"), generate_ca("pub other")
    write_ca(tmp_path, ca=root)
    body = cert_pem(root.cert).decode().split("\n", 1)[1]
    messy = (
        "# trust bundle, hand-edited\n"
        + cert_pem(other.cert).decode()
        + "text between blocks\n"
        + "-----BEGIN CERTIFICATE-----\nComment: with a header\n\n"
        + body
        + cert_pem(root.cert).decode()
        + cert_pem(other.cert).decode()
    )
    (tmp_path / "trust-bundle.pem").write_text(messy)
    running = RunningPublisher(client, tmp_path, signer_name).start()
    try:
        obj = eventually(running.published, timeout=10, what="the bundle")
        clean = normalize_bundle(cert_pem(root.cert, other.cert))
        assert obj["metadata"]["name"] == bundle_name(signer_name, clean)
        assert obj["metadata"]["name"].startswith(signer_name.replace("/", ":") + ":")
        assert obj["spec"] == {"signerName": signer_name, "trustBundle": clean}
        assert obj["metadata"]["labels"] == {MANAGED_BY_LABEL: MANAGED_BY}
        assert "Comment" not in clean and clean.count("BEGIN CERTIFICATE") == 2
    finally:
        running.close()


# 2. self-healing ---------------------------------------------------------------------


def test_deleted_bundle_is_restored_within_5s(client: Client, publisher: RunningPublisher) -> None:
    obj = eventually(publisher.published, timeout=10, what="the bundle")
    delete_ctb(client, obj["metadata"]["name"])
    started = time.monotonic()
    eventually(publisher.published, timeout=5, interval=0.02, what="the restored bundle")
    assert time.monotonic() - started < 5


def test_edited_bundle_content_and_label_are_restored(
    client: Client, publisher: RunningPublisher
) -> None:
    obj = eventually(publisher.published, timeout=10, what="the bundle")
    edited = dict(obj)
    edited["spec"] = {**obj["spec"], "trustBundle": cert_pem(generate_ca("intruder").cert).decode()}
    edited["metadata"] = {**obj["metadata"], "labels": {"edited": "yes"}}
    name = obj["metadata"]["name"]
    client.replace(f"{ctb_path(client)}/{path_segment(name)}", edited)
    restored = eventually(publisher.published, timeout=5, what="the restored bundle")
    assert restored["metadata"]["labels"][MANAGED_BY_LABEL] == MANAGED_BY


def test_stale_bundle_of_our_signer_is_deleted_and_other_signers_untouched(
    client: Client, publisher: RunningPublisher, signer_name: str
) -> None:
    eventually(publisher.published, timeout=10, what="the bundle")
    stale_pem = normalize_bundle(cert_pem(generate_ca("stale").cert))
    stale = bundle_name(signer_name, stale_pem)
    other_signer = f"t{uuid.uuid4().hex[:10]}.example.com/other"
    foreign = bundle_name(other_signer, stale_pem)
    create_ctb(client, stale, signer_name, stale_pem)
    create_ctb(client, foreign, other_signer, stale_pem)
    try:
        eventually(publisher.published, timeout=5, what="only our bundle left")
        time.sleep(1)
        assert [o["metadata"]["name"] for o in bundles_of(client, other_signer)] == [foreign]
    finally:
        delete_ctb(client, foreign)


# 3. content change -------------------------------------------------------------------


def test_bundle_file_change_replaces_the_bundle_without_a_gap(
    client: Client, publisher: RunningPublisher, ca_dir: Path, signer_name: str
) -> None:
    old = eventually(publisher.published, timeout=10, what="the bundle")
    gaps: list[float] = []
    counts: list[int] = []
    watching = threading.Event()

    def observe() -> None:
        empty_since: float | None = None
        while not watching.is_set():
            n = len(bundles_of(client, signer_name))
            counts.append(n)
            now = time.monotonic()
            if n == 0:
                empty_since = empty_since or now
            elif empty_since is not None:
                gaps.append(now - empty_since)
                empty_since = None

    observer = threading.Thread(target=observe, daemon=True)
    observer.start()
    try:
        time.sleep(0.3)
        bundle = ca_dir / "trust-bundle.pem"
        bundle.write_bytes(bundle.read_bytes() + cert_pem(generate_ca("added root").cert))
        new = eventually(
            lambda: (
                (p := publisher.published())
                and p["metadata"]["name"] != old["metadata"]["name"]
                and p
            ),
            timeout=10,
            what="the new bundle",
        )
        time.sleep(0.3)
    finally:
        watching.set()
        observer.join(5)
    assert new["spec"]["trustBundle"].count("BEGIN CERTIFICATE") == 2
    assert 0 not in counts, f"no bundle for the signer at some point: {counts}"
    assert not gaps


def test_stable_bundle_goes_old_to_both_to_new_in_place_and_projects_the_same_anchors(
    client: Client, publisher: RunningPublisher, ca_dir: Path, signer_name: str
) -> None:
    """A by-name referent through the runbook (add a root, drop the old one).
    Never absent, never re-created (one UID), and at every observation it holds exactly
    what the hash-named bundles hold together — what a Pod projecting by `signerName`
    sees (kubelet de-duplicates), so that projection is the same set as without it."""
    eventually(publisher.published, timeout=10, what="the bundle")
    path = f"{ctb_path(client)}/{path_segment(stable_bundle_name(signer_name))}"
    bundle = ca_dir / "trust-bundle.pem"
    old = bundle.read_bytes()
    new = cert_pem(generate_ca("stable new root").cert)
    seen: list[tuple[str, frozenset[bytes]] | None] = []
    unions: list[tuple[frozenset[bytes], frozenset[bytes]]] = []
    stop = threading.Event()

    def observe() -> None:
        while not stop.is_set():
            try:
                obj = client.get(path)
            except Exception as err:
                if not is_not_found(err):
                    raise
                seen.append(None)
                continue
            seen.append((obj["metadata"]["uid"], anchor_ders(obj["spec"]["trustBundle"])))
            listed = bundles_of(client, signer_name)
            everything = frozenset().union(*(anchor_ders(o["spec"]["trustBundle"]) for o in listed))
            hashed = [o for o in listed if o["metadata"]["name"] != stable_bundle_name(signer_name)]
            unions.append(
                (
                    everything,
                    frozenset().union(*(anchor_ders(o["spec"]["trustBundle"]) for o in hashed)),
                )
            )

    observer = threading.Thread(target=observe, daemon=True)
    observer.start()
    try:
        time.sleep(0.3)
        bundle.write_bytes(old + new)
        eventually(publisher.published, timeout=10, what="old + new published")
        time.sleep(0.3)
        bundle.write_bytes(new)
        eventually(publisher.published, timeout=10, what="new published")
        time.sleep(0.3)
    finally:
        stop.set()
        observer.join(10)
    present = [s for s in seen if s is not None]
    assert len(present) == len(seen), "the stable bundle was absent at some point"
    assert len({uid for uid, _ in present}) == 1, "the stable bundle was re-created"
    contents = [c for _, c in present]
    order = [c for i, c in enumerate(contents) if i == 0 or c != contents[i - 1]]
    both, only_new = anchor_ders(normalize_bundle(old + new)), anchor_ders(normalize_bundle(new))
    assert order == [anchor_ders(normalize_bundle(old)), both, only_new], order
    # A projection by signerName (all bundles) is what the hash-named ones alone give.
    assert unions and all(everything == hashed for everything, hashed in unions)


def test_stable_bundle_follows_a_managed_rotation_in_place(
    control_plane: ControlPlane, client: Client, namespace: str, tmp_path: Path
) -> None:
    """Managed mode (a real `run --ca-mode=managed`): through `ca rotate` →
    staged → swapped → retired, the stable bundle is never absent, never re-created, goes
    old → old+new → new, and always holds what the hash-named bundles hold together (a
    signerName projection sees the same set). `ca status` names it."""
    from tests.integration.managed_ca_harness import move_retire_time_to_the_past
    from tests.integration.manager_process import eventually as within
    from tests.integration.test_managed_ca import Managed

    managed = Managed(control_plane, client, namespace, tmp_path)
    stable = stable_bundle_name(managed.signer_name)
    path = f"/apis/certificates.k8s.io/v1/clustertrustbundles/{path_segment(stable)}"
    seen: list[tuple[str, frozenset[str]] | None] = []
    unions: list[tuple[frozenset[str], frozenset[str]]] = []
    stop = threading.Event()

    def observe() -> None:
        while not stop.is_set():
            try:
                obj = client.get(path)
            except Exception as err:
                if not is_not_found(err):
                    raise
                seen.append(None)
                time.sleep(0.05)
                continue
            seen.append((obj["metadata"]["uid"], anchors_of(obj["spec"]["trustBundle"])))
            listed = bundles_of(client, managed.signer_name)
            unions.append(
                (
                    frozenset().union(*(anchors_of(o["spec"]["trustBundle"]) for o in listed)),
                    frozenset().union(
                        *(
                            anchors_of(o["spec"]["trustBundle"])
                            for o in listed
                            if o["metadata"]["name"] != stable
                        )
                    ),
                )
            )
            time.sleep(0.05)

    observer = threading.Thread(target=observe, daemon=True)
    try:
        managed.start("a")
        assert within(lambda: managed.phase() == "Stable", 30)
        old = managed.ca()
        assert within(lambda: managed.published() == {old}, 15)
        observer.start()
        assert managed.ca_cli("rotate").returncode == 0
        assert within(lambda: managed.phase() == "Staged", 15)
        new = managed.ca("next")
        assert within(lambda: managed.phase() == "Retiring", 60), managed.annotations()
        status = managed.ca_cli("status")
        assert f"Bundle:  ClusterTrustBundle {stable}" in status.stdout, status.stdout
        move_retire_time_to_the_past(client, managed.secret_path)
        assert within(lambda: managed.published() == {new}, 30), "the old root retired"
        time.sleep(0.5)
    finally:
        stop.set()
        if observer.is_alive():
            observer.join(10)
        managed.stop_all()
        for obj in bundles_of(client, managed.signer_name):
            delete_ctb(client, obj["metadata"]["name"])
    present = [s for s in seen if s is not None]
    assert len(present) == len(seen), "the stable bundle was absent at some point"
    assert len({uid for uid, _ in present}) == 1, "the stable bundle was re-created"
    contents = [c for _, c in present]
    order = [c for i, c in enumerate(contents) if i == 0 or c != contents[i - 1]]
    assert order == [{old}, {old, new}, {new}], order
    assert unions and all(everything == hashed for everything, hashed in unions)


def test_two_bundle_file_writes_within_one_second_converge_to_the_second(
    client: Client, publisher: RunningPublisher, ca_dir: Path, signer_name: str
) -> None:
    """A tool that writes twice, or a quick undo. The bundle of the
    first write is our own, so it goes, however close the second write came."""
    first = eventually(publisher.published, timeout=10, what="the bundle")
    bundle = ca_dir / "trust-bundle.pem"
    original = bundle.read_bytes()
    bundle.write_bytes(original + cert_pem(generate_ca("briefly added").cert))
    added = eventually(
        lambda: (
            (p := publisher.published())
            and p["metadata"]["name"] != first["metadata"]["name"]
            and p
        ),
        timeout=10,
        what="the bundle of the first write",
    )
    # The undo lands in the same second as the first write's bundle was created (written
    # with that mtime, so the test does not depend on where a second boundary falls).
    created = dt.datetime.fromisoformat(added["metadata"]["creationTimestamp"])
    _write_with_mtime(bundle, original, created.timestamp() + 0.5)
    eventually(
        lambda: (p := publisher.published()) and p["metadata"]["name"] == first["metadata"]["name"],
        timeout=10,
        what="only the bundle of the second write",
    )


def _write_with_mtime(path: Path, data: bytes, mtime: float) -> None:
    tmp = path.with_name(f".{path.name}.new")
    tmp.write_bytes(data)
    os.utime(tmp, (mtime, mtime))
    os.replace(tmp, path)


# 4. rotation with zero failed requests -----------------------------------------------


def test_ca_rotation_runbook_issues_every_request_and_keeps_both_roots_published(
    client: Client, namespace: str
) -> None:
    old_root = generate_ca("rotation old root")
    new_root = generate_ca("rotation new root")
    with RunningSigner(client, ca=old_root) as signer:
        directory = Path(signer.files.key).parent
        publisher = RunningPublisher(
            client, directory, signer.signer_name, material=signer.material
        ).start(with_material=False)
        try:
            eventually(publisher.published, timeout=10, what="the old bundle")
            pod = signer.kubelet.create_pod("web-0", namespace, labels={"app": "web"})
            signer.kubelet.create_service("web", namespace, selector={"app": "web"})
            created: list[JSON] = []
            published_roots: list[set[str]] = []

            def create_one() -> None:
                pcr, _ = signer.kubelet.create_pcr(
                    pod, annotations={"kubernetes.io/service-names": "web"}
                )
                created.append(pcr)

            def watch_published() -> None:
                for obj in bundles_of(client, signer.signer_name):
                    roots = {
                        c.subject.rfc4514_string()
                        for c in x509.load_pem_x509_certificates(
                            obj["spec"]["trustBundle"].encode()
                        )
                    }
                    published_roots.append(roots)

            with looping(create_one, watch_published):
                time.sleep(1.0)
                # Runbook step 1: add the new root to the bundle; wait for propagation.
                Path(signer.files.trust_bundle).write_bytes(cert_pem(old_root.cert, new_root.cert))
                eventually(
                    lambda: publisher.published() and len(signer.material.current().anchors) == 2,
                    timeout=10,
                    what="both roots published",
                )
                time.sleep(1.0)
                swap_at = len(created)
                # Step 2: swap key+cert to the new CA (atomically, as a Secret update does).
                swap_key_and_cert(Path(signer.files.key), Path(signer.files.cert), new_root)
                eventually(
                    lambda: signer.material.current().signing_cert == new_root.cert,
                    timeout=10,
                    what="the new CA in use",
                )
                time.sleep(1.0)
            assert len(created) > 20
            results = [wait_terminal(client, pcr, timeout=30) for pcr in created]
            assert all(condition(p)["type"] == "Issued" for p in results), [
                condition(p) for p in results if condition(p)["type"] != "Issued"
            ]
            issuers = [_issuer(p) for p in results]
            assert set(issuers[:swap_at]) <= {"CN=rotation old root"}
            assert issuers[0] == "CN=rotation old root"
            assert issuers[-1] == "CN=rotation new root"
            # Once the new CA signs, everything after signs with it.
            first_new = issuers.index("CN=rotation new root")
            assert set(issuers[first_new:]) == {"CN=rotation new root"}
            for pcr in results:
                _verify(pcr, old_root.cert if _issuer(pcr).endswith("old root") else new_root.cert)
            assert signer.counts()[1:] == (0.0, 0.0)  # no failed, no error
            both = {"CN=rotation old root", "CN=rotation new root"}
            after_step1 = [r for r in published_roots if "CN=rotation new root" in r]
            assert after_step1 and all(r == both for r in after_step1)
        finally:
            publisher.close()


def _issuer(pcr: JSON) -> str:
    leaf = x509.load_pem_x509_certificates(pcr["status"]["certificateChain"].encode())[0]
    return leaf.issuer.rfc4514_string()


def _verify(pcr: JSON, anchor: x509.Certificate) -> None:
    from cryptography.x509.verification import PolicyBuilder, Store

    certs = x509.load_pem_x509_certificates(pcr["status"]["certificateChain"].encode())
    namespace = pcr["metadata"]["namespace"]
    verifier = (
        PolicyBuilder()
        .store(Store([anchor]))
        .time(dt.datetime.now(dt.UTC))
        .build_server_verifier(x509.DNSName(f"web.{namespace}.svc"))
    )
    verifier.verify(certs[0], certs[1:])


# 5. a mismatched pair is never used ----------------------------------------------------


def test_mismatched_key_and_cert_are_never_used_and_counted_invalid(
    client: Client, namespace: str
) -> None:
    old_root, new_root = generate_ca("mismatch old"), generate_ca("mismatch new")
    with RunningSigner(client, ca=old_root) as signer:
        Path(signer.files.trust_bundle).write_bytes(cert_pem(old_root.cert, new_root.cert))
        eventually(lambda: len(signer.material.current().anchors) == 2, what="two anchors")
        pod = signer.kubelet.create_pod("web-0", namespace, labels={"app": "web"})
        signer.kubelet.create_service("web", namespace, selector={"app": "web"})
        # Only the key has landed: key of the new CA, cert of the old.
        Path(signer.files.key).write_bytes(key_pem(new_root.key))
        eventually(
            lambda: (
                signer.registry.get_sample_value(
                    "service_serving_ca_controller_material_reload_total", {"result": "invalid"}
                )
                == 1
            ),
            what="the invalid reload counted",
        )
        pcr, _ = signer.kubelet.create_pcr(pod, annotations={"kubernetes.io/service-names": "web"})
        issued = wait_terminal(client, pcr)
        assert _issuer(issued) == "CN=mismatch old"
        _verify(issued, old_root.cert)
        # The cert lands: the pair is whole again and is picked up.
        Path(signer.files.cert).write_bytes(cert_pem(new_root.cert))
        eventually(lambda: signer.material.current().signing_cert == new_root.cert, what="new pair")
        pcr, _ = signer.kubelet.create_pcr(pod, annotations={"kubernetes.io/service-names": "web"})
        issued = wait_terminal(client, pcr)
        assert _issuer(issued) == "CN=mismatch new"
        assert signer.counts()[1:] == (0.0, 0.0)


# 6. start-up failures of `service-serving-signer run` ------------------------------------


def _bad_inputs(d: Path) -> dict[str, tuple[list[str], Path, str]]:
    """name → (key, cert, bundle args, file named in the error, problem fragment)."""
    good = write_ca(d / "good")
    other = write_ca(d / "other")
    expired = write_ca(
        d / "expired",
        ca=generate_ca(
            "expired",
            not_before=dt.datetime.now(dt.UTC) - dt.timedelta(days=3),
            validity=dt.timedelta(days=1),
        ),
    )
    (d / "leaf.crt").write_bytes(_end_entity_pem())
    (d / "garbage.pem").write_text("not PEM at all\n")
    (d / "bundle-with-leaf.pem").write_bytes(good.trust_bundle.read_bytes() + _end_entity_pem())
    k, c, b = str(good.key), str(good.cert), str(good.trust_bundle)
    return {
        "missing-file": ([k, str(d / "nope.crt"), b], d / "nope.crt", "does not exist"),
        "same-path": ([k, k, b], Path(k), "different file"),
        "non-ca-cert": ([k, str(d / "leaf.crt"), b], d / "leaf.crt", "is not a CA"),
        "key-not-matching": ([str(other.key), c, b], other.key, "does not match"),
        "expired-cert": (
            [str(expired.key), str(expired.cert), str(expired.trust_bundle)],
            expired.cert,
            "expired",
        ),
        "not-chaining": ([k, c, str(other.trust_bundle)], good.cert, "does not chain"),
        "non-ca-in-bundle": (
            [k, c, str(d / "bundle-with-leaf.pem")],
            d / "bundle-with-leaf.pem",
            "is not a CA",
        ),
        "garbage-pem": ([str(d / "garbage.pem"), c, b], d / "garbage.pem", "private key"),
    }


def _end_entity_pem() -> bytes:
    from tests.unit import pki

    return cert_pem(pki.non_ca_cert())


BAD_INPUTS = [
    "missing-file",
    "same-path",
    "non-ca-cert",
    "key-not-matching",
    "expired-cert",
    "not-chaining",
    "non-ca-in-bundle",
    "garbage-pem",
]


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_run_exits_non_zero_with_one_line_naming_file_and_problem(
    tmp_path: Path, case: str
) -> None:
    (key, cert, bundle), path, fragment = _bad_inputs(tmp_path)[case]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVICE_SERVING_SIGNER_")}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli",
            "run",
            f"--service-serving-key={key}",
            f"--service-serving-cert={cert}",
            f"--service-serving-trust-bundle={bundle}",
            "--kubeconfig=/nonexistent/kubeconfig",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    # The option layer rejects `same-path` before any file is read and names the flags.
    named = str(path) in lines[0] or (case == "same-path" and "--service-serving-cert" in lines[0])
    assert named and fragment in lines[0], lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    assert "PRIVATE KEY" not in result.stderr + result.stdout

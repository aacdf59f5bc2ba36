"""GEP-5075's rules for a ClusterTrustBundle a Gateway references by name, as acceptance
rows for the stable bundle `<signer>:trust-anchors` (docs/trust-consumers.md, Gateways).

A referenced bundle that is missing is invalid until it is re-created — new connections
get 5xx in between, and an implementation must not keep using cached anchors — and one
that holds nothing validates nothing. So, against the real kube-apiserver:

1. Updated in place through every rotation (one UID; old → old+new → new): shown by
   `test_publisher.py::test_stable_bundle_goes_old_to_both_to_new_in_place_and_projects_the_same_anchors`
   (bundle-file rotation) and `::test_stable_bundle_follows_a_managed_rotation_in_place`
   (`ca rotate`, swap, retire).
2. Never deleted by the project: the real `run` process stopping (what `helm uninstall`
   and `kubectl delete -k` do to it) leaves it, with its UID and content.
3. Put back when someone deletes it.
4. An empty, unparsable or certificate-free bundle file never publishes an empty (or any
   other) stable bundle: the file is rejected and the last good anchors stay published.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.signers import OurSigner
from controlplane import ControlPlane
from kube.client import Client, is_not_found, path_segment
from kube.types import JSON
from tests.integration.publisher_harness import RunningPublisher, ctb_path
from tests.integration.signer_harness import eventually
from trust.bundle import anchor_ders, stable_bundle_name
from trust.ca import write_ca


def stable_path(client: Client, signer: str) -> str:
    return f"{ctb_path(client)}/{path_segment(stable_bundle_name(signer))}"


def stable_of(client: Client, signer: str) -> JSON | None:
    try:
        found: JSON = client.get(stable_path(client, signer))
        return found
    except Exception as err:
        if is_not_found(err):
            return None
        raise


class Watch:
    """Reads the stable bundle over and over on a thread; every observation is kept
    (None: absent)."""

    def __init__(self, client: Client, signer: str) -> None:
        self.client, self.signer = client, signer
        self.seen: list[tuple[str, frozenset[bytes]] | None] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            obj = stable_of(self.client, self.signer)
            self.seen.append(
                None
                if obj is None
                else (obj["metadata"]["uid"], anchor_ders(obj["spec"]["trustBundle"]))
            )
            self._stop.wait(0.02)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def signer_name() -> str:
    return f"g{uuid.uuid4().hex[:10]}.example.com/serving"


@pytest.fixture
def ca_dir(tmp_path: Path) -> Path:
    write_ca(tmp_path)
    return tmp_path


@pytest.fixture
def publisher(client: Client, ca_dir: Path, signer_name: str) -> Iterator[RunningPublisher]:
    """test_publisher's in-process publisher (a 2 s resync) over `ca_dir`'s files."""
    running = RunningPublisher(client, ca_dir, signer_name).start()
    try:
        yield running
    finally:
        running.close()


def published_stable(publisher: RunningPublisher) -> JSON:
    eventually(publisher.published, timeout=15, what="the bundle and the stable bundle")
    found = stable_of(publisher.client, publisher.signer)
    assert found is not None
    return found


def test_a_deleted_stable_bundle_is_put_back(
    client: Client, publisher: RunningPublisher, signer_name: str
) -> None:
    before = published_stable(publisher)

    client.delete(stable_path(client, signer_name))

    def put_back() -> JSON | None:
        found = stable_of(client, signer_name)
        return found if found and found["metadata"]["uid"] != before["metadata"]["uid"] else None

    after = eventually(put_back, timeout=15, what="the stable bundle re-created")
    assert after["spec"]["trustBundle"] == before["spec"]["trustBundle"]
    assert after["spec"]["signerName"] == signer_name


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\n  \n",
        b"not a certificate\n",
        b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n",
        b"-----BEGIN CERTIFICATE-----\nMIIB",  # cut off mid-write
    ],
    ids=["empty", "blank", "text", "not-der", "truncated"],
)
def test_an_empty_or_unparsable_bundle_file_never_empties_the_stable_bundle(
    client: Client, publisher: RunningPublisher, signer_name: str, ca_dir: Path, content: bytes
) -> None:
    before = published_stable(publisher)
    anchors = anchor_ders(before["spec"]["trustBundle"])
    syncs = publisher.registry.get_sample_value

    def publisher_syncs() -> float:
        value = syncs("controller_sync_total", {"controller": "publisher", "result": "success"})
        return float(value or 0.0)

    with Watch(client, signer_name) as watch:
        (ca_dir / "trust-bundle.pem").write_bytes(content)
        # The fact to wait for: the source rejected the file ...
        eventually(
            lambda: syncs("service_serving_ca_controller_material_invalid") == 1.0,
            timeout=15,
            what="the bundle file rejected",
        )
        # ... and the publisher has synced twice since (its 2 s resync), so a sync that
        # would have published something else has run.
        synced = publisher_syncs()
        eventually(lambda: publisher_syncs() >= synced + 2, timeout=15, what="two more syncs")

    assert watch.seen, "nothing was observed"
    assert None not in watch.seen, "the stable bundle was absent at some point"
    assert {seen for seen in watch.seen} == {(before["metadata"]["uid"], anchors)}
    assert anchors, "the stable bundle held no anchor to begin with"


def test_the_process_stopping_never_deletes_the_stable_bundle(
    control_plane: ControlPlane, client: Client, signer_name: str, tmp_path: Path
) -> None:
    """What `helm uninstall` or `kubectl delete -k` does to the signer: its Pods get
    SIGTERM. The stable bundle stays (docs/install.md, Uninstall, says how to delete it
    when you mean to)."""
    signer = OurSigner(control_plane, tmp_path, signer_name=signer_name).start()
    try:
        signer.wait_ready()
        before = eventually(
            lambda: stable_of(client, signer_name), timeout=30, what="the stable bundle"
        )
    finally:
        signer.stop()

    after = stable_of(client, signer_name)
    try:
        assert after is not None, "stopping the process deleted the stable bundle"
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        assert after["spec"]["trustBundle"] == before["spec"]["trustBundle"]
    finally:
        for obj in client.get(
            ctb_path(client), {"fieldSelector": f"spec.signerName={signer_name}"}
        )["items"]:
            client.delete(f"{ctb_path(client)}/{path_segment(obj['metadata']['name'])}")


def test_the_stable_bundle_reads_the_same_through_v1beta1(
    client: Client, publisher: RunningPublisher, signer_name: str
) -> None:
    """Envoy Gateway (through v1.9) reads ClusterTrustBundles as `v1beta1` only. With
    `--runtime-config=certificates.k8s.io/v1beta1/clustertrustbundles=true` (the test
    plane's, docs/trust-consumers.md) the one stored object is served in both versions:
    same name, UID and anchors — no mirror to keep."""
    stable = published_stable(publisher)
    name = path_segment(stable_bundle_name(signer_name))

    beta = client.get(f"/apis/certificates.k8s.io/v1beta1/clustertrustbundles/{name}")

    assert beta["apiVersion"] == "certificates.k8s.io/v1beta1"
    assert beta["metadata"]["uid"] == stable["metadata"]["uid"]
    assert beta["spec"] == stable["spec"]

"""A move from file mode with no issuance gap: the managed CA's first bootstrap adopts the
file-mode CA (the `kubernetes.io/tls` Secret the file-mode install mounts) as its
confirmed current CA when it is one published, valid root with its key — so signing goes
on at once — and otherwise makes a new root, gated like a swap, as before."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from kube.client import ApiError, Client
from managedca import adopt
from managedca import decide as d
from managedca.codec import ca_info, decode
from managedca.controller import ManagedCAController
from tests.unit.managedca.builders import CFG, NOW, ca_pems
from trust.ca import cert_pem, generate_ca, key_pem

H = timedelta(hours=1)
KEY, CERT = ca_pems("file mode")
INFO = ca_info(CERT)
FILE_CA = adopt.FileCa("Secret ns/service-serving-signer-ca", KEY, CERT, INFO)
PUBLISHED = d.Observations(published=frozenset({INFO.fingerprint}), published_cas=(INFO,))


def obs(**changes: Any) -> d.Observations:
    return d.Observations(**{**PUBLISHED.__dict__, **changes})


@pytest.mark.parametrize(
    ("file_ca", "observations", "now", "adopted", "why"),
    [
        (FILE_CA, PUBLISHED, NOW, True, "is published and valid"),
        (None, PUBLISHED, NOW, False, "no file-mode CA Secret"),
        (
            adopt.FileCa("Secret ns/x", problem="cannot read it (403 Forbidden)"),
            PUBLISHED,
            NOW,
            False,
            "cannot read it (403 Forbidden)",
        ),
        (FILE_CA, obs(published=frozenset()), NOW, False, "is not in the ClusterTrustBundle"),
        (FILE_CA, obs(revoked=frozenset({INFO.fingerprint})), NOW, False, "was revoked"),
        (FILE_CA, PUBLISHED, INFO.not_before - H, False, "not valid yet"),
        (
            FILE_CA,
            PUBLISHED,
            INFO.not_after - CFG.max_leaf_lifetime,
            False,
            "expires within the longest leaf lifetime",
        ),
        (FILE_CA, PUBLISHED, INFO.not_after - CFG.max_leaf_lifetime - H, True, "published"),
    ],
    ids=[
        "published-valid-root",
        "no-secret",
        "unreadable",
        "not-published",
        "revoked",
        "not-valid-yet",
        "expires-within-a-leaf",
        "outlives-a-leaf",
    ],
)
def test_judge(
    file_ca: adopt.FileCa | None,
    observations: d.Observations,
    now: Any,
    adopted: bool,
    why: str,
) -> None:
    verdict = adopt.judge(file_ca, observations, now, CFG)
    assert verdict.adopt is adopted
    assert why in verdict.why


def test_only_one_self_signed_root_with_its_key_is_adoptable() -> None:
    assert adopt.parse_file_ca("s", KEY, CERT, NOW).info == INFO
    other_key, _ = ca_pems("another")
    assert "does not match" in (adopt.parse_file_ca("s", other_key, CERT, NOW).problem or "")
    root = generate_ca("root", validity=timedelta(days=100), not_before=NOW - H)
    inter = generate_ca("inter", parent=root, validity=timedelta(days=50), not_before=NOW - H)
    chain = cert_pem(inter.cert, root.cert)
    assert "chain" in (adopt.parse_file_ca("s", key_pem(inter.key), chain, NOW).problem or "")
    alone = cert_pem(inter.cert)
    problem = adopt.parse_file_ca("s", key_pem(inter.key), alone, NOW).problem or ""
    assert problem, "an intermediate on its own is no root"


class FileModeCluster:
    """No managed CA Secret yet; the file-mode Secret and its published bundle (what a
    file-mode install leaves for `config/managed`)."""

    def __init__(
        self, *, file_secret: bool = True, file_secret_name: str = "service-serving-signer-ca"
    ) -> None:
        self.file_secret = file_secret
        self.file_secret_name = file_secret_name
        self.created: list[Mapping[str, Any]] = []

    def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        if path.endswith(f"/secrets/{self.file_secret_name}") and self.file_secret:
            return {
                "type": "kubernetes.io/tls",
                "data": {
                    "tls.key": base64.b64encode(KEY).decode(),
                    "tls.crt": base64.b64encode(CERT).decode(),
                },
            }
        if "/secrets/" in path:
            raise ApiError(404, "NotFound", {"message": "not found"})
        if "clustertrustbundles" in path:
            return {"items": [{"metadata": {"name": "b"}, "spec": {"trustBundle": CERT.decode()}}]}
        return {"items": []}

    def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.created.append(body)
        return {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}


def controller(
    cluster: FileModeCluster, adopt_name: str = "service-serving-signer-ca"
) -> ManagedCAController:
    client = cast(Client, cluster)
    return ManagedCAController(
        client,
        namespace="ns",
        secret_name="ca",
        signer_name="example.com/x",
        ctb_version="v1",
        config=CFG,
        make_ca=lambda now: ca_pems("a new root"),
        clock=lambda: NOW,
        registry=CollectorRegistry(),
        monotonic=time.monotonic,
        file_ca=lambda: adopt.read_file_ca(client, "ns", adopt_name, now=NOW),
    )


def test_the_first_bootstrap_adopts_the_file_mode_ca_confirmed_so_it_signs_at_once() -> None:
    cluster = FileModeCluster()
    action = controller(cluster).sync_once()
    assert isinstance(action, d.Bootstrap)
    (secret,) = cluster.created
    stored = decode(secret)
    assert stored.state.current == INFO
    assert stored.state.confirmed_at == NOW, "confirmed: the material source signs with it"
    assert stored.current_key == KEY
    assert stored.state.previous == ()


def test_without_a_file_mode_secret_the_bootstrap_makes_a_new_root_gated_like_a_swap() -> None:
    cluster = FileModeCluster(file_secret=False)
    controller(cluster).sync_once()
    (secret,) = cluster.created
    stored = decode(secret)
    assert stored.state.current != INFO
    assert stored.state.confirmed_at is None
    assert [p.ca for p in stored.state.previous] == [INFO]


def test_the_bootstrap_adopts_from_the_secret_it_is_told_to_and_no_other() -> None:
    """`--managed-ca-adopt-secret-name`: a file-mode install whose CA Secret has another
    name is adopted from that name; told the default, the bootstrap finds no file-mode CA
    there and makes a new root, gated."""
    told = FileModeCluster(file_secret_name="platform-ca")
    controller(told, adopt_name="platform-ca").sync_once()
    assert decode(told.created[0]).state.current == INFO

    default = FileModeCluster(file_secret_name="platform-ca")
    controller(default).sync_once()
    stored = decode(default.created[0])
    assert stored.state.current != INFO
    assert stored.state.confirmed_at is None


def test_a_replica_that_does_not_lead_adopts_the_file_mode_ca_so_a_rollout_goes_on() -> None:
    """During a rollout from file mode the file-mode leader holds the Lease: a new managed
    replica creates the Secret with the file-mode CA itself, and loads it."""
    cluster = FileModeCluster()
    loaded: list[Mapping[str, Any]] = []
    assert adopt.adopt_once(controller(cluster), loaded.append)
    (secret,) = cluster.created
    assert loaded and decode(loaded[0]).state.confirmed_at == NOW
    assert decode(secret).state.current == INFO


def test_a_replica_that_does_not_lead_never_makes_a_root_nor_touches_an_existing_secret() -> None:
    none = FileModeCluster(file_secret=False)
    assert not adopt.adopt_once(controller(none), lambda _s: None)
    assert none.created == []

    class AlreadyManaged(FileModeCluster):
        def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
            if path.endswith("/secrets/ca"):
                return {"metadata": {"name": "ca"}, "data": {}}
            return super().get(path, params)

    managed = AlreadyManaged()
    assert not adopt.adopt_once(controller(managed), lambda _s: None)
    assert managed.created == []


def test_of_replicas_racing_to_adopt_the_loser_loads_the_winners_secret() -> None:
    class Raced(FileModeCluster):
        def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
            raise ApiError(409, "AlreadyExists", {"message": "exists"})

    assert not adopt.adopt_once(controller(Raced()), lambda _s: pytest.fail("loaded"))


def test_a_file_mode_secret_not_readable_yet_is_looked_at_again() -> None:
    """The Role granting the read may land a moment after the Deployment (one apply):
    the replica tries again instead of leaving the move to a new root."""

    class RoleNotYet(FileModeCluster):
        refused = 1

        def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
            if path.endswith("/secrets/service-serving-signer-ca") and self.refused:
                self.refused -= 1
                raise ApiError(403, "Forbidden", {"message": "forbidden"})
            return super().get(path, params)

    cluster = RoleNotYet()
    loaded: list[Mapping[str, Any]] = []
    adopt.before_leading(controller(cluster), loaded.append, threading.Event(), retry=0.01)
    assert len(cluster.created) == 1 and loaded

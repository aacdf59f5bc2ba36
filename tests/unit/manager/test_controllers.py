"""The manager's table of controllers: every known controller has a row, `--controllers`
and `--ca-mode` pick the rows, and the one build context discovers each API version once
and makes one Event recorder."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from kube.client import ApiError, Client
from kube.factory import InformerFactory
from manager.controllers import DESCRIPTORS, BuildContext, StartupFailure
from manager.options import DEFAULT_CONTROLLERS, KNOWN_CONTROLLERS, Options

BASE = Options("/ca/tls.key", "/ca/tls.crt", "/ca/trust-bundle.pem")


def enabled(opts: Options) -> list[str]:
    return [d.name for d in DESCRIPTORS if d.enabled(opts)]


def test_every_known_controller_is_one_row_enabled_by_its_name() -> None:
    for name in KNOWN_CONTROLLERS:
        assert enabled(dataclasses.replace(BASE, controllers=frozenset({name}))) == [name]


def test_every_row_but_the_managed_ca_is_a_known_controller() -> None:
    """A row added without its name in KNOWN_CONTROLLERS could never be enabled."""
    rows = {d.name for d in DESCRIPTORS} - {"managed-ca"}
    assert rows == set(KNOWN_CONTROLLERS)


def test_the_default_set_enables_the_default_rows_in_table_order() -> None:
    assert enabled(BASE) == [d.name for d in DESCRIPTORS if d.name in DEFAULT_CONTROLLERS]


@pytest.mark.parametrize(
    ("controllers", "rows"),
    [
        ({"signer", "publisher"}, ["publisher", "signer", "managed-ca"]),
        ({"publisher"}, ["publisher", "managed-ca"]),
        ({"injector"}, ["injector"]),  # no signing material: no CA to manage
    ],
)
def test_the_managed_ca_row_runs_beside_a_signing_controller(
    controllers: set[str], rows: list[str]
) -> None:
    managed = Options("", "", "", controllers=frozenset(controllers), ca_mode="managed")
    assert enabled(managed) == rows


class DiscoveryClient:
    """Answers discovery for certificates.k8s.io/v1 (`served`: clustertrustbundles) and
    counts the requests."""

    def __init__(self, served: tuple[str, ...] = ("clustertrustbundles",)) -> None:
        self.gets: list[str] = []
        self.served = served

    def get(self, path: str, params: Any = None) -> Any:
        self.gets.append(path)
        if path == "/apis/certificates.k8s.io/v1":
            return {"resources": [{"name": name} for name in self.served]}
        raise ApiError(404, "Not Found", {"reason": "NotFound"})


def context(client: DiscoveryClient | None = None) -> tuple[BuildContext, DiscoveryClient]:
    client = client or DiscoveryClient()
    fake = cast(Client, client)
    ctx = BuildContext(
        opts=BASE,
        client=fake,
        registry=CollectorRegistry(),
        informers=InformerFactory(fake),
        identity="me",
    )
    return ctx, client


def test_each_api_version_is_discovered_once_per_process() -> None:
    ctx, client = context()
    assert ctx.ctb_version("the publisher") == "v1"
    assert ctx.ctb_version("the injector") == "v1"
    assert ctx.version("podcertificaterequests", ["v1", "v1beta1"]) is None
    assert ctx.version("podcertificaterequests", ["v1", "v1beta1"]) is None
    assert client.gets == [
        "/apis/certificates.k8s.io/v1",
        "/apis/certificates.k8s.io/v1",  # another resource: its own question
        "/apis/certificates.k8s.io/v1beta1",
    ]


def test_a_missing_api_is_one_line_naming_who_needs_it() -> None:
    ctx, _ = context(DiscoveryClient(served=()))
    with pytest.raises(StartupFailure, match=r"serves no clustertrustbundles \(the injector\)"):
        ctx.ctb_version("the injector")


def test_one_event_recorder_for_the_process_stopped_first() -> None:
    ctx, _ = context()
    ctx.closers.append(lambda: None)
    first = ctx.recorder()
    try:
        assert ctx.recorder() is first
        assert ctx.closers[0] == first.stop
    finally:
        first.stop()


@pytest.mark.parametrize(
    ("controllers", "flag", "expected"),
    [
        ({"signer", "publisher", "injector"}, "auto", "true"),
        ({"signer", "publisher"}, "auto", "auto"),
        ({"signer", "publisher", "injector"}, "false", "false"),
    ],
)
def test_an_injector_in_the_same_process_engages_the_gate(
    controllers: set[str], flag: str, expected: str
) -> None:
    """`--controllers=*,injector --ca-mode=managed` (docs/inject.md): the managed CA knows
    an injector runs, so a missing report is a visible wait, never a skipped gate."""
    from manager.controllers import managed_ca_settings

    opts = dataclasses.replace(
        BASE, controllers=frozenset(controllers), managed_ca_wait_for_injector=flag
    )
    assert managed_ca_settings(opts).config.wait_for_injector == expected


class RefusingClient(DiscoveryClient):
    """Discovery that answers `refusals` 429s (Retry-After 2 s) before it answers."""

    def __init__(self, refusals: int) -> None:
        super().__init__()
        self.refusals = refusals

    def get(self, path: str, params: Any = None) -> Any:
        if self.refusals > 0:
            self.refusals -= 1
            self.gets.append(path)
            raise ApiError(429, "Too Many Requests", {"reason": "TooManyRequests"}, 2.0)
        return super().get(path, params)


def test_discovery_refused_by_a_saturated_level_is_asked_again_after_retry_after() -> None:
    """API Priority and Fairness rejecting the signer's level at start-up (429) delays
    the start instead of ending the process; what cannot be asked for a minute can."""
    ctx, client = context(RefusingClient(refusals=3))
    slept: list[float] = []
    ctx.sleep = slept.append
    assert ctx.ctb_version("the publisher") == "v1"
    assert slept == [2.0, 2.0, 2.0]

    ctx, client = context(RefusingClient(refusals=100))
    ctx.sleep = lambda _: None
    with pytest.raises(ApiError):
        ctx.ctb_version("the publisher")
    assert len(client.gets) == 31  # 30 waits of 2 s fill the minute, then it gives up


@pytest.mark.parametrize("name", ["service-serving-signer-ca", "platform-ca", ""])
def test_the_managed_ca_adopts_from_the_secret_its_flag_names(name: str) -> None:
    """`--managed-ca-adopt-secret-name` reaches the managed CA: it adopts from that Secret,
    and from none when it is empty."""
    from managedca.material import ApiMaterialSource
    from managedca.wiring import wire
    from manager.controllers import managed_ca_settings
    from tests.unit.fakes import FakeRecorder

    opts = Options("", "", "", ca_mode="managed", managed_ca_adopt_secret_name=name)
    settings = managed_ca_settings(opts)
    assert settings.adopt_secret_name == name
    gets: list[str] = []

    class Recording(DiscoveryClient):
        def get(self, path: str, params: Any = None) -> Any:
            gets.append(path)
            raise ApiError(404, "Not Found", {"reason": "NotFound"})

    client = cast(Client, Recording())
    source = ApiMaterialSource(client, "ns", settings.secret_name)
    recorder = FakeRecorder()
    controller, _ = wire(settings, client, CollectorRegistry(), "me", source, "v1", recorder)
    if not name:
        assert controller.file_ca is None
        return
    assert controller.file_ca is not None
    assert controller.file_ca() is None, "no such Secret: nothing to adopt"
    assert gets == [f"/api/v1/namespaces/{opts.leader_elect_resource_namespace}/secrets/{name}"]

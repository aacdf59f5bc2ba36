"""The process's wiring of `--ca-mode=managed` (docs/managed-ca.md), given settings the
manager derives from its flags (`manager.controllers.managed_ca_settings`).

What it decides:

- The material comes from `managedca.material.ApiMaterialSource` (the CA Secret, watched
  in the leader-election namespace) instead of files; SIGHUP re-reads the Secret.
- Every replica, leader or not, reports what it has loaded (`managedca.report`), so the
  leader can gate a swap on it.
- The managed-CA controller runs on the leader beside the signer and the publisher. The
  publisher's workers start once the source has a bundle and the signer's once it has a
  confirmed CA (the material gates, `manager.controllers.BuildContext.material_gates`,
  which `material_gates` below gives): right after a bootstrap there is nothing to publish or
  sign with yet, and a sync failing on that would only back off and log errors.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from prometheus_client import CollectorRegistry

from kube.client import Client, path_segment
from kube.events import StepRecorder
from managedca import adopt, revocations
from managedca.controller import ManagedCAController
from managedca.decide import Config
from managedca.material import ApiMaterialSource
from managedca.report import LoadedReporter
from trust.material import LeafIssuer


@dataclass(frozen=True)
class Settings:
    """What the managed CA needs of the process's flags."""

    namespace: str
    secret_name: str
    adopt_secret_name: str  # the file-mode CA Secret a first bootstrap adopts; "": none
    signer_name: str
    key_type: str
    domain: str
    config: Config
    injector_report: str | None = None  # the injector's convergence Lease
    # The unlinked ClusterTrustBundle, when the publisher publishes it (--publish-unlinked-
    # bundle): the propagation delay runs only while it holds the new roots too.
    unlinked_bundle: str | None = None


def make_ca_of(settings: Settings) -> Callable[[datetime], tuple[bytes, bytes]]:
    """A new root for the managed CA with a subject of its own (`trust.ca`'s unique name:
    old and new are told apart by name as well during a rotation), `pathLenConstraint:
    0`: a leaf it signs cannot sign."""
    from trust.ca import cert_pem, generate_ca, key_pem, unique_common_name

    def make(now: datetime) -> tuple[bytes, bytes]:
        ca = generate_ca(
            unique_common_name("managed root"),
            key_type=settings.key_type,
            not_before=now - timedelta(minutes=5),
            validity=settings.config.ca_lifetime,
            path_length=0,  # it signs leaves only: no CA can be made under it
        )
        return key_pem(ca.key), cert_pem(ca.cert)

    return make


def material_gates(source: ApiMaterialSource) -> dict[str, Callable[[threading.Event], bool]]:
    """What the publisher ("bundle") and the signer ("signing") wait for before their
    workers start."""
    return {"bundle": source.wait_for_bundle, "signing": source.wait_for_signing_set}


def material_source(
    settings: Settings, client: Client, registry: CollectorRegistry, issuer: LeafIssuer | None
) -> ApiMaterialSource:
    """The CA Secret as signing material; `issuer` (the signer's probe) when this process
    signs, None when it only publishes."""
    return ApiMaterialSource(
        client,
        settings.namespace,
        settings.secret_name,
        registry,
        signing=issuer is not None,
        issuer=issuer,
        domain=settings.domain,
        lead_time=settings.config.max_leaf_lifetime,
    )


def wire(
    settings: Settings,
    client: Client,
    registry: CollectorRegistry,
    identity: str,
    source: ApiMaterialSource,
    ctb_version: str,
    recorder: StepRecorder,
) -> tuple[ManagedCAController, LoadedReporter]:
    """The managed-CA controller and this replica's reporter, listening to `source`. The
    publisher's and the signer's workers are held back until `source` serves them
    (`manager.controllers.BuildContext.material_gates`)."""
    controller = ManagedCAController(
        client,
        namespace=settings.namespace,
        secret_name=settings.secret_name,
        signer_name=settings.signer_name,
        ctb_version=ctb_version,
        config=settings.config,
        make_ca=make_ca_of(settings),
        recorder=recorder,
        registry=registry,
        on_written=source.apply,
        injector_report=settings.injector_report,
        revoked=source.revoked,
        file_ca=(
            (lambda: adopt.read_file_ca(client, settings.namespace, settings.adopt_secret_name))
            if settings.adopt_secret_name
            else None
        ),
        unlinked_bundle=settings.unlinked_bundle,
    )
    reporter = LoadedReporter(
        client,
        settings.namespace,
        settings.secret_name,
        identity,
        source.loaded,
        max_lifetime=settings.config.max_leaf_lifetime,
    )
    source.add_change_listener(reporter.trigger)
    observer = controller.observer
    stable = f"{observer.ctb_path}/{path_segment(observer.stable_name)}"
    source.remember_revoked_from(lambda: revocations.read_stable(client, stable))
    controller.narrator.on_decision = reporter.set_decision
    # Any change of the Secret (`ca rotate`'s annotation, a write by another replica) is
    # looked at now, not at the next resync.
    source.informer.add_handler(controller.trigger, controller.trigger, controller.trigger)
    return controller, reporter


def adopter(
    controller: ManagedCAController, source: ApiMaterialSource
) -> Callable[[threading.Event], None]:
    """A warmer for every replica: before it leads, adopt the file-mode CA when no managed
    CA exists yet (`managedca.adopt.before_leading`), so a rollout from file mode goes on."""

    def run(stop: threading.Event) -> None:
        adopt.before_leading(controller, source.apply, stop)

    return run

"""The process's wiring of `--ca-mode=managed` (docs/managed-ca.md).

What it decides:

- The material comes from `trust.managed.ApiMaterialSource` (the CA Secret, watched in the
  leader-election namespace) instead of files; SIGHUP re-reads the Secret.
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
from datetime import datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from managedca.controller import ManagedCAController
from managedca.decide import Config
from managedca.report import LoadedReporter
from manager.options import Options
from trust.managed import ApiMaterialSource


def config_of(opts: Options) -> Config:
    return Config(
        ca_lifetime=timedelta(seconds=opts.managed_ca_lifetime),
        rotate_at=opts.managed_ca_rotate_at,
        propagation_delay=timedelta(seconds=opts.managed_ca_propagation_delay),
        max_leaf_lifetime=timedelta(seconds=opts.max_certificate_lifetime),
        retire_margin=timedelta(seconds=opts.managed_ca_retire_margin),
        keep_previous=opts.managed_ca_keep_previous,
    )


def make_ca_of(opts: Options) -> Callable[[datetime], tuple[bytes, bytes]]:
    """A new root for the managed CA with a subject of its own (`trust.ca`'s unique name:
    old and new are told apart by name as well during a rotation)."""
    from trust.ca import cert_pem, generate_ca, key_pem, unique_common_name

    def make(now: datetime) -> tuple[bytes, bytes]:
        ca = generate_ca(
            unique_common_name("managed root"),
            key_type=opts.managed_ca_key_type,  # type: ignore[arg-type]
            not_before=now - timedelta(minutes=5),
            validity=timedelta(seconds=opts.managed_ca_lifetime),
        )
        return key_pem(ca.key), cert_pem(ca.cert)

    return make


def material_gates(source: ApiMaterialSource) -> dict[str, Callable[[threading.Event], bool]]:
    """What the publisher ("bundle") and the signer ("signing") wait for before their
    workers start."""
    return {"bundle": source.wait_for_bundle, "signing": source.wait_for_signing_set}


def material_source(
    opts: Options, client: Any, registry: CollectorRegistry, signing: bool
) -> ApiMaterialSource:
    issuer = None
    if signing:
        from signer.authority import issue_probe

        issuer = issue_probe
    return ApiMaterialSource(
        client,
        opts.leader_elect_resource_namespace,
        opts.managed_ca_secret_name,
        registry,
        signing=signing,
        issuer=issuer,
        domain=opts.cluster_service_domain,
    )


def wire(
    opts: Options,
    client: Any,
    registry: CollectorRegistry,
    identity: str,
    source: ApiMaterialSource,
    ctb_version: str,
    recorder: Any,
) -> tuple[ManagedCAController, LoadedReporter]:
    """The managed-CA controller and this replica's reporter, listening to `source`. The
    publisher's and the signer's workers are held back until `source` serves them
    (`manager.controllers.BuildContext.material_gates`)."""
    controller = ManagedCAController(
        client,
        namespace=opts.leader_elect_resource_namespace,
        secret_name=opts.managed_ca_secret_name,
        signer_name=opts.signer_name,
        ctb_version=ctb_version,
        config=config_of(opts),
        make_ca=make_ca_of(opts),
        recorder=recorder,
        registry=registry,
        on_written=source.apply,
    )
    reporter = LoadedReporter(
        client,
        opts.leader_elect_resource_namespace,
        opts.managed_ca_secret_name,
        identity,
        source.loaded,
    )
    source.add_bundle_listener(reporter.trigger)
    source.add_listener(reporter.trigger)
    # Any change of the Secret (`ca rotate`'s annotation, a write by another replica) is
    # looked at now, not at the next resync.
    source.informer.add_handler(controller.trigger, controller.trigger, controller.trigger)
    return controller, reporter

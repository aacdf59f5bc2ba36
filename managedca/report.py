"""Each replica's report of the managed CA material it has loaded: a Lease of its own
in the signer's namespace, read by the leader before a swap.

Why a Lease: the leader must read what every running replica holds, and a metric on
another Pod cannot be read without scraping it; a Pod annotation needs `patch` on Pods
and the Pod's name. A Lease is the API's own "I am alive, and here is my state" object:
`renewTime` + `leaseDurationSeconds` tell the leader whether the report is live (a
replica that died stops renewing, and after `duration` its report no longer holds a
swap back), and annotations carry what it has loaded:
`service-serving-signer/loaded-anchors` (the sha256 fingerprints of the trust bundle's
anchors, comma-separated) and `service-serving-signer/signing-ca` (the signing CA's).

The Lease is named after the CA Secret and a hash of the replica's identity (unique per
process), labelled `service-serving-signer/managed-ca-report=<secret name>`; it is
renewed every `period` and at once after the material changes, and deleted on a clean
stop. The leader deletes reports expired for over an hour (a replica killed without a
clean stop).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from kube.client import ApiError, Client, is_conflict, is_not_found, path_segment
from kube.times import micro_time
from managedca.decide import Report
from managedca.material import ANNOTATION_PREFIX

log = logging.getLogger(__name__)

REPORT_LABEL = ANNOTATION_PREFIX + "managed-ca-report"
LOADED_ANCHORS = ANNOTATION_PREFIX + "loaded-anchors"
SIGNING_CA = ANNOTATION_PREFIX + "signing-ca"
DEFAULT_PERIOD = 10.0
DEFAULT_DURATION = 30


def leases_path(namespace: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{path_segment(namespace)}/leases"


def report_name(secret_name: str, identity: str) -> str:
    return f"{secret_name}-replica-{hashlib.sha256(identity.encode()).hexdigest()[:12]}"


def _parsemicro_time(text: str) -> datetime:
    return datetime.strptime(text.replace("Z", ""), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=UTC)


def parse_report(lease: Mapping[str, Any]) -> Report | None:
    spec = lease.get("spec") or {}
    meta = lease.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    try:
        renewed = _parsemicro_time(spec["renewTime"])
        duration = timedelta(seconds=int(spec["leaseDurationSeconds"]))
    except (KeyError, ValueError, TypeError):
        return None
    anchors = frozenset(a for a in annotations.get(LOADED_ANCHORS, "").split(",") if a)
    return Report(spec.get("holderIdentity") or meta.get("name", "?"), anchors, renewed, duration)


def list_reports(client: Client, namespace: str, secret_name: str) -> list[Mapping[str, Any]]:
    listed = client.get(leases_path(namespace), {"labelSelector": f"{REPORT_LABEL}={secret_name}"})
    return list(listed.get("items") or [])


class LoadedReporter:
    """Keeps this replica's report Lease current. `loaded()` returns (anchor fingerprints,
    signing CA fingerprint or None), e.g. `managedca.material.ApiMaterialSource.loaded`."""

    def __init__(
        self,
        client: Client,
        namespace: str,
        secret_name: str,
        identity: str,
        loaded: Callable[[], tuple[list[str], str | None]],
        *,
        period: float = DEFAULT_PERIOD,
        duration: int = DEFAULT_DURATION,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.secret_name = secret_name
        self.identity = identity
        self.name = report_name(secret_name, identity)
        self.path = f"{leases_path(namespace)}/{self.name}"
        self.period = period
        self.duration = duration
        self._loaded = loaded
        self._clock = clock
        self._wake = threading.Event()

    def trigger(self, *_: object) -> None:
        """Report now (the material changed)."""
        self._wake.set()

    def run(self, stop: threading.Event) -> None:
        """Report every `period` and on `trigger()` until `stop`; then delete the report."""
        while not stop.is_set():
            self._wake.clear()
            try:
                self.report()
            except ApiError as err:
                log.warning("managed CA: reporting loaded material failed", extra={"err": str(err)})
            deadline = time.monotonic() + self.period
            while not (stop.is_set() or self._wake.is_set()) and time.monotonic() < deadline:
                self._wake.wait(0.2)
        with contextlib.suppress(ApiError):  # else it expires; the leader collects it
            self.client.delete(self.path)

    def report(self) -> None:
        anchors, signing = self._loaded()
        now = self._clock()
        annotations = {LOADED_ANCHORS: ",".join(anchors), SIGNING_CA: signing or ""}
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.duration,
            "renewTime": micro_time(now),
        }
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {REPORT_LABEL: self.secret_name},
                "annotations": annotations,
            },
            "spec": spec,
        }
        try:
            current = self.client.get(self.path)
        except ApiError as err:
            if not is_not_found(err):
                raise
            self.client.create(leases_path(self.namespace), body)
        else:
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            try:
                self.client.replace(self.path, body)
            except ApiError as err:
                if not is_conflict(err):
                    raise
                return  # someone else wrote it (never expected); the next period retries

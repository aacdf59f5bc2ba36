"""The publisher for the integration tests: ClusterTrustBundle paths and objects on the
real API server, a running `PublisherController` fed by files, and a CA swap on disk as
`kubectl` or a Secret volume makes it (the key and certificate each replaced whole)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from kube.client import Client, is_not_found, path_segment
from kube.factory import InformerFactory
from kube.types import JSON
from publisher.controller import PublisherController, informers
from trust.bundle import bundle_name, stable_bundle_name
from trust.ca import cert_pem, key_pem
from trust.files import FileMaterialSource


def ctb_version(client: Client) -> str:
    for version in ("v1", "v1beta1"):
        try:
            resources = client.get(f"/apis/certificates.k8s.io/{version}")["resources"]
        except Exception:
            continue
        if any(r["name"] == "clustertrustbundles" for r in resources):
            return version
    raise AssertionError("the control plane serves no ClusterTrustBundle API")


def ctb_path(client: Client) -> str:
    return f"/apis/certificates.k8s.io/{ctb_version(client)}/clustertrustbundles"


def bundles_of(client: Client, signer: str) -> list[JSON]:
    listed = client.get(ctb_path(client), {"fieldSelector": f"spec.signerName={signer}"})
    return list(listed["items"])


def create_ctb(client: Client, name: str, signer: str, bundle: str) -> JSON:
    version = ctb_version(client)
    result: JSON = client.create(
        ctb_path(client),
        {
            "apiVersion": f"certificates.k8s.io/{version}",
            "kind": "ClusterTrustBundle",
            "metadata": {"name": name},
            "spec": {"signerName": signer, "trustBundle": bundle},
        },
    )
    return result


def delete_ctb(client: Client, name: str) -> None:
    try:
        client.delete(f"{ctb_path(client)}/{path_segment(name)}")
    except Exception as err:
        if not is_not_found(err):
            raise


class RunningPublisher:
    """A PublisherController fed by a FileMaterialSource over files in `directory`."""

    def __init__(
        self,
        client: Client,
        directory: Path,
        signer: str,
        material: FileMaterialSource | None = None,
        *,
        publish_unlinked: bool = False,
    ) -> None:
        self.client = client
        self.signer = signer
        self.registry = CollectorRegistry()
        self.material = material or FileMaterialSource(
            directory / "ca.key",
            directory / "ca.crt",
            directory / "trust-bundle.pem",
            self.registry,
            0.1,
        )
        self.informers = InformerFactory(client)
        self.controller = PublisherController(
            client,
            informers(self.informers, signer_name=signer, ctb_version=ctb_version(client)),
            self.material.trust_bundle,
            signer_name=signer,
            ctb_version=ctb_version(client),
            registry=self.registry,
            resync_period=2.0,
            publish_unlinked=publish_unlinked,
        )
        self.material.add_bundle_listener(self.controller.trigger)
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self, *, with_material: bool = True) -> RunningPublisher:
        targets = [self.controller.run] + ([self.material.run] if with_material else [])
        self.threads.extend(self.informers.start(self.stop))
        for target in targets:
            thread = threading.Thread(target=target, args=(self.stop,), daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(10)
        for obj in bundles_of(self.client, self.signer):
            delete_ctb(self.client, obj["metadata"]["name"])

    def published(self) -> JSON | None:
        """The one hash-named bundle of our signer with the expected name and content, when
        the stable bundle holds the same content too; else None."""
        bundle = self.material.trust_bundle().pem
        objs = {o["metadata"]["name"]: o for o in bundles_of(self.client, self.signer)}
        stable = objs.pop(stable_bundle_name(self.signer), None)
        name = bundle_name(self.signer, bundle)
        if list(objs) != [name] or stable is None:
            return None
        if stable["spec"]["trustBundle"] != bundle:
            return None
        return objs[name] if objs[name]["spec"]["trustBundle"] == bundle else None


def swap_key_and_cert(key_path: Path, cert_path: Path, ca: Any) -> None:
    for path, data in ((cert_path, cert_pem(ca.cert)), (key_path, key_pem(ca.key))):
        tmp = path.with_name(f".{path.name}.new")
        tmp.write_bytes(data)
        os.replace(tmp, path)

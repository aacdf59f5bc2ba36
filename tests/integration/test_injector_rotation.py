"""CA rotation end to end through an injected webhook.

While a loop keeps creating ConfigMaps through the injected validating webhook,
walk the README's runbook: (1) add the new root to the trust bundle; (2) swap the signing
key and cert; the webhook's certificate is re-issued from the new CA (kubelet would do it
at beginRefreshAt; here a new PCR); (3) drop the old root. kube-apiserver, the TLS client,
must never fail an admission call, and the injected caBundle must hold both roots for as
long as either certificate can be served.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from cryptography import x509

from kube.client import Client
from tests.integration.injector_harness import (
    VWC_PATH,
    Issuer,
    RunningInjector,
    b64,
    ca_bundles,
    config_map,
    delete_quietly,
    serve,
    validating_webhook,
)
from tests.integration.publisher_harness import swap_key_and_cert
from tests.integration.signer_harness import eventually
from trust.bundle import stable_bundle_name
from trust.ca import cert_pem, generate_ca

OLD = "CN=injector rotation old root"
NEW = "CN=injector rotation new root"


def roots_of(ca_bundle_b64: str) -> frozenset[str]:
    import base64

    if not ca_bundle_b64:
        return frozenset()
    pem = base64.b64decode(ca_bundle_b64)
    return frozenset(c.subject.rfc4514_string() for c in x509.load_pem_x509_certificates(pem))


@pytest.fixture
def vwc_name(client: Client) -> Iterator[str]:
    name = f"rotation-{uuid.uuid4().hex[:8]}"
    yield name
    delete_quietly(client, VWC_PATH, name)


@pytest.mark.parametrize("by", ["signer-name", "stable-name"])
def test_rotation_runbook_with_zero_failed_admission_calls(
    client: Client, namespace: str, vwc_name: str, by: str
) -> None:
    """`stable-name`: `{"name": "<signer prefix>:trust-anchors"}` follows the
    rotation exactly as the signerName selection does — the bundle is updated in place."""
    old_root = generate_ca(OLD.removeprefix("CN="))
    new_root = generate_ca(NEW.removeprefix("CN="))
    with Issuer(client, ca=old_root) as issuer, RunningInjector(client):
        server = serve(issuer, namespace, "hook")
        selector = (
            issuer.selector()
            if by == "signer-name"
            else json.dumps({"name": stable_bundle_name(issuer.signer_name)})
        )
        try:
            client.create(VWC_PATH, validating_webhook(vwc_name, namespace, "hook", selector))

            def injected_roots() -> frozenset[str]:
                return roots_of(ca_bundles(client.get(f"{VWC_PATH}/{vwc_name}"))[0])

            eventually(lambda: injected_roots() == {OLD}, timeout=30, what="the old root")
            counter = iter(range(1_000_000))
            eventually(
                lambda: (
                    config_map(client, namespace, f"warm-{next(counter)}", reject=False) is None
                ),
                timeout=30,
                interval=0.2,
                what="the webhook admitting creates",
            )

            failures: list[str] = []
            admitted = [0]
            seen: list[frozenset[str]] = []
            stop = threading.Event()

            def create_continuously() -> None:
                while not stop.is_set():
                    error = config_map(client, namespace, f"cm-{next(counter)}", reject=False)
                    if error is None:
                        admitted[0] += 1
                    else:
                        failures.append(error)
                    time.sleep(0.02)

            def watch_injected() -> None:
                while not stop.is_set():
                    seen.append(injected_roots())
                    time.sleep(0.05)

            threads = [
                threading.Thread(target=create_continuously, daemon=True),
                threading.Thread(target=watch_injected, daemon=True),
            ]
            for thread in threads:
                thread.start()

            def admitted_more(count: int) -> None:
                target = admitted[0] + count
                eventually(lambda: admitted[0] >= target, timeout=30, what=f"{count} more calls")

            try:
                admitted_more(10)
                # (1) Add the new root; wait until the injected caBundle holds both and
                # kube-apiserver has made calls since.
                bundle_file = issuer.signer.bundle_path()
                bundle_file.write_bytes(cert_pem(old_root.cert, new_root.cert))
                eventually(lambda: injected_roots() == {OLD, NEW}, timeout=30, what="both roots")
                admitted_more(20)
                overlap_started = len(seen)

                # (2) Swap key and cert to the new CA; re-issue the webhook's certificate
                # from it and serve it.
                swap_key_and_cert(issuer.signer.files.key, issuer.signer.files.cert, new_root)
                eventually(
                    lambda: issuer.signer.material.current().signing_cert == new_root.cert,
                    timeout=30,
                    what="the new CA signing",
                )
                chain, key = issuer.serving_certificate(namespace, "hook")
                leaf = x509.load_pem_x509_certificates(chain)[0]
                assert leaf.issuer.rfc4514_string() == NEW
                server.use_certificate(chain, key)
                admitted_more(20)

                # (3) Drop the old root (after the old certificate is no longer served).
                overlap_ended = len(seen)
                bundle_file.write_bytes(cert_pem(new_root.cert))
                eventually(lambda: injected_roots() == {NEW}, timeout=30, what="new root only")
                admitted_more(20)
            finally:
                stop.set()
                for thread in threads:
                    thread.join(30)

            assert failures == [], failures[:3]
            assert admitted[0] >= 70
            assert b64(issuer.bundle()) == ca_bundles(client.get(f"{VWC_PATH}/{vwc_name}"))[0]
            # The caBundle went old → old+new → new, never straight to new-only, and held
            # both roots through steps 2 and the certificate swap.
            order = [s for i, s in enumerate(seen) if i == 0 or s != seen[i - 1]]
            assert order == [frozenset({OLD}), frozenset({OLD, NEW}), frozenset({NEW})], order
            assert overlap_ended > overlap_started
            assert all(s == {OLD, NEW} for s in seen[overlap_started:overlap_ended])
        finally:
            server.close()

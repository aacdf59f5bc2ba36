"""The `keytypes` scenario: the signer's CPU per 1,000 requests by the Pod's key type,
ML-DSA-65 beside ECDSA P-256 (and ML-DSA-44/87), in process.

Kubernetes 1.37 — the plane the other scenarios run on — refuses ML-DSA requests, so this
scenario measures what the signer itself spends on a request, without an API server:
for each request, the PodCertificateRequest JSON as a watch delivers it (`orjson.loads`,
as `kube/client.py` decodes it, then `signer.records.pcr_record`), the key from its stub
CSR (`signer.policy`), the leaf (`signer.authority.issue`, the DER-template path the
signer takes), and the status patch it writes (`orjson.dumps`). CPU is this process's
`time.process_time()`; key types are interleaved over `--rounds` rounds and the median
is reported. The CA is ECDSA P-256
(the managed CA's default).

`keytypes_e2e` (run by `make bench` right after) repeats the P-256 / ML-DSA-65
comparison end to end on kube-apiserver 1.38, where ML-DSA requests are accepted: a
backlog drain per key type, our signer process's CPU per 1,000 Issued.

Also reported, per key type: the same work with the leaf made by `cryptography`'s builder
instead of the template (`builder_cpu_s_per_1000`, the "slow path"), and the bytes the
request and the answer carry (stub CSR, issued chain): ML-DSA's keys and signatures are
large, and kube-apiserver stores and sends every byte.
"""

from __future__ import annotations

import base64
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import orjson
from cryptography.hazmat.primitives.serialization import Encoding

from bench.harness import KeyPool, populate
from bench.scenarios import BURST_GROUPS, BURST_PODS, Context, Result, drain
from bench.signers import OUR_SIGNER_NAME, OurSigner
from controlplane.kubelet import generate_key, pcr_manifest, pod_manifest, stub_csr
from signer import authority, policy
from signer.records import pcr_record
from trust import keys
from trust.ca import cert_pem, generate_ca, key_pem
from trust.material import MaterialFiles, SigningMaterial, validate_material

BASELINE = "ECDSAP256"
"""kubelet's default `keyType`, and the CA's."""
KEY_TYPES = (BASELINE, *keys.gated_key_types(keys.MLDSA_GATE))
POOL = 16
NAMES = ["web.bench.svc.cluster.local", "web.bench.svc"]


def _material() -> SigningMaterial:
    ca = generate_ca("bench keytypes CA", key_type=BASELINE)
    files = MaterialFiles(key_pem(ca.key), cert_pem(ca.cert), cert_pem(ca.cert))
    return validate_material(files, "ca.key", "ca.crt", "bundle.pem", datetime.now(UTC))


def _requests(key_type: str) -> list[bytes]:
    """`POOL` PodCertificateRequests as a watch event's JSON, each with its own key."""
    pod = pod_manifest("web-0", "bench")
    pod["metadata"]["uid"] = "0b5e1c2a-0000-4000-8000-000000000001"
    bodies = []
    for i in range(POOL):
        key = generate_key(key_type)
        body = pcr_manifest(
            pod,
            key,
            signer_name="kubernetes.io/service-serving",
            annotations={"kubernetes.io/service-names": "web"},
            stub=stub_csr(key),
        )
        body["metadata"].update(name=f"req-{i}", namespace="bench", uid=f"u-{i}")
        body["metadata"]["resourceVersion"] = str(i + 1)
        bodies.append(json.dumps({"type": "ADDED", "object": body}).encode())
    return bodies


def _one(material: SigningMaterial, raw: bytes, now: datetime, *, builder: bool) -> str:
    """What the signer does with one request, from the watch's bytes to the patch's."""
    record = pcr_record(orjson.loads(raw)["object"])
    key = policy.public_key_from_request(record.stub_pkcs10, record.pkix_public_key)
    assert not isinstance(key, policy.Denial), key
    if builder:
        leaf = authority._build(
            material.signing_cert, material.key, False, key, 1234, now, now, NAMES
        )
        chain = leaf.public_bytes(Encoding.PEM).decode()
    else:
        chain = authority.issue(material, key, NAMES, 86400, 86400, now).chain_pem
    status = {"metadata": {"resourceVersion": record.resource_version}, "status": {"chain": chain}}
    return orjson.dumps(status).decode()


def _cpu_per_1000(run: Callable[[], object], count: int) -> float:
    start = time.process_time()
    for _ in range(count):
        run()
    return (time.process_time() - start) / count * 1000


def keytypes(n: int, rounds: int) -> Result:
    material = _material()
    now = datetime.now(UTC).replace(microsecond=0)
    pools = {key_type: _requests(key_type) for key_type in KEY_TYPES}
    template: dict[str, list[float]] = {k: [] for k in KEY_TYPES}
    builder: dict[str, list[float]] = {k: [] for k in KEY_TYPES}
    for pool in pools.values():  # warm-up: the template learnt, caches filled, unmeasured
        for raw in pool:
            _one(material, raw, now, builder=False)
            _one(material, raw, now, builder=True)
    for _ in range(rounds):
        for key_type, pool in pools.items():
            for path, into in ((False, template), (True, builder)):
                i = iter(range(n))

                def step(pool: list[bytes] = pool, path: bool = path, i: Any = i) -> str:
                    return _one(material, pool[next(i) % POOL], now, builder=path)

                into[key_type].append(_cpu_per_1000(step, n))
    result: Result = {"scenario": "keytypes", "n": n, "rounds": rounds, "ca": BASELINE}
    for key_type, pool in pools.items():
        sample = json.loads(pool[0])["object"]
        stub = base64.b64decode(sample["spec"]["stubPKCS10Request"])
        chain = _one(material, pool[0], now, builder=False)
        result[key_type] = {
            "cpu_s_per_1000": round(statistics.median(template[key_type]), 3),
            "builder_cpu_s_per_1000": round(statistics.median(builder[key_type]), 3),
            "stub_csr_bytes": len(stub),
            "status_patch_bytes": len(chain),
        }
    p256 = result[BASELINE]["cpu_s_per_1000"]
    result["mldsa65_over_p256"] = round(result["MLDSA65"]["cpu_s_per_1000"] / p256, 2)
    return result


E2E_KEY_TYPES = (BASELINE, "MLDSA65")  # the middle ML-DSA level beside the baseline


def keytypes_e2e(ctx: Context) -> Result:
    """The same comparison end to end, on kube-apiserver 1.38 (`binaries.NEXT_VERSION`,
    `PodCertificateMLDSA` on): for P-256 and ML-DSA-65 in turn, `--rounds` times, a
    backlog drain (`scenarios.drain`: `n` requests created first, our signer started
    after; CPU of the signer process from ready to the last Issued, per 1,000)."""
    pools = {key_type: KeyPool.generate((key_type,)) for key_type in E2E_KEY_TYPES}
    runs: list[Result] = []
    for round_ in range(ctx.rounds):
        for key_type, pool in pools.items():
            label = key_type.lower()
            pop = populate(
                ctx.client, f"keytypes-{label}-{round_}", pods=BURST_PODS, groups=BURST_GROUPS
            )
            sub = replace(ctx, keys=pool)

            def start(_bodies: list[Any], label: str = label) -> OurSigner:
                signer = OurSigner(ctx.plane, ctx.dir(f"keytypes-{label}"), workers=ctx.workers)
                return signer.start()

            run = drain(sub, pop, ctx.n, OUR_SIGNER_NAME, start)
            run.update(key_type=key_type, round=round_)
            runs.append(run)
    result: Result = {"scenario": "keytypes_e2e", "n": ctx.n, "version": ctx.plane.version}
    for key_type in E2E_KEY_TYPES:
        mine = [r for r in runs if r["key_type"] == key_type]
        result[key_type] = {
            "cpu_s_per_1000": round(statistics.median(r["cpu_s_per_1000"] for r in mine), 3),
            "per_second": round(statistics.median(r["per_second"] for r in mine), 1),
            "issued": [r["issued"] for r in mine],
        }
    p256 = result[BASELINE]["cpu_s_per_1000"]
    result["mldsa65_over_p256"] = round(result["MLDSA65"]["cpu_s_per_1000"] / p256, 2)
    result["runs"] = runs
    return result

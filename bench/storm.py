"""Fairness across namespaces: how long one namespace's single request waits while another
namespace's storm of requests is queued in the signer (docs/performance.md, "Fair across
namespaces").

    python -m bench.storm                  # 1,000-request storm, 3 rounds
    python -m bench.storm --n 1000 --rounds 3
    python -m bench.storm --qps 200 --burst 400 --workers 8   # the large roll-out profile

A light plane (kube-apiserver + etcd; the bench's admin credentials, which APF exempts, so
the API server is not what queues) and ours at the shipped budget (`--kube-api-qps=50
--kube-api-burst=100 --concurrent-syncs=4`). Each round: `--n` PodCertificateRequests for
200 Pods behind 20 Services in one namespace, POSTed at once by 16 creators; the moment
the last POST returns, one request in a second namespace. Reported per round: the probe's
latency (POST returned → Issued seen on a watch), how many storm requests were still not
Issued when the probe was POSTed (what a FIFO queue would have put before it), and the
storm's drain time; and, from the signer's client metrics over the round, its writes per
request and the mean seconds a write waited in its own budget (client-side rate limiter),
so a drain can be told bound by the budget or by the server and CPU. The signer's queue
serves namespaces round-robin, so the probe waits for about one sync per worker, not for
the storm.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import Creator, KeyPool, Watcher, pcr_bodies, populate
from bench.signers import OUR_SIGNER_NAME, OurSigner
from controlplane import ControlPlane

RESULTS = Path(__file__).with_name("results")
LIMITER = "rest_client_rate_limiter_duration_seconds"


def _log(message: str) -> None:
    print(f"[storm {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _limiter(signer: OurSigner) -> tuple[float, float]:
    """(writes, seconds waited in the client's rate limiter) so far."""
    return signer.metric(f"{LIMITER}_count"), signer.metric(f"{LIMITER}_sum")


def one_round(
    plane: ControlPlane, signer: OurSigner, keys: KeyPool, n: int, round_: int
) -> dict[str, Any]:
    client = plane.client()
    storm = populate(client, f"storm-{round_}", pods=200, groups=20)
    probe = populate(client, f"probe-{round_}", pods=1, groups=1)
    storm_bodies = pcr_bodies(storm, keys, n, signer_name=OUR_SIGNER_NAME)
    [probe_body] = pcr_bodies(probe, keys, 1, signer_name=OUR_SIGNER_NAME)
    writes_before, waited_before = _limiter(signer)
    storm_watch = Watcher(client, storm.namespace).start()
    probe_watch = Watcher(client, probe.namespace).start()
    try:
        storm_creator = Creator(client, storm.namespace)
        began = time.monotonic()
        storm_creator.burst(storm_bodies)
        issued_before = sum(
            1 for name, (condition, _) in dict(storm_watch.terminal).items() if condition
        )
        probe_creator = Creator(client, probe.namespace, threads=1)
        sent = probe_creator.create_one(probe_body)
        assert sent is not None, probe_creator.errors
        probe_watch.wait_all([sent.name], 300)
        storm_watch.wait_all([c.name for c in storm_creator.created], 300)
        drained = max((at for _, at in storm_watch.terminal.values()), default=time.monotonic())
    finally:
        storm_watch.stop()
        probe_watch.stop()
    writes_after, waited_after = _limiter(signer)
    writes = writes_after - writes_before
    condition, at = probe_watch.terminal.get(sent.name, ("", float("nan")))
    return {
        "round": round_,
        "n": n,
        "probe_condition": condition,
        "probe_latency_s": round(at - sent.returned, 3),
        "storm_queued_at_probe": len(storm_creator.created) - issued_before,
        "storm_posted_s": round(sent.sent - began, 3),
        "storm_drained_s": round(drained - began, 3),
        "writes_per_request": round(writes / (len(storm_creator.created) + 1), 2),
        "budget_wait_mean_ms": round(1000 * (waited_after - waited_before) / writes, 1)
        if writes
        else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.storm", description=__doc__)
    parser.add_argument("--n", type=int, default=1000, help="requests in the storm")
    parser.add_argument("--rounds", type=int, default=3, help="rounds")
    parser.add_argument("--qps", type=float, default=50, help="our --kube-api-qps")
    parser.add_argument("--burst", type=int, default=100, help="our --kube-api-burst")
    parser.add_argument("--workers", type=int, default=4, help="our --concurrent-syncs")
    parser.add_argument("--out", type=Path, default=None, help="the JSON file to write")
    args = parser.parse_args(argv)
    out = args.out or RESULTS / f"storm-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open("/proc/loadavg") as f:
        load_before = f.read().split()[:3]
    keys = KeyPool.generate(("ECDSAP256",))
    rounds = []
    plane = ControlPlane.start()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-storm-") as workdir:
            signer = OurSigner(
                plane, Path(workdir), workers=args.workers, qps=args.qps, burst=args.burst
            ).start()
            try:
                signer.wait_ready()
                for round_ in range(args.rounds):
                    result = one_round(plane, signer, keys, args.n, round_)
                    rounds.append(result)
                    print(json.dumps(result), flush=True)
                    _log(
                        f"round {round_}: probe {result['probe_latency_s']} s behind "
                        f"{result['storm_queued_at_probe']} queued storm requests"
                    )
            finally:
                signer.stop()
    finally:
        plane.stop()
    with open("/proc/loadavg") as f:
        load_after = f.read().split()[:3]
    document = {
        "scenario": "storm",
        "n": args.n,
        "signer": {"qps": args.qps, "burst": args.burst, "workers": args.workers},
        # the client bucket's floor for the storm: what the burst does not cover, at qps
        "bucket_floor_s": round(max(0, args.n - args.burst) / args.qps, 2),
        "load_before": load_before,
        "load_after": load_after,
        "probe_latency_median_s": statistics.median(r["probe_latency_s"] for r in rounds),
        "rounds": rounds,
    }
    out.write_text(json.dumps(document, indent=1) + "\n")
    _log(f"written {out}; load {load_before} → {load_after}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

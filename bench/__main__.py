"""`python -m bench` (`make bench`): run the benchmark scenarios and print the figures.

One JSON line per scenario on stdout as it finishes, then a readable table with the
ratios ours/Go-peer and ours/ceiling (both measured on the same API server in the same
run). Figures, not pass/fail: the exit code is non-zero only if a scenario crashed.

    python -m bench                          # all six scenarios, N=2000
    python -m bench --scenario burst,peer,ceiling --n 1000
    python -m bench --scenario burst --auth token   # the signer on a bearer-token kubeconfig
    python -m bench --scenario scale         # 150,000 Pods / 10,000 Services (not in "all")
    python -m bench --scenario drains --n 2000 --rounds 3   # CPU per 1,000: ours vs Go
    python -m bench --scenario keytypes --n 1000 --rounds 3 # CPU per 1,000: ML-DSA vs P-256
    python -m bench --scenario saturated --n 1000  # latency under APF saturation, ± FlowSchema
    BENCH_QUICK=1 python -m bench            # small N, short steady phase: a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from bench.drains import drains
from bench.harness import KeyPool, parallel, pcr_bodies, populate
from bench.keytypes import E2E_KEY_TYPES, KEY_TYPES, keytypes, keytypes_e2e
from bench.saturation import APF_ARGS, saturated
from bench.scale import CHURN_RATE as CHURN_OFFERED
from bench.scale import THROUGHPUT_ROUNDS, scale
from bench.scenarios import OWN_CONTROL_PLANE, SCENARIOS, Context, Result
from controlplane import ControlPlane, binaries
from kube.client import Client

ORDER = ("keytypes", "burst", "peer", "ceiling", "steady", "wakeup", "memory")
# Not on the shared 1.37 plane, which refuses ML-DSA requests: the signer's CPU per
# request by key type in process, then end to end on a 1.38 plane of its own.
NO_PLANE = {"keytypes"}
# Asked for by name only: `scale` builds a 150,000-Pod cluster; `drains` repeats backlog
# drains of every signer to compare CPU per certificate.
# `saturated` runs the signers as ServiceAccounts under API Priority and Fairness on a
# plane of small concurrency, saturated by other ServiceAccounts (bench/saturation.py).
EXTRA = {"scale": scale, "drains": drains, "saturated": saturated}
ALL = {**SCENARIOS, **EXTRA}
OWN = OWN_CONTROL_PLANE | {"scale", "saturated"}
# The kube-apiserver flags of a scenario's own plane.
OWN_ARGS = {"saturated": APF_ARGS}
DEFAULT_ROUNDS = {"drains": 3, "scale": THROUGHPUT_ROUNDS, "keytypes": 3}


def _log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _warm_up(client: Client, keys: KeyPool) -> None:
    """A few hundred creates with nobody serving them: connections, caches, etcd."""
    pop = populate(client, "bench-warmup", pods=20, groups=2)
    bodies = pcr_bodies(pop, keys, 300, signer_name="bench.example.com/warm-up")
    path = f"/apis/certificates.k8s.io/v1/namespaces/{pop.namespace}/podcertificaterequests"
    parallel(lambda i: client.create(path, bodies[i]), len(bodies))


def _emit(result: Result, json_file: Path | None) -> None:
    line = json.dumps(result, sort_keys=False)
    print(line, flush=True)
    if json_file:
        with json_file.open("a") as f:
            f.write(line + "\n")


def _fmt(value: Any, spec: str = "") -> str:
    if value is None or value == "":
        return "-"
    return format(value, spec) if spec else str(value)


def table(results: list[Result]) -> str:
    by = {r["scenario"]: r for r in results}
    rows = [
        ("scenario", "signer", "n", "issued/s", "p50 ms", "p95 ms", "p99 ms", "cpu s/1k", "req/PCR")
    ]
    for r in results:
        if r["scenario"] in ("burst", "peer", "ceiling", "steady"):
            rows.append(
                (
                    r["scenario"],
                    r["signer"],
                    _fmt(r.get("n")),
                    _fmt(r.get("per_second")),
                    _fmt(r.get("p50_ms")),
                    _fmt(r.get("p95_ms")),
                    _fmt(r.get("p99_ms")),
                    _fmt(r.get("cpu_s_per_1000")),
                    _fmt(r.get("api_requests_per_pcr")),
                )
            )
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    ours = by.get("burst", {}).get("per_second")
    if ours and by.get("peer", {}).get("per_second"):
        lines.append(f"ours/Go peer (burst issued/s):   {ours / by['peer']['per_second']:.2f}")
        cpu_ours, cpu_go = by["burst"].get("cpu_s_per_1000"), by["peer"].get("cpu_s_per_1000")
        lines.append(f"CPU s per 1,000 PCRs, ours vs Go: {cpu_ours} vs {cpu_go}")
    if ours and by.get("ceiling", {}).get("per_second"):
        lines.append(f"ours/ceiling (burst issued/s):   {ours / by['ceiling']['per_second']:.2f}")
    if "saturated" in by:
        s = by["saturated"]
        lines.append(
            f"saturated API server ({s['seats']} seats, {s['noise_threads']} threads of "
            f"{s['noise_accounts']} other ServiceAccounts), {s['n']} requests, "
            f"SLO {s['slo_seconds']} s:"
        )
        for run in s["runs"]:
            lines.append(
                f"  {run['signer']:16} {run['priority_level']:24} issued {run['issued']}/"
                f"{run['issued'] + run['not_issued']} in {run['seconds']} s, p50 "
                f"{run['p50_ms']} ms, p99 {run['p99_ms']} ms, within SLO {run['within_slo']:.1%}"
            )
    if "wakeup" in by:
        w = by["wakeup"]
        lines.append(
            f"wake-up: {w['target']} of {w['target'] + w['others']} waiting PCRs Issued in "
            f"{w['seconds_to_all_issued']} s after the Service appeared, {w['syncs']} syncs"
        )
    if "memory" in by:
        m = by["memory"]
        lines.append(
            f"memory: {m['pods']} Pods + {m['services']} Services: RSS {m['rss_empty_mib']} → "
            f"{m['rss_after_list_mib']} MiB (list) / {m['rss_after_watch_mib']} MiB (watch); "
            f"{m['bytes_per_pod_list']} B per Pod (list), {m['bytes_per_pod_watch']} B (watch)"
        )
    if "keytypes" in by:
        k = by["keytypes"]
        lines.append(
            f"key types, in process, {k['ca']} CA (median of {k['rounds']} rounds of {k['n']}):"
        )
        for key_type in KEY_TYPES:
            e = k[key_type]
            lines.append(
                f"  {key_type:10} {e['cpu_s_per_1000']:>6} CPU s/1k "
                f"(builder {e['builder_cpu_s_per_1000']}); stub CSR {e['stub_csr_bytes']} B, "
                f"status patch {e['status_patch_bytes']} B"
            )
        lines.append(f"  CPU ML-DSA-65/P-256: {k['mldsa65_over_p256']}")
    if "keytypes_e2e" in by:
        e = by["keytypes_e2e"]
        lines.append(f"key types end to end on {e['version']} (drains of {e['n']}, median):")
        for key_type in E2E_KEY_TYPES:
            r = e[key_type]
            lines.append(
                f"  {key_type:10} {r['cpu_s_per_1000']:>6} CPU s/1k  {r['per_second']:>7}/s  "
                f"issued {r['issued']}"
            )
        lines.append(f"  CPU ML-DSA-65/P-256: {e['mldsa65_over_p256']}")
    if "drains" in by:
        d = by["drains"]
        labels = list(dict.fromkeys(r["signer"] for r in d["runs"]))
        rounds = len(d["runs"]) // max(1, len(labels))
        lines.append(f"drains of {d['n']} (median of {rounds} interleaved rounds):")
        for label in labels:
            idle = [r["idle_cpu_fraction"] for r in d["runs"] if r["signer"] == label]
            lines.append(
                f"  {label:16} {d[f'{label}_per_second']:>7}/s  "
                f"{d[f'{label}_cpu_s_per_1000']:>6} CPU s/1k  idle CPU after {idle}"
            )
        lines.append(
            f"  CPU ours/peer: cert {d['cpu_over_peer_cert']}, token {d['cpu_over_peer_token']}"
        )
        if "before" in d:
            lines.append(
                f"  {d['before']} over this checkout: rate {d['before_over_now_per_second']}, "
                f"CPU per 1k {d['before_over_now_cpu_s_per_1000']}"
            )
    if "scale" in by:
        s = by["scale"]
        lines += [
            f"scale: {s['pods']} Pods + {s['services']} Services in {s['namespaces']} namespaces",
            f"  RSS per Pod {s['rss_bytes_per_pod_list']} B (LIST) / "
            f"{s['rss_bytes_per_pod_watch']} B (watch); {s['rss_empty_mib']} → "
            f"{s['rss_after_list_mib']} MiB; relist peak {s['relist_peak_mib']} MiB "
            f"= {s['relist_peak_ratio']}x steady",
            f"  start-up → /readyz {s['startup_seconds']} s",
            f"  backlog of {s['burst_n']} (median of {s['throughput_rounds']} interleaved rounds): "
            f"ours {s['burst_per_second']}/s "
            f"({s['cpu_s_per_1000']} CPU s/1k), token {s['ours_token_per_second']}/s "
            f"({s['ours_token_cpu_s_per_1000']}), shipped defaults "
            f"{s['ours_defaults_per_second']}/s ({s['ours_defaults_cpu_s_per_1000']})",
            f"  Go ceiling JSON {s['go_ceiling_json_per_second']}/s "
            f"({s['go_ceiling_json_cpu_s_per_1000']}), protobuf "
            f"{s['go_ceiling_protobuf_per_second']}/s ({s['go_ceiling_protobuf_cpu_s_per_1000']});"
            f" Go peer {s['peer_per_second']}/s ({s['peer_cpu_s_per_1000']})",
            f"  ours/Go JSON ceiling {s['burst_over_go_ceiling']} (token "
            f"{s['token_over_go_ceiling']}); CPU ours/peer {s['cpu_over_peer']} (token "
            f"{s['token_cpu_over_peer']})",
            f"  the same unit of our work (bench/probe.py): {s['probe_cpu_ms_quiet']} CPU ms "
            f"quiet, {s['probe_cpu_ms_beside_drain']} beside a drain = "
            f"{s['cpu_interference_ratio']}x the machine's interference",
            f"  churn: {s['churn_updates']} Service updates in {s['churn_seconds']} s "
            f"({s.get('churn_updates_per_second', '?')}/s of {CHURN_OFFERED:.0f}/s offered) with "
            f"{s['churn_waiting']} waiting: {s['churn_cpu_fraction']:.1%} of a core, "
            f"{s['churn_redrives']} re-drives, {s['churn_event_writes']} Event writes",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    quick = os.environ.get("BENCH_QUICK", "") not in ("", "0")
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--scenario",
        action="append",
        help=f"comma-separated subset of {','.join(ORDER)} (default: all), or scale",
    )
    parser.add_argument("--pods", type=int, default=150_000, help="scale: Pods in the cluster")
    parser.add_argument("--services", type=int, default=10_000, help="scale: Services")
    parser.add_argument("--burst", type=int, default=10_000, help="scale: PCR backlog size")
    parser.add_argument("--n", type=int, default=200 if quick else 2000, help="burst size")
    parser.add_argument("--workers", type=int, default=4, help="signer --concurrent-syncs")
    parser.add_argument(
        "--auth",
        choices=("cert", "token"),
        default="cert",
        help="how our signer authenticates in burst: client certificate, or a bearer token "
        "read from a kubeconfig tokenFile",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        help="interleaved rounds of the drains (default 3) and of scale's drains (default 2)",
    )
    parser.add_argument("--json", type=Path, help="also append the JSON lines to this file")
    args = parser.parse_args(argv)
    wanted = [s for arg in args.scenario or [",".join(ORDER)] for s in arg.split(",") if s]
    unknown = [s for s in wanted if s not in ALL and s not in NO_PLANE]
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)}")
    chosen = [s for s in (*ORDER, *EXTRA) if s in wanted]

    workdir = Path(tempfile.mkdtemp(prefix="sss-bench-"))
    _log(f"generating the key pool (RSA-4096 takes a while); workdir {workdir}")
    keys = KeyPool.generate()
    results: list[Result] = []
    failed = False
    shared: ControlPlane | None = None
    try:
        for name in chosen:
            if name in NO_PLANE:
                _log(f"scenario {name} (n={args.n}, in process)")
                rounds = args.rounds or DEFAULT_ROUNDS[name]
                result = keytypes(args.n, rounds)
                results.append(result)
                _emit(result, args.json)
                # End to end on 1.38 (1.37 refuses ML-DSA requests): its own plane.
                next_plane = ControlPlane.start(version=binaries.NEXT_VERSION)
                try:
                    ctx = Context(
                        next_plane,
                        next_plane.client(qps=0),
                        keys,
                        workdir,
                        args.n,
                        args.workers,
                        quick,
                        rounds=rounds,
                    )
                    _log(f"scenario keytypes_e2e on {binaries.NEXT_VERSION} (n={args.n})")
                    e2e = keytypes_e2e(ctx)
                except Exception:
                    failed = True
                    traceback.print_exc()
                    e2e = {"scenario": "keytypes_e2e", "error": traceback.format_exc(limit=1)}
                finally:
                    next_plane.stop()
                results.append(e2e)
                _emit(e2e, args.json)
                continue
            own = name in OWN
            if own:
                plane = ControlPlane.start(extra_args=OWN_ARGS.get(name, ()))
            else:
                if shared is None:
                    shared = ControlPlane.start()
                    _warm_up(shared.client(qps=0), keys)
                plane = shared
            ctx = Context(
                plane,
                plane.client(qps=0),
                keys,
                workdir,
                args.n,
                args.workers,
                quick,
                args.auth,
                scale_pods=args.pods,
                scale_services=args.services,
                scale_burst=args.burst,
                rounds=args.rounds or DEFAULT_ROUNDS.get(name, 1),
            )
            _log(f"scenario {name} (n={args.n}, workers={args.workers}, quick={quick})")
            try:
                result = ALL[name](ctx)
            except Exception:
                failed = True
                traceback.print_exc()
                result = {"scenario": name, "error": traceback.format_exc(limit=1).strip()}
            finally:
                if own:
                    plane.stop()
            results.append(result)
            line = json.dumps(result, sort_keys=False)
            print(line, flush=True)
            if args.json:
                with args.json.open("a") as f:
                    f.write(line + "\n")
    finally:
        if shared is not None:
            shared.stop()
        if os.environ.get("BENCH_KEEP_DIR") != "1":
            shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(table([r for r in results if "error" not in r]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

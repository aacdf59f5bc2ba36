"""The `drains` scenario: CPU per certificate, ours against the Go signers, in one run.

`python -m bench --scenario drains --n 2000 --rounds 3` (not in the default set) runs,
`--rounds` times and interleaved so that the machine's load falls on every signer alike,
one backlog drain (`scenarios.drain`: `--n` PCRs created first, the signer started after,
rate from the first to the last Issued, CPU from ready to the last Issued) for each of:
the Go ceiling (JSON PUT, pre-signed), ours authenticating with a client certificate,
ours with a bearer token read from a kubeconfig `tokenFile` (the in-cluster case), and the
Go peer. Each drain gets a fresh namespace. The JSON line carries every drain and, per
signer, the median rate and CPU per 1,000, and `cpu_over_peer` (ours over the peer's
median CPU, per auth).

`BENCH_BEFORE=<checkout>` adds `ours_before`: the signer of another checkout (its own
`.venv/bin/service-serving-signer`, client-certificate auth), drained in the same
interleaved rounds, and `before_over_now` ratios (rate and CPU per 1,000 of that
checkout over `ours_cert`) — a refactor's "no worse", measured in one run. With it, use
`--rounds 2`: each drain's population holds 20 Services, and the bench plane's /24
Service range fills after 12 drains (5 signers by 3 rounds would need 15).

After the last Issued each signer is left alone for `IDLE_SECONDS` and its CPU in that
window is reported (`idle_cpu_fraction`): work that does not scale with certificates.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness import Population, cpu_seconds, populate
from bench.scenarios import (
    BURST_GROUPS,
    BURST_PODS,
    CEILING_SIGNER_NAME,
    Context,
    Result,
    ceiling_material,
    ceiling_starter,
    drain,
    token_kubeconfig,
)
from bench.signers import (
    OUR_SIGNER_NAME,
    PEER_SIGNER_NAME,
    BenchedProcess,
    OurSigner,
    PeerSigner,
)
from kube.types import JSON

IDLE_SECONDS = 3.0
SIGNERS = ("go_ceiling_json", "ours_cert", "ours_token", "go_peer")


def _before_cli() -> str | None:
    before = os.environ.get("BENCH_BEFORE")
    return str(Path(before) / ".venv" / "bin" / "service-serving-signer") if before else None


class _Idle(BenchedProcess):
    """Wraps a signer so that `stop()` first measures its CPU over `IDLE_SECONDS`."""

    def __init__(self, inner: BenchedProcess) -> None:
        super().__init__(inner.workdir)
        self.inner = inner
        self.idle_cpu_fraction = float("nan")

    @property
    def pid(self) -> int:
        return self.inner.pid

    def wait_ready(self, timeout: float = 120) -> None:
        self.inner.wait_ready(timeout)

    def stop(self) -> None:
        try:
            cpu0 = cpu_seconds(self.inner.pid)
            time.sleep(IDLE_SECONDS)
            self.idle_cpu_fraction = (cpu_seconds(self.inner.pid) - cpu0) / IDLE_SECONDS
        finally:
            self.inner.stop()


def drains(ctx: Context) -> Result:
    material = ceiling_material(ctx.workdir)
    directory = ctx.dir("drains")
    kubeconfig = token_kubeconfig(ctx, directory)
    runs: list[dict[str, Any]] = []
    counter = 0

    def fresh(label: str) -> Population:
        nonlocal counter
        counter += 1
        return populate(
            ctx.client, f"drain-{label}-{counter}", pods=BURST_PODS, groups=BURST_GROUPS
        )

    def starter(label: str, pop: Population) -> Callable[[list[JSON]], BenchedProcess]:
        def start(bodies: list[JSON]) -> BenchedProcess:
            inner: BenchedProcess
            if label == "go_ceiling_json":
                inner = ceiling_starter(ctx, pop.namespace, material, "drains", "json")(bodies)
            elif label == "go_peer":
                inner = PeerSigner(ctx.plane, ctx.dir("drains-peer")).start()
            else:
                inner = OurSigner(
                    ctx.plane,
                    ctx.dir(f"drains-{label}"),
                    workers=ctx.workers,
                    kubeconfig=kubeconfig if label == "ours_token" else None,
                    cli=before if label == "ours_before" else None,
                ).start()
            return _Idle(inner)

        return start

    before = _before_cli()
    signers = (*SIGNERS, "ours_before") if before else SIGNERS
    signer_names = {"go_ceiling_json": CEILING_SIGNER_NAME, "go_peer": PEER_SIGNER_NAME}
    for round_ in range(ctx.rounds):
        for label in signers:
            pop = fresh(label.replace("_", "-"))
            holder: list[_Idle] = []
            start = starter(label, pop)

            def keep(
                bodies: list[JSON], start: Any = start, holder: Any = holder
            ) -> BenchedProcess:
                signer: _Idle = start(bodies)
                holder.append(signer)
                return signer

            d = drain(ctx, pop, ctx.n, signer_names.get(label, OUR_SIGNER_NAME), keep)
            d["signer"] = label
            d["round"] = round_
            d["idle_cpu_fraction"] = round(holder[0].idle_cpu_fraction, 4) if holder else None
            runs.append(d)
    result: Result = {"scenario": "drains", "n": ctx.n, "workers": ctx.workers, "runs": runs}
    for label in signers:
        mine = [r for r in runs if r["signer"] == label]
        result[f"{label}_per_second"] = round(statistics.median(r["per_second"] for r in mine), 1)
        result[f"{label}_cpu_s_per_1000"] = round(
            statistics.median(r["cpu_s_per_1000"] for r in mine), 3
        )
    peer = result.get("go_peer_cpu_s_per_1000")
    for auth in ("cert", "token") if peer and "ours_token" in SIGNERS else ():
        result[f"cpu_over_peer_{auth}"] = round(result[f"ours_{auth}_cpu_s_per_1000"] / peer, 3)
    if before:
        result["before"] = os.environ["BENCH_BEFORE"]
        for figure in ("per_second", "cpu_s_per_1000"):
            now = result[f"ours_cert_{figure}"]
            result[f"before_over_now_{figure}"] = (
                round(result[f"ours_before_{figure}"] / now, 3) if now else None
            )
    return result

"""A fixed unit of the signer's own CPU work, timed: how much dearer the same work gets
while the API server is busy on the same cores.

Why it exists: at 150,000 Pods our CPU per certificate (and the Go ceiling's, which
decides and signs nothing) is well above what the same code uses on an idle machine.
A profile cannot tell "our code does more" from "the same code runs slower", because the
signer and kube-apiserver share this machine's two cores and caches. This probe holds
the code fixed — the stub-CSR key parse and the leaf build and ECDSA signature of one
decision, via `signer.policy` and `signer.authority` — and times it by process CPU,
once on a quiet machine and once beside a drain, so the ratio is the machine's
interference, not ours.

It runs in its own process, working in short slices with pauses between them (about half
a core, as the signer in a drain uses), so it neither hogs a core nor idles it:

    python -m bench.probe --seconds 20 --ca-dir DIR     # one JSON line on stdout

With `--until-eof` it works until its stdin closes instead (the bench runs it for exactly
as long as a drain beside it lasts).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import click

from bench.harness import KeyPool
from signer import authority, policy
from trust.ca import write_ca
from trust.files import load_material

SLICE_SECONDS = 0.002  # work this long, then pause as long
LIFETIME = 86400


def run_probe(ca_dir: Path, done: Callable[[], bool]) -> dict[str, float]:
    """Repeat the unit until `done()` (one slice at least, so a figure always has
    units behind it); CPU milliseconds per unit and units done."""
    if not (ca_dir / "ca.key").exists():
        write_ca(ca_dir)
    material = load_material(
        str(ca_dir / "ca.key"), str(ca_dir / "ca.crt"), str(ca_dir / "trust-bundle.pem")
    )
    stubs = [stub for _, _, stub in KeyPool.generate(("ECDSAP256",)).entries]
    names = ["web.team-a.svc", "web.team-a.svc.cluster.local"]
    units = 0
    cpu = 0.0
    while True:
        c0 = time.process_time()
        slice_end = time.monotonic() + SLICE_SECONDS
        while time.monotonic() < slice_end:
            key = policy.public_key_from_request(stubs[units % len(stubs)], None)
            assert not isinstance(key, policy.Denial)
            authority.issue(material, key, names, LIFETIME, LIFETIME, datetime.now(UTC))
            units += 1
        cpu += time.process_time() - c0
        if done():
            break
        time.sleep(SLICE_SECONDS)
    return {"units": units, "cpu_ms_per_unit": round(cpu / max(units, 1) * 1000, 4)}


class Beside:
    """`with Beside(ca_dir) as probe:` runs the probe in a child process for the body's
    duration; `probe.result` afterwards."""

    def __init__(self, ca_dir: Path) -> None:
        self.ca_dir = ca_dir
        self.result: dict[str, float] = {}
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> Beside:
        self._proc = subprocess.Popen(
            [*_command(self.ca_dir), "--until-eof"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        assert self._proc is not None
        if exc_type is not None:  # the body failed: its error, not the probe's, matters
            self._proc.kill()
            self._proc.communicate()
            return
        out, _err = self._proc.communicate(timeout=60)
        if self._proc.returncode != 0:
            raise RuntimeError(f"bench.probe exited {self._proc.returncode}")
        self.result = json.loads(out)


def quiet(ca_dir: Path, seconds: float) -> dict[str, float]:
    """The probe for `seconds`, in a child process, with nothing else started."""
    done = subprocess.run(
        [*_command(ca_dir), f"--seconds={seconds}"],
        check=True,
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    )
    result: dict[str, float] = json.loads(done.stdout)
    return result


def _command(ca_dir: Path) -> list[str]:
    return [sys.executable, "-m", "bench.probe", f"--ca-dir={ca_dir}"]


@click.command()
@click.option("--seconds", type=float, default=20.0, show_default=True)
@click.option("--ca-dir", type=click.Path(path_type=Path), required=True)
@click.option("--until-eof", is_flag=True, help="Work until stdin closes, not --seconds.")
def main(seconds: float, ca_dir: Path, until_eof: bool) -> None:
    if until_eof:
        closed = threading.Event()

        def wait_for_eof() -> None:
            sys.stdin.read()
            closed.set()

        threading.Thread(target=wait_for_eof, daemon=True).start()
        click.echo(json.dumps(run_probe(ca_dir, closed.is_set)))
        return
    end = time.monotonic() + seconds
    click.echo(json.dumps(run_probe(ca_dir, lambda: time.monotonic() >= end)))


if __name__ == "__main__":
    main()

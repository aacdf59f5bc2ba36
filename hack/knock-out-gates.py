"""Remove each gate of `managedca/decide.py` in turn and run the property model
(tests/unit/managedca/test_properties.py) against the weakened decision: every gate
must make it fail. The file is edited in place and restored after each run (run it
from a clean checkout: `.venv/bin/python hack/knock-out-gates.py`). Prints one line
per gate: the tests that failed without it, or SURVIVED (the model cannot see it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DECIDE = Path(__file__).resolve().parent.parent / "managedca" / "decide.py"
TESTS = "tests/unit/managedca/test_properties.py"

# gate name -> (text in decide.py, what it becomes without the gate)
GATES = {
    "bundle read back holds the new roots": (
        "    if not anchors <= obs.published:\n",
        "    if False:\n",
    ),
    "some replica reports at all": (
        '        return Wait(None, "no-replica-report", "no replica reports what it has loaded")',
        "        pass",
    ),
    "every replica has loaded the new CA": (
        "behind = sorted(r.replica for r in live if new.fingerprint not in r.anchors)",
        "behind: list[str] = []",
    ),
    "every replica is ready to sign with it": (
        "unready = sorted(r.replica for r in live if r.ready != new.fingerprint)",
        "unready: list[str] = []",
    ),
    "injected targets hold the new CA (injector report)": (
        "    consumers = _injector_gate(new, obs, config)\n",
        "    consumers = None\n",
    ),
    "propagation delay (recorded end)": (
        "    if now < state.swap_not_before:\n",
        "    if False:\n",
    ),
    "propagation delay (leader's monotonic clock)": (
        "    if obs.published_for is not None and obs.published_for < config.propagation_delay:",
        "    if False:",
    ),
    "new CA valid now (notBefore)": (
        "    if now < new.not_before:\n",
        "    if False:\n",
    ),
    "new CA outlives the longest leaf": (
        "    if now + config.max_leaf_lifetime >= new.not_after:\n",
        "    if False:\n",
    ),
    "adopting bootstrap is a stage": (
        "        if not state.previous or state.emergency:",
        "        if True:",
    ),
    "retire clock waits for every replica to sign with the new CA": (
        "behind = sorted(r.replica for r in live if r.signing != state.current.fingerprint)",
        "behind: list[str] = []",
    ),
    "retire time (longest leaf + margin)": (
        "        if prev.retire_at is None or now < prev.retire_at:\n",
        "        if prev.retire_at is None:\n",
    ),
}


def main() -> int:
    original = DECIDE.read_text()
    survived = 0
    for name, (gate, without) in GATES.items():
        if original.count(gate) != 1:
            print(f"{name}: gate text not found once in {DECIDE.name}; update this script")
            return 2
        DECIDE.write_text(original.replace(gate, without))
        try:
            run = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", TESTS],
                capture_output=True,
                text=True,
                check=False,
            )
        finally:
            DECIDE.write_text(original)
        failed = sorted(set(re.findall(r"FAILED \S+::(\S+)", run.stdout)))
        if failed:
            print(f"{name}: fails {', '.join(failed)}")
        else:
            survived += 1
            print(f"{name}: SURVIVED")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())

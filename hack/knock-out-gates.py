"""Remove each gate of `managedca/decide.py` in turn and run the property model
(tests/unit/managedca/test_properties.py) against the weakened decision: every gate
must make it fail (exit 1 if one survives). Checks that are implied by another gate in
the model (`SUBSUMED`) are run too and reported, not counted. The file is edited in
place and restored after each run (run it from a clean checkout:
`.venv/bin/python hack/knock-out-gates.py`)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DECIDE = Path(__file__).resolve().parent.parent / "managedca" / "decide.py"
TESTS = "tests/unit/managedca/test_properties.py"

# gate name -> [(text in decide.py, what it becomes without the gate), ...]
GATES: dict[str, list[tuple[str, str]]] = {
    "the new roots published for the propagation delay (read back, waited on both clocks)": [
        ("    if not anchors <= obs.published:\n", "    if False:\n"),
        ("    if now < state.swap_not_before:\n", "    if False:\n"),
        (
            "    if obs.published_for is not None and obs.published_for < "
            "config.propagation_delay:",
            "    if False:",
        ),
    ],
    "a new leader waits the delay on its own monotonic clock": [
        (
            "    if obs.published_for is not None and obs.published_for < "
            "config.propagation_delay:",
            "    if False:",
        ),
    ],
    "some replica reports at all": [
        (
            '        return Wait(None, "no-replica-report", '
            '"no replica reports what it has loaded")',
            "        pass",
        ),
    ],
    "every replica is ready to sign with the new CA": [
        (
            "unready = sorted(r.replica for r in live if r.ready != new.fingerprint)",
            "unready: list[str] = []",
        ),
    ],
    "injected targets hold the new CA (injector report)": [
        ("    consumers = _injector_gate(new, obs, config)\n", "    consumers = None\n"),
    ],
    "adopting bootstrap is a stage": [
        ("        if not state.previous or state.emergency:", "        if True:"),
    ],
    "retire clock waits for every replica to sign with the new CA": [
        (
            "behind = sorted(r.replica for r in live if r.signing != state.current.fingerprint)",
            "behind: list[str] = []",
        ),
    ],
    "retire time (longest leaf + margin)": [
        (
            "        if prev.retire_at is None or now < prev.retire_at:\n",
            "        if prev.retire_at is None:\n",
        ),
    ],
    "an emergency drops the compromised root from the state": [
        ("        if state.current.fingerprint not in action.revoke\n", "        if True\n"),
    ],
    "a bootstrap keeps the roots a replica remembers revoked": [
        (
            "        return Bootstrap(now, adopt, obs.revoked)",
            "        return Bootstrap(now, adopt)",
        ),
    ],
    "a bootstrap adopts no revoked root": [
        (
            "adopt = tuple(sorted(c for c in obs.published_cas if c.fingerprint not in "
            "obs.revoked))",
            "adopt = tuple(sorted(obs.published_cas))",
        ),
    ],
}

# Kept in decide as defence in depth, but implied by a gate above in the model: removing
# one alone cannot break an invariant there, and the script says so instead of failing.
SUBSUMED = {
    "every replica has loaded the new CA (implied by ready: a replica validates the "
    "next CA from the bundle it loaded)": [
        (
            "behind = sorted(r.replica for r in live if new.fingerprint not in r.anchors)",
            "behind: list[str] = []",
        ),
    ],
    "new CA valid now on the leader's clock (implied by ready: the leader is a replica)": [
        ("    if now < new.not_before:\n", "    if False:\n"),
    ],
    "new CA outlives the longest leaf (implied by ready: validated for the lead time)": [
        ("    if now + config.max_leaf_lifetime >= new.not_after:\n", "    if False:\n"),
    ],
    "the recorded end of the delay (implied by the monotonic measure)": [
        ("    if now < state.swap_not_before:\n", "    if False:\n"),
    ],
}


def main() -> int:
    original = DECIDE.read_text()
    survived = 0
    for kind, gates in (("gate", GATES), ("subsumed", SUBSUMED)):
        for name, edits in gates.items():
            weakened = original
            for gate, without in edits:
                if weakened.count(gate) != 1:
                    print(f"{name}: gate text not found once in {DECIDE.name}; update this script")
                    return 2
                weakened = weakened.replace(gate, without)
            DECIDE.write_text(weakened)
            try:
                run = subprocess.run(
                    [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", TESTS],
                    capture_output=True,
                    text=True,
                    check=False,
                )
            finally:
                DECIDE.write_text(original)
            failed = sorted(set(re.findall(r"FAILED \S+::(\S+?)(?:\[| - |$)", run.stdout)))
            scenarios = sorted(set(re.findall(r"FAILED \S+::\S+\[(.+?)\]", run.stdout)))
            if failed:
                extra = f" (scenarios: {'; '.join(scenarios)})" if scenarios else ""
                print(f"{kind} {name}: fails {', '.join(failed)}{extra}")
            else:
                survived += kind == "gate"
                print(f"{kind} {name}: survives")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())

"""Remove each gate and rule of the managed CA in turn and run its unit tests
(tests/unit/managedca: the property model of test_properties.py — its random
interleavings and its scenarios — and the tests of the controller, the source, the
codec and the reports; and, for a rule outside managedca/, its own module's tests:
`ALSO_TESTS`) against the weakened code: every gate must make at least one test fail
(exit 1 if one survives). The test that fails is named, the random test
(`test_no_interleaving_breaks_an_invariant`) included, and the scenarios by name.
Checks implied by another gate in the model (`SUBSUMED`) are run too and reported, not
counted. Each run stops at its first failing test (`-x`): a kill needs one. The files are
edited in a copy of the checkout (so a test suite running beside it, as `make test`
does through tests/unit/managedca/test_knock_outs.py, never imports weakened code) and
restored after each run, and the copy's hypothesis example database is wiped before
each run, so one knock-out's failing example is not replayed in the next
(`.venv/bin/python hack/knock-out-gates.py`; `--only TEXT` runs the gates whose name
contains TEXT)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DECIDE = "managedca/decide.py"
STEP = "managedca/step.py"
MATERIAL = "managedca/material.py"
REPORT = "managedca/report.py"
OBSERVE = "managedca/observe.py"
CONTROLLERS = "manager/controllers.py"
CLIENT = "kube/client.py"
TESTS = "tests/unit/managedca"

# gate name -> [(file, text in it, what it becomes without the gate), ...]
GATES: dict[str, list[tuple[str, str, str]]] = {
    "an emergency also drops the previous roots it names": [
        (
            STEP,
            "    kept = tuple(p for p in state.previous if p.ca.fingerprint not in action.revoke)",
            "    kept = state.previous",
        ),
    ],
    "record the longest lifetime a replica may sign with (RecordLifetime)": [
        (DECIDE, "        return RecordLifetime(longest)\n", "        pass\n"),
    ],
    "a recorded lifetime also goes onto the previous roots not scheduled yet (a report "
    "landing after the swap)": [
        (
            STEP,
            "            replace(p, lifetime=max(lifetime, p.lifetime or lifetime)) if p.retire_at "
            "is None else p\n",
            "            p\n",
        ),
    ],
    "a previous root whose lifetime is unknown or shorter records it before its retire": [
        (
            DECIDE,
            "        or any(p.lifetime is None or p.lifetime < longest for p in unscheduled)\n",
            "",
        ),
    ],
    "the retire time counts the root's recorded lifetime": [
        (
            DECIDE,
            "    longest = max([config.max_leaf_lifetime, *lifetimes])\n",
            "    longest = config.max_leaf_lifetime\n",
        ),
    ],
    "a reported lifetime is bounded by the CA's": [
        (
            DECIDE,
            "        max(state.current.lifetime, config.max_leaf_lifetime),\n    )",
            "        timedelta.max,\n    )",
        ),
    ],
    "a stale injector report holds the swap": [
        (DECIDE, "    if not view.live:\n", "    if False:\n"),
    ],
    "the retire clock waits for at least one report": [
        (
            DECIDE,
            '        return Wait(None, "no-replica-report", '
            '"no replica reports what it signs with")',
            "        pass",
        ),
    ],
    "a state holding a revoked root is an emergency (a restore from before one)": [
        (DECIDE, "    if known & obs.revoked:\n", "    if False:\n"),
    ],
    "published roots the state lacks are adopted back (a restore)": [
        (DECIDE, "    if lost or unpublished:\n", "    if unpublished:\n"),
    ],
    "a restored current CA the read-back lacks is unconfirmed (a staged backup)": [
        (DECIDE, "    if lost or unpublished:\n", "    if lost:\n"),
    ],
    "a restored current CA the state read before did not hold is unconfirmed (the "
    "publisher already put it back)": [
        (
            DECIDE,
            "        obs.current_not_held_before\n        or (",
            "        False\n        or (",
        ),
    ],
    "the leader remembers a restored current CA until it is unconfirmed": [
        (
            OBSERVE,
            "        return self._not_held_current == state.current.fingerprint",
            "        return before is not None and not d.held_by(before, state.current, now)",
        ),
    ],
    "the leader compares the Secret with the state it read before": [
        (
            OBSERVE,
            "current_not_held_before=self._current_not_held_before(before, state, now),",
            "current_not_held_before=False,",
        ),
    ],
    "a replica switches only to a CA the state it served before held": [
        (
            MATERIAL,
            "        if served is not None and not held_by(served, ca, self._clock()):\n",
            "        if False:\n",
        ),
    ],
    "a previous root due to retire is not one signing moves back to": [
        (
            DECIDE,
            "    return any(p.ca == ca and (p.retire_at is None or now < p.retire_at) for p in "
            "served.previous)",
            "    return any(p.ca == ca for p in served.previous)",
        ),
    ],
    "a root just retired is not adopted back": [
        (
            DECIDE,
            "if c.fingerprint not in known | obs.revoked | set(state.retired) and",
            "if c.fingerprint not in known | obs.revoked and",
        ),
    ],
    "a replica refuses a state that drops a root it serves (a restore)": [
        (
            MATERIAL,
            "    return frozenset(gone - set(state.retired) - state.revoked - revoked)",
            "    return frozenset()",
        ),
    ],
    "the new roots published for the propagation delay (read back, waited on both clocks)": [
        (DECIDE, "    if not anchors <= obs.published:\n", "    if False:\n"),
        (DECIDE, "    if now < state.swap_not_before:\n", "    if False:\n"),
        (
            DECIDE,
            "    if obs.published_for is not None and obs.published_for < "
            "config.propagation_delay:",
            "    if False:",
        ),
    ],
    "a new leader waits the delay on its own monotonic clock": [
        (
            DECIDE,
            "    if obs.published_for is not None and obs.published_for < "
            "config.propagation_delay:",
            "    if False:",
        ),
    ],
    "some replica reports at all": [
        (
            DECIDE,
            '        return Wait(None, "no-replica-report", '
            '"no replica reports what it has loaded")',
            "        pass",
        ),
    ],
    "every replica is ready to sign with the new CA": [
        (
            DECIDE,
            "unready = sorted(r.replica for r in live if r.ready != new.fingerprint)",
            "unready: list[str] = []",
        ),
    ],
    "a shipped report Lease never written is a visible wait (injector-report-missing)": [
        (DECIDE, "    if not view.reported:\n", "    if False:\n"),
    ],
    "the report Lease as shipped (empty) reads as never written": [
        (
            REPORT,
            '    reported = bool(spec.get("renewTime")) or bool(annotations.get(convergence.'
            "REPORT_ANNOTATION))\n",
            "    reported = True\n",
        ),
    ],
    "an injector in this process makes a missing report a wait (auto)": [
        (
            CONTROLLERS,
            'if opts.managed_ca_wait_for_injector == "auto" and "injector" in opts.controllers',
            "if False",
        ),
    ],
    "injected targets hold the new CA (injector report)": [
        (
            DECIDE,
            "else _injector_gate(new, obs, now, config, seen=state.injector_seen)\n",
            "else None\n",
        ),
    ],
    "adopting bootstrap is a stage": [
        (
            DECIDE,
            "        if (not state.previous and state.next is None) or state.emergency:",
            "        if True:",
        ),
    ],
    "a report Lease seen once and then deleted is a wait": [
        (DECIDE, "        if seen or obs.injector_seen:\n", "        if False:\n"),
    ],
    "the first sight of the injector's report is recorded on the Secret": [
        (DECIDE, "        return RecordInjectorSeen(now)\n", "        pass\n"),
    ],
    "the leader remembers the injector's report it has seen": [
        (
            OBSERVE,
            "        self.injector_seen |= injector is not None or revocations.injector_seen("
            "stable)\n",
            "        pass\n",
        ),
    ],
    "the stable bundle remembers that the injector's report was seen": [
        (
            OBSERVE,
            "seen_injector = self.injector_seen and not revocations.injector_seen(seen.stable)",
            "seen_injector = False",
        ),
    ],
    "the swap waits the delay after the injector's report converged": [
        (
            DECIDE,
            "    if obs.converged_for is not None and obs.converged_for < config.propagation_delay"
            ":",
            "    if False:",
        ),
    ],
    "the retire needs the leader's monotonic clock": [
        (
            DECIDE,
            "    if obs.led_for is not None and obs.led_since is not None:\n        short = due",
            "    if False:\n        short = due",
        ),
    ],
    "the retire needs the API server's clock": [
        (DECIDE, "    if obs.server_now is not None and obs.server_now < due:", "    if False:"),
    ],
    "the leader reads the API server's clock from its client": [
        (
            OBSERVE,
            'self.server_clock = server_clock or getattr(client, "server_now", None)',
            "self.server_clock = server_clock",
        ),
    ],
    "the client keeps the Date of every answer (the API server's clock)": [
        (CLIENT, "            self.server_clock.saw(reply.date)\n", ""),
    ],
    "an unknown server clock retires nothing": [
        (
            OBSERVE,
            "return self.server_clock() or d.SERVER_CLOCK_UNKNOWN",
            "return self.server_clock()",
        ),
    ],
    "the emergency flag is cleared at confirmation": [
        (STEP, "confirmed_at=at, emergency=False)", "confirmed_at=at)"),
    ],
    "the emergency flag is cleared at a stage": [
        (STEP, "        emergency=False,  # a scheduled CA: it passes every gate\n", ""),
    ],
    "the emergency flag is cleared at a swap": [
        (STEP, "        emergency=False,  # the swapped-in CA went through every gate\n", ""),
    ],
    "the emergency flag is cleared at an adoption": [
        (
            STEP,
            "    return replace(state, previous=previous, emergency=False)",
            "    return replace(state, previous=previous)",
        ),
    ],
    "a replica does not switch to a CA the stable bundle does not publish": [
        (
            MATERIAL,
            "        if self._published and ca.fingerprint not in published:\n",
            "        if False:\n",
        ),
    ],
    "a replica that cannot read the revocation record serves no new bundle": [
        (
            MATERIAL,
            "        if bundle_digest != self._digests[0] and not readable:\n",
            "        if False:\n",
        ),
    ],
    "a replica that cannot read the revocation record does not switch": [
        (MATERIAL, "        if not readable:\n", "        if False:\n"),
    ],
    "a replica report deleted while live counts as last seen for its duration": [
        (OBSERVE, "        reports += [view for view, _, _ in vanished.values()]\n", ""),
    ],
    "an unreadable replica report holds as a replica that loaded nothing": [
        (OBSERVE, "        reports += unreadable\n", ""),
    ],
    "an incomplete injector report names the objects it waits on": [
        (
            REPORT,
            "return InjectorView(live, done, lagging=(waiting,), holding=named)",
            "return InjectorView(live, done, lagging=())",
        ),
    ],
    "the swap's Event says a skipped consumers' gate": [
        (STEP, '            + (f"; {skipped_note(state)}" if skipped(state) else ""),\n', ""),
    ],
    "retire clock waits for every replica to sign with the new CA": [
        (
            DECIDE,
            "behind = sorted(r.replica for r in live if r.signing != state.current.fingerprint)",
            "behind: list[str] = []",
        ),
    ],
    "retire time (longest leaf + margin)": [
        (
            DECIDE,
            "        if prev.retire_at is None or now < prev.retire_at:\n",
            "        if prev.retire_at is None:\n",
        ),
    ],
    "an emergency drops the compromised root from the state": [
        (
            STEP,
            "        previous=kept,\n        revoked=revoked | staged,",
            "        previous=(d.Previous(state.current, action.at, None), *kept),\n"
            "        revoked=revoked | staged,",
        ),
    ],
    "a bootstrap keeps the roots a replica remembers revoked": [
        (
            DECIDE,
            "        return Bootstrap(now, adopt, obs.revoked)",
            "        return Bootstrap(now, adopt)",
        ),
    ],
    "a bootstrap adopts no revoked root": [
        (
            DECIDE,
            "adopt = tuple(sorted(c for c in obs.published_cas if c.fingerprint not in "
            "obs.revoked))",
            "adopt = tuple(sorted(obs.published_cas))",
        ),
    ],
}

# Rules outside managedca/ are also run against the tests of their own module.
ALSO_TESTS: dict[str, tuple[str, ...]] = {
    CONTROLLERS: ("tests/unit/manager/test_controllers.py",),
    CLIENT: ("tests/unit/kube/test_client.py",),
}

# Kept in decide as defence in depth, but implied by a gate above in the model: removing
# one alone cannot break an invariant there, and the script says so instead of failing.
SUBSUMED: dict[str, list[tuple[str, str, str]]] = {
    "every replica has loaded the new CA (implied by ready: a replica validates the "
    "next CA from the bundle it loaded)": [
        (
            DECIDE,
            "behind = sorted(r.replica for r in live if new.fingerprint not in r.anchors)",
            "behind: list[str] = []",
        ),
    ],
    "new CA valid now on the leader's clock (implied by ready: the leader is a replica)": [
        (DECIDE, "    if now < new.not_before:\n", "    if False:\n"),
    ],
    "new CA outlives the longest leaf (implied by ready: validated for the lead time)": [
        (DECIDE, "    if now + config.max_leaf_lifetime >= new.not_after:\n", "    if False:\n"),
    ],
    "the recorded end of the delay (implied by the monotonic measure)": [
        (DECIDE, "    if now < state.swap_not_before:\n", "    if False:\n"),
    ],
}


# What the copy leaves out: history, the venv, caches.
IGNORED = shutil.ignore_patterns(
    ".git",
    ".venv",
    "__pycache__",
    ".hypothesis",
    ".mypy_cache",
    ".ruff_cache",
    "*.egg-info",
    "dist",
)


def main(argv: list[str]) -> int:
    only = argv[argv.index("--only") + 1] if "--only" in argv else ""
    with tempfile.TemporaryDirectory(prefix="knock-out-gates-") as tmp:
        copy = Path(tmp) / "repo"
        shutil.copytree(ROOT, copy, ignore=IGNORED)
        return knock_out_all(copy, only)


def knock_out_all(root: Path, only: str) -> int:
    """Knock out each gate in `root` (a copy of the checkout); 1 if one survives."""
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    where = subprocess.run(
        [sys.executable, "-c", f"import {DECIDE[:-3].replace('/', '.')} as d; print(d.__file__)"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not where.startswith(str(root)):
        print(f"the copy's modules are not the ones imported ({where})")
        return 2
    survived = 0
    for kind, gates in (("gate", GATES), ("subsumed", SUBSUMED)):
        for name, edits in gates.items():
            if only not in name:
                continue
            originals = {f: (root / f).read_text() for f, _, _ in edits}
            weakened = dict(originals)
            for file, gate, without in edits:
                if weakened[file].count(gate) != 1:
                    print(f"{name}: gate text not found once in {file}; update this script")
                    return 2
                weakened[file] = weakened[file].replace(gate, without)
            shutil.rmtree(root / ".hypothesis", ignore_errors=True)
            for file, text in weakened.items():
                (root / file).write_text(text)
            try:
                run = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "pytest",
                        "-q",
                        "-p",
                        "no:cacheprovider",
                        "--hypothesis-seed=1",
                        "-x",
                        # It checks the rules' text, which a knock-out changes: not a kill.
                        f"--ignore={TESTS}/test_knock_out_rules.py",
                        # The test that runs this script.
                        f"--ignore={TESTS}/test_knock_outs.py",
                        TESTS,
                        *(t for f in originals for t in ALSO_TESTS.get(f, ())),
                    ],
                    capture_output=True,
                    text=True,
                    check=False,
                    cwd=root,
                    env=env,
                )
            finally:
                for file, text in originals.items():
                    (root / file).write_text(text)
            # `FAILED path::test[id] - message`, or `FAILED path::test` with no message
            # (the random test, whose message hypothesis prints above): one per line.
            failed = sorted(set(re.findall(r"^FAILED \S+::([^\s\[]+)", run.stdout, re.M)))
            scenarios = sorted(set(re.findall(r"^FAILED \S+::\S+?\[(.+?)\]", run.stdout, re.M)))
            if failed:
                extra = f" (cases: {'; '.join(scenarios)})" if scenarios else ""
                print(f"{kind} {name}: fails {', '.join(failed)}{extra}", flush=True)
            else:
                survived += kind == "gate"
                print(f"{kind} {name}: survives", flush=True)
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

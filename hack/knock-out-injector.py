"""Remove each of the injector's classification rules in turn — the rules that keep every
outcome of every object classified in bounded time (docs/inject.md, "Every outcome,
classified"), release each kind's leaves to their owner, keep a tenant's record bounded,
and keep a tenant's full quota the tenant's matter in distribution — and run the tests
that pin them against the weakened code: each rule must make at least one of them fail
(exit 1 if one survives).

It works on a copy of the checkout (a temporary directory, the checkout itself is never
edited), so it may run beside anything, and in CI (`tests/unit/injector/
test_knock_outs.py` runs it). Each rule quotes exact source lines: a refactor that moves
them makes the script fail loudly ("text not found"), never pass unseen.

    .venv/bin/python hack/knock-out-injector.py [--only TEXT]
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DECIDE = "injector/decide.py"
CONTROLLER = "injector/controller.py"
SELECTOR = "trust/selector.py"
REPORT = "trust/convergence.py"
PROPERTY = "tests/unit/injector/test_outcomes_property.py"
CLASSIFY = "tests/unit/injector/test_classification.py"
CONFIG_MAPS = "injector/configmaps.py"
TARGETS = "injector/targets.py"
DISTRIBUTOR = "distributor/controller.py"
RELEASE = "tests/unit/injector/test_configmaps.py"
RELEASES = "tests/unit/injector/test_release.py"
BOUNDS = "tests/unit/injector/test_tenant_bounds.py"
INJECTOR = "tests/unit/injector/test_controller.py"
DISTRIBUTE = "tests/unit/distributor/test_distribute.py"

# rule -> ([(file, text in it, what it becomes without the rule)], the tests that pin it)
RULES: dict[str, tuple[list[tuple[str, str, str]], list[str]]] = {
    "a selector too deeply nested is refused before it is decoded": (
        [
            (SELECTOR, "    if depth > MAX_DEPTH:\n", "    if False:\n"),
            (
                SELECTOR,
                "    except Exception as err:  # total: nothing",
                "    except ZeroDivisionError as err:  #",
            ),
        ],
        [PROPERTY, CLASSIFY],
    ),
    "a read or plan that raises is contained to its key": (
        [
            (
                DECIDE,
                "        return _plan(seen, bundles, memory, now)\n    except Exception as err:\n",
                "        return _plan(seen, bundles, memory, now)\n"
                "    except ZeroDivisionError as err:\n",
            )
        ],
        [CLASSIFY],
    ),
    "a write that raises anything is classified, not raised": (
        [
            (
                CONTROLLER,
                "            except Exception as err:  # every outcome is classified\n",
                "            except ApiError as err:  # every outcome is classified\n",
            )
        ],
        [PROPERTY],
    ),
    "failures in a row block the object at the bound": (
        [
            (
                CONTROLLER,
                "    blocking = failures >= decisions.FAILURE_BOUND\n",
                "    blocking = False\n",
            )
        ],
        [PROPERTY],
    ),
    "a refusal blocks the object at once": (
        [
            (
                CONTROLLER,
                "            replace(write.pending, blocked=reason),\n",
                "            replace(write.pending, blocked=None),\n",
            )
        ],
        [PROPERTY],
    ),
    "a write answered 404/409 counts as a failure (a webhook may answer so for ever)": (
        [
            (
                CONTROLLER,
                '    if result == "refused":  # the owner\'s to mend',
                '    if result == "gone":\n        return Settled(write.pending, memory)\n'
                '    if result == "refused":  # the owner\'s to mend',
            )
        ],
        [PROPERTY, CLASSIFY],
    ),
    "a blocked namespaced object is excused": (
        [
            (
                REPORT,
                "        excused = obj.blocked is not None and obj.namespaced\n",
                "        excused = False\n",
            )
        ],
        [PROPERTY],
    ),
    "an object that verifies nothing with a caBundle selects nothing": (
        [
            (
                DECIDE,
                "        held = bundle if KINDS_BY_NAME[target.kind].reads_when_not_applicable "
                'else ""\n',
                "        held = bundle\n",
            )
        ],
        [CLASSIFY],
    ),
    "an object holding nothing back is not named": (
        [
            (
                REPORT,
                "        if not self.selecting - self.holding:\n            return None\n",
                "",
            )
        ],
        [CLASSIFY],
    ),
    "an anchor is observed only when every cached bundle holding it is": (
        [
            (
                CONTROLLER,
                "            observed=observed - unobserved,\n",
                "            observed=observed,\n",
            )
        ],
        [CLASSIFY],
    ),
    "a cluster-scoped key whose plan failed keeps the report incomplete": (
        [(CONTROLLER, "        if planned.counted:\n", "        if True:\n")],
        [CLASSIFY],
    ),
    "a change of an object with a remembered failure re-drives it": (
        [
            (
                CONTROLLER,
                "        if old != new or (old.resource_version != new.resource_version "
                "and new.key in self._memory):\n",
                "        if old != new:\n",
            )
        ],
        [CLASSIFY],
    ),
    "a blocked object's back-off holds whatever the tenant rewrites": (
        [
            (
                DECIDE,
                "                and ((refusal.resource_version, refusal.value) == written "
                "or blocked_by(memory))\n",
                "                and (refusal.resource_version, refusal.value) == written\n",
            )
        ],
        [CLASSIFY],
    ),
    "retakes count in a row only within the contest window": (
        [
            (
                DECIDE,
                "                recent = contest.retakes and now - contest.last "
                "<= CONTEST_WINDOW\n",
                "                recent = True\n",
            )
        ],
        [CLASSIFY],
    ),
    "an emptied selection still holding old anchors selects what they are in now": (
        [
            (
                DECIDE,
                "            kept = frozenset().union(*(f for f in found if f & held)) "
                "or NOTHING_HELD\n",
                "            kept = NOTHING_HELD\n",
            )
        ],
        [CLASSIFY],
    ),
    "a released ConfigMap's ca.crt goes to the owner of its other data keys": (
        [
            (
                CONFIG_MAPS,
                '            found.append((CA_LEAF, OWNER_PATHS, f"data[{CA_KEY}]"))\n',
                '            found.append((CA_LEAF, (), f"data[{CA_KEY}]"))\n',
            )
        ],
        [RELEASE],
    ),
    "with no data key owned, the owner of its metadata takes ca.crt": (
        [
            (
                CONFIG_MAPS,
                'OWNER_PATHS: tuple[tuple[str, ...], ...] = (("f:data",), ("f:metadata",))\n',
                'OWNER_PATHS: tuple[tuple[str, ...], ...] = (("f:data",),)\n',
            )
        ],
        [RELEASE],
    ),
    "the truststore key is handed over only while the annotation names it": (
        [
            (
                CONFIG_MAPS,
                "            owner: tuple[tuple[str, ...], ...] = OWNER_PATHS if key == named "
                "else ()\n",
                "            owner: tuple[tuple[str, ...], ...] = OWNER_PATHS\n",
            )
        ],
        [RELEASE],
    ),
    "a released ConfigMap loses the annotations of ours our entry alone owns": (
        [
            (
                CONFIG_MAPS,
                "        present.append(key in annotations and owners == {True})\n",
                "        present.append(False)\n",
            )
        ],
        [RELEASES],
    ),
    "a map added whole to the owner's entry is guarded by the resourceVersion": (
        [
            (
                TARGETS,
                "    if any(len(hand.leaf) > 1 for hand in handover):\n",
                "    if False:\n",
            )
        ],
        [RELEASE],
    ),
    "a tenant's selector is kept canonical and bounded, never as its text": (
        [
            (
                TARGETS,
                "    if len(canonical) > MAX_SELECTOR:\n",
                "    if False:\n",
            )
        ],
        [BOUNDS],
    ),
    "a record keeps what it parsed of the selector, never the annotation's text": (
        [
            (
                TARGETS,
                "    return shared(selector_record(value)) if isinstance(value, str) else None\n",
                "    return shared(value) if isinstance(value, str) else None\n",
            )
        ],
        [BOUNDS],
    ),
    "every informer over tenant ConfigMaps lists in small pages": (
        [(CONFIG_MAPS, "    page_size=TENANT_PAGE,\n", "")],
        [BOUNDS],
    ),
    "the stable name is advised only where that bundle exists": (
        [
            (
                DECIDE,
                "    twin = stable is not None and any(\n",
                "    twin = stable is not None or any(\n",
            )
        ],
        [INJECTOR],
    ),
    "a namespace at its ConfigMap quota is an Event and a count, not a distributor error": (
        [(DISTRIBUTOR, "            if _over_quota(err):\n", "            if False:\n")],
        [DISTRIBUTE],
    ),
}

WORKERS = 3
"""Copies of the checkout, each running one rule's tests at a time."""

IGNORED = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", ".hypothesis", ".mypy_cache", ".ruff_cache", "*.egg-info"
)


def run(copy: Path, tests: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def knock_out(copy: Path, name: str, edits: list[tuple[str, str, str]], tests: list[str]) -> str:
    """Apply one rule's edits to `copy`, run its tests, restore; the line to print."""
    originals: dict[str, str] = {}
    try:
        for path, text, replacement in edits:
            current = (copy / path).read_text()
            originals.setdefault(path, current)
            if current.count(text) != 1:
                return f"MISSING   {name}: text not found once in {path}: {text!r}"
            (copy / path).write_text(current.replace(text, replacement))
        result = run(copy, tests)
    finally:
        for path, source in originals.items():
            (copy / path).write_text(source)
    if result.returncode == 0:
        return f"SURVIVED  {name}"
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAILED")]
    return f"killed    {name}: {failed[0][7:] if failed else result.stdout[-200:]}"


def main(argv: list[str]) -> int:
    only = argv[argv.index("--only") + 1] if "--only" in argv else ""
    rules = [(name, *rule) for name, rule in RULES.items() if only in name]
    workers = max(1, min(WORKERS, len(rules)))
    with tempfile.TemporaryDirectory(prefix="knock-out-injector-") as tmp:
        copies = [Path(tmp) / f"repo{i}" for i in range(workers)]
        for copy in copies:
            shutil.copytree(ROOT, copy, ignore=IGNORED)
        where = subprocess.run(
            [sys.executable, "-c", "import injector.decide as d; print(d.__file__)"],
            cwd=copies[0],
            env={**os.environ, "PYTHONPATH": str(copies[0])},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if not where.startswith(str(copies[0])):
            print(f"the copy's modules are not the ones imported ({where})")
            return 2
        free: queue.Queue[Path] = queue.Queue()
        for copy in copies:
            free.put(copy)

        def one(rule: tuple[str, list[tuple[str, str, str]], list[str]]) -> str:
            copy = free.get()
            try:
                return knock_out(copy, *rule)
            finally:
                free.put(copy)

        with ThreadPoolExecutor(workers) as pool:
            lines = list(pool.map(one, rules))
    for line in lines:
        print(line)
    killed = sum(line.startswith("killed") for line in lines)
    print(f"{killed} of {len(rules)} rules killed")
    return 0 if killed == len(rules) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

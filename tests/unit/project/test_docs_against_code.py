"""The documentation against the code, both ways: every command-line flag, command,
metric, alert, chart value and annotation the docs name exists with that spelling (and,
for `run`'s flags in docs/configuration.md's table, that default), and every one the code
defines is named in the docs. A failure says exactly what to write where.

The docs are README.md, SECURITY.md, docs/*.md and the chart's README (generated from
values.yaml by hack/chart-readme.py, so every chart value is documented there)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click
import yaml

from cli.main import main as cli

ROOT = Path(__file__).resolve().parents[3]
PAGES = [
    ROOT / "README.md",
    ROOT / "SECURITY.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "charts" / "service-serving-signer" / "README.md",
]
RUNTIME = ["kube", "trust", "signer", "publisher", "injector", "distributor", "managedca"]
RUNTIME += ["manager", "troubleshoot", "cli"]

# Flags the docs name that belong to other programs (kubectl, helm, crane, buildah, pip,
# kube-apiserver and kube-controller-manager, kubemark, the benchmarks, oras, cosign).
OTHER_PROGRAMS_FLAGS = {
    "--artifact-type", "--authorization-mode", "--build-arg", "--cert", "--configmaps",
    "--create-namespace", "--feature-gates", "--field-selector", "--for", "--force-conflicts",
    "--from-file", "--full-ref", "--help", "--ignore-not-found", "--isolation", "--key",
    "--min-compatibility-version", "--morph", "--namespace-sync-period", "--namespaces",
    "--no-deps", "--no-kdf-bomb", "--predicate", "--preserve-digests", "--prune",
    "--prune-allowlist", "--pull", "--require-hashes", "--reset-then-reuse-values",
    "--resource-quota-sync-period", "--reuse-values", "--runtime-config", "--scenario",
    "--server-side", "--set", "--show-managed-fields", "--size", "--source",
    "--storage-driver", "--strict", "--timeout", "--tls-cert-file", "--tls-private-key-file",
    "--type", "--use-host-image-service", "--wait", "--workdir", "--workers",
    "--dry-run", "--raw", "--replicas", "--n", "--versions", "--max-requests-inflight",
    "--max-mutating-requests-inflight", "--bloated", "--tenants", "--rounds", "--code",
    "--nodes", "--rate", "--pods", "--runs", "--rates", "--signers", "--noise-rate",
    "--pods-seconds",  # python -m bench.startup
    "--resync", "--changes",  # python -m bench.rotation_reach
    "--qps", "--burst",  # python -m bench.storm
    "--gil", "--nonblocking",  # py-spy record
}  # fmt: skip


def docs_text() -> str:
    return "\n".join(page.read_text() for page in PAGES)


def named(token: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(token)}(?![\w-])", text) is not None


def commands(command: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        if not sub.hidden:
            yield (*path, name)
            yield from commands(sub, (*path, name))


def command_of(path: tuple[str, ...]) -> click.Command:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


def flags() -> dict[str, set[str]]:
    """Every long option of every command: {"--flag": {"ca init", …}}."""
    found: dict[str, set[str]] = {}
    for path in [(), *commands(cli)]:
        for param in command_of(path).params:
            if isinstance(param, click.Option) and not param.hidden:
                for option in [*param.opts, *param.secondary_opts]:
                    if option.startswith("--"):
                        found.setdefault(option, set()).add(" ".join(path) or "(top level)")
    return found


def test_every_flag_of_every_command_is_documented() -> None:
    text = docs_text()
    missing = sorted(
        f"{flag} ({', '.join(sorted(where))})"
        for flag, where in flags().items()
        if not named(flag, text)
    )
    assert not missing, (
        "flags no page names; document each (run's in docs/configuration.md's table, the "
        f"other commands' in docs/cli.md): {missing}"
    )


def test_every_flag_the_docs_name_exists() -> None:
    ours = set(flags())
    unknown = sorted(
        {
            flag
            for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", docs_text())
            if flag not in ours and flag not in OTHER_PROGRAMS_FLAGS
        }
    )
    assert not unknown, (
        "flags the docs name that no service-serving-signer command defines: fix the "
        "spelling, or if another program's, add it to OTHER_PROGRAMS_FLAGS in "
        f"{Path(__file__).relative_to(ROOT)}: {unknown}"
    )


def shown_default(param: click.Parameter) -> str:
    default = param.default
    if isinstance(default, (tuple, list)):
        return ",".join(str(d) for d in default)
    if isinstance(default, bool):
        return "true" if default else "false"
    return str(default)


def test_the_configuration_table_gives_each_run_flag_its_default() -> None:
    """docs/configuration.md: a row `| `--flag` | `default` | … |` says what `run` does
    when the flag is not given."""
    run = command_of(("run",))
    by_flag = {o: p for p in run.params if isinstance(p, click.Option) for o in p.opts}
    wrong = []
    for flag, default in re.findall(
        r"^\| `(--[a-z0-9-]+)` \| `([^`]*)` \|",
        (ROOT / "docs" / "configuration.md").read_text(),
        re.M,
    ):
        assert flag in by_flag, f"docs/configuration.md: {flag} is not a flag of run"
        if shown_default(by_flag[flag]) != default:
            wrong.append(
                f"{flag}: documented `{default}`, run's is `{shown_default(by_flag[flag])}`"
            )
    assert not wrong, f"docs/configuration.md's defaults differ from run's: {wrong}"


def command_lines(text: str) -> Iterator[str]:
    """The lines of the code blocks, and each inline code span as one line."""
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        yield from block.splitlines()
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for span in re.findall(r"`([^`]+)`", prose):
        yield span.replace("\n", " ")


def test_every_command_is_documented_and_every_documented_command_exists() -> None:
    text = docs_text()
    ours = [" ".join(path) for path in commands(cli)]
    missing = [
        c
        for c in ours
        if not named(f"service-serving-signer {c}", text) and not named(f"`{c}", text)
    ]
    assert not missing, f"commands no page names (docs/cli.md lists them): {missing}"
    groups = {" ".join(p) for p in commands(cli) if isinstance(command_of(p), click.Group)}
    every = set(cli.commands)  # the hidden ones too (`demo`)
    unknown = set()
    # The program's name where a command starts: a line of a code block, an inline code
    # span, after `$ `, `&& `, `; `, `| ` or `(` (not `-n service-serving-signer …`).
    invocation = re.compile(
        r"(?:^\s*|\$ |&& |; |\| |\()service-serving-signer ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?"
    )
    for first, second in (m for line in command_lines(text) for m in invocation.findall(line)):
        if first not in every:
            unknown.add(first)
        elif first in groups and second and f"{first} {second}" not in ours:
            unknown.add(f"{first} {second}")
    assert not unknown, f"commands the docs name that the CLI does not have: {sorted(unknown)}"


FAMILIES = r"(?:service_serving_ca_controller|cabundle_injector|trust_distributor|workqueue)"
METRIC = re.compile(
    rf"\b({FAMILIES}_[a-z_]+|controller_sync_total|leader_election_master_status)\b"
)
# `…_managed_ca_phase`: the docs' shorthand for service_serving_ca_controller_…
SHORTHAND = re.compile(r"…(_[a-z][a-z_]+)")
WILDCARD = re.compile(rf"\b({FAMILIES}_)\*")
SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created")


def code_metrics() -> set[str]:
    """The metric families the code registers, read as the code writes their names in the
    modules that use prometheus_client: a literal, or f"{prefix}_…" with a `prefix` or
    `PREFIX` literal of the same module, or a local `gauge("…")` helper that prefixes it."""
    names: set[str] = set()
    prefixes: set[str] = set()
    for package in RUNTIME:
        for path in sorted((ROOT / package).rglob("*.py")):
            source = path.read_text()
            if "prometheus_client" not in source:
                continue
            local = dict(re.findall(r"\b(prefix|PREFIX)\s*=\s*\"([a-z_]+)\"", source))
            prefixes.update(local.values())
            for name in re.findall(r"f?\"([a-z_{}A-Z]+)\"", source):
                for variable, value in local.items():
                    name = name.replace("{" + variable + "}", value)
                names.add(name)
            if "def gauge(" in source and "PREFIX" in local:
                for helper in re.findall(r"\bgauge\(\s*\"([a-z_]+)\"", source):
                    names.add(f"{local['PREFIX']}_{helper}")
    # `controller_sync` is a Counter: prometheus_client adds `_total`. A prefix the names are
    # built from is no metric of its own.
    return {family(n) for n in names if METRIC.fullmatch(n) or n == "controller_sync"} - prefixes


def family(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix) and not name.endswith("_seconds" + suffix[:0]):
            return name.removesuffix(suffix)
    return name


def test_every_metric_is_documented_and_every_documented_metric_exists() -> None:
    code = {family(n) for n in code_metrics()}
    assert len(code) > 20, f"the metric reader found too few names: {sorted(code)}"
    text = docs_text()
    documented = {family(m) for m in METRIC.findall(text)}
    documented |= {family("service_serving_ca_controller" + m) for m in SHORTHAND.findall(text)}
    documented = {d for d in documented if not d.endswith("_")}
    wildcard = set(WILDCARD.findall(text))
    missing = sorted(
        n for n in code if n not in documented and not any(n.startswith(w) for w in wildcard)
    )
    assert not missing, (
        "metrics the code registers that no page names; add each to docs/operate.md's "
        f"metric table (or the page of its controller): {missing}"
    )
    unknown = sorted(documented - code)
    assert not unknown, f"metrics the docs name that the code does not register: {unknown}"


def alerts() -> list[str]:
    rules = yaml.safe_load((ROOT / "config" / "prometheus" / "prometheus_rule.yaml").read_text())
    return [r["alert"] for g in rules["spec"]["groups"] for r in g["rules"] if "alert" in r]


def test_every_alert_is_in_operates_table_and_every_documented_alert_exists() -> None:
    table = (ROOT / "docs" / "operate.md").read_text()
    missing = [a for a in alerts() if not named(f"`{a}`", table)]
    assert not missing, (
        "alerts of config/prometheus/prometheus_rule.yaml missing from docs/operate.md's "
        f"alert table (a row `| `Name` | fires when |` each): {missing}"
    )
    unknown = sorted(
        set(re.findall(r"\bServiceServingSigner[A-Z][A-Za-z]+", docs_text())) - set(alerts())
    )
    assert not unknown, f"alerts the docs name that config/prometheus does not define: {unknown}"


def value_paths(values: dict[str, object], prefix: str = "") -> Iterator[str]:
    for key, value in values.items():
        yield prefix + key
        if isinstance(value, dict):
            yield from value_paths(value, f"{prefix}{key}.")


def test_every_chart_value_the_docs_name_exists() -> None:
    values = yaml.safe_load(
        (ROOT / "charts" / "service-serving-signer" / "values.yaml").read_text()
    )
    paths = set(value_paths(values))
    tops = {p for p in paths if "." not in p and isinstance(values[p], dict)}
    unknown = set()
    for token in re.findall(r"`([a-zA-Z]+(?:\.[a-zA-Z]+)+)(?:=[^`]*)?`", docs_text()):
        first, second = token.split(".")[:2]
        # injector.decide is a module, image.json a file: not values.
        module = ROOT / first / second
        if module.with_suffix(".py").is_file() or (module / "__init__.py").is_file():
            continue
        if second == "json":
            continue
        if first in tops and token not in paths:
            unknown.add(token)
    assert not unknown, (
        f"chart values the docs name that values.yaml does not have: {sorted(unknown)}"
    )


ANNOTATION = re.compile(r"service-serving-signer/[a-z][a-z0-9-]*")
NOT_ANNOTATIONS = {
    "service-serving-signer/service-serving-signer",  # namespace/name
    "service-serving-signer/service-serving-signer-managed-ca",
    "service-serving-signer/ca",  # a mount directory
    "service-serving-signer/trust-bundle",
    "service-serving-signer/controlplane",  # the cache directory
    "service-serving-signer/traefik",
    "service-serving-signer/image",
    "service-serving-signer/tools",
    "service-serving-signer/templates",
    "service-serving-signer/files",
    "service-serving-signer/values",
}


def code_annotations() -> set[str]:
    found: set[str] = set()
    for package in RUNTIME:
        for path in sorted((ROOT / package).rglob("*.py")):
            source = path.read_text()
            found.update(re.findall(r"\"(service-serving-signer/[a-z][a-z0-9-]*)\"", source))
            # KEY = PREFIX + "name", PREFIX being "service-serving-signer/" (here or imported
            # as ANNOTATION_PREFIX).
            names = {"ANNOTATION_PREFIX"}
            names |= set(re.findall(r"\b(\w*PREFIX)\s*=\s*\"service-serving-signer/\"", source))
            for name in names:
                found.update(
                    "service-serving-signer/" + k
                    for k in re.findall(rf"\b{name}\s*\+\s*\"([a-z][a-z0-9-]*)\"", source)
                )
    return found - NOT_ANNOTATIONS


def test_every_annotation_and_label_is_documented_and_every_documented_one_exists() -> None:
    text = docs_text()
    code = code_annotations()
    # The managed CA's keys are written `ca-phase` on its page, under their prefix.
    missing = sorted(
        a
        for a in code
        if not named(a, text)
        and f"`{a.split('/', 1)[1]}" not in text
        and f"…/{a.split('/', 1)[1]}" not in text
    )
    assert not missing, (
        "annotation and label keys the code reads or writes that no page names "
        f"(docs/reference.md or the controller's page): {missing}"
    )
    documented = {a for a in ANNOTATION.findall(text) if not a.endswith("-")}
    unknown = sorted(
        a
        for a in documented - code - NOT_ANNOTATIONS
        if not any(a.startswith(n + "/") for n in NOT_ANNOTATIONS)
    )
    assert not unknown, f"annotation keys the docs name that the code does not use: {unknown}"

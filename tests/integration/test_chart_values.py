"""The chart refuses exactly what `service-serving-signer run` refuses, value by value.

For each value below, `helm template` (values.schema.json and the templates' checks) is
asked, and so is the binary's own validation — click's parsing of `run`'s flags and
`manager.options.Options` — on the flags the chart renders with that value: both accept,
or both refuse. A value the chart accepts and `run` refuses is a release that
crash-loops; the other way round is a setting the chart withholds. helm is built from Go
modules (controlplane/binaries.py); no cluster is needed."""

from __future__ import annotations

from typing import Any

import click
import pytest

from cli.common import StartupError
from cli.main import build_options
from cli.main import main as cli
from manager.options import LOG_FORMATS
from tests.integration.chart_harness import CHART, NAMESPACE, RELEASE, docs, helm
from trust import keys

MANAGED = ("managedCA.enabled=true",)
FLAGS = {
    "signerName": "--signer-name",
    "clusterServiceDomain": "--cluster-service-domain",
    "managedCA.secretName": "--managed-ca-secret-name",
    "signingSecret.name": "--managed-ca-adopt-secret-name",  # with managedCA.enabled
    "managedCA.keyType": "--managed-ca-key-type",
    "managedCA.lifetime": "--managed-ca-lifetime",
    "managedCA.rotateAt": "--managed-ca-rotate-at",
    "managedCA.propagationDelay": "--managed-ca-propagation-delay",
    "managedCA.retireMargin": "--managed-ca-retire-margin",
    "managedCA.keepPrevious": "--managed-ca-keep-previous",
    "managedCA.waitForInjector": "--managed-ca-wait-for-injector",
    "logFormat": "--log-format",
}
LONG_DOMAIN = ".".join(["a" * 50] * 5) + ".io"  # 258 characters, labels of 50

# (value path, value as --set-string takes it, or a number for --set-json; the other values)
CASES: list[tuple[str, Any, tuple[str, ...]]] = [
    ("signerName", "kubernetes.io/service-serving", ()),
    ("signerName", "example.com/serving", ()),
    ("signerName", "example.com/serving.v2-beta", ()),
    ("signerName", "example/serving", ()),
    ("signerName", "example.com/Serving_X", ()),
    ("signerName", "Example.com/serving", ()),
    ("signerName", "example.com/", ()),
    ("signerName", "example.com/a/b", ()),
    ("signerName", "-example.com/serving", ()),
    ("signerName", f"{'a' * 64}.com/serving", ()),
    ("signerName", f"{LONG_DOMAIN}/serving", ()),
    ("clusterServiceDomain", "cluster.local", ()),
    ("clusterServiceDomain", "Cluster_Local", ()),
    ("managedCA.secretName", "my-ca", MANAGED),
    ("managedCA.secretName", "My_CA", MANAGED),
    ("managedCA.secretName", "service-serving-signer-ca", MANAGED),
    ("signingSecret.name", "platform-ca", MANAGED),
    ("signingSecret.name", "service-serving-signer-managed-ca", MANAGED),
    ("signingSecret.name", "Platform_CA", MANAGED),
    # Every key type of the table (trust.keys.KEYS): a CA-only, leaf-only or new row too.
    *[("managedCA.keyType", spec.name, MANAGED) for spec in keys.KEYS],
    ("managedCA.keyType", "DSA", MANAGED),
    ("managedCA.lifetime", "8760h", MANAGED),
    ("managedCA.lifetime", "525600m", MANAGED),
    ("managedCA.lifetime", "49h", MANAGED),
    ("managedCA.lifetime", "48h", MANAGED),
    ("managedCA.lifetime", "24h", MANAGED),
    ("managedCA.lifetime", "1y", MANAGED),
    ("managedCA.lifetime", "8760", MANAGED),
    ("managedCA.lifetime", "1000.5h", MANAGED),
    ("managedCA.lifetime", "-8760h", MANAGED),
    ("managedCA.rotateAt", 0.5, MANAGED),
    ("managedCA.rotateAt", 0.97, MANAGED),
    ("managedCA.rotateAt", 0.999, MANAGED),
    ("managedCA.rotateAt", 0, MANAGED),
    ("managedCA.rotateAt", 1, MANAGED),
    ("managedCA.propagationDelay", "10m", MANAGED),
    ("managedCA.propagationDelay", "6m30s", MANAGED),
    ("managedCA.propagationDelay", "6m29s", MANAGED),
    ("managedCA.propagationDelay", "1.5h", MANAGED),
    ("managedCA.propagationDelay", "1m", (*MANAGED, "managedCA.allowShortPropagationDelay=true")),
    (
        "managedCA.propagationDelay",
        "1m",
        (*MANAGED, "extraArgs={--managed-ca-allow-short-propagation-delay}"),
    ),
    ("managedCA.propagationDelay", "-1m", (*MANAGED, "managedCA.allowShortPropagationDelay=true")),
    # With the unlinked bundle published the least delay is 2m (the value or the flag).
    ("managedCA.propagationDelay", "2m", (*MANAGED, "unlinkedBundle.enabled=true")),
    ("managedCA.propagationDelay", "119s", (*MANAGED, "unlinkedBundle.enabled=true")),
    ("managedCA.propagationDelay", "2m", (*MANAGED, "extraArgs={--publish-unlinked-bundle}")),
    ("managedCA.retireMargin", "1h", MANAGED),
    ("managedCA.retireMargin", "5m", MANAGED),
    ("managedCA.retireMargin", "4m59s", MANAGED),
    ("managedCA.retireMargin", "0.1h", MANAGED),
    ("managedCA.keepPrevious", 2, MANAGED),
    ("managedCA.keepPrevious", -1, MANAGED),
    ("managedCA.waitForInjector", "true", MANAGED),
    ("managedCA.waitForInjector", "maybe", MANAGED),
    *[("logFormat", log_format, ()) for log_format in LOG_FORMATS],
    ("logFormat", "logfmt", ()),
    # The room after the rotation point counts --max-certificate-lifetime from extraArgs.
    ("managedCA.lifetime", "30h", (*MANAGED, "extraArgs={--max-certificate-lifetime=12h}")),
    ("managedCA.lifetime", "24h", (*MANAGED, "extraArgs={--max-certificate-lifetime=12h}")),
]


def render(
    *sets: str, strings: tuple[str, ...] = (), numbers: tuple[str, ...] = ()
) -> tuple[list[str] | None, str]:
    """The signer container's args as the chart renders them, or None and helm's error."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for value in sets:
        args += ["--set", value]
    for value in strings:
        args += ["--set-string", value]
    for value in numbers:  # --set reads 0.5 as a string; JSON keeps it a number
        args += ["--set-json", value]
    result = helm(*args)
    if result.returncode != 0:
        return None, result.stderr
    (deployment,) = [
        o
        for o in docs(result.stdout)
        if o["kind"] == "Deployment" and o["metadata"]["name"] == RELEASE
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return [str(a) for a in container["args"]], ""


def run_refuses(args: list[str]) -> str | None:
    """What `service-serving-signer run ARGS` says before it connects, or None."""
    command = cli.commands["run"]
    try:
        context = command.make_context("run", list(args))
        build_options(dict(context.params))
    except (click.ClickException, StartupError) as err:
        return err.format_message()
    return None


def with_flag(args: list[str], flag: str, value: str) -> list[str]:
    replaced = [a for a in args if not a.startswith(f"{flag}=")]
    return [*replaced, f"{flag}={value}"]


@pytest.mark.parametrize(("path", "value", "others"), CASES)
def test_the_chart_refuses_a_value_exactly_when_run_refuses_it(
    path: str, value: Any, others: tuple[str, ...]
) -> None:
    base, error = render(*others)
    assert base is not None, f"the base values render: {error}"
    text = value if isinstance(value, str) else repr(value)
    flags = with_flag(base, FLAGS[path], text)
    if isinstance(value, str):
        rendered, chart_error = render(*others, strings=(f"{path}={value}",))
    else:
        rendered, chart_error = render(*others, numbers=(f"{path}={value}",))
    run_error = run_refuses(flags)
    if rendered is not None:
        assert f"{FLAGS[path]}={text}" in rendered or path == "managedCA.waitForInjector"
        run_error = run_refuses(rendered)
    assert (rendered is None) == (run_error is not None), (
        f"{path}={value!r} (with {others}): the chart "
        + (f"refuses ({chart_error.strip()})" if rendered is None else "accepts")
        + ", run "
        + (f"refuses ({run_error})" if run_error else "accepts")
    )

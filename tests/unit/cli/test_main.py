"""The command line: flag syntax, environment variables, one-line start-up errors."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result
from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key

import manager.app
from cli.main import env_name, main
from manager.options import BindAddress, Options

FILES = [
    "--service-serving-key=/ca/tls.key",
    "--service-serving-cert=/ca/tls.crt",
    "--service-serving-trust-bundle=/bundle/trust-bundle.pem",
]


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[Options]:
    """Replace the process with a recorder of the options it would run with."""
    seen: list[Options] = []

    def fake_run(opts: Options, **_: Any) -> int:
        seen.append(opts)
        return 0

    monkeypatch.setattr(manager.app, "run", fake_run)
    monkeypatch.setattr("manager.logs.configure", lambda *a, **k: None)
    return seen


def invoke(args: list[str], env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, args, env=env, prog_name="service-serving-signer")


def run_with(captured: list[Options], *args: str, env: dict[str, str] | None = None) -> Options:
    result = invoke(["run", *args], env)
    assert result.exit_code == 0, result.output + result.stderr
    return captured[-1]


def test_run_uses_spec_defaults(captured: list[Options]) -> None:
    opts = run_with(captured, *FILES)
    assert opts.service_serving_key == "/ca/tls.key"
    assert opts.leader_elect is True
    assert opts.controllers == {"signer", "publisher"}
    assert opts.metrics_bind_address == BindAddress("", 10358)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], True),
        (["--leader-elect"], True),
        (["--leader-elect=true"], True),
        (["--leader-elect=false"], False),
        (["--leader-elect=False"], False),
        (["--leader-elect=0"], False),
    ],
)
def test_leader_elect_accepts_kcm_boolean_syntax(
    captured: list[Options], args: list[str], expected: bool
) -> None:
    assert run_with(captured, *FILES, *args).leader_elect is expected


def test_flags_take_equals_or_space_separated_values(captured: list[Options]) -> None:
    opts = run_with(
        captured,
        *FILES,
        "--max-certificate-lifetime",
        "90m",
        "--leader-elect-lease-duration=30s",
        "--leader-elect-renew-deadline=20s",
        "--controllers=*,-publisher",
        "--metrics-bind-address=127.0.0.1:9000",
        "--health-probe-bind-address=0",
        "--pcr-api-version=v1beta1",
        "--signer-name=example.com/serving",
        "--cluster-service-domain=corp.example",
        "--concurrent-syncs=8",
        "--kube-api-qps=5",
        "--kube-api-burst=10",
        "--leader-elect-resource-namespace=signers",
        "--leader-elect-resource-name=my-signer",
        "--log-format=json",
        "-v",
        "4",
    )
    assert opts.max_certificate_lifetime == 5400
    assert (opts.leader_elect_lease_duration, opts.leader_elect_renew_deadline) == (30, 20)
    assert opts.controllers == {"signer"}
    assert opts.metrics_bind_address == BindAddress("127.0.0.1", 9000)
    assert opts.health_probe_bind_address is None
    assert opts.pcr_api_version == "v1beta1"
    assert opts.signer_name == "example.com/serving"
    assert opts.cluster_service_domain == "corp.example"
    assert (opts.concurrent_syncs, opts.kube_api_qps, opts.kube_api_burst) == (8, 5, 10)
    assert opts.leader_elect_resource_namespace == "signers"
    assert opts.leader_elect_resource_name == "my-signer"
    assert (opts.log_format, opts.verbosity) == ("json", 4)


def test_klog_style_verbosity_flag(captured: list[Options]) -> None:
    assert run_with(captured, *FILES, "--v=3").verbosity == 3
    assert run_with(captured, *FILES, "-v2").verbosity == 2
    assert run_with(captured, *FILES, "-v=6").verbosity == 6
    assert run_with(captured, *FILES, "-v", "5").verbosity == 5


def test_every_run_flag_has_its_prefixed_environment_variable(captured: list[Options]) -> None:
    env = {
        "SERVICE_SERVING_SIGNER_SERVICE_SERVING_KEY": "/env/tls.key",
        "SERVICE_SERVING_SIGNER_SERVICE_SERVING_CERT": "/env/tls.crt",
        "SERVICE_SERVING_SIGNER_SERVICE_SERVING_TRUST_BUNDLE": "/env/bundle.pem",
        "SERVICE_SERVING_SIGNER_LEADER_ELECT": "false",
        "SERVICE_SERVING_SIGNER_MAX_CERTIFICATE_LIFETIME": "2h",
        "SERVICE_SERVING_SIGNER_CONTROLLERS": "publisher",
        "SERVICE_SERVING_SIGNER_METRICS_BIND_ADDRESS": "0",
        "SERVICE_SERVING_SIGNER_LEADER_ELECT_RESOURCE_NAMESPACE": "from-env",
        "SERVICE_SERVING_SIGNER_V": "5",
    }
    opts = run_with(captured, env=env)
    assert opts.service_serving_key == "/env/tls.key"
    assert opts.service_serving_trust_bundle == "/env/bundle.pem"
    assert opts.leader_elect is False
    assert opts.max_certificate_lifetime == 7200
    assert opts.controllers == {"publisher"}
    assert opts.metrics_bind_address is None
    assert opts.leader_elect_resource_namespace == "from-env"
    assert opts.verbosity == 5


def test_flag_beats_environment_variable(captured: list[Options]) -> None:
    env = {"SERVICE_SERVING_SIGNER_CONCURRENT_SYNCS": "9"}
    assert run_with(captured, *FILES, "--concurrent-syncs=2", env=env).concurrent_syncs == 2


def test_help_lists_environment_variables() -> None:
    result = invoke(["run", "--help"])
    assert result.exit_code == 0
    text = "".join(result.output.split())
    assert env_name("--service-serving-key") in text
    assert "SERVICE_SERVING_SIGNER_LEADER_ELECT_RETRY_PERIOD" in text


# A table of bad values and the message each gets, as in test_options.py.
@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--max-certificate-lifetime=24"], "missing unit"),
        (["--max-certificate-lifetime=1d"], "invalid duration"),
        (["--max-certificate-lifetime=48h"], "exceeds 24h"),
        (["--max-certificate-lifetime=30m"], "1h minimum"),
        (["--leader-elect=maybe"], "--leader-elect"),
        (["--controllers=signer,bogus"], "unknown controller 'bogus'"),
        (["--metrics-bind-address=10358"], "--metrics-bind-address"),
        (["--pcr-api-version=v2"], "--pcr-api-version"),
        (["--leader-elect-renew-deadline=20s"], "--leader-elect-lease-duration"),
        (["--no-such-flag"], "no-such-flag"),
    ],
)
def test_bad_options_fail_with_one_error_line_and_status_1(
    captured: list[Options], args: list[str], fragment: str
) -> None:
    result = invoke(["run", *FILES, *args])
    assert result.exit_code == 1
    assert captured == []
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert fragment in lines[0]
    assert "Traceback" not in result.output


def test_missing_required_file_flag_is_one_line(captured: list[Options]) -> None:
    result = invoke(["run", FILES[0], FILES[2]])
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1
    assert "--service-serving-cert" in result.stderr


def test_key_and_cert_must_be_different_files(captured: list[Options]) -> None:
    result = invoke(
        [
            "run",
            "--service-serving-key=/ca/pem",
            "--service-serving-cert=/ca/pem",
            "--service-serving-trust-bundle=/b",
        ]
    )
    assert result.exit_code == 1
    assert "different file" in result.stderr


def test_startup_failure_from_the_process_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_run(opts: Options, **_: Any) -> int:
        raise manager.app.StartupFailure("/ca/tls.key: key does not match the certificate")

    monkeypatch.setattr(manager.app, "run", failing_run)
    monkeypatch.setattr("manager.logs.configure", lambda *a, **k: None)
    result = invoke(["run", *FILES])
    assert result.exit_code == 1
    assert result.stderr == "error: /ca/tls.key: key does not match the certificate\n"


@pytest.mark.parametrize("args", [[], ["--workdir", "/tmp/demo"]], ids=["bare", "workdir"])
def test_demo_says_it_is_a_development_command_and_where_it_runs(args: list[str]) -> None:
    result = invoke(["demo", *args])
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: demo needs the local control plane")
    assert "`make demo` (python -m controlplane.demo)" in result.stderr
    assert "demo" not in invoke(["--help"]).output


def test_ca_init_writes_a_usable_ca(tmp_path: Path) -> None:
    out = tmp_path / "ca"
    result = invoke(["ca", "init", "--out", str(out)])
    assert result.exit_code == 0, result.output
    key = out / "ca.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    cert = x509.load_pem_x509_certificate((out / "ca.crt").read_bytes())
    private = load_pem_private_key(key.read_bytes(), None)
    assert cert.public_key() == private.public_key()
    bundle = x509.load_pem_x509_certificates((out / "trust-bundle.pem").read_bytes())
    assert bundle == [cert]
    assert "BEGIN" not in result.output  # never prints key material
    assert f"--service-serving-key={key}" in result.output


def test_ca_init_refuses_to_overwrite_with_one_line(tmp_path: Path) -> None:
    assert invoke(["ca", "init", "--out", str(tmp_path)]).exit_code == 0
    result = invoke(["ca", "init", "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1
    assert "refusing to overwrite" in result.stderr
    assert invoke(["ca", "init", "--out", str(tmp_path), "--force"]).exit_code == 0


def test_ca_init_with_intermediate_chains_to_the_root(tmp_path: Path) -> None:
    assert invoke(["ca", "init", "--out", str(tmp_path), "--intermediate"]).exit_code == 0
    chain = x509.load_pem_x509_certificates((tmp_path / "ca.crt").read_bytes())
    (root,) = x509.load_pem_x509_certificates((tmp_path / "trust-bundle.pem").read_bytes())
    assert len(chain) == 1
    assert chain[0].issuer == root.subject != chain[0].subject


def test_bundle_resolve_needs_exactly_one_selector_kind() -> None:
    for args in ([], ["--name=a", "--signer-name=x/y"], ["--name=a", "--selector=a=b"]):
        result = invoke(["bundle", "resolve", *args])
        assert result.exit_code == 1
        assert result.stderr.startswith("error: bundle resolve:")
        assert result.stderr.count("\n") == 1


def test_version_prints_name_and_version() -> None:
    result = invoke(["version"])
    assert result.exit_code == 0
    assert result.output.startswith("service-serving-signer ")
    assert '"version"' in invoke(["version", "-o", "json"]).output


def test_waiting_resync_period_defaults_to_5m_and_reads_its_flag_and_env_var(
    captured: list[Options],
) -> None:
    assert run_with(captured, *FILES).waiting_resync_period == 300
    assert run_with(captured, *FILES, "--waiting-resync-period=90s").waiting_resync_period == 90
    env = {"SERVICE_SERVING_SIGNER_WAITING_RESYNC_PERIOD": "10m"}
    assert run_with(captured, *FILES, env=env).waiting_resync_period == 600
    result = invoke(["run", *FILES, "--waiting-resync-period=0s"])
    assert result.exit_code != 0
    assert "--waiting-resync-period" in result.output + result.stderr


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found += _commands(command, (*path, name))
        else:
            found.append((*path, name))
    return found


@pytest.mark.parametrize("path", _commands(main), ids=lambda p: " ".join(p) or "main")
def test_every_command_takes_h_as_well_as_help(path: tuple[str, ...]) -> None:
    short, long = invoke([*path, "-h"]), invoke([*path, "--help"])
    assert short.exit_code == 0, short.output + short.stderr
    assert short.output == long.output
    assert "Usage:" in short.output


@pytest.mark.parametrize("path", _commands(main)[1:], ids=" ".join)
def test_a_command_made_on_its_own_takes_h_too(path: tuple[str, ...]) -> None:
    """Not only through the group's context: click caches a command's help option on
    first use, so the first context made for it must not fix it to `--help` alone."""
    command = _command(path)
    with pytest.raises(click.exceptions.Exit):
        command.make_context(path[-1], ["-h"], resilient_parsing=False)


def _command(path: tuple[str, ...]) -> click.Command:
    command: click.Command = main
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


@pytest.mark.parametrize("path", _commands(main), ids=lambda p: " ".join(p) or "main")
def test_every_flag_says_what_it_does(path: tuple[str, ...]) -> None:
    command = _command(path)
    silent = [
        p.opts[0]
        for p in command.params
        if isinstance(p, click.Option) and not p.hidden and not (p.help or "").strip()
    ]
    assert silent == []


def test_version_flag_prints_what_the_version_command_prints() -> None:
    result = invoke(["--version"])
    assert result.exit_code == 0
    assert result.output == invoke(["version", "--client"]).output
    assert result.output.startswith("service-serving-signer ")


def test_logging_format_is_component_bases_name_and_log_format_its_alias(
    captured: list[Options],
) -> None:
    assert run_with(captured, *FILES, "--logging-format=json").log_format == "json"
    assert run_with(captured, *FILES, "--log-format=json").log_format == "json"
    for variable in ("LOGGING_FORMAT", "LOG_FORMAT"):
        env = {f"SERVICE_SERVING_SIGNER_{variable}": "json"}
        assert run_with(captured, *FILES, env=env).log_format == "json"
    result = invoke(["run", *FILES, "--logging-format=xml"])
    assert result.exit_code == 1
    assert "--logging-format" in result.stderr


def _keys(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [k for key, item in value.items() for k in (key, *_keys(item))]
    if isinstance(value, list):
        return [k for item in value for k in _keys(item)]
    return []


def test_version_json_keys_are_camel_case_like_kubectl() -> None:
    result = invoke(["version", "-o", "json"])
    keys = _keys(json.loads(result.output))
    assert keys
    assert [k for k in keys if not re.fullmatch(r"[a-z]+(?:[A-Z][a-z0-9]*)*", k)] == []


def test_ca_init_gives_every_ca_its_own_common_name(tmp_path: Path) -> None:
    names = []
    for directory in ("one", "two", "three"):
        assert invoke(["ca", "init", "--out", str(tmp_path / directory)]).exit_code == 0
        cert = x509.load_pem_x509_certificate((tmp_path / directory / "ca.crt").read_bytes())
        names.append(cert.subject.rfc4514_string())
    assert len(set(names)) == 3, names
    assert all(name.startswith("CN=service-serving-signer") for name in names)


def test_ca_init_with_intermediate_names_root_and_intermediate_apart(tmp_path: Path) -> None:
    runs = [tmp_path / "a", tmp_path / "b"]
    subjects: list[x509.Name] = []
    for out in runs:
        assert invoke(["ca", "init", "--out", str(out), "--intermediate"]).exit_code == 0
        (chain,) = x509.load_pem_x509_certificates((out / "ca.crt").read_bytes())
        (root,) = x509.load_pem_x509_certificates((out / "trust-bundle.pem").read_bytes())
        subjects += [chain.subject, root.subject]
    assert len(set(subjects)) == 4


def test_ca_init_overwrite_message_names_the_files_and_force(tmp_path: Path) -> None:
    assert invoke(["ca", "init", "--out", str(tmp_path)]).exit_code == 0
    result = invoke(["ca", "init", "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert "ca.key" in result.stderr
    assert "--force" in result.stderr


def test_ca_init_needs_no_force_in_an_existing_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "unrelated.txt").write_text("kept")
    assert invoke(["ca", "init", "--out", str(tmp_path)]).exit_code == 0
    assert (tmp_path / "unrelated.txt").read_text() == "kept"


def test_bundle_resolve_prints_pem_and_names_an_unmatched_selector_as_json(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert invoke(["ca", "init", "--out", str(tmp_path)]).exit_code == 0
    pem = (tmp_path / "trust-bundle.pem").read_text()
    bundle = {
        "metadata": {"name": "example.com:serving:a", "labels": {"rotation": "current"}},
        "spec": {"signerName": "example.com/serving", "trustBundle": pem},
    }
    monkeypatch.setattr("cli.main._list_bundles", lambda *a, **k: [bundle])
    found = invoke(["bundle", "resolve", "--signer-name=example.com/serving", "--selector="])
    assert found.exit_code == 0, found.stderr
    assert found.output == pem
    missed = invoke(
        ["bundle", "resolve", "--signer-name=example.com/serving", "-l", "rotation=next"]
    )
    assert missed.exit_code == 1
    assert "{'" not in missed.stderr  # no Python dict
    shown = re.search(r"selector (\{.*\}) matched zero", missed.stderr)
    assert shown is not None, missed.stderr
    assert json.loads(shown.group(1)) == {
        "signerName": "example.com/serving",
        "labelSelector": {"matchLabels": {"rotation": "next"}},
    }


@pytest.mark.parametrize(
    ("controllers", "lease"),
    [
        ("*", "service-serving-signer"),
        ("signer,publisher", "service-serving-signer"),
        ("injector", "service-serving-signer-injector"),
        ("signer", "service-serving-signer-signer"),
        ("publisher", "service-serving-signer-publisher"),
        ("*,injector", "service-serving-signer-injector-publisher-signer"),
    ],
)
def test_each_controller_set_elects_on_its_own_default_lease(
    captured: list[Options], controllers: str, lease: str
) -> None:
    """`run --controllers=injector` beside the signer's Deployment must not wait for ever
    on the signer's Lease: without --leader-elect-resource-name each set of
    controllers has its own Lease; the default set keeps the historical name."""
    opts = run_with(captured, *FILES, f"--controllers={controllers}")
    assert opts.leader_elect_resource_name == lease


def test_an_explicit_lease_name_wins_over_the_controller_set_default(
    captured: list[Options],
) -> None:
    opts = run_with(captured, *FILES, "--controllers=injector", "--leader-elect-resource-name=x")
    assert opts.leader_elect_resource_name == "x"

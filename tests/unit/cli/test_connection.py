"""kubectl's conventions on every command that reads the cluster: credentials found as
kubectl finds them (flag, $KUBECONFIG, ~/.kube/config, then in-cluster), `--context`,
`-n` with one meaning, and one-line errors naming the file or the server."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

import cli.common
from cli.main import main
from tests.unit.cli.helpers import kubeconfig
from tests.unit.fakeapi import FakeApi

# Every command that reads the cluster, with the arguments it needs.
CLUSTER_COMMANDS = [
    ["status"],
    ["explain", "--all"],
    ["ca", "status"],
    ["ca", "rotate"],
    ["bundle", "resolve", "--signer-name=example.com/serving"],
]


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi().start()
    for version in ("v1",):
        fake.discovery[f"/apis/certificates.k8s.io/{version}"] = {
            "kind": "APIResourceList",
            "resources": [{"name": "podcertificaterequests"}, {"name": "clustertrustbundles"}],
        }
    yield fake
    fake.stop()


@pytest.fixture
def in_a_pod(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An in-cluster ServiceAccount whose API server address is dead, and no home
    kubeconfig."""
    token = tmp_path / "sa-token"
    token.write_text("in-cluster-token")
    monkeypatch.setattr(cli.common, "IN_CLUSTER_TOKEN", token)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(_dead_port()))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KUBECONFIG", raising=False)


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def invoke(args: list[str]) -> Result:
    return CliRunner().invoke(main, args)


@pytest.mark.usefixtures("in_a_pod")
@pytest.mark.parametrize("command", CLUSTER_COMMANDS, ids=" ".join)
def test_every_command_prefers_kubeconfig_to_in_cluster_credentials(
    command: list[str], api: FakeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "kc", api.url)))
    result = invoke(command)
    assert api.requests, f"{command} did not use $KUBECONFIG: {result.stderr}"
    assert "cannot reach" not in result.stderr


@pytest.mark.usefixtures("in_a_pod")
@pytest.mark.parametrize("command", CLUSTER_COMMANDS, ids=" ".join)
def test_home_kubeconfig_comes_before_in_cluster(
    command: list[str], api: FakeApi, tmp_path: Path
) -> None:
    home = tmp_path / "home" / ".kube"
    home.mkdir(parents=True)
    kubeconfig(home / "config", api.url)
    result = invoke(command)
    assert api.requests, f"{command} did not use ~/.kube/config: {result.stderr}"


# The commands that read no workload: they refuse -n, and their help does not offer it.
SIGNER_COMMANDS = [["ca", "status"], ["ca", "rotate"], ["ca", "skip-consumers"], ["version"]]


@pytest.mark.parametrize("command", CLUSTER_COMMANDS, ids=" ".join)
def test_every_command_takes_kubeconfig_context_and_namespace(command: list[str]) -> None:
    """Each cluster command lists --kubeconfig, --context and -o; -n only where it is
    read (the signer's commands take --signer-namespace instead)."""
    result = invoke([*command[:2], "--help"] if command[0] != "status" else ["status", "--help"])
    assert result.exit_code == 0
    for flag in ("--kubeconfig", "--context", "-o, --output"):
        assert flag in result.stdout, (command, flag)
    assert ("-n, --namespace" in result.stdout) == (command[:2] not in SIGNER_COMMANDS)


@pytest.mark.parametrize("command", SIGNER_COMMANDS, ids=" ".join)
def test_commands_that_refuse_n_do_not_list_it(command: list[str]) -> None:
    result = invoke([*command, "--help"])
    assert result.exit_code == 0
    assert "--namespace" not in result.stdout
    assert "--signer-namespace" in result.stdout


@pytest.mark.parametrize("command", CLUSTER_COMMANDS, ids=" ".join)
def test_a_missing_kubeconfig_is_named(command: list[str], tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "config"
    result = invoke([*command, f"--kubeconfig={missing}"])
    assert result.exit_code == 1
    assert result.stderr == f"error: kubeconfig {missing}: no such file\n"


@pytest.mark.usefixtures("in_a_pod")
def test_kubeconfig_files_that_do_not_exist_are_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path}/a:{tmp_path}/b")
    result = invoke(["status"])
    assert result.exit_code == 1
    assert result.stderr == f"error: $KUBECONFIG={tmp_path}/a:{tmp_path}/b: no such files\n"


def test_no_credentials_at_all_says_where_it_looked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    result = invoke(["ca", "status"])
    assert result.exit_code == 1
    assert f"{tmp_path}/.kube/config does not exist" in result.stderr
    assert "not a Pod" in result.stderr


@pytest.mark.parametrize("command", CLUSTER_COMMANDS, ids=" ".join)
def test_an_unreachable_server_is_one_line_naming_it_without_class_names(
    command: list[str], tmp_path: Path
) -> None:
    port = _dead_port()
    config = kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}")
    result = invoke([*command, f"--kubeconfig={config}"])
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"cannot reach the API server at 127.0.0.1:{port}: connection refused" in (result.stderr)
    for leak in ("Error:", "HTTPConnection", "0 ", "("):
        assert leak not in result.stderr.split("refused")[0], result.stderr


def test_an_unknown_context_names_the_file(tmp_path: Path, api: FakeApi) -> None:
    config = kubeconfig(tmp_path / "kc", api.url)
    result = invoke(["status", f"--kubeconfig={config}", "--context=elsewhere"])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: kubeconfig {config} (context elsewhere): ")
    assert "elsewhere" in result.stderr.split("): ", 1)[1]


def test_namespace_defaults_to_the_contexts(tmp_path: Path, api: FakeApi) -> None:
    config = kubeconfig(tmp_path / "kc", api.url, namespace="shop")
    conn = cli.common.Connection(str(config))
    assert conn.namespace == "shop"
    assert cli.common.Connection(str(config), namespace="other").namespace == "other"


@pytest.mark.parametrize("command", SIGNER_COMMANDS, ids=" ".join)
def test_ca_commands_refuse_n_rather_than_read_it_as_the_signers_namespace(
    command: list[str], tmp_path: Path, api: FakeApi
) -> None:
    config = kubeconfig(tmp_path / "kc", api.url)
    result = invoke([*command, "-n", "service-serving-signer", f"--kubeconfig={config}"])
    assert result.exit_code == 1
    assert "--signer-namespace" in result.stderr
    assert not api.requests, "refused before any request"


def test_ca_status_reads_the_signer_namespace(tmp_path: Path, api: FakeApi) -> None:
    config = kubeconfig(tmp_path / "kc", api.url)
    result = invoke(["ca", "status", "--signer-namespace=elsewhere", f"--kubeconfig={config}"])
    assert result.exit_code == 0, result.stderr
    assert any("/namespaces/elsewhere/leases" in r.path for r in api.requests)


def test_an_api_refusal_is_the_servers_message_with_its_reason(
    tmp_path: Path, api: FakeApi
) -> None:
    config = kubeconfig(tmp_path / "kc", api.url)
    result = invoke(["ca", "rotate", f"--kubeconfig={config}"])
    assert result.exit_code == 1
    assert "no managed CA Secret service-serving-signer/service-serving-signer-managed-ca" in (
        result.stderr
    )
    secret = "/api/v1/namespaces/service-serving-signer/secrets/service-serving-signer-managed-ca"
    api.fail("GET", secret, 403, times=1)
    result = invoke(["ca", "rotate", f"--kubeconfig={config}"])
    assert result.exit_code == 1
    # The fake's Status says reason Injected, message "injected 403".
    assert result.stderr == "error: ca rotate: from the API server (Injected): injected 403\n"


@pytest.mark.parametrize(
    "command",
    [["ca", "status"], ["bundle", "resolve", "--signer-name=example.com/serving"], ["version"]],
    ids=" ".join,
)
def test_json_and_yaml_say_the_same(command: list[str], tmp_path: Path, api: FakeApi) -> None:
    args = [*command] if command == ["version"] else [*command, f"--kubeconfig={tmp_path}/kc"]
    kubeconfig(tmp_path / "kc", api.url)
    as_json = invoke([*args, "-o", "json"])
    as_yaml = invoke([*args, "-o", "yaml"])
    assert as_json.exit_code == as_yaml.exit_code, (as_json.stderr, as_yaml.stderr)
    assert yaml.safe_load(as_json.stdout) == yaml.safe_load(as_yaml.stdout)


def test_ca_init_prints_the_files_it_wrote_as_json(tmp_path: Path) -> None:
    import json

    result = invoke(["ca", "init", "--out", str(tmp_path / "ca"), "-o", "json"])
    assert result.exit_code == 0, result.stderr
    written = json.loads(result.stdout)
    assert sorted(written) == ["cert", "key", "trustBundle"]
    assert all(Path(p).is_file() for p in written.values())


def test_a_bad_flag_on_the_command_line_is_named_as_the_flag_not_its_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result = invoke(["run", "--managed-ca-lifetime=1y"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: Invalid value for '--managed-ca-lifetime': ")
    monkeypatch.setenv("SERVICE_SERVING_SIGNER_MANAGED_CA_LIFETIME", "1y")
    from_env = invoke(["run"])
    assert "(env var: 'SERVICE_SERVING_SIGNER_MANAGED_CA_LIFETIME')" in from_env.stderr

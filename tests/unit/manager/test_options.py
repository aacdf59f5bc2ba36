"""Options: Go durations, bind addresses, KCM `--controllers`, cross-flag validation."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from manager.options import (
    BindAddress,
    Options,
    OptionsError,
    default_leader_election_namespace,
    format_duration,
    parse_bind_address,
    parse_controllers,
    parse_duration,
    signer_name_problem,
    validate_signer_name,
)


def make(**overrides: Any) -> Options:
    values: dict[str, Any] = {
        "service_serving_key": "/etc/ca/tls.key",
        "service_serving_cert": "/etc/ca/tls.crt",
        "service_serving_trust_bundle": "/etc/bundle/trust-bundle.pem",
    }
    values.update(overrides)
    return Options(**values)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("24h", 86400.0),
        ("15s", 15.0),
        ("90m", 5400.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("300ms", 0.3),
        ("2m0.5s", 120.5),
        ("0", 0.0),
        ("-1s", -1.0),
        ("+10s", 10.0),
    ],
)
def test_parses_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "24", "1d", "h", "1h 30m", "abc", "1.h2", "--1s", "-"])
def test_rejects_durations_go_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_bare_number_error_says_the_unit_is_missing() -> None:
    with pytest.raises(ValueError, match="missing unit"):
        parse_duration("3600")


@pytest.mark.parametrize(
    ("seconds", "text"), [(86400, "24h0m0s"), (90, "1m30s"), (5, "5s"), (0, "0s")]
)
def test_formats_durations_go_style(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (":10358", BindAddress("", 10358)),
        ("127.0.0.1:9000", BindAddress("127.0.0.1", 9000)),
        ("0.0.0.0:8080", BindAddress("0.0.0.0", 8080)),
        ("[::1]:9000", BindAddress("::1", 9000)),
        ("localhost:0", BindAddress("localhost", 0)),
        ("0", None),
    ],
)
def test_parses_bind_addresses(text: str, expected: BindAddress | None) -> None:
    assert parse_bind_address(text) == expected


@pytest.mark.parametrize("text", ["10358", "::1:9000", "host:", "host:port", ":70000", ""])
def test_rejects_bad_bind_addresses(text: str) -> None:
    with pytest.raises(OptionsError):
        parse_bind_address(text)


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        (["*"], {"signer", "publisher"}),
        (["signer"], {"signer"}),
        (["publisher"], {"publisher"}),
        (["*,-publisher"], {"signer"}),
        (["*", "-signer"], {"publisher"}),
        (["signer,publisher"], {"signer", "publisher"}),
        (["signer", "-signer", "publisher"], {"publisher"}),
        ([" signer , publisher "], {"signer", "publisher"}),
    ],
)
def test_controllers_follow_kcm_syntax(items: list[str], expected: set[str]) -> None:
    assert parse_controllers(items) == frozenset(expected)


@pytest.mark.parametrize(
    ("items", "problem"),
    [
        (["bogus"], "unknown controller 'bogus'"),
        (["*,-signer,-publisher"], "no controller enabled"),
        (["-signer"], "no controller enabled"),
        ([""], "empty list"),
    ],
)
def test_rejects_unusable_controller_lists(items: list[str], problem: str) -> None:
    with pytest.raises(OptionsError, match=problem):
        parse_controllers(items)


def test_defaults_match_the_spec() -> None:
    opts = make()
    assert opts.cluster_service_domain == "cluster.local"
    assert opts.signer_name == "kubernetes.io/service-serving"
    assert opts.controllers == {"signer", "publisher"}
    assert opts.max_certificate_lifetime == 24 * 3600
    assert opts.concurrent_syncs == 4
    assert opts.pcr_api_version == "auto"
    assert (opts.kube_api_qps, opts.kube_api_burst) == (50, 100)
    assert opts.leader_elect is True
    assert (
        opts.leader_elect_lease_duration,
        opts.leader_elect_renew_deadline,
        opts.leader_elect_retry_period,
    ) == (15, 10, 2)
    assert opts.leader_elect_resource_name == "service-serving-signer"
    assert opts.metrics_bind_address == BindAddress("", 10358)
    assert opts.health_probe_bind_address == BindAddress("", 10359)
    assert (opts.log_format, opts.verbosity) == ("text", 0)


def test_options_are_immutable() -> None:
    opts = make()
    with pytest.raises(AttributeError):
        opts.signer_name = "x/y"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("overrides", "flag", "problem"),
    [
        ({"service_serving_key": ""}, "--service-serving-key", "required"),
        ({"service_serving_cert": "/etc/ca/tls.key"}, "--service-serving-cert", "different"),
        ({"max_certificate_lifetime": 25 * 3600}, "--max-certificate-lifetime", "exceeds 24h"),
        ({"max_certificate_lifetime": 59 * 60}, "--max-certificate-lifetime", "1h minimum"),
        ({"cluster_service_domain": "Cluster.Local"}, "--cluster-service-domain", "DNS"),
        ({"signer_name": "no-slash"}, "--signer-name", "domain and path"),
        ({"signer_name": "example.com/a/b"}, "--signer-name", "domain and path"),
        ({"concurrent_syncs": 0}, "--concurrent-syncs", "at least 1"),
        ({"pcr_api_version": "v2"}, "--pcr-api-version", "not one of"),
        ({"kube_api_burst": 0}, "--kube-api-burst", "at least 1"),
        ({"kube_api_qps": -1.0}, "--kube-api-qps", "negative"),
        (
            {"leader_elect_lease_duration": 10.0},
            "--leader-elect-lease-duration",
            "greater than --leader-elect-renew-deadline",
        ),
        ({"leader_elect_retry_period": 9.0}, "--leader-elect-renew-deadline", "1.2 x"),
        ({"leader_elect_retry_period": 0.0}, "--leader-elect-retry-period", "positive"),
        ({"leader_elect_resource_namespace": "Kube"}, "--leader-elect-resource-namespace", ""),
        ({"leader_elect_resource_name": "a_b"}, "--leader-elect-resource-name", "DNS"),
        ({"log_format": "xml"}, "--log-format", "not one of"),
        ({"verbosity": -1}, "-v", "negative"),
        ({"controllers": frozenset({"bogus"})}, "--controllers", "invalid"),
    ],
)
def test_rejects_unusable_values_naming_the_flag(
    overrides: dict[str, Any], flag: str, problem: str
) -> None:
    with pytest.raises(OptionsError) as info:
        make(**overrides)
    assert info.value.flag == flag
    assert problem in info.value.problem
    assert "\n" not in str(info.value)


def test_other_domains_may_exceed_24h() -> None:
    opts = make(signer_name="example.com/serving", max_certificate_lifetime=7 * 86400.0)
    assert opts.max_certificate_lifetime == 7 * 86400


def test_exactly_24h_and_1h_are_allowed_for_kubernetes_signers() -> None:
    assert make(max_certificate_lifetime=86400.0).max_certificate_lifetime == 86400
    assert make(max_certificate_lifetime=3600.0).max_certificate_lifetime == 3600


def test_replace_revalidates() -> None:
    with pytest.raises(OptionsError):
        replace(make(), concurrent_syncs=0)


def test_pcr_versions_preferred_newest_first_for_auto() -> None:
    assert make().pcr_versions_preferred == ["v1", "v1beta1"]
    assert make(pcr_api_version="v1beta1").pcr_versions_preferred == ["v1beta1"]


def test_lease_namespace_defaults_to_the_pods_namespace(tmp_path: Path) -> None:
    ns_file = tmp_path / "namespace"
    ns_file.write_text("signers\n")
    assert default_leader_election_namespace(str(ns_file), {}) == "signers"


def test_lease_namespace_falls_back_to_pod_namespace_env_then_kube_system(
    tmp_path: Path,
) -> None:
    missing = str(tmp_path / "absent")
    assert default_leader_election_namespace(missing, {"POD_NAMESPACE": "ops"}) == "ops"
    assert default_leader_election_namespace(missing, {}) == "kube-system"


# --signer-name: kube-apiserver's ValidateSignerName ----------------------------------

ACCEPTED_SIGNER_NAMES = [
    "kubernetes.io/service-serving",
    "example.com/serving",
    "a.b/c",
    "sub.example.com/ns.name",  # <fqdn>/<namespace>.<name>
    "example.com/1serving",
    "x-1.example.com/a-b.c-d",
    "example.com/" + "a" * 253,
    ".".join(["a" * 63] * 3) + "." + "b" * 61 + "/" + "p" * 253 + "." + "q" * 63,  # 571
]

REJECTED_SIGNER_NAMES = [
    ("", "must not be empty"),
    ("example.com", "domain and path"),
    ("example.com/", "path label ''"),
    ("/serving", "domain label ''"),
    ("example.com/a/b", "domain and path"),
    ("Example.com/serving", "domain label 'Example'"),
    ("example.com/Serving", "path label 'Serving'"),
    ("example.com/my_signer", "path label 'my_signer'"),
    ("my_domain.com/serving", "domain label 'my_domain'"),
    ("localhost/serving", "at least two segments"),
    ("example.com/a..b", "path label ''"),
    ("example.com/-a", "path label '-a'"),
    ("example..com/a", "domain label ''"),
    ("example.com./a", "domain label ''"),
    ("a" * 64 + ".com/serving", "domain label"),
    ("example.com/" + "a" * 254, "path label"),
    (".".join(["a" * 63] * 4) + ".b/c", "longer than 253"),
    (".".join(["a" * 63] * 3) + "." + "b" * 61 + "/" + "p" * 253 + "." + "q" * 64, "571"),
]


@pytest.mark.parametrize("name", ACCEPTED_SIGNER_NAMES, ids=lambda n: n[:40])
def test_signer_names_kube_apiserver_accepts_are_accepted(name: str) -> None:
    assert signer_name_problem(name) is None
    validate_signer_name(name)


@pytest.mark.parametrize(("name", "fragment"), REJECTED_SIGNER_NAMES, ids=lambda v: str(v)[:40])
def test_signer_names_kube_apiserver_rejects_fail_with_one_line_reason(
    name: str, fragment: str
) -> None:
    with pytest.raises(OptionsError) as info:
        validate_signer_name(name)
    text = str(info.value)
    assert text.startswith("--signer-name: ")
    assert fragment in text, text
    assert "\n" not in text


def test_publisher_only_needs_no_ca_key_or_cert() -> None:
    opts = Options(
        service_serving_key="",
        service_serving_cert="",
        service_serving_trust_bundle="/etc/ca/bundle.pem",
        controllers=frozenset({"publisher"}),
    )
    assert opts.controllers == {"publisher"}
    with pytest.raises(OptionsError, match="--service-serving-key: required by the signer"):
        replace(opts, controllers=frozenset({"signer", "publisher"}))
    with pytest.raises(OptionsError, match="--service-serving-trust-bundle: required"):
        replace(opts, service_serving_trust_bundle="")


def managed(**overrides: Any) -> Options:
    values: dict[str, Any] = {
        "service_serving_key": "",
        "service_serving_cert": "",
        "service_serving_trust_bundle": "",
        "ca_mode": "managed",
    }
    values.update(overrides)
    return Options(**values)


def test_a_managed_ca_needs_no_files_and_keeps_the_documented_defaults() -> None:
    opts = managed()
    assert opts.managed_ca
    assert opts.managed_ca_secret_name == "service-serving-signer-managed-ca"
    assert opts.managed_ca_adopt_secret_name == "service-serving-signer-ca", "the README's"
    assert (opts.managed_ca_lifetime, opts.managed_ca_rotate_at) == (365 * 86400.0, 0.5)
    assert (opts.managed_ca_propagation_delay, opts.managed_ca_retire_margin) == (600.0, 3600.0)
    assert not make().managed_ca, "file mode is the default"


def test_an_empty_adopt_secret_name_adopts_none() -> None:
    assert managed(managed_ca_adopt_secret_name="").managed_ca_adopt_secret_name == ""


def test_a_short_propagation_delay_only_when_forced() -> None:
    opts = managed(managed_ca_propagation_delay=8.0, managed_ca_allow_short_propagation_delay=True)
    assert opts.managed_ca_propagation_delay == 8.0


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"service_serving_key": "/k"}, "--service-serving-key: is for --ca-mode=file"),
        ({"ca_mode": "vault"}, "--ca-mode: 'vault' is not one of file, managed"),
        ({"managed_ca_rotate_at": 1.0}, "--managed-ca-rotate-at: must be a fraction"),
        ({"managed_ca_retire_margin": 60.0}, "--managed-ca-retire-margin: must be at least 5m"),
        ({"managed_ca_key_type": "DSA"}, "--managed-ca-key-type: 'DSA' is not one of"),
        ({"managed_ca_secret_name": "Bad_Name"}, "--managed-ca-secret-name"),
        ({"managed_ca_adopt_secret_name": "Bad_Name"}, "--managed-ca-adopt-secret-name"),
        (
            {"managed_ca_adopt_secret_name": "service-serving-signer-managed-ca"},
            "--managed-ca-adopt-secret-name: is the managed CA's own Secret",
        ),
        ({"managed_ca_keep_previous": -1}, "--managed-ca-keep-previous"),
        (
            {"managed_ca_propagation_delay": 0.0},
            "--managed-ca-propagation-delay: must be at least 6m30s",
        ),
        ({"managed_ca_wait_for_injector": "maybe"}, "--managed-ca-wait-for-injector"),
        # 48h of life, rotated at half: 24h left, less than 10m + the 24h longest leaf.
        ({"managed_ca_lifetime": 48 * 3600.0}, "--managed-ca-lifetime: 48h0m0s leaves 24h0m0s"),
    ],
)
def test_rejects_unusable_managed_ca_values_naming_the_flag(
    overrides: dict[str, Any], problem: str
) -> None:
    with pytest.raises(OptionsError) as info:
        managed(**overrides)
    assert str(info.value).startswith(problem), str(info.value)


def test_the_least_propagation_delay_follows_the_unlinked_bundle_when_it_is_published() -> None:
    """kubelet refreshes a by-name projection of a bundle without a signerName at its next
    Pod resync, a signer-linked one only after its 5 min cache too: with the unlinked
    bundle published, 2 min is accepted without the force flag, and less still is not."""
    assert managed().least_propagation_delay == 390.0
    opted_in = managed(publish_unlinked_bundle=True, managed_ca_propagation_delay=120.0)
    assert opted_in.least_propagation_delay == 120.0
    with pytest.raises(OptionsError, match=r"must be at least 2m0s .*--publish-unlinked-bundle"):
        managed(publish_unlinked_bundle=True, managed_ca_propagation_delay=119.0)
    with pytest.raises(OptionsError, match="must be at least 6m30s"):
        managed(managed_ca_propagation_delay=120.0)


def test_an_unlinked_bundle_name_the_api_would_refuse_is_refused_at_start() -> None:
    """The bundle's name is the signer name's, which may be longer than a name can be."""
    long_signer = "example.com/" + ".".join(["a" * 60] * 4)
    assert make(signer_name=long_signer).signer_name == long_signer
    with pytest.raises(OptionsError, match="--publish-unlinked-bundle: the bundle's name"):
        make(signer_name=long_signer, publish_unlinked_bundle=True)

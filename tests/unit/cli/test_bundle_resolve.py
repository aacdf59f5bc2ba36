"""`bundle resolve` that selects nothing says why, in KEP-6283's terms, and what would
select the bundles that exist: a signerName without a label selector matches nothing (as
the kubelet's projection), so `-l ''` and the stable name are offered."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cli.main import main
from tests.unit.cli.helpers import kubeconfig
from tests.unit.fakeapi import FakeApi
from tests.unit.pki import ca
from trust.ca import cert_pem

SIGNER = "kubernetes.io/service-serving"
CTBS = "/apis/certificates.k8s.io/v1/clustertrustbundles"
STABLE = "kubernetes.io:service-serving:trust-anchors"
HASHED = "kubernetes.io:service-serving:a9c10b83a9c10b83a9c10b83"


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi().start()
    fake.discovery["/apis/certificates.k8s.io/v1"] = {
        "kind": "APIResourceList",
        "resources": [{"name": "clustertrustbundles"}],
    }
    yield fake
    fake.stop()


def publish(api: FakeApi) -> str:
    pem = cert_pem(ca().cert).decode()
    for name in (HASHED, STABLE):
        api.put(
            CTBS,
            {
                "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "x"}},
                "spec": {"signerName": SIGNER, "trustBundle": pem},
            },
        )
    return pem


def resolve(api: FakeApi, tmp_path: Path, *args: str) -> Result:
    config = kubeconfig(tmp_path / "kc", api.url)
    return CliRunner().invoke(main, ["bundle", "resolve", f"--kubeconfig={config}", *args])


def test_a_signer_name_without_a_label_selector_explains_the_rule_and_the_selector_that_matches(
    api: FakeApi, tmp_path: Path
) -> None:
    publish(api)
    result = resolve(api, tmp_path, "--signer-name", SIGNER)
    assert result.exit_code == 1
    err = result.stderr
    assert err.count("\n") == 1, err
    assert "a signerName selector without a labelSelector matches nothing (KEP-6283" in err
    assert f"2 bundles of {SIGNER} exist ({HASHED}, {STABLE})" in err
    assert "`-l ''` selects all of them" in err
    assert f'(selector {{"signerName": "{SIGNER}", "labelSelector": {{}}}})' in err
    assert f"`--name {STABLE}`" in err


def test_the_offered_selectors_do_select(api: FakeApi, tmp_path: Path) -> None:
    pem = publish(api)
    every = resolve(api, tmp_path, "--signer-name", SIGNER, "-l", "")
    assert every.exit_code == 0, every.stderr
    assert every.stdout == pem
    assert resolve(api, tmp_path, "--name", STABLE).stdout == pem


def test_no_bundle_of_the_signer_and_an_unknown_name_are_said_plainly(
    api: FakeApi, tmp_path: Path
) -> None:
    none = resolve(api, tmp_path, "--signer-name", SIGNER)
    assert f"no ClusterTrustBundle has signerName {SIGNER}" in none.stderr
    named = resolve(api, tmp_path, "--name", "nosuch")
    assert "no ClusterTrustBundle is named 'nosuch'" in named.stderr


def test_a_label_selector_that_matches_none_lists_the_labels_there_are(
    api: FakeApi, tmp_path: Path
) -> None:
    publish(api)
    result = resolve(api, tmp_path, "--signer-name", SIGNER, "-l", "tier=edge")
    assert result.exit_code == 1
    assert "labelled app.kubernetes.io/managed-by=x" in result.stderr

"""A kubeconfig `tokenFile` is re-read, against the real API server: a
ServiceAccount token rotated under a running client is picked up — at once when the old
one is refused with a 401, as it is once its ServiceAccount is gone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from controlplane import ControlPlane
from kube.client import ApiError, Client
from tests.integration.identities import service_account_token
from tests.integration.signer_harness import eventually


def create_service_account(client: Client, namespace: str, name: str) -> None:
    client.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
    )


def test_rotated_token_file_is_used_after_the_old_token_is_refused(
    control_plane: ControlPlane, client: Client, namespace: str, tmp_path: Path
) -> None:
    create_service_account(client, namespace, "reader")
    old_token = service_account_token(client, namespace, "reader")
    token_file = tmp_path / "token"
    token_file.write_text(old_token)
    config: dict[str, Any] = control_plane.kubeconfig_for()
    config["users"][0]["user"] = {"tokenFile": str(token_file)}
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(config))
    sa_client = Client.from_kubeconfig(str(kubeconfig), qps=0)

    def whoami() -> str:
        review = sa_client.create(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        return str(review["status"]["userInfo"]["uid"])

    first_uid = whoami()

    # The ServiceAccount is recreated: its old tokens are refused from now on (401).
    client.delete(f"/api/v1/namespaces/{namespace}/serviceaccounts/reader")
    create_service_account(client, namespace, "reader")
    token_file.write_text(service_account_token(client, namespace, "reader"))
    old = client.with_token(old_token)

    def old_token_refused() -> bool:
        try:
            old.get(f"/api/v1/namespaces/{namespace}")
        except ApiError as err:
            return err.status == 401
        return False

    eventually(old_token_refused, timeout=30, what="the old token refused")

    second_uid = whoami()  # 401 with the cached token, re-read, retried once

    assert second_uid != first_uid
    assert sa_client.request_count().total == 2  # the retry is not a request of its own

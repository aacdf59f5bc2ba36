"""How a step is written: the whole CA Secret (`codec.encode`), as a create for a
bootstrap (of two replicas racing, one gets `409 AlreadyExists` and adopts the other's CA
on its next step) and else as an update conditional on the resourceVersion the step
decided on (`409 Conflict`, or `404` for a Secret deleted in between: the caller decides
again). Labels and annotations of the Secret read that are not the state's are kept."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kube.client import ApiError, Client, is_already_exists, path_segment
from managedca.codec import encode
from managedca.step import Step

log = logging.getLogger(__name__)


class SecretStore:
    def __init__(self, client: Client, namespace: str, name: str) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.collection = f"/api/v1/namespaces/{path_segment(namespace)}/secrets"
        self.path = f"{self.collection}/{path_segment(name)}"

    def write(self, taken: Step | None, read: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        """Write `taken` over the Secret `read` (None: nothing to write) and return the
        Secret as written."""
        if taken is None:
            return None
        meta = (read or {}).get("metadata") or {}
        version = None if taken.create else str(meta.get("resourceVersion", ""))
        body = encode(
            self.namespace,
            self.name,
            taken.state,
            taken.certs,
            taken.current_key,
            taken.next_key,
            version,
            existing=meta,
        )
        if version is not None:
            return self.client.replace(self.path, body)
        try:
            return self.client.create(self.collection, body)
        except ApiError as err:
            if is_already_exists(err):
                log.info("managed CA: another replica created the CA first; adopting it")
            raise

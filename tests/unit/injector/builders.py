"""Objects the injector tests build: bundles as the cache records them, annotated
webhook configurations, APIServices and CRDs; a JSON patch applied as the API server does."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

from cryptography.hazmat.primitives.serialization import Encoding

from injector.controller import bundle_record
from injector.targets import ANNOTATION
from tests.unit import pki

SIGNER = "kubernetes.io/service-serving"
SELECT_ALL = json.dumps({"signerName": SIGNER, "labelSelector": {}})


def pem(name: str) -> str:
    return pki.ca(name).cert.public_bytes(Encoding.PEM).decode()


def ctb(name: str, roots: list[str], *, signer: str = SIGNER, labels: Any = None) -> Any:
    return bundle_record(
        {
            "metadata": {"name": name, "labels": labels or {}, "uid": "u", "managedFields": []},
            "spec": {"signerName": signer, "trustBundle": "".join(pem(r) for r in roots)},
        }
    )


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def webhook_config(
    name: str = "hooks",
    annotation: str | None = SELECT_ALL,
    ca_bundles: tuple[str, ...] = ("", ""),
    kind: str = "ValidatingWebhookConfiguration",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}"}
    if annotation is not None:
        meta["annotations"] = {ANNOTATION: annotation, "other": "x"}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "webhooks": [
            {
                "name": f"w{i}.example.com",
                "clientConfig": {"service": {"namespace": "ns", "name": "svc"}, "caBundle": ca},
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "rules": [{"operations": ["CREATE"]}],
            }
            for i, ca in enumerate(ca_bundles)
        ],
    }


def api_service(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "v1.example.com", "uid": "u", "annotations": {ANNOTATION: SELECT_ALL}},
        "spec": {"group": "example.com", "version": "v1", "groupPriorityMinimum": 1, **spec},
    }


def crd(conversion: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "things.example.com", "uid": "u", "annotations": {ANNOTATION: "{}"}},
        "spec": {"group": "example.com", "versions": [{"name": "v1", "schema": {"huge": 1}}]}
        | ({"conversion": conversion} if conversion is not None else {}),
    }


BAD_ANNOTATIONS = [
    ("{signerName: x}", "not valid JSON"),
    ('{"name": "b", "signerName": "kubernetes.io/service-serving"}', "not both"),
    ('{"name": "b", "labelSelector": {}}', "exclusive with labelSelector"),
    ('{"labelSelector": {}}', "labelSelector requires signerName"),
    ('{"signerName": "kubernetes.io/service-serving", "labelSelectr": {}}', "unknown field"),
    (
        '{"signerName": "kubernetes.io/service-serving", "labelSelector": '
        '{"matchExpressions": [{"key": "a", "operator": "Near"}]}}',
        "unknown operator",
    ),
]


def apply_json_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """RFC 6902 `test`, `add` and `remove` (what the release sends), as kube-apiserver
    applies them: all or nothing, a failed test or a missing parent fails the patch."""
    doc = copy.deepcopy(doc)
    for op in ops:
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]
        ]
        node = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key: Any = int(last) if isinstance(node, list) else last
        if op["op"] == "test":
            if node[key] != op["value"]:
                raise ValueError(f"test failed: {op['path']}")
        elif op["op"] == "add":
            if isinstance(node, list):
                node.insert(key, op["value"])
            else:
                node[key] = op["value"]
        elif op["op"] == "remove":
            del node[key]
        else:
            raise AssertionError(op)
    return doc

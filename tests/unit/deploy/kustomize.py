"""A small kustomize renderer for the features `config/` uses (resources, components,
namespace, labels, images), so manifest tests need no kubectl. The test suite checks it
against `kubectl kustomize` output. Beside it, what the manifest tests share: the
installation's namespace, an RBAC role's rules as sorted tuples, and an overlay of
config/default with the injector component."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import yaml

CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "FlowSchema",
    "PriorityLevelConfiguration",
}
CONFIG = Path(__file__).resolve().parents[3] / "config"


def _load(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def render(
    directory: Path, accumulated: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Build `directory`. A Component's transformers apply to what its parent has
    accumulated so far (`accumulated`) plus its own resources, as kustomize's do."""
    kustomization = _load(directory / "kustomization.yaml")[0]
    objects: list[dict[str, Any]] = list(accumulated or [])
    for entry in kustomization.get("resources", []):
        target = (directory / entry).resolve()
        objects += render(target) if target.is_dir() else _load(target)
    for entry in kustomization.get("components", []):
        objects = render((directory / entry).resolve(), objects)
    objects = copy.deepcopy(objects) + _generated_config_maps(directory, kustomization)
    namespace = kustomization.get("namespace")
    for obj in objects:
        meta = obj.setdefault("metadata", {})
        if namespace and obj["kind"] not in CLUSTER_SCOPED:
            meta["namespace"] = namespace
        if namespace and obj["kind"] == "Namespace":
            meta["name"] = namespace  # kustomize renames a Namespace it builds
        if namespace and obj["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            for subject in obj.get("subjects", []):
                if subject.get("kind") == "ServiceAccount":
                    subject["namespace"] = namespace
        for label_set in kustomization.get("labels", []):
            meta.setdefault("labels", {}).update(label_set["pairs"])
        for image in kustomization.get("images", []):
            for container in _containers(obj):
                if container.get("image", "").split(":")[0] == image["name"]:
                    container["image"] = f"{image.get('newName', image['name'])}:{image['newTag']}"
    return objects


def _generated_config_maps(directory: Path, kustomization: dict[str, Any]) -> list[dict[str, Any]]:
    """`configMapGenerator` entries made of `files`, without a hash suffix (the only form
    config/ uses; kustomize's suffix is not reproduced here)."""
    generators = kustomization.get("configMapGenerator", [])
    if generators:
        assert kustomization.get("generatorOptions", {}).get("disableNameSuffixHash") is True
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": generator["name"]},
            "data": {name: (directory / name).read_text() for name in generator["files"]},
        }
        for generator in generators
    ]


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec", {}).get("template", {}).get("spec", {})
    return [*spec.get("containers", []), *spec.get("initContainers", [])]


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} objects"
    return matches[0]


NAMESPACE = "service-serving-signer"


def rules_of(role: dict[str, Any]) -> list[tuple[str, str, tuple[str, ...], tuple[str, ...]]]:
    return sorted(
        (group, resource, tuple(sorted(rule["verbs"])), tuple(rule.get("resourceNames", [])))
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    )


def write_overlay(directory: Path) -> Path:
    """An overlay of config/default with the injector component (relative paths, as
    kustomize requires)."""
    default = os.path.relpath(CONFIG / "default", directory)
    injector = os.path.relpath(CONFIG / "injector", directory)
    (directory / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{default}]\ncomponents: [{injector}]\n"
    )
    return directory

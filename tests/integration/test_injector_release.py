"""A GitOps owner and the injector on one object, against the real
kube-apiserver with a real server-side-apply field manager `gitops` (what `kubectl apply
--server-side --field-manager=gitops` sends): the injector's test-guarded JSON patches own
only caBundle leaves, so the owner renames and removes webhooks while the annotation is
on, and removes the annotation and a webhook in one apply; an owner whose own
configuration sets caBundle is not forced over (Event naming it). The release keeps every
caBundle and hands each to the object's owner: a server-side-apply owner's next apply
keeps the value if its configuration sets one (no conflict) and removes it if not (an
APIService made local, a webhook's caBundle dropped); a client-side owner (`kubectl
apply`) keeps it, since kubectl removes only what its last-applied-configuration lists,
until it moves to server-side apply, which then removes it when omitted."""

from __future__ import annotations

import copy
import json
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from controlplane import ControlPlane
from controlplane.binaries import tool
from injector.decide import REASON_CONFLICT
from injector.targets import FIELD_MANAGER, INJECTED_ANNOTATION
from kube.client import ApiError, Client, is_not_found
from tests.integration.injector_harness import (
    APISERVICE_PATH,
    CRD_PATH,
    VWC_PATH,
    Issuer,
    RunningInjector,
    api_service,
    b64,
    ca_bundles,
    conversion_crd,
    delete_quietly,
    events_about,
    validating_webhook,
)
from tests.integration.signer_harness import eventually

APPLY = "application/apply-patch+yaml"
OWNER = "gitops"


@pytest.fixture
def issuer(client: Client) -> Iterator[Issuer]:
    with Issuer(client) as running:
        yield running


@pytest.fixture
def cleanup(client: Client) -> Iterator[list[tuple[str, str]]]:
    created: list[tuple[str, str]] = []
    yield created
    for path, name in created:
        delete_quietly(client, path, name)


def apply(client: Client, path: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """What `kubectl apply --server-side --field-manager=gitops` sends."""
    return client.patch(f"{path}/{name}", body, patch_type=APPLY, params={"fieldManager": OWNER})


def managers(obj: dict[str, Any]) -> list[str]:
    return [entry["manager"] for entry in obj["metadata"].get("managedFields") or []]


def without_annotation(body: dict[str, Any]) -> dict[str, Any]:
    """`body` without the opt-in annotation (a copy sharing nothing with it: the
    harness's webhooks share one clientConfig)."""
    stripped: dict[str, Any] = json.loads(json.dumps(body))
    stripped["metadata"].pop("annotations", None)
    return stripped


def inject_then_release(
    client: Client, path: str, body: dict[str, Any], expected: list[str]
) -> dict[str, Any]:
    """The owner applies `body` (annotated), the injector fills every caBundle, the owner
    applies it without the annotation; returns the object once the injector has let go."""
    name = body["metadata"]["name"]
    apply(client, path, name, body)
    eventually(lambda: ca_bundles(client.get(f"{path}/{name}")) == expected, timeout=30)
    injected = client.get(f"{path}/{name}")
    assert FIELD_MANAGER in managers(injected)
    assert INJECTED_ANNOTATION in injected["metadata"]["annotations"]
    apply(client, path, name, without_annotation(body))
    released: dict[str, Any] = eventually(
        lambda: (o := client.get(f"{path}/{name}")) and FIELD_MANAGER not in managers(o) and o,
        timeout=30,
        what="the injector to release its fields",
    )
    # Its note goes in the same patch (it would say the object is still injected).
    assert INJECTED_ANNOTATION not in (released["metadata"].get("annotations") or {})
    return released


def ours(obj: dict[str, Any]) -> list[dict[str, Any]]:
    entries = obj["metadata"].get("managedFields") or []
    return [e for e in entries if e["manager"] == FIELD_MANAGER]


def test_owner_renames_and_removes_webhooks_while_annotated(
    client: Client, namespace: str, issuer: Issuer, cleanup: list[tuple[str, str]]
) -> None:
    name = f"gitops-{uuid.uuid4().hex[:8]}"
    cleanup.append((VWC_PATH, name))
    body = validating_webhook(name, namespace, "absent", issuer.selector(), webhooks=3)
    expected = b64(issuer.bundle())
    with RunningInjector(client):
        apply(client, VWC_PATH, name, body)
        eventually(lambda: ca_bundles(client.get(f"{VWC_PATH}/{name}")) == [expected] * 3)
        # The injector's entry is an Update that owns each caBundle leaf and nothing else:
        # no `.` of a webhook entry, no `f:name` (what server-side apply's list keys owned).
        [entry] = ours(client.get(f"{VWC_PATH}/{name}"))
        assert entry["operation"] == "Update"
        for item in entry["fieldsV1"]["f:webhooks"].values():
            assert item == {"f:clientConfig": {"f:caBundle": {}}}
        # Rename the first webhook and remove the last, annotation still on.
        changed = copy.deepcopy(body)
        changed["webhooks"] = changed["webhooks"][:2]
        changed["webhooks"][0]["name"] = f"renamed.{name}.example.com"
        stored = apply(client, VWC_PATH, name, changed)
        names = [w["name"] for w in stored["webhooks"]]
        assert names == [w["name"] for w in changed["webhooks"]]
        # The renamed webhook is new to the injector: it fills it.
        eventually(lambda: ca_bundles(client.get(f"{VWC_PATH}/{name}")) == [expected] * 2)


def test_removing_the_annotation_and_a_webhook_in_one_apply_keeps_every_ca_bundle(
    client: Client, namespace: str, issuer: Issuer, cleanup: list[tuple[str, str]]
) -> None:
    name = f"gitops-{uuid.uuid4().hex[:8]}"
    cleanup.append((VWC_PATH, name))
    body = validating_webhook(name, namespace, "absent", issuer.selector(), webhooks=2)
    expected = b64(issuer.bundle())
    with RunningInjector(client) as injector:
        apply(client, VWC_PATH, name, body)
        eventually(lambda: ca_bundles(client.get(f"{VWC_PATH}/{name}")) == [expected] * 2)
        one = without_annotation(body)
        one["webhooks"] = one["webhooks"][:1]
        stored = apply(client, VWC_PATH, name, one)
        assert [w["name"] for w in stored["webhooks"]] == [one["webhooks"][0]["name"]]
        released = eventually(
            lambda: (o := client.get(f"{VWC_PATH}/{name}")) and not ours(o) and o,
            timeout=30,
            what="the injector to drop its managedFields entry",
        )
        # The value stays: a failurePolicy: Fail webhook keeps working after the release.
        assert ca_bundles(released) == [expected]
        kind = "ValidatingWebhookConfiguration"
        eventually(lambda: injector.controller.metrics.count(kind, "released") >= 1)
        # The owner's configuration is the whole truth from now on: its next apply of the
        # same configuration changes nothing, and it may set caBundle without a conflict.
        owned = copy.deepcopy(one)
        owned["webhooks"][0]["clientConfig"]["caBundle"] = expected
        assert ca_bundles(apply(client, VWC_PATH, name, owned)) == [expected]


def test_a_ca_bundle_the_owner_applies_itself_is_not_forced_over(
    client: Client, namespace: str, issuer: Issuer, cleanup: list[tuple[str, str]]
) -> None:
    name = f"gitops-{uuid.uuid4().hex[:8]}"
    cleanup.append((VWC_PATH, name))
    body = validating_webhook(name, namespace, "absent", issuer.selector(), webhooks=1)
    theirs = b64("their own bundle")
    body["webhooks"][0]["clientConfig"]["caBundle"] = theirs
    with RunningInjector(client) as injector:
        apply(client, VWC_PATH, name, body)
        kind = "ValidatingWebhookConfiguration"
        eventually(lambda: injector.controller.metrics.count(kind, "conflict") >= 1)
        events = eventually(lambda: events_about(client, name, REASON_CONFLICT), timeout=30)
        assert OWNER in events[0]["note"]
        # Nothing written: the owner's next apply succeeds without a conflict.
        assert ca_bundles(apply(client, VWC_PATH, name, body)) == [theirs]
        assert not ours(client.get(f"{VWC_PATH}/{name}"))


def test_owner_switches_a_crd_to_no_conversion_after_the_release(
    client: Client, namespace: str, issuer: Issuer, cleanup: list[tuple[str, str]]
) -> None:
    group = f"g{uuid.uuid4().hex[:8]}.example.com"
    body = conversion_crd(group, namespace, issuer.selector())
    name = body["metadata"]["name"]
    cleanup.append((CRD_PATH, name))
    with RunningInjector(client):
        released = inject_then_release(client, CRD_PATH, body, [b64(issuer.bundle())])
        assert ca_bundles(released) == [b64(issuer.bundle())]
        none = without_annotation(body)
        none["spec"]["conversion"] = {"strategy": "None"}
        stored = apply(client, CRD_PATH, name, none)
        assert stored["spec"]["conversion"]["strategy"] == "None"


def test_owner_makes_an_apiservice_local_after_the_release(
    client: Client, namespace: str, issuer: Issuer, cleanup: list[tuple[str, str]]
) -> None:
    group = f"g{uuid.uuid4().hex[:8]}.example.com"
    name = f"v1alpha1.{group}"
    cleanup.append((APISERVICE_PATH, name))
    body = api_service(group, namespace, issuer.selector())
    with RunningInjector(client):
        released = inject_then_release(client, APISERVICE_PATH, body, [b64(issuer.bundle())])
        # The caBundle stays through the release (the APIService keeps being verified) ...
        assert ca_bundles(released) == [b64(issuer.bundle())]
        # ... and is the owner's: its next apply, local and without one, removes it (a
        # local APIService may not have a caBundle: kept, it would be a 422).
        local = without_annotation(body)
        del local["spec"]["service"]
        stored = apply(client, APISERVICE_PATH, name, local)
        assert "service" not in stored["spec"] and "caBundle" not in stored["spec"]


def test_owner_gives_a_webhook_its_own_ca_bundle_after_the_release(
    client: Client, namespace: str, issuer: Issuer, cleanup: list[tuple[str, str]]
) -> None:
    """Two webhooks: after the release the owner's next apply gives the first its own
    caBundle and sets none on the second. No conflict (the field is the owner's own);
    the first keeps the owner's value, the second's is gone, and the injector, no
    longer asked, writes neither again."""
    name = f"gitops-{uuid.uuid4().hex[:8]}"
    cleanup.append((VWC_PATH, name))
    body = validating_webhook(name, namespace, "absent", issuer.selector(), webhooks=2)
    theirs = b64("the owner's own bundle")
    with RunningInjector(client) as injector:
        released = inject_then_release(client, VWC_PATH, body, [b64(issuer.bundle())] * 2)
        assert ca_bundles(released) == [b64(issuer.bundle())] * 2
        own = without_annotation(body)
        own["webhooks"][0]["clientConfig"]["caBundle"] = theirs
        stored = apply(client, VWC_PATH, name, own)
        assert ca_bundles(stored) == [theirs, ""]
        # The owner's apply is an event the injector has seen; it leaves the object be.
        injector.delivered(
            "ValidatingWebhookConfiguration", name, stored["metadata"]["resourceVersion"]
        )
        assert ca_bundles(client.get(f"{VWC_PATH}/{name}")) == [theirs, ""]
        assert not ours(client.get(f"{VWC_PATH}/{name}"))


def test_owner_removes_a_webhook_ca_bundle_by_omitting_it_after_the_release(
    client: Client, namespace: str, issuer: Issuer, cleanup: list[tuple[str, str]]
) -> None:
    name = f"gitops-{uuid.uuid4().hex[:8]}"
    cleanup.append((VWC_PATH, name))
    body = validating_webhook(name, namespace, "absent", issuer.selector(), webhooks=1)
    with RunningInjector(client):
        released = inject_then_release(client, VWC_PATH, body, [b64(issuer.bundle())])
        # Nothing breaks the moment the annotation goes: the value is there, the owner's.
        assert ca_bundles(released) == [b64(issuer.bundle())]
        [hook] = released["webhooks"]
        owner = [e for e in released["metadata"]["managedFields"] if e["manager"] == OWNER]
        key = f'k:{{"name":"{hook["name"]}"}}'
        assert "f:caBundle" in owner[0]["fieldsV1"]["f:webhooks"][key]["f:clientConfig"]
        # Its next apply, whose configuration sets no caBundle, removes it.
        stored = apply(client, VWC_PATH, name, without_annotation(body))
        assert ca_bundles(stored) == [""]


CLIENT_SIDE = "kubectl-client-side-apply"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def client_side_apply(client: Client, path: str, config: dict[str, Any]) -> dict[str, Any]:
    """What `kubectl apply` (client-side) sends for `config`: a create carrying the
    last-applied-configuration annotation, or a three-way merge patch (set what differs
    from the live object, delete what the last-applied configuration had and `config`
    has not; nothing else: kubectl never reads managedFields) carrying the new annotation,
    both as field manager `kubectl-client-side-apply` (an Update)."""
    name = config["metadata"]["name"]
    annotated = copy.deepcopy(config)
    annotated["metadata"].setdefault("annotations", {})[LAST_APPLIED] = json.dumps(
        config, sort_keys=True
    )
    try:
        live = client.get(f"{path}/{name}")
    except ApiError as err:
        if not is_not_found(err):
            raise
        return client.create(path, annotated, params={"fieldManager": CLIENT_SIDE})
    last = json.loads(live["metadata"]["annotations"][LAST_APPLIED])
    diff = three_way(last, annotated, live)
    return client.patch(f"{path}/{name}", diff, params={"fieldManager": CLIENT_SIDE})


def three_way(original: Any, modified: Any, current: Any) -> dict[str, Any]:
    """kubectl's three-way merge of maps (the objects here have no lists it merges)."""
    patch: dict[str, Any] = {}
    for key, value in modified.items():
        now = current.get(key) if isinstance(current, dict) else None
        if isinstance(value, dict) and isinstance(now, dict):
            inner = three_way((original or {}).get(key) or {}, value, now)
            if inner:
                patch[key] = inner
        elif value != now:
            patch[key] = value
    for key in (original or {}).keys() - modified.keys():
        patch[key] = None
    return patch


def upgrade_to_server_side(client: Client, path: str, manager: str) -> None:
    """What `kubectl apply --server-side --field-manager=<manager>` does first on an
    object client-side apply made (client-go util/csaupgrade): the
    `kubectl-client-side-apply` Update entry becomes `manager`'s Apply entry, so the
    fields it owned are the new manager's to keep or remove."""
    live = client.get(path)
    entries = live["metadata"]["managedFields"]
    for entry in entries:
        if entry["manager"] == CLIENT_SIDE and entry["operation"] == "Update":
            entry["manager"], entry["operation"] = manager, "Apply"
    client.patch(
        path,
        [
            {"op": "replace", "path": "/metadata/managedFields", "value": entries},
            {
                "op": "replace",
                "path": "/metadata/resourceVersion",
                "value": live["metadata"]["resourceVersion"],
            },
        ],
        patch_type="application/json-patch+json",
    )


def annotated_api_service(
    namespace: str, issuer: Issuer, cleanup: list[tuple[str, str]]
) -> tuple[str, str, dict[str, Any]]:
    """A new APIService's name, path and manifest selecting `issuer`'s bundle (deleted
    after the test)."""
    name = f"v1alpha1.g{uuid.uuid4().hex[:8]}.example.com"
    cleanup.append((APISERVICE_PATH, name))
    return name, f"{APISERVICE_PATH}/{name}", api_service(name[9:], namespace, issuer.selector())


def test_a_client_side_owner_keeps_the_value_until_it_moves_to_server_side_apply(
    client: Client, namespace: str, issuer: Issuer, cleanup: list[tuple[str, str]]
) -> None:
    """`kubectl apply` (client-side) removes only fields its last-applied-configuration
    lists, and the injector does not edit that annotation (an admission policy cannot
    confine an edit inside it). So the released caBundle stays through every client-side
    apply, like any field the owner's manifest never set: an APIService made local that
    way is refused until the owner removes it. The release hands it to the owner's
    `kubectl-client-side-apply` entry, so once the owner moves to server-side apply the
    caBundle is its own, and its apply without one removes it."""
    _, path, body = annotated_api_service(namespace, issuer, cleanup)
    expected = [b64(issuer.bundle())]
    with RunningInjector(client):
        client_side_apply(client, APISERVICE_PATH, body)
        eventually(lambda: ca_bundles(client.get(path)) == expected, timeout=30)
        client_side_apply(client, APISERVICE_PATH, without_annotation(body))
        released = eventually(
            lambda: (o := client.get(path)) and not ours(o) and o,
            timeout=30,
            what="the injector to release its fields",
        )
        assert ca_bundles(released) == expected
        local = without_annotation(body)
        del local["spec"]["service"]
        with pytest.raises(ApiError) as refused:
            client_side_apply(client, APISERVICE_PATH, local)
        assert refused.value.status == 422 and "caBundle" in str(refused.value.body)
        assert ca_bundles(client.get(path)) == expected
        # The owner moves to server-side apply: the caBundle is its own to drop.
        upgrade_to_server_side(client, path, "kubectl")
        stored = client.patch(path, local, patch_type=APPLY, params={"fieldManager": "kubectl"})
        assert "service" not in stored["spec"] and "caBundle" not in stored["spec"]


def kubectl(plane: ControlPlane, *args: str, manifest: dict[str, Any] | None = None) -> str:
    """The real kubectl against `plane` (its stdin `manifest` as JSON): stdout, or the
    failure's stderr raised as CalledProcessError."""
    done = subprocess.run(
        [str(tool("kubectl")), f"--kubeconfig={plane.kubeconfig}", *args],
        input=None if manifest is None else json.dumps(manifest),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, args, done.stdout, done.stderr)
    return done.stdout


def test_the_documented_kubectl_patch_lets_a_client_side_owner_make_an_apiservice_local(
    control_plane: ControlPlane,
    client: Client,
    namespace: str,
    issuer: Issuer,
    cleanup: list[tuple[str, str]],
) -> None:
    """docs/inject.md's way out for a client-side owner, with the real kubectl: after the
    release its `kubectl apply` of a local APIService is refused for the caBundle it never
    set; the page's `kubectl patch --type=json` removing /spec/caBundle is admitted, and
    the same apply then makes the APIService local."""
    name, path, body = annotated_api_service(namespace, issuer, cleanup)
    expected = [b64(issuer.bundle())]
    with RunningInjector(client):
        kubectl(control_plane, "apply", "-f", "-", manifest=body)
        eventually(lambda: ca_bundles(client.get(path)) == expected, timeout=30)
        kubectl(control_plane, "apply", "-f", "-", manifest=without_annotation(body))
        eventually(
            lambda: not ours(client.get(path)),
            timeout=30,
            what="the injector to release its fields",
        )
        local = without_annotation(body)
        del local["spec"]["service"]
        with pytest.raises(subprocess.CalledProcessError) as refused:
            kubectl(control_plane, "apply", "-f", "-", manifest=local)
        assert "caBundle" in refused.value.stderr
        assert ca_bundles(client.get(path)) == expected
        remove = '[{"op":"remove","path":"/spec/caBundle"}]'
        kubectl(control_plane, "patch", "apiservice", name, "--type=json", "-p", remove)
        kubectl(control_plane, "apply", "-f", "-", manifest=local)
        stored = client.get(path)
        assert "service" not in stored["spec"] and "caBundle" not in stored["spec"]


def test_an_object_deleted_before_its_release_is_not_re_created(
    client: Client, namespace: str, issuer: Issuer
) -> None:
    """The release patch tests the object's uid: a patch never creates, and a release
    racing a delete and re-create under the same name does not touch the new object."""
    from injector.kinds import VALIDATING_WEBHOOK, path_of, to_target
    from injector.targets import release_ops

    name = f"gone-{uuid.uuid4().hex[:8]}"
    created = client.create(VWC_PATH, validating_webhook(name, namespace, "absent", None))
    target = to_target(VALIDATING_WEBHOOK, created)
    delete_quietly(client, VWC_PATH, name)
    client.create(VWC_PATH, validating_webhook(name, namespace, "absent", None))
    with pytest.raises(Exception) as refused:
        client.patch(
            path_of(target),
            release_ops(target),
            patch_type="application/json-patch+json",
            params={"fieldManager": FIELD_MANAGER},
        )
    assert "422" in str(refused.value)
    delete_quietly(client, VWC_PATH, name)

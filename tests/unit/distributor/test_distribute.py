"""Distribution's decisions for one namespace (no server): create what is missing,
re-annotate what changed, delete what no configuration wants, never touch a ConfigMap
without our mark, and say so when a configuration is unusable or two clash."""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any, cast

import pytest
from cryptography.hazmat.primitives.serialization import Encoding

from distributor import decide
from distributor.controller import (
    CONFIGURATION_KEY,
    NAMESPACE_INDEX,
    Caches,
    DistributionController,
)
from distributor.decide import (
    Clash,
    Create,
    Delete,
    Update,
    annotations_patch,
    copy_body,
    plan,
    to_copy,
    to_distribution,
    to_namespace,
)
from injector.configmaps import LABEL, TRUSTSTORE_ANNOTATION
from injector.targets import ANNOTATION
from kube.client import ApiError
from kube.client import Client as KubeClient
from kube.controller import Requeue
from tests.unit import pki
from tests.unit.fakes import FakeCache
from trust.bundle import normalize_bundle

SELECTOR = json.dumps({"signerName": "example.com/roots", "labelSelector": {}})
HOME = "service-serving-signer"
HOME_UID = "uid-of-the-injector-namespace"


def config(
    name: str = "trust",
    target: str = "trust-bundle",
    namespace_selector: Any = None,
    annotations: dict[str, str] | None = None,
) -> decide.Distribution:
    data = {decide.NAME_KEY: target}
    if namespace_selector is not None:
        data[decide.NAMESPACE_SELECTOR_KEY] = (
            namespace_selector
            if isinstance(namespace_selector, str)
            else json.dumps(namespace_selector)
        )
    return to_distribution(
        {
            "metadata": {
                "name": name,
                "uid": f"uid-{name}",
                "annotations": {ANNOTATION: SELECTOR} if annotations is None else annotations,
            },
            "data": data,
        }
    )


def namespace(name: str = "apps", labels: dict[str, str] | None = None, **extra: Any) -> Any:
    return to_namespace({"metadata": {"name": name, "labels": labels or {}, **extra}})


def copy(
    name: str = "trust-bundle", owner: str = "trust", annotations: Any = None, labelled: bool = True
) -> Any:
    return to_copy(
        {
            "metadata": {
                "name": name,
                "namespace": "apps",
                "uid": "copy-uid",
                "labels": {decide.FROM_LABEL: owner, **({LABEL: "true"} if labelled else {})},
                "annotations": {
                    **({ANNOTATION: SELECTOR} if annotations is None else annotations),
                    decide.MARK_ANNOTATION: decide.ownership_mark(HOME_UID, owner, "apps", name),
                },
            }
        }
    )


def test_a_matching_namespace_without_a_copy_gets_one_labelled_for_injection() -> None:
    d = config()
    assert plan(namespace(), [d], [], key=HOME_UID) == [Create(d)]
    body = copy_body(d, "apps", HOME_UID, None)
    assert body["metadata"]["labels"] == {LABEL: "true", decide.FROM_LABEL: "trust"}
    assert body["metadata"]["annotations"][ANNOTATION] == SELECTOR
    assert "data" not in body  # nothing selected yet: the injector fills it later


def test_an_up_to_date_copy_needs_nothing() -> None:
    assert plan(namespace(), [config()], [copy()], key=HOME_UID) == []


def test_namespace_selector_decides_where_copies_exist() -> None:
    d = config(namespace_selector={"matchLabels": {"trust": "yes"}})
    assert plan(namespace(labels={"trust": "yes"}), [d], [], key=HOME_UID) == [Create(d)]
    assert plan(namespace(labels={"trust": "no"}), [d], [], key=HOME_UID) == []
    # The namespace stopped matching: our copy goes.
    assert plan(namespace(labels={}), [d], [copy()], key=HOME_UID) == [Delete(copy())]


def test_removing_the_configuration_deletes_its_copies() -> None:
    assert plan(namespace(), [], [copy()], key=HOME_UID) == [Delete(copy())]


def test_renaming_the_target_deletes_the_old_copy_and_creates_the_new() -> None:
    d = config(target="renamed")
    assert plan(namespace(), [d], [copy()], key=HOME_UID) == [Delete(copy()), Create(d)]


def test_a_changed_configuration_re_annotates_the_copy_under_its_uid() -> None:
    annotations = {ANNOTATION: SELECTOR, TRUSTSTORE_ANNOTATION: "truststore.p12"}
    d = config(annotations=annotations)
    stale = copy()
    assert plan(namespace(), [d], [stale], key=HOME_UID) == [Update(d, stale)]
    patch = annotations_patch(d, stale)["metadata"]
    assert patch["uid"] == "copy-uid"
    assert patch["annotations"][TRUSTSTORE_ANNOTATION] == "truststore.p12"
    # Copied annotations the configuration no longer has are removed (merge-patch null).
    back = annotations_patch(config(), copy(annotations=annotations))["metadata"]["annotations"]
    assert back[TRUSTSTORE_ANNOTATION] is None


def test_a_copy_whose_injection_label_was_removed_gets_it_back() -> None:
    # Without the label the ConfigMap target releases ca.crt: the copy would stay empty.
    d = config()
    unlabelled = copy(labelled=False)
    assert plan(namespace(), [d], [unlabelled], key=HOME_UID) == [Update(d, unlabelled)]
    assert annotations_patch(d, unlabelled)["metadata"]["labels"] == {LABEL: "true"}


def test_a_terminating_or_missing_namespace_gets_nothing() -> None:
    terminating = namespace(deletionTimestamp="2026-12-02T06:00:00Z")
    assert plan(terminating, [config()], [], key=HOME_UID) == []
    assert plan(None, [config()], [copy()], key=HOME_UID) == []


def test_two_configurations_for_one_name_clash_and_the_first_by_name_wins() -> None:
    first, second = config("a-trust"), config("b-trust")
    actions = plan(namespace(), [second, first], [], key=HOME_UID)
    assert actions == [Clash(second, first), Create(first)]


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"target": ""}, "configMapName"),
        ({"target": "Not_A_Name"}, "configMapName"),
        ({"namespace_selector": "{not json"}, "namespaceSelector"),
        ({"namespace_selector": {"matchLabels": {"bad key!": "x"}}}, "namespaceSelector"),
        ({"annotations": {}}, ANNOTATION),
    ],
    ids=["no-name", "bad-name", "selector-not-json", "selector-invalid", "no-selector"],
)
def test_an_unusable_configuration_creates_nothing_and_keeps_its_copies(
    kwargs: dict[str, Any], fragment: str
) -> None:
    d = config(**kwargs)
    assert d.problem is not None and fragment in d.problem
    assert plan(namespace(), [d], [], key=HOME_UID) == []
    assert plan(namespace(), [d], [copy()], key=HOME_UID) == []


# the loop's sync, over seeded caches ----------------------------------------------------


class Client:
    def __init__(self, exists: bool = False, error: ApiError | None = None) -> None:
        self.created: list[tuple[str, Any]] = []
        self.posts = 0
        self.exists = exists
        self.error = error

    def create(self, path: str, body: Any, params: Any = None) -> Any:
        self.posts += 1
        if self.exists:
            raise ApiError(409, "Conflict", {"reason": "AlreadyExists", "message": "exists"})
        if self.error is not None:
            raise self.error
        self.created.append((path, body))
        return body


class Warnings:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def warning(
        self, regarding: Any, reason: str, note: str, action: str, related: Any = None
    ) -> None:
        self.reasons.append(reason)


def distributor(
    configs: list[Any], client: Client
) -> tuple[DistributionController, Warnings, FakeCache[Any]]:
    home = to_namespace({"metadata": {"name": HOME, "uid": HOME_UID}})
    namespaces: FakeCache[Any] = FakeCache([namespace(), home], key=lambda n: n.name)
    config_cache: FakeCache[Any] = FakeCache(configs, key=lambda d: d.name)
    copies: FakeCache[Any] = FakeCache(
        key=lambda c: c.key, indexers={NAMESPACE_INDEX: lambda c: [c.namespace]}
    )
    warnings = Warnings()
    ctrl = DistributionController(
        cast(KubeClient, client),
        Caches(namespaces, config_cache, copies),
        warnings,
        namespace=HOME,
        key=lambda: HOME_UID,
    )
    return ctrl, warnings, config_cache


def test_sync_creates_the_copy_by_post_and_warns_only_from_the_configuration_key() -> None:
    client = Client()
    ctrl, warnings, _ = distributor([config(), config("broken", target="")], client)
    ctrl.sync("apps")
    assert [path for path, _ in client.created] == ["/api/v1/namespaces/apps/configmaps"]
    assert ctrl.metrics.count("created") == 1
    assert warnings.reasons == []  # a namespace's sync says nothing of configurations
    ctrl.sync(CONFIGURATION_KEY + "broken")
    ctrl.sync(CONFIGURATION_KEY + "trust")
    assert warnings.reasons == [decide.REASON_INVALID]


def test_an_existing_config_map_not_ours_is_left_and_reported_once_not_per_resync() -> None:
    client = Client(exists=True)
    ctrl, warnings, _ = distributor([config()], client)
    for _ in range(3):  # three resyncs
        ctrl.sync("apps")
    assert client.created == [] and warnings.reasons == [decide.REASON_NOT_OURS]
    assert client.posts == 1
    assert ctrl.metrics.count("not_ours") == 1 and ctrl.metrics.count("created") == 0


# What kube-apiserver answers a POST into a namespace deleted, or being deleted, after the
# namespace cache said it was there (the NamespaceLifecycle admission plugin).
GONE = ApiError(404, "Not Found", {"reason": "NotFound", "message": 'namespaces "apps" not found'})
TERMINATING = ApiError(
    403,
    "Forbidden",
    {
        "reason": "Forbidden",
        "message": 'configmaps "trust-bundle" is forbidden: unable to create new content in '
        "namespace apps because it is being terminated",
    },
)


@pytest.mark.parametrize("error", [GONE, TERMINATING], ids=["deleted", "terminating"])
def test_a_namespace_deleted_during_the_sync_ends_it_quietly(error: ApiError) -> None:
    ctrl, warnings, _ = distributor([config()], Client(error=error))
    assert ctrl.sync("apps") is None  # no raise: no retry of a namespace that is going
    assert warnings.reasons == []


def test_any_other_refusal_of_the_create_is_retried() -> None:
    refused = ApiError(403, "Forbidden", {"reason": "Forbidden", "message": "RBAC says no"})
    ctrl, _, _ = distributor([config()], Client(error=refused))
    with pytest.raises(ApiError):
        ctrl.sync("apps")
    assert ctrl.metrics.refusals("quota") == 0


# What kube-apiserver's ResourceQuota admission answers a POST into a namespace whose
# count/configmaps quota is used up.
QUOTA = ApiError(
    403,
    "Forbidden",
    {
        "reason": "Forbidden",
        "message": 'configmaps "trust-bundle" is forbidden: exceeded quota: cms, requested: '
        "count/configmaps=1, used: count/configmaps=10, limited: count/configmaps=10",
    },
)


def test_a_namespace_at_its_config_map_quota_is_an_event_and_a_count_not_a_sync_error() -> None:
    """A tenant whose namespace's ConfigMap quota is full gets no copy: that is the
    tenant's to fix, not a distributor failure. The sync ends without raising (so no sync
    error and no ServiceServingSignerTrustDistributorFailing), counts
    `trust_distributor_refusals_total{reason="quota"}`, warns once on the configuration,
    and posts again at the next resync: once the quota has room, the copy is made."""
    client = Client(error=QUOTA)
    ctrl, warnings, _ = distributor([config()], client)
    for _ in range(3):  # three resyncs
        assert ctrl.sync("apps") is None
    assert client.posts == 3 and client.created == []
    assert ctrl.metrics.refusals("quota") == 3 and ctrl.metrics.count("created") == 0
    assert warnings.reasons == [decide.REASON_QUOTA]
    client.error = None  # the tenant deleted a ConfigMap of its own
    ctrl.sync("apps")
    assert [path for path, _ in client.created] == ["/api/v1/namespaces/apps/configmaps"]
    assert ctrl.metrics.count("created") == 1


def test_many_namespaces_at_their_quota_make_one_event_an_hour_per_configuration() -> None:
    """Every namespace at its quota is counted and logged; the configuration gets one
    Warning an hour, not one per namespace per resync."""
    client = Client(error=QUOTA)
    ctrl, warnings, _ = distributor([config()], client)
    names = [f"team-{i}" for i in range(20)]
    for ns in names:
        ctrl.namespaces.put(namespace(ns))  # type: ignore[attr-defined]
    for _ in range(2):  # two resyncs
        for ns in names:
            assert ctrl.sync(ns) is None
    assert warnings.reasons == [decide.REASON_QUOTA]
    assert ctrl.metrics.refusals("quota") == 2 * len(names)


# ownership that cannot be forged -------------------------------------


def marked(
    name: str = "trust-bundle",
    owner: str = "trust",
    *,
    key: str = HOME_UID,
    namespace_name: str = "apps",
    data: dict[str, str] | None = None,
    owner_references: list[Any] | None = None,
    mark_for: str | None = None,
) -> Any:
    """A ConfigMap bearing our label and the mark an installation keyed `key` computes
    (for `mark_for`, another ConfigMap's name, when a mark was copied from it)."""
    mark = decide.ownership_mark(key, owner, namespace_name, mark_for or name)
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace_name,
        "uid": "copy-uid",
        "labels": {decide.FROM_LABEL: owner, LABEL: "true"},
        "annotations": {ANNOTATION: SELECTOR, decide.MARK_ANNOTATION: mark},
    }
    if owner_references:
        meta["ownerReferences"] = owner_references
    return to_copy({"metadata": meta, "data": data or {"ca.crt": "pem"}})


def test_a_tenant_label_alone_never_makes_a_config_map_ours() -> None:
    # kube-system/coredns labelled by someone who may patch it: no mark, foreign keys.
    forged = to_copy(
        {
            "metadata": {
                "name": "coredns",
                "namespace": "apps",
                "uid": "coredns-uid",
                "labels": {decide.FROM_LABEL: "trust"},
            },
            "data": {"Corefile": ".:53 {}"},
        }
    )
    assert not forged.ours(HOME_UID)
    d = config(target="coredns")
    actions = plan(namespace(), [d], [forged], key=HOME_UID)
    assert not any(isinstance(a, (Delete, Update, Create)) for a in actions)
    assert plan(namespace(), [], [forged], key=HOME_UID) == []


def test_a_mark_copied_to_another_config_map_does_not_verify() -> None:
    assert marked().ours(HOME_UID)
    # The mark binds the namespace and name: copied from a real copy, it proves nothing.
    assert not marked("other", mark_for="trust-bundle").ours(HOME_UID)
    moved = marked()
    assert not dataclasses.replace(moved, namespace="kube-system").ours(HOME_UID)
    # And the installation: another installation's key does not verify it.
    assert not marked().ours("another-installation")


def test_a_marked_config_map_holding_keys_other_than_ours_is_never_deleted() -> None:
    extra = marked(data={"ca.crt": "pem", "Corefile": ".:53 {}"})
    assert not extra.ours(HOME_UID)
    assert plan(namespace(), [], [extra], key=HOME_UID) == []
    owned = marked(owner_references=[{"kind": "Deployment", "name": "x", "uid": "u"}])
    assert not owned.ours(HOME_UID)
    assert plan(namespace(), [], [owned], key=HOME_UID) == []


def test_two_installations_coexist() -> None:
    a_copy = marked(key="installation-a")
    b_copy = marked("b-bundle", key="installation-b")
    a_config, b_config = config(), config(target="b-bundle")
    # Each keeps its own copy and leaves the other's alone, whatever it configures.
    assert plan(namespace(), [a_config], [a_copy, b_copy], key="installation-a") == []
    assert plan(namespace(), [b_config], [a_copy, b_copy], key="installation-b") == []
    assert plan(namespace(), [], [a_copy, b_copy], key="installation-b") == [Delete(b_copy)]
    # Both configure the same name: the second reports the first's copy, posts nothing.
    actions = plan(namespace(), [config()], [a_copy], key="installation-b")
    assert [type(a) for a in actions] == [decide.NotOurs]


def test_a_copy_is_created_filled_and_marked() -> None:
    d = config(annotations={ANNOTATION: SELECTOR, TRUSTSTORE_ANNOTATION: "truststore.p12"})
    pem = normalize_bundle(pki.ca("distributed").cert.public_bytes(Encoding.PEM).decode())
    body = copy_body(d, "apps", HOME_UID, pem)
    assert body["data"] == {"ca.crt": pem}
    assert "truststore.p12" in body["binaryData"]
    annotations = body["metadata"]["annotations"]
    assert decide.MARK_ANNOTATION in annotations
    assert "service-serving-signer/truststore-digest" in annotations
    assert to_copy(body | {"metadata": body["metadata"] | {"uid": "u"}}).ours(HOME_UID)


# ownership keyed by a secret (not by anything readable cluster-wide) ---------------------

SECRET_KEY = base64.b64encode(b"an installation key, 32 bytes+..").decode()
"""The Secret's `data.key` as stored (base64 of at least 32 bytes): the HMAC key text."""
KEY_PATH = f"/api/v1/namespaces/{HOME}/secrets/service-serving-signer-distribution-key"


class ApiServer:
    """A fake API for the controller's reads and writes: the key Secret (GET, PUT with a
    resourceVersion precondition) and ConfigMap POST / PATCH / DELETE, recorded."""

    def __init__(self, key: str | None = SECRET_KEY, *, secret: bool = True) -> None:
        self.secret: dict[str, Any] | None = None
        if secret:
            self.secret = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": "service-serving-signer-distribution-key",
                    "resourceVersion": "1",
                },
            }
            if key is not None:
                self.secret["data"] = {"key": key}
        self.reads = 0
        self.puts: list[dict[str, Any]] = []
        self.created: list[Any] = []
        self.patches: list[tuple[str, Any]] = []
        self.deletes: list[tuple[str, Any]] = []

    def get(self, path: str, params: Any = None) -> Any:
        assert path == KEY_PATH, path
        self.reads += 1
        if self.secret is None:
            raise ApiError(404, "Not Found", {"reason": "NotFound", "message": "not found"})
        return json.loads(json.dumps(self.secret))

    def replace(self, path: str, body: Any, params: Any = None) -> Any:
        assert path == KEY_PATH and self.secret is not None
        if body["metadata"].get("resourceVersion") != self.secret["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", {"reason": "Conflict", "message": "modified"})
        self.puts.append(body)
        body["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)
        self.secret = body
        return body

    def create(self, path: str, body: Any, params: Any = None) -> Any:
        self.created.append(body)
        return body

    def patch(self, path: str, body: Any, **kwargs: Any) -> Any:
        self.patches.append((path, body))
        return body

    def delete(self, path: str, body: Any = None, params: Any = None) -> Any:
        self.deletes.append((path, body))
        return {}


def running(
    api: ApiServer, copies: list[Any], configs: list[Any] | None = None, home_uid: str = HOME_UID
) -> DistributionController:
    """The controller as production builds it (its key from the API), over fake caches."""
    home = to_namespace({"metadata": {"name": HOME, "uid": home_uid}})
    namespaces: FakeCache[Any] = FakeCache(
        [to_namespace({"metadata": {"name": "apps", "uid": "apps-uid"}}), home],
        key=lambda n: n.name,
    )
    copy_cache: FakeCache[Any] = FakeCache(
        copies, key=lambda c: c.key, indexers={NAMESPACE_INDEX: lambda c: [c.namespace]}
    )
    return DistributionController(
        cast(KubeClient, api),
        Caches(namespaces, FakeCache(configs or [], key=lambda d: d.name), copy_cache),
        Warnings(),
        namespace=HOME,
    )


def test_a_mark_made_from_the_readable_namespace_uid_is_not_ours() -> None:
    """The namespace's UID is readable by anyone with cluster-wide `view`: a tenant who
    computes the mark from it owns nothing, and the controller deletes only what the
    installation's secret key marked."""
    forged = marked(key=HOME_UID)
    api = ApiServer()
    running(api, [forged]).sync("apps")
    assert api.deletes == [] and api.patches == []
    real = marked(key=SECRET_KEY)
    running(api, [real]).sync("apps")
    assert [path for path, _ in api.deletes] == ["/api/v1/namespaces/apps/configmaps/trust-bundle"]


def test_ownership_survives_the_injector_namespace_being_re_created() -> None:
    """Re-creating the namespace changes its UID; with the key Secret restored, every
    copy is still ours (updated, deleted)."""
    api = ApiServer()
    ctrl = running(api, [marked(key=SECRET_KEY)], home_uid="a-new-uid-after-re-creation")
    ctrl.sync("apps")
    assert len(api.deletes) == 1


def test_an_empty_key_secret_is_filled_once_with_a_random_key() -> None:
    api = ApiServer(key=None)
    first = running(api, [])
    first.sync("apps")
    assert len(api.puts) == 1
    stored = base64.b64decode(api.puts[0]["data"]["key"])
    assert len(stored) >= 32
    # Another replica (or a restart) reads the same key and writes nothing.
    again = running(api, [marked(key=first.installation_key())])
    again.sync("apps")
    assert len(api.puts) == 1 and len(api.deletes) == 1


def test_without_the_key_secret_nothing_is_distributed_or_deleted() -> None:
    api = ApiServer(secret=False)
    running(api, [], [config()]).sync("apps")
    running(api, [marked(key=HOME_UID)]).sync("apps")
    assert api.created == [] and api.deletes == [] and api.puts == []


def test_a_delete_is_preconditioned_on_uid_and_resource_version() -> None:
    """A key added to the copy after the cache saw it makes the DELETE fail (409)
    instead of deleting it with the copy."""
    api = ApiServer()
    copy_ = dataclasses.replace(marked(key=SECRET_KEY), resource_version="42")
    running(api, [copy_]).sync("apps")
    ((_, body),) = api.deletes
    assert body["preconditions"] == {"uid": "copy-uid", "resourceVersion": "42"}


def test_the_resource_version_is_read_from_the_config_map() -> None:
    raw = {
        "metadata": {
            "name": "trust-bundle",
            "namespace": "apps",
            "uid": "u",
            "resourceVersion": "7",
            "labels": {decide.FROM_LABEL: "trust"},
        }
    }
    assert to_copy(raw).resource_version == "7"
    # A new resourceVersion alone is no change a handler acts on.
    assert to_copy(raw) == to_copy(raw | {"metadata": raw["metadata"] | {"resourceVersion": "8"}})


def test_a_namespace_re_created_after_a_refused_create_gets_its_copy_at_once() -> None:
    """The hour without a POST after AlreadyExists belongs to that namespace, not to its
    name: a namespace deleted and made again (a new UID) is created into at once."""
    client = Client(exists=True)
    ctrl, _, _ = distributor([config()], client)
    ctrl.sync("apps")
    assert client.posts == 1
    ctrl.namespaces.put(namespace(uid="apps-uid-2"))  # type: ignore[attr-defined]
    client.exists = False
    ctrl.sync("apps")
    assert client.posts == 2 and len(client.created) == 1


def test_a_key_an_administrator_put_there_is_used_never_replaced_and_a_short_one_refused() -> None:
    short = ApiServer(key=base64.b64encode(b"guessable").decode())
    running(short, [], [config()]).sync("apps")
    assert short.puts == [] and short.created == []


def test_two_leaders_filling_the_key_at_once_end_with_one_key() -> None:
    api = ApiServer(key=None)
    winner = base64.b64encode(b"w" * 32).decode()
    real_get = api.get

    def get_then_lose_the_race(path: str, params: Any = None) -> Any:
        seen = real_get(path, params)
        if api.reads == 1:  # the other leader fills it between our GET and our PUT
            assert api.secret is not None
            api.secret = {**api.secret, "data": {"key": winner}}
            api.secret["metadata"] = {**api.secret["metadata"], "resourceVersion": "2"}
        return seen

    api.get = get_then_lose_the_race  # type: ignore[method-assign]
    ctrl = running(api, [])
    assert ctrl.installation_key() == winner and api.puts == []


@pytest.mark.parametrize("write", ["delete", "patch"])
def test_a_write_whose_precondition_failed_judges_the_namespace_again(write: str) -> None:
    """409: the copy changed after the cache saw it (a key added, the injector's release).
    Such a change may touch nothing the record keeps, so no event would bring the
    namespace back: the sync asks to be retried instead of dropping the write."""
    conflict = ApiError(409, "Conflict", {"reason": "Conflict", "message": "precondition"})
    api = ApiServer()

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise conflict

    setattr(api, write, refuse)
    stale = marked(key=SECRET_KEY)
    if write == "patch":  # wanted, but its opt-in label is gone: a re-label
        stale = dataclasses.replace(stale, labelled=False)
    ctrl = running(api, [stale], [config()] if write == "patch" else [])
    assert ctrl.sync("apps") == Requeue()
    assert ctrl.metrics.count("deleted") == ctrl.metrics.count("updated") == 0


@pytest.mark.parametrize("answer", ["missing", "forbidden", "present"])
def test_the_key_is_read_once_for_many_syncs_whatever_the_answer(answer: str) -> None:
    """Ten thousand namespaces' syncs cost one GET of the key Secret, not one each, also
    while it is missing or refused; a refusal fails every sync (loudly) until re-read."""
    api = ApiServer(secret=answer != "missing")
    if answer == "forbidden":
        real_get = api.get

        def forbidden(path: str, params: Any = None) -> Any:
            real_get(path, params)  # counted
            raise ApiError(403, "Forbidden", {"reason": "Forbidden", "message": "RBAC"})

        api.get = forbidden  # type: ignore[method-assign]
    ctrl = running(api, [])
    for _ in range(100):
        if answer == "forbidden":
            with pytest.raises(ApiError):
                ctrl.sync("apps")
        else:
            ctrl.sync("apps")
    assert api.reads == 1


def test_a_config_map_bearing_the_label_costs_a_small_record_whatever_it_holds() -> None:
    """Anyone may put `distributed-from` on a ConfigMap; the copies informer caches it.
    Its copied annotations (up to 256 KiB in all) are kept as a digest."""
    huge = {k: "x" * 80_000 for k in decide.COPIED_ANNOTATIONS}
    record = to_copy(
        {
            "metadata": {
                "name": "n" * 253,
                "namespace": "s" * 63,
                "uid": "u" * 36,
                "resourceVersion": "9" * 20,
                "labels": {decide.FROM_LABEL: "f" * 63},
                "annotations": {**huge, decide.MARK_ANNOTATION: "m" * 5000},
            },
            "data": {"blob": "y" * 1_000_000},
        }
    )
    assert len(repr(record)) < 2048
    # A change of any copied annotation is still seen.
    other = to_copy(
        {
            "metadata": {
                "name": "n",
                "labels": {decide.FROM_LABEL: "f"},
                "annotations": {**huge, ANNOTATION: "changed"},
            }
        }
    )
    assert (
        other.annotations_digest
        != to_copy(
            {"metadata": {"name": "n", "labels": {decide.FROM_LABEL: "f"}, "annotations": huge}}
        ).annotations_digest
    )


def test_many_namespaces_not_ours_make_one_event_an_hour_per_configuration() -> None:
    """A lost key leaves a copy in every namespace that is no longer ours: each is counted
    and logged, but the configuration gets one Warning an hour, not one per namespace
    (ten thousand an hour at ten thousand namespaces)."""
    api = ApiServer()
    names = [f"team-{i}" for i in range(50)]
    orphans = [
        to_copy(
            {
                "metadata": {
                    "name": "trust-bundle",
                    "namespace": ns,
                    "uid": f"uid-{ns}",
                    "labels": {decide.FROM_LABEL: "trust", LABEL: "true"},
                    "annotations": {
                        ANNOTATION: SELECTOR,
                        decide.MARK_ANNOTATION: decide.ownership_mark(
                            "a lost key", "trust", ns, "trust-bundle"
                        ),
                    },
                },
                "data": {"ca.crt": "pem"},
            }
        )
        for ns in names
    ]
    ctrl = running(api, orphans, [config()])
    for ns in names:
        ctrl.namespaces.put(namespace(ns, uid=f"ns-{ns}"))  # type: ignore[attr-defined]
    for _ in range(2):  # two resyncs
        for ns in names:
            ctrl.sync(ns)
    warnings = cast(Warnings, ctrl.recorder)
    assert warnings.reasons == [decide.REASON_NOT_OURS]
    assert ctrl.metrics.count("not_ours") == len(names)
    assert api.created == [] and api.deletes == []

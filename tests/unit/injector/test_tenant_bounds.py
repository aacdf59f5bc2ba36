"""What a namespace tenant controls cannot make the injector's memory grow: the records it
caches, and how it finds ConfigMaps bearing its mark label (which anyone may set)."""

from __future__ import annotations

import json
import sys
import tracemalloc
from collections.abc import Mapping
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from injector import configmaps, decide
from injector.controller import SELECTION_INDEX, Caches, InjectorController, informers
from injector.kinds import ALL_KINDS, CONFIG_MAP, path_of
from injector.targets import (
    FIELD_MANAGER,
    INJECTED_ANNOTATION,
    MAX_ANNOTATION,
    Target,
    injected_note,
    known_holding,
    release_ops,
)
from kube.client import Client
from tests.unit.fakes import FakeCache
from tests.unit.injector.builders import SELECT_ALL, SIGNER, ctb

MIB = 1 << 20


def deep_size(obj: Any, seen: set[int] | None = None) -> int:
    """Bytes a record holds: the object and everything it alone refers to (strings,
    tuples, sets, nested records; shared singletons such as None and small ints count)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, str | bytes | int | float | bool) or obj is None:
        return size
    if isinstance(obj, Mapping):
        return size + sum(deep_size(k, seen) + deep_size(v, seen) for k, v in obj.items())
    if isinstance(obj, tuple | list | frozenset | set):
        return size + sum(deep_size(item, seen) for item in obj)
    for name in getattr(type(obj), "__slots__", ()):
        size += deep_size(getattr(obj, name, None), seen)
    if hasattr(obj, "__dict__"):
        size += deep_size(vars(obj), seen)
    return size


def hostile_config_map(name: str = "trust", **meta: Any) -> dict[str, Any]:
    """Every field a tenant may fill that a record once kept, at the most the API lets it
    write: an 8 KiB `injected` note, a 1 KiB truststore password, thousands of
    managedFields entries (of other appliers and claiming to be ours), 1 MiB of data; a
    63-character name and truststore key (each character of those costs a byte: the
    record must name the object and the key)."""
    return {
        "metadata": {
            "name": name.ljust(63, "n"),
            "namespace": "tenant",
            "uid": "0f0f0f0f-0000-0000-0000-000000000000",
            "resourceVersion": "123456789",
            "labels": {configmaps.LABEL: "true"},
            "annotations": {
                configmaps.ANNOTATION: SELECT_ALL,
                INJECTED_ANNOTATION: HOSTILE_NOTE,
                configmaps.TRUSTSTORE_ANNOTATION: "t".ljust(63, "t"),
                configmaps.TRUSTSTORE_PASSWORD_ANNOTATION: "p" * 1_024,
                configmaps.DIGEST_ANNOTATION: "d" * 4_000,
            },
            "managedFields": HOSTILE_MANAGERS,
            **meta,
        },
        "data": {"ca.crt": BIG, "app.conf": BIG},
        "binaryData": {"t".ljust(63, "t"): "C" * 1_000},
    }


BIG = "A" * MIB
HOSTILE_MANAGERS = [
    *(
        {
            "manager": f"m{i:05d}".ljust(128, "x"),
            "operation": "Apply",
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:ca.crt": {}}},
        }
        for i in range(500)
    ),
    *({"manager": FIELD_MANAGER, "operation": "Update"} for _ in range(500)),
]
HOSTILE_NOTE = json.dumps({"sha256": "0" * 64, "anchors": ["f" * 64] * 100, "notAfter": 1}).ljust(
    8_192
)


def per_record(transform: Any, raw: dict[str, Any], count: int = 100) -> float:
    """Bytes a cache holds per record, measured: each object decoded afresh (as the
    informer's decoder does), transformed, the object dropped, the record kept (so the
    strings a record shares with the object it came from count)."""
    text = json.dumps(raw)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        records = [transform(json.loads(text)) for _ in range(count)]
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(records) == count
    return held / count


def test_a_tenant_config_maps_record_costs_at_most_2_kb_whatever_the_tenant_wrote() -> None:
    """Digests of `injected` and of the password, a bounded count of managers, never the
    bytes: the cost per tenant ConfigMap stays under 2 KB (10,000 of them: < 20 MiB)."""
    raw = hostile_config_map()
    raw["data"] = {"ca.crt": "A" * 4096}  # content is digested: its size is not the point
    cost = per_record(configmaps.to_target, raw)
    assert cost <= 2_048, f"{cost:,.0f} bytes per record"


@pytest.mark.parametrize("valid", [True, False], ids=["valid", "invalid"])
def test_a_tenant_config_map_with_its_own_long_selector_costs_at_most_2_kb(valid: bool) -> None:
    """A tenant giving each ConfigMap its own selector of up to `MAX_ANNOTATION`
    characters once cost 5.2 KB a record (the text kept whole): the record keeps the
    canonical selector (at most `MAX_SELECTOR`) or why it is invalid (bounded), never the
    text — whether the text is a short selector padded with whitespace to the bound
    (valid) or 180 labels, ~3.9 KB, over `MAX_SELECTOR` once canonical (invalid)."""
    count = 300
    texts = []
    for i in range(count):
        raw = hostile_config_map()
        raw["data"] = {"ca.crt": "A" * 4096}
        labels = {f"k{j}": f"{i:06d}-{j:03d}" for j in range(12 if valid else 180)}
        selector = json.dumps({"signerName": SIGNER, "labelSelector": {"matchLabels": labels}})
        raw["metadata"]["annotations"][configmaps.ANNOTATION] = selector.ljust(MAX_ANNOTATION - 1)
        texts.append(json.dumps(raw))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        records = [configmaps.to_target(json.loads(t)) for t in texts]
        held = (tracemalloc.get_traced_memory()[0] - before) / count
    finally:
        tracemalloc.stop()
    assert (decide.selector_of(records[0]) is not None) == valid
    assert len({r.annotation for r in records}) == (count if valid else 1)
    assert held <= 2_048, f"{held:,.0f} bytes per record"


def test_a_tenant_cannot_grow_the_record_through_managed_fields() -> None:
    record = configmaps.to_target(hostile_config_map())
    assert len(record.others) <= 8 and len(record.owned) <= 8
    assert record.others[0].startswith("m00000")  # the conflict still names one


@settings(max_examples=40, deadline=None)
@given(
    anchors=st.lists(st.text("0123456789abcdef", min_size=64, max_size=64), max_size=40),
    not_after=st.integers(0, 2**40),
)
def test_what_a_written_note_says_is_held_survives_the_digest(
    anchors: list[str], not_after: int
) -> None:
    """The record keeps what `injected` says the object holds in a compact form: the same
    anchors and expiry come back (up to the bound; beyond it nothing is claimed)."""
    note = injected_note("the value", frozenset(anchors), not_after)
    raw = {
        "metadata": {"name": "t", "annotations": {INJECTED_ANNOTATION: note}},
        "data": {"ca.crt": "the value"},
    }
    held, until = known_holding(configmaps.to_target(raw))
    if len(set(anchors)) <= 16:
        assert (held, until) == (frozenset(anchors), float(not_after))
    else:
        assert held == frozenset()


# the departed ConfigMaps: the mark label without the opt-in label -------------------------


class NoLists:
    """A client that may patch but never LIST (nor GET) anything."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, Any]] = []

    def patch(self, path: str, body: Any, **_: Any) -> Any:
        self.patches.append((path, body))
        return {}

    def get(self, path: str, *_: Any, **__: Any) -> Any:
        raise AssertionError(f"read {path}: the injector reads tenant objects from informers")


class NoEvents:
    def warning(self, *_: Any) -> None:
        pass


def test_a_marked_config_map_without_the_opt_in_label_is_released_from_the_informer() -> None:
    """Anyone may put the mark label on their ConfigMaps (1 MiB each): the injector learns
    of them from a metadata-only streaming informer of small records, never from a LIST
    of whole objects; each is released (mark removed, our entries dropped) once."""
    raw = hostile_config_map()
    raw["metadata"]["labels"] = {configmaps.MARK_LABEL: "true"}
    raw["metadata"]["managedFields"] = [{"manager": FIELD_MANAGER, "operation": "Update"}]
    departed = configmaps.departed_record(raw)
    assert per_record(configmaps.departed_record, {**raw, "data": {}}) <= 1_024
    targets = {
        "ConfigMap": FakeCache[Target](
            key=lambda t: f"{t.namespace}/{t.name}", indexers={SELECTION_INDEX: lambda t: []}
        )
    }
    gone: FakeCache[Target] = FakeCache([departed], key=lambda t: f"{t.namespace}/{t.name}")
    client = NoLists()
    ctrl = InjectorController(
        cast(Client, client),
        Caches(
            targets,
            FakeCache([ctb("b", ["a"])], key=lambda b: b["metadata"]["name"]),
            {"ConfigMap": gone},
        ),
        NoEvents(),
        registry=CollectorRegistry(),
    )
    keys = ctrl.resync()
    assert keys == [departed.key]
    for key in keys:
        ctrl.sync(key)
    assert client.patches == [(path_of(departed), release_ops(departed))]
    assert {"op": "remove", "path": "/metadata/managedFields/0"} in release_ops(departed)
    assert ctrl.metrics.count("ConfigMap", "released") == 1


def test_what_the_injector_keeps_per_synced_tenant_config_map_beside_its_record() -> None:
    """After a sync the injector keeps, per object, its status (for the report and the
    gauge) and when it was last synced, and nothing per object of what objects have in
    common (the empty set of anchors held, digests of one value, index values): with the
    record, a tenant's labelled ConfigMap costs under 2 KB."""
    raw = hostile_config_map()
    raw["metadata"]["annotations"][configmaps.ANNOTATION] = json.dumps({"name": "none"})
    raw["data"] = {"app.conf": "x"}
    texts = [
        json.dumps({**raw, "metadata": {**raw["metadata"], "name": f"t-{i:05d}".ljust(63, "n")}})
        for i in range(COUNT)
    ]
    cache = FakeCache[Target](
        [], key=lambda t: f"{t.namespace}/{t.name}", indexers={SELECTION_INDEX: configmap_selection}
    )
    ctrl = InjectorController(
        cast(Client, NoLists()),
        Caches({"ConfigMap": cache}, FakeCache([], key=lambda b: b["metadata"]["name"])),
        NoEvents(),
        registry=CollectorRegistry(),
    )
    ctrl.progress.begin()
    # The controller itself (metrics, queue: ~70 KB whatever the count) is not per object.
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        records = [configmaps.to_target(json.loads(text)) for text in texts]
        for record in records:
            cache.put(record)
        synced = tracemalloc.get_traced_memory()[0]
        for record in records:
            ctrl.sync(record.key)
        kept = (tracemalloc.get_traced_memory()[0] - synced) / COUNT
        total = (tracemalloc.get_traced_memory()[0] - before) / COUNT
    finally:
        tracemalloc.stop()
    assert ctrl.metrics.count("ConfigMap", "empty") == COUNT
    assert kept <= 512, f"{kept:,.0f} bytes per object beside its record"
    assert total <= 2_048, f"{total:,.0f} bytes per object in all"


COUNT = 200
"""Enough objects that the per-object cost is steady (500 measured within 15 bytes of it,
at 2.5x the time)."""


def configmap_selection(target: Target) -> list[str]:
    selector = decide.selector_of(target)
    return decide.selection_keys(selector) if selector is not None else []


def test_every_informer_over_tenant_writable_objects_lists_in_small_pages() -> None:
    """Anyone who may write a ConfigMap may label 1 MiB ones for injection (or with our
    mark): when the server refuses streaming lists, a LIST page of the opt-in or the
    departed informer is decoded whole, so each lists `TENANT_PAGE` objects a page, not
    the factory's 500. Every informer of a namespaced kind is pinned here."""
    made: dict[str, dict[str, Any]] = {}

    class Recording:
        def informer(self, path: str, **kw: Any) -> Any:
            made[kw["name"]] = {"path": path, **kw}
            return FakeCache(key=lambda t: t.name)

    informers(cast(Any, Recording()), ctb_version="v1beta1")
    tenant = {
        name: kw.get("page_size", 500) for name, kw in made.items() if kw["path"] == CONFIG_MAP.path
    }
    assert set(tenant) == {"configmaps-injector", "configmaps-injector-departed"}
    assert all(size <= configmaps.TENANT_PAGE <= 10 for size in tenant.values()), tenant
    namespaced = [k for k in ALL_KINDS if k.namespaced]
    assert all(k.page_size <= configmaps.TENANT_PAGE for k in namespaced)

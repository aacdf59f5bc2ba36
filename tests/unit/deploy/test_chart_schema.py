"""The chart's values schema offers exactly the choices `run` accepts: its enums are read
from the binary's tables, so a key type or log format added there cannot be refused (or
a removed one accepted) at `helm install`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from manager.options import LOG_FORMATS
from trust import keys

SCHEMA = (
    Path(__file__).resolve().parents[3] / "charts" / "service-serving-signer" / "values.schema.json"
)


def _property(*path: str) -> Any:
    node = json.loads(SCHEMA.read_text())
    for name in path:
        node = node["properties"][name]
    return node


def test_the_managed_ca_key_types_are_the_key_tables() -> None:
    assert tuple(_property("managedCA", "keyType")["enum"]) == keys.managed_ca_key_types()


def test_the_log_formats_are_runs() -> None:
    assert tuple(_property("logFormat")["enum"]) == LOG_FORMATS

"""docs/interfaces.md names the seams between packages by their dotted names; each one
must exist, so the page cannot drift from the code unseen."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "interfaces.md"
OURS = (
    "kube",
    "trust",
    "signer",
    "publisher",
    "injector",
    "distributor",
    "managedca",
    "manager",
    "troubleshoot",
    "cli",
    "controlplane",
)
DOTTED = re.compile(rf"(?<![\w./])((?:{'|'.join(OURS)})(?:\.[A-Za-z_]\w*)+)")


def quoted_names() -> list[str]:
    """Every dotted name of ours in a code span (a span broken over lines is joined)."""
    names: set[str] = set()
    for span in re.findall(r"`([^`]+)`", PAGE.read_text()):
        names.update(DOTTED.findall(re.sub(r"\s+", "", span)))
    return sorted(names)


def resolves(name: str) -> bool:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            fields = getattr(found, "__dataclass_fields__", {})
            if attr in fields:
                return attr == parts[-1]
            if not hasattr(found, attr):
                return False
            found = getattr(found, attr)
        return True
    return False


def test_the_page_names_the_seams() -> None:
    assert len(quoted_names()) >= 50


@pytest.mark.parametrize("name", quoted_names())
def test_every_name_the_page_quotes_exists(name: str) -> None:
    assert resolves(name), f"docs/interfaces.md names {name}, which the code does not define"

"""Types shared by every module that handles Kubernetes objects.

`JSON` is a decoded Kubernetes object (or any JSON object the API server sends or
accepts): the shape the client returns and the caches hold. Defined once here, so a
stricter type later changes one line.
"""

from __future__ import annotations

from typing import Any, TypeAlias

JSON: TypeAlias = dict[str, Any]

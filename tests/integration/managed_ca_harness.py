"""Shared steps of the managed-CA integration tests: read the phase, and move a stored
retire time into the past (retire is due hours after a swap; a test may move the
persisted timestamp, never a test-only flag in the product)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from kube.client import ApiError, Client, is_conflict, is_not_found
from managedca.store import PHASE, PREVIOUS, format_time


def phase(client: Client, secret_path: str) -> str | None:
    try:
        secret = client.get(secret_path)
    except ApiError as err:
        if is_not_found(err):
            return None
        raise
    return (secret["metadata"].get("annotations") or {}).get(PHASE)


def move_retire_time_to_the_past(client: Client, secret_path: str) -> None:
    for _ in range(10):
        secret = client.get(secret_path)
        previous = json.loads(secret["metadata"]["annotations"][PREVIOUS])
        for p in previous:
            p["retireAt"] = format_time(datetime.now(UTC) - timedelta(seconds=1))
        secret["metadata"]["annotations"][PREVIOUS] = json.dumps(previous)
        try:
            client.replace(secret_path, secret)
            return
        except ApiError as err:
            if not is_conflict(err):
                raise
    raise AssertionError("could not move the retire time: the Secret kept changing")

"""A volume directory written the way the kubelet's AtomicWriter writes one
(pkg/volume/util/atomic_writer.go), for tests of workloads that reload their files.

Each write puts the whole payload into a new `..<timestamp>.<random>` directory, points a
`..data_tmp` link at it and renames that over `..data` (the one atomic step: a reader sees
the old set or the new set, never a mix), makes the user-visible `name → ..data/name`
links the first time, and removes the previous timestamped directory.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import tempfile
from pathlib import Path


def atomic_write(directory: Path, payload: dict[str, bytes]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    data = directory / "..data"
    previous = os.readlink(data) if data.is_symlink() else None
    stamp = dt.datetime.now(dt.UTC).strftime("..%Y_%m_%d_%H_%M_%S.")
    fresh = Path(tempfile.mkdtemp(prefix=stamp, dir=directory))
    for name, content in payload.items():
        (fresh / name).write_bytes(content)
    staging = directory / "..data_tmp"
    staging.unlink(missing_ok=True)
    staging.symlink_to(fresh.name)
    staging.replace(data)
    for name in payload:
        visible = directory / name
        if not visible.is_symlink():
            visible.symlink_to(Path("..data") / name)
    if previous is not None:
        shutil.rmtree(directory / previous, ignore_errors=True)

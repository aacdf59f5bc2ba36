"""Key and certificate bytes handed to OpenSSL, which reads only paths
(`ssl.SSLContext.load_cert_chain`): `memory_file(data)` gives a path that holds `data`
for the length of a `with` block, and nothing of it stays on disk.

Used by the metrics server's self-signed certificate (`manager.metricsauth`) and the
serving probe (`trust.probe`): a private key never touches a filesystem where Linux
has anonymous memory files; elsewhere it is written to a private (0600, O_EXCL) file in
a new temporary directory and removed when the block ends.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def memory_file(data: bytes, name: str = "service-serving-signer") -> Iterator[str]:
    """A path OpenSSL can read `data` from: an anonymous memory file (Linux, named
    `name` in /proc), else a private temporary file removed at once."""
    memfd_create: Callable[[str], int] | None = getattr(os, "memfd_create", None)
    if memfd_create is not None:
        fd = memfd_create(name)
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory() as directory:  # pragma: no cover (non-Linux)
        path = os.path.join(directory, "tls.pem")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(data)
        yield path

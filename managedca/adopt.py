"""A move from file mode with no issuance gap: on its first start (no managed CA Secret),
the managed CA takes the file-mode CA — the `kubernetes.io/tls` Secret the file-mode
install mounts, named by `--managed-ca-adopt-secret-name` (default
`service-serving-signer-ca`, the README's and the chart's) in the same namespace — as its
confirmed current CA,
so it signs at once with a CA every consumer already trusts, and rotates away from it
later through the normal gates (stage → swap → retire), like any CA it made.

`judge` is the decision (pure: the table in tests/unit/managedca/test_adopt.py); the file
CA is adopted only when all of these hold, else the bootstrap makes a new root as before
(gated like a swap: nothing is signed with it for the propagation delay):

- the Secret exists and may be read (RBAC: `get` on it by name);
- `tls.crt` is exactly one self-signed CA certificate and `tls.key` its key (an
  intermediate's chain is not a root the managed CA can publish as its own);
- the ClusterTrustBundle read back holds it (consumers trust it: the file-mode signer
  published it), and no emergency revoked it;
- it is valid now and outlives the longest leaf (`Config.max_leaf_lifetime`).

`read_file_ca` is the read (one GET); `confirmed` turns the bootstrap's step into the
adoption's (confirmed at once, its own Event). The leader's bootstrap adopts
(`maker`, the controller's one hook), and so does every replica on start, before it
leads (`before_leading`, a warmer): during a rollout from file mode the old file-mode
leader holds the Lease, and a new managed replica is Ready only with a confirmed CA, so
without it the rollout (maxUnavailable 0) would wait for a leader that never comes. The
Secret is created, never updated, by a replica that does not lead: of several racing,
one create wins and the others load it; a Secret already there is left alone.

The file-mode Secret is only read: the managed CA keeps its own copy in its Secret, and
the file-mode Secret stays yours (docs/managed-ca.md "Moving between file mode and the
managed CA").
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from kube.client import ApiError, Client, is_not_found, path_segment
from managedca import decide as d
from managedca.codec import ca_info
from managedca.layout import split_pem
from trust.material import MaterialError, MaterialFiles, validate_material

if TYPE_CHECKING:
    from managedca.observe import Observer
    from managedca.step import MakeCa, Step
    from managedca.store import SecretStore


class Replica(Protocol):
    """What adopting before leading reads of a replica's managed-CA controller (a
    structural type, so this module does not import the controller that calls it)."""

    config: d.Config
    observer: Observer
    store: SecretStore

    @property
    def clock(self) -> Callable[[], datetime]: ...

    @property
    def file_ca(self) -> Callable[[], FileCa | None] | None: ...


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FileCa:
    """The file-mode CA as read: its PEMs and `info`, or `problem` saying why it cannot be
    adopted (unreadable, not one self-signed CA, key mismatch, ...)."""

    where: str
    key_pem: bytes = field(default=b"", repr=False)
    cert_pem: bytes = b""
    info: d.CaInfo | None = None
    problem: str | None = None
    unreadable: bool = False  # the API refused or failed the read: worth another look


@dataclass(frozen=True)
class Verdict:
    adopt: bool
    why: str


def judge(file_ca: FileCa | None, obs: d.Observations, now: datetime, config: d.Config) -> Verdict:
    """Whether a bootstrap adopts `file_ca` as its confirmed current CA (module
    docstring). Pure."""
    if file_ca is None:
        return Verdict(False, "no file-mode CA Secret")
    if file_ca.problem is not None or file_ca.info is None:
        return Verdict(False, f"{file_ca.where}: {file_ca.problem or 'unreadable'}")
    info = file_ca.info
    if info.fingerprint in obs.revoked:
        return Verdict(False, f"{file_ca.where}: its CA {info.fingerprint} was revoked")
    if info.fingerprint not in obs.published:
        return Verdict(
            False,
            f"{file_ca.where}: its CA {info.fingerprint} is not in the ClusterTrustBundle "
            "read back (consumers may not trust it)",
        )
    if now < info.not_before:
        return Verdict(False, f"{file_ca.where}: its CA is not valid yet")
    if now + config.max_leaf_lifetime >= info.not_after:
        return Verdict(False, f"{file_ca.where}: its CA expires within the longest leaf lifetime")
    return Verdict(True, f"{file_ca.where}: its CA {info.fingerprint} is published and valid")


def parse_file_ca(where: str, key_pem: bytes, cert_pem: bytes, now: datetime) -> FileCa:
    """The file-mode Secret's `tls.key`/`tls.crt` as a `FileCa`: one self-signed CA
    certificate, its key matching, valid as a signing set on its own. Pure but for the
    key parse."""
    certs = split_pem(cert_pem)
    if len(certs) != 1:
        return FileCa(
            where,
            problem=f"tls.crt holds {len(certs)} certificates (a chain): only a root is adopted",
        )
    try:
        material = validate_material(
            MaterialFiles(key_pem, cert_pem, cert_pem), "tls.key", "tls.crt", "tls.crt", now
        )
    except MaterialError as err:
        return FileCa(where, problem=str(err))
    cert = material.chain[0]
    if cert.issuer != cert.subject:
        return FileCa(where, problem="tls.crt is not self-signed: only a root is adopted")
    return FileCa(where, key_pem, cert_pem, ca_info(cert_pem))


def read_file_ca(
    client: Client, namespace: str, name: str, now: datetime | None = None
) -> FileCa | None:
    """GET the file-mode Secret: None when it does not exist, a `FileCa` with `problem`
    when it may not be read or is not a `kubernetes.io/tls` Secret with one root."""
    where = f"Secret {namespace}/{name}"
    path = f"/api/v1/namespaces/{path_segment(namespace)}/secrets/{path_segment(name)}"
    try:
        secret = client.get(path)
    except ApiError as err:
        if is_not_found(err):
            return None
        return FileCa(where, problem=f"cannot read it ({err.status} {err.reason})", unreadable=True)
    data = secret.get("data") or {}
    try:
        key_pem = base64.b64decode(data.get("tls.key", ""))
        cert_pem = base64.b64decode(data.get("tls.crt", ""))
    except ValueError:
        return FileCa(where, problem="tls.key or tls.crt is not base64")
    if not key_pem or not cert_pem:
        return FileCa(where, problem="no tls.key and tls.crt (not a kubernetes.io/tls Secret)")
    return parse_file_ca(where, key_pem, cert_pem, now or datetime.now(UTC))


def confirmed(taken: Step, file_ca: FileCa, at: datetime) -> Step:
    """The bootstrap's step made with the file-mode CA (its key and certificate) as the
    adoption's: the CA is confirmed at once — consumers trust it already — and the Event
    says where it came from."""
    state = replace(taken.state, confirmed_at=at)
    kept = len(state.previous)
    return replace(
        taken,
        state=state,
        reason="ManagedCAAdoptedFileCA",
        note=(
            f"adopted the file-mode CA {state.current.fingerprint} from {file_ca.where} as "
            "the managed CA: it is in the published bundle, so it signs at once; the "
            "managed CA rotates away from it through the normal gates"
            + (f"; kept {kept} other published root(s) until they retire" if kept else "")
        ),
    )


def maker(
    read: Callable[[], FileCa | None] | None,
    obs: d.Observations,
    now: datetime,
    config: d.Config,
    make: MakeCa,
) -> tuple[MakeCa, FileCa | None]:
    """For a bootstrap: the key maker that hands over the file-mode CA, and that CA, when
    `judge` adopts it; else `make` (a new root) and None. The verdict is logged."""
    if read is None:
        return make, None
    file_ca = read()
    verdict = judge(file_ca, obs, now, config)
    log.info(
        "managed CA: %s the file-mode CA: %s",
        "adopting" if verdict.adopt else "not adopting",
        verdict.why,
    )
    if not verdict.adopt or file_ca is None:
        return make, None
    adopted = file_ca
    return (lambda _at: (adopted.key_pem, adopted.cert_pem)), adopted


def adopt_once(controller: Replica, on_written: Callable[[Mapping[str, Any]], object]) -> bool:
    """On a replica that may not lead: when no managed CA Secret exists and the
    file-mode CA is adoptable, create the Secret with it (confirmed) and hand it to
    `on_written`. True: it was created here."""
    from managedca import step

    observer = controller.observer
    try:
        observer.client.get(observer.secret_path)
    except ApiError as err:
        if not is_not_found(err):
            raise
    else:
        return False  # a managed CA exists (readable or not: the leader's to judge)
    seen = observer.observe(collect=False)
    if seen.secret is not None:
        return False
    now = controller.clock()
    action = d.decide(None, seen.observations, now, controller.config)
    if not isinstance(action, d.Bootstrap):
        return False
    read = controller.file_ca
    found = read() if read is not None else None
    if found is not None and found.unreadable:
        # e.g. the Role granting the read applied a moment after the Deployment
        raise RuntimeError(f"managed CA: the file-mode CA: {found.problem}")
    make, file_ca = maker(lambda: found, seen.observations, now, controller.config, _never)
    if file_ca is None:
        return False  # a new root is the leader's to make
    taken = step.take(None, action, seen.published_pems, make, now)
    if taken is None:
        return False
    try:
        written = controller.store.write(confirmed(taken, file_ca, now), None)
    except ApiError as err:
        if err.status == 409:  # another replica created it first: loaded by the watch
            return False
        raise
    if written is not None:
        log.info(
            "managed CA: adopted the file-mode CA before leading",
            extra={"secret": f"{controller.store.namespace}/{controller.store.name}"},
        )
        on_written(written)
    return written is not None


def before_leading(
    controller: Replica,
    on_written: Callable[[Mapping[str, Any]], object],
    stop: threading.Event,
    retry: float = 5.0,
    attempts: int = 24,
) -> None:
    """`adopt_once` until it has looked once without an API error, at most `attempts`
    times (a warmer: every replica runs it at start, leader or not; the leader's
    bootstrap adopts too, so giving up only leaves it to the leader)."""
    for _ in range(attempts):
        if stop.is_set():
            return
        try:
            adopt_once(controller, on_written)
            return
        except Exception as err:
            log.warning("managed CA: adopting the file-mode CA failed; retrying: %s", err)
        if stop.wait(retry):
            return


def _never(_at: datetime) -> tuple[bytes, bytes]:
    raise AssertionError("a replica that does not lead makes no CA")

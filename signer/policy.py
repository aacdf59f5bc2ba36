"""What a PodCertificateRequest may ask for, before we look at the cluster
(docs/reference.md §5.2 steps 1-2), and which DNS names a granted request gets
(docs/reference.md §5.3).

Everything here is final: a `Denial` becomes a `Denied` condition, so only problems the
requester cannot outwait belong here — a malformed annotation or an unusable key. Lookups
that may become true later (a Service appearing) are the controller's business.

Decisions beyond docs/reference.md:
- Service-name entries are stripped of spaces and tabs only; any other character makes the
  entry invalid, and the message says what to write instead (the bare Service name).
- The 32-name limit applies after duplicates collapse.
- Values echoed in messages are truncated to 64 characters so a hostile annotation cannot
  inflate the condition message.
- With both `stubPKCS10Request` and `pkixPublicKey` set (the API forbids it), the stub wins.
- The stub CSR's signature is not re-verified: the API server verifies it on create
  (`pkcs10Req.CheckSignature()`), and only the empty-stub checks are ours to make. That
  holds for ML-DSA too: kube-apiserver 1.38 (built with Go 1.27, whose crypto/x509 knows
  ML-DSA-44/65/87) verifies an ML-DSA stub's signature the same way, and servers before
  1.38 refuse an ML-DSA stub outright ("unknown public key type"), so no stored request
  can carry an unverified one (docs/reference.md §5.2 step 2).
- An ML-DSA key in the deprecated `pkixPublicKey` is Denied `UnsupportedKeyType`: no
  kube-apiserver accepts one there (1.38 verifies `proofOfPossession` for Ed25519, ECDSA
  and RSA only and refuses other keys), so such a request would carry a proof nobody
  verified; kubelet sends ML-DSA keys in a stub CSR only.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeAlias

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_der_public_key

from trust import keys

SERVICE_NAMES = "kubernetes.io/service-names"
ADD_POD_FQDN = "kubernetes.io/add-pod-fqdn"
RECOGNISED_KEYS = (SERVICE_NAMES, ADD_POD_FQDN)
MAX_SERVICE_NAMES = 32

INVALID_ANNOTATIONS = "InvalidUnverifiedUserAnnotations"
INVALID_STUB = "InvalidStubPKCS10Request"
INVALID_PKIX = "InvalidPKIXPublicKey"
UNSUPPORTED_KEY = "UnsupportedKeyType"

# What kube-apiserver 1.37 accepts as a Service name: a DNS-1123 label
# (`RelaxedServiceNameValidation`, GA and locked on in 1.37; beta, on by default, in 1.36).
# Before it Service names were DNS-1035 labels (no leading digit); denying `1api` now would
# be final for a name the API server accepts, so the Pod would never start.
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
REASON_PATTERN = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")

PublicKey: TypeAlias = keys.LeafPublicKey
"""A leaf public key we sign for (docs/reference.md §5.2 step 2)."""


def supported_key_types() -> str:
    """The leaf key types we sign for, as a denial lists them (`trust.keys.KEYS`)."""
    return ", ".join(keys.leaf_key_types())


def key_type_of(key: PublicKey) -> str:
    """The key's kubelet `keyType` spelling (`ECDSAP256`, `MLDSA65`, …), for metrics
    labels and `explain`; `RSA<bits>` for any RSA size."""
    spec = keys.spec_of_public_key(key)
    if spec is not None:
        return spec.name
    if isinstance(key, rsa.RSAPublicKey):
        return f"RSA{key.key_size}"
    if isinstance(key, ec.EllipticCurvePublicKey):
        return f"ECDSA-{key.curve.name}"
    raise TypeError(f"not a leaf public key: {type(key).__name__}")


@dataclass(frozen=True)
class Denial:
    """A final refusal: becomes a `Denied` condition with this reason and message."""

    reason: str
    message: str

    def __post_init__(self) -> None:
        if not REASON_PATTERN.fullmatch(self.reason):
            raise ValueError(f"invalid condition reason {self.reason!r}")


@dataclass(frozen=True)
class NameRequest:
    """The names a request asks for: Services in the Pod's namespace (de-duplicated, in
    first-seen order) and whether the Pod's own FQDN is wanted."""

    service_names: tuple[str, ...]
    pod_fqdn: bool


def _shown(value: str, limit: int = 64) -> str:
    return repr(value if len(value) <= limit else value[:limit] + "…")


def decide_names(annotations: Mapping[str, str] | None) -> NameRequest | Denial:
    """docs/reference.md §5.2 step 1: the annotations → the requested names, or a denial."""
    annotations = annotations or {}
    unknown = sorted(k for k in annotations if k not in RECOGNISED_KEYS)
    if unknown:
        return Denial(
            INVALID_ANNOTATIONS,
            f"unrecognised unverifiedUserAnnotations key {_shown(unknown[0])}"
            + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else "")
            + f"; the allowed keys are {SERVICE_NAMES} and {ADD_POD_FQDN}",
        )
    if not any(k in annotations for k in RECOGNISED_KEYS):
        return Denial(
            INVALID_ANNOTATIONS,
            f"at least one of the unverifiedUserAnnotations {SERVICE_NAMES} or {ADD_POD_FQDN} "
            "must be set to say which names the certificate is for",
        )
    pod_fqdn = False
    if ADD_POD_FQDN in annotations:
        value = annotations[ADD_POD_FQDN]
        if value != "true":
            return Denial(
                INVALID_ANNOTATIONS,
                f'{ADD_POD_FQDN} must be exactly "true", got {_shown(value)}; '
                "remove the annotation to leave the Pod FQDN out",
            )
        pod_fqdn = True
    service_names: tuple[str, ...] = ()
    if SERVICE_NAMES in annotations:
        parsed = parse_service_names(annotations[SERVICE_NAMES])
        if isinstance(parsed, Denial):
            return parsed
        service_names = parsed
    return NameRequest(service_names=service_names, pod_fqdn=pod_fqdn)


def parse_service_names(value: str) -> tuple[str, ...] | Denial:
    """The `kubernetes.io/service-names` value → unique Service names in first-seen order."""
    names: dict[str, None] = {}
    for position, raw in enumerate(value.split(",")):
        entry = raw.strip(" \t")
        problem = _service_name_problem(entry)
        if problem is not None:
            where = f"entry {position + 1} of {SERVICE_NAMES}"
            shown = f" {_shown(entry)}" if entry else ""
            return Denial(INVALID_ANNOTATIONS, f"{where}{shown} {problem}")
        names.setdefault(entry, None)
    if len(names) > MAX_SERVICE_NAMES:
        return Denial(
            INVALID_ANNOTATIONS,
            f"{SERVICE_NAMES} lists {len(names)} Services; at most {MAX_SERVICE_NAMES} are allowed",
        )
    return tuple(names)


def suggested_service_name(entry: str) -> str | None:
    """The Service name a denied `kubernetes.io/service-names` entry most likely meant, as
    a lowercase DNS-1035 label (what every supported kube-apiserver accepts as a Service
    name), so advice never leads to a second denial; None when nothing usable is left."""
    name = entry.strip(" \t")
    if "/" in name:
        name = name.rsplit("/", 1)[1]
    if "." in name:
        name = name.split(".", 1)[0]
    name = re.sub(r"[^a-z0-9-]+", "-", name.lower())
    name = name.lstrip("-0123456789")[:63].rstrip("-")
    return name if _DNS1035_LABEL.fullmatch(name) else None


def _service_name_problem(entry: str) -> str | None:
    """None when `entry` is a Service name (a DNS-1123 label), else what is wrong and a
    value that would pass (`suggested_service_name`)."""
    if not entry:
        return "is empty; list Service names separated by single commas"
    suggested = suggested_service_name(entry)
    instead = f" ({_shown(suggested)})" if suggested else ""
    if "/" in entry:
        return (
            "names a namespace; only Services in the Pod's own namespace can be used, "
            f"so write just the Service name{instead}"
        )
    if "." in entry:
        return f"contains a dot; write the bare Service name{instead}, not a DNS name"
    if len(entry) > 63:
        return f"is {len(entry)} characters; a Service name has at most 63"
    if entry != entry.lower() and _DNS1123_LABEL.fullmatch(entry.lower()):
        return f"has uppercase letters; Service names are lowercase ({_shown(entry.lower())})"
    if not _DNS1123_LABEL.fullmatch(entry):
        example = f"; e.g. {_shown(suggested)}" if suggested else ""
        return (
            "is not a Service name (a DNS-1123 label: lowercase letters, digits and '-', "
            f"starting and ending with a letter or digit){example}"
        )
    return None


def sans_for(
    namespace: str,
    domain: str,
    service_names: tuple[str, ...] | list[str],
    pod_hostname_subdomain: tuple[str, str] | None,
) -> list[str]:
    """The DNS SANs of a granted request, in docs/reference.md §5.3 order, de-duplicated:
    per Service `<svc>.<ns>.svc.<domain>`, `<svc>.<ns>.svc`; then the Pod FQDN
    `<hostname>.<subdomain>.<ns>.svc.<domain>`, `<hostname>.<subdomain>.<ns>.svc`."""
    names: dict[str, None] = {}
    for svc in service_names:
        names.setdefault(f"{svc}.{namespace}.svc.{domain}", None)
        names.setdefault(f"{svc}.{namespace}.svc", None)
    if pod_hostname_subdomain is not None:
        hostname, subdomain = pod_hostname_subdomain
        names.setdefault(f"{hostname}.{subdomain}.{namespace}.svc.{domain}", None)
        names.setdefault(f"{hostname}.{subdomain}.{namespace}.svc", None)
    return list(names)


# public key (docs/reference.md §5.2 step 2) --------------------------------------------


def public_key_from_request(
    stub_pkcs10: bytes | str | None, pkix_public_key: bytes | str | None
) -> PublicKey | Denial:
    """The key to certify, from the stub CSR (preferred) or the deprecated
    `pkixPublicKey` of v1beta1 objects. `str` values are base64 (as JSON carries them)."""
    if stub_pkcs10:
        return _key_from_stub(stub_pkcs10)
    if pkix_public_key:
        return _key_from_pkix(pkix_public_key)
    return Denial(INVALID_STUB, "the request carries neither stubPKCS10Request nor pkixPublicKey")


def _der(value: bytes | str) -> bytes | None:
    if isinstance(value, bytes):
        return value
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def _key_from_stub(stub: bytes | str) -> PublicKey | Denial:
    der = _der(stub)
    if der is None:
        return Denial(INVALID_STUB, "stubPKCS10Request is not valid base64")
    try:
        csr = x509.load_der_x509_csr(der)
    except ValueError:
        return Denial(INVALID_STUB, "stubPKCS10Request is not a DER PKCS#10 request")
    try:
        key = csr.public_key()
    except (UnsupportedAlgorithm, ValueError):
        return _unsupported("the stub CSR's public key algorithm")
    checked = _supported(key)
    if isinstance(checked, Denial):
        return checked
    # No signature check: kube-apiserver rejects a stub whose `CheckSignature()` fails on
    # create and the spec is immutable, so a stored request with a bad signature cannot
    # exist ("the signer does not need to repeat the verification" — field doc). Repeating
    # it was a tenth of our CPU in a burst (bench/README.md, "Figures behind module
    # decisions").
    if len(csr.subject) != 0:
        return Denial(INVALID_STUB, "the stub CSR has a subject; it must be empty")
    try:
        has_extensions = len(csr.extensions) != 0
        has_attributes = len(list(csr.attributes)) != 0
    except ValueError:
        return Denial(INVALID_STUB, "the stub CSR has unparsable attributes or extensions")
    if has_extensions:
        return Denial(INVALID_STUB, "the stub CSR has extensions; it must be empty")
    if has_attributes:
        return Denial(INVALID_STUB, "the stub CSR has attributes; it must be empty")
    return checked


# Like `_key_from_stub`: each bad field is denied with its own reason.
def _key_from_pkix(pkix: bytes | str) -> PublicKey | Denial:
    der = _der(pkix)
    if der is None:
        return Denial(INVALID_PKIX, "pkixPublicKey is not valid base64")
    try:
        key = load_der_public_key(der)
    except UnsupportedAlgorithm:
        return _unsupported("the pkixPublicKey algorithm")
    except ValueError:
        return Denial(INVALID_PKIX, "pkixPublicKey is not a DER SubjectPublicKeyInfo")
    spec = keys.spec_of_public_key(key)
    if spec is not None and not spec.proof_of_possession:
        # See the module docstring: a proof of possession no component has verified.
        return Denial(
            UNSUPPORTED_KEY,
            f"an {spec.name} key in pkixPublicKey is not supported (no kube-apiserver "
            f"verifies its proofOfPossession); {spec.name} keys are accepted in "
            "stubPKCS10Request, as kubelet sends them",
        )
    return _supported(key)


def _supported(key: object) -> PublicKey | Denial:
    spec = keys.spec_of_public_key(key)
    if spec is not None and spec.leaf and isinstance(key, PublicKey):
        return key
    if isinstance(key, rsa.RSAPublicKey):
        return _unsupported(f"RSA-{key.key_size}")
    if isinstance(key, ec.EllipticCurvePublicKey):
        return _unsupported(f"ECDSA on curve {key.curve.name}")
    return _unsupported(f"{type(key).__name__.removesuffix('PublicKey').lstrip('_')} keys")


def _unsupported(what: str) -> Denial:
    return Denial(
        UNSUPPORTED_KEY,
        f"{what} is not supported; supported key types are {supported_key_types()} "
        f"(set keyType: {keys.DEFAULT_KEY_TYPE} in the podCertificate projection)",
    )

"""Trust bundles: what counts as one, its canonical text and its object name.

This is the project's single trust-bundle normalisation. The publisher uses it on the
trust-bundle file, the signing-material loader uses it to validate that file, and
`trust.selector` uses it to unify the ClusterTrustBundles a KEP-6283 selector picks (for
`bundle resolve` and the injector).

Decisions:

- Parsing is stricter than Go's `pem.Decode`: a `-----BEGIN` without its `-----END`
  (a half-written file) or a block whose base64 does not decode is an error, not silently
  skipped text. RFC 1421 headers inside a block and any text between blocks are accepted
  and dropped.
- Every block must be a `CERTIFICATE` holding an X.509 certificate whose basicConstraints
  extension is present and says CA:TRUE; this is what kube-apiserver's ClusterTrustBundle
  validation requires (`ValidateClusterTrustBundle`), so we fail at the file instead of at
  the API server.
- Duplicates are removed by DER bytes and the rest sorted bytewise by DER, as kubelet's
  `normalizeTrustAnchors` (`pkg/kubelet/clustertrustbundle`) does before its shuffle. We
  do not shuffle: a stable order gives a stable hash, hence a stable object name.
- Output is header-less PEM, 64-column base64, each block ending in a newline — byte for
  byte what Go's `pem.EncodeToMemory` writes.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

MAX_TRUST_BUNDLE_SIZE = 1024 * 1024
"""kube-apiserver's `MaxTrustBundleSize`: the normalised bundle must fit in it."""

_BEGIN = re.compile(rb"-----BEGIN ([^\r\n-]*)-----[ \t]*\r?\n")
_END_TEMPLATE = b"-----END %s-----"


class BundleError(ValueError):
    """The trust bundle (or a PEM file) is not acceptable; the message says why and which
    block (0-based index) is at fault."""


@dataclass(frozen=True)
class PemBlock:
    """One decoded PEM block. `index` counts blocks from 0 in file order."""

    index: int
    type: str
    headers: Mapping[str, str]
    der: bytes


def decode_pem(data: bytes | str) -> list[PemBlock]:
    """Every PEM block in `data`, in order. Text outside blocks is ignored; headers are
    returned but not interpreted. Raises `BundleError` on a truncated or undecodable
    block."""
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    blocks: list[PemBlock] = []
    pos = 0
    while True:
        begin = _BEGIN.search(raw, pos)
        if begin is None:
            return blocks
        index = len(blocks)
        label = begin.group(1)
        end_marker = _END_TEMPLATE % label
        end = raw.find(end_marker, begin.end())
        if end < 0:
            raise BundleError(
                f"PEM block {index} ({label.decode('ascii', 'replace')}) has no "
                f"'-----END {label.decode('ascii', 'replace')}-----' line "
                "(truncated or half-written file?)"
            )
        body = raw[begin.end() : end]
        headers, payload = _split_headers(body)
        try:
            der = base64.b64decode(b"".join(payload.split()), validate=True)
        except (binascii.Error, ValueError) as err:
            raise BundleError(f"PEM block {index} has invalid base64 content") from err
        if not der:
            raise BundleError(f"PEM block {index} is empty")
        blocks.append(PemBlock(index, label.decode("ascii", "replace"), headers, der))
        pos = end + len(end_marker)


def _split_headers(body: bytes) -> tuple[dict[str, str], bytes]:
    """RFC 1421 headers (`Key: value` lines up to a blank line) as Go's pem.Decode reads
    them; the rest is the base64 payload."""
    headers: dict[str, str] = {}
    lines = body.split(b"\n")
    i = 0
    while i < len(lines):
        line = lines[i].rstrip(b"\r")
        if b":" not in line:
            break
        key, _, value = line.partition(b":")
        headers[key.strip().decode("ascii", "replace")] = value.strip().decode("ascii", "replace")
        i += 1
    if headers and i < len(lines) and not lines[i].strip():
        i += 1
    return headers, b"\n".join(lines[i:])


def encode_pem(der: bytes, block_type: str = "CERTIFICATE") -> str:
    """Header-less PEM, 64 columns, trailing newline (Go's `pem.EncodeToMemory`)."""
    b64 = base64.b64encode(der).decode("ascii")
    lines = [b64[i : i + 64] for i in range(0, len(b64), 64)]
    return (
        f"-----BEGIN {block_type}-----\n"
        + "".join(f"{line}\n" for line in lines)
        + (f"-----END {block_type}-----\n")
    )


def _ca_certificate(block: PemBlock) -> x509.Certificate:
    if block.type != "CERTIFICATE":
        raise BundleError(
            f"PEM block {block.index} is a {block.type!r} block; a trust bundle holds only "
            "CERTIFICATE blocks"
        )
    try:
        cert = x509.load_der_x509_certificate(block.der)
    except ValueError as err:
        raise BundleError(
            f"PEM block {block.index} does not parse as an X.509 certificate"
        ) from err
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        raise BundleError(
            f"certificate {block.index} ({_describe(cert)}) has no basicConstraints "
            "extension; trust anchors must be CA certificates"
        ) from None
    except ValueError as err:
        raise BundleError(f"certificate {block.index} has unparsable extensions ({err})") from err
    if not constraints.ca:
        raise BundleError(
            f"certificate {block.index} ({_describe(cert)}) is not a CA (basicConstraints "
            "CA:FALSE); trust anchors must be CA certificates"
        )
    return cert


def _describe(cert: x509.Certificate) -> str:
    subject = cert.subject.rfc4514_string()
    return f"subject {subject!r}" if subject else "empty subject"


def normalize_bundle(pem: bytes | str) -> str:
    """The canonical form of a trust bundle: CA certificates only, de-duplicated by DER,
    sorted by DER, header-less PEM. Raises `BundleError` naming the offending block, or
    when the result is empty or over 1 MiB."""
    certs = {_ca_certificate(block).public_bytes(Encoding.DER) for block in decode_pem(pem)}
    if not certs:
        raise BundleError("the trust bundle contains no certificates")
    normalized = "".join(encode_pem(der) for der in sorted(certs))
    if len(normalized) > MAX_TRUST_BUNDLE_SIZE:
        raise BundleError(
            f"the normalised trust bundle is {len(normalized)} bytes; a ClusterTrustBundle "
            f"holds at most {MAX_TRUST_BUNDLE_SIZE}"
        )
    return normalized


def parse_anchors(normalized: str) -> list[x509.Certificate]:
    """The certificates of a normalised bundle, in bundle order."""
    return [x509.load_der_x509_certificate(block.der) for block in decode_pem(normalized)]


def bundle_digest(normalized: str) -> str:
    """The first 12 bytes of sha256(bundle) as 24 hex characters: the end of the bundle's
    ClusterTrustBundle name, and the bundle's fingerprint in our metrics."""
    return hashlib.sha256(normalized.encode("ascii")).hexdigest()[:24]


def bundle_name(signer_name: str, normalized: str) -> str:
    """The ClusterTrustBundle name kube-controller-manager's publisher uses:
    `<signer with "/" → ":">:<first 12 bytes of sha256(bundle) as hex>`."""
    return f"{signer_name.replace('/', ':')}:{bundle_digest(normalized)}"


STABLE_SUFFIX = "trust-anchors"


def stable_bundle_name(signer_name: str) -> str:
    """The ClusterTrustBundle name that survives rotation: `<signer with "/" → ":">:
    trust-anchors`. Under the signer's prefix, as the API requires of a signer-linked
    bundle, and never a hash name (those are 24 hex digits; this suffix has non-hex
    letters)."""
    return f"{signer_name.replace('/', ':')}:{STABLE_SUFFIX}"


UNLINKED_SUFFIX = "trust-anchors"


def unlinked_bundle_name(signer_name: str) -> str:
    """The name of the opt-in ClusterTrustBundle without a `spec.signerName` that holds
    what the stable bundle holds: `<signer with "/" → ".">.trust-anchors`
    (`kubernetes.io.service-serving.trust-anchors`). Colon-free, as the API requires of a
    bundle linked to no signer, so it can never be taken for one of a signer's bundles."""
    return f"{signer_name.replace('/', '.')}.{UNLINKED_SUFFIX}"


def hash_named_stable_name(name: str) -> str | None:
    """For a name in kube-controller-manager's hash convention (`<prefix>:<24 hex>`, which
    changes with the content, so the bundle is deleted at the next rotation): the stable
    name under the same prefix. None for any other name."""
    prefix, sep, suffix = name.rpartition(":")
    if sep and prefix and len(suffix) == 24 and all(c in "0123456789abcdef" for c in suffix):
        return f"{prefix}:{STABLE_SUFFIX}"
    return None


@dataclass(frozen=True)
class TrustBundle:
    """A normalised trust bundle read from a file: its text, its anchors (bundle order),
    and `modified` — when this content was written to the file on this host (its mtime),
    which is how the publisher tells a stale ConfigMap volume from a newer one."""

    pem: str
    anchors: tuple[x509.Certificate, ...]
    modified: datetime

    @property
    def digest(self) -> str:
        """`bundle_digest` of the bundle (not a certificate's `fingerprint`)."""
        return bundle_digest(self.pem)


def anchor_ders(normalized: str) -> frozenset[bytes]:
    """The DER bytes of each certificate of a bundle (normalised or not)."""
    return frozenset(block.der for block in decode_pem(normalized) if block.type == "CERTIFICATE")


def fingerprint(certificate: x509.Certificate | bytes) -> str:
    """A certificate's name everywhere in this project: sha256 of its DER, lowercase hex
    (what `openssl x509 -fingerprint -sha256` prints, without colons, lowercased)."""
    der = certificate if isinstance(certificate, bytes) else certificate.public_bytes(Encoding.DER)
    return hashlib.sha256(der).hexdigest()


_FINGERPRINT = re.compile(r"[0-9a-f]{64}")


def is_fingerprint(text: str) -> bool:
    """Whether `text` is what `fingerprint` gives (64 lowercase hex digits): the test a
    reader applies to a fingerprint another process wrote (a report Lease, an annotation)."""
    return _FINGERPRINT.fullmatch(text) is not None


@functools.lru_cache(maxsize=256)
def fingerprints(bundle: str) -> frozenset[str]:
    """`fingerprint` of every certificate of a PEM bundle (normalised or not)."""
    return frozenset(fingerprint(der) for der in anchor_ders(bundle))


def earliest_expiry(normalized: str) -> datetime:
    """The earliest notAfter (UTC) among the anchors of a normalised bundle."""
    anchors = parse_anchors(normalized)
    if not anchors:
        raise BundleError("the trust bundle contains no certificates")
    return min(cert.not_valid_after_utc for cert in anchors)

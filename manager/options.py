"""The validated configuration of one `service-serving-signer run` process.

This module decides what every docs/reference.md §2 flag *means*: Go-style durations (`24h`, `90m`,
`1h30m`), kube-controller-manager's `--controllers` syntax (`*`, `signer`, `-publisher`),
bind addresses (`:10358`, `127.0.0.1:9000`, `[::1]:9000`, `0` = disabled), signer names
(exactly what kube-apiserver's `ValidateSignerName` accepts), the leader
election namespace default (the Pod's own namespace, else `kube-system`), the Lease name
default (one per set of controllers, `default_lease_name`), and the
cross-flag rules (a `kubernetes.io/*` signer never issues for more than 24 h; the lease
duration exceeds the renew deadline, which exceeds the retry period). It parses strings
into an immutable `Options`; it never touches files other than the service-account
namespace file, nor the network.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from trust import keys
from trust.bundle import unlinked_bundle_name
from trust.convergence import REPORT_NAME

KNOWN_CONTROLLERS: tuple[str, ...] = ("signer", "publisher", "injector", "trust-distributor")
"""Controllers this process hosts."""

DEFAULT_CONTROLLERS: tuple[str, ...] = ("signer", "publisher")
"""What `*` enables. `injector` is opt-in (like kube-controller-manager's disabled-by-default
controllers): its RBAC can patch webhooks, APIServices and CRDs, so it runs only when
named (`--controllers=*,injector`, or `injector` alone in its own Deployment).
`trust-distributor` (docs/trust-consumers.md) is opt-in too: it creates and deletes
ConfigMaps in every namespace, so it runs only when named, beside the injector."""

SIGNING_CONTROLLERS = frozenset({"signer", "publisher"})
"""Controllers that read the signing-material files; without them the files are optional."""

DEFAULT_SIGNER_NAME = "kubernetes.io/service-serving"
KUBERNETES_SIGNER_MAX_LIFETIME = 24 * 3600.0
MIN_CERTIFICATE_LIFETIME = 3600.0
SERVICE_ACCOUNT_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
LOG_FORMATS = ("text", "json")
CA_MODES = ("file", "managed")
MANAGED_CA_KEY_TYPES = keys.managed_ca_key_types()
DEFAULT_MANAGED_CA_SECRET = "service-serving-signer-managed-ca"
DEFAULT_ADOPT_SECRET = "service-serving-signer-ca"
"""The file-mode CA Secret of the README's quick install and of the chart
(`signingSecret.name`'s default): what a first managed bootstrap adopts."""
KUBELET_PROJECTION_WORST_CASE = 390.0
"""kubelet's clusterTrustBundle projection: a 5 min cache plus a 1 min Pod resync jittered
by up to 0.5 (docs/managed-ca.md "Defaults"): the least --managed-ca-propagation-delay."""
UNLINKED_PROJECTION_WORST_CASE = 120.0
"""The same with --publish-unlinked-bundle, for clusters whose Pods project by signerName or
the unlinked bundle by name: kubelet drops its cached answer for either when the bundle
changes, so a change shows at the next Pod resync — 1 min jittered by up to 0.5, plus
room for the rewrite (measured: docs/trust-consumers.md "Which projection")."""
MIN_RETIRE_MARGIN = 300.0
"""Above the managed material source's re-read period (60 s) with room for clock steps:
the margin must cover a replica signing with the old CA a moment after the swap."""
PCR_API_VERSIONS = ("auto", "v1", "v1beta1")
# client-go's leaderelection.JitterFactor: RenewDeadline must exceed JitterFactor * RetryPeriod.
LEADER_ELECTION_JITTER_FACTOR = 1.2


class OptionsError(ValueError):
    """A flag value that cannot be used. `str()` is one line naming the flag."""

    def __init__(self, flag: str, problem: str) -> None:
        self.flag = flag
        self.problem = problem
        super().__init__(f"{flag}: {problem}")


# --- durations -------------------------------------------------------------------------

_DURATION_UNITS: Mapping[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Go's `time.ParseDuration`, in seconds: `24h`, `15s`, `1h30m`, `1.5h`, `300ms`, `0`.

    A bare number other than `0` is rejected, as Go does ("missing unit")."""
    s = text.strip()
    if not s:
        raise ValueError("empty duration")
    sign = 1.0
    if s[0] in "+-":
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(f"invalid duration {text!r}")
    total = 0.0
    pos = 0
    while pos < len(s):
        match = _DURATION_PART.match(s, pos)
        if match is None:
            if re.fullmatch(r"\d+(\.\d*)?", s[pos:]):
                raise ValueError(f"missing unit in duration {text!r} (e.g. 24h, 90m, 15s)")
            raise ValueError(f"invalid duration {text!r} (e.g. 24h, 90m, 15s)")
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    return sign * total


def format_duration(seconds: float) -> str:
    """The inverse of `parse_duration` for whole seconds, Go-style (`24h0m0s`)."""
    whole = int(seconds)
    if whole == 0:
        return "0s"
    hours, rest = divmod(abs(whole), 3600)
    minutes, secs = divmod(rest, 60)
    sign = "-" if whole < 0 else ""
    if hours:
        return f"{sign}{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{sign}{minutes}m{secs}s"
    return f"{sign}{secs}s"


# --- bind addresses --------------------------------------------------------------------


@dataclass(frozen=True)
class BindAddress:
    """`host:port` to listen on; host `""` means every interface."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_bind_address(text: str, flag: str = "bind address") -> BindAddress | None:
    """`:10358`, `0.0.0.0:10358`, `127.0.0.1:9000`, `[::1]:9000`; `0` disables (None).

    Port 0 (`127.0.0.1:0`) asks the kernel for a free port — used by tests."""
    s = text.strip()
    if s == "0":
        return None
    if s.startswith("["):
        match = re.fullmatch(r"\[([0-9A-Fa-f:.%a-zA-Z]+)\]:(\d+)", s)
        if match is None:
            raise OptionsError(flag, f"invalid address {text!r} (want [host]:port)")
        host, port_text = match.group(1), match.group(2)
    else:
        host, sep, port_text = s.rpartition(":")
        if not sep or ":" in host:
            raise OptionsError(flag, f"invalid address {text!r} (want host:port, :port or 0)")
    if not port_text.isdigit():
        raise OptionsError(flag, f"invalid port in {text!r}")
    port = int(port_text)
    if port > 65535:
        raise OptionsError(flag, f"port {port} out of range in {text!r}")
    return BindAddress(host, port)


# --- controllers -----------------------------------------------------------------------


def parse_controllers(items: Iterable[str]) -> frozenset[str]:
    """kube-controller-manager's `--controllers`: `*` enables every default-on
    controller (not `injector`), `name` enables one, `-name` disables one; comma lists
    and repeats combine. An explicit name wins over `*`; `-name` wins over both."""
    tokens = [t.strip() for item in items for t in item.split(",") if t.strip()]
    if not tokens:
        raise OptionsError(
            "--controllers", "empty list (use '*', 'signer', 'publisher' or 'injector')"
        )
    enabled: set[str] = set()
    disabled: set[str] = set()
    star = False
    for token in tokens:
        if token == "*":
            star = True
            continue
        name = token[1:] if token.startswith("-") else token
        if name not in KNOWN_CONTROLLERS:
            raise OptionsError(
                "--controllers",
                f"unknown controller {name!r} (known: {', '.join(KNOWN_CONTROLLERS)}, '*')",
            )
        (disabled if token.startswith("-") else enabled).add(name)
    result = (set(DEFAULT_CONTROLLERS) if star else set()) | enabled
    result -= disabled
    if not result:
        raise OptionsError("--controllers", f"no controller enabled by {','.join(tokens)!r}")
    if "trust-distributor" in result and "injector" not in result:
        # The injector's ConfigMap target keeps the copies current after they are created.
        raise OptionsError("--controllers", "trust-distributor needs injector in the same process")
    return frozenset(result)


def default_lease_name(controllers: Iterable[str]) -> str:
    """The Lease a set of controllers elects on when `--leader-elect-resource-name` is not
    given: `service-serving-signer` for the default set (signer and publisher), else
    `service-serving-signer-<names, sorted>` — so a Deployment running another set (the
    injector alone, say) never waits for ever on a Lease that a different set holds."""
    names = sorted(set(controllers))
    if names == sorted(DEFAULT_CONTROLLERS):
        return "service-serving-signer"
    return "-".join(["service-serving-signer", *names])


# --- names -----------------------------------------------------------------------------

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL)
_DNS1123_LABEL_MAX = 63
_DNS1123_SUBDOMAIN_MAX = 253
_SIGNER_NAME_MAX = _DNS1123_SUBDOMAIN_MAX + (_DNS1123_SUBDOMAIN_MAX + _DNS1123_LABEL_MAX + 1) + 1


def signer_name_problem(name: str) -> str | None:
    """Why kube-apiserver would reject `name` as a signerName, or None.

    A port of `ValidateSignerName` (k8s.io/kubernetes pkg/apis/core/validation/names.go,
    v1.37): exactly one `/`; the domain at most 253 characters, at least two dot-separated
    DNS-1123 labels (each at most 63, lowercase); the path dot-separated pieces, each a
    DNS-1123 subdomain (so lowercase, no `_`, at most 253); the whole at most 571."""
    if not name:
        return "must not be empty"
    segments = name.split("/")
    if len(segments) != 2:
        return "must be a fully qualified domain and path of the form 'example.com/signer-name'"
    domain, path = segments
    if len(domain) > _DNS1123_SUBDOMAIN_MAX:
        return f"domain {domain!r} is longer than {_DNS1123_SUBDOMAIN_MAX} characters"
    labels = domain.split(".")
    for label in labels:
        if len(label) > _DNS1123_LABEL_MAX or not _DNS1123_LABEL_RE.fullmatch(label):
            return (
                f"domain label {label!r} is not a lowercase RFC 1123 label (a-z, 0-9, '-', "
                f"starting and ending alphanumeric, at most {_DNS1123_LABEL_MAX} characters)"
            )
    if len(labels) < 2:
        return f"domain {domain!r} must have at least two segments separated by dots"
    for piece in path.split("."):
        if len(piece) > _DNS1123_SUBDOMAIN_MAX or not _DNS1123_LABEL_RE.fullmatch(piece):
            return (
                f"path label {piece!r} is not a lowercase RFC 1123 subdomain (a-z, 0-9, '-', "
                "'.', starting and ending alphanumeric)"
            )
    if len(name) > _SIGNER_NAME_MAX:
        return f"is longer than {_SIGNER_NAME_MAX} characters"
    return None


def validate_signer_name(name: str) -> None:
    """Reject what kube-apiserver would reject (`signer_name_problem`): a name it refuses
    would make every ClusterTrustBundle create a 422, retried for ever."""
    problem = signer_name_problem(name)
    if problem:
        raise OptionsError("--signer-name", f"{name!r}: {problem} (e.g. example.com/serving)")


def default_leader_election_namespace(
    namespace_file: str = SERVICE_ACCOUNT_NAMESPACE_FILE,
    environ: Mapping[str, str] | None = None,
) -> str:
    """The Pod's own namespace (service-account mount, then `$POD_NAMESPACE`), else
    `kube-system` as kube-controller-manager uses."""
    try:
        namespace = Path(namespace_file).read_text().strip()
        if namespace:
            return namespace
    except OSError:
        pass
    env = os.environ if environ is None else environ
    return env.get("POD_NAMESPACE", "").strip() or "kube-system"


# --- the options -----------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    """Every docs/reference.md §2 flag, parsed and validated. Durations are in seconds."""

    service_serving_key: str
    service_serving_cert: str
    service_serving_trust_bundle: str  # each may be "" when no enabled controller needs it
    cluster_service_domain: str = "cluster.local"
    signer_name: str = DEFAULT_SIGNER_NAME
    controllers: frozenset[str] = field(default_factory=lambda: frozenset(DEFAULT_CONTROLLERS))
    max_certificate_lifetime: float = KUBERNETES_SIGNER_MAX_LIFETIME
    concurrent_syncs: int = 4
    # The publisher's opt-in bundle without a signerName (publisher.controller point 5)
    publish_unlinked_bundle: bool = False
    waiting_resync_period: float = 300.0
    # KEP-6283's certificate shape, each off by default (docs/configuration.md)
    pod_identity_subject: bool = False
    cluster_ip_sans: bool = False
    pcr_api_version: str = "auto"
    kubeconfig: str | None = None
    kube_api_qps: float = 50.0
    kube_api_burst: int = 100
    leader_elect: bool = True
    leader_elect_lease_duration: float = 15.0
    leader_elect_renew_deadline: float = 10.0
    leader_elect_retry_period: float = 2.0
    leader_elect_resource_namespace: str = "kube-system"
    leader_elect_resource_name: str = ""  # "": default_lease_name(controllers)
    metrics_bind_address: BindAddress | None = BindAddress("", 10358)
    health_probe_bind_address: BindAddress | None = BindAddress("", 10359)
    # /metrics over TLS to authenticated, authorized callers only (manager.metricsauth)
    metrics_secure: bool = False
    metrics_tls_cert_file: str = ""
    metrics_tls_private_key_file: str = ""
    log_format: str = "text"
    verbosity: int = 0
    # managed CA (docs/managed-ca.md); ignored with ca_mode="file"
    ca_mode: str = "file"
    managed_ca_secret_name: str = DEFAULT_MANAGED_CA_SECRET
    # The file-mode CA Secret a first bootstrap adopts (managedca.adopt); "" adopts none.
    managed_ca_adopt_secret_name: str = DEFAULT_ADOPT_SECRET
    managed_ca_key_type: str = keys.DEFAULT_KEY_TYPE
    managed_ca_lifetime: float = 365 * 86400.0
    managed_ca_rotate_at: float = 0.5
    managed_ca_propagation_delay: float = 600.0
    managed_ca_retire_margin: float = 3600.0
    managed_ca_keep_previous: int = 0
    managed_ca_allow_short_propagation_delay: bool = False
    managed_ca_wait_for_injector: str = "auto"
    # The convergence report's name, for the injector (writes) and the managed CA (reads)
    # alike: trust.convergence.report_lease.
    managed_ca_injector_report: str = REPORT_NAME

    @property
    def managed_ca(self) -> bool:
        return self.ca_mode == "managed"

    @property
    def least_propagation_delay(self) -> float:
        """The shortest --managed-ca-propagation-delay accepted without
        --managed-ca-allow-short-propagation-delay: kubelet's worst case for the bundles
        Pods may project by name (the unlinked one, when published, is refreshed sooner)."""
        if self.publish_unlinked_bundle:
            return UNLINKED_PROJECTION_WORST_CASE
        return KUBELET_PROJECTION_WORST_CASE

    def _validate_metrics_security(self) -> None:
        cert, key = self.metrics_tls_cert_file, self.metrics_tls_private_key_file
        if bool(cert) != bool(key):
            flag = "--metrics-tls-private-key-file" if cert else "--metrics-tls-cert-file"
            raise OptionsError(flag, "is needed too: the certificate and its key go together")
        if cert and not self.metrics_secure:
            raise OptionsError("--metrics-tls-cert-file", "serves nothing without --metrics-secure")
        if (
            self.metrics_secure
            and self.metrics_bind_address is not None
            and self.metrics_bind_address == self.health_probe_bind_address
        ):
            raise OptionsError(
                "--metrics-secure",
                "needs --metrics-bind-address apart from --health-probe-bind-address "
                "(the probes stay plain HTTP)",
            )

    def __post_init__(self) -> None:
        if not self.leader_elect_resource_name:
            lease = default_lease_name(self.controllers)
            object.__setattr__(self, "leader_elect_resource_name", lease)
        self.validate()

    def validate(self) -> None:
        """Raise `OptionsError` for the first unusable value."""
        self._validate_metrics_security()
        if self.ca_mode not in CA_MODES:
            raise OptionsError("--ca-mode", f"{self.ca_mode!r} is not one of {', '.join(CA_MODES)}")
        if self.managed_ca:
            self._validate_managed_ca()
        # The signer needs the CA key and cert and the bundle; the publisher only the
        # bundle; the injector none of them. A managed CA needs no file.
        elif "signer" in self.controllers:
            for flag, path in (
                ("--service-serving-key", self.service_serving_key),
                ("--service-serving-cert", self.service_serving_cert),
            ):
                if not path:
                    raise OptionsError(flag, "required by the signer controller")
        if (
            not self.managed_ca
            and self.controllers & SIGNING_CONTROLLERS
            and not self.service_serving_trust_bundle
        ):
            raise OptionsError("--service-serving-trust-bundle", "required")
        if (
            not self.managed_ca
            and "signer" in self.controllers
            and os.path.abspath(self.service_serving_key)
            == os.path.abspath(self.service_serving_cert)
        ):
            raise OptionsError(
                "--service-serving-cert", "must be a different file from --service-serving-key"
            )
        domain = self.cluster_service_domain
        if len(domain) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(domain):
            raise OptionsError("--cluster-service-domain", f"{domain!r} is not a DNS subdomain")
        validate_signer_name(self.signer_name)
        unlinked = unlinked_bundle_name(self.signer_name)
        if self.publish_unlinked_bundle and (
            len(unlinked) > _DNS1123_SUBDOMAIN_MAX or not _DNS1123_SUBDOMAIN.fullmatch(unlinked)
        ):
            raise OptionsError(
                "--publish-unlinked-bundle",
                f"the bundle's name {unlinked!r} (from --signer-name) is not a DNS subdomain "
                f"of at most {_DNS1123_SUBDOMAIN_MAX} characters",
            )
        unknown = set(self.controllers) - set(KNOWN_CONTROLLERS)
        if unknown or not self.controllers:
            raise OptionsError("--controllers", f"invalid set {sorted(self.controllers)}")
        self._validate_lifetime()
        if self.concurrent_syncs < 1:
            raise OptionsError("--concurrent-syncs", "must be at least 1")
        if self.waiting_resync_period < 1:
            raise OptionsError("--waiting-resync-period", "must be at least 1s")
        if self.pcr_api_version not in PCR_API_VERSIONS:
            raise OptionsError(
                "--pcr-api-version",
                f"{self.pcr_api_version!r} is not one of {', '.join(PCR_API_VERSIONS)}",
            )
        # One check a flag, so each error names its flag and the rule it broke.
        if self.kube_api_qps < 0:
            raise OptionsError("--kube-api-qps", "must not be negative (0 disables limiting)")
        if self.kube_api_burst < 1:
            raise OptionsError("--kube-api-burst", "must be at least 1")
        self._validate_leader_election()
        if self.log_format not in LOG_FORMATS:
            raise OptionsError(
                "--log-format", f"{self.log_format!r} is not one of {', '.join(LOG_FORMATS)}"
            )
        if self.verbosity < 0:
            raise OptionsError("-v", "must not be negative")

    def _validate_managed_ca(self) -> None:
        for flag_name, value in (
            ("--service-serving-key", self.service_serving_key),
            ("--service-serving-cert", self.service_serving_cert),
            ("--service-serving-trust-bundle", self.service_serving_trust_bundle),
        ):
            if value:
                raise OptionsError(
                    flag_name, "is for --ca-mode=file; a managed CA lives in its Secret"
                )
        if not _DNS1123_SUBDOMAIN.fullmatch(self.managed_ca_secret_name):
            raise OptionsError(
                "--managed-ca-secret-name",
                f"{self.managed_ca_secret_name!r} is not a DNS subdomain",
            )
        adopt = self.managed_ca_adopt_secret_name
        if adopt and not _DNS1123_SUBDOMAIN.fullmatch(adopt):
            raise OptionsError(
                "--managed-ca-adopt-secret-name",
                f"{adopt!r} is not a DNS subdomain (or empty, to adopt none)",
            )
        if adopt == self.managed_ca_secret_name:
            raise OptionsError(
                "--managed-ca-adopt-secret-name",
                "is the managed CA's own Secret (--managed-ca-secret-name)",
            )
        if self.managed_ca_key_type not in MANAGED_CA_KEY_TYPES:
            raise OptionsError(
                "--managed-ca-key-type",
                f"{self.managed_ca_key_type!r} is not one of {', '.join(MANAGED_CA_KEY_TYPES)}",
            )
        if not 0.0 < self.managed_ca_rotate_at < 1.0:
            raise OptionsError("--managed-ca-rotate-at", "must be a fraction between 0 and 1")
        if self.managed_ca_retire_margin < MIN_RETIRE_MARGIN:
            raise OptionsError(
                "--managed-ca-retire-margin",
                f"must be at least {format_duration(MIN_RETIRE_MARGIN)}",
            )
        if self.managed_ca_propagation_delay < 0:
            raise OptionsError("--managed-ca-propagation-delay", "must not be negative")
        least = self.least_propagation_delay
        short = self.managed_ca_propagation_delay < least
        if short and not self.managed_ca_allow_short_propagation_delay:
            raise OptionsError(
                "--managed-ca-propagation-delay",
                f"must be at least {format_duration(least)} (kubelet's "
                "clusterTrustBundle projection refresh, worst case"
                + (", with --publish-unlinked-bundle" if self.publish_unlinked_bundle else "")
                + "); --managed-ca-allow-short-propagation-delay accepts less",
            )
        if self.managed_ca_wait_for_injector not in ("auto", "true", "false"):
            raise OptionsError("--managed-ca-wait-for-injector", "must be auto, true or false")
        if self.managed_ca_keep_previous < 0:
            raise OptionsError("--managed-ca-keep-previous", "must not be negative")
        # A rotation started at the rotation point must finish (propagation delay) and
        # its leaves must be issuable for their full lifetime before the CA expires.
        left = self.managed_ca_lifetime * (1 - self.managed_ca_rotate_at)
        needed = self.managed_ca_propagation_delay + self.max_certificate_lifetime
        if left <= needed:
            raise OptionsError(
                "--managed-ca-lifetime",
                f"{format_duration(self.managed_ca_lifetime)} leaves {format_duration(left)} "
                f"after the rotation point; at least the propagation delay + "
                f"--max-certificate-lifetime ({format_duration(needed)}) is needed",
            )

    def _validate_lifetime(self) -> None:
        lifetime = self.max_certificate_lifetime
        if lifetime < MIN_CERTIFICATE_LIFETIME:
            raise OptionsError(
                "--max-certificate-lifetime",
                f"{format_duration(lifetime)} is shorter than the 1h minimum",
            )
        if (
            self.signer_name.startswith("kubernetes.io/")
            and lifetime > KUBERNETES_SIGNER_MAX_LIFETIME
        ):
            raise OptionsError(
                "--max-certificate-lifetime",
                f"{format_duration(lifetime)} exceeds 24h, the limit for kubernetes.io/* signers",
            )

    def _validate_leader_election(self) -> None:
        lease = self.leader_elect_lease_duration
        renew = self.leader_elect_renew_deadline
        retry = self.leader_elect_retry_period
        if retry <= 0:
            raise OptionsError("--leader-elect-retry-period", "must be positive")
        if lease <= renew:
            raise OptionsError(
                "--leader-elect-lease-duration",
                f"{format_duration(lease)} must be greater than --leader-elect-renew-deadline "
                f"{format_duration(renew)}",
            )
        if renew <= LEADER_ELECTION_JITTER_FACTOR * retry:
            raise OptionsError(
                "--leader-elect-renew-deadline",
                f"{format_duration(renew)} must be greater than 1.2 x "
                f"--leader-elect-retry-period {format_duration(retry)}",
            )
        if not _DNS1123_SUBDOMAIN.fullmatch(self.leader_elect_resource_name):
            raise OptionsError(
                "--leader-elect-resource-name",
                f"{self.leader_elect_resource_name!r} is not a DNS subdomain",
            )
        if not re.fullmatch(_DNS1123_LABEL, self.leader_elect_resource_namespace):
            raise OptionsError(
                "--leader-elect-resource-namespace",
                f"{self.leader_elect_resource_namespace!r} is not a namespace name",
            )

    @property
    def pcr_versions_preferred(self) -> list[str]:
        """API versions to try for PodCertificateRequests, newest first."""
        if self.pcr_api_version == "auto":
            return ["v1", "v1beta1"]
        return [self.pcr_api_version]

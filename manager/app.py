"""Wiring of one `service-serving-signer run` process, and its lifecycle.

Decides the order of things, as kube-controller-manager does:

start-up (any failure is one `StartupFailure` line, exit 1):
  options → signing material loaded and validated → API client → the rows of
  `manager.controllers.DESCRIPTORS` that the flags enable, built in table order over one
  build context (API versions discovered once, one Event recorder, the informer
  factory) → ops servers listening → material watcher and informers warming up (a
  standby replica has warm caches and is ready) → leader election; the controllers'
  workers start only while leading. A new controller is a row of that table, not a
  change here.

SIGHUP re-reads the signing-material files at once and changes nothing else.

A bind address that cannot be listened on is one `StartupFailure` line naming the flag.

shutdown (SIGTERM/SIGINT, or the leader-less `--leader-elect=false` run ending):
  stop the workers and wait for them → release the Lease (a standby takes over at once)
  → stop the informers and the material watcher → flush events → close the ops servers
  → exit 0.

losing the Lease without being asked to stop exits the process with status 1 at once
(client-go/KCM: "leaderelection lost"), so the Deployment restarts a clean standby
rather than letting two replicas sign.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

from kube import memory
from kube.controller import SHUTDOWN_GRACE, Controller
from kube.factory import InformerFactory
from manager.controllers import DESCRIPTORS, BuildContext, Gate, managed_ca_settings
from manager.controllers import StartupFailure as StartupFailure  # cli catches it from here
from manager.ops import BindError, Checks, OpsServer, start_servers
from manager.options import SIGNING_CONTROLLERS, Options

if TYPE_CHECKING:
    from kube.client import Client
    from kube.presence import PresenceWriter
    from manager.metricsauth import DelegatedAuth, ServingCert
    from trust.material import MaterialSource

log = logging.getLogger(__name__)

# One bound for the syncs in flight at shutdown, for all controllers together (the
# same as each controller loop's own, kube.controller.SHUTDOWN_GRACE); then the Lease
# is released and the process exits, which ends any sync still running.
SHUTDOWN_TIMEOUT = SHUTDOWN_GRACE


@dataclass
class Process:
    """The running pieces of one process, in the order they are stopped."""

    opts: Options
    registry: CollectorRegistry
    checks: Checks
    identity: str
    stop: threading.Event = field(default_factory=threading.Event)
    controllers: dict[str, Controller] = field(default_factory=dict)
    warmers: list[Callable[[threading.Event], None]] = field(default_factory=list)
    informers: InformerFactory | None = None
    closers: list[Callable[[], None]] = field(default_factory=list)
    reloaders: list[Callable[[], None]] = field(default_factory=list)
    servers: list[OpsServer] = field(default_factory=list)
    client: Client | None = None
    exit: Callable[[int], None] = os._exit
    _controllers_idle: threading.Event = field(default_factory=threading.Event)
    _background_stop: threading.Event = field(default_factory=threading.Event)
    _background: list[threading.Thread] = field(default_factory=list)
    _stopping: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._controllers_idle.set()

    def stopping(self) -> bool:
        return self._stopping.is_set()

    # background: material watcher and informers, alive whether or not we lead --------

    def start_background(self, name: str, target: Callable[[threading.Event], None]) -> None:
        thread = threading.Thread(
            target=target, args=(self._background_stop,), name=name, daemon=True
        )
        thread.start()
        self._background.append(thread)
        self.checks.add_thread(thread, self.stopping)

    def start_informers(self) -> None:
        """Every controller's informers, before leadership: a standby has warm caches."""
        if self.informers is None:
            return
        for thread in self.informers.start(self._background_stop):
            self._background.append(thread)
            self.checks.add_thread(thread, self.stopping)

    # controllers: only while leading -------------------------------------------------

    def run_controllers(self, leader_stop: threading.Event) -> None:
        """Run every controller until `leader_stop` or the process stop is set; returns
        after their threads have ended (so the Lease is released only then)."""
        self._controllers_idle.clear()
        try:
            self._run_controllers(leader_stop)
        finally:
            self._controllers_idle.set()

    def leading(self) -> bool:
        """The controllers run in this process (it leads, or elects no leader)."""
        return not self._controllers_idle.is_set()

    def wait_controllers_stopped(self, timeout: float) -> bool:
        return self._controllers_idle.wait(timeout)

    def _run_controllers(self, leader_stop: threading.Event) -> None:
        workers_stop = threading.Event()
        threads = []
        for name, controller in self.controllers.items():
            # Informers already run (warmed before leadership); only the workers start here.
            thread = threading.Thread(
                target=controller.run, args=(workers_stop,), name=f"{name}-controller", daemon=True
            )
            thread.start()
            threads.append(thread)
            self.checks.add_thread(thread, lambda: self.stopping() or leader_stop.is_set())
        log.info("controllers started", extra={"controllers": sorted(self.controllers)})
        while not (leader_stop.wait(0.2) or self.stop.is_set()):
            pass
        if self.stop.is_set():
            self._stopping.set()
        workers_stop.set()
        deadline = time.monotonic() + SHUTDOWN_TIMEOUT  # one bound for all, not per thread
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                log.warning(
                    "controller did not stop in time", extra={"controller_thread": thread.name}
                )
        log.info("controllers stopped")

    def on_stopped_leading(self) -> None:
        if self.stop.is_set():
            log.info("leader election released", extra={"identity": self.identity})
            return
        log.error(
            "leader election lost; exiting so a standby can take over",
            extra={"identity": self.identity},
        )
        self.exit(1)

    # shutdown ------------------------------------------------------------------------

    def shutdown_background(self) -> None:
        self._stopping.set()
        self._background_stop.set()
        for thread in self._background:
            thread.join(timeout=SHUTDOWN_TIMEOUT)
        for close in self.closers:
            try:
                close()
            except Exception:
                log.warning("error while closing", exc_info=True)
        for server in self.servers:
            server.stop()


def make_registry() -> CollectorRegistry:
    """Our own registry (testable), with the usual process collectors."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def identity() -> str:
    """client-go's convention: `<hostname>_<random uuid>`."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def build(opts: Options, *, registry: CollectorRegistry | None = None) -> Process:
    """Everything that can fail at start-up, before anything is started: the signing
    material, the API client, then each enabled row of `manager.controllers.DESCRIPTORS`
    in table order over one `BuildContext`."""
    registry = registry if registry is not None else make_registry()
    proc = Process(opts=opts, registry=registry, checks=Checks(), identity=identity())

    client: Client | None = None
    if opts.managed_ca:
        # The managed CA is read through the API: the client first.
        client = _client(opts, proc)
    material, gates = _material(opts, client, registry)
    if material is not None:
        signing = "signer" in opts.controllers
        proc.checks.add_readiness("signing-material", lambda: _material_loaded(material, signing))
        proc.reloaders.append(material.reload_now)
    if client is None:
        client = _client(opts, proc)

    ctx = BuildContext(
        opts=opts,
        client=client,
        registry=registry,
        informers=InformerFactory(client),
        identity=proc.identity,
        material=material,
        material_gates=gates,
    )
    try:
        for descriptor in DESCRIPTORS:
            if descriptor.enabled(opts):
                proc.controllers[descriptor.name] = descriptor.build(ctx)
    except StartupFailure:
        raise
    except Exception as err:
        raise StartupFailure(f"API server {client.host}: {_one_line(err)}") from None

    proc.informers = ctx.informers
    proc.closers[:0] = ctx.closers  # the Event recorder flushes before the client closes
    if material is not None:
        proc.warmers.append(material.run)
    proc.warmers.extend(ctx.warmers)
    for name, controller in proc.controllers.items():
        proc.checks.add_readiness(f"{name}-informers-synced", controller.has_synced)
    proc.client = client
    return proc


def _material(
    opts: Options, client: Client | None, registry: CollectorRegistry
) -> tuple[MaterialSource | None, dict[str, Gate]]:
    """The signing material, when a signing controller runs: the managed CA's Secret, or
    the files (the publisher needs only the bundle; the signer also the key and cert, and
    they must issue a leaf that verifies: trust.probe, with the signer's profile)."""
    if not opts.controllers & SIGNING_CONTROLLERS:
        return None, {}
    signing = "signer" in opts.controllers
    if opts.managed_ca:
        from managedca.wiring import material_gates, material_source
        from signer.authority import issue_probe

        settings = managed_ca_settings(opts)
        assert client is not None, "managed mode makes the client first"
        source = material_source(settings, client, registry, issue_probe if signing else None)
        return source, material_gates(source)

    from trust.files import FileMaterialSource
    from trust.material import MaterialError

    issuer = None
    if signing:
        from signer.authority import issue_probe

        issuer = issue_probe
    try:
        material = FileMaterialSource(
            opts.service_serving_key if signing else None,
            opts.service_serving_cert if signing else None,
            opts.service_serving_trust_bundle,
            registry,
            issuer=issuer,
            domain=opts.cluster_service_domain,
        )
    except MaterialError as err:
        raise StartupFailure(str(err)) from None
    return material, {}


def _client(opts: Options, proc: Process) -> Client:
    from kube.client import KubeconfigError, connect

    try:
        client = connect(opts.kubeconfig, qps=opts.kube_api_qps, burst=opts.kube_api_burst)
    except KubeconfigError as err:
        raise StartupFailure(str(err)) from None
    client.instrument(proc.registry)
    proc.closers.append(client.close)
    return client


def _material_loaded(material: MaterialSource, signing: bool) -> bool:
    try:
        material.trust_bundle()
        if signing:
            material.current()
    except Exception:
        return False
    return True


def _bind_flag(opts: Options, err: BindError) -> str:
    flags = [
        flag
        for flag, address in (
            ("--metrics-bind-address", opts.metrics_bind_address),
            ("--health-probe-bind-address", opts.health_probe_bind_address),
        )
        if address == err.address
    ]
    return "/".join(flags) or "bind address"


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def install_signal_handlers(
    stop: threading.Event, reloaders: list[Callable[[], None]] | None = None
) -> None:
    """SIGTERM/SIGINT set `stop`; a second one exits at once. SIGHUP (a terminal hang-up,
    or an operator's `kill -HUP`) re-reads the signing-material files now, as daemons
    conventionally do — it never stops the process (Python's default would kill it
    without releasing the Lease). Call from the main thread.

    Nothing is done in a Python signal handler. Python runs those only in the main
    thread, between bytecodes, so a signal the kernel delivers to another thread (any
    thread not blocking it may get a process-directed signal) is never handled while the
    main thread sits in `stop.wait()` — the process hung until SIGKILL; and a handler that
    calls `stop.set()` deadlocks if it interrupts the main thread inside `stop.wait()`
    holding the Event's lock. Instead the interpreter's C-level handler, in whichever
    thread the signal lands, writes the signal's number to a pipe
    (`signal.set_wakeup_fd`), and a `signals` thread reading that pipe acts on it."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    for signum in HANDLED_SIGNALS:
        # A Python-level handler (not SIG_IGN) is what makes the C handler write the pipe.
        signal.signal(signum, _noted)
    thread = threading.Thread(
        target=_act_on_signals,
        args=(read_end, stop, list(reloaders or [])),
        name="signals",
        daemon=True,
    )
    thread.start()


HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _noted(_signum: int, _frame: object) -> None:
    """The Python-level handler: nothing to do; the wakeup pipe carries the signal."""


def _act_on_signals(
    read_end: int, stop: threading.Event, reloaders: list[Callable[[], None]]
) -> None:
    while True:
        try:
            data = os.read(read_end, 64)
        except InterruptedError:
            continue
        if not data:
            return
        for signum in data:
            if signum == signal.SIGHUP:
                log.info(
                    "SIGHUP: re-reading the signing-material files", extra={"signal": "SIGHUP"}
                )
                for reload in reloaders:
                    try:
                        reload()
                    except Exception:
                        # This thread serves every later signal: it must not die here.
                        log.exception("SIGHUP: re-reading failed")
            elif signum in (signal.SIGTERM, signal.SIGINT):
                name = signal.Signals(signum).name
                if stop.is_set():
                    log.warning("second signal; exiting now", extra={"signal": name})
                    os._exit(1)
                log.info("shutting down", extra={"signal": name})
                stop.set()


def serve(proc: Process) -> int:
    """Start everything `build` prepared and block until `proc.stop` is set."""
    opts = proc.opts
    try:
        auth, tls = _metrics_security(proc)
        proc.servers = start_servers(
            opts.metrics_bind_address,
            opts.health_probe_bind_address,
            registry=proc.registry,
            checks=proc.checks,
            auth=auth,
            tls=tls,
        )
    except BindError as err:
        proc.shutdown_background()
        raise StartupFailure(f"{_bind_flag(opts, err)}={err}") from None
    for index, warm in enumerate(proc.warmers):
        proc.start_background(f"material-{index}", warm)
    proc.start_informers()
    writer = presence_writer(proc)
    if writer is not None:
        proc.start_background("presence", writer.run)

    if opts.leader_elect:
        from kube.leaderelection import LeaderElector

        assert proc.client is not None, "build() sets the client"
        elector_stop = threading.Event()
        elector = LeaderElector(
            proc.client,
            opts.leader_elect_resource_namespace,
            opts.leader_elect_resource_name,
            proc.identity,
            lease_duration=opts.leader_elect_lease_duration,
            renew_deadline=opts.leader_elect_renew_deadline,
            retry_period=opts.leader_elect_retry_period,
            on_started_leading=proc.run_controllers,
            on_stopped_leading=proc.on_stopped_leading,
            registry=proc.registry,
        )
        proc.checks.add_liveness("leader-election", elector.healthy)
        thread = threading.Thread(
            target=elector.run, args=(elector_stop,), name="leader-election", daemon=True
        )
        log.info(
            "attempting to acquire leader lease",
            extra={
                "lease": f"{opts.leader_elect_resource_namespace}/"
                f"{opts.leader_elect_resource_name}",
                "identity": proc.identity,
            },
        )
        thread.start()
        proc.checks.add_thread(thread, proc.stopping)
        proc.stop.wait()
        # run_controllers sees proc.stop and stops the workers; only once they have
        # ended is the Lease released, by the elector noticing its own stop.
        proc.wait_controllers_stopped(SHUTDOWN_TIMEOUT)
        elector_stop.set()
        thread.join(timeout=SHUTDOWN_TIMEOUT)
    else:
        log.info("leader election disabled; running controllers")
        proc.run_controllers(proc.stop)

    proc.shutdown_background()
    log.info("stopped")
    return 0


def _metrics_security(proc: Process) -> tuple[DelegatedAuth | None, ServingCert | None]:
    """`--metrics-secure`: the delegated authn/authz and the serving certificate."""
    opts = proc.opts
    if not opts.metrics_secure or opts.metrics_bind_address is None:
        return None, None
    from manager.metricsauth import DelegatedAuth, ServingCert

    assert proc.client is not None, "build() sets the client"
    try:
        tls = ServingCert(opts.metrics_tls_cert_file, opts.metrics_tls_private_key_file)
    except (OSError, ValueError) as err:  # ssl.SSLError is an OSError
        proc.shutdown_background()
        raise StartupFailure(f"--metrics-tls-cert-file: {_one_line(err)}") from None
    return DelegatedAuth(proc.client), tls


def presence_writer(proc: Process) -> PresenceWriter | None:
    """The signer's presence report (`signer.presence`), renewed by every process that
    runs the signer controller, leading or not, leader election on or off: `status` and
    `explain` read it to tell a running signer from none."""
    if "signer" not in proc.opts.controllers or proc.client is None:
        return None
    from kube.presence import PresenceWriter
    from manager import buildinfo
    from signer import presence

    opts = proc.opts
    return PresenceWriter(
        proc.client,
        opts.leader_elect_resource_namespace,
        presence.presence_name(opts.leader_elect_resource_name),
        proc.identity,
        annotations={
            presence.SIGNER_NAME: opts.signer_name,
            presence.LEADER_ELECT: "true" if opts.leader_elect else "false",
            presence.VERSION: buildinfo.current().version,
            presence.CA_MODE: opts.ca_mode,
        },
        labels={presence.LABEL: "signer"},
        renewed_annotations=_api_waits(proc),
    )


def _api_waits(proc: Process) -> Callable[[], dict[str, str]] | None:
    """The presence's `api-waits` annotation: where the leader's API writes waited since
    its last renewal — its own budget or the API server. A standby reports nothing, so
    it never overwrites the leader's figure."""
    from signer import presence

    client = proc.client
    metrics = client.metrics if client is not None else None
    if metrics is None:
        return None
    last, since = metrics.totals(), time.monotonic()

    def renewed() -> dict[str, str]:
        nonlocal last, since
        totals, now = metrics.totals(), time.monotonic()
        window, seconds = totals - last, now - since
        last, since = totals, now
        if not proc.leading():
            return {}
        return {presence.API_WAITS: presence.api_waits(window, round(seconds, 1)).annotation()}

    return renewed


def run(opts: Options, *, stop: threading.Event | None = None) -> int:
    """`service-serving-signer run`: build, serve until SIGTERM/SIGINT, exit 0."""
    memory.tune_allocator()  # before the caches fill (kube/memory.py)
    proc = build(opts)
    if stop is not None:
        proc.stop = stop
    if threading.current_thread() is threading.main_thread():
        install_signal_handlers(proc.stop, proc.reloaders)
    return serve(proc)

"""SIGTERM/SIGINT/SIGHUP reach the process whichever thread the kernel delivers them to.

A process-directed signal goes to any thread that does not block it. Python runs its
handlers only in the main thread, between bytecodes; a main thread parked in
`stop.wait()` with the signal delivered elsewhere never ran the handler, and the Pod
hung until the kubelet's SIGKILL (no Lease release, exit 137). Each case runs a child
process whose main thread blocks the signal, so the kernel must deliver it to another
thread: the case the old handlers could not serve.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager

CHILD = textwrap.dedent(
    """
    import logging, signal, sys, threading, time
    from manager.app import install_signal_handlers

    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(message)s")
    stop = threading.Event()
    def reload():
        print("reloaded", flush=True)
        if sys.argv[2] == "fail":
            raise OSError("the volume is gone")

    install_signal_handlers(stop, [reload])
    other = threading.Thread(target=time.sleep, args=(120,), daemon=True)
    other.start()
    # The main thread blocks the signals (its mask only): the kernel delivers them to
    # another thread, as it may whenever the main thread has them blocked or pending.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
    print("ready", flush=True)
    print("stopped" if stop.wait(120) else "not stopped", flush=True)
    time.sleep(float(sys.argv[1]))
    """
)


@contextmanager
def child(linger: float = 0.0, reload: str = "ok") -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(linger), reload],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def next_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    return proc.stdout.readline().strip()


REREAD = "SIGHUP: re-reading the signing-material files"


def signalled(proc: subprocess.Popen[str], signum: int) -> list[str]:
    """Send `signum`; the next two lines the child prints (what it did about it)."""
    proc.send_signal(signum)
    return [next_line(proc), next_line(proc)]


def test_sigterm_delivered_to_another_thread_still_stops_the_process() -> None:
    with child() as proc:
        assert signalled(proc, signal.SIGTERM) == ["shutting down", "stopped"]
        assert proc.wait(timeout=60) == 0


def test_sigint_stops_the_process_like_sigterm() -> None:
    with child() as proc:
        assert signalled(proc, signal.SIGINT) == ["shutting down", "stopped"]


def test_a_second_sigterm_exits_at_once_with_status_1() -> None:
    with child(linger=120) as proc:
        assert signalled(proc, signal.SIGTERM) == ["shutting down", "stopped"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 1


def test_sighup_rereads_the_material_and_does_not_stop() -> None:
    with child() as proc:
        assert signalled(proc, signal.SIGHUP) == [REREAD, "reloaded"]
        assert proc.poll() is None, "SIGHUP never stops the process"
        assert signalled(proc, signal.SIGTERM) == ["shutting down", "stopped"]


def test_a_failing_reload_is_logged_and_later_signals_are_still_served() -> None:
    with child(reload="fail") as proc:
        assert signalled(proc, signal.SIGHUP) == [REREAD, "reloaded"]
        lines = []
        while (line := next_line(proc)) != "shutting down":
            lines.append(line)
            if len(lines) == 1:
                proc.send_signal(signal.SIGTERM)
        assert lines[0] == "SIGHUP: re-reading failed", lines
        assert next_line(proc) == "stopped"

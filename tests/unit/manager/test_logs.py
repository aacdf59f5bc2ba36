"""Log lines: klog-compatible JSON keys, text key=value, verbosity gating."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from manager import logs


@pytest.fixture
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def emit(log_format: str, verbosity: int = 0) -> tuple[io.StringIO, logging.Logger]:
    stream = io.StringIO()
    logs.configure(log_format, verbosity, stream=stream)
    return stream, logging.getLogger("signer.controller")


@pytest.mark.usefixtures("restore_root")
def test_json_lines_parse_with_klog_keys_and_structured_values() -> None:
    stream, log = emit("json")
    log.info("issued certificate", extra={"pcr": "ns/req-1", "sans": 2, "names": ["a", "b"]})
    log.warning("service missing", extra={"service": "ns/web"})
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(lines) == 2
    first = lines[0]
    assert isinstance(first["ts"], float)
    assert first["level"] == "info"
    assert first["v"] == 0
    assert first["logger"] == "signer.controller"
    assert first["msg"] == "issued certificate"
    assert (first["pcr"], first["sans"], first["names"]) == ("ns/req-1", 2, ["a", "b"])
    assert lines[1]["level"] == "warning"
    assert "v" not in lines[1]


@pytest.mark.usefixtures("restore_root")
def test_json_exception_is_in_err_and_stays_one_line() -> None:
    stream, log = emit("json")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.error("sync failed", exc_info=True, extra={"key": "ns/x"})
    (line,) = stream.getvalue().splitlines()
    entry = json.loads(line)
    assert entry["err"] == "boom"
    assert "Traceback" in entry["stacktrace"]
    assert entry["key"] == "ns/x"


@pytest.mark.usefixtures("restore_root")
def test_json_stringifies_values_it_cannot_encode() -> None:
    stream, log = emit("json")
    log.info("odd", extra={"obj": object(), "tuple": (1, 2)})
    entry = json.loads(stream.getvalue())
    assert entry["obj"].startswith("<object")
    assert entry["tuple"] == [1, 2]


@pytest.mark.usefixtures("restore_root")
def test_text_lines_have_klog_header_and_key_values() -> None:
    stream, log = emit("text")
    log.info("issued certificate", extra={"pcr": "ns/req-1", "note": "two words"})
    line = stream.getvalue().rstrip("\n")
    assert line.startswith("I")
    assert "signer.controller] issued certificate" in line
    assert line.endswith('pcr=ns/req-1 note="two words"')


@pytest.mark.parametrize(
    ("verbosity", "shown"),
    [(0, {0}), (1, {0, 1}), (2, {0, 1, 2}), (3, {0, 1, 2, 3}), (4, {0, 1, 2, 3, 4})],
)
@pytest.mark.usefixtures("restore_root")
def test_verbosity_gates_v_levels(verbosity: int, shown: set[int]) -> None:
    stream, log = emit("json", verbosity)
    for level in range(5):
        log.log(logs.V(level), "line", extra={"level_asked": level})
    got = {json.loads(line)["level_asked"] for line in stream.getvalue().splitlines()}
    assert got == shown
    assert {json.loads(line)["v"] for line in stream.getvalue().splitlines()} == shown


@pytest.mark.usefixtures("restore_root")
def test_transport_loggers_are_quiet_below_v9() -> None:
    stream, _ = emit("text", 4)
    logging.getLogger("urllib3.connectionpool").debug("Starting new HTTPS connection")
    assert stream.getvalue() == ""
    stream, _ = emit("text", 9)
    logging.getLogger("urllib3.connectionpool").debug("Starting new HTTPS connection")
    assert "Starting new HTTPS connection" in stream.getvalue()


@pytest.mark.usefixtures("restore_root")
def test_json_ts_is_milliseconds_since_the_epoch_like_klog() -> None:
    import time

    stream, log = emit("json")
    before = time.time() * 1000.0
    log.info("tick")
    after = time.time() * 1000.0
    entry = json.loads(stream.getvalue())
    assert isinstance(entry["ts"], float)
    assert before - 1 <= entry["ts"] <= after + 1


@pytest.mark.usefixtures("restore_root")
def test_json_error_passed_as_value_is_a_string_under_err() -> None:
    stream, log = emit("json")
    log.error("signing material rejected", extra={"err": ValueError("/ca/tls.key: no key")})
    entry = json.loads(stream.getvalue())
    assert entry["msg"] == "signing material rejected"
    assert entry["err"] == "/ca/tls.key: no key"


@pytest.mark.usefixtures("restore_root")
def test_text_writes_a_list_as_compact_json_like_klog_a_slice() -> None:
    stream, log = emit("text")
    log.info("certificate issued", extra={"key": "ns/r", "names": ("a.ns.svc", "b.ns.svc")})
    assert stream.getvalue().rstrip("\n").endswith('key=ns/r names=["a.ns.svc","b.ns.svc"]')


@pytest.mark.usefixtures("restore_root")
def test_lines_are_the_same_without_caller_and_process_collection() -> None:
    saved = logging._srcfile, logging.logMultiprocessing
    try:
        logs.fast_records()
        for log_format in ("text", "json"):
            stream, log = emit(log_format)
            log.info("issued", extra={"pcr": "ns/req-1", "big": 2**70})
            line = stream.getvalue()
            assert "ns/req-1" in line and str(2**70) in line
            assert "test_logs" not in line
    finally:
        logging._srcfile, logging.logMultiprocessing = saved

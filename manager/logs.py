"""How the process logs: `--log-format text|json` and klog-style `-v` verbosity.

Decisions:
- Structured key/values travel in `logging`'s `extra=` (`log.info("issued",
  extra={"pcr": key, "sans": 3})`) and appear as `key=value` in text and as top-level
  keys in JSON.
- JSON is one object per line with klog/component-base's keys (`logs/json`): `ts` (float
  milliseconds since the epoch, as component-base's `epochMillisTimeEncoder` writes it —
  log pipelines for Kubernetes components parse it so), `v` (verbosity of an info line),
  `level`, `logger`, `msg`, `err` for an error, then the structured key/values.
- An error goes under `err`, as klog's `ErrorS(err, msg)`/zapr's `ErrorKey("err")` put it:
  either the logged exception (`exc_info`, plus `stacktrace`) or `extra={"err": error}`
  (an exception is written as its message). The message itself stays constant, so log
  queries can group on `msg`.
- Verbosity: `-v 0` shows INFO and above; `V(1)`..`V(3)` are the levels 19..17 between
  INFO and DEBUG; `-v 4` and above include DEBUG. Third-party transports (urllib3, the
  official client) stay at WARNING below `-v 9`, where klog starts logging HTTP traffic.
- Cost: a line is written per issued certificate, so a line must be cheap. Non-string
  values are compact JSON in text (`names=["a","b"]`, as klog writes a slice), the text
  header's time is formatted once per second, and the process (`run`) does not collect
  what no line prints: the caller's file and line, the process name
  (`fast_records()`).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any, TextIO

import orjson

_RESERVED = frozenset(
    logging.LogRecord("", 0, "", 0, "", (), None).__dict__.keys()
    | {"message", "asctime", "taskName"}
)
_NOISY_LOGGERS = ("urllib3", "kubernetes")


def V(level: int) -> int:
    """The `logging` level of a klog `V(level)` info line."""
    if level <= 0:
        return logging.INFO
    if level >= 4:
        return logging.DEBUG
    return logging.INFO - level


def verbosity_of(levelno: int) -> int:
    """The klog `v` of an info-or-lower record (0 for INFO and above)."""
    if levelno >= logging.INFO:
        return 0
    if levelno <= logging.DEBUG:
        return 4
    return logging.INFO - levelno


def structured_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The key/values passed with `extra=`."""
    return {
        k: v for k, v in record.__dict__.items() if k not in _RESERVED and not k.startswith("_")
    }


def _jsonable(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


class JSONFormatter(logging.Formatter):
    """One klog-compatible JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": record.created * 1000.0,
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.levelno < logging.WARNING:
            entry["v"] = verbosity_of(record.levelno)
        if record.exc_info and record.exc_info[1] is not None:
            entry["err"] = str(record.exc_info[1]) or type(record.exc_info[1]).__name__
            entry["stacktrace"] = self.formatException(record.exc_info)
        for key, value in structured_fields(record).items():
            entry.setdefault(key, _jsonable(value))
        return _compact_json(entry)


_NEEDS_QUOTES = re.compile(r'[\s"=]')
_SPACE = re.compile(r"\s")


def _compact_json(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # an int beyond 64 bits
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _text_value(value: Any) -> str:
    """A string bare unless it is empty or has a space, quote or `=`; anything else
    compact JSON, quoted only if it has a space."""
    if isinstance(value, str):
        needs_quotes = value == "" or _NEEDS_QUOTES.search(value) is not None
        text = value
    else:
        text = _compact_json(_jsonable(value))
        needs_quotes = _SPACE.search(text) is not None
    return json.dumps(text, ensure_ascii=False) if needs_quotes else text


class TextFormatter(logging.Formatter):
    """klog's text header (`I1130 23:43:00.123456 logger] msg key=value`)."""

    _second: tuple[int, str] = (-1, "")

    def _clock(self, created: float) -> str:
        whole = int(created)
        second, text = self._second
        if second != whole:
            text = time.strftime("%m%d %H:%M:%S", time.localtime(whole))
            self._second = (whole, text)
        return text

    def format(self, record: logging.LogRecord) -> str:
        micros = int((record.created % 1) * 1_000_000)
        header = f"{record.levelname[:1]}{self._clock(record.created)}.{micros:06d} {record.name}]"
        parts = [header, record.getMessage()]
        parts += [f"{k}={_text_value(v)}" for k, v in structured_fields(record).items()]
        line = " ".join(parts)
        if record.exc_info and record.exc_info[1] is not None:
            line += f" err={_text_value(str(record.exc_info[1]))}"
            if record.levelno >= logging.ERROR or record.levelno < logging.INFO:
                line += "\n" + self.formatException(record.exc_info)
        return line


def fast_records() -> None:
    """Stop `logging` from collecting, for every record, what neither formatter prints:
    the caller's file/line (a stack walk) and the multiprocessing process name. The
    logging HOWTO's "Optimization" settings; process-wide, so `run` calls it, not tests."""
    logging._srcfile = None  # documented in the HOWTO
    logging.logMultiprocessing = False


def configure(log_format: str = "text", verbosity: int = 0, stream: TextIO | None = None) -> None:
    """Install one handler on the root logger; safe to call again (replaces it)."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JSONFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(V(verbosity))
    for name in _NOISY_LOGGERS:
        logging.getLogger(name).setLevel(V(verbosity) if verbosity >= 9 else logging.WARNING)

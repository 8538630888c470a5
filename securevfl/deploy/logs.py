"""Where a party's events go: ``--log-file``, ``--log-level``, ``--log-format`` of ``securevfl party``.

Only the command line calls :func:`party_logging` (library code logs and never configures). The
console (stderr) shows ``[party] message`` lines; ``--log-file PATH`` appends every event to PATH
too, as text lines with a UTC time or, with ``--log-format json``, as one JSON object per line:
``time`` (ISO 8601, UTC), ``level``, ``party``, ``phase``, ``event``, ``message`` and the event's
fields (``peer``, ``epoch``, ``rows``, ``bytes``, ...). Without ``--log-file``, ``--log-format json``
makes the console JSON (for a collector that reads a service's stderr).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from psi import atomic
from securevfl.deploy.progress import CONSOLE_KEY, EVENT_KEY
from securevfl.errors import ConfigError

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
FORMATS = ("text", "json")
#: The logger every securevfl module logs under (``logging.getLogger(__name__)``).
ROOT = "securevfl"


def _utc(created: float) -> str:
    return dt.datetime.fromtimestamp(created, dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _plain(value: Any) -> Any:
    """A JSON-safe value: numpy scalars as numbers, NaN and infinities as null, the rest as text."""
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    item = getattr(value, "item", None)  # numpy scalars
    return _plain(item()) if callable(item) else str(value)


class TextFormatter(logging.Formatter):
    """``[party] message``, with ``warning: `` / ``error: `` before the message above info.

    ``timestamps``: a UTC time first (log files; a console under systemd gets the journal's).
    """

    def __init__(self, party: str | None = None, timestamps: bool = False) -> None:
        super().__init__()
        self.party = party
        self.timestamps = timestamps

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, EVENT_KEY, {})
        party = fields.get("party") or self.party
        text = record.getMessage()
        if record.levelno >= logging.WARNING:
            text = f"{record.levelname.lower()}: {text}"
        line = f"[{party}] {text}" if party else text
        if self.timestamps:
            line = f"{_utc(record.created)} {line}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, party, phase, event, message, then the event's fields."""

    def __init__(self, party: str | None = None) -> None:
        super().__init__()
        self.party = party

    def format(self, record: logging.LogRecord) -> str:
        fields = dict(getattr(record, EVENT_KEY, {}))
        body: dict[str, Any] = {
            "time": _utc(record.created), "level": record.levelname.lower(),
            "party": fields.pop("party", None) or self.party, "phase": fields.pop("phase", None),
            "event": fields.pop("event", None) or "log", "message": record.getMessage()}
        if "event" not in getattr(record, EVENT_KEY, {}):
            body["logger"] = record.name
        body.update({k: _plain(v) for k, v in fields.items() if k not in body})
        if record.exc_info:
            body["traceback"] = self.formatException(record.exc_info)
        return json.dumps(body, ensure_ascii=False, allow_nan=False)


def _on_console(record: logging.LogRecord) -> bool:
    return getattr(record, CONSOLE_KEY, True)


def log_handlers(party: str, level: str = "info", fmt: str = "text", file: Path | None = None,
                 console: TextIO | None = None) -> list[logging.Handler]:
    """The console handler and, with ``file``, the file handler (appending) for one party's process."""
    if level not in LEVELS:
        raise ConfigError(f"--log-level must be one of {', '.join(LEVELS)}, got {level!r}")
    if fmt not in FORMATS:
        raise ConfigError(f"--log-format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    stream = logging.StreamHandler(console or sys.stderr)
    if fmt == "json" and file is None:
        stream.setFormatter(JsonFormatter(party))
    else:
        stream.setFormatter(TextFormatter(party))
        stream.addFilter(_on_console)
    handlers: list[logging.Handler] = [stream]
    if file is not None:
        if file.is_dir():
            raise ConfigError(f"--log-file {file} is a folder: give a file name (launch: a folder, one file each)")
        try:
            atomic.open_private_append(file)  # a new log file (and its folders) is owner-only
            handler = logging.FileHandler(file, mode="a", encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--log-file {file}: cannot write it ({exc.strerror or exc})") from exc
        handler.setFormatter(JsonFormatter(party) if fmt == "json" else TextFormatter(party, timestamps=True))
        handlers.append(handler)
    return handlers


@contextlib.contextmanager
def party_logging(party: str, level: str = "info", fmt: str = "text", file: Path | None = None) -> Iterator[None]:
    """Send the ``securevfl`` loggers' events to the console (and ``file``) while the block runs; then undo."""
    handlers = log_handlers(party, level, fmt, file)
    logger = logging.getLogger(ROOT)
    before = (logger.level, logger.propagate)
    logger.setLevel(LEVELS[level])
    logger.propagate = False  # these handlers are the party's whole output; no second copy via the root logger
    for handler in handlers:
        logger.addHandler(handler)
    try:
        yield
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
            handler.close()
        logger.setLevel(before[0])
        logger.propagate = before[1]

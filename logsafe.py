"""Logging that keeps input out of the logs. An exception's message may hold what a caller sent
(a UnicodeEncodeError quotes the text, a pydantic ValidationError its `input_value`, a provider error
the cloud's echo of a name), so logged exceptions show their type and frames, never their message;
URLs (which may carry userinfo or query values) are not logged by the HTTP client, nor remote
commands by asyncssh; access-log lines lose their query strings.
"""

from __future__ import annotations

import logging
import traceback
from types import TracebackType
from typing import Any

WITHHELD = "(message withheld: it may hold input)"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# httpx logs every request's URL at INFO; a URL may carry userinfo or query values. asyncssh logs
# every remote command at INFO ("  Command: …"): users' job commands, the keys a claim adds.
QUIET_BELOW_WARNING = ("httpx", "httpcore", "asyncssh")


def frames(tb: TracebackType | None, last: int = 6) -> str:
    """'file:line in function' of the innermost frames: where, without any value."""
    summary = traceback.extract_tb(tb)[-last:]
    return " <- ".join(f"{_short(f.filename)}:{f.lineno} in {f.name}" for f in reversed(summary))


def _short(filename: str) -> str:
    return "/".join(filename.split("/")[-2:])  # package/module.py: enough to find it


def describe(exc: BaseException) -> str:
    """The exception's type (and its causes' types) and where it was raised; never its message."""
    chain = [type(exc).__name__]
    seen: set[int] = {id(exc)}
    inner = exc.__cause__ or exc.__context__
    while inner is not None and id(inner) not in seen:
        seen.add(id(inner))
        chain.append(type(inner).__name__)
        inner = inner.__cause__ or inner.__context__
    return f"{' from '.join(chain)} at {frames(exc.__traceback__)}"


def format_withheld(ei: Any) -> str:
    """A traceback (frames and source lines, which are code) ending in the exception's type only."""
    _, exc, tb = ei
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(traceback.extract_tb(tb))]
    name = type(exc).__qualname__ if exc is not None else "?"
    return "".join(lines) + f"{name}{_kind(exc)} {WITHHELD}"


def _kind(exc: BaseException | None) -> str:
    """The suffix " [kind]" of an ApplicationError whose type is one of gpuprov's error kinds (a fixed
    vocabulary, never input: a capacity refusal tells itself from a bug without the message)."""
    from messages.enums import ErrorKind

    kind = getattr(exc, "type", None)
    return f" [{kind}]" if isinstance(kind, str) and kind in {k.value for k in ErrorKind} else ""


class WithheldFormatter(logging.Formatter):
    def formatException(self, ei: Any) -> str:  # noqa: N802 — logging's name
        return format_withheld(ei)


class DropQueryString(logging.Filter):
    """uvicorn's access line is (client, method, path?query, version, status): keep the path only."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str) and "?" in args[2]:
            record.args = (*args[:2], args[2].split("?", 1)[0], *args[3:])
        return True


def withhold_in(*logger_names: str) -> None:
    """Make the handlers of these loggers (configured by someone else, e.g. uvicorn) withhold
    exception messages, keeping their format."""
    for name in logger_names:
        for handler in logging.getLogger(name).handlers:
            if handler.formatter is None:
                handler.setFormatter(WithheldFormatter())
            else:
                handler.formatter.formatException = format_withheld  # type: ignore[method-assign]


def quiet_url_loggers() -> None:
    for name in QUIET_BELOW_WARNING:
        logger = logging.getLogger(name)
        logger.setLevel(max(logger.level, logging.WARNING))


def _stderr_handler() -> logging.Handler:
    handler = logging.StreamHandler()
    handler.setFormatter(WithheldFormatter(FORMAT))
    return handler


def configure(level: int = logging.INFO) -> None:
    """Logging for a process of ours (the worker): one stderr handler withholding exception messages."""
    logging.basicConfig(level=level, handlers=[_stderr_handler()])
    quiet_url_loggers()


def configure_uvicorn() -> None:
    """For the API under uvicorn, after uvicorn set up its loggers: their handlers withhold exception
    messages, access lines lose query strings, the HTTP client logs no URLs, and the app's own
    loggers (which uvicorn leaves without a handler) get one that withholds too."""
    withhold_in("uvicorn", "uvicorn.error", "uvicorn.access")
    logging.getLogger("uvicorn.access").addFilter(DropQueryString())
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(_stderr_handler())
    quiet_url_loggers()

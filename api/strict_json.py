"""JSON as the API accepts it: RFC 8259 text only. Python's `json` also takes `NaN`, `Infinity` and
`-Infinity`, and decodes a lone surrogate escape (`"\\ud800"`) into a str that cannot be encoded as
UTF-8 — it then fails far from the request (a database driver, a response) as a 500. Both are refused
here with where they are, never with the value (it may be a secret).
"""

from __future__ import annotations

import json
import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")
# A key is shown in a location only if it looks like a field name: anything else may be a pasted value.
_SHOWN_KEY = re.compile(r"^[A-Za-z0-9_\-\[\]]{1,64}$")


class StrictJsonError(ValueError):
    """Valid to Python's json, not to RFC 8259: `where` (e.g. body.credentials.api_key) and why."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where, self.reason = where, reason


class _Constant:
    """What json.loads makes of NaN/Infinity here, so the walk can say where each one is."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


def loc_part(part: Any) -> str | int:
    """One step of an error location: an index, or a key if it looks like a field name."""
    if isinstance(part, int) or (isinstance(part, str) and _SHOWN_KEY.match(part)):
        return part
    return "<key>"


def _where(path: list[str | int]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _has_surrogate(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def check(value: Any, root: str = "body") -> None:
    """Raise StrictJsonError at the first NaN/Infinity or lone surrogate in a json.loads result made
    with `parse_constant=_Constant`. Iterative: nesting depth is the parser's limit, not ours."""
    stack: list[tuple[Any, list[str | int]]] = [(value, [root])]
    while stack:
        item, path = stack.pop()
        if isinstance(item, _Constant):
            raise StrictJsonError(_where(path), f"{item.name} is not valid JSON (numbers must be finite)")
        if isinstance(item, str):
            if _has_surrogate(item):
                raise StrictJsonError(_where(path), "contains a lone surrogate escape (\\ud800-\\udfff), "
                                                    "which is not text")
        elif isinstance(item, dict):
            for key, child in item.items():
                if _has_surrogate(key):
                    raise StrictJsonError(_where(path), "a key contains a lone surrogate escape "
                                                        "(\\ud800-\\udfff), which is not text")
                stack.append((child, [*path, loc_part(key)]))
        elif isinstance(item, list):
            stack.extend((child, [*path, i]) for i, child in enumerate(item))


def loads(raw: bytes | str, root: str = "body") -> Any:
    """json.loads, refusing what RFC 8259 does not allow (StrictJsonError). Malformed JSON raises
    ValueError (json.JSONDecodeError, UnicodeDecodeError) or RecursionError, as json.loads does."""
    value = json.loads(raw, parse_constant=_Constant)
    check(value, root)
    return value

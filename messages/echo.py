"""Quoting a caller's value back in an answer: only one that looks like an id is shown. A path,
query or body value may be anything (a pasted secret, control characters, 3 000 characters), and
an answer's reason reaches the CLI, the console and logs."""

from __future__ import annotations

import re

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def shown(value: str) -> str:
    """`value` quoted if it looks like an id (a region, a cloud, a name), else a placeholder."""
    return repr(value) if _ID.match(value) else "(value not shown: not an id)"

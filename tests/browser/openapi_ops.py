"""Which requests are operations of the API's own description: the console may call nothing else."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit


def operations(spec: dict[str, Any]) -> list[tuple[str, re.Pattern[str]]]:
    """(METHOD, path pattern) of every operation in an OpenAPI document."""
    ops = []
    for template, methods in spec["paths"].items():
        pattern = re.escape(template)
        pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", pattern)  # {param} → one path segment
        for method in methods:
            if method in ("get", "put", "post", "delete", "patch", "head", "options"):
                ops.append((method.upper(), re.compile(f"^{pattern}$")))
    return ops


def unknown(requests: list[tuple[str, str]], spec: dict[str, Any]) -> list[str]:
    """The requests (method, url) that match no operation of `spec`."""
    ops = operations(spec)
    return [f"{method} {url}" for method, url in requests
            if not any(m == method and p.match(urlsplit(url).path) for m, p in ops)]

"""The `filter` of Compute Engine's list calls, as far as the simulation honours it.

Supported (what gpuprov's adapter and most tools send): comparisons `field = "value"`, `field !=
"value"` (exact), `field eq REGEX`, `field ne REGEX` (the value is an RE2 regular expression that
must match the whole field), values quoted or bare; `field` a dotted path into the resource
(`labels.env`, `name`, `id`, `status`); several comparisons joined by `AND` or by juxtaposed
parentheses `(a = "x") (b = "y")`, which Compute Engine reads as AND. Anything else (OR, `:`,
`<`, NOT, functions) is refused as an invalid filter, like an expression Compute Engine cannot parse.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fakeclouds.errors import Invalid

Predicate = Callable[[dict[str, Any]], bool]

_TOKEN = re.compile(
    r"""\s*(?:(?P<paren>[()])|(?P<op>!=|=)|"(?P<dq>(?:[^"\\]|\\.)*)"|'(?P<sq>(?:[^'\\]|\\.)*)'
                        |(?P<word>[^\s()"'=!]+))""",
    re.X,
)


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise Invalid("Invalid value for field 'filter': the expression cannot be parsed")
        pos = m.end()
        if m.group("paren"):
            out.append(("paren", m.group("paren")))
        elif m.group("op"):
            out.append(("op", m.group("op")))
        elif m.group("dq") is not None or m.group("sq") is not None:
            raw = m.group("dq") if m.group("dq") is not None else m.group("sq")
            out.append(("str", re.sub(r"\\([\"'])", r"\1", raw)))  # \" and \' only: regexes keep theirs
        else:
            word = m.group("word")
            out.append(("op", word) if word in ("eq", "ne") else ("word", word))
    return out


def _field(resource: dict[str, Any], path: str) -> str | None:
    value: Any = resource
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    if isinstance(value, bool):
        return "true" if value else "false"
    return None if isinstance(value, dict | list) else str(value)


def _comparison(field: str, op: str, value: str) -> Predicate:
    if op in ("eq", "ne"):
        try:
            pattern = re.compile(value)
        except re.error:
            raise Invalid("Invalid value for field 'filter': bad regular expression") from None

        def regex(resource: dict[str, Any]) -> bool:
            got = _field(resource, field)
            hit = got is not None and pattern.fullmatch(got) is not None
            return hit if op == "eq" else not hit

        return regex

    def exact(resource: dict[str, Any]) -> bool:
        hit = _field(resource, field) == value
        return hit if op == "=" else not hit

    return exact


def parse(text: str | None) -> Predicate:
    """A predicate over resource JSON; Invalid for an expression outside the supported subset."""
    if not text or not text.strip():
        return lambda _: True
    return _Parser(_tokens(text)).conjunction(end=None)


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens, self.i = tokens, 0

    def conjunction(self, end: tuple[str, str] | None) -> Predicate:
        preds: list[Predicate] = []
        while self.i < len(self.tokens) and self.tokens[self.i] != end:
            if self.tokens[self.i] == ("word", "AND") and preds:
                self.i += 1
                continue
            preds.append(self.term())
        if not preds or (end is not None and self.i >= len(self.tokens)):
            raise Invalid("Invalid value for field 'filter': empty expression or unbalanced parentheses")
        self.i += end is not None  # the closing parenthesis
        return lambda r: all(p(r) for p in preds)

    def term(self) -> Predicate:
        toks, i = self.tokens, self.i
        if toks[i] == ("paren", "("):
            self.i += 1
            return self.conjunction(end=("paren", ")"))
        if (
            i + 2 < len(toks)
            and toks[i][0] == "word"
            and toks[i + 1][0] == "op"
            and toks[i + 2][0] in ("word", "str")
        ):
            self.i += 3
            return _comparison(toks[i][1], toks[i + 1][1], toks[i + 2][1])
        raise Invalid("Invalid value for field 'filter': unsupported expression")

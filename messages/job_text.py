"""What a job request may say that reaches a shell on the job's host: its command and its image.

Both are checked when the job is asked for (the API's JobCreate; the CLI before it sends), so a
request that could never launch — or would launch something else — is refused with the reason
(HTTP 422) instead of being stored and retried:

- a command is any text but control characters: NUL (which no shell can carry) and the other C0/C1
  controls, DEL included, are refused; newline and tab are what scripts are made of and stay.
- an image is a container image reference in Docker's grammar (distribution/reference):
  `[registry[:port]/]path[:tag][@digest]`, path components lowercase letters and digits joined by
  `.`, `_`, `__` or dashes. It cannot begin with `-`, so it can never be read as a `docker run` option.
"""

from __future__ import annotations

import re

# distribution/reference's grammar (reference/regexp.go), anchored by fullmatch. ASCII only.
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_NAME = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*"
_IPV6 = r"\[[a-fA-F0-9:]+\]"
_DOMAIN = rf"(?:{_DOMAIN_NAME}|{_IPV6})(?::[0-9]+)?"
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|-+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REFERENCE = re.compile(rf"(?P<name>{_NAME})(?::{_TAG})?(?:@{_DIGEST})?", re.ASCII)
MAX_IMAGE_NAME = 255  # the grammar's limit on the name part (registry and path)
MAX_IMAGE = 500


def image_reference(value: str) -> str:
    """`value` if it is a container image reference; ValueError saying why (the value itself is
    not repeated: the caller has it)."""
    if value.startswith("-"):
        raise ValueError("an image must not begin with '-' (it would be read as a docker option)")
    match = IMAGE_REFERENCE.fullmatch(value) if len(value) <= MAX_IMAGE else None
    if match is None:
        raise ValueError("an image must be an image reference: [registry[:port]/]name[:tag][@digest], "
                         "the name's path in lowercase letters, digits and . _ - separators")
    if len(match["name"]) > MAX_IMAGE_NAME:
        raise ValueError(f"an image's name (registry and path) is at most {MAX_IMAGE_NAME} characters")
    return value


# The control characters (Unicode category Cc: C0, DEL and C1) but newline and tab.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def command_text(value: str) -> str:
    """`value` if it holds no control character but newline and tab; ValueError naming the first
    one (as U+XXXX) and where it is."""
    found = _CONTROL.search(value)
    if found is not None:
        raise ValueError(f"a command must not contain control characters (U+{ord(found[0]):04X} at position "
                         f"{found.start()}); newline and tab are the only ones allowed")
    return value

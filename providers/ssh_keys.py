"""SSH public keys as users hand them in: one OpenSSH public key line each, re-serialised.

A key travels into workflow history, clouds' key stores, cloud-init user data and
authorized_keys files, so what is passed on is never the user's text: it is parsed, checked and
written out again from the parsed key (`type base64 [comment]`). A private key pasted by mistake
is refused with a message saying so; no message quotes the entry.
"""

from __future__ import annotations

import re
import unicodedata

import asyncssh

MAX_ENTRY = 16 * 1024  # characters: an RSA-16384 public key line is under 3 KiB
MAX_COMMENT = 256
NOT_A_KEY = "not an OpenSSH public key (expected `<type> <base64> [comment]`, as in a .pub file)"

# PEM and OpenSSH private keys ("-----BEGIN [RSA |EC |DSA |OPENSSH |ENCRYPTED ]PRIVATE KEY-----"),
# SSH.com/RFC 4716-style private keys, PuTTY .ppk files.
_PRIVATE_MARKERS = re.compile(r"PRIVATE KEY|PuTTY-User-Key-File-|SSH PRIVATE KEY FILE FORMAT", re.IGNORECASE)


class KeyRefused(ValueError):
    """Why an entry is not an acceptable public key (without quoting it)."""


def _is_private(text: str) -> bool:
    if _PRIVATE_MARKERS.search(text):
        return True
    try:
        asyncssh.import_private_key(text)
    except asyncssh.KeyImportError as e:
        return "passphrase" in str(e).lower()  # an encrypted private key in a format we did not name
    except Exception:  # noqa: BLE001 — anything else the parser trips on is not a private key
        return False
    return True


def _bad_character(text: str) -> str | None:
    for c in text:
        if c in "\r\n\v\f\x85\u2028\u2029":
            return "it has a line break (one key per entry)"
        if c != "\t" and unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn"):
            return "it has a control or invisible character"
    return None


def public_key_line(text: str) -> str:
    """The OpenSSH public key line of `text`, re-serialised from the parsed key with its comment
    cleaned (whitespace collapsed); KeyRefused saying why not."""
    if len(text) > MAX_ENTRY:
        raise KeyRefused(f"too long: more than {MAX_ENTRY} characters (an OpenSSH public key line is "
                         f"well under that, its comment at most {MAX_COMMENT})")
    if _is_private(text):
        raise KeyRefused("this is a private key — paste the .pub file (e.g. ~/.ssh/id_ed25519.pub); "
                         "it was not stored or sent anywhere")
    line = text.strip()
    if not line:
        raise KeyRefused("empty")
    bad = _bad_character(line)
    if bad is not None:
        raise KeyRefused(f"not one OpenSSH public key line: {bad}")
    fields = line.split()
    if len(fields) < 2:
        raise KeyRefused(NOT_A_KEY)
    comment = " ".join(fields[2:])
    if len(comment) > MAX_COMMENT:
        raise KeyRefused(f"comment longer than {MAX_COMMENT} characters")
    try:
        key = asyncssh.import_public_key(f"{fields[0]} {fields[1]}")
    except (asyncssh.KeyImportError, ValueError, TypeError):
        raise KeyRefused(NOT_A_KEY) from None
    key.set_comment(None)
    exported = key.export_public_key("openssh").decode().strip()
    return f"{exported} {comment}" if comment else exported

"""The slice of cloud-init a simulated machine honours at boot: `#cloud-config` with
`ssh_authorized_keys`, `write_files` and `runcmd`, `#!` scripts, and MIME multipart user data
holding any of them (cloud-config parts' lists appended, as `merge_how: list(append)` says)."""

from __future__ import annotations

import base64
import binascii
import shlex
from dataclasses import dataclass, field
from email import message_from_string

import yaml


@dataclass(frozen=True)
class WriteFile:
    path: str  # absolute, on the machine
    content: bytes
    mode: int


@dataclass
class UserData:
    authorized_keys: list[str] = field(default_factory=list)
    scripts: list[str] = field(default_factory=list)
    files: list[WriteFile] = field(default_factory=list)
    runcmd: list[str] = field(default_factory=list)  # shell lines, as cloud-init writes them


class UserDataError(ValueError):
    """cloud-init would reject this user data (unparseable cloud-config)."""


def parse(user_data: str | None) -> UserData:
    out = UserData()
    if not user_data:
        return out
    if user_data.startswith("Content-Type: multipart/") or user_data.startswith("MIME-Version"):
        msg = message_from_string(user_data)
        for part in msg.walk():
            if part.is_multipart():
                continue
            payload = part.get_payload(decode=True)
            text = payload.decode() if isinstance(payload, bytes) else str(part.get_payload())
            _parse_part(text, out)
    else:
        _parse_part(user_data, out)
    return out


def _parse_part(text: str, out: UserData) -> None:
    if text.startswith("#!"):
        out.scripts.append(text)
    elif text.startswith("#cloud-config"):
        try:
            doc = yaml.safe_load(text) or {}
        except yaml.YAMLError as e:
            raise UserDataError(f"cloud-config is not valid YAML: {e}") from None
        if not isinstance(doc, dict):
            raise UserDataError("cloud-config must be a mapping")
        keys = doc.get("ssh_authorized_keys") or []
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise UserDataError("cloud-config ssh_authorized_keys must be a list of strings")
        out.authorized_keys.extend(k.strip() for k in keys)
        out.files.extend(_write_file(f) for f in _list(doc, "write_files"))
        out.runcmd.extend(_command(c) for c in _list(doc, "runcmd"))
    # Other formats (include files, boothooks) are stored but not acted on.


def _list(doc: dict[str, object], key: str) -> list[object]:
    found = doc.get(key) or []
    if not isinstance(found, list):
        raise UserDataError(f"cloud-config {key} must be a list")
    return found


def _write_file(f: object) -> WriteFile:
    """One `write_files` entry, as cloud-init's schema takes it (path, content, encoding,
    permissions; owner and defer are accepted and not simulated)."""
    if not isinstance(f, dict) or not isinstance(f.get("path"), str) or not f["path"].startswith("/"):
        raise UserDataError("cloud-config write_files entries need an absolute path")
    content = f.get("content", "")
    if not isinstance(content, str):
        raise UserDataError(f"write_files {f['path']}: content must be a string")
    encoding = f.get("encoding", "text/plain")
    if encoding in ("b64", "base64"):
        try:
            data = base64.b64decode(content, validate=True)
        except binascii.Error:
            raise UserDataError(f"write_files {f['path']}: content is not base64") from None
    elif encoding == "text/plain":
        data = content.encode()
    else:
        raise UserDataError(f"write_files {f['path']}: encoding {encoding!r} is not simulated")
    try:
        mode = int(str(f.get("permissions", "0644")), 8)
    except ValueError:
        raise UserDataError(f"write_files {f['path']}: permissions must be octal") from None
    return WriteFile(path=f["path"], content=data, mode=mode)


def _command(c: object) -> str:
    """A runcmd entry as a shell line: a string as it is, a list quoted word by word."""
    if isinstance(c, str):
        return c
    if isinstance(c, list) and c and all(isinstance(w, str) for w in c):
        return shlex.join(c)
    raise UserDataError("cloud-config runcmd entries must be strings or lists of strings")

"""The slice of cloud-init a simulated machine honours at boot: `#cloud-config` with
`ssh_authorized_keys`, `#!` scripts, and MIME multipart user data holding either."""

from __future__ import annotations

from dataclasses import dataclass, field
from email import message_from_string

import yaml


@dataclass
class UserData:
    authorized_keys: list[str] = field(default_factory=list)
    scripts: list[str] = field(default_factory=list)


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
        keys = doc.get("ssh_authorized_keys") or []
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise UserDataError("cloud-config ssh_authorized_keys must be a list of strings")
        out.authorized_keys.extend(k.strip() for k in keys)
    # Other formats (include files, boothooks) are stored but not acted on.

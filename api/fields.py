"""Field types shared by the API's request and response bodies: free text that prints safely
(`Printable`, `Name`), cloud and placement ids checked against the registry and shown as enums in
OpenAPI (`CloudId`, `PlacementId`, `TableBackendId`), project slugs (`PROJECT_PATTERN`, `Project`),
zoned timestamps (`Timestamp`, `aware`), OpenSSH public keys, and `Strict`, the base of every request
body: it forbids unknown fields, so a typo (`gpu_cout`) is a 422 naming the field instead of a
silently ignored option.

Request fields naming a cloud are checked against the registry when the request arrives (clouds
registered later count), and OpenAPI shows them as an enum of its clouds.
"""

from __future__ import annotations

import ipaddress
import unicodedata
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, ConfigDict, Field

from api.errors import shown
from messages.json_numbers import IntegralFloats
from providers import future, registry, ssh_keys

# Characters that act on a terminal or reorder what it shows: C0/C1 controls (ESC sequences, \r,
# \x9b CSI), format characters (bidi overrides U+202A-202E and U+2066-2069, zero-width characters),
# surrogates, and the line/paragraph separators. Names are printed by the CLI and the Web UI.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _printable(value: str) -> str:
    for i, ch in enumerate(value):
        if unicodedata.category(ch) in _UNPRINTABLE:
            raise ValueError(f"must not contain control or formatting characters "
                             f"(U+{ord(ch):04X} at position {i})")
    return value


Printable = AfterValidator(_printable)  # for every free-text name or label a request gives
Name = Annotated[str, Field(min_length=1, max_length=100), Printable]


def _network(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value.strip(), strict=False))
    except ValueError:
        raise ValueError(f"{shown(value)} is not an IP address or network (CIDR)") from None


# An IPv4/IPv6 network as CIDR (a bare address: its /32 or /128), normalised ("10.0.0.7/24": "10.0.0.0/24").
Network = Annotated[str, Field(min_length=1, max_length=49), AfterValidator(_network)]


def _known_cloud(value: str) -> str:
    known = registry.known()
    if value not in known:
        if (why := future.not_supported(value)) is not None:  # listed in the connect grid, no adapter
            raise ValueError(why)
        raise ValueError(f"unknown cloud {shown(value)}; known: {', '.join(known)}")
    return value


def _cloud_enum(schema: dict[str, Any]) -> None:
    schema["enum"] = registry.known()  # when the schema is generated: every registered cloud


# A cloud id of the registry: validated per request (clouds registered later count), an enum in OpenAPI.
CloudId = Annotated[str, Field(min_length=1, max_length=100, json_schema_extra=_cloud_enum),
                    AfterValidator(_known_cloud)]


def _placeable_cloud(value: str) -> str:
    return value if registry.is_fleet(value) else _known_cloud(value)


def _placeable_enum(schema: dict[str, Any]) -> None:
    schema["enum"] = registry.placeable()


# Where an allocation may be placed: a cloud of the registry, or a fleet kind (`ssh`: the project's
# SSH fleets, which are not connections).
PlacementId = Annotated[str, Field(min_length=1, max_length=100, json_schema_extra=_placeable_enum),
                        AfterValidator(_placeable_cloud)]


# Backends whose offers page is not the offer table but a picker of their own, served by their own
# routes (`GET /backends/<cloud>/offers`, `POST .../pick`), which match before the table's. Each
# picker's module adds its cloud as it is imported (api/routers/modal_picker.py, which also has
# the DELETE .../pick): cloud -> what its picker is called.
OWN_PICKER: dict[str, str] = {}


def _table_backend(value: str) -> str:
    if value in OWN_PICKER:
        raise ValueError(f"{value} has {OWN_PICKER[value]}: GET /api/compute/backends/{value}/offers")
    return value


def _table_backend_enum(schema: dict[str, Any]) -> None:
    schema["enum"] = [c for c in registry.placeable() if c not in OWN_PICKER]


# A backend whose page is the offer table: a placement id without those that have a picker of their own.
TableBackendId = Annotated[str, Field(min_length=1, max_length=100, json_schema_extra=_table_backend_enum),
                           AfterValidator(_placeable_cloud), AfterValidator(_table_backend)]


# A project is an identifier (it becomes a search attribute and scopes idempotency keys), not free text.
PROJECT_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"
Project = Annotated[str, Field(pattern=PROJECT_PATTERN, description="a slug: a-z, 0-9 and -, up to 63")]


def aware(ts: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; every stored timestamp is UTC."""
    if ts is not None and ts.tzinfo is None:
        return ts.replace(tzinfo=UTC)
    return ts


def _utc(ts: datetime) -> datetime:
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


# Every timestamp the API returns (the schema's `date-time`, which carries its offset): a naive
# value (SQLite's, every stored one UTC) becomes UTC, so it is written `…+00:00`, never zoneless.
# Each response model's datetime field is one of these (tests/api/test_timestamps.py checks).
Timestamp = Annotated[datetime, AfterValidator(_utc)]


def openssh_key_lines(keys: list[str]) -> list[str]:
    """One OpenSSH public key line per entry, passed on re-serialised from the parsed key
    (providers/ssh_keys.py): never the user's text, never a private key. ValueError naming the entry."""
    cleaned = []
    for i, key in enumerate(keys):
        try:
            cleaned.append(ssh_keys.public_key_line(key))
        except ssh_keys.KeyRefused as e:
            raise ValueError(f"ssh_public_keys[{i}]: {e}") from None
    return cleaned


class Strict(IntegralFloats):
    """A request body: no field it does not declare, and each value of JSON's own type for its field.
    Pydantic's lax mode would take `false` or `"5"` for a number and `1` or `"yes"` for a boolean, a
    body the schema refuses (`make fuzz` found `PUT /limits {"max_gpus": false}` setting a limit of
    0); an integer written `5.0` is JSON Schema's 5 (messages/json_numbers.py). JSON carries enums and
    date-times as strings: such a field says `strict=False` to take them."""

    model_config = ConfigDict(extra="forbid", strict=True)

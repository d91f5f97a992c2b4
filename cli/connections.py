"""Connection commands: `connect` (verified before it is saved) and `connections`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.client import Api, new_idempotency_key
from cli.output import fail, table
from providers import registry


def credential_value(key: str, value: str) -> str:
    """A credential's value as given: `@FILE` reads a file, `env:NAME` an environment variable, so a
    secret need not be typed on the command line (where `ps` and shell history see it)."""
    if value.startswith("@"):
        try:
            return Path(value[1:]).expanduser().read_text().strip()
        except OSError as e:
            raise fail(f"cannot read --credential {key}=@{value[1:]}: {e.strerror}") from None
    if value.startswith("env:"):
        name = value[4:]
        if name not in os.environ:
            raise fail(f"--credential {key}=env:{name}: {name} is not set")
        return os.environ[name]
    return value


def connect(
    provider: Annotated[str, typer.Argument(help=f"cloud id: {', '.join(registry.known())}")],
    credential: Annotated[list[str] | None, typer.Option(
        "--credential", "-c", help="KEY=VALUE, KEY=@FILE or KEY=env:VAR (repeatable; prefer the last two "
                                   "for secrets); `gpuprov clouds` lists each cloud's keys",
    )] = None,
    endpoint: Annotated[str | None, typer.Option(help="API endpoint override")] = None,
    ca_bundle: Annotated[Path | None, typer.Option(
        "--ca-bundle", help="PEM file of certificates to trust for the endpoint")] = None,
    name: Annotated[str | None, typer.Option()] = None,
) -> None:
    """Connect a cloud account; the credentials are verified before they are saved."""
    creds: dict[str, str] = {}
    for item in credential or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise fail(f"--credential wants KEY=VALUE, got {item.split('=')[0]!r}...")
        creds[key] = credential_value(key, value)
    body: dict[str, Any] = {"provider": provider, "credentials": creds, "endpoint": endpoint, "name": name}
    if ca_bundle is not None:
        try:
            body["ca_bundle"] = ca_bundle.read_text()
        except OSError as e:
            raise fail(f"cannot read --ca-bundle {ca_bundle}: {e.strerror}") from None
    conn = Api().call("POST", "/connections", json={k: v for k, v in body.items() if v is not None},
                      idempotency_key=new_idempotency_key())
    typer.echo(f"connected {conn['provider']} as {conn['account']} "
               f"(connection {conn['id']}, {conn['name']!r})")


def connections() -> None:
    """List cloud connections (never their secrets)."""
    rows = [[c["id"], c["provider"], c["name"], c["account"] or "-", c["status"]]
            for c in Api().items("/connections")]
    table(rows, ["ID", "PROVIDER", "NAME", "ACCOUNT", "STATUS"]) if rows else typer.echo("no connections")

"""What the commands print: errors, tables, prices, SSH commands, allocation attempts."""

from __future__ import annotations

from typing import Any

import typer


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print `error: message` to stderr; the caller raises the returned Exit."""
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    return typer.Exit(code)


def reason(detail: Any) -> str:
    """The API's `detail`: a sentence (a 422's names each field). A list of validation errors is the
    shape of servers before ErrorOut, still read so a newer CLI explains an older server's refusal."""
    if isinstance(detail, list):
        parts = []
        for err in detail:
            loc = ".".join(str(p) for p in err.get("loc", []) if p != "body")
            parts.append(f"{loc}: {err.get('msg')}" if loc else str(err.get("msg")))
        return "; ".join(parts)
    return str(detail)


def table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    for row in [header, *rows]:
        typer.echo("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=False)).rstrip())


def money(v: float | None) -> str:
    return f"${v:.2f}/h" if v is not None else "-"


def ssh_command(inst: dict[str, Any]) -> str | None:
    ssh = inst.get("ssh")
    if not ssh:
        return None
    port = "" if ssh["port"] == 22 else f"-p {ssh['port']} "
    return f"ssh {port}{ssh['user']}@{ssh['host']}"


def print_attempt(a: dict[str, Any]) -> None:
    why = f" — {a['reason']}" if a.get("reason") else ""
    typer.echo(f"  attempt {a['seq']}: {a['provider']} {a['instance_type']} in {a['region']} "
               f"({money(a['price_per_hour'])}{', spot' if a['spot'] else ''}): {a['outcome']}{why}")


def gpu_label(gpu: dict[str, Any] | None) -> str:
    if not gpu:
        return "-"
    memory = f" {gpu['memory_gib']:g}GB" if gpu.get("memory_gib") else ""
    return f"{gpu['count']}x {gpu['name']}{memory}"

"""Operator commands: `gpuprov retired` — whether the retired workflow types are drained, the
check to run before upgrading to a version that removes their code (workflows/README.md)."""

from __future__ import annotations

import typer

from cli.client import Api
from cli.output import table


def retired() -> None:
    """List open runs of retired workflow types and live instances started under one (admin token);
    exits 1 unless both are empty (drained)."""
    report = Api().call("GET", "/retired-workflows")
    types = ", ".join(report["retired_types"]) or "none"
    if report["drained"]:
        typer.echo(f"drained: no run of a retired workflow type ({types}) is open, and no live instance "
                   "was started under one")
        return
    if report["open_runs"]:
        typer.echo(f"open runs of retired workflow types ({types}):")
        table([[r["workflow_type"], r["workflow_id"]] for r in report["open_runs"]], ["TYPE", "WORKFLOW ID"])
    if report["instances"]:
        typer.echo("live instances started under a retired workflow type (terminate them: gpuprov down ID):")
        table([[i["id"], i["project"], i["status"], i["workflow_id"]] for i in report["instances"]],
              ["ID", "PROJECT", "STATUS", "WORKFLOW ID"])
    raise typer.Exit(1)

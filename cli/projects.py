"""Project commands: `gpuprov project create|ls|token|tokens|revoke`. Making projects and tokens
needs the installation's admin token; a project token sees only its own project."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.client import Api
from cli.output import table

PREFIX = "/api/projects"
app = typer.Typer(no_args_is_help=True, help="Projects and their API tokens.")

ProjectArg = Annotated[str, typer.Argument(help="project id: a-z, 0-9 and -, up to 63")]


@app.command()
def create(project: ProjectArg) -> None:
    """Create a project (admin token)."""
    made = Api().call("POST", "", prefix=PREFIX, json={"id": project})
    typer.echo(f"project {made['id']} created; `gpuprov project token {made['id']}` makes its token")


@app.command("ls")
def list_projects() -> None:
    """The projects this token sees: every one for the admin token, its own for a project token."""
    rows = [[p["id"], p["created_at"] or "-"] for p in Api().items("", prefix=PREFIX)]
    table(rows, ["PROJECT", "CREATED"])


@app.command()
def token(project: ProjectArg,
          label: Annotated[str | None, typer.Option(help="what the token is for, e.g. ci")] = None) -> None:
    """Make a token of the project (admin token). It is printed this once: only its hash is kept."""
    made = Api().call("POST", f"/{project}/tokens", prefix=PREFIX, json={"label": label})
    typer.echo(f"token {made['id']} of project {project} (shown once; keep it in a secret store):")
    typer.echo(made["token"])


@app.command()
def tokens(project: ProjectArg) -> None:
    """The project's tokens (never their values)."""
    rows = [[t["id"], t["label"] or "-", t["created_at"] or "-", t["revoked_at"] or "-"]
            for t in Api().items(f"/{project}/tokens", prefix=PREFIX)]
    table(rows, ["ID", "LABEL", "CREATED", "REVOKED"]) if rows else typer.echo("no tokens")


@app.command()
def revoke(project: ProjectArg, token_id: Annotated[str, typer.Argument(help="from `gpuprov project tokens`")]
           ) -> None:
    """Revoke a token: refused from its next request on."""
    Api().call("DELETE", f"/{project}/tokens/{token_id}", prefix=PREFIX)
    typer.echo(f"token {token_id} of project {project} revoked")

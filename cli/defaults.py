"""`gpuprov defaults set|show|clear`: the project's default cloud (and region), which a request naming
no cloud (`gpuprov up` without --cloud, a job without cloud) plans on (PUT /api/compute/defaults)."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.client import API_PREFIX, Api

app = typer.Typer(no_args_is_help=True,
                  help="The project's default cloud and region, for requests that name no cloud.")


@app.command("set")
def set_defaults(
        cloud: Annotated[str, typer.Option(help="a cloud connected in this project, e.g. verda")],
        region: Annotated[str | None, typer.Option(
            help="its region (or country, e.g. FI); none: wherever the cloud plans by default")] = None,
) -> None:
    """Make CLOUD (and REGION) what `gpuprov up` without --cloud plans on in this project."""
    body = {"cloud": cloud, **({"region": region} if region is not None else {})}
    saved = Api().call("PUT", "/defaults", json=body)
    typer.echo(f"project {saved['project']}: requests naming no cloud plan on {_where(saved)}")


@app.command("show")
def show_defaults() -> None:
    """The project's default cloud and region, or that there is none (every connected cloud)."""
    api = Api()
    # A 404 here is an answer (none set), not an error; anything else goes through call()'s handling.
    if api._client.get(f"{API_PREFIX}/defaults").status_code == 404:  # noqa: SLF001
        typer.echo("no default cloud: requests naming no cloud plan over every connected cloud")
        return
    saved = api.call("GET", "/defaults")
    typer.echo(f"project {saved['project']}: default cloud {_where(saved)}")


@app.command("clear")
def clear_defaults() -> None:
    """Forget the defaults: requests naming no cloud plan over every connected cloud again."""
    Api().call("DELETE", "/defaults")
    typer.echo("default cloud cleared: requests naming no cloud plan over every connected cloud")


def _where(saved: dict[str, str | None]) -> str:
    region = saved.get("region")
    return f"{saved['cloud']}" + (f" in {region}" if region else "")

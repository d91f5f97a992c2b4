"""The `gpuprov` command: a thin HTTP client of the API (up, ls, down, offers, clouds, connect,
connections), the worker, and `gpuprov dev`, which runs the whole service on this machine.

Each module holds one group of commands; this one puts them on one typer app.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated

import typer

from cli import (
    acceptance,
    client,
    clouds,
    connections,
    defaults,
    dev,
    instances,
    jobs,
    kube,
    operations,
    projects,
    ssh,
)

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Provision GPU machines across clouds (Temporal workflows underneath).")



@app.callback()
def _options(project: Annotated[str | None, typer.Option(
        "--project", envvar=client.PROJECT_ENV,
        help="work in this project (default: the token's own; `default` for the admin token)")] = None,
             ) -> None:
    client.use_project(project)


app.command()(instances.up)
app.command("ls")(instances.list_instances)
app.command()(clouds.offers)
app.command()(instances.down)
app.command("ssh")(ssh.ssh)
app.command()(kube.kubeconfig)
app.command()(kube.tunnel)
app.command()(connections.connect)
app.command()(connections.connections)
app.command()(clouds.clouds)
app.command()(operations.retired)
app.add_typer(projects.app, name="project")
app.add_typer(jobs.app, name="job")
app.add_typer(defaults.app, name="defaults")
app.add_typer(acceptance.app, name="acceptance")


@app.command()
def worker() -> None:
    """Run the Temporal worker (migrates the database first)."""
    import logsafe
    import worker as worker_module
    from settings import get_settings, private_home
    from store.migrate import upgrade

    logsafe.configure(logging.INFO)  # exception messages withheld: they may hold input
    private_home(get_settings().home)
    upgrade()
    try:
        asyncio.run(worker_module.main())
    except KeyboardInterrupt:
        pass


@app.command()
def rekey() -> None:
    """Re-encrypt the database's secrets with the current secret key (after a rotation; see README)."""
    from store.db import default_engine
    from store.migrate import upgrade
    from store.rekey import reseal_all
    from store.secrets import default_box

    engine = default_engine()
    upgrade(engine)
    typer.echo(f"resealed {reseal_all(engine, default_box())} secret(s) with the current key")


app.command()(dev.dev)


def main() -> None:
    from settings import private_files

    private_files()  # whatever a command writes (dev's home, the worker's database) is the user's only
    app()

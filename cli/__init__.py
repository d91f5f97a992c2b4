"""The `gpuprov` command: a thin HTTP client of the API (up, ls, down, offers, clouds, connect,
connections), the worker, and `gpuprov dev`, which runs the whole service on this machine.

Each module holds one group of commands; this one puts them on one typer app.
"""

from __future__ import annotations

import asyncio
import logging

import typer

from cli import clouds, connections, dev, instances

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Provision GPU machines across clouds (Temporal workflows underneath).")

app.command()(instances.up)
app.command("ls")(instances.list_instances)
app.command()(clouds.offers)
app.command()(instances.down)
app.command()(connections.connect)
app.command()(connections.connections)
app.command()(clouds.clouds)


@app.command()
def worker() -> None:
    """Run the Temporal worker (migrates the database first)."""
    import logsafe
    import worker as worker_module
    from store.migrate import upgrade

    logsafe.configure(logging.INFO)  # exception messages withheld: they may hold input
    upgrade()
    try:
        asyncio.run(worker_module.main())
    except KeyboardInterrupt:
        pass


app.command()(dev.dev)


def main() -> None:
    app()

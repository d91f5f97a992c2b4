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
    import worker as worker_module
    from settings import get_settings, private_home
    from store.migrate import upgrade

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    private_home(get_settings().home)
    upgrade()
    try:
        asyncio.run(worker_module.main())
    except KeyboardInterrupt:
        pass


app.command()(dev.dev)


def main() -> None:
    from settings import private_files

    private_files()  # whatever a command writes (dev's home, the worker's database) is the user's only
    app()

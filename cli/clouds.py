"""Cloud commands: `clouds` (what is registered and what connecting takes), `offers`."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.client import Api
from cli.instances import cloud_help
from cli.output import gpu_label, money, table


def offers(
    cloud: Annotated[str, typer.Option("--cloud", help=cloud_help())],
    gpu: Annotated[str | None, typer.Option()] = None,
    region: Annotated[str | None, typer.Option()] = None,
    spot: Annotated[bool | None, typer.Option("--spot/--on-demand",
                                              help="only spot / only on-demand")] = None,
) -> None:
    """Live offers of a connected cloud, cheapest first."""
    params = {k: v for k, v in {"gpu": gpu, "region": region, "spot": spot}.items() if v is not None}
    found = Api().items(f"/backends/{cloud}/offers", params)
    if not found:
        typer.echo("no matching offers")
        return
    rows = [[o["instance_type"], gpu_label(o.get("gpu")), str(o["vcpus"]), f"{o['memory_gib']:g}GB",
             o.get("zone") or o["region"],  # a zone (us-central1-a) names its region too
             money(o["price_per_hour"]), "spot" if o["spot"] else "",
             "" if o["available"] else "no"] for o in found]
    table(rows, ["TYPE", "GPU", "VCPUS", "RAM", "REGION", "PRICE", "SPOT", "AVAIL"])


def clouds() -> None:
    """Clouds this installation knows: what each can do and the credentials connecting it takes."""
    rows = []
    for c in Api().items("/clouds"):
        caps = c.get("capabilities") or {}
        fields = ", ".join(f["name"] + ("" if f["required"] else "?") for f in c.get("credentials", []))
        features = [f for f in ("spot", "ports", "custom_image", "k8s_api") if caps.get(f)]
        rows.append([c["id"], c["display_name"], caps.get("k3s", "-"), ",".join(features) or "-",
                     (fields or "-") if c["available"] else f"unavailable: {c.get('reason')}"])
    table(rows, ["ID", "NAME", "K3S", "FEATURES", "CREDENTIALS"])

"""Cloud commands: `clouds` (what is registered and what connecting takes), `offers`."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli.client import PAGE_LIMIT, Api, StillAsked
from cli.instances import cloud_help, poll_interval
from cli.output import gpu_label, money, table

# How long `gpuprov offers` keeps asking for a cloud that has not answered yet (the API's own wait
# is GPUPROV_OFFERS_TIMEOUT_S, 8 s): Vast.ai's searches, paced one per 6 s, can queue past it.
DEFAULT_WAIT_S = 60.0


def offers(
    cloud: Annotated[str | None, typer.Option(
        "--cloud", help=cloud_help() + " (default: every connected cloud)")] = None,
    gpu: Annotated[str | None, typer.Option()] = None,
    gpu_count: Annotated[int | None, typer.Option("--gpu-count", min=1)] = None,
    region: Annotated[str | None, typer.Option()] = None,
    spot: Annotated[bool | None, typer.Option("--spot/--on-demand",
                                              help="only spot / only on-demand")] = None,
    wait: Annotated[float, typer.Option(
        "--wait", min=0, help="seconds to keep asking a cloud that has not answered yet "
        "(the API goes on asking it; 0: show what answered at once)")] = DEFAULT_WAIT_S,
) -> None:
    """Live offers, cheapest first: of every connected cloud at once, or of one (--cloud)."""
    params = {k: v for k, v in {"gpu": gpu, "gpu_count": gpu_count, "region": region,
                                "spot": spot}.items() if v is not None}
    still_asked = StillAsked(wait, poll_interval())
    if cloud is not None:
        found = Api().items(f"/backends/{cloud}/offers", params, still_asked=still_asked)
        answers: list[dict[str, Any]] = []
    else:
        found, answers = _all_offers(params, still_asked)
    if found:
        rows = [[o["provider"], o["instance_type"], gpu_label(o.get("gpu")), str(o["vcpus"]),
                 f"{o['memory_gib']:g}GB",
                 o.get("zone") or o["region"],  # a zone (us-central1-a) names its region too
                 money(o["price_per_hour"]), "spot" if o["spot"] else "",
                 "" if o["available"] else "no"] for o in found]
        table(rows, ["CLOUD", "TYPE", "GPU", "VCPUS", "RAM", "REGION", "PRICE", "SPOT", "AVAIL"])
    else:
        typer.echo("no matching offers")
    for a in answers:  # which clouds answered, which did not and why
        said = {"answered": f"{a['offers']} offers" + (" (cached)" if a["cached"] else ""),
                "failed": f"failed: {a['reason']}", "timeout": f"no answer: {a['reason']}",
                "skipped": f"skipped: {a['reason']}"}[a["status"]]
        note = f" — {a['reason']}" if a["status"] == "answered" and a.get("reason") else ""
        typer.echo(f"  {a['cloud']} ({a['connection_id']}): {said}{note}", err=True)


def _all_offers(params: dict[str, Any], still_asked: StillAsked) -> tuple[list[dict[str, Any]],
                                                                         list[dict[str, Any]]]:
    """Every page of the cross-cloud offers, and the clouds' answers; asked again while a cloud has
    not answered yet and `still_asked` lasts (the clouds that did are answered from the API's cache)."""
    api = Api()
    while True:
        found, answers = _offers_pages(api, params)
        waiting = [a["cloud"] for a in answers if a["status"] == "timeout"]
        if not waiting or not still_asked.again(f"no answer yet from {', '.join(sorted(set(waiting)))}"):
            return found, answers


def _offers_pages(api: Api, params: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every page of one cross-cloud answer, and the clouds' answers (the first page's: the answer
    is computed once and paged)."""
    query = {**params, "limit": PAGE_LIMIT}
    items: list[dict[str, Any]] = []
    answers: list[dict[str, Any]] | None = None
    while True:
        page = api.call("GET", "/offers", params=query)
        items += page["items"]
        answers = answers if answers is not None else page["clouds"]
        if not page.get("next_cursor"):
            return items, answers
        query["cursor"] = page["next_cursor"]


def clouds() -> None:
    """Clouds this installation knows: its support status (from the acceptance results), what each can
    do and the credentials connecting it takes."""
    rows = []
    for c in Api().items("/clouds"):
        caps = c.get("capabilities") or {}
        fields = ", ".join(f["name"] + ("" if f["required"] else "?") for f in c.get("credentials", []))
        features = [f for f in ("spot", "ports", "custom_image", "k8s_api") if caps.get(f)]
        if caps.get("max_lifetime_h"):  # --max-hours, up to this
            features.append(f"max_hours<={caps['max_lifetime_h']:g}")
        standing = (c.get("support") or {}).get("status", "-")  # from the acceptance results
        rows.append([c["id"], c["display_name"], standing, caps.get("k3s", "-"), ",".join(features) or "-",
                     (fields or "-") if c["available"] else f"unavailable: {c.get('reason')}"])
    table(rows, ["ID", "NAME", "SUPPORT", "K3S", "FEATURES", "CREDENTIALS"])

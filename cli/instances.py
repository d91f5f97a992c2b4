"""Instance commands: `up` (allocate and follow), `ls`, `down` (terminate and wait until gone)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.client import API_PREFIX, Api, new_idempotency_key
from cli.output import fail, money, print_attempt, ssh_command, table
from messages.enums import AllocationStatus
from providers import registry

READY, TERMINATED = AllocationStatus.READY, AllocationStatus.TERMINATED
TERMINAL = {READY, AllocationStatus.FAILED, TERMINATED}


def poll_interval() -> float:
    """Seconds between a command's polls of the API (GPUPROV_POLL_INTERVAL; the tests make it short)."""
    return float(os.environ.get("GPUPROV_POLL_INTERVAL", "1.0"))


def follow(api: Api, instance_id: str, until: set[AllocationStatus],
           on_attempt: bool = True, after_event: int = 0) -> dict[str, Any]:
    """Poll the instance, printing every status/phase transition (the recorded events, so a
    phase shorter than the poll interval is still shown) and new attempts, until `until`.
    `after_event`: the events up to that id are history already (not printed)."""
    last_event = after_event
    shown: dict[int, str] = {}  # attempt seq -> outcome already printed
    start = time.monotonic()
    while True:
        inst: dict[str, Any] = api.call("GET", f"/instances/{instance_id}")
        for ev in inst.get("events", []):
            if ev["id"] > last_event:
                typer.echo(f"[{time.monotonic() - start:6.1f}s] {ev['status']:<12} phase {ev['phase']}")
                last_event = ev["id"]
        if on_attempt:
            for a in inst["attempts"]:
                if shown.get(a["seq"]) != a["outcome"]:
                    print_attempt(a)
                    shown[a["seq"]] = a["outcome"]
        if inst["status"] in until:
            return inst
        time.sleep(poll_interval())


def read_ssh_key(path: Path | None) -> str:
    """The public key line of `path` (default ~/.ssh/id_ed25519.pub, id_rsa.pub), checked here: a
    private key given by mistake (`--ssh-key ~/.ssh/id_ed25519`) never leaves this machine."""
    from providers import ssh_keys  # asyncssh: only the commands that read a key pay its import

    ssh_dir = Path.home() / ".ssh"
    candidates = [path] if path else [ssh_dir / "id_ed25519.pub", ssh_dir / "id_rsa.pub"]
    for p in candidates:
        if p is not None and p.is_file():
            with p.open(errors="replace") as f:
                text = f.read(ssh_keys.MAX_ENTRY + 1)
            try:
                return ssh_keys.public_key_line(text)
            except ssh_keys.KeyRefused as e:
                raise fail(f"--ssh-key {p}: {e}") from None
    if path:
        raise fail(f"SSH public key {path} not found")
    raise fail("no SSH public key in ~/.ssh (id_ed25519.pub, id_rsa.pub): pass --ssh-key PATH, "
               "or create one with `ssh-keygen -t ed25519`")


def cloud_help() -> str:
    fleets = "".join(f", or {kind} (your SSH fleets)" for kind in registry.fleets())
    return f"cloud id: {', '.join(registry.known())}{fleets}"


def default_cloud(api: Api) -> str | None:
    """Where a request naming no cloud plans: the project's default cloud (and region), if set."""
    r = api._client.get(f"{API_PREFIX}/defaults")  # noqa: SLF001 — a 404 (none set) is an answer
    if r.status_code != 200:
        return None
    saved = r.json()
    region = f" in {saved['region']}" if saved.get("region") else ""
    return f"{saved['cloud']}{region} (the project's default cloud)"


def up(
    cloud: Annotated[list[str] | None, typer.Option(
        "--cloud", help=f"{cloud_help()} (repeatable; default: the project's default cloud, "
                        "`gpuprov defaults set`, else every connected cloud)")] = None,
    connection: Annotated[str | None, typer.Option(
        "--connection", help="this connection only (an id from `gpuprov connections`)")] = None,
    gpu: Annotated[str | None, typer.Option(help="GPU name, e.g. H100, A10")] = None,
    gpu_count: Annotated[int | None, typer.Option("--gpu-count", min=1)] = None,
    region: Annotated[str | None, typer.Option()] = None,
    spot: Annotated[bool, typer.Option("--spot", help="spot/preemptible only")] = False,
    port: Annotated[list[int] | None, typer.Option("--port", help="open this port (repeatable)")] = None,
    image: Annotated[str | None, typer.Option()] = None,
    no_k3s: Annotated[bool, typer.Option("--no-k3s", help="skip installing k3s")] = False,
    k8s_api_from: Annotated[list[str] | None, typer.Option(
        "--k8s-api-from", help="a network (CIDR) that may reach the Kubernetes API directly, on clouds "
                               "with direct k8s access (repeatable; default: this machine's address as "
                               "the API sees it; `gpuprov tunnel` works either way)")] = None,
    ssh_key: Annotated[Path | None, typer.Option(
        "--ssh-key", help="public key (default ~/.ssh/id_ed25519.pub, then id_rsa.pub)")] = None,
    name: Annotated[str | None, typer.Option()] = None,
    max_hours: Annotated[float | None, typer.Option(
        "--max-hours", min=0, help="the machine lives at most this long, in hours: the cloud stops it "
                                   "then (only clouds that enforce it, e.g. Modal up to 24)")] = None,
    lease_hours: Annotated[float | None, typer.Option(
        "--lease-hours", min=0, max=720, help="the machine ends itself this long after gpuprov last "
        "renewed its lease (the control plane gone), on clouds where it can (the `self-end` column of "
        "`gpuprov clouds`); 0: off; default: the project's, else 12")] = None,
    detach: Annotated[bool, typer.Option("--detach", help="return once accepted")] = False,
) -> None:
    """Allocate a machine on the cheapest offer of the clouds allowed (every connected cloud unless
    --cloud or --connection says otherwise) and follow it until it is ready (or failed)."""
    if connection and cloud:
        raise fail("give --cloud or --connection, not both")
    clouds = list(dict.fromkeys(cloud or []))
    api = Api()
    body: dict[str, Any] = {
        "gpu": gpu, "gpu_count": gpu_count, "region": region, "spot": spot or None, "ports": port or [],
        "image": image, "k3s": not no_k3s, "ssh_public_keys": [read_ssh_key(ssh_key)], "name": name,
        "connection_id": connection, "max_hours": max_hours, "k8s_api_from": k8s_api_from,
        "lease_hours": lease_hours}
    if len(clouds) == 1:
        body["cloud"] = clouds[0]
    elif clouds:
        body["clouds"] = clouds
    # One key per `up`: if the answer is lost and the request sent again, it is the same allocation.
    accepted = api.call("POST", "/instances", json={k: v for k, v in body.items() if v is not None},
                        idempotency_key=new_idempotency_key())
    iid = accepted["id"]
    where = (f"connection {connection}" if connection else ", ".join(clouds) if clouds
             else default_cloud(api) or "every connected cloud")
    typer.echo(f"allocation {iid} accepted on {where}")
    if detach:
        return
    try:
        inst = follow(api, iid, TERMINAL)
    except KeyboardInterrupt:
        typer.echo(f"\nstill provisioning in the background; `gpuprov down {iid}` stops it")
        raise typer.Exit(130) from None
    if inst["status"] != READY:
        raise fail(f"allocation {iid} {inst['status']}: {inst.get('error') or 'no reason recorded'}")
    gpus = ", ".join(g.get("name", "?") for g in inst["gpus"]) or "none"
    typer.echo(f"ready: {inst['instance_type']} in {inst['region']} at {money(inst['price_per_hour'])}; "
               f"GPUs: {gpus}")
    if inst.get("note"):
        typer.echo(f"note: {inst['note']}")
    cmd = ssh_command(inst)
    if cmd:
        typer.secho(cmd, bold=True)


def list_instances(
    all_: Annotated[bool, typer.Option("--all", "-a", help="include terminated")] = False,
) -> None:
    """List instances."""
    rows = []
    for i in Api().items("/instances"):
        if i["status"] == TERMINATED and not all_:
            continue
        rows.append([i["id"], i["name"] or "-", i["cloud"], i["status"], i["phase"],
                     i["instance_type"] or "-", i["region"] or "-", money(i["price_per_hour"]),
                     ssh_command(i) or "-"])
    if not rows:
        typer.echo("no instances")
        return
    table(rows, ["ID", "NAME", "CLOUD", "STATUS", "PHASE", "TYPE", "REGION", "PRICE", "SSH"])


def down(
    instance_id: str,
    no_wait: Annotated[bool, typer.Option("--no-wait")] = False,
) -> None:
    """Terminate an instance and wait until the cloud shows it gone: prints what it does (the
    teardown's own steps), never the provisioning history before it."""
    api = Api()
    before: dict[str, Any] = api.call("GET", f"/instances/{instance_id}")
    seen = max((ev["id"] for ev in before.get("events", [])), default=0)
    if before["status"] == TERMINATED:
        typer.echo(f"{instance_id} is already gone (terminated)")
        return
    where = " · ".join(str(v) for v in (before.get("cloud"), before.get("region")) if v)
    typer.echo(f"terminating {instance_id}{f' ({where})' if where else ''} …")
    api.call("POST", f"/instances/{instance_id}/terminate")
    if no_wait:
        typer.echo(f"{instance_id}: terminate requested (not waiting; `gpuprov ls -a` shows when it is gone)")
        return
    inst = follow(api, instance_id, {TERMINATED}, on_attempt=False, after_event=seen)
    typer.echo(f"{inst['id']} terminated: gone, verified by the cloud")

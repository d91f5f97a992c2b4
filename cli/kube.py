"""`gpuprov kubeconfig <id>` and `gpuprov tunnel <id>`: the instance's k3s for a Kubernetes client.

`kubeconfig` prints (or writes, mode 0600) the kubeconfig the API reads from the machine
(api/routers/kubeconfig.py): on a cloud with direct access it points at the machine's address.
`tunnel` is for every cloud with k3s, and the only way in where access is not direct: it forwards
a local port to the machine's 127.0.0.1:6443 with OpenSSH over the same pinned path as `gpuprov ssh`
(cli/ssh.py: the host key gpuprov pinned, through the bastion of a fleet host), writes a kubeconfig
pointing at that port, and stays up until interrupted — when ssh exits (the link dropped, the
machine rebooted) it says so and connects again on the same port, so the kubeconfig stays valid.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.client import Api
from cli.output import fail
from cli.ssh import NoHostKey, plan
from providers.kubeconfig import server_url, with_server

RETRY_FIRST_S, RETRY_MAX_S = 1.0, 30.0
UP_WITHIN_S = 30.0  # ssh has this long to open the forward before the attempt counts as failed


def _fetch(api: Api, instance_id: str) -> dict[str, Any]:
    got: dict[str, Any] = api.call("GET", f"/instances/{instance_id}/kubeconfig")
    return got


def _write_private(path: Path, text: str) -> None:
    """`text` in `path`, readable by its owner only from the first byte (it holds a cluster-admin key)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)  # an existing file keeps its mode under O_CREAT


def kubeconfig(
    instance_id: str,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="write it to this file (mode 0600) instead of printing it")] = None,
) -> None:
    """A kubeconfig for the instance's k3s (cluster-admin; every fetch is recorded). Direct-access
    clouds: it points at the machine. Others: use `gpuprov tunnel`."""
    got = _fetch(Api(), instance_id)
    if output is None:
        typer.echo(got["kubeconfig"], nl=False)
    else:
        _write_private(output, got["kubeconfig"])
        typer.echo(f"kubeconfig for {instance_id} ({got['access']}, {got['server']}) written to {output}",
                   err=True)
    if got.get("note"):
        typer.echo(f"note: {got['note']}", err=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait_up(proc: subprocess.Popen[bytes], port: int) -> bool:
    """Whether ssh opened the forward (ExitOnForwardFailure: it exits when it cannot)."""
    deadline = time.monotonic() + UP_WITHIN_S
    while time.monotonic() < deadline and proc.poll() is None:
        if _listening(port):
            return True
        time.sleep(0.2)
    return False


def tunnel(
    instance_id: str,
    port: Annotated[int, typer.Option("--port", min=0, max=65535,
                                      help="local port to listen on (default: a free one)")] = 0,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="where to write the kubeconfig (default: ~/.kube/gpuprov-<id>.yaml)")] = None,
    identity: Annotated[Path | None, typer.Option(
        "-i", "--identity", help="private key file to log in with (default: ssh's own choice)")] = None,
    option: Annotated[list[str] | None, typer.Option(
        "--ssh-option", help="an extra ssh option, e.g. ServerAliveInterval=10 (repeatable)")] = None,
) -> None:
    """Forward a local port to the instance's Kubernetes API over SSH (its host key pinned), write a
    kubeconfig pointing at it, and keep the tunnel up — reconnecting when it drops — until Ctrl-C."""
    # Ctrl-C (and a polite kill) end it, even where this process was started with SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    api = Api()
    inst = api.call("GET", f"/instances/{instance_id}")
    got = _fetch(api, instance_id)  # refuses, with the cloud's reason, where there is no k8s access
    local = port or _free_port()
    path = output or Path.home() / ".kube" / f"gpuprov-{instance_id}.yaml"
    _write_private(path, with_server(got["kubeconfig"], server_url("127.0.0.1", local)))
    typer.echo(f"kubeconfig written to {path}: KUBECONFIG={path} kubectl get nodes")
    delay = RETRY_FIRST_S
    with tempfile.TemporaryDirectory(prefix="gpuprov-tunnel-") as d:
        known_hosts = os.path.join(d, "known_hosts")
        forward = ["-N", "-L", f"127.0.0.1:{local}:127.0.0.1:6443"]
        options = ["ExitOnForwardFailure=yes", "ServerAliveInterval=5", "ServerAliveCountMax=3",
                   "BatchMode=yes", *(option or [])]
        try:
            p = plan(inst, known_hosts, identity=str(identity) if identity else None, options=options,
                     flags=forward)
        except NoHostKey as e:
            raise fail(f"{e}; not tunnelling unpinned") from None
        Path(known_hosts).write_text(p.known_hosts)
        proc: subprocess.Popen[bytes] | None = None
        try:
            while True:
                proc = subprocess.Popen(p.argv, stdin=subprocess.DEVNULL)
                if _wait_up(proc, local):
                    typer.echo(f"tunnel up: 127.0.0.1:{local} -> {instance_id}:6443 (Ctrl-C to stop)")
                    delay = RETRY_FIRST_S
                code = proc.wait()
                typer.echo(f"tunnel down (ssh exited {code}); reconnecting in {delay:.0f} s", err=True)
                time.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
        except KeyboardInterrupt:
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(10)
            typer.echo("tunnel closed")

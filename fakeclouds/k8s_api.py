"""A SIMULATED Kubernetes API server for a simulated machine whose (simulated) k3s runs.

Enough of the API for a real client to list the node — `/version`, `/api`, `/apis`, `/api/v1`,
`/api/v1/nodes[/{name}]` — over TLS with the certificates the simulated k3s made
(fakeclouds/k3s_pki.py): the serving certificate carries exactly the SANs k3s was started with
(127.0.0.1 and localhost always, plus `--tls-san`), and a request without a client certificate
signed by the cluster's client CA gets 401, as k3s answers anonymous requests. The node and its
allocatable `nvidia.com/gpu` come from the machine's k3s state (fakeclouds/k3s_sim.py), read at each
request.

Two ways in, as on a real machine:
- from outside, on the machine's own address, port 6443: only for clouds whose firewall the
  simulation models (`Facade.ingress`), and only from a peer those rules admit at that moment —
  anyone else's connection is closed before the TLS handshake (a real firewall drops it; closing
  fails the client at once rather than after its timeout);
- from inside the machine (127.0.0.1:6443), which is where an SSH tunnel's `direct-tcpip` channel
  lands (fakeclouds/ssh.py): no firewall between.
While k3s is not running there (not installed, or uninstalled) a connection is closed unanswered.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fakeclouds import k3s, k3s_pki, k3s_sim

log = logging.getLogger(__name__)

PORT = 6443

Admits = Callable[[str], bool]  # peer address -> whether the cloud's firewall lets it reach 6443


def admits(rules: list[tuple[int, int, str]], port: int, peer: str) -> bool:
    """Whether an inbound TCP connection to `port` from `peer` passes the rules (first, last, CIDR)."""
    try:
        addr = ipaddress.ip_address(peer)
    except ValueError:
        return False
    for first, last, cidr in rules:
        with contextlib.suppress(ValueError):
            if first <= port <= last and addr in ipaddress.ip_network(cidr, strict=False):
                return True
    return False


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


class MachineApi:
    """One machine's API server: its listeners and the TLS context for its current SANs."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._servers: list[asyncio.Server] = []
        self._inside: tuple[str, int] | None = None
        self._ctx: tuple[tuple[str, ...], ssl.SSLContext] | None = None

    # ------------------------------------------------------------------ listeners

    async def listen_behind(self, ingress: Callable[[Any, Any], list[tuple[int, int, str]]] | None,
                            engine: Any, m: Any) -> None:
        """Serve on the machine's own address, port 6443, to the peers its cloud's firewall admits at
        each connection (`Facade.ingress`). Nothing where the firewall is not modelled; a bind that
        fails is logged, not fatal (SSH still works)."""
        if ingress is None or m.address is None:
            return
        try:
            server = await asyncio.start_server(
                lambda r, w: self._accept(r, w, lambda peer: admits(ingress(engine, m), PORT, peer)),
                m.address, PORT)
        except OSError as exc:
            log.warning("machine %s: no Kubernetes API on %s: %s", m.id, m.address, exc)
            return
        self._servers.append(server)

    async def inside(self) -> tuple[str, int] | None:
        """Where the machine's own 127.0.0.1:6443 is served (a private listener, made on first use);
        None while k3s is not running here."""
        if k3s_sim.read_config(self.home) is None:
            return None
        if self._inside is None:
            server = await asyncio.start_server(lambda r, w: self._accept(r, w, None), "127.0.0.1", 0)
            self._servers.append(server)
            self._inside = ("127.0.0.1", server.sockets[0].getsockname()[1])
        return self._inside

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)
        self._servers.clear()
        self._inside = None

    # ------------------------------------------------------------------ connections

    def _context(self, config: dict[str, Any]) -> ssl.SSLContext:
        sans = tuple(config.get("tls_sans") or ())
        if self._ctx is not None and self._ctx[0] == sans:
            return self._ctx[1]
        pki = k3s_pki.ensure(k3s_sim.state_dir(self.home) / "pki")
        cert, key = k3s_pki.serving_cert(pki, list(sans))
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.verify_mode = ssl.CERT_OPTIONAL  # no certificate: answered 401, as k3s does
        ctx.load_verify_locations(cadata=pki.read("client-ca.crt").decode())
        with tempfile.TemporaryDirectory() as d:  # ssl loads a chain only from files
            (Path(d) / "c.pem").write_bytes(cert)
            (Path(d) / "k.pem").write_bytes(key)
            ctx.load_cert_chain(Path(d) / "c.pem", Path(d) / "k.pem")
        self._ctx = (sans, ctx)
        return ctx

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      gate: Admits | None) -> None:
        try:
            peer = writer.get_extra_info("peername")[0]
            config = k3s_sim.read_config(self.home)
            if config is None or (gate is not None and not gate(peer)):
                return  # nothing listening for them / the firewall's drop
            await writer.start_tls(self._context(config))
            cert = writer.get_extra_info("ssl_object").getpeercert()
            await self._serve(reader, writer, authenticated=bool(cert))
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError, ValueError):
            pass  # the client went away or spoke something else
        except Exception:  # a broken request must not take the listener down
            log.exception("simulated k8s API: request failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                     authenticated: bool) -> None:
        while True:
            line = await reader.readline()
            if not line:
                return
            method, target, _ = line.decode("latin-1").split(" ", 2)
            headers: dict[str, str] = {}
            while (h := await reader.readline()) not in (b"\r\n", b"\n", b""):
                name, _, value = h.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            if int(headers.get("content-length") or 0):
                await reader.readexactly(int(headers["content-length"]))
            code, body = self.answer(method, target.split("?", 1)[0], authenticated=authenticated)
            data = json.dumps(body).encode()
            close = headers.get("connection", "").lower() == "close"
            writer.write(f"HTTP/1.1 {code} {'OK' if code == 200 else 'Error'}\r\n"
                         f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                         f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n".encode() + data)
            await writer.drain()
            if close:
                return

    def answer(self, method: str, path: str, *, authenticated: bool) -> tuple[int, dict[str, Any]]:
        if not authenticated:
            return 401, _status(401, "Unauthorized", "Unauthorized")
        if method != "GET":
            return 405, _status(405, "MethodNotAllowed", "the simulated API server only reads")
        node = k3s_sim.node(self.home)
        name = node["metadata"]["name"]
        if path == "/version":
            minor = k3s.VERSION.split(".")[1]
            return 200, {"major": "1", "minor": minor, "gitVersion": k3s.VERSION,
                         "platform": "linux/amd64", "goVersion": "go1.23.4"}
        if path == "/api":
            return 200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if path == "/apis":
            return 200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": []}
        if path == "/api/v1":
            return 200, {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                {"name": "nodes", "singularName": "node", "namespaced": False, "kind": "Node",
                 "verbs": ["get", "list"], "shortNames": ["no"]}]}
        if path == "/api/v1/nodes":
            return 200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
                         "items": [node]}
        if path == f"/api/v1/nodes/{name}":
            return 200, node
        if path.startswith("/api/v1/nodes/"):
            return 404, _status(404, "NotFound", f'nodes "{path.rsplit("/", 1)[1]}" not found')
        return 404, _status(404, "NotFound", "the server could not find the requested resource "
                                             "(the simulated API server serves nodes only)")

"""A fault-injecting proxy in front of a real Docker Engine API socket, for the conformance checks
that apply to a local engine (find-or-create, terminate-gone, lost answers, 5xx).

It serves a unix socket of its own and passes each HTTP request to the engine's socket on a fresh
connection (`Connection: close`, so each answer ends at EOF and is relayed whole). Faults are the
simulation's own rules (fakeclouds/faults.py's FaultBook, facade `docker`), drawn per request by its
op: `create` (POST /containers/create), `get` (GET /containers/{id}/json), `list` (GET
/containers/json), `terminate` (DELETE /containers/{id}), `offers` (GET /info), `verify` (GET
/version, /_ping); anything else (the start) is `start`, which only a `*` rule matches.
`server_error` answers its status without reaching the engine; `lose_response` lets the request take
effect on the engine, then closes the client's connection without a byte of the answer; `latency`
with `when="after"` lets it take effect, then holds the answer for its `seconds` (the crash test's
"create accepted, worker killed before the answer": tests/crash/test_docker_crash.py) — or until the
client's connection closes (a killed client), when there is no one left to answer.

It also names each request as the simulations name theirs (fakeclouds/calls.py), for the pinned
remote calls (tests/conformance/remote_calls/docker.json): "METHOD /path-template", the API version
prefix stripped, the query dropped, a container's id or name (and any other per-run value in the
path) replaced by a placeholder — "GET /containers/{id}/json". `call_names` are those since the last
`clear_calls`, every request the adapter made, including those a fault answered.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from pathlib import Path

from fakeclouds.errors import LostResponse, RateLimit, ServerFault
from fakeclouds.faults import CallPlan, FaultBook

FACADE = "docker"
_VERSION = re.compile(r"^/v[\d.]+(?=/)")
# Per resource of the Engine API, the words after it that name a collection-wide endpoint rather
# than one object (POST /containers/create, GET /images/json); any other segment there is an object's
# id or name: a placeholder. An image's name may span segments (localhost/gpuprov-sshd:bookworm).
_COLLECTION = {
    "containers": {"create", "json", "prune"},
    "images": {"create", "json", "load", "search", "prune", "get"},
    "networks": {"create", "prune"},
    "volumes": {"create", "prune"},
    "exec": set(),
    "plugins": {"json", "pull", "privileges", "create"},
    "secrets": {"create"},
    "configs": {"create"},
    "services": {"create"},
    "nodes": set(),
    "tasks": set(),
}
_IMAGE_VERBS = {"json", "history", "push", "tag", "get"}  # what may follow an image's name


def call_name(method: str, target: str) -> str:
    """A request's name as the pinned remote calls hold it: "GET /containers/{id}/json"."""
    path = _VERSION.sub("", target.split("?", 1)[0]).rstrip("/") or "/"
    parts = path.lstrip("/").split("/")
    resource, rest = parts[0], parts[1:]
    if resource in _COLLECTION and rest and rest[0] not in _COLLECTION[resource]:
        if resource == "images":  # the name up to a verb that may follow it: DELETE has none
            verb = rest[-1] if len(rest) > 1 and rest[-1] in _IMAGE_VERBS else None
            rest = ["{name}", *([verb] if verb else [])]
        else:
            rest = ["{id}", *rest[1:]]
    return f"{method} /{'/'.join([resource, *rest])}"


_OPS = (
    ("POST", re.compile(r"^(/v[\d.]+)?/containers/create"), "create"),
    ("GET", re.compile(r"^(/v[\d.]+)?/containers/json"), "list"),
    ("GET", re.compile(r"^(/v[\d.]+)?/containers/[^/]+/json"), "get"),
    ("DELETE", re.compile(r"^(/v[\d.]+)?/containers/[^/?]+"), "terminate"),
    ("GET", re.compile(r"^(/v[\d.]+)?/info"), "offers"),
    ("GET", re.compile(r"^(/v[\d.]+)?/(version|_ping)"), "verify"),
)


def op_of(method: str, path: str) -> str:
    for m, pattern, op in _OPS:
        if m == method and pattern.match(path):
            return op
    return "start" if path.rstrip("/").endswith("/start") else "other"


class FaultProxy:
    def __init__(self, upstream: str, listen: Path) -> None:
        self.upstream, self.listen = upstream, listen
        self.book = FaultBook()
        self.seen: list[tuple[str, str]] = []  # (op, path) of every request, in order
        self._calls: set[str] = set()  # call_name of every request since clear_calls (the loop's)
        self.holding = 0  # answers being held now (latency after): 0 once a killed client's is dropped
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.AbstractServer | None = None

    @property
    def base_url(self) -> str:
        return f"unix://{self.listen}"

    def start(self) -> FaultProxy:
        self.listen.unlink(missing_ok=True)
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        fut.result(10)
        return self

    async def _start(self) -> None:
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.listen))

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self.listen.unlink(missing_ok=True)

    def call(self, fn):  # type: ignore[no-untyped-def]
        """Run `fn()` on the proxy's loop (the FaultBook is the loop's)."""
        async def run():  # type: ignore[no-untyped-def]
            return fn()
        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def call_names(self) -> list[str]:
        """The distinct calls (call_name) the proxy was asked since the last `clear_calls`, sorted."""
        return self.call(lambda: sorted(self._calls))  # type: ignore[no-any-return]

    def clear_calls(self) -> None:
        self.call(self._calls.clear)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = [ln for ln in lines[1:] if ln]
                length = 0
                for h in headers:
                    name, _, value = h.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value.strip())
                body = await reader.readexactly(length) if length else b""
                path = target.split("?", 1)[0]
                op = op_of(method, path)
                self.seen.append((op, target))
                self._calls.add(call_name(method, target))
                plan = self.book.take(FACADE, op)
                try:
                    await plan.before()
                except (ServerFault, RateLimit) as exc:
                    status = exc.status if isinstance(exc, ServerFault) else 429
                    payload = json.dumps({"message": f"{exc} (injected)"}).encode()
                    writer.write(f"HTTP/1.1 {status} Injected\r\nContent-Type: application/json\r\n"
                                 f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
                    await writer.drain()
                    continue
                except Exception:  # noqa: BLE001 — capacity/quota do not apply to a local engine
                    return
                answer = await self._forward(method, target, headers, body)
                try:
                    if not await self._held(plan, reader):
                        return  # the client is gone while its answer was held: no one to answer
                except LostResponse:
                    return  # it took effect; the answer is lost: close without a byte of it
                writer.write(answer)
                await writer.drain()
                if b"\r\nconnection: close" in answer.split(b"\r\n\r\n", 1)[0].lower():
                    return
        finally:
            writer.close()

    async def _held(self, plan: CallPlan, reader: asyncio.StreamReader) -> bool:
        """Run the plan's after-effects (a held answer); False when the client closed its connection
        first. A client of the engine sends nothing more until its answer (no pipelining: the SDK's
        requests wait for theirs), so the only thing to read meanwhile is the end of the stream."""
        after = asyncio.ensure_future(plan.after())
        closed = asyncio.ensure_future(reader.read(1))
        self.holding += 1
        try:
            await asyncio.wait({after, closed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.holding -= 1
            for task in (after, closed):
                if not task.done():
                    task.cancel()
        if after.done():
            after.result()  # LostResponse: the caller closes without the answer
            return True
        return False

    async def _forward(self, method: str, target: str, headers: list[str], body: bytes) -> bytes:
        path = self.upstream.removeprefix("unix://")
        r, w = await asyncio.open_unix_connection(path)
        kept = [h for h in headers if h.partition(":")[0].strip().lower() != "connection"]
        head = "\r\n".join([f"{method} {target} HTTP/1.1", *kept, "Connection: close"]) + "\r\n\r\n"
        w.write(head.encode() + body)
        await w.drain()
        data = await r.read()
        w.close()
        return data

"""One process serving every simulated cloud, plus helpers to run it from tests.

    python -m fakeclouds.server --port 8765 --state-dir .gpuprov/fakeclouds \
        --tokens-file .gpuprov/cloud-tokens.json --boot-delay 1 [--tls-port 8766]

serves every facade the cloud registry lists (providers/registry.py), each under its prefix, and
prints its URL (one line on stdout) once it accepts connections. When a facade needs TLS
(`Facade.tls`: an SDK that talks only https) or --tls-port is given, the same app is also served
over TLS on a second port (0 or none given: a free one), with a certificate signed by a CA kept in
the state dir (fakeclouds/tls.py); its https URL is printed as a second line and, with the CA,
served at /_fake/tls. A facade's token defaults to
`<name>-dev-token`; real ones come from --tokens-file (a JSON object, facade to token: what
`gpuprov dev` keeps), since a --token NAME=TOKEN argument is visible to every local user.
A facade that declares gRPC services (`Facade.grpc`, fakeclouds/grpc_host.py) is served by one
gRPC listener on ports of its own, plain text (--grpc-port) and TLS with the same CA's certificate
(--grpc-tls-port; 0 or none given: free ones), on the same event loop and engine as the HTTP app;
`GET /_fake/grpc` answers its targets. SIGTERM/SIGINT stop it
cleanly; with --state-dir machines come back (same SSH addresses, ports and host keys) on restart.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Collection, Coroutine, Iterable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response

from fakeclouds import admin_api, clouds, shim_dirs, tls
from fakeclouds.admin import FakeCloudAdmin
from fakeclouds.calls import RecordCalls
from fakeclouds.engine import ADMIN_PREFIX, Engine
from fakeclouds.facade import Facade
from fakeclouds.grpc_host import GrpcListener, grpc_facades
from fakeclouds.tls import TlsFiles

T = TypeVar("T")


def default_tokens(facades: Iterable[str]) -> dict[str, str]:
    return {name: f"{name}-dev-token" for name in facades}


def with_defaults(facades: Iterable[str], tokens: dict[str, str] | None) -> dict[str, str]:
    """One token per facade: the given ones, `<name>-dev-token` for the rest. Refuses unknown names."""
    facades = list(facades)
    unknown = set(tokens or {}) - set(facades)
    if unknown:
        raise ValueError(f"tokens for unknown facade(s) {sorted(unknown)}; facades: {', '.join(facades)}")
    return {**default_tokens(facades), **(tokens or {})}


def build_app(engine: Engine, tokens: dict[str, str] | None = None,
              grpc: GrpcListener | None = None) -> FastAPI:
    """The ASGI app: every facade of the engine under its prefix, and /_fake. Its lifespan
    starts/stops the engine, and `grpc` (the gRPC facades' listener) on the same loop: started
    after the engine, stopped before it."""
    tokens = with_defaults(engine.facades, tokens)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.loop = asyncio.get_running_loop()
        await engine.start()
        try:
            if grpc is not None:
                await grpc.start()
            yield
        finally:
            if grpc is not None:
                await grpc.stop()
            await engine.stop()

    app = FastAPI(title="gpuprov simulated clouds", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.engine = engine
    app.add_middleware(RecordCalls, log=engine.calls, facades=list(engine.facades.values()))
    for facade in engine.facades.values():
        app.include_router(facade.build_router(engine, tokens[facade.name]), prefix=facade.prefix)
    app.include_router(admin_api.build_router(engine), prefix=ADMIN_PREFIX)

    @app.get(f"{ADMIN_PREFIX}/health")
    async def health() -> dict[str, bool]:
        return {"ok": True}

    @app.get(f"{ADMIN_PREFIX}/grpc")
    async def grpc_listener() -> Response:
        """Where the gRPC facades are served ("host:port") and which services; 404 without any."""
        if grpc is None:
            missing = {"code": "NotFound", "message": "this server has no gRPC listener"}
            return JSONResponse({"error": missing}, status_code=404)
        return JSONResponse({"target": grpc.target, "tls_target": grpc.tls_target, "services": grpc.services})

    return app


def needs_tls(facades: Iterable[Facade]) -> bool:
    """Whether the HTTP app must also be served over TLS: a facade served over HTTP needs it (a gRPC
    one that talks TLS is served on the gRPC listener's TLS port instead)."""
    return any(f.tls and f.grpc is None for f in facades)


def uvicorn_servers(app: FastAPI, host: str, port: int, tls_port: int | None, tls_files: tls.TlsFiles | None,
                    log_level: str = "warning") -> list[uvicorn.Server]:
    """The plain listener (which runs the app's lifespan), and the TLS one when `tls_port` is given."""
    common: dict[str, Any] = {"log_level": log_level, "access_log": False, "timeout_graceful_shutdown": 2}
    servers = [uvicorn.Server(uvicorn.Config(app, host=host, port=port, lifespan="on", **common))]
    if tls_port is not None and tls_files is not None:
        # lifespan off: the engine is started once, by the plain listener
        servers.append(uvicorn.Server(uvicorn.Config(
            app, host=host, port=tls_port, lifespan="off", ssl_certfile=str(tls_files.cert_file),
            ssl_keyfile=str(tls_files.key_file), **common)))
    return servers


def bound_port(server: uvicorn.Server) -> int:
    return int(server.servers[0].sockets[0].getsockname()[1])


async def serve_all(app: FastAPI, servers: list[uvicorn.Server], host: str,
                    tls_files: tls.TlsFiles | None) -> None:
    """Run the plain listener, then (once it started the engine) the TLS one; publish the TLS URL
    and CA on app.state for /_fake/tls. Returns when every listener has stopped."""
    first = asyncio.create_task(servers[0].serve())
    while not servers[0].started and not first.done():  # noqa: ASYNC110 — uvicorn only exposes a flag
        await asyncio.sleep(0.01)
    tasks = [first]
    if len(servers) > 1 and servers[0].started and tls_files is not None:
        tasks.append(asyncio.create_task(servers[1].serve()))
        while not servers[1].started and not tasks[1].done():  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        if servers[1].started:
            app.state.tls = {"url": f"https://{host}:{bound_port(servers[1])}", "ca_pem": tls_files.ca_pem}
        else:  # the TLS port could not be bound: stop the plain listener too
            servers[0].should_exit = True
    await asyncio.gather(*tasks, return_exceptions=True)


def parse_tokens(text: str | list[str] | None, facades: Collection[str]) -> dict[str, str]:
    """`--token name=TOKEN,...` (the option may repeat) for any of `facades` (the registered ones)."""
    texts = [text] if isinstance(text, str) else (text or [])
    tokens: dict[str, str] = {}
    for part in (p for t in texts for p in t.split(",") if p):
        facade, sep, token = part.partition("=")
        if not sep or facade.strip() not in facades or not token.strip():
            # Name the facade, never the value: without "=" the whole part may be a token.
            got = f"a token for {facade.strip()!r}" if sep else "an entry without '='"
            raise ValueError(f"--token wants facade=token pairs (facades: {', '.join(facades)}), got {got}")
        tokens[facade.strip()] = token.strip()
    return tokens


def read_tokens_file(path: str | Path, facades: Collection[str]) -> dict[str, str]:
    """The tokens of `facades` in a JSON object of facade to token. Entries for other facades are
    skipped: `gpuprov dev` keeps the token of a cloud no longer simulated for when it comes back."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"--tokens-file {path}: cannot read a JSON object ({type(e).__name__})") from None
    if not isinstance(data, dict) or not all(isinstance(v, str) and v for v in data.values()):
        raise ValueError(f"--tokens-file {path}: wants a JSON object of facade name to non-empty token")
    return {name: token for name, token in data.items() if name in facades}


# --------------------------------------------------------------------------- in-thread server (tests)


class FakeCloudServer:
    """Runs the app with uvicorn in a background thread (its own event loop).

        with FakeCloudServer(boot_delay=0.2) as cloud:
            cloud.url, cloud.tokens, cloud.admin.add_fault(...)

    `engine` lives on the server's loop: inspect it read-only, or use `call(coro)`. `tls` (default:
    when a facade needs it) adds the TLS listener: `tls_url`, and `ca_pem` for clients to trust.
    Facades that declare gRPC services are served on `grpc_target` (same loop, same engine).
    """

    def __init__(self, port: int = 0, *, host: str = "127.0.0.1", boot_delay: float = 0.2,
                 terminate_delay: float = 0.05, state_dir: str | Path | None = None,
                 tokens: dict[str, str] | None = None, facades: Iterable[Facade] | None = None,
                 tls: bool | None = None, tls_port: int = 0, time_scale: float = 0.001,
                 grpc_port: int = 0, grpc_tls_port: int = 0) -> None:
        """`facades`: default every simulated cloud's. `tokens`: default `<name>-dev-token` each.
        `time_scale`: documented rate limits run this much faster (in-process servers serve tests:
        a 12 s window lasts 12 ms unless a test asks for more). `grpc_port`: where facades that
        declare gRPC services are served (0: a free port; `grpc_target` once started), and over TLS
        at `grpc_tls_port` (`grpc_tls_target`, trusting `ca_pem`)."""
        self.host, self.port = host, port
        self.engine = Engine(facades=clouds.all_facades() if facades is None else facades,
                             boot_delay=boot_delay, terminate_delay=terminate_delay,
                             state_dir=state_dir, time_scale=time_scale)
        self.tokens = with_defaults(self.engine.facades, tokens)
        self._grpc = GrpcListener(self.engine, self.tokens, host, grpc_port, grpc_tls_port) \
            if grpc_facades(self.engine.facades.values()) else None
        self.app = build_app(self.engine, self.tokens, grpc=self._grpc)
        self._tls = needs_tls(self.engine.facades.values()) if tls is None else tls
        self.tls_port: int | None = tls_port if self._tls else None
        self._servers: list[uvicorn.Server] = []
        self._tls_files: TlsFiles | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def tls_url(self) -> str | None:
        return f"https://{self.host}:{self.tls_port}" if self.tls_port else None

    @property
    def ca_pem(self) -> str | None:
        """The simulation's CA: the HTTPS listener's and the gRPC TLS port's (one CA, one state dir)."""
        if self._tls_files:
            return self._tls_files.ca_pem
        return self._grpc.ca_pem if self._grpc else None

    @property
    def grpc_port(self) -> int | None:
        """The gRPC listener's port (bound once started); None when no facade declares gRPC services."""
        return self._grpc.port if self._grpc else None

    @property
    def grpc_target(self) -> str | None:
        """What a gRPC client dials, "127.0.0.1:PORT" (`grpc.aio.insecure_channel(target)`)."""
        return self._grpc.target if self._grpc else None

    @property
    def grpc_tls_target(self) -> str | None:
        """The gRPC listener's TLS "127.0.0.1:PORT" (trusting `ca_pem`)."""
        return self._grpc.tls_target if self._grpc else None

    @property
    def admin(self) -> FakeCloudAdmin:
        return FakeCloudAdmin(self.url)

    def start(self) -> FakeCloudServer:
        files = self._tls_files = tls.ensure(self.engine.root, (self.host,)) if self._tls else None
        self._servers = uvicorn_servers(self.app, self.host, self.port, self.tls_port, files)
        servers = self._servers
        self._thread = threading.Thread(
            target=lambda: asyncio.run(serve_all(self.app, servers, self.host, files)), name="fakeclouds",
            daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 15
        while not all(s.started for s in servers) or (files and not hasattr(self.app.state, "tls")):
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("fake cloud server failed to start")
            time.sleep(0.01)
        self.port = bound_port(servers[0])
        if len(servers) > 1:
            self.tls_port = bound_port(servers[1])
        return self

    def stop(self) -> None:
        if self._servers and self._thread is not None:
            for server in self._servers:
                server.should_exit = True
            self._thread.join(15)
        self._servers, self._thread = [], None

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 10) -> T:
        """Run a coroutine on the server's loop (e.g. engine methods) and return its result."""
        loop: asyncio.AbstractEventLoop = self.app.state.loop
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

    def __enter__(self) -> FakeCloudServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> FakeCloudServer:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)


# --------------------------------------------------------------------------- own process


class FakeCloudProcess:
    """Handle on a server running as its own process (see start_subprocess)."""

    def __init__(self, proc: subprocess.Popen[str], url: str, tokens: dict[str, str],
                 tls_url: str | None = None) -> None:
        self.proc, self.url, self.tokens, self.tls_url = proc, url, tokens, tls_url
        self.port = int(url.rsplit(":", 1)[1])

    @property
    def ca_pem(self) -> str | None:
        """The CA the TLS listener's certificate chains to (None without one)."""
        return str(self.admin.tls()["ca_pem"]) if self.tls_url else None

    @property
    def grpc_target(self) -> str | None:
        """The gRPC listener's "host:port" (None when no facade declares gRPC services)."""
        r = httpx.get(f"{self.url}{ADMIN_PREFIX}/grpc", timeout=10)
        return str(r.json()["target"]) if r.status_code == 200 else None

    @property
    def grpc_tls_target(self) -> str | None:
        """The gRPC listener's TLS "host:port" (trusting `ca_pem`)."""
        r = httpx.get(f"{self.url}{ADMIN_PREFIX}/grpc", timeout=10)
        return str(r.json()["tls_target"]) if r.status_code == 200 else None

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def admin(self) -> FakeCloudAdmin:
        return FakeCloudAdmin(self.url)

    def stop(self, timeout: float = 15) -> int:
        """SIGTERM and wait (clean shutdown: state saved, SSH servers closed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                # Its machines' files stay until the next simulation process sweeps them (own_temp.py).
                print(f"fake cloud process {self.proc.pid} did not stop within {timeout:g} s: killed",
                      file=sys.stderr)
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: a crash. State on disk is whatever the last change wrote."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def __enter__(self) -> FakeCloudProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_subprocess(port: int = 0, *, state_dir: str | Path | None = None, boot_delay: float = 0.2,
                     terminate_delay: float = 0.05, tokens: dict[str, str] | None = None,
                     startup_timeout: float = 20, time_scale: float = 0.001) -> FakeCloudProcess:
    """Start `python -m fakeclouds.server` and wait until it prints its URL. Only the `tokens` given
    are passed (by a private file, removed once the server has read it); the process gives every
    other facade `<name>-dev-token` (so does `.tokens`)."""
    given, tokens = tokens or {}, with_defaults(clouds.simulated(), tokens)
    root = Path(__file__).resolve().parent.parent
    argv = [sys.executable, "-m", "fakeclouds.server", "--port", str(port), "--boot-delay", str(boot_delay),
            "--terminate-delay", str(terminate_delay), "--time-scale", str(time_scale)]
    fd, tokens_file = tempfile.mkstemp(prefix="fakeclouds-tokens-", suffix=".json")  # mode 0600
    with os.fdopen(fd, "w") as f:
        json.dump(given, f)
    argv += ["--tokens-file", tokens_file]
    if state_dir is not None:
        argv += ["--state-dir", str(state_dir)]
    pythonpath = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": pythonpath}
    try:
        proc = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        stdout = proc.stdout
        url: list[str] = []
        lines = 2 if needs_tls(clouds.all_facades()) else 1  # the https URL follows when TLS is served

        def read() -> None:
            for _ in range(lines):
                url.append(stdout.readline().strip())

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(startup_timeout)
    finally:
        os.unlink(tokens_file)  # read before the URL is printed
    if len(url) < lines or not all(u.startswith("http") for u in url):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"fake cloud process did not start (exit code {proc.returncode})")
    return FakeCloudProcess(proc, url[0], tokens, tls_url=url[1] if lines > 1 else None)


# --------------------------------------------------------------------------- CLI


def tokens_of(args: argparse.Namespace, facades: Collection[str]) -> dict[str, str]:
    """--tokens-file, then --token on top (ValueError with the reason when either is malformed)."""
    from_file = read_tokens_file(args.tokens_file, facades) if args.tokens_file else {}
    return {**from_file, **parse_tokens(args.token, facades)}


async def _serve(args: argparse.Namespace, engine: Engine, tokens: dict[str, str]) -> None:
    tokens = with_defaults(engine.facades, tokens)  # the gRPC listener, like the app, serves every facade
    grpc = GrpcListener(engine, tokens, args.host, args.grpc_port or 0, args.grpc_tls_port or 0) \
        if grpc_facades(engine.facades.values()) else None
    app = build_app(engine, tokens, grpc=grpc)
    tls_port = args.tls_port
    if tls_port is None and needs_tls(engine.facades.values()):
        tls_port = 0
    files = tls.ensure(engine.root, (args.host,)) if tls_port is not None else None
    servers = uvicorn_servers(app, args.host, args.port, tls_port, files, args.log_level)
    task = asyncio.create_task(serve_all(app, servers, args.host, files))
    while not all(s.started for s in servers) and not task.done():  # noqa: ASYNC110 — only a flag
        await asyncio.sleep(0.01)
    if all(s.started for s in servers):
        # Our own handlers: uvicorn would re-raise SIGTERM after shutdown (exit code -15);
        # a clean stop should exit 0.
        loop = asyncio.get_running_loop()

        def stop() -> None:
            for server in servers:
                server.should_exit = True

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop)
        print(f"http://{args.host}:{bound_port(servers[0])}", flush=True)
        if len(servers) > 1:
            print(f"https://{args.host}:{bound_port(servers[1])}", flush=True)
    await task


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m fakeclouds.server", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument("--state-dir", default=None, help="persist machines here and restore them on start")
    parser.add_argument("--tokens-file", default=None,
                        help="JSON object of facade NAME to TOKEN (entries for other facades are skipped)")
    parser.add_argument("--token", action="append", default=None,
                        help="NAME=TOKEN (repeatable, or comma-separated) for any registered facade "
                             "(default: NAME-dev-token). Visible in the process list: for real "
                             "secrets use --tokens-file")
    parser.add_argument("--tls-port", type=int, default=None,
                        help="also serve over TLS on this port (0: a free one); default: a free port "
                             "when a facade needs TLS, else none")
    parser.add_argument("--grpc-port", type=int, default=None,
                        help="serve the facades that declare gRPC services on this port (0 or none: a "
                             "free one; GET /_fake/grpc tells which); no listener without such a facade")
    parser.add_argument("--grpc-tls-port", type=int, default=None,
                        help="serve them over TLS on this port too (0 or none: a free one), with a "
                             "certificate of the same CA as --tls-port's")
    parser.add_argument("--boot-delay", type=float, default=1.0)
    parser.add_argument("--terminate-delay", type=float, default=0.2)
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="documented rate-limit windows x this (1: real speed, 0: limits off)")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    facades = clouds.all_facades()
    try:
        tokens = tokens_of(args, [f.name for f in facades])  # the engine's facades
    except ValueError as exc:
        parser.error(str(exc))
    os.umask(0o077)  # the state dir holds host keys and machines' disks: the owner's only
    if args.state_dir is not None:  # its machines' processes outlive this one: their shims must too
        shim_dirs.keep_in(Path(args.state_dir) / "shims")
    engine = Engine(facades=facades, boot_delay=args.boot_delay, terminate_delay=args.terminate_delay,
                    state_dir=args.state_dir, time_scale=args.time_scale)
    asyncio.run(_serve(args, engine, tokens))


if __name__ == "__main__":
    main()

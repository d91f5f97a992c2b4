"""The security audit's reproductions (issue 7), re-run against a running gpuprov — what `make run`
starts. Each check sends what the audit sent and says whether the service now answers as it should:

    GPUPROV_HOME=.gpuprov .venv/bin/python -m tests.audit            # after `make run`

It prints one line per check (PASS/FAIL and what was seen) and exits 1 if any failed.
tests/e2e/test_make_run.py runs it against its own `gpuprov dev`.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh
import httpx

from api.guard import OPEN_SESSIONS

MiB = 1024 * 1024


@dataclass
class Check:
    name: str
    ok: bool
    seen: str


@dataclass
class Audit:
    api: str
    token: str
    home: Path
    marker: str = field(default_factory=lambda: "AUDITMARK" + secrets.token_hex(6))
    checks: list[Check] = field(default_factory=list)

    def client(self, token: str | None = None, **headers: str) -> httpx.Client:
        auth = {"Authorization": f"Bearer {token or self.token}"} if token != "" else {}
        return httpx.Client(base_url=self.api, headers={**auth, **headers}, timeout=120)

    def record(self, name: str, ok: bool, seen: str) -> None:
        self.checks.append(Check(name, ok, seen))

    def count(self, path: str) -> int:
        with self.client() as c:
            return len(c.get(path, params={"limit": 200}).json()["items"])


def _chunks(total: int, pulled: list[int]) -> Iterator[bytes]:
    chunk = b"x" * MiB
    for _ in range(total // MiB):
        pulled.append(1)
        yield chunk


def _status(result: httpx.Response | Exception) -> str:
    return str(result.status_code) if isinstance(result, httpx.Response) else type(result).__name__


def big_posts(a: Audit) -> None:
    """300 MB without a token: 401 before the body is read. 100 MB with one: 413, nothing echoed."""
    for token, size, want in (("", 300 * MiB, 401), (a.token, 100 * MiB, 413)):
        pulled: list[int] = []
        try:
            with a.client(token) as c:
                r: httpx.Response | Exception = c.post(
                    "/api/compute/instances", content=_chunks(size, pulled),
                    headers={"Content-Type": "application/json"})
        except httpx.HTTPError as e:  # the server answered and closed while we were still sending
            r = e
        sent = len(pulled)
        echoed = isinstance(r, httpx.Response) and len(r.content) > 10_000
        ok = isinstance(r, httpx.Response) and r.status_code == want and not echoed and sent < size // MiB
        a.record(f"{size // MiB} MB POST {'with' if token else 'without'} a token", ok,
                 f"HTTP {_status(r)} after {sent} of {size // MiB} MiB sent; answer "
                 f"{len(r.content) if isinstance(r, httpx.Response) else 0} bytes")


def bad_json(a: Audit) -> None:
    """NaN, Infinity and lone surrogates: 4xx, never 500; nothing stored."""
    before = a.count("/api/compute/connections")
    bodies = {
        "NaN": '{"provider": "local", "credentials": {"x": NaN}}',
        "Infinity": '{"provider": "local", "credentials": {"x": Infinity}}',
        "surrogate": '{"provider": "local", "credentials": {"x": "' + a.marker + '\\ud800"}}',
    }
    json_body = {"Content-Type": "application/json"}
    with a.client() as c:
        codes = {k: c.post("/api/compute/connections", content=v, headers=json_body).status_code
                 for k, v in bodies.items()}
    after = a.count("/api/compute/connections")
    ok = all(400 <= s < 500 for s in codes.values()) and before == after
    a.record("NaN/Infinity/lone surrogate bodies", ok, f"{codes}; connections {before} -> {after}")


def ssh_keys(a: Audit) -> None:
    """A private key, a multi-line key carrying cloud-init, a 1 MB comment: 422, nothing stored."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    public = key.export_public_key().decode().strip()
    cases = {
        "private key": key.export_private_key().decode(),
        "multi-line key with runcmd": public + "\nruncmd:\n  - [touch, /tmp/pwned]",
        "1 MB comment": public + " " + "c" * MiB,
    }
    before = a.count("/api/compute/instances")
    with a.client() as c:
        codes = {k: c.post("/api/compute/instances",
                           json={"cloud": "local", "ssh_public_keys": [v]}).status_code
                 for k, v in cases.items()}
    after = a.count("/api/compute/instances")
    # 1 MB of comment is past the API's 1 MiB body limit: a 413 before anything is parsed.
    a.record("bad ssh_public_keys", all(s in (413, 422) for s in codes.values()) and before == after,
             f"{codes}; instances {before} -> {after}")


def names(a: Audit) -> None:
    with a.client() as c:
        r = c.post("/api/compute/instances", json={
            "cloud": "local", "name": "x\x1b[31mred\x07",
            "ssh_public_keys": [asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()]})
    a.record("control characters in a name", r.status_code == 422, f"HTTP {r.status_code}")


def endpoints(a: Audit) -> None:
    """The connection endpoint: no server-side request forgery, no userinfo, no foreign body echoed."""
    api = httpx.URL(a.api)
    cases = {
        "the API itself": f"http://{api.host}:{api.port}/",
        "another loopback port": f"http://127.0.0.1:{api.port}/healthz",
        "userinfo": f"https://user:{a.marker}@cloud.lambda.ai/api/v1",
        "foreign host": "https://example.com/api/v1",
    }
    before = a.count("/api/compute/connections")
    with a.client() as c:
        seen = {}
        for k, v in cases.items():
            r = c.post("/api/compute/connections",
                       json={"provider": "lambda", "credentials": {"api_key": a.marker}, "endpoint": v})
            seen[k] = (r.status_code, a.marker in r.text or "status" in r.text)
    after = a.count("/api/compute/connections")
    ok = all(s == 422 and not echo for s, echo in seen.values()) and before == after
    a.record("connection endpoints", ok,
             f"{ {k: s for k, (s, _) in seen.items()} }; connections {before} -> {after}")


def local_connection(a: Audit) -> dict[str, Any]:
    """The body `make run` connected the simulated `local` cloud with (its endpoint and token)."""
    from fakeclouds import clouds

    with a.client() as c:
        [conn] = [x for x in c.get("/api/compute/connections").json()["items"] if x["provider"] == "local"]
    token = json.loads((a.home / "cloud-tokens.json").read_text())["local"]
    return {"provider": "local", "endpoint": conn["endpoint"],
            "credentials": clouds.facade("local").credentials(token)}


def projects(a: Audit) -> None:
    """Two projects with their own tokens: neither sees nor touches the other's objects."""
    suffix = secrets.token_hex(3)
    tokens = {}
    with a.client() as c:
        for p in (f"audit-a-{suffix}", f"audit-b-{suffix}"):
            created = c.post("/api/projects", json={"id": p}).status_code
            made = c.post(f"/api/projects/{p}/tokens", json={"label": "audit"})
            if created != 201 or made.status_code != 201:
                a.record("projects and tokens", False,
                         f"POST /api/projects: HTTP {created}/{made.status_code}")
                return
            tokens[p] = made.json()["token"]
    pa, pb = tokens
    key = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    with a.client(tokens[pa]) as ca, a.client(tokens[pb]) as cb:
        iid = ca.post("/api/compute/instances", json={"cloud": "local", "k3s": False,
                                                     "ssh_public_keys": [key]})
        if iid.status_code != 202:  # a's project has no connection: connect local there as make run did
            ca.post("/api/compute/connections", json=local_connection(a))
            iid = ca.post("/api/compute/instances", json={"cloud": "local", "k3s": False,
                                                         "ssh_public_keys": [key]})
        got = iid.json().get("id", "?")
        foreign = {
            "get": cb.get(f"/api/compute/instances/{got}").status_code,
            "terminate": cb.post(f"/api/compute/instances/{got}/terminate").status_code,
            "list": got in cb.get("/api/compute/instances").text,
            "X-Project": cb.get("/api/compute/instances", headers={"X-Project": pa}).status_code,
        }
        mine = ca.get(f"/api/compute/instances/{got}").status_code
        ca.post(f"/api/compute/instances/{got}/terminate")
    ok = (iid.status_code == 202 and mine == 200 and foreign["get"] == foreign["terminate"] == 404
          and foreign["list"] is False and foreign["X-Project"] == 404)
    a.record("two projects, two tokens", ok, f"own: HTTP {mine}; the other's token: {foreign}")


def files(a: Audit) -> None:
    loose = []
    for path in [a.home, *a.home.rglob("*")]:
        if path.is_symlink():
            continue
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            loose.append(f"{path.relative_to(a.home.parent)} {oct(mode)}")
    a.record("GPUPROV_HOME 0700, files 0600", not loose, "; ".join(loose[:6]) or "all private")


def secret_values(a: Audit) -> list[str]:
    values = [a.token]
    for name in ("secret.key", "api-token"):
        if (a.home / name).exists():
            values += [v for v in (a.home / name).read_text().split() if len(v) >= 16]
    tokens = a.home / "cloud-tokens.json"
    if tokens.exists():
        values += [v for v in json.loads(tokens.read_text()).values() if isinstance(v, str)]
    return values


def command_lines(a: Audit) -> None:
    values = secret_values(a)
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(a.home) in argv or "gpuprov" in argv or "fakeclouds" in argv or "temporal" in argv:
            found += [f"pid {proc.name}" for v in values if v in argv]
    a.record("no secret on any command line", not found, ", ".join(found) or "none")


def logs(a: Audit) -> None:
    values = [a.marker, *secret_values(a)]
    hits = []
    for path in (a.home / "logs").glob("*.log") if (a.home / "logs").exists() else []:
        text = path.read_text(errors="replace")
        hits += [path.name for v in values if v in text]
    a.record("no input value or secret in the logs", not hits, ", ".join(sorted(set(hits))) or "none")


def temporal_history(a: Audit) -> None:
    """Temporal's own database holds no instance name, SSH key or request body in clear."""
    name = "audit-" + secrets.token_hex(4)
    key = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    with a.client() as c:
        r = c.post("/api/compute/instances", json={"cloud": "local", "k3s": False, "name": name,
                                                   "ssh_public_keys": [key]})
        if r.status_code == 202:
            c.post(f"/api/compute/instances/{r.json()['id']}/terminate")
    blob = b""
    for suffix in ("", "-wal"):
        path = a.home / f"temporal.db{suffix}"
        if path.exists():
            blob += path.read_bytes()
    body = key.split()[1].encode()
    found = [what for what, needle in (("name", name.encode()), ("ssh key", body)) if needle in blob]
    ok = r.status_code == 202 and bool(blob) and not found
    a.record("Temporal's database: no name or key in clear", ok,
             f"HTTP {r.status_code}; {len(blob)} bytes read; in clear: {found or 'nothing'}")


def codec(a: Audit) -> None:
    payload = {"payloads": [{"metadata": {"encoding": "anNvbi9wbGFpbg=="}, "data": "e30="}]}
    with a.client() as c:
        enc = c.post("/codec/encode", json=payload)
        dec = c.post("/codec/decode", json=enc.json()) if enc.status_code == 200 else enc
    with a.client("") as anon:
        refused = anon.post("/codec/decode", json=payload).status_code
    ok = enc.status_code == dec.status_code == 200 and dec.json() == payload and refused == 401
    a.record("codec endpoint", ok, f"encode {enc.status_code}, decode {dec.status_code} "
                                   f"(round trip {'equal' if ok else 'differs'}); without a token {refused}")


def openapi(a: Audit) -> None:
    spec = httpx.get(a.api + "/openapi.json", timeout=30).json()
    missing = []
    for path, ops in spec["paths"].items():
        if not path.startswith("/api/"):
            continue
        for method, op in ops.items():
            # signing out of the console needs no session (it ends one if there is one)
            if "401" not in op.get("responses", {}) and (method.upper(), path) not in OPEN_SESSIONS:
                missing.append(f"{method.upper()} {path}: 401")
    a.record("OpenAPI lists 401 on every route", not missing, "; ".join(missing[:4]) or "all")


CHECKS: list[Callable[[Audit], None]] = [big_posts, bad_json, ssh_keys, names, endpoints, projects,
                                         temporal_history, codec, openapi, files, command_lines, logs]


def run(api: str, token: str, home: Path) -> list[Check]:
    a = Audit(api=api.rstrip("/"), token=token, home=home)
    for check in CHECKS:
        try:
            check(a)
        except Exception as e:  # noqa: BLE001 — a check that cannot run is a failed check, with why
            a.record(check.__name__, False, f"could not run: {type(e).__name__}: {e}"[:300])
    return a.checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    home = Path(os.environ.get("GPUPROV_HOME", ".gpuprov")).resolve()
    parser.add_argument("--api", default=os.environ.get("GPUPROV_API_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--home", type=Path, default=home)
    args = parser.parse_args(argv)
    token = os.environ.get("GPUPROV_TOKEN") or (args.home / "api-token").read_text().strip()
    checks = run(args.api, token, args.home)
    for c in checks:
        print(f"{'PASS' if c.ok else 'FAIL'}  {c.name}: {c.seen}")
    failed = [c for c in checks if not c.ok]
    print(f"{len(checks) - len(failed)} of {len(checks)} checks pass")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

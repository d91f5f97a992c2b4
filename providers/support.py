"""A cloud's support status, derived from acceptance results — never typed in by hand per cloud.

The rule: a cloud reads `supported` only after a run of the acceptance suite against a real account
passes on its current adapter. A run (workflows/acceptance.py) records its `AcceptanceResult`
(messages/acceptance.py) on the deployment; `gpuprov acceptance export` writes them out for the
committed results file (`acceptance_results.json`, beside this module); `status()` reads a cloud's
standing from it:

- `supported`: a passing real-account run on the current adapter version (and the latest run on that
  version did not fail);
- `simulated`: the latest passing run on the current version was against a simulation;
- `failing`: the latest run on the current version failed (the detail names the failed step);
- `untested`: nothing ran on the current version (a run on an older adapter does not count).

The adapter version (`adapter_version()`) is a short hash of the adapter's source — its module and
the sibling modules named `<module>_*.py` — and of the exact pins (`name==version` in pyproject.toml)
of the client libraries those modules import: editing the adapter, or moving its SDK pin, makes
every earlier run an older adapter's.

Whether a run was against a real account is never a flag: `account_kind()` derives it from the
connection's endpoint. A result holds at most an account fingerprint, never a credential: an unknown
field (an `api_key`, a `token`) is refused.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import re
import threading
from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from functools import cache, lru_cache
from importlib import metadata
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, TypeAdapter

from messages.acceptance import AcceptanceResult, AcceptanceStep, Account

__all__ = ["AcceptanceResult", "AcceptanceStep", "SupportStatus", "account_kind", "adapter_version", "status"]
from providers import endpoints, registry
from providers.base import InvalidRequest

RESULTS_FILE = Path(__file__).with_name("acceptance_results.json")
PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"

Status = Literal["supported", "simulated", "failing", "untested"]


class SupportStatus(BaseModel):
    status: Status
    detail: str
    adapter_version: str | None
    last_run_at: datetime | None = None  # the latest run on the current adapter version


_RESULTS = TypeAdapter(list[AcceptanceResult])


def parse_results(text: str | bytes) -> list[AcceptanceResult]:
    """The results file's runs (ValidationError on an unknown field or a malformed run)."""
    return _RESULTS.validate_json(text)


def load(path: Path = RESULTS_FILE) -> list[AcceptanceResult]:
    return parse_results(path.read_bytes())


def dump(results: Sequence[AcceptanceResult]) -> str:
    return _RESULTS.dump_json(list(results), indent=2).decode() + "\n"


# --------------------------------------------------------------------------- account kind

def account_kind(endpoint: str | None, documented_hosts: Collection[str]) -> Account:
    """`real` only when the connection talks to the cloud's documented public API: no endpoint of
    its own (the adapter's default) on a cloud that has documented hosts, or https on port 443 on one
    of them. Anything else — loopback, a proxy or prefix the administrator allows, a unix socket, a
    cloud with no public API (its default is a local service) — is `simulated`."""
    hosts = {h.lower().rstrip(".") for h in documented_hosts}
    if not hosts:
        return "simulated"
    if endpoint is None:
        return "real"
    try:
        ep = endpoints.parse(endpoint)
    except endpoints.EndpointError:
        return "simulated"
    documented = ep.scheme == "https" and ep.port == 443 and ep.host.lower() in hosts
    return "real" if documented else "simulated"


def account_kind_of(cloud: str, endpoint: str | None) -> Account:
    """account_kind with the cloud's documented API hosts (its adapter's `api_hosts`)."""
    return account_kind(endpoint, registry.adapter_class(cloud).api_hosts)


# --------------------------------------------------------------------------- adapter version

def adapter_files(cloud: str) -> list[Path]:
    """The registry entry's adapter module and its siblings named `<module>_*.py` (a trailing `_` of
    the module's name, as in `modal_`, is not doubled: `modal_client.py`), found without importing
    (a cloud registered for tests only: its class's module)."""
    try:
        module_name = registry.entry(cloud).adapter.partition(":")[0]
    except InvalidRequest:  # a test-only registration: its class is at hand
        module_name = registry.adapter_class(cloud).__module__
    spec = importlib.util.find_spec(module_name)
    if spec is None or spec.origin is None:
        raise ImportError(f"no module {module_name!r} for cloud {cloud!r}")
    main = Path(spec.origin)
    stem = main.stem.rstrip("_")
    siblings = {p for p in main.parent.glob(f"{stem}_*.py") if p.is_file()}
    return sorted({main, *siblings}, key=lambda p: p.name)


def imported_modules(files: Iterable[Path]) -> set[str]:
    """Every module name the files import (absolute imports; `from a.b import c` gives a.b, a.b.c)."""
    names: set[str] = set()
    for path in files:
        names.update(_imports_in(path.read_text()))
    return names


# CPython 3.11 counts the AST constructor's recursion depth per interpreter, not per thread: two
# threads parsing at once (the API's sync routes, a worker's activities) can fail with "SystemError:
# AST constructor recursion depth mismatch" (python/cpython#106905; seen here in the suite, 3.11.7).
_PARSING = threading.Lock()


@lru_cache(maxsize=256)  # by source: the adapters' files rarely change, and every status() reads them
def _imports_in(source: str) -> frozenset[str]:
    with _PARSING:
        tree = ast.parse(source)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return frozenset(names)


_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*==\s*([^\s;,#]+)\s*(?:;.*)?$")


def _requirements() -> list[str]:
    """The project's dependency strings: pyproject.toml's in a checkout, else the installed metadata's."""
    if PYPROJECT.is_file():
        import tomllib
        project = tomllib.loads(PYPROJECT.read_text()).get("project", {})
        return list(project.get("dependencies", []))
    try:
        return list(metadata.requires("gpuprov") or [])
    except metadata.PackageNotFoundError:
        return []


@cache
def exact_pins() -> dict[str, str]:
    """{distribution: version} of the dependencies pinned exactly (`name==version`)."""
    pins = {}
    for req in _requirements():
        m = _PIN.match(req)
        if m:
            pins[m.group(1).lower()] = m.group(2)
    return pins


def _import_names(distribution: str) -> set[str]:
    """The import names a distribution is likely to provide: `google-cloud-compute` →
    google.cloud.compute (and google_cloud_compute), `boto3` → boto3."""
    name = distribution.lower()
    return {name.replace("-", ".").replace("_", "."), name.replace("-", "_")}


def client_pins(files: Iterable[Path], pins: dict[str, str] | None = None) -> list[str]:
    """`name==version` of each exactly pinned distribution the files import, sorted."""
    pins = exact_pins() if pins is None else pins
    imported = imported_modules(files)
    found = []
    for dist, version in pins.items():
        if any(m == n or m.startswith((n + ".", n + "_")) for n in _import_names(dist) for m in imported):
            found.append(f"{dist}=={version}")
    return sorted(found)


def version_of(files: Iterable[Path], pins: Iterable[str]) -> str:
    """12 hex digits over the files' names and contents and the pins."""
    digest = hashlib.sha256()
    for path in sorted(files, key=lambda p: p.name):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for pin in sorted(pins):
        digest.update(b"pin\0" + pin.encode() + b"\0")
    return digest.hexdigest()[:12]


def adapter_version(cloud: str) -> str:
    """The cloud's adapter version: a short hash of its adapter modules' source and its client
    library's exact pin, where it has one."""
    files = adapter_files(cloud)
    return version_of(files, client_pins(files))


# --------------------------------------------------------------------------- status

def status(cloud: str, results: Sequence[AcceptanceResult], *, version: str | None = None) -> SupportStatus:
    """The cloud's support status from `results` (`version`: its current adapter version, computed
    from its source unless given)."""
    version = adapter_version(cloud) if version is None else version
    runs = [r for r in results if r.cloud == cloud]
    current = sorted((r for r in runs if r.adapter_version == version and r.outcome != "incomplete"),
                     key=lambda r: r.started_at)
    if not current:
        if any(r.adapter_version != version for r in runs):
            older = max(r.started_at for r in runs if r.adapter_version != version)
            detail = f"untested (last run on an older adapter, {older:%Y-%m-%d})"
        else:
            detail = "no acceptance run on this adapter version yet"
        return SupportStatus(status="untested", detail=detail, adapter_version=version)
    latest = current[-1]
    at = latest.started_at
    if latest.outcome == "failed":
        return SupportStatus(status="failing", adapter_version=version, last_run_at=at,
                             detail=f"failing at step {latest.failed_step!r} ({latest.account} account run)")
    real = [r for r in current if r.outcome == "passed" and r.account == "real"]
    if real:
        return SupportStatus(status="supported", adapter_version=version, last_run_at=at,
                             detail=f"acceptance passed on a real account ({real[-1].started_at:%Y-%m-%d})")
    return SupportStatus(status="simulated", adapter_version=version, last_run_at=at,
                         detail="acceptance passed against a simulation only; no real-account run has passed")


def committed_status(cloud: str) -> SupportStatus:
    """The cloud's status from the committed results file."""
    return status(cloud, load())

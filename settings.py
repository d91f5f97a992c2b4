"""Configuration, all from GPUPROV_* environment variables (see README: Configuration)."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from functools import lru_cache
from ipaddress import IPv4Address
from pathlib import Path

from pydantic import Field, IPvAnyAddress
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUPROV_", extra="ignore")

    home: Path = Path(".gpuprov")
    database_url: str | None = None  # default: sqlite under home
    secret_key: str | None = None  # Fernet key; default: read/generated at home/secret.key
    previous_secret_keys: str | None = None  # older Fernet keys, comma-separated: still decrypt
    api_token: str | None = None  # default: read/generated at home/api-token
    temporal_address: str = "127.0.0.1:7233"
    temporal_namespace: str = "default"
    task_queue: str = "gpuprov"
    installation_id: str | None = None  # default: read/generated at home/installation-id
    api_url: str = "http://127.0.0.1:8000"
    codec_cors_origins: str = "http://127.0.0.1:8233"  # Web UI origins that may call /codec (comma-separated)
    codec_session_ttl_s: float = 12 * 3600  # how long a /codec/session cookie stays valid
    console_session_ttl_s: float = 12 * 3600  # how long a Compute console sign-in stays valid
    offers_cache_ttl_s: float = 30.0  # how long the offers page reuses a connection's answer (0: never)
    offers_timeout_s: float = 8.0  # a cloud that has not answered the offers page by then is reported
    watch_interval_s: float = 60.0  # how often each connection's machines are checked for losses
    sweep_interval_s: float = 300.0  # how often the Schedule `gpuprov-sweep` starts a sweep
    sweep_grace_s: float = 600.0  # an orphan/duplicate is removed this long after first seen, not before
    health_interval_s: float = 300.0  # how often the Schedule `gpuprov-health` verifies each connection
    # How often the Schedule `gpuprov-health-recheck` verifies again the connections found degraded
    # (a recovered cloud reads healthy within this, not a whole health interval).
    health_recheck_s: float = 30.0
    # How long the server holds a workflow's next task for this worker's cache before any worker may
    # take it: after a crash, every workflow this worker ran waits this long (Temporal's default 10 s).
    sticky_timeout_s: float = 10.0
    # How long an allocation's or job's activity may go without a heartbeat before Temporal retries it
    # elsewhere: how long a dead worker's cloud calls go unnoticed (new requests; Timing's default).
    heartbeat_timeout_s: float = Field(30.0, gt=0)
    # How many workflows a worker keeps in memory between their tasks (Temporal's sticky cache). One
    # evicted (least recently used first: an allocation waiting minutes for its boot) costs nothing
    # while it waits and replays its history at its next task: a bound on the worker's memory when
    # many machines boot at once, paid in CPU once more workflows run at once than it holds (README).
    workflow_cache: int = Field(1000, ge=0)
    # How many workflow tasks a worker takes at once. Python runs their code one at a time (one GIL),
    # so a task taken beyond what it can finish in Temporal's 10 s workflow-task timeout only waits
    # in the worker, times out, is redone — and meanwhile the server refuses updates to that workflow
    # ("Workflow Task in failed state"). Tasks not taken wait on the server, which costs nothing.
    # Measured (bench scale, 1,000 allocations at once, 2-core box): 400 → 49 of 1,000 failed; 100 →
    # 0, with tasks over 5 s; 40 → 0, none over 5 s; allocations/s at 200 within the box's swing (README).
    workflow_task_slots: int = Field(40, ge=1)
    # Comma-separated URL prefixes a connection's endpoint may point under, besides each cloud's
    # documented API hosts (providers/endpoints.py). `make run` sets it to its simulated clouds.
    allowed_endpoints: str = ""
    # The k3s installer gpuprov runs over SSH on clouds whose k3s mode is "ssh" (and SSH fleets): a
    # mirror where get.k3s.io is out of reach.
    k3s_install_url: str = "https://get.k3s.io"
    # Comma-separated URL prefixes a policy's webhook may POST to (none by default: no webhook).
    webhook_allowlist: str = ""
    webhook_timeout_s: float = 10.0  # a webhook that has not answered by then is recorded as failed
    policy_interval_s: float = 60.0  # how often each condition policy's Schedule evaluates it
    job_metrics_interval_s: float = 30.0  # how often a running job's GPUs are sampled (nvidia-smi)
    # How many processes `python -m api.serve` runs the API in (one port; api/serve.py says why).
    api_workers: int = Field(2, ge=1, le=64)
    # The worker's Prometheus /metrics at this port (0: off). `gpuprov dev` turns it on.
    worker_metrics_port: int = Field(0, ge=0, le=65535)
    # Its address: 127.0.0.1 (anyone on the host may scrape it), or another (a container's 0.0.0.0, so a
    # scraper on its network reaches each replica), where every scrape needs the admin token
    # (api_token, which must then be set): activities/metrics_http.py.
    worker_metrics_addr: IPvAnyAddress = IPv4Address("127.0.0.1")
    # A job's priority may be -job_priority_max..job_priority_max (a higher one is a 422): the queue is
    # shared by every project, so a tenant must not be able to jump the others by an arbitrary amount.
    job_priority_max: int = Field(100, ge=0, le=1000)
    # Comma-separated CIDRs an SSH fleet's hosts may be in although refused by default (loopback,
    # link-local...: providers/fleet_addresses.py); this installation's own services stay refused.
    fleet_allowed_networks: str = ""
    # Capacity memory (store/capacity.py): a create's capacity or quota refusal is remembered per
    # connection and its offers are tried last by the next allocations (off: every plan as listed).
    capacity_memory: bool = True

    def allowed_endpoint_prefixes(self) -> tuple[str, ...]:
        from providers.endpoints import parse_prefixes

        return parse_prefixes(self.allowed_endpoints)

    def webhook_prefixes(self) -> tuple[str, ...]:
        from providers.endpoints import parse_prefixes

        return parse_prefixes(self.webhook_allowlist)

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.home / 'gpuprov.db').resolve()}"


@lru_cache
def get_settings() -> Settings:
    return Settings()


def home_value(home: Path, name: str, make: Callable[[], str]) -> str:
    """The value kept in `home/name`, created with `make()` (mode 0600) on first use.

    Race-safe: `gpuprov dev` starts the worker and the API at once, and both must end up with
    the same installation id, token and key. The value is written to a private temp file and
    hard-linked into place, which fails if the name exists: the file appears whole or not at
    all, and a loser of the race reads the winner's value.
    """
    path = home / name
    if not path.exists():
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=home, prefix=f".{name}.")  # mode 0600
        try:
            with os.fdopen(fd, "w") as f:
                f.write(make() + "\n")
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    return path.read_text().strip()


# Files and directories under GPUPROV_HOME are the service user's only: keys, tokens, databases
# and logs hold secrets or what they protect. Every process that writes there calls these first.
PRIVATE_UMASK = 0o077
# What gpuprov itself keeps in its home (tightened when an older, looser home is adopted).
OWN_ENTRIES = ("api-token", "secret.key", "installation-id", "cloud-tokens.json", "gpuprov.db",
               "gpuprov.db-wal", "gpuprov.db-shm", "temporal.db", "temporal.db-wal", "temporal.db-shm",
               "logs", "localcloud", "pacing")
PACING_DIR = "pacing"  # where the host's processes pace a cloud key's calls together (providers/pacing.py)


def write_private(path: Path, text: str) -> None:
    """Replace `path` whole (mode 0600): a reader sees the old file or the new one, never half."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mode 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def private_files() -> None:
    """From now on this process and its children create files 0600 and directories 0700."""
    os.umask(PRIVATE_UMASK)


def private_home(home: Path) -> Path:
    """`home`, created 0700. A looser one (made by an older gpuprov) is tightened, and so are the
    entries gpuprov keeps in it; stderr says so, once, since the next start finds it tight."""
    private_files()
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    was = home.stat().st_mode & 0o777
    if was & PRIVATE_UMASK:
        try:
            home.chmod(0o700)
            for name in OWN_ENTRIES:
                _owner_only(home / name)
        except OSError as e:
            print(f"gpuprov: warning: {home} is readable by others (mode {was:o}) and could not be "
                  f"made 0700: {e.strerror}", file=sys.stderr)
        else:
            print(f"gpuprov: made {home} private (mode 700, was {was:o}); its files are owner-only now",
                  file=sys.stderr)
    return home


def _owner_only(path: Path) -> None:
    """Strip group/other bits from `path` and, for a directory, everything in it (links untouched)."""
    if path.is_symlink() or not path.exists():
        return
    paths = [path]
    if path.is_dir():  # os.walk does not follow links to directories
        for top, dirs, files in os.walk(path):
            paths += [Path(top, n) for n in dirs + files]
    for p in paths:
        try:
            if not p.is_symlink():
                p.chmod(p.stat().st_mode & 0o700)
        except FileNotFoundError:  # removed while we walk (a WAL checkpoint, a log rotation)
            pass

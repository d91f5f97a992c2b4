"""Configuration, all from GPUPROV_* environment variables (see README: Configuration)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUPROV_", extra="ignore")

    home: Path = Path(".gpuprov")
    database_url: str | None = None  # default: sqlite under home
    secret_key: str | None = None  # Fernet key; default: read/generated at home/secret.key
    api_token: str | None = None  # default: read/generated at home/api-token
    temporal_address: str = "127.0.0.1:7233"
    temporal_namespace: str = "default"
    task_queue: str = "gpuprov"
    installation_id: str | None = None  # default: read/generated at home/installation-id
    api_url: str = "http://127.0.0.1:8000"
    watch_interval_s: float = 60.0  # how often each connection's machines are checked for losses
    sweep_interval_s: float = 300.0  # how often the Schedule `gpuprov-sweep` starts a sweep
    sweep_grace_s: float = 600.0  # an orphan/duplicate is removed this long after first seen, not before
    # Comma-separated URL prefixes a connection's endpoint may point under, besides each cloud's
    # documented API hosts (providers/endpoints.py). `make run` sets it to its simulated clouds.
    allowed_endpoints: str = ""

    def allowed_endpoint_prefixes(self) -> tuple[str, ...]:
        from providers.endpoints import parse_prefixes

        return parse_prefixes(self.allowed_endpoints)

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
        home.mkdir(parents=True, exist_ok=True)
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

"""Configuration, all from GPUPROV_* environment variables (see README: Configuration)."""

from __future__ import annotations

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

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.home / 'gpuprov.db').resolve()}"


@lru_cache
def get_settings() -> Settings:
    return Settings()

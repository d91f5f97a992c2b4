"""What the simulated Verda's API accepts: its request bodies (token grants, instance creation and
its OS volume, instance and volume actions, SSH keys, startup scripts, bulk deletes) as pydantic
models, and the readings of an `id` field and an `isSpot` query value, refused as Verda refuses
them. The router is `verda_api.py`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from fakeclouds.errors import Invalid


class TokenBody(BaseModel):
    grant_type: str
    client_id: str | None = None
    client_secret: str | None = None
    refresh_token: str | None = None


class OsVolume(BaseModel):
    name: str = Field(min_length=1, max_length=100)
    size: int = Field(ge=1, le=10_000)
    on_spot_discontinue: Literal["keep_detached", "move_to_trash", "delete_permanently"] | None = None


class CreateBody(BaseModel):
    instance_type: str
    image: str
    hostname: str
    description: str = Field(default="", max_length=255)
    ssh_key_ids: list[str] = Field(default_factory=list)
    location_code: str = "FIN-03"  # the SDK's default location
    startup_script_id: str | None = None
    os_volume: OsVolume | None = None
    volumes: list[dict[str, Any]] = Field(default_factory=list)
    existing_volumes: list[str] = Field(default_factory=list)
    is_spot: bool = False
    coupon: str | None = None
    contract: Literal["LONG_TERM", "PAY_AS_YOU_GO", "SPOT"] | None = None
    pricing: Literal["DYNAMIC_PRICE", "FIXED_PRICE"] | None = None


class ActionBody(BaseModel):
    id: list[str] | str
    action: str
    volume_ids: list[str] | None = None
    delete_permanently: bool = False


class SshKeyBody(BaseModel):
    name: str = Field(min_length=1, max_length=255)
    key: str


class ScriptBody(BaseModel):
    name: str = Field(min_length=1, max_length=255)
    script: str = Field(min_length=1, max_length=1_000_000)


class DeleteKeysBody(BaseModel):
    keys: list[str]


class DeleteScriptsBody(BaseModel):
    scripts: list[str]


class VolumeActionBody(BaseModel):
    id: list[str] | str
    action: str
    is_permanent: bool = False


def ids_of(value: list[str] | str) -> list[str]:
    ids = [value] if isinstance(value, str) else list(value)
    if not ids:
        raise Invalid("id must name at least one resource")
    return ids


def is_spot(raw: str | None) -> bool:
    if raw in (None, "", "false"):
        return False
    if raw == "true":
        return True
    raise Invalid("isSpot must be true or false")


"""Maps `--cloud` ids to adapter classes. Modules are imported lazily, so a missing SDK
for one cloud never breaks the others."""

from __future__ import annotations

import importlib
from typing import Any

from providers.base import Capabilities, CloudProvider, InvalidRequest

# cloud id -> "module:Class"
_ADAPTERS: dict[str, str] = {
    "local": "providers.local:LocalProvider",
    "lambda": "providers.lambda_:LambdaProvider",
}

# Test-only registrations (e.g. an in-memory fake) go here, never into _ADAPTERS.
_EXTRA: dict[str, type[CloudProvider]] = {}


def known() -> list[str]:
    return sorted({*_ADAPTERS, *_EXTRA})


def adapter_class(cloud: str) -> type[CloudProvider]:
    if cloud in _EXTRA:
        return _EXTRA[cloud]
    target = _ADAPTERS.get(cloud)
    if target is None:
        raise InvalidRequest(f"unknown cloud {cloud!r}; known: {', '.join(known())}")
    module_name, _, cls_name = target.partition(":")
    cls: type[CloudProvider] = getattr(importlib.import_module(module_name), cls_name)
    return cls


def capabilities(cloud: str) -> Capabilities:
    return adapter_class(cloud).capabilities


def build(cloud: str, credentials: dict[str, Any], *, endpoint: str | None = None,
          installation_id: str = "default") -> CloudProvider:
    return adapter_class(cloud)(credentials, endpoint=endpoint, installation_id=installation_id)


def register_for_tests(cls: type[CloudProvider]) -> None:
    _EXTRA[cls.id] = cls


def unregister_for_tests(cloud: str) -> None:
    _EXTRA.pop(cloud, None)

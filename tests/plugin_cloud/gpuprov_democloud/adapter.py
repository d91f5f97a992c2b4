"""The demo cloud's adapter: it speaks gpuprov's own `local` API shape, so it reuses that adapter
and declares only what makes it another cloud (its id and capabilities)."""

from __future__ import annotations

from typing import ClassVar

from providers.base import Capabilities
from providers.local import LocalProvider


class DemoProvider(LocalProvider):
    id: ClassVar[str] = "democloud"
    capabilities: ClassVar[Capabilities] = Capabilities(
        display_name="Demo Cloud",
        k3s="none",
        k3s_reason="demo machines are process sandboxes on this host; k3s cannot run there",
        ports=False,
        ports_reason="--port needs a firewall API; Demo Cloud has none",
        spot=True,
        login_user="demo",
        regions=["demo-1"],
    )

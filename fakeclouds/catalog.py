"""The shapes of what a simulated cloud sells: instance types (with their GPUs, prices and
default stock per region) and regions. Each cloud's rows live with its facade
(`FACADE.instance_types` / `FACADE.regions`); the engine reads them from there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

DRIVER_VERSION = "535.129.03"  # what the simulated nvidia-smi reports


@dataclass(frozen=True)
class Gpu:
    name: str  # short canonical name, e.g. "A10", "H100"
    smi_name: str  # what nvidia-smi prints in the name column
    memory_mib: int  # memory.total as nvidia-smi reports it (MiB)
    count: int

    @property
    def memory_gib(self) -> int:
        return round(self.memory_mib / 1024)


@dataclass(frozen=True)
class InstanceType:
    name: str
    description: str  # Lambda: "1x A10 (24 GB PCIe)"
    gpu_description: str | None  # Lambda: "A10 (24 GB PCIe)"
    vcpus: int
    memory_gib: int
    storage_gib: int
    gpu: Gpu | None
    # price_per_hour per region (USD); spot price is spot_factor * on-demand where offered.
    prices: dict[str, float]
    spot_factor: float | None = None  # None: no spot market
    default_stock: dict[str, int] | None = None  # per region; missing region -> 0


@dataclass(frozen=True)
class Region:
    name: str
    description: str


# Stock is per (facade, instance type, region): two clouds may sell types of the same name.
StockKey = tuple[str, str, str]


def default_stock(facade: str, types: Iterable[InstanceType]) -> dict[StockKey, int]:
    return {(facade, t.name, r): n for t in types for r, n in (t.default_stock or {}).items()}

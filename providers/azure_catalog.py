"""Where and what the Azure adapter offers: the regions it prices, and how one of ARM's resource
SKUs (a VM size in its locations and zones, with its capabilities and restrictions) becomes offers,
priced by providers/azure_prices.py's table (spot where the size is LowPriorityCapable and priced).
"""

from __future__ import annotations

from typing import Any

from providers.azure_prices import SIZES
from providers.base import GpuSpec, Offer

# Azure regions with GPU sizes this adapter prices (providers/azure_prices.py sells by size).
REGIONS = [
    "eastus",
    "eastus2",
    "southcentralus",
    "westus2",
    "westus3",
    "northcentralus",
    "centralus",
    "westeurope",
    "northeurope",
    "swedencentral",
    "uksouth",
    "francecentral",
    "germanywestcentral",
    "switzerlandnorth",
    "japaneast",
    "koreacentral",
    "southeastasia",
    "centralindia",
    "australiaeast",
    "canadacentral",
]


def _caps(sku: dict[str, Any]) -> dict[str, str]:
    return {str(c.get("name")): str(c.get("value")) for c in sku.get("capabilities") or []}


def _number(value: str | None) -> float:
    try:
        return float(value or 0)
    except ValueError:
        return 0.0



def offers_of(provider: str, sku: dict[str, Any]) -> list[Offer]:
    if sku.get("resourceType") != "virtualMachines":
        return []
    name = str(sku.get("name") or "")
    info = SIZES.get(name)
    caps = _caps(sku)
    gpus = int(_number(caps.get("GPUs")))
    if info is None or gpus < 1:
        return []  # not a GPU size, or not in the price table (no price: no offer)
    restrictions = sku.get("restrictions") or []
    out = []
    for loc in sku.get("locationInfo") or []:
        location = str(loc.get("location") or "").lower()
        if location not in REGIONS:
            continue
        blocked_zones: set[str] = set()
        blocked = False
        for r in restrictions:
            info_r = r.get("restrictionInfo") or {}
            if location not in [str(x).lower() for x in info_r.get("locations") or r.get("values") or []]:
                continue
            if r.get("type") == "Location":
                blocked = True
            else:
                blocked_zones |= {str(z) for z in info_r.get("zones") or []}
        if blocked:
            continue
        zones = sorted(str(z) for z in loc.get("zones") or [])
        places: list[str | None] = [z for z in zones if z not in blocked_zones] if zones else [None]
        markets = [(False, info.on_demand)]
        if caps.get("LowPriorityCapable") == "True" and info.spot is not None:
            markets.append((True, info.spot))
        for zone in places:
            for spot, price in markets:
                out.append(
                    Offer(
                        provider=provider,
                        instance_type=name,
                        gpu=GpuSpec(name=info.gpu, count=gpus, memory_gib=info.gpu_memory_gib),
                        vcpus=int(_number(caps.get("vCPUs"))),
                        memory_gib=_number(caps.get("MemoryGB")),
                        region=location,
                        zone=zone,
                        price_per_hour=price,
                        spot=spot,
                    )
                )
    return out


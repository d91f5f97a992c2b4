"""Azure VM sizes with GPUs: what the Resource SKUs API does not say (the GPU model and its memory:
the API gives only a GPU count) and a dated list-price table (Azure's prices come from the
unauthenticated Retail Prices API at prices.azure.com, which the simulation does not serve).

PRICES_AS_OF: USD per hour, Linux, pay-as-you-go, East US, as published on
azure.microsoft.com/pricing/details/virtual-machines/linux — approximate, written down from the
public price pages, not fetched by code. Regional differences are not modelled: one price per size
applies to every region. Spot prices move daily; the spot column is indicative only. Refresh the
table (or replace it by the Retail Prices API: `armSkuName`, `retailPrice`, "Spot" in `skuName`)
before trusting a price for money.
"""

from __future__ import annotations

from dataclasses import dataclass

PRICES_AS_OF = "2026-11-30"


@dataclass(frozen=True)
class SizeInfo:
    gpu: str  # canonical short name (providers/gpus.py)
    gpu_memory_gib: float  # per GPU
    on_demand: float  # USD/h
    spot: float | None  # USD/h; None: no spot price known (no spot offer)


SIZES: dict[str, SizeInfo] = {
    # NCasT4_v3: NVIDIA T4 16 GB
    "Standard_NC4as_T4_v3": SizeInfo("T4", 16, 0.526, 0.1578),
    "Standard_NC8as_T4_v3": SizeInfo("T4", 16, 0.752, 0.2256),
    "Standard_NC16as_T4_v3": SizeInfo("T4", 16, 1.204, 0.3612),
    "Standard_NC64as_T4_v3": SizeInfo("T4", 16, 4.352, 1.3056),
    # NVadsA10_v5 (whole-GPU size only; the smaller sizes are GPU partitions)
    "Standard_NV36ads_A10_v5": SizeInfo("A10", 24, 3.20, 0.96),
    # NC_A100_v4: NVIDIA A100 80 GB PCIe
    "Standard_NC24ads_A100_v4": SizeInfo("A100", 80, 3.673, 1.1019),
    "Standard_NC48ads_A100_v4": SizeInfo("A100", 80, 7.346, 2.2038),
    "Standard_NC96ads_A100_v4": SizeInfo("A100", 80, 14.692, 4.4076),
    # ND A100 v4: 8x A100 40 GB SXM
    "Standard_ND96asr_v4": SizeInfo("A100", 40, 27.197, 8.1591),
    # NCads_H100_v5: NVIDIA H100 NVL 94 GB
    "Standard_NC40ads_H100_v5": SizeInfo("H100", 94, 6.98, 2.094),
    "Standard_NC80adis_H100_v5": SizeInfo("H100", 94, 13.96, 4.188),
    # ND_H100_v5: 8x H100 80 GB SXM (no spot price published for it here)
    "Standard_ND96isr_H100_v5": SizeInfo("H100", 80, 98.32, None),
    # NCv3: NVIDIA V100 16 GB
    "Standard_NC6s_v3": SizeInfo("V100", 16, 3.06, 0.918),
}

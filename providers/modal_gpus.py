"""What Modal sells a Sandbox: the documented GPU types, how many fit one container, and their prices.
A dated table shipped with the adapter (Modal's API has no price list), read by the adapter's offers,
by the Modal GPU picker (api/routers/modal_picker.py) and by the simulation's catalogue.

Types and limits: modal.com/docs/guide/gpu ("Specifying GPU type"): `gpu="H100"` or `"H100:N"`, up to
8 GPUs per container, A10 up to 4. Prices: modal.com/pricing, billed per second; the per-second list
prices below are transcribed by hand [approx, to be re-read on that page before relying on them] and
the hourly price is 3600 × that. Modal's region selection is a priced add-on this adapter does not
use, so every price is the "any region" one.
"""

from __future__ import annotations

from dataclasses import dataclass

PRICES_SOURCE = "https://modal.com/pricing"
PRICED_ON = "2026-12-01"


@dataclass(frozen=True)
class ModalGpu:
    name: str  # what `gpu=` takes (upper case, as the client sends it in GPUConfig.gpu_type)
    canonical: str  # providers/gpus.py's short name
    memory_gib: int
    max_count: int  # GPUs per container
    usd_per_second: float

    @property
    def price_per_hour(self) -> float:
        return round(self.usd_per_second * 3600, 4)

    def spec(self, count: int) -> str:
        """The `gpu=` string: "H100" for one, "H100:2" for more."""
        return self.name if count == 1 else f"{self.name}:{count}"


GPUS: tuple[ModalGpu, ...] = (
    ModalGpu("T4", "T4", 16, 8, 0.000164),
    ModalGpu("L4", "L4", 24, 8, 0.000222),
    ModalGpu("A10", "A10", 24, 4, 0.000306),
    ModalGpu("L40S", "L40S", 48, 8, 0.000542),
    ModalGpu("A100-40GB", "A100", 40, 8, 0.000583),
    ModalGpu("A100-80GB", "A100", 80, 8, 0.000694),
    ModalGpu("RTX-PRO-6000", "RTXPRO6000", 96, 8, 0.000842),
    ModalGpu("H100", "H100", 80, 8, 0.001097),
    ModalGpu("H200", "H200", 141, 8, 0.001261),
    ModalGpu("B200", "B200", 180, 8, 0.001736),
)
BY_NAME = {g.name: g for g in GPUS}


def parse_spec(text: str) -> tuple[ModalGpu, int]:
    """("H100", 2) for "h100:2"; ValueError naming what is wrong for anything else."""
    name, _, count_text = text.strip().partition(":")
    gpu = BY_NAME.get(name.upper())
    if gpu is None:
        raise ValueError(f"unknown Modal GPU type {name!r}; known: {', '.join(BY_NAME)}")
    try:
        count = int(count_text) if count_text else 1
    except ValueError:
        raise ValueError(f"GPU count {count_text!r} is not a number") from None
    if not 1 <= count <= gpu.max_count:
        raise ValueError(f"{gpu.name} takes 1 to {gpu.max_count} GPUs per sandbox, not {count}")
    return gpu, count

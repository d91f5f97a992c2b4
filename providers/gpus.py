"""GPU names as users type them: one canonical short name per model, whatever the cloud calls it.

Clouds describe the same GPU as "NVIDIA H100 80GB HBM3", "H100 (80 GB SXM5)", "8x H100",
"gpu_1x_h100_pcie" or "NVIDIA RTX A6000". Users ask for `--gpu h100` or `--gpu a6000`; offers
carry the canonical name so matching is a plain comparison. Form factors (SXM/PCIe/NVL) and
vendor words are dropped; memory, when the text gives it, is returned apart.
"""

from __future__ import annotations

import re

_VENDOR_WORDS = {"NVIDIA", "TESLA", "QUADRO", "GEFORCE", "AMD", "INSTINCT", "INTEL"}
_FORM_FACTORS = {"SXM", "SXM2", "SXM4", "SXM5", "PCIE", "NVL", "HBM3", "HBM2", "HBM2E", "HBM3E"}
_MEMORY = re.compile(r"(\d+(?:\.\d+)?)\s*GB", re.I)


def normalize_gpu(description: str | None, fallback: str = "") -> tuple[str, float | None]:
    """(canonical name, memory GiB or None): ("H100", 80.0) from "H100 (80 GB SXM5)",
    "8x H100 (80 GB SXM5)" or "NVIDIA H100 80GB HBM3"; ("A6000", 48.0) from "RTX A6000 (48 GB)";
    ("RTX4090", None) from "GeForce RTX 4090". `fallback` (e.g. a type name `gpu_1x_a10`) names
    it when the description has no model word."""
    desc = (description or "").strip()
    memory = float(m.group(1)) if (m := _MEMORY.search(desc)) else None
    base = re.sub(r"\(.*?\)", " ", desc)
    base = re.sub(r"^\s*\d+\s*x\s+", "", base, flags=re.I)
    base = _MEMORY.sub(" ", base)
    tokens = [t for t in re.split(r"[\s_]+", base.upper().replace("-", " "))
              if t and t not in _VENDOR_WORDS and t not in _FORM_FACTORS]
    if not tokens:
        return _from_type_name(fallback), memory
    if tokens[0] == "RTX" and len(tokens) > 1 and re.fullmatch(r"A\d+", tokens[1]):
        return tokens[1], memory  # "RTX A6000" -> A6000 (the "A" already says workstation Ampere)
    return "".join(tokens), memory  # "RTX 6000" -> RTX6000, "A100 40GB" -> A100


def _from_type_name(type_name: str) -> str:
    parts = type_name.split("_")  # gpu_<n>x_<model>[_<form factor>]
    return (parts[2] if len(parts) >= 3 else type_name).upper()


def same_gpu(asked: str, offered: str) -> bool:
    """Does a user's `--gpu` (any spelling) name the offered canonical GPU?"""
    return normalize_gpu(asked)[0] == offered.upper()

"""The simulated `nvidia-smi` put on GPU machines (no GPU exists here; the script says so)."""

from __future__ import annotations

import uuid

from fakeclouds.catalog import DRIVER_VERSION, InstanceType

_TEMPLATE = r"""#!/usr/bin/env bash
# SIMULATED nvidia-smi, written by gpuprov's fakeclouds for a {type} machine.
# There is no GPU here: it prints what that instance type's GPUs report.
NAMES=({names})
UUIDS=({uuids})
MEM={mem}
DRIVER="{driver}"
query=""; header=1; units=1; list=0
for a in "$@"; do
  case "$a" in
    --query-gpu=*) query="${{a#--query-gpu=}}" ;;
    --format=*) fmt="${{a#--format=}}"
      [[ $fmt == *noheader* ]] && header=0
      [[ $fmt == *nounits* ]] && units=0 ;;
    -L|--list-gpus) list=1 ;;
  esac
done
field() {{
  case "$2" in
    index) echo "$1" ;;
    name|gpu_name) echo "${{NAMES[$1]}}" ;;
    memory.total) if [[ $units == 1 ]]; then echo "$MEM MiB"; else echo "$MEM"; fi ;;
    uuid|gpu_uuid) echo "${{UUIDS[$1]}}" ;;
    driver_version) echo "$DRIVER" ;;
    count) echo "${{#NAMES[@]}}" ;;
    *) echo "[Not Supported]" ;;
  esac
}}
if [[ $list == 1 ]]; then
  for i in "${{!NAMES[@]}}"; do echo "GPU $i: ${{NAMES[$i]}} (UUID: ${{UUIDS[$i]}})"; done
  exit 0
fi
if [[ -n $query ]]; then
  IFS=',' read -ra fields <<< "$query"
  if [[ $header == 1 ]]; then
    hdr=""
    for f in "${{fields[@]}}"; do
      h="$f"; [[ $f == memory.total && $units == 1 ]] && h="memory.total [MiB]"
      hdr+="${{hdr:+, }}$h"
    done
    echo "$hdr"
  fi
  for i in "${{!NAMES[@]}}"; do
    line=""
    for f in "${{fields[@]}}"; do line+="${{line:+, }}$(field "$i" "$f")"; done
    echo "$line"
  done
  exit 0
fi
echo "NVIDIA-SMI (simulated)   Driver Version: $DRIVER"
for i in "${{!NAMES[@]}}"; do echo "GPU $i: ${{NAMES[$i]}}  ${{MEM}}MiB"; done
"""


def gpu_uuids(machine_id: str, count: int) -> list[str]:
    return [f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'fakeclouds/{machine_id}/{i}')}" for i in range(count)]


def script_for(itype: InstanceType, machine_id: str) -> str:
    assert itype.gpu is not None
    gpu = itype.gpu
    quoted = " ".join(f'"{gpu.smi_name}"' for _ in range(gpu.count))
    uuids = " ".join(f'"{u}"' for u in gpu_uuids(machine_id, gpu.count))
    return _TEMPLATE.format(type=itype.name, names=quoted, uuids=uuids, mem=gpu.memory_mib,
                            driver=DRIVER_VERSION)

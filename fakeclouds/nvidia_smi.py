"""The simulated `nvidia-smi` put on GPU machines (no GPU exists here; the script says so).

Utilisation is SIMULATED and scripted: every GPU reports the percent written in
`$HOME/.simulated-gpu-utilization` (0 when the file is absent — nothing runs on a GPU that is not
there), and `memory.used` that share of its memory. A test's job writes the file to play a busy GPU."""

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
UTIL=0
[[ -r "$HOME/.simulated-gpu-utilization" ]] && read -r UTIL < "$HOME/.simulated-gpu-utilization"
[[ $UTIL =~ ^[0-9]+$ && $UTIL -le 100 ]] || UTIL=0
USED=$(( MEM * UTIL / 100 ))
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
    memory.used) if [[ $units == 1 ]]; then echo "$USED MiB"; else echo "$USED"; fi ;;
    utilization.gpu) if [[ $units == 1 ]]; then echo "$UTIL %"; else echo "$UTIL"; fi ;;
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
      h="$f"
      [[ $units == 1 && ( $f == memory.total || $f == memory.used ) ]] && h="$f [MiB]"
      [[ $units == 1 && $f == utilization.gpu ]] && h="utilization.gpu [%]"
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


# SIMULATED: the NVIDIA container runtime's presence is all the simulated k3s looks for
# (fakeclouds/k3s.py).
CONTAINER_RUNTIME = """#!/bin/sh
# SIMULATED nvidia-container-runtime, written by gpuprov's fakeclouds: no container runs here.
echo "simulated nvidia-container-runtime: no containers run on a simulated machine" >&2
exit 1
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

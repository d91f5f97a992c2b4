"""Where an open allocation's worker memory goes, from the two tracemalloc snapshots bench.memory
has the worker write when GPUPROV_BENCH_HEAP_DIR is set (before and after opening its allocations):

    GPUPROV_BENCH_HEAP_DIR=/tmp/heap python -m bench --only d
    python -m bench.heap /tmp/heap [--per N] [--top 25]

prints the Python heap's growth by file and line, per open allocation with `--per N` (N: the run's
open allocations). What tracemalloc does not see (the Rust core's state, the allocator's
fragmentation) is the RSS figure minus this one."""

from __future__ import annotations

import argparse
import tracemalloc
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.heap")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--per", type=int, default=1, help="divide by this many open allocations")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--by", choices=["filename", "lineno", "traceback"], default="lineno")
    parser.add_argument("--garbage", action="store_true", help="what a full collection freed instead")
    args = parser.parse_args()
    first, what = (("heap-2-collected", "garbage in cycles at the second snapshot") if args.garbage
                   else ("heap-1", "python heap growth"))
    before = tracemalloc.Snapshot.load(str(args.directory / f"{first}.snap"))
    after = tracemalloc.Snapshot.load(str(args.directory / "heap-2.snap"))
    stats = after.compare_to(before, args.by)
    total = sum(s.size_diff for s in stats)
    print(f"{what}: {total / 1024:.0f} KB, {total / 1024 / args.per:.1f} KB per open allocation")
    for s in stats[: args.top]:
        lines = s.traceback.format()
        where = "\n    ".join(lines) if args.by == "traceback" else lines[-1].strip()
        print(f"{s.size_diff / 1024 / args.per:8.1f} KB {s.count_diff / args.per:7.1f} objs  {where}")


if __name__ == "__main__":
    main()

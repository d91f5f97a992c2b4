"""`python -m bench` (or `make bench`): prints both ratios, measured side by side in one run.

    --latency S      fixed latency added to every simulated Lambda call (default 0.05)
    --rounds N       allocations per side for the overhead ratio (median; default 5)
    --concurrency N  concurrent allocations for the throughput ratio (default 200)
"""

from __future__ import annotations

import argparse
import asyncio

from bench import overhead, throughput
from bench.harness import bench_stack


async def main(args: argparse.Namespace) -> None:
    async with bench_stack(boot_delay=args.boot_delay) as b:
        o = await overhead.run(b, latency_s=args.latency, rounds=args.rounds)
        per_call = f"{o['latency_s'] * 1000:.0f} ms per call, boot {args.boot_delay}s"
        print(f"(a) orchestration overhead, {per_call}: "
              f"workflow {o['workflow_s']:.3f}s / direct {o['direct_s']:.3f}s = {o['ratio']:.2f}x")
        t = await throughput.run(b, concurrency=args.concurrency)
        print(f"(b) throughput, {t['concurrency']} concurrent: {t['allocations_per_s']:.1f} allocations/s / "
              f"{t['bare_workflows_per_s']:.1f} bare workflows/s ({t['activities_per_allocation']} trivial "
              f"activities each) = {t['ratio']:.2f}; {t['failed']} of {t['concurrency']} allocations failed")
        print("    where the time goes (median scheduled->closed; retries over all allocations):")
        for name, row in t["timings"].items():
            print(f"    {name:<22} {row['latency_s']:6.3f}s  retries {row['retries']:.0f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--boot-delay", type=float, default=0.5)
    asyncio.run(main(parser.parse_args()))

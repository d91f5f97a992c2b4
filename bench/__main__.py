"""`python -m bench` (or `make bench`): prints every figure, measured side by side in one run.

    --latency S         fixed latency added to every simulated cloud call for (a) (default 0.05)
    --rounds N          allocations per side for the overhead ratio (their boots spread over one
                        poll period; mean), workflows per side for the step figure (median); default 5
    --concurrency N     concurrent allocations for the throughput ratio and CPU figures (default 200)
    --boot-delay S      simulated boot time (default 0.5)
    --open N            allocations held open (booting) for the memory figure; 0 skips (d) (default 200)
    --idle-window S     how long the idle CPU of the open allocations is sampled (default 10)
    --idle-settle S     how long they have been booting when it starts (default 60)
    --watch-machines N  ready machines on one connection for the watch figure; 0 skips it (default 1000)
    --scale N           concurrent allocations on one worker for the scale figure; 0 skips it (default 1000)
    --api-rows N        instances seeded for the API figure (with jobs, workloads, spend); 0 skips it
    --capacity N        allocations per side for the capacity-memory figure; 0 skips it (default 20)
    --capacity-latency S  how long each simulated create takes to answer there (default 0.5)
    --paced N           allocations at once on one paced Lambda key for the paced figure (their plans,
                        their boot polls, their teardowns); 0 skips it (default 50)
    --only a,step,e,bc,paced,d,watch,scale,api,capacity   only these figures (default: all, in that order)

GPUPROV_TEMPORAL_BIN: the Temporal CLI (default .venv/bin/temporal of this checkout).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable

from bench import (
    api_scale,
    capacity,
    memory,
    offers,
    overhead,
    paced,
    scale,
    step_latency,
    throughput,
    watch_scale,
)
from bench.harness import OVERHEAD_CLOUDS, Bench, bench_stack

ALLOCATION_SIDE = ("worker", "temporal", "cloud")  # the processes (c) totals (not the bench client)
BARE_SIDE = ("worker", "temporal")


def fmt(cpu: dict[str, float], names: tuple[str, ...]) -> str:
    """"worker 0.52, temporal 0.39, total 0.91" over `names` (the bench client is not in the total)."""
    parts = [f"{n} {cpu[n]:.2f}" for n in names]
    return ", ".join([*parts, f"total {sum(cpu[n] for n in names):.2f}"])


async def overhead_figures(b: Bench, args: argparse.Namespace) -> None:
    for cloud in OVERHEAD_CLOUDS:
        o = await overhead.run(b, cloud=cloud, latency_s=args.latency, rounds=args.rounds)
        boots = f"boots {o['boot_min_s']:.2f}-{o['boot_max_s']:.2f}s"
        per_call = f"{o['latency_s'] * 1000:.0f} ms per call, {boots}, mean of {args.rounds}"
        print(f"(a) orchestration overhead on {cloud}, {per_call}: "
              f"workflow {o['workflow_s']:.3f}s / direct {o['direct_s']:.3f}s = {o['ratio']:.2f}x "
              f"(target <= 1.15)")


async def step_figure(b: Bench, args: argparse.Namespace) -> None:
    # Dev servers of its own (bench/step_latency.py), beside the bench stack's (on the project's flags).
    for line in step_latency.report(await step_latency.run(rounds=args.rounds)):
        print(line)


async def offers_figure(b: Bench, args: argparse.Namespace) -> None:
    x = await offers.run(b, latency_s=args.latency, rounds=args.rounds)
    failed = f"; no answer from {', '.join(x['failed'])}" if x["failed"] else ""
    print(f"(e) cross-cloud offers, {len(x['clouds'])} clouds, {args.latency * 1000:.0f} ms per call: "
          f"cold {x['cold_s']:.3f}s / slowest cloud alone {x['slowest_s']:.3f}s = {x['ratio']:.2f}x "
          f"(goal <= 1.2); warm (cached) p50 {x['warm_p50_ms']:.2f} ms{failed}")


async def throughput_figures(b: Bench, args: argparse.Namespace) -> None:
    t = await throughput.run(b, concurrency=args.concurrency)
    print(f"(b) throughput, {t['concurrency']} concurrent: {t['allocations_per_s']:.1f} allocations/s / "
          f"{t['bare_workflows_per_s']:.1f} bare workflows/s ({t['activities_per_allocation']} trivial "
          f"activities each, same sandboxed runner) = {t['ratio']:.2f} (target >= 0.7); "
          f"{t['failed']} of {t['concurrency']} allocations failed")
    print("    where the time goes (median scheduled->closed; retries over all allocations):")
    for name, row in t["timings"].items():
        print(f"    {name:<22} {row['latency_s']:6.3f}s  retries {row['retries']:.0f}")
    calls = t["cloud_calls_per_allocation"]
    print(f"    cloud calls per allocation (at the simulation): {sum(calls.values()):.2f} — "
          + ", ".join(f"{k} {v:.2f}" for k, v in calls.items()))
    alloc, bare = t["cpu_per_allocation"], t["cpu_per_bare_workflow"]
    print(f"(c) CPU-seconds per allocation: {fmt(alloc, ALLOCATION_SIDE)} (target total "
          f"<= 0.20) | bare: {fmt(bare, BARE_SIDE)} "
          f"(bench client, not in totals: {alloc['client']:.2f} | {bare['client']:.2f})")
    # Both sides keep most of the box's cores busy (printed), so each rate is about those cores over its
    # CPU per unit, and (b) about the bare's CPU over the allocation's: what (b) >= 0.7 asks of (c).
    alloc_cpu, bare_cpu = sum(alloc[n] for n in ALLOCATION_SIDE), sum(bare[n] for n in BARE_SIDE)
    print(f"    (b) from (c): cores kept busy {t['allocations_per_s'] * alloc_cpu:.2f} by the allocations, "
          f"{t['bare_workflows_per_s'] * bare_cpu:.2f} by the bare workflows; bare CPU / allocation CPU = "
          f"{bare_cpu:.3f} / {alloc_cpu:.3f} = {bare_cpu / alloc_cpu:.2f} (read {t['ratio']:.2f}); "
          f"(b) >= 0.7 would take an allocation at {bare_cpu / 0.7:.3f} CPU-s or less")


async def paced_figure(b: Bench, args: argparse.Namespace) -> None:
    p = await paced.run(b, n=args.paced)
    for what, said in (("plans", "plans"), ("polls", "machines' boot polls"),
                       ("teardowns", f"machines' teardowns ({paced.TERMINATING_S:g} s terminating)")):
        own, shared = p[what]["own"], p[what]["shared"]
        print(f"(paced) {p['n']} {said} at once on one Lambda key (paced at {p['scale']:g}x its "
              f"1 request/s): a call each {own['calls']:.0f} calls, the median answered at "
              f"{own['median_s']:.2f} s, the last at {own['last_s']:.2f} s; sharing {shared['calls']:.0f} "
              f"calls, {shared['median_s']:.2f} s, {shared['last_s']:.2f} s (at the real rate the pacer's "
              f"waits alone: ~{own['calls'] - 1:.0f} s -> ~{shared['calls'] - 1:.0f} s)")


async def memory_figures(b: Bench, args: argparse.Namespace) -> None:
    m = await memory.run(b, open_allocations=args.open, window_s=args.idle_window, settle_s=args.idle_settle)
    idle = m["idle_ms_per_s"]
    print(f"(d) worker RSS per open allocation: {m['rss_per_open_kb']:,.0f} KB over the first {m['open']}, "
          f"{m['rss_per_next_open_kb']:,.0f} KB over the next {m['open']} (target <= 200) (RSS "
          f"{m['rss_before_kb'] / 1024:.0f} MB -> {m['rss_open_kb'] / 1024:.0f} MB -> "
          f"{m['rss_next_open_kb'] / 1024:.0f} MB; the first also pay the worker's one-off growth to serve "
          f"that many at once); {m['cancelled']} of {2 * m['open']} then cancelled cleanly")
    print(f"    idle while open ({args.idle_window:.0f}s, from {args.idle_settle:.0f}s into the boot; "
          f"{memory.TIMING.poll_interval_s:g} s poll at first, growing to the cloud's ceiling), "
          f"ms CPU per second per open allocation: worker {idle['worker']:.1f} (target <= 0.5), "
          f"temporal {idle['temporal']:.1f}, cloud {idle['cloud']:.1f}")
    f = await memory.bare_floor(b, open_workflows=args.open)
    print(f"    its floor: {f['rss_per_open_kb']:,.0f} KB, then {f['rss_per_next_open_kb']:,.0f} KB per "
          f"open bare workflow holding one heartbeating activity after {memory.ACTIVITIES_BEFORE_BOOT} "
          f"trivial ones, same runner and slots (RSS {f['rss_before_kb'] / 1024:.0f} MB -> "
          f"{f['rss_open_kb'] / 1024:.0f} MB -> {f['rss_next_open_kb'] / 1024:.0f} MB): the allocation's own "
          f"{m['rss_per_open_kb'] - f['rss_per_open_kb']:,.0f}, then "
          f"{m['rss_per_next_open_kb'] - f['rss_per_next_open_kb']:,.0f} KB above it")


async def watch_figure(b: Bench, args: argparse.Namespace) -> None:
    for line in watch_scale.report(await watch_scale.run(b, machines=args.watch_machines)):
        print(line)


async def scale_figure(b: Bench, args: argparse.Namespace) -> None:
    for line in scale.report(await scale.run(b, allocations=args.scale)):
        print(line)


async def api_figure(b: Bench, args: argparse.Namespace) -> None:
    # The API's own processes and databases (PostgreSQL and SQLite), apart from the bench stack's.
    for line in api_scale.report(await api_scale.run(rows=args.api_rows, clients=8)):
        print(line)


async def capacity_figure(b: Bench, args: argparse.Namespace) -> None:
    for line in capacity.report(await capacity.run(b, allocations=args.capacity,
                                                   latency_s=args.capacity_latency)):
        print(line)


# Each figure by name (--only picks some), in the order a full run prints them.
FIGURES: dict[str, Callable[[Bench, argparse.Namespace], Awaitable[None]]] = {
    "a": overhead_figures, "step": step_figure, "e": offers_figure, "bc": throughput_figures,
    "paced": paced_figure,
    "d": memory_figures, "watch": watch_figure, "scale": scale_figure, "api": api_figure,
    "capacity": capacity_figure,
}


async def main(args: argparse.Namespace) -> None:
    chosen = args.only.split(",") if args.only else list(FIGURES)
    unknown = [name for name in chosen if name not in FIGURES]
    if unknown:
        raise SystemExit(f"--only: unknown figure(s) {', '.join(unknown)}; choose from {', '.join(FIGURES)}")
    async with bench_stack(boot_delay=args.boot_delay) as b:
        skipped = {"d": not args.open, "watch": not args.watch_machines, "scale": not args.scale,
                   "api": not args.api_rows, "capacity": args.capacity < 2,
                   "paced": not args.paced}
        for name in chosen:
            if skipped.get(name):
                continue  # its count was 0
            await FIGURES[name](b, args)


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # each figure as it is measured
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--boot-delay", type=float, default=0.5)
    parser.add_argument("--open", type=int, default=200)
    parser.add_argument("--idle-window", type=float, default=10.0)
    parser.add_argument("--idle-settle", type=float, default=60.0)
    parser.add_argument("--watch-machines", type=int, default=1000)
    parser.add_argument("--scale", type=int, default=1000)
    parser.add_argument("--api-rows", type=int, default=10_000)
    parser.add_argument("--capacity", type=int, default=20)
    parser.add_argument("--paced", type=int, default=50)
    parser.add_argument("--capacity-latency", type=float, default=0.5)
    parser.add_argument("--only", help=f"comma-separated figures among {', '.join(FIGURES)} (default: all)")
    asyncio.run(main(parser.parse_args()))

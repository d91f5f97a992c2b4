"""What an allocation's record writes cost the worker, called in this process on SQLite (as the
bench's worker writes), each in a fresh session as the activities open one: median ms per call.

    python -m bench.records_direct [--calls 2000]

`mark_phases` is every step's phase mark (the ride-along marks of wait_running and set-up's steps);
`record_allocation` the snapshot validate, wait_running and ready write. (c)'s worker CPU per
allocation swings ±10 % between runs on a 2-core box, more than either write moves it: this is the
figure to compare a change of them by, side by side."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cryptography.fernet import Fernet

from activities.deps import ActivityDeps
from activities.records import record_allocation
from messages.activities import RecordAllocationInput
from messages.allocation import AllocateRequest, AllocationState, AttemptRecord
from messages.enums import AllocationStatus, AttemptOutcome, Phase
from providers.base import InstanceRef, Offer
from store import instances, migrate, spend
from store.db import make_engine, session_scope
from store.models import Instance, utcnow
from store.secrets import SecretBox

STEPS = ("plan", "create", "wait_running", "ssh", "k3s")


def snapshot(allocation_id: str) -> RecordAllocationInput:
    """A booting allocation's snapshot: one attempt created, the machine's ref known."""
    offer = Offer(provider="lambda", instance_type="gpu_1x_a10", vcpus=30, memory_gib=200,
                  region="us-east-1", price_per_hour=0.75, connection_id="c1")
    state = AllocationState(
        allocation_id=allocation_id, phase=Phase.WAIT_RUNNING, offer=offer,
        attempts=[AttemptRecord(seq=1, offer=offer, key=f"k-{allocation_id}",
                                outcome=AttemptOutcome.CREATED)],
        ref=InstanceRef(provider="lambda", instance_id=f"i-{allocation_id}", key=f"k-{allocation_id}"))
    request = AllocateRequest(allocation_id=allocation_id, connection_id="c1", cloud="lambda",
                              ssh_public_keys=["ssh-ed25519 AAAA fake-bench"])
    return RecordAllocationInput(request=request, state=state, status=AllocationStatus.PROVISIONING)


def median_ms(calls: int, call: Callable[[int], None]) -> float:
    times = []
    for i in range(calls):
        t0 = time.perf_counter()
        call(i)
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times[calls // 10:])  # the first tenth warms the caches


def main(calls: int) -> None:
    with tempfile.TemporaryDirectory(prefix="gpuprov-records-") as tmp:
        engine = make_engine(f"sqlite:///{Path(tmp) / 'records.db'}")
        migrate.upgrade(engine)
        with session_scope(engine) as s:
            for i in range(calls):
                s.add(Instance(id=f"a{i}", provider="lambda", connection_id="c1", workflow_id=f"w{i}",
                               status="provisioning", phase="validate"))
            s.commit()
            for i in range(calls):  # as the create activity opens each attempt's interval
                spend.open_interval(s, key=f"k-a{i}", instance_id=f"a{i}", project="default",
                                    connection_id="c1", provider="lambda", rate_per_hour=0.75,
                                    started_at=utcnow())
        deps = ActivityDeps(engine=engine, box=SecretBox(Fernet.generate_key()), installation_id="bench")

        def mark(i: int) -> None:
            with session_scope(engine) as s:
                instances.mark_phases(s, f"a{i}", [("provisioning", STEPS[i % 5]),
                                                   ("provisioning", STEPS[(i + 1) % 5])])

        print(f"mark_phases       {median_ms(calls, mark):6.2f} ms per call (median of {calls})")
        record = median_ms(calls, lambda i: record_allocation(deps, snapshot(f"a{i}")))
        print(f"record_allocation {record:6.2f} ms per call (median of {calls}; "
              "the snapshot's validation included)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.records_direct")
    parser.add_argument("--calls", type=int, default=2000)
    main(parser.parse_args().calls)

"""activities/cloud.py terminate_refs: a delete the cloud answered and dropped is issued again while
the machine still shows alive, and the teardown ends only once the cloud shows it gone."""

from __future__ import annotations

import functools

from temporalio.testing import ActivityEnvironment

from activities.cloud import terminate_refs
from providers.base import InstanceRef, InstanceState, InstanceStatus


class DroppedDeleteFakeProvider:
    """Fake: answers every delete, acts on the second only; the machine shows running until then."""

    def __init__(self) -> None:
        self.terminates = 0
        self.gets = 0

    async def terminate(self, ref: InstanceRef) -> None:
        self.terminates += 1

    async def get(self, ref: InstanceRef) -> InstanceStatus | None:
        self.gets += 1
        return None if self.terminates >= 2 else InstanceStatus(ref=ref, state=InstanceState.RUNNING)


async def test_a_dropped_delete_is_issued_again_until_the_machine_is_gone() -> None:
    cloud = DroppedDeleteFakeProvider()
    ref = InstanceRef(provider="fake", instance_id="i-1", key="gp-x-a1")
    run = functools.partial(terminate_refs, cloud, [ref], poll_interval_s=0.001,  # type: ignore[arg-type]
                            heartbeat_every_s=5.0)
    await ActivityEnvironment().run(run)
    assert cloud.terminates == 2  # issued again once, and no more once gone
    assert cloud.gets >= 2  # polled alive between the two, then seen gone

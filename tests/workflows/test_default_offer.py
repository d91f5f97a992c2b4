"""A backend's picked default offer reaches planning: the allocation considers only that instance type
(in the region the API filled in), not the cheapest offer of the cloud."""

from __future__ import annotations

from typing import Any

from temporalio.client import Client

from messages.enums import Phase
from tests.fakes import FakeCloud
from tests.workflows.conftest import settled, start_allocate


async def test_planning_considers_only_the_requested_instance_type(temporal_client: Client,
                                                                   fake_cloud: FakeCloud,
                                                                   make_request: Any) -> None:
    # cpu.small (0.05) and gpu.1x (0.5) are cheaper; only gpu.2x is considered.
    req = make_request(instance_type="gpu.2x", region="r1")
    st = await settled(await start_allocate(temporal_client, req))
    assert st.phase == Phase.READY and st.offer is not None
    assert (st.offer.instance_type, st.offer.region) == ("gpu.2x", "r1")
    assert [a.offer.instance_type for a in st.attempts] == ["gpu.2x"]

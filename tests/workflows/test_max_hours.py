"""An allocation's max_hours through AllocationWorkflow (in-process worker, real activities,
FakeInMemoryProvider): on a cloud that enforces a lifetime it reaches the adapter's LaunchSpec as
whole seconds; on one that does not, validation fails with the cloud's reason and nothing is made."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from messages.enums import Phase
from tests.fakes import FakeCloud, FakeInMemoryProvider
from tests.workflows.conftest import settled, start_allocate, terminate


@pytest.fixture
def fake_stops_machines_after_24h(monkeypatch: pytest.MonkeyPatch) -> None:
    caps = FakeInMemoryProvider.capabilities.model_copy(update={"max_lifetime_h": 24.0})
    monkeypatch.setattr(FakeInMemoryProvider, "capabilities", caps)


async def test_max_hours_reaches_the_launch_spec_in_seconds(
        temporal_client: Client, fake_cloud: FakeCloud, make_request: Any,
        fake_stops_machines_after_24h: None) -> None:
    req = make_request(max_hours=2)
    st = await settled(await start_allocate(temporal_client, req))
    assert st.phase == Phase.READY and st.ref is not None
    assert fake_cloud.machines[st.ref.instance_id].spec.lifetime_s == 7200
    await terminate(temporal_client, req.allocation_id)

    plain = make_request()
    st = await settled(await start_allocate(temporal_client, plain))
    assert st.ref is not None and fake_cloud.machines[st.ref.instance_id].spec.lifetime_s is None
    await terminate(temporal_client, plain.allocation_id)


async def test_max_hours_on_a_cloud_without_a_lifetime_fails_validation_with_the_reason(
        temporal_client: Client, fake_cloud: FakeCloud, make_request: Any) -> None:
    handle = await start_allocate(temporal_client, make_request(max_hours=2))
    with pytest.raises(WorkflowFailureError) as info:
        await settled(handle)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "Unsupported" and cause.non_retryable
    assert "--max-hours needs a cloud that stops a machine itself" in cause.message
    assert "Fake cloud does not" in cause.message
    assert fake_cloud.create_calls == 0

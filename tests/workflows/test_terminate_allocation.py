"""The terminate_allocation activity (disconnect, acceptance) against a stand-in Temporal client:
an allocation that closes while its terminate update is in flight is done, not a failed attempt.
(make fuzz: an acceptance run's terminate raced its allocation's failure; Temporal answered
"workflow update was aborted", UNAVAILABLE, and the attempt failed and was retried.)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import ActivityEnvironment

from activities.connections import ConnectionActivities
from activities.deps import ActivityDeps
from messages.activities import TerminateAllocationInput
from store.secrets import SecretBox

ABORTED = RPCError("workflow update was aborted", RPCStatusCode.UNAVAILABLE, b"")


@dataclass
class FakeDescription:
    status: WorkflowExecutionStatus


class FakeTemporalClient:
    """One workflow: its terminate update fails with `update_error`; describe answers `status`
    (or raises `describe_error`)."""

    def __init__(self, update_error: RPCError, status: WorkflowExecutionStatus | None = None,
                 describe_error: RPCError | None = None) -> None:
        self.update_error, self.status, self.describe_error = update_error, status, describe_error
        self.described = 0

    def get_workflow_handle(self, workflow_id: str) -> FakeTemporalClient:
        return self

    async def execute_update(self, name: str, **kwargs: Any) -> None:
        raise self.update_error

    async def describe(self) -> FakeDescription:
        self.described += 1
        if self.describe_error is not None:
            raise self.describe_error
        assert self.status is not None
        return FakeDescription(self.status)


async def terminate(client: FakeTemporalClient) -> None:
    deps = ActivityDeps(engine=sa.create_engine("sqlite://"), box=SecretBox(Fernet.generate_key()),
                        installation_id="inst0001", client=client)  # type: ignore[arg-type]
    await ActivityEnvironment().run(ConnectionActivities(deps).terminate_allocation,
                                    TerminateAllocationInput(workflow_id="allocation-a1"))


@pytest.mark.parametrize("status", [WorkflowExecutionStatus.COMPLETED, WorkflowExecutionStatus.FAILED,
                                    WorkflowExecutionStatus.TERMINATED])
async def test_an_update_aborted_as_the_allocation_closed_is_done(status: WorkflowExecutionStatus) -> None:
    client = FakeTemporalClient(ABORTED, status)
    await terminate(client)
    assert client.described == 1


async def test_an_update_that_failed_while_the_allocation_is_open_is_retried() -> None:
    with pytest.raises(RPCError, match="aborted"):
        await terminate(FakeTemporalClient(ABORTED, WorkflowExecutionStatus.RUNNING))
    # and when whether it closed cannot be told now (the server unreachable), the first error stands
    with pytest.raises(RPCError, match="aborted"):
        down = RPCError("down", RPCStatusCode.UNAVAILABLE, b"")
        await terminate(FakeTemporalClient(ABORTED, describe_error=down))


async def test_a_closed_allocation_needs_no_describe() -> None:
    closed = RPCError("workflow execution already completed", RPCStatusCode.NOT_FOUND, b"")
    client = FakeTemporalClient(closed)
    await terminate(client)
    assert client.described == 0

"""TemporalGateway.request_update against a stand-in client: which Temporal answers are sent again."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.service import RPCError, RPCStatusCode

from api.temporal import TemporalGateway, WorkflowUnavailable
from messages import workflows as wf


class FakeUpdateHandle:
    """Records each update sent; answers with the errors it is given, in order, then accepts."""

    def __init__(self, errors: list[Exception]) -> None:
        self.errors, self.sent = errors, 0

    def get_workflow_handle(self, workflow_id: str) -> FakeUpdateHandle:
        return self

    async def start_update(self, update: str, **kwargs: Any) -> None:
        self.sent += 1
        if self.errors:
            raise self.errors.pop(0)


def _gateway(errors: list[Exception],
             monkeypatch: pytest.MonkeyPatch) -> tuple[TemporalGateway, FakeUpdateHandle]:
    monkeypatch.setattr("api.temporal.UPDATE_RETRY_DELAYS_S", (0, 0, 0))
    gateway, fake = TemporalGateway("unused", "default", "q", keys=[]), FakeUpdateHandle(errors)
    gateway._client = fake
    return gateway, fake


def _rpc(status: RPCStatusCode, message: str) -> RPCError:
    return RPCError(message, status, b"")


NOT_READY = "Unable to perform workflow execution update due to unexpected workflow task failure."


async def test_an_update_whose_workflow_task_failed_is_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    gateway, fake = _gateway([_rpc(RPCStatusCode.FAILED_PRECONDITION, NOT_READY)] * 2, monkeypatch)
    assert await gateway.request_update("allocation-x", wf.ALLOCATION.terminate) is True and fake.sent == 3
    gateway, fake = _gateway([_rpc(RPCStatusCode.FAILED_PRECONDITION, NOT_READY)] * 4, monkeypatch)
    with pytest.raises(WorkflowUnavailable, match="workflow task failure"):
        await gateway.request_update("allocation-x", wf.ALLOCATION.terminate)
    assert fake.sent == 4  # bounded: then a 503
    gateway, fake = _gateway([_rpc(RPCStatusCode.UNAVAILABLE, "down")], monkeypatch)
    with pytest.raises(WorkflowUnavailable):
        await gateway.request_update("allocation-x", wf.ALLOCATION.terminate)
    assert fake.sent == 1  # only the not-accepted case is sent again
    gateway, fake = _gateway([_rpc(RPCStatusCode.NOT_FOUND, "closed")], monkeypatch)
    assert await gateway.request_update("allocation-x", wf.ALLOCATION.terminate) is False

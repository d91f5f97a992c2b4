"""Starting, updating, signalling and querying a workflow from outside one — the API's gateway
(api/temporal.py), activities, bench — by its reference (messages/workflows.py). One way whoever
calls: the names and the result types come from the reference, the id policies from two flags.

Inside a workflow, workflows/calls.py does the same for activities and child workflows.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio.client import (
    Client,
    ScheduleActionStartWorkflow,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateStage,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from messages.workflows import QueryRef, SignalRef, UpdateRef, WorkflowRef

I = TypeVar("I", bound=BaseModel)  # noqa: E741
O = TypeVar("O")  # noqa: E741


def _policies(use_existing: bool, once: bool) -> dict[str, Any]:
    joins = use_existing or once
    conflict = WorkflowIDConflictPolicy.USE_EXISTING if joins else WorkflowIDConflictPolicy.FAIL
    reuse = WorkflowIDReusePolicy.REJECT_DUPLICATE if once else WorkflowIDReusePolicy.ALLOW_DUPLICATE
    return {"id_conflict_policy": conflict, "id_reuse_policy": reuse}


async def start(client: Client, ref: WorkflowRef[I, Any], arg: I, *, workflow_id: str, task_queue: str,
                use_existing: bool = False, once: bool = False, **options: Any) -> bool:
    """Start `ref`(arg) as `workflow_id`. `use_existing`: a running run of that id is joined (its input
    stands) instead of refused. `once`: also joins a running run, and an id whose run has closed
    is never run again — nothing starts and the answer is False. True: a run of that id is open
    (this call's or the one it joined). `options`: start_workflow's (timeouts, search attributes)."""
    try:
        await client.start_workflow(ref.name, arg, id=workflow_id, task_queue=task_queue,
                                    **_policies(use_existing, once), **options)
    except WorkflowAlreadyStartedError:
        if once:
            return False  # it ran and closed: it is not run again
        raise
    return True


async def execute(client: Client, ref: WorkflowRef[I, O], arg: I, *, workflow_id: str, task_queue: str,
                  attach: bool = False, execution_timeout_s: float | None = None, **options: Any) -> O:
    """Start and wait for the result. `attach`: a running run of that id is joined and its result
    returned (a retried request waits for the first one's answer)."""
    if execution_timeout_s is not None:
        options["execution_timeout"] = timedelta(seconds=execution_timeout_s)
    conflict = WorkflowIDConflictPolicy.USE_EXISTING if attach else WorkflowIDConflictPolicy.FAIL
    result: O = await client.execute_workflow(ref.name, arg, id=workflow_id, task_queue=task_queue,
                                              result_type=ref.output, id_conflict_policy=conflict, **options)
    return result


def handle(client: Client, workflow_id: str) -> WorkflowHandle[Any, Any]:
    return client.get_workflow_handle(workflow_id)


async def update(client: Client, workflow_id: str, ref: UpdateRef[O]) -> O:
    """Send the update and wait for its result (RPCError NOT_FOUND: the workflow has closed)."""
    result: O = await handle(client, workflow_id).execute_update(ref.name, result_type=ref.output)
    return result


async def status(client: Client, workflow_id: str) -> WorkflowExecutionStatus | None:
    """The workflow's status (its latest run's); None: no such workflow (RPCError NOT_FOUND). Any
    other RPCError is raised."""
    try:
        described = await handle(client, workflow_id).describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    return described.status


async def request_update(client: Client, workflow_id: str, ref: UpdateRef[Any]) -> None:
    """Send the update and return once the workflow accepted it, without waiting for its result."""
    await handle(client, workflow_id).start_update(ref.name, wait_for_stage=WorkflowUpdateStage.ACCEPTED)


async def signal(client: Client, workflow_id: str, ref: SignalRef[I], arg: I | None = None) -> None:
    if (arg is None) != (ref.input is None):
        raise TypeError(f"signal {ref.name} takes {ref.input.__name__ if ref.input else 'no argument'}")
    target = handle(client, workflow_id)
    await (target.signal(ref.name) if arg is None else target.signal(ref.name, arg))


async def query(client: Client, workflow_id: str, ref: QueryRef[O]) -> O:
    result: O = await handle(client, workflow_id).query(ref.name, result_type=ref.output)
    return result


def schedule_action(ref: WorkflowRef[I, Any], arg: I, *, workflow_id: str, task_queue: str,
                    **options: Any) -> ScheduleActionStartWorkflow:
    """What a Temporal Schedule starts each time: `ref`(arg) as `workflow_id` (+ the time)."""
    return ScheduleActionStartWorkflow(ref.name, arg, id=workflow_id, task_queue=task_queue, **options)

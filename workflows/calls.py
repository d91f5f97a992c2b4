"""Calling an activity or a child workflow from a workflow by its reference (messages/activities.py,
messages/workflows.py): the name and the result type come from the reference, so workflows never
import activity implementations, and a child is addressed as every other caller addresses it."""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio import workflow

from messages.activities import ActivityRef
from messages.workflows import WorkflowRef

I = TypeVar("I", bound=BaseModel)  # noqa: E741
O = TypeVar("O")  # noqa: E741


async def call(ref: ActivityRef[I, O], arg: I, **options: Any) -> O:
    """`workflow.execute_activity` for `ref`; `options` are its timeouts, retry policy and so on."""
    result: O = await workflow.execute_activity(ref.name, arg, result_type=ref.output, **options)
    return result


async def local_call(ref: ActivityRef[I, O], arg: I, **options: Any) -> O:
    """`workflow.execute_local_activity` for `ref`: run by the workflow's own worker inside the
    workflow task, so it costs no activity dispatch and no workflow task of its own after it. For
    short, idempotent work only (a crash re-runs it; it cannot heartbeat)."""
    result: O = await workflow.execute_local_activity(ref.name, arg, result_type=ref.output, **options)
    return result


async def start_child(ref: WorkflowRef[I, O], arg: I, **options: Any) -> workflow.ChildWorkflowHandle[Any, O]:
    """`workflow.start_child_workflow` for `ref`; `options` are its id, timeouts, close policy. The
    child's failure is marked read once it ends (`outcome_read`), whether or not the caller awaits
    the handle: a caller may follow the child another way (its updates, its row)."""
    handle = await workflow.start_child_workflow(ref.name, arg, result_type=ref.output, **options)
    handle.add_done_callback(outcome_read)
    return handle


def outcome_read(ended: asyncio.Future[Any]) -> None:
    """Read `ended`'s failure, so nothing reports it as never retrieved: asyncio's loop — the
    workflow's too — logs a failed task dropped unread as an ERROR with a traceback, which for a
    child is a machine that did not come up, already told by the caller that follows it."""
    if not ended.cancelled():
        ended.exception()


async def child(ref: WorkflowRef[I, O], arg: I, **options: Any) -> O:
    """Run the child workflow `ref`(arg) to its result."""
    result: O = await workflow.execute_child_workflow(ref.name, arg, result_type=ref.output, **options)
    return result

"""Calling an activity from a workflow by its reference (messages/activities.py): the name and
the result type come from the reference, so workflows never import activity implementations."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio import workflow

from messages.activities import ActivityRef

I = TypeVar("I", bound=BaseModel)  # noqa: E741
O = TypeVar("O")  # noqa: E741


async def call(ref: ActivityRef[I, O], arg: I, **options: Any) -> O:
    """`workflow.execute_activity` for `ref`; `options` are its timeouts, retry policy and so on."""
    result: O = await workflow.execute_activity(ref.name, arg, result_type=ref.output, **options)
    return result

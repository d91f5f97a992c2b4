"""Workflow ids and the task queue: derived from ids gpuprov generates, never from user text."""

from __future__ import annotations

TASK_QUEUE = "gpuprov"


def allocate_workflow_id(allocation_id: str) -> str:
    return f"allocate-{allocation_id}"


def terminate_workflow_id(allocation_id: str) -> str:
    return f"terminate-{allocation_id}"


def connect_workflow_id(connection_id: str) -> str:
    return f"connect-{connection_id}"


def disconnect_workflow_id(connection_id: str) -> str:
    return f"disconnect-{connection_id}"

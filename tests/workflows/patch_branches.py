"""How a committed history shows that a `workflow.patched(...)` call was reached and returned False:
the old branch taken, as a run started before the patch existed records it.

A history without a patch's marker proves nothing by itself — most never reach the `patched` call
(an allocation on a cloud without a launch rate never asks about LAUNCH_QUEUE_PATCH). Each patch id
therefore names here what its old branch leaves in a history, read from the events alone (no
payload: the histories' payloads are encrypted by the test codec), and tests/workflows/test_replay.py
requires a committed history of which it holds. A new patch adds its entry.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.worker import PatchActivationInput

from messages import activities as acts
from messages import workflows as wf
from providers import registry
from workflows import search_attributes as sa
from workflows.acceptance import APPROVAL_DEADLINE_PATCH
from workflows.allocation import (
    CAPACITY_NOTES_PATCH,
    FEWER_TRIPS_PATCH,
    LAUNCH_QUEUE_PATCH,
    RECORDS_RIDE_PATCH,
)
from workflows.job import JOB_RETRY_PATCH

PATCH_MARKER = "core_patch"  # the marker temporalio records for workflow.patched / deprecate_patch


def fake_worker_before(patch_id: str) -> Callable[[PatchActivationInput], bool]:
    """FAKE: the `patch_activation_callback` of a worker from before `patch_id` existed — its first
    `patched` call for that id is False (no marker: the old branch), every other patch as usual
    (True). temporalio asks only on a run's first, non-replayed call: replays still follow the
    history, so a run recorded this way replays on the real worker like one started before the
    patch."""
    def answer(patch: PatchActivationInput) -> bool:
        return patch.patch_id != patch_id
    return answer


def workflow_type(history: WorkflowHistory) -> str:
    return history.events[0].workflow_execution_started_event_attributes.workflow_type.name


def patch_markers(history: WorkflowHistory) -> set[str]:
    """The patch ids a history marks (MarkerRecorded events of temporalio's patch marker)."""
    ids = set()
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED \
                and e.marker_recorded_event_attributes.marker_name == PATCH_MARKER:
            for payload in e.marker_recorded_event_attributes.details["patch-data"].payloads:
                ids.add(json.loads(payload.data)["id"])
    return ids


def creates(history: WorkflowHistory) -> list[tuple[str, str]]:
    """(cloud, task queue) of each `create_instance` the workflow scheduled, in order. The cloud is
    the provider search attribute the workflow upserts right before each create (search attributes
    are not encoded by the codec)."""
    cloud, found = "", []
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            fields = e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
            if sa.PROVIDER.name in fields:
                cloud = json.loads(fields[sa.PROVIDER.name].data)
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = e.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == acts.CREATE_INSTANCE.name:
                found.append((cloud, attrs.task_queue.name))
    return found


def launch_queue_old_branch(history: WorkflowHistory) -> bool:
    """LAUNCH_QUEUE_PATCH's `patched` is asked only for a cloud with a launch rate; its old branch
    schedules that cloud's create on the workflow's own task queue (the new: on the cloud's launch
    queue)."""
    own = history.events[0].workflow_execution_started_event_attributes.task_queue.name
    return LAUNCH_QUEUE_PATCH not in patch_markers(history) and any(
        queue == own and cloud in registry.known() and registry.capabilities(cloud).launches_per_s
        for cloud, queue in creates(history))


def scheduled(history: WorkflowHistory) -> list[str]:
    """The activity types the workflow scheduled, in order."""
    return [e.activity_task_scheduled_event_attributes.activity_type.name for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]


def records_ride_old_branch(history: WorkflowHistory) -> bool:
    """RECORDS_RIDE_PATCH's `patched` is asked by every allocation's first run (not one continued
    as new); its old branch schedules RECORD_ALLOCATION first, before VALIDATE_ALLOCATION (the new:
    validate first, the snapshot riding on it)."""
    started = history.events[0].workflow_execution_started_event_attributes
    return (workflow_type(history) == wf.ALLOCATION.name and not started.continued_execution_run_id
            and RECORDS_RIDE_PATCH not in patch_markers(history)
            and scheduled(history)[:2] == [acts.RECORD_ALLOCATION.name, acts.VALIDATE_ALLOCATION.name])


def capacity_notes_old_branch(history: WorkflowHistory) -> bool:
    """CAPACITY_NOTES_PATCH's `patched` is asked once planning has answered with offers it demoted
    (PlanResult.remembered, in an encrypted payload). A run from before the patch planned without it
    — its plan had no such field, which reads as nothing demoted, so the call is not reached — and
    the old branch is every allocation that planned (scheduled PLAN_ALLOCATION and then anything
    after it) without the marker."""
    done = scheduled(history)
    return (workflow_type(history) == wf.ALLOCATION.name
            and CAPACITY_NOTES_PATCH not in patch_markers(history) and acts.PLAN_ALLOCATION.name in done[:-1])


def fewer_trips_old_branch(history: WorkflowHistory) -> bool:
    """FEWER_TRIPS_PATCH's `patched` is asked by every allocation's first run, right before it
    validates; its old branch schedules VALIDATE_ALLOCATION as an activity task (the new: a local
    activity, which leaves a marker and no ACTIVITY_TASK_SCHEDULED)."""
    return (workflow_type(history) == wf.ALLOCATION.name
            and FEWER_TRIPS_PATCH not in patch_markers(history)
            and acts.VALIDATE_ALLOCATION.name in scheduled(history))


def child_started(history: WorkflowHistory) -> bool:
    """The workflow started a child workflow (a job: its machine's allocation)."""
    return any(e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
               for e in history.events)


def job_retry_old_branch(history: WorkflowHistory) -> bool:
    """JOB_RETRY_PATCH's `patched` is asked where a job with a machine of its own (not a pool's)
    begins provisioning, and only when its input has a retry policy (the input is an encrypted
    payload). A job from before the patch had no policy: the old branch is every job history that
    got that far — it started its allocation child — without the marker, as every jobs-v1 job with
    a machine did."""
    return (workflow_type(history) == wf.JOB.name and JOB_RETRY_PATCH not in patch_markers(history)
            and child_started(history))


def held_then_answered(history: WorkflowHistory) -> bool:
    """An acceptance run held for approval and answered: its plan made (PLAN_ACCEPTANCE completed),
    then the `approve` signal, with no allocation child started in between (one not held starts its
    first allocation right after the plan)."""
    planned = False
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            planned = planned or e.activity_task_scheduled_event_attributes.activity_type.name == \
                acts.PLAN_ACCEPTANCE.name
        elif e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            return False
        elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            if planned and e.workflow_execution_signaled_event_attributes.signal_name == \
                    wf.ACCEPTANCE.approve.name:
                return True
    return False


def approval_deadline_old_branch(history: WorkflowHistory) -> bool:
    """APPROVAL_DEADLINE_PATCH's `patched` is asked only by a run held for approval, once its plan is
    made; its old branch waits for the answer without a deadline (the new: a timer beside the wait,
    and the marker). Every acceptance run held and answered without the marker took it."""
    return (workflow_type(history) == wf.ACCEPTANCE.name
            and APPROVAL_DEADLINE_PATCH not in patch_markers(history) and held_then_answered(history))


OLD_BRANCH_TAKEN: dict[str, Callable[[WorkflowHistory], bool]] = {
    LAUNCH_QUEUE_PATCH: launch_queue_old_branch,
    RECORDS_RIDE_PATCH: records_ride_old_branch,
    CAPACITY_NOTES_PATCH: capacity_notes_old_branch,
    JOB_RETRY_PATCH: job_retry_old_branch,
    FEWER_TRIPS_PATCH: fewer_trips_old_branch,
    APPROVAL_DEADLINE_PATCH: approval_deadline_old_branch,
}

"""The worker's build id (worker.build_id): a digest of the workflow code and the messages it
replays, given to Temporal explicitly (its default hashes every loaded module's bytecode at each
worker start). It changes when that code changes, not when other code does, and it is what the
server sees the worker poll with."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from activities.deps import ActivityDeps
from tests.eventually import eventually
from worker import ROOT, build_id, build_worker


def _copy(tree: Path) -> Path:
    for package in ("workflows", "messages", "activities"):
        shutil.copytree(ROOT / package, tree / package, ignore=shutil.ignore_patterns("__pycache__"))
    return tree


def test_the_build_id_follows_the_workflow_code_and_the_messages_and_nothing_else(tmp_path: Path) -> None:
    tree = _copy(tmp_path / "tree")
    first = build_id(tree)
    assert first == build_id(ROOT) and first.startswith("gpuprov-")  # the same code, the same id

    (tree / "activities" / "cloud.py").write_text("# an activity's change replays the same\n")
    build_id.cache_clear()
    assert build_id(tree) == first

    workflow = tree / "workflows" / "allocation.py"
    workflow.write_text(workflow.read_text() + "\n# a workflow's change\n")
    build_id.cache_clear()
    changed = build_id(tree)
    assert changed != first

    message = tree / "messages" / "allocation.py"
    message.write_text(message.read_text() + "\n# a message's change\n")
    build_id.cache_clear()
    assert build_id(tree) not in (first, changed)

    (tree / "workflows" / "allocation.py").rename(tree / "workflows" / "renamed.py")  # same bytes, new name
    build_id.cache_clear()
    assert build_id(tree) not in (first, changed)
    build_id.cache_clear()


async def test_the_worker_polls_with_its_build_id(temporal_client: Client,
                                                  activity_deps: ActivityDeps) -> None:
    queue = f"build-id-{uuid.uuid4().hex[:8]}"

    async def pollers_build_ids() -> set[str]:
        described = await temporal_client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
            namespace=temporal_client.namespace, task_queue=TaskQueue(name=queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW))
        return {p.worker_version_capabilities.build_id for p in described.pollers}

    async with build_worker(temporal_client, activity_deps, task_queue=queue):
        # the server lists a poller once its first poll has arrived
        seen = await eventually(pollers_build_ids, within=60, what="the worker's poller listed")
    assert seen == {build_id()}

"""Replay real histories (happy path, failover, compensation, cancel, terminate) against the
current workflow code, so a change that breaks determinism fails here, not in production."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory
from temporalio.worker import Replayer

from messages import workflows as wf
from messages.enums import Phase
from tests import recorded
from tests.conftest import TEST_SECRET_KEY
from tests.fakes import FakeCloud
from tests.workflows import patch_branches
from tests.workflows.conftest import TASK_QUEUE, settled, start_allocate, terminate, wait_phase
from tests.workflows.patch_branches import patch_markers, workflow_type
from worker import WORKFLOWS, workflow_runner
from workflows.allocation import LAUNCH_QUEUE_PATCH
from workflows.converter import data_converter

HISTORIES = recorded.HISTORIES
WORKFLOW_SOURCES = Path(__file__).resolve().parents[2] / "workflows"


async def test_histories_replay_deterministically(temporal_client: Client, fake_cloud: FakeCloud,
                                                  make_request: Any) -> None:
    ready = make_request(gpu="a10")
    fake_cloud.add_fault("create", "capacity", scope="fake/r1")
    await settled(await start_allocate(temporal_client, ready))

    fake_cloud.add_fault("create", "die_at_boot")
    with pytest.raises(WorkflowFailureError):
        await settled(await start_allocate(temporal_client, make_request()))

    fake_cloud.boot_delay = 30
    cancelled = await start_allocate(temporal_client, make_request())
    await wait_phase(cancelled, Phase.WAIT_RUNNING)
    await terminate(temporal_client, cancelled.id.removeprefix("allocation-"))
    await terminate(temporal_client, ready.allocation_id)

    listed = temporal_client.list_workflows(f"TaskQueue = '{TASK_QUEUE}'")
    histories = [await temporal_client.get_workflow_handle(w.id, run_id=w.run_id).fetch_history()
                 async for w in listed]
    types = {h.events[0].workflow_execution_started_event_attributes.workflow_type.name for h in histories}
    assert wf.ALLOCATION.name in types and len(histories) >= 3

    assert await replay_failures(histories) == {}
    if recorded.recording():
        # Into the current round's folder; committed folders (v3/ was recorded here) stay as they are.
        recorded.BATCH.mkdir(exist_ok=True)
        for h in histories:
            (recorded.BATCH / f"{h.workflow_id}.json").write_text(h.to_json())


async def replay_failures(histories: list[WorkflowHistory],
                          workflows: list[type] = WORKFLOWS) -> dict[str, str]:
    # The codec's converter, as the worker's: encrypted histories decode, older plain ones pass through.
    # The runner as the worker builds it for that converter (contexts answered outside the sandbox).
    converter = data_converter([TEST_SECRET_KEY])
    replayer = Replayer(workflows=workflows, data_converter=converter,
                        workflow_runner=workflow_runner(converter))
    failures = {}
    for history in histories:
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        if result.replay_failure is not None:
            failures[history.workflow_id] = repr(result.replay_failure)
    return failures


def committed_histories() -> list[WorkflowHistory]:
    return [WorkflowHistory.from_json(p.stem, p.read_text()) for p in sorted(HISTORIES.glob("*/*.json"))]



async def test_committed_histories_replay_against_current_code() -> None:
    """Histories recorded by an earlier version: a change that breaks running workflows fails here."""
    histories = committed_histories()
    types = {workflow_type(h) for h in histories}
    assert {ref.name for ref in wf.ALL} <= types
    assert await replay_failures(histories) == {}


def registered_types(workflows: list[type] = WORKFLOWS) -> dict[str, type]:
    """Workflow type name -> class, of every workflow the worker registers."""
    names = {cls: workflow._Definition.must_from_class(cls).name for cls in workflows}
    return {name: cls for cls, name in names.items() if name is not None}  # None: a dynamic workflow


def test_every_registered_workflow_type_has_a_committed_history() -> None:
    """A type the worker runs but no committed history holds is a type whose changes nothing replays."""
    committed = {workflow_type(h) for h in committed_histories()}
    missing = sorted(set(registered_types()) - committed)
    assert missing == [], f"no committed history of {', '.join(missing)}"


def patch_ids_in(source: str) -> set[str]:
    """The ids passed to `workflow.patched(...)` / `workflow.deprecate_patch(...)` in one module's
    source: a string literal, or a module-level string constant of that module."""
    tree = ast.parse(source)
    constants: dict[str, str] = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, ast.AnnAssign) else []
        value = getattr(node, "value", None)
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            constants.update({t.id: value.value for t in targets if isinstance(t, ast.Name)})
    ids = set()
    for call in ast.walk(tree):
        if not isinstance(call, ast.Call):
            continue
        name = call.func.attr if isinstance(call.func, ast.Attribute) else \
            call.func.id if isinstance(call.func, ast.Name) else None
        if name not in ("patched", "deprecate_patch"):
            continue
        arg = call.args[0] if call.args else None
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            ids.add(arg.value)
        elif isinstance(arg, ast.Name) and arg.id in constants:
            ids.add(constants[arg.id])
        else:
            raise AssertionError(f"line {call.lineno}: a patch id that is neither a string nor a "
                                 f"module constant: {ast.unparse(call)}")
    return ids


def test_patch_ids_are_read_from_literals_and_module_constants() -> None:
    source = ('from temporalio import workflow\nfrom temporalio.workflow import patched\n'
              'P: str = "annotated"\nQ = "plain"\n'
              'def f():\n    workflow.patched(P) or workflow.patched("literal") or patched(Q)\n'
              '    workflow.deprecate_patch("old")\n    other.call(Q)\n')
    assert patch_ids_in(source) == {"annotated", "plain", "literal", "old"}
    with pytest.raises(AssertionError, match="neither a string"):
        patch_ids_in("from temporalio import workflow\nworkflow.patched(make_id())\n")


def patches() -> dict[str, set[str]]:
    """Each patch id used in workflows/ -> the registered workflow types defined in its module (all
    of them, for a helper module that defines none)."""
    types = registered_types()
    found: dict[str, set[str]] = {}
    for path in sorted(WORKFLOW_SOURCES.rglob("*.py")):
        here = {name for name, cls in types.items()
                if Path(sys.modules[cls.__module__].__file__ or "").resolve() == path.resolve()}
        for patch_id in patch_ids_in(path.read_text()):
            found.setdefault(patch_id, set()).update(here or types)
    return found



def test_every_patch_has_committed_histories_with_and_without_its_marker() -> None:
    """Both branches of every `workflow.patched` replay: a history recorded since the patch (its
    marker) and one of the same workflow type recorded before it (none)."""
    assert patches(), "the scan of workflows/ found no patch (LAUNCH_QUEUE_PATCH is one)"
    histories = committed_histories()
    lacking = {}
    for patch_id, types in patches().items():
        of_type = [h for h in histories if workflow_type(h) in types]
        marked = sum(patch_id in patch_markers(h) for h in of_type)
        if not marked or marked == len(of_type):
            lacking[patch_id] = f"{marked} of {len(of_type)} histories of {sorted(types)} mark it"
    assert lacking == {}


def lacking_old_branch(histories: list[WorkflowHistory]) -> dict[str, str]:
    """Each patch id none of `histories` shows reaching its `patched` call and taking the old branch
    (tests/workflows/patch_branches.py: what that leaves in a history, per patch id) -> why."""
    lacking = {}
    for patch_id, types in patches().items():
        took = patch_branches.OLD_BRANCH_TAKEN.get(patch_id)
        if took is None:
            lacking[patch_id] = "no criterion in tests/workflows/patch_branches.py's OLD_BRANCH_TAKEN"
        elif not any(workflow_type(h) in types and patch_id not in patch_markers(h) and took(h)
                     for h in histories):
            lacking[patch_id] = f"no history of {sorted(types)} reaches `patched` without its marker"
    return lacking


def test_every_patch_has_a_committed_history_that_took_its_old_branch() -> None:
    """A history without the marker counts only if it asked: one that never reached the `patched`
    call (an allocation on a cloud without a launch rate) replays nothing of the old branch."""
    assert lacking_old_branch(committed_histories()) == {}


def test_histories_that_never_reached_the_patch_do_not_count_as_its_old_branch() -> None:
    """Without the pre-patch round, LAUNCH_QUEUE_PATCH's unmarked histories (local, fake: no launch
    rate) never asked: its old branch is then lacking."""
    prepatch = {p.stem for p in recorded.PREPATCH.glob("*.json")}
    assert prepatch, f"no history in {recorded.PREPATCH}"
    others = [h for h in committed_histories() if h.workflow_id not in prepatch]
    assert LAUNCH_QUEUE_PATCH in lacking_old_branch(others)
    assert any(patch_markers(h) == set() and workflow_type(h) == wf.ALLOCATION.name for h in others)


@workflow.defn(name=wf.CONNECT.name, sandboxed=False)
class NondeterministicFakeConnectWorkflow:
    """A deliberately incompatible 'new version': it sleeps before doing what the old one did."""

    @workflow.run
    async def run(self, req: Any) -> None:
        await workflow.sleep(1)


async def test_replay_guard_catches_an_incompatible_change() -> None:
    connect = [h for h in committed_histories() if workflow_type(h) == wf.CONNECT.name]
    failures = await replay_failures(connect[:1], workflows=[NondeterministicFakeConnectWorkflow])
    assert len(failures) == 1 and "Nondeterminism" in next(iter(failures.values()))

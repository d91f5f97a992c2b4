"""What the API does with Temporal, behind one gateway: start a workflow, run one to its result,
send an update, keep a Schedule. Workflows are addressed by reference (messages/workflows.py), and
the calls themselves are workflows/client_calls.py's — the same the activities make — so the API
never imports workflow code (the worker owns it). What this adds is the API's view of failure:
Temporal unreachable or refusing is `WorkflowUnavailable` (503), a run that failed `WorkflowFailed`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from messages.workflows import QueryRef, SignalRef, UpdateRef, WorkflowRef

I = TypeVar("I", bound=BaseModel)  # noqa: E741
O = TypeVar("O")  # noqa: E741


class WorkflowUnavailable(Exception):
    """Temporal could not be reached (or refused the start): the request did nothing."""


class WorkflowFailed(Exception):
    """The workflow ran and failed, or did not finish within its timeout."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.timed_out = timed_out


@dataclass(frozen=True)
class OpenRun:
    workflow_id: str
    workflow_type: str


class WorkflowGateway(Protocol):
    """The things the API does with Temporal (tests put a fake of their own in its place)."""

    async def start(self, ref: WorkflowRef[I, Any], arg: I, *, workflow_id: str,
                    use_existing: bool = False, once: bool = False) -> bool:
        """Start `ref`(arg) as `workflow_id`. `use_existing`: a running run of that id is joined
        (its input stands) instead of refused. `once`: also joins a running run, and an id whose run
        has closed is never run again — nothing starts and the answer is False. True: a run of that
        id is open (this call's or the one it joined)."""
        ...

    async def execute(self, ref: WorkflowRef[I, O], arg: I, *, workflow_id: str,
                      execution_timeout_s: float, attach: bool = False) -> O:
        """Start and wait for the result. `attach`: a running run of that id is joined and its
        result returned (a retried request waits for the first one's answer)."""
        ...

    async def request_update(self, workflow_id: str, update: UpdateRef[Any]) -> bool:
        """Send an update and return once the workflow accepted it; False if it already closed."""
        ...

    async def query(self, workflow_id: str, query: QueryRef[O]) -> O | None:
        """The workflow's answer to `query` (a closed run answers from its last state); None when
        there is no such workflow."""
        ...

    async def signal(self, workflow_id: str, signal: SignalRef[I], arg: I) -> bool:
        """Send `signal`(arg); False when the workflow is closed or unknown."""
        ...

    async def is_open(self, workflow_id: str) -> bool | None:
        """Whether `workflow_id`'s latest run is still open; None when no run of it was ever started."""
        ...

    async def put_schedule(self, schedule_id: str, ref: WorkflowRef[I, Any], arg: I, *, workflow_id: str,
                           every_s: float | None = None, cron: str | None = None, paused: bool = False,
                           note: str = "", run_timeout_s: float = 300.0) -> None:
        """Create or replace Schedule `schedule_id`: it starts `ref`(arg) as `workflow_id` (+ the
        scheduled time) every `every_s` seconds or on `cron`; a run still going when the next is due
        makes that one skip. `paused` pauses it (with `note`) or resumes it."""
        ...

    async def delete_schedule(self, schedule_id: str) -> bool:
        """Delete the Schedule; False if there was none."""
        ...

    async def open_runs(self, types: Sequence[str]) -> list[OpenRun]:
        """The runs of these workflow types still open (Temporal's visibility), oldest first."""
        ...


UPDATE_RETRY_DELAYS_S = (0.2, 0.5, 1.0)  # an update whose workflow task failed is sent again, after these


class TemporalGateway:
    """WorkflowGateway over a real Temporal client, connected on first use (the API may
    start before Temporal answers)."""

    def __init__(self, address: str, namespace: str, task_queue: str, *, keys: Sequence[bytes]) -> None:
        self.address, self.namespace, self.task_queue = address, namespace, task_queue
        self.keys = keys  # the payload codec's: the secret store's keyring, as the worker's
        self._client: Any = None
        self._lock = asyncio.Lock()

    async def client(self) -> Any:
        async with self._lock:
            if self._client is None:
                from workflows.converter import connect_client

                try:
                    self._client = await connect_client(self.address, self.namespace, keys=self.keys)
                except Exception as e:  # noqa: BLE001 — any connect failure means "unavailable"
                    raise WorkflowUnavailable(f"Temporal at {self.address} is not reachable: {e}") from e
            return self._client

    async def start(self, ref: WorkflowRef[I, Any], arg: I, *, workflow_id: str,
                    use_existing: bool = False, once: bool = False) -> bool:
        from temporalio.service import RPCError

        from workflows import client_calls

        try:
            return await client_calls.start(await self.client(), ref, arg, workflow_id=workflow_id,
                                            task_queue=self.task_queue, use_existing=use_existing, once=once)
        except RPCError as e:
            raise WorkflowUnavailable(f"could not start {ref.name}: {e.message}") from e

    async def execute(self, ref: WorkflowRef[I, O], arg: I, *, workflow_id: str,
                      execution_timeout_s: float, attach: bool = False) -> O:
        from temporalio.client import WorkflowFailureError
        from temporalio.exceptions import TimeoutError as TemporalTimeout
        from temporalio.service import RPCError

        from workflows import client_calls

        try:
            return await client_calls.execute(await self.client(), ref, arg, workflow_id=workflow_id,
                                              task_queue=self.task_queue, attach=attach,
                                              execution_timeout_s=execution_timeout_s)
        except WorkflowFailureError as e:
            cause = e.cause
            if isinstance(cause, TemporalTimeout):
                raise WorkflowFailed(f"{ref.name} did not finish within {execution_timeout_s:g}s "
                                     "(is a worker running?)", timed_out=True) from e
            raise WorkflowFailed(getattr(cause, "message", None) or str(cause or e)) from e
        except RPCError as e:
            raise WorkflowUnavailable(f"could not run {ref.name}: {e.message}") from e

    async def request_update(self, workflow_id: str, update: UpdateRef[Any]) -> bool:
        from temporalio.service import RPCError, RPCStatusCode

        from workflows import client_calls

        client = await self.client()
        for delay in (*UPDATE_RETRY_DELAYS_S, None):
            try:
                await client_calls.request_update(client, workflow_id, update)
                return True
            except RPCError as e:
                if e.status == RPCStatusCode.NOT_FOUND:  # closed (or never started): nothing to update
                    return False
                # WorkflowNotReady: the workflow task carrying the update failed — typically it raced
                # the workflow's own next step (UnhandledCommand) — so the update was not accepted
                # and sending it again is safe. `make fuzz` hit it on terminates right after a create.
                if e.status != RPCStatusCode.FAILED_PRECONDITION or delay is None:
                    raise WorkflowUnavailable(
                        f"could not send {update.name} to {workflow_id}: {e.message}") from e
            await asyncio.sleep(delay)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def put_schedule(self, schedule_id: str, ref: WorkflowRef[I, Any], arg: I, *, workflow_id: str,
                           every_s: float | None = None, cron: str | None = None, paused: bool = False,
                           note: str = "", run_timeout_s: float = 300.0) -> None:
        from temporalio.client import (
            Schedule,
            ScheduleAlreadyRunningError,
            ScheduleIntervalSpec,
            ScheduleOverlapPolicy,
            SchedulePolicy,
            ScheduleSpec,
            ScheduleState,
            ScheduleUpdate,
            ScheduleUpdateInput,
        )
        from temporalio.service import RPCError

        from workflows import client_calls

        client = await self.client()
        spec = (ScheduleSpec(cron_expressions=[cron]) if cron is not None
                else ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(seconds=every_s or 60))]))
        wanted = Schedule(
            action=client_calls.schedule_action(ref, arg, workflow_id=workflow_id, task_queue=self.task_queue,
                                                execution_timeout=timedelta(seconds=run_timeout_s)),
            # A run missed while Temporal was down is not made up: the next one reads the world anew.
            spec=spec, policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP,
                                             catchup_window=timedelta(seconds=60)),
            state=ScheduleState(paused=paused, note=note))
        try:
            try:
                await client.create_schedule(schedule_id, wanted)
                return
            except ScheduleAlreadyRunningError:
                pass

            async def replace(_: ScheduleUpdateInput) -> ScheduleUpdate:
                return ScheduleUpdate(schedule=wanted)

            await client.get_schedule_handle(schedule_id).update(replace)
        except RPCError as e:
            raise WorkflowUnavailable(f"could not save schedule {schedule_id}: {e.message}") from e

    async def query(self, workflow_id: str, query: QueryRef[O]) -> O | None:
        from temporalio.service import RPCError, RPCStatusCode

        from workflows import client_calls

        try:
            return await client_calls.query(await self.client(), workflow_id, query)
        except RPCError as e:
            if e.status == RPCStatusCode.NOT_FOUND:
                return None
            raise WorkflowUnavailable(f"could not query {workflow_id}: {e.message}") from e

    async def signal(self, workflow_id: str, signal: SignalRef[I], arg: I) -> bool:
        from temporalio.service import RPCError, RPCStatusCode

        from workflows import client_calls

        try:
            await client_calls.signal(await self.client(), workflow_id, signal, arg)
        except RPCError as e:
            if e.status == RPCStatusCode.NOT_FOUND:
                return False
            raise WorkflowUnavailable(f"could not signal {workflow_id}: {e.message}") from e
        return True

    async def is_open(self, workflow_id: str) -> bool | None:
        from temporalio.client import WorkflowExecutionStatus
        from temporalio.service import RPCError, RPCStatusCode

        client = await self.client()
        try:
            described = await client.get_workflow_handle(workflow_id).describe()
        except RPCError as e:
            if e.status == RPCStatusCode.NOT_FOUND:
                return None
            raise WorkflowUnavailable(f"could not describe {workflow_id}: {e.message}") from e
        return described.status == WorkflowExecutionStatus.RUNNING

    async def delete_schedule(self, schedule_id: str) -> bool:
        from temporalio.service import RPCError, RPCStatusCode

        client = await self.client()
        try:
            await client.get_schedule_handle(schedule_id).delete()
        except RPCError as e:
            if e.status == RPCStatusCode.NOT_FOUND:
                return False
            raise WorkflowUnavailable(f"could not delete schedule {schedule_id}: {e.message}") from e
        return True

    async def open_runs(self, types: Sequence[str]) -> list[OpenRun]:
        from temporalio.service import RPCError

        if not types:
            return []
        # The names are our own constants (messages/workflows.py), never a caller's input.
        of_type = " OR ".join(f"WorkflowType = '{t}'" for t in types)
        client = await self.client()
        try:
            runs = [OpenRun(w.id, w.workflow_type) async for w in client.list_workflows(
                f"ExecutionStatus = 'Running' AND ({of_type})")]
        except RPCError as e:
            raise WorkflowUnavailable(f"could not list open runs: {e.message}") from e
        return runs[::-1]  # visibility lists newest first

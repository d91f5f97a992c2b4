"""build_worker's launch-queue workers (worker.py) shut down as its caller asked of the main one: a
worker stopped at once must not leave a create running on a launch queue for another 10 s."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa
from cryptography.fernet import Fernet
from temporalio.client import Client

from activities.deps import ActivityDeps
from store.secrets import SecretBox
from worker import build_worker


async def test_the_launch_workers_take_the_callers_graceful_shutdown_timeout(temporal_client: Client) -> None:
    deps = ActivityDeps(engine=sa.create_engine("sqlite://"), box=SecretBox(Fernet.generate_key()),
                        installation_id="test0001")  # the workers are built, never run
    at_once = build_worker(temporal_client, deps, task_queue="launch-options-a",
                           graceful_shutdown_timeout=timedelta(0))
    assert at_once.launch_workers  # Lambda documents a launch rate: its creates have a queue of their own
    assert {w.config()["graceful_shutdown_timeout"] for w in [at_once, *at_once.launch_workers]} == {
        timedelta(0)}
    default = build_worker(temporal_client, deps, task_queue="launch-options-b")
    assert {w.config()["graceful_shutdown_timeout"] for w in [default, *default.launch_workers]} == {
        timedelta(seconds=10)}

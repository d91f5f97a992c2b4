"""A plan whose clouds all answered 429: its next attempt waits what they asked (the soonest, at most
RATE_LIMIT_WAIT_MAX_S), not the retry policy's 1-2 s, which spent all eight attempts inside RunPod's
minute window under `make fuzz`. Any other failure among them keeps the backoff. The offers page
shows what each rate-limited cloud asked."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.cloud import RATE_LIMIT_WAIT_MAX_S, CloudActivities
from activities.deps import ActivityDeps
from messages.activities import PlanInput
from messages.allocation import CloudTarget
from providers.base import OfferQuery
from store.secrets import SecretBox
from tests.capacity.conftest import fake_connection
from tests.fakes import FakeInMemoryProvider


async def failed_plan(deps: ActivityDeps, *connection_ids: str) -> ApplicationError:
    targets = [CloudTarget(connection_id=c, cloud="fake") for c in connection_ids]
    with pytest.raises(ApplicationError) as failed:
        await ActivityEnvironment().run(CloudActivities(deps).plan_allocation,
                                        PlanInput(targets=targets, query=OfferQuery(gpu="a10")))
    return failed.value


@pytest.fixture(autouse=True)
def clean_faults() -> None:
    FakeInMemoryProvider.cloud.faults.clear()


async def test_every_cloud_rate_limited_retries_after_the_soonest_they_asked(
        engine: sa.Engine, box: SecretBox, deps: ActivityDeps, fake_registered: None) -> None:
    one, two = fake_connection(engine, box), fake_connection(engine, box)
    FakeInMemoryProvider.cloud.add_fault("offers", "rate_limit", retry_after=45)
    FakeInMemoryProvider.cloud.add_fault("offers", "rate_limit", retry_after=20)
    failed = await failed_plan(deps, one, two)
    assert not failed.non_retryable and failed.next_retry_delay == timedelta(seconds=20)
    assert "429" in failed.message


async def test_a_daily_window_is_asked_again_after_the_cap(
        engine: sa.Engine, box: SecretBox, deps: ActivityDeps, fake_registered: None) -> None:
    FakeInMemoryProvider.cloud.add_fault("offers", "rate_limit", retry_after=86_400)
    failed = await failed_plan(deps, fake_connection(engine, box))
    assert failed.next_retry_delay == timedelta(seconds=RATE_LIMIT_WAIT_MAX_S)


async def test_another_failure_among_them_keeps_the_backoff(
        engine: sa.Engine, box: SecretBox, deps: ActivityDeps, fake_registered: None) -> None:
    one, two = fake_connection(engine, box), fake_connection(engine, box)
    FakeInMemoryProvider.cloud.add_fault("offers", "rate_limit", retry_after=45)
    FakeInMemoryProvider.cloud.add_fault("offers", "transient")  # a 503 may clear sooner
    failed = await failed_plan(deps, one, two)
    assert not failed.non_retryable and failed.next_retry_delay is None

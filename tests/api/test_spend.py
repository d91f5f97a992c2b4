"""GET /api/compute/spend: the ledger's intervals as the Cloud tab's spend card — daily totals for the
last N days (zero-filled), by job type, by project — scoped like every route, and flagged empty until
a provider is connected and spend was recorded."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session

from store import spend
from tests.api.conftest import connect_fake, make_project

SPEND = "/api/compute/spend"


def put(engine: sa.Engine, key: str, *, project: str, rate: float, start: datetime, end: datetime | None,
        job_type: str = "manual") -> None:
    with Session(engine) as s:
        assert spend.open_interval(s, key=key, instance_id=f"al-{key}", project=project, connection_id="c1",
                                   provider="fakecloud", rate_per_hour=rate, started_at=start,
                                   job_type=job_type)
        if end is not None:
            assert spend.close_interval(s, key, end)


def days_ago(n: int, hour: int) -> datetime:
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return today - timedelta(days=n) + timedelta(hours=hour)


def by_date(body: dict[str, Any]) -> dict[str, float]:
    return {row["date"]: row["cost"] for row in body["daily"] if row["cost"]}


async def test_empty_until_a_provider_is_connected_and_spend_recorded(client: httpx.AsyncClient,
                                                                      engine: sa.Engine) -> None:
    r = await client.get(SPEND)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["empty"] is True and "no provider is connected" in body["reason"]
    assert len(body["daily"]) == 30 and all(row["cost"] == 0 for row in body["daily"])
    today = datetime.now(UTC).date()
    assert body["daily"][-1]["date"] in (today.isoformat(), (today - timedelta(days=1)).isoformat())
    assert (body["total"], body["by_job_type"], body["by_project"]) == (0, [], [])

    await connect_fake(client)
    body = (await client.get(SPEND)).json()
    assert body["empty"] is True and "no spend was recorded" in body["reason"]

    put(engine, "a1", project="default", rate=2.0, start=days_ago(3, 10), end=days_ago(3, 12))
    body = (await client.get(SPEND)).json()
    assert body["empty"] is False and body["reason"] is None
    assert by_date(body) == {days_ago(3, 0).date().isoformat(): 4.0} and body["total"] == 4.0


async def test_daily_by_job_type_and_by_project_scoped_to_the_caller(client: httpx.AsyncClient,
                                                                     engine: sa.Engine) -> None:
    vision_token = await make_project(client, "vision")
    await connect_fake(client)
    await connect_fake(client, "vision")
    # default: 2 h at $2 from 23:00 three days ago (across midnight), 1 h at $1.5 (training)
    put(engine, "d1", project="default", rate=2.0, start=days_ago(3, 23), end=days_ago(2, 1))
    put(engine, "d2", project="default", rate=1.5, start=days_ago(5, 8), end=days_ago(5, 9),
        job_type="training")
    put(engine, "old", project="default", rate=100.0, start=days_ago(40, 0), end=days_ago(40, 1))
    put(engine, "v1", project="vision", rate=10.0, start=days_ago(1, 4), end=days_ago(1, 5))
    put(engine, "v2", project="vision", rate=1.0, start=days_ago(1, 0), end=None)  # still running

    admin = (await client.get(SPEND)).json()  # the admin token in `default`
    assert by_date(admin) == {days_ago(3, 0).date().isoformat(): 2.0, days_ago(2, 0).date().isoformat(): 2.0,
                              days_ago(5, 0).date().isoformat(): 1.5}
    assert admin["total"] == 5.5  # the 40-day-old interval is outside the 30 days
    assert admin["by_job_type"] == [{"job_type": "manual", "cost": 4.0},
                                    {"job_type": "training", "cost": 1.5}]
    # every project for the admin token: vision's running machine has accrued ≥ 24 h at $1 by now
    projects = {p["project"]: p["cost"] for p in admin["by_project"]}
    assert set(projects) == {"default", "vision"} and projects["default"] == 5.5
    assert projects["vision"] >= 10.0 + 24.0
    assert [p["project"] for p in admin["by_project"]] == ["vision", "default"]  # largest first

    mine = (await client.get(SPEND, headers={"Authorization": f"Bearer {vision_token}"})).json()
    assert [p["project"] for p in mine["by_project"]] == ["vision"]
    assert mine["total"] >= 34.0 and [j["job_type"] for j in mine["by_job_type"]] == ["manual"]
    assert days_ago(3, 0).date().isoformat() not in by_date(mine)
    assert mine["empty"] is False

    wide = (await client.get(SPEND, params={"days": 90})).json()
    assert len(wide["daily"]) == 90 and wide["total"] == 105.5


@pytest.mark.parametrize("days", ["0", "91", "-1", "x"])
async def test_days_out_of_range_is_422(client: httpx.AsyncClient, days: str) -> None:
    r = await client.get(SPEND, params={"days": days})
    assert r.status_code == 422 and "days" in r.text


async def test_a_shorter_window_has_that_many_days_ending_today(client: httpx.AsyncClient) -> None:
    body = (await client.get(SPEND, params={"days": 7})).json()
    dates = [date.fromisoformat(row["date"]) for row in body["daily"]]
    assert len(dates) == 7 and dates == sorted(dates) and dates[-1] - dates[0] == timedelta(days=6)
    assert body["days"] == 7 and body["currency"] == "USD"

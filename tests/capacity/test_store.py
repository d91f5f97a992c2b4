"""store/capacity.py: the decay (5 minutes, doubled by a repeat while remembered, at most an hour),
expiry, what a success clears (every remembered scope covering its offer, nothing else) and which
connections' memory a plan reads. On SQLite and PostgreSQL (tests/store/conftest.py's databases)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlmodel import Session

from store import capacity
from store.capacity import Scope
from store.models import CapacityRefusal
from tests.store.conftest import engine, migrated, postgres_url  # noqa: F401 — fixtures: both databases

T0 = datetime(2026, 12, 3, 4, 12, tzinfo=UTC)
US_EAST = Scope(provider="lambda", connection_id="c1", region="us-east-1", instance_type="gpu_1x_a10")


def minutes(m: float) -> timedelta:
    return timedelta(minutes=m)


def remembered(db: sa.Engine, connection_ids: list[str], now: datetime) -> list[CapacityRefusal]:
    with Session(db) as s:
        return capacity.live_refusals(s, connection_ids, now)


def test_a_repeat_while_remembered_doubles_the_span_up_to_an_hour(migrated: sa.Engine) -> None:  # noqa: F811
    spans, now = [], T0
    with Session(migrated) as s:
        for i in range(7):
            row = capacity.remember_refusal(s, US_EAST, "capacity", f"sold out #{i}", now)
            spans.append(capacity.aware(row.until) - now)
            now += minutes(1)  # well within each span: every refusal is a repeat
    assert spans == [minutes(5), minutes(10), minutes(20), minutes(40), minutes(60), minutes(60), minutes(60)]
    [row] = remembered(migrated, ["c1"], now)
    assert (row.refusals, row.reason, capacity.aware(row.first_at), capacity.aware(row.last_at)) == (
        7, "sold out #6", T0, T0 + minutes(6))


def test_a_refusal_is_forgotten_when_its_span_ends_and_a_later_one_starts_again(migrated: sa.Engine) -> None:  # noqa: F811
    with Session(migrated) as s:
        capacity.remember_refusal(s, US_EAST, "capacity", "sold out", T0)
        capacity.remember_refusal(s, US_EAST, "capacity", "sold out", T0 + minutes(1))  # until +11
    assert len(remembered(migrated, ["c1"], T0 + minutes(10))) == 1
    assert remembered(migrated, ["c1"], T0 + minutes(11)) == []
    with Session(migrated) as s:
        row = capacity.remember_refusal(s, US_EAST, "capacity", "sold out again", T0 + minutes(30))
    assert (row.refusals, capacity.aware(row.first_at), capacity.aware(row.until)) == (
        1, T0 + minutes(30), T0 + minutes(35))


def test_the_reason_is_bounded_and_the_kind_checked(migrated: sa.Engine) -> None:  # noqa: F811
    with Session(migrated) as s:
        row = capacity.remember_refusal(s, US_EAST, "quota", "x" * 5000, T0)
        assert len(row.reason) == capacity.MAX_REASON
        with pytest.raises(ValueError, match="capacity"):
            capacity.remember_refusal(s, US_EAST, "stock", "?", T0)


def test_a_success_clears_every_scope_covering_its_offer_and_nothing_else(migrated: sa.Engine) -> None:  # noqa: F811
    region = Scope(provider="lambda", connection_id="c1", region="us-east-1")
    zone_a = Scope(provider="lambda", connection_id="c1", region="us-east-1", zone="a")
    other_type = Scope(provider="lambda", connection_id="c1", region="us-east-1", instance_type="gpu_8x_h100")
    other_region = Scope(provider="lambda", connection_id="c1", region="us-west-1")
    other_connection = Scope(provider="lambda", connection_id="c2", region="us-east-1")
    with Session(migrated) as s:
        for scope in (US_EAST, region, zone_a, other_type, other_region, other_connection):
            capacity.remember_refusal(s, scope, "capacity", "sold out", T0)
        capacity.remember_refusal(s, region, "quota", "over quota", T0)
        gone = capacity.clear_success(s, "lambda", "c1", "us-east-1", "a", "gpu_1x_a10", T0 + minutes(1))
    assert gone == 4  # the type's, the region's two kinds, zone a's
    left = remembered(migrated, ["c1", "c2"], T0 + minutes(1))
    assert sorted((r.connection_id, r.region, r.zone, r.instance_type) for r in left) == [
        ("c1", "us-east-1", None, "gpu_8x_h100"), ("c1", "us-west-1", None, None),
        ("c2", "us-east-1", None, None)]


def test_live_refusals_reads_only_the_connections_asked_for(migrated: sa.Engine) -> None:  # noqa: F811
    with Session(migrated) as s:
        capacity.remember_refusal(s, US_EAST, "capacity", "sold out", T0)
        capacity.remember_refusal(s, Scope(provider="lambda", connection_id="c2", region="us-east-1"),
                                  "capacity", "sold out", T0)
    assert [r.connection_id for r in remembered(migrated, ["c2"], T0)] == ["c2"]
    assert remembered(migrated, [], T0) == []
    with Session(migrated) as s:
        assert capacity.forget_expired(s, T0 + minutes(5)) == 2

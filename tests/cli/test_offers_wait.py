"""`gpuprov offers` and a cloud that has not answered the API's offers page yet: the API stops waiting
after its timeout (a 504 for one backend, `timeout` on the cross-cloud page) and goes on asking;
the command asks again until the cloud answers or `--wait` runs out, saying so once.

The app waits 0.2 s here, and the Fake Cloud's first search never ends: each request runs on an
event loop of its own in the TestClient, so the call the API went on with ends with that request,
and the command's next ask is a search of its own, which answers at once."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from api.deps import AppDeps
from api.market import Market
from cli import app
from providers.base import Offer, OfferQuery, rank_offers
from tests.api.conftest import GOOD_KEY, FakeCloud, app_serving
from tests.cli.conftest import TOKEN, FakeInstantWorkflows

runner = CliRunner()


@pytest.fixture
def searches(engine: sa.Engine, workflows: FakeInstantWorkflows,
             monkeypatch: pytest.MonkeyPatch) -> Iterator[list[OfferQuery]]:
    """The Fake Cloud's searches, the first of which hangs; the API waits 0.2 s for a cloud."""
    asked: list[OfferQuery] = []

    async def first_hangs(self: FakeCloud, query: OfferQuery) -> list[Offer]:
        asked.append(query)
        if len(asked) == 1:
            await asyncio.sleep(3600)
        return rank_offers(self.OFFERS, query)

    app_serving(AppDeps(engine=engine, box=workflows.box, api_token=TOKEN, installation_id="inst0001",
                        workflows=workflows, market=Market(timeout_s=0.2)))
    r = runner.invoke(app, ["connect", "fakecloud", "--credential", f"api_key={GOOD_KEY}"])
    assert r.exit_code == 0, r.output
    monkeypatch.setattr(FakeCloud, "offers", first_hangs)
    yield asked


def test_one_backend_is_asked_again_until_it_answers(searches: list[OfferQuery]) -> None:
    r = runner.invoke(app, ["offers", "--cloud", "fakecloud", "--gpu", "a10"])
    assert r.exit_code == 0, r.output
    assert "fakecloud has not answered within 0.2 s" in r.output and "asking again" in r.output
    assert r.output.count("asking again") == 1, r.output  # said once, however many asks
    assert any("gpu.a10" in line and "$0.75/h" in line for line in r.output.splitlines()), r.output
    assert len(searches) == 2


def test_no_wait_reports_the_cloud_as_not_answering(searches: list[OfferQuery]) -> None:
    r = runner.invoke(app, ["offers", "--cloud", "fakecloud", "--wait", "0"])
    assert r.exit_code == 1 and "has not answered within 0.2 s" in r.output and "(HTTP 504)" in r.output
    assert "asking again" not in r.output and len(searches) == 1


def test_every_cloud_is_asked_again_while_one_has_not_answered(searches: list[OfferQuery]) -> None:
    r = runner.invoke(app, ["offers", "--gpu", "h100"])
    assert r.exit_code == 0, r.output
    assert "no answer yet from fakecloud — asking again" in r.output
    lines = r.output.splitlines()
    assert any(line.split()[:2] == ["fakecloud", "gpu.h100"] for line in lines), r.output
    assert any(line.strip().startswith("fakecloud (") and "offers" in line and "no answer" not in line
               for line in lines), r.output
    assert len(searches) == 2

    r = runner.invoke(app, ["offers", "--gpu", "a10", "--wait", "0"])  # answered at once: no wait
    assert r.exit_code == 0 and "asking again" not in r.output, r.output

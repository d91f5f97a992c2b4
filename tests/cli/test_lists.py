"""`ls`, `connections`, `offers` and `clouds` read whole lists, page after page."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session
from typer.testing import CliRunner

import cli.client
from cli import app
from providers.base import GpuSpec, Offer
from store import connections
from store.models import Connection, Instance
from tests.api.conftest import GOOD_KEY, FakeCloud
from tests.api.test_connections import pem_certificate

runner = CliRunner()
T0 = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture(autouse=True)
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli.client, "PAGE_LIMIT", 2)


def test_ls_reads_every_page(engine: sa.Engine) -> None:
    with Session(engine) as s:
        for n in range(5):
            s.add(Instance(id=f"inst{n}", name=f"n{n}", provider="fakecloud", connection_id="c",
                           workflow_id="w", status="terminated" if n == 0 else "ready",
                           created_at=T0 + timedelta(minutes=n)))
        s.commit()
    r = runner.invoke(app, ["ls"])
    assert r.exit_code == 0, r.output
    assert [line.split()[0] for line in r.output.splitlines()[1:]] == ["inst4", "inst3", "inst2", "inst1"]
    r = runner.invoke(app, ["ls", "--all"])
    assert [line.split()[0] for line in r.output.splitlines()[1:]][-1] == "inst0"


def test_connections_reads_every_page(engine: sa.Engine) -> None:
    with Session(engine) as s:
        for n in range(5):
            s.add(Connection(id=f"conn{n}", provider="fakecloud", name=f"c{n}", status="connected",
                             secret=b"x", created_at=T0 + timedelta(minutes=n)))
        s.commit()
    r = runner.invoke(app, ["connections"])
    assert r.exit_code == 0, r.output
    assert [line.split()[0] for line in r.output.splitlines()[1:]] == [f"conn{n}" for n in range(5)]


def test_offers_reads_every_page(monkeypatch: pytest.MonkeyPatch) -> None:
    assert runner.invoke(app, ["connect", "fakecloud", "-c", f"api_key={GOOD_KEY}"]).exit_code == 0
    extra = [Offer(provider="fakecloud", instance_type=f"gpu.t{n}", gpu=GpuSpec(name="T4", count=1), vcpus=4,
                   memory_gib=16, region="r1", price_per_hour=0.1 * (n + 1)) for n in range(3)]
    monkeypatch.setattr(FakeCloud, "OFFERS", [*FakeCloud.OFFERS, *extra])
    r = runner.invoke(app, ["offers", "--cloud", "fakecloud"])
    assert r.exit_code == 0, r.output
    assert [line.split()[1] for line in r.output.splitlines()[1:]] == [
        "gpu.t0", "gpu.t1", "gpu.t2", "gpu.a10", "gpu.h100"]


def test_clouds_lists_the_registry_with_credential_fields() -> None:
    r = runner.invoke(app, ["clouds"])
    assert r.exit_code == 0, r.output
    header, *lines = r.output.splitlines()
    assert header.split()[:3] == ["ID", "NAME", "SUPPORT"]
    [fake] = [line for line in lines if line.startswith("fakecloud ")]
    assert "Fake Cloud" in fake and fake.split()[-1] == "api_key"
    assert fake.split()[3] == "untested"  # no acceptance run: nothing reads more
    at = header.index("SUPPORT")
    assert {line[at:].split()[0] for line in lines} == {"untested"}


def test_connect_sends_the_ca_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    real = connections.save_connection

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(connections, "save_connection", spy)
    pem = tmp_path / "ca.pem"
    pem.write_text(pem_certificate())
    r = runner.invoke(app, ["connect", "fakecloud", "-c", f"api_key={GOOD_KEY}", "--endpoint",
                            "https://fake.example/v1", "--ca-bundle", str(pem)])
    assert r.exit_code == 0, r.output
    assert calls[0]["ca_bundle"] == pem.read_text() and calls[0]["endpoint"] == "https://fake.example/v1"
    r = runner.invoke(app, ["connect", "fakecloud", "-c", f"api_key={GOOD_KEY}", "--ca-bundle",
                            str(tmp_path / "missing.pem")])
    assert r.exit_code == 1 and "cannot read --ca-bundle" in r.output


def test_connect_names_a_wrong_credential_field_without_its_value() -> None:
    r = runner.invoke(app, ["connect", "fakecloud", "-c", f"api_key={GOOD_KEY}", "-c", "region=hunter2"])
    assert r.exit_code == 1
    assert "region: Extra inputs are not permitted (HTTP 422)" in r.output and "hunter2" not in r.output

"""A job's command and image reach a shell on its host: POST /api/compute/jobs refuses (422, with
the reason) an image that is not an image reference — `--privileged` was taken as a `docker run`
option — and a command with NUL or another control character, which could never launch and was
retried forever. Nothing is stored and no workflow starts for a refused job."""

from __future__ import annotations

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session, select

from messages import workflows as wf
from messages.job_text import command_text, image_reference
from store.models import Job
from tests.api.conftest import FakeWorkflows, connect_fake

JOBS = "/api/compute/jobs"
JOB = {"name": "j", "type": "task", "command": "true", "requested_by": "tests"}

GOOD_IMAGES = ["ubuntu", "ubuntu:22.04", "library/ubuntu", "nvcr.io/nvidia/pytorch:24.01-py3",
               "localhost:5000/team/trainer", "registry.example.com:443/a/b_c/d__e/f-g.h:v1.2_rc-3",
               "[::1]:5000/img", "ghcr.io/org/img@sha256:" + "a" * 64,
               "ghcr.io/org/img:1.0@sha256:" + "0123456789abcdef" * 4, "Registry.Example/img"]
BAD_IMAGES = ["--privileged", "-v/:/host", "--volume=/:/host", "ubuntu --privileged", "Ubuntu",
              "team/Trainer", "img:", "img@sha256:abc", ":tag", "/img", "img/", "a//b", "img:-tag",
              "img;id", "$(id)", "img\n--privileged", "img ", "a" * 256, "img:" + "t" * 129, "_img", "img..x"]


def _nothing_stored(engine: sa.Engine, workflows: FakeWorkflows) -> None:
    with Session(engine) as s:
        assert s.exec(select(Job)).first() is None
    assert workflows.starts_of(wf.JOB.name) == []


@pytest.mark.parametrize("image", BAD_IMAGES)
async def test_an_image_that_is_not_a_reference_is_422_and_nothing_is_stored(
        client: httpx.AsyncClient, engine: sa.Engine, workflows: FakeWorkflows, image: str) -> None:
    await connect_fake(client)
    r = await client.post(JOBS, json={**JOB, "image": image})
    assert r.status_code == 422, r.text
    assert "image" in r.text
    _nothing_stored(engine, workflows)


async def test_an_option_as_image_says_why(client: httpx.AsyncClient) -> None:
    await connect_fake(client)
    r = await client.post(JOBS, json={**JOB, "image": "--privileged"})
    assert r.status_code == 422 and "must not begin with '-'" in r.text, r.text


@pytest.mark.parametrize("image", GOOD_IMAGES)
async def test_image_references_are_accepted(client: httpx.AsyncClient, workflows: FakeWorkflows,
                                             image: str) -> None:
    await connect_fake(client)
    r = await client.post(JOBS, json={**JOB, "image": image})
    assert r.status_code == 202, r.text
    assert (await client.get(f"{JOBS}/{r.json()['id']}")).json()["image"] == image


@pytest.mark.parametrize("command", ["echo a\x00b", "\x00", "echo\r", "printf \x1b[2J", "a\x7fb", "x\x85y",
                                     "echo \x08"])
async def test_a_command_with_control_characters_is_422_and_nothing_is_stored(
        client: httpx.AsyncClient, engine: sa.Engine, workflows: FakeWorkflows, command: str) -> None:
    await connect_fake(client)
    r = await client.post(JOBS, json={**JOB, "command": command})
    assert r.status_code == 422, r.text
    first = next(c for c in command if ord(c) < 32 or 127 <= ord(c) < 160)
    assert "control characters" in r.text and f"U+{ord(first):04X}" in r.text
    _nothing_stored(engine, workflows)


async def test_newlines_tabs_and_unicode_in_a_command_are_fine(client: httpx.AsyncClient) -> None:
    await connect_fake(client)
    command = "for f in *; do\n\techo \"$f\" ✓ 日本\ndone\n"
    r = await client.post(JOBS, json={**JOB, "command": command})
    assert r.status_code == 202, r.text
    assert (await client.get(f"{JOBS}/{r.json()['id']}")).json()["command"] == command


def test_the_validators_directly() -> None:
    assert image_reference("a/b:c") == "a/b:c"
    assert command_text("a\tb\n") == "a\tb\n"
    with pytest.raises(ValueError, match="U\\+0000 at position 1"):
        command_text("a\x00")
    with pytest.raises(ValueError, match="begin with '-'"):
        image_reference("-it")

"""The console's lists that grow with the fleet read a page at a time: the Cloud tab's active
instances and the Workload Queue show their newest page, re-read only the pages shown at each
refresh (every 3 s), and add a page on "Show 50 more" — a tab's load on the API no longer grows with
the project's machines (it read every page every refresh)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.browser.conftest import Recorder, Stack, sign_in, until
from tests.eventually import eventually_sync

PAGE = 50  # the console's page (cloud.js, queue.js)


def list_reads(recorder: Recorder, path: str, since: int) -> list[dict[str, list[str]]]:
    """The query of each GET of `path` the page made after its first `since` requests."""
    return [parse_qs(urlsplit(url).query) for method, url in recorder.requests[since:]
            if method == "GET" and urlsplit(url).path == path]


def refreshes(page: Any, recorder: Recorder, path: str, since: int, count: int) -> list[dict[str, list[str]]]:
    """Wait until the page has read `path`'s first page `count` times more: each is one refresh."""
    def done() -> list[dict[str, list[str]]] | None:
        # Playwright's sync API delivers the page's events (and runs route handlers) only while a
        # call of its own is under way: wait in one, not in time.sleep.
        page.wait_for_timeout(250)
        reads = list_reads(recorder, path, since)
        return reads if sum("cursor" not in q for q in reads) >= count else None

    found: list[dict[str, list[str]]] = eventually_sync(done, within=60, what=f"{count} refreshes of {path}",
                                                         detail=lambda: recorder.requests[since:][-8:])
    return found


def rows(page: Any, selector: str) -> int:
    return int(page.evaluate("s => document.querySelectorAll(s).length", selector))


def shows(page: Any, selector: str, count: int) -> None:
    until(page, "([s, n]) => document.querySelectorAll(s).length === n", [selector, count])


# --------------------------------------------------------------------------- the Cloud tab


def fake_instance(n: int, now: datetime) -> dict[str, Any]:
    """An InstanceOut as the list answers it (only the fields the table shows vary)."""
    at = (now - timedelta(minutes=n)).isoformat()
    return {"id": f"al-fake{n:04d}", "name": f"fake-machine-{n}", "project": "default", "cloud": "lambda",
            "connection_id": "conn-fake", "status": "ready", "phase": "ready",
            "requested": {"gpu": "A10", "gpu_count": 1, "region": None, "spot": False},
            "instance_type": "gpu_1x_a10", "region": "us-east-1", "price_per_hour": 0.75, "ssh": None,
            "gpus": [], "attempts": [], "events": [], "error": None, "note": None, "created_at": at,
            "updated_at": at, "ready_at": at, "terminated_at": None, "gpu_label": "1× A10", "uptime_s": 60.0,
            "host_key": None, "self_end": None, "lease_hours": None}


def fake_instance_pages(total: int) -> Callable[[Any], None]:
    """A Playwright route answering `GET /instances?status=active` from `total` made-up machines, a
    page per cursor as the API pages them: what a project with that many machines looks like to the
    console, without allocating them."""
    now = datetime.now(UTC)
    machines = [fake_instance(n, now) for n in range(total)]

    def handle(route: Any) -> None:
        query = parse_qs(urlsplit(route.request.url).query)
        limit = int(query["limit"][0])
        start = int(query.get("cursor", ["fake-cursor-0"])[0].removeprefix("fake-cursor-"))
        end = min(start + limit, total)
        body = {"items": machines[start:end], "next_cursor": f"fake-cursor-{end}" if end < total else None}
        route.fulfill(status=200, content_type="application/json; charset=utf-8", body=json.dumps(body))

    return handle


def test_the_cloud_tab_reads_the_instances_it_shows_a_page_at_a_time(page: Any, stack: Stack,
                                                                       recorder: Recorder) -> None:
    path = "/api/compute/instances"
    page.route(lambda url: urlsplit(url).path == path and "status=active" in url, fake_instance_pages(120))
    sign_in(page, stack)
    page.wait_for_selector("#instances-more", state="visible")
    assert rows(page, "#instances tbody tr[data-instance]") == PAGE
    assert page.inner_text("#instances tbody tr >> nth=0").startswith("fake-machine-0")  # the newest first

    # Each refresh asks for the first page only: 120 machines cost one request, not three.
    mark = len(recorder.requests)
    reads = refreshes(page, recorder, path, mark, 2)
    assert all("cursor" not in q and q["limit"] == [str(PAGE)] for q in reads), reads

    # Show more: two pages shown, and each refresh re-reads those two, never the third.
    page.click("#instances-more")
    shows(page, "#instances tbody tr[data-instance]", 2 * PAGE)
    mark = len(recorder.requests)
    reads = refreshes(page, recorder, path, mark, 2)
    cursors = [q["cursor"][0] for q in reads if "cursor" in q]
    assert cursors and set(cursors) == {f"fake-cursor-{PAGE}"}, reads
    assert page.is_visible("#instances-more")

    page.focus("#instances-more")
    page.keyboard.press("Enter")  # the last page: every machine shown, nothing more to ask for
    shows(page, "#instances tbody tr[data-instance]", 120)
    page.wait_for_selector("#instances-more", state="hidden")
    # The keyboard's place is kept where the button was: the first row the last page added.
    until(page, "() => document.activeElement?.closest('tr')?.dataset.instance === 'al-fake0100'")


# --------------------------------------------------------------------------- the Workload Queue


@pytest.fixture
def crowded_project(stack: Stack) -> Iterator[tuple[str, str]]:
    """A project of its own with 55 reported workloads (its id and a token of it); they are deleted
    afterwards. Its own, so the other queue tests' pages stay one page long."""
    project = f"paging-{uuid.uuid4().hex[:6]}"
    admin = httpx.Client(base_url=stack.url + "/api", timeout=60,
                         headers={"Authorization": f"Bearer {stack.token}"})
    with admin:
        assert admin.post("/projects", json={"id": project}).status_code == 201
        r = admin.post(f"/projects/{project}/tokens", json={"label": "paging-test"})
        assert r.status_code == 201, r.text
        token: str = r.json()["token"]
    made: list[str] = []
    with stack.api(token) as api:
        try:
            for n in range(PAGE + 5):
                wid = f"pg-{n:03d}"
                body = {"name": f"crowd-{n}", "kind": "sft" if n % 2 else "eval", "status": "queued"}
                assert api.put(f"/workloads/{wid}", json=body).status_code in (200, 201)
                made.append(wid)
            yield project, token
        finally:
            for wid in made:
                api.delete(f"/workloads/{wid}")


def test_the_queue_reads_the_workloads_it_shows_a_page_at_a_time(page: Any, stack: Stack, recorder: Recorder,
                                                                  crowded_project: tuple[str, str]) -> None:
    _, token = crowded_project
    path = "/api/compute/workloads"
    sign_in(page, stack, token=token, path="/studio/compute/workload-queue")
    page.wait_for_selector("#workloads-more", state="visible")
    assert rows(page, "#workloads tbody tr[data-workload]") == PAGE
    assert page.inner_text("#queue-pills button[data-filter=ALL] .count") == str(PAGE + 5)  # all counted

    mark = len(recorder.requests)
    reads = refreshes(page, recorder, path, mark, 2)
    assert all("cursor" not in q for q in reads), reads

    page.focus("#workloads-more")
    page.keyboard.press("Enter")
    shows(page, "#workloads tbody tr[data-workload]", PAGE + 5)
    page.wait_for_selector("#workloads-more", state="hidden")
    until(page, "() => document.activeElement?.matches('#workloads tbody tr:nth-child(51)')")
    mark = len(recorder.requests)
    reads = refreshes(page, recorder, path, mark, 2)
    assert any("cursor" in q for q in reads), reads  # both pages shown are re-read

    # Another pill starts again from its first page: SFT's 27 fit one, nothing more to show.
    page.click("#queue-pills button[data-filter=SFT]")
    shows(page, "#workloads tbody tr[data-workload]", 27)
    assert page.is_hidden("#workloads-more")
    page.click("#queue-pills button[data-filter=ALL]")
    shows(page, "#workloads tbody tr[data-workload]", PAGE)
    page.wait_for_selector("#workloads-more", state="visible")

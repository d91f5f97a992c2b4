"""The Cloud tab in a real browser: sign-in, the providers `gpuprov dev` connected, an instance
allocated through the CLI appearing without a reload and terminated from its row, the spend chart."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import asyncssh
from playwright.sync_api import expect

from tests.browser.conftest import NARROW, TIMEZONE, Recorder, Stack, finish, new_page, sign_in, until
from tests.eventually import eventually_sync


def test_sign_in_refuses_a_wrong_token_then_shows_the_cloud_tab(page: Any, stack: Stack) -> None:
    page.goto(stack.url + "/studio/compute")
    assert page.url.endswith("/studio/compute/cloud")  # /studio/compute lands on the Cloud tab
    page.fill("#token", "not-a-token")
    page.click("form.signin button[type=submit]")
    page.wait_for_selector("form.signin .error")
    assert "invalid bearer token" in page.inner_text("form.signin .error")  # the API's own reason
    sign_in(page, stack)
    page.wait_for_selector("#providers .row")
    assert page.inner_text("nav.tabs").split() == ["Cloud", "Workload", "Queue", "Policies"]
    names = page.locator("#providers .row .name").all_inner_texts()
    assert len(names) >= 10, names  # every simulated cloud `gpuprov dev` connected
    assert re.search(r"\d+ instances?", page.inner_text("#providers"))


def chatham(iso: str) -> str:
    """How the console shows `iso` to a viewer in the test's zone: Intl's medium date, short time."""
    at = datetime.fromisoformat(iso).astimezone(ZoneInfo(TIMEZONE))
    return f"{at:%b} {at.day}, {at.year}, {at.hour % 12 or 12}:{at:%M} {'AM' if at.hour < 12 else 'PM'}"


def _instance_refreshes(page: Any, n: int) -> None:
    """Wait for the Cloud tab to ask its instances `n` times. live() asks again only after a refresh
    has rendered; a terminate's own refresh asks once besides."""
    for _ in range(n):
        with page.expect_request(lambda r: "/api/compute/instances?" in r.url):
            pass


def test_an_instance_appears_live_is_terminated_from_its_row_and_its_spend_is_charted(
        page: Any, stack: Stack) -> None:
    sign_in(page, stack)
    page.wait_for_selector("#instances")
    page.evaluate("window.notReloaded = true")
    key = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    with stack.api() as api:
        r = api.post("/instances", json={"cloud": "lambda", "gpu": "A10", "k3s": False,
                                         "name": "console-live", "ssh_public_keys": [key]})
        assert r.status_code == 202, r.text
        instance_id = r.json()["id"]
        row = page.locator(f"#instances tr[data-instance='{instance_id}']")
        row.wait_for(timeout=120_000)  # appears while the allocation runs, without a reload
        until(page, "id => document.querySelector(`#instances tr[data-instance='${id}']`)?.innerText"
              ".includes('A10')", instance_id, timeout=120)
        def ready() -> dict[str, Any] | None:
            found: dict[str, Any] = api.get(f"/instances/{instance_id}").json()
            return found if found["status"] == "ready" else None

        instance = eventually_sync(ready, within=120, what="the instance ready")
        # The row refreshes itself as the machine comes up (the GPU's name as probed, the start time
        # once ready, in the browser's zone): it ends up showing what the API says.
        expected = ["console-live", f"{instance['gpu_label']} · {instance['instance_type']}",
                    chatham(instance["ready_at"]), f"${instance['price_per_hour']:.2f}/hr"]
        until(page, "([id, want]) => {"
              " const r = document.querySelector(`#instances tr[data-instance='${id}']`);"
              " const cells = r ? [...r.querySelectorAll('td')].slice(0, 4)"
              ".map((c) => c.innerText.replace(/\\s+/g, ' ').trim()) : [];"
              " return JSON.stringify(cells) === JSON.stringify(want); }", [instance_id, expected])

        # A terminate the API refuses (a fake answer, made in the browser by this test): the row says
        # why once, however many refreshes pass (the row is kept), and offers its button again.
        refused = "**/api/compute/instances/*/terminate"
        page.route(refused, lambda route: route.fulfill(
            status=409, content_type="application/json", body='{"detail": "fake refusal of this test"}'))
        for _ in range(2):
            row.get_by_role("button", name=re.compile("Terminate")).click()
            page.locator("dialog.confirm").get_by_role("button", name="Terminate").click()
            row.locator(".error", has_text="fake refusal of this test").wait_for()
            _instance_refreshes(page, 3)  # at least one of them rendered after the refusal
            expect(row.locator(".error")).to_have_count(1)
            expect(row.get_by_role("button", name=re.compile("Terminate"))).to_be_enabled()
        page.unroute(refused)

        # Terminate from the keyboard: the button, Enter, the dialog says what happens, Enter confirms.
        row.get_by_role("button", name=re.compile("Terminate")).focus()
        page.keyboard.press("Enter")
        dialog = page.locator("dialog.confirm")
        dialog.wait_for()
        assert "terminated" in dialog.inner_text() and "billing stops" in dialog.inner_text()
        page.keyboard.press("Enter")
        row.wait_for(state="detached", timeout=120_000)
        eventually_sync(lambda: api.get(f"/instances/{instance_id}").json()["status"] == "terminated",
                        within=120, what="the instance terminated")
        assert page.evaluate("window.notReloaded") is True

        # It accrued spend while it ran: the spend card shows the API's figures in its charts.
        spend = api.get("/spend", params={"days": 30}).json()
        assert not spend["empty"]
    page.wait_for_selector("#spend:not([hidden]) #spend-daily")
    charted = page.evaluate("() => Chart.getChart('spend-daily').data.datasets[0].data")
    assert len(charted) == spend["days"] == 30
    assert abs(sum(charted) - spend["total"]) < 0.01 + spend["total"] * 0.01  # it keeps accruing nowhere now
    assert page.evaluate("() => Chart.getChart('spend-project').data.labels") == [
        p["project"] for p in spend["by_project"]]


def test_a_project_tokens_session_sees_only_its_project_and_remove_says_what_it_does(
        browser: Any, recorder: Recorder, stack: Stack) -> None:
    with stack.api() as api:
        assert api.post("/../projects", json={"id": "console-team"}).status_code in (201, 409)
        token = api.post("/../projects/console-team/tokens", json={"label": "console"}).json()["token"]
    narrow = new_page(browser, recorder, viewport=NARROW)
    try:
        sign_in(narrow, stack, token)
        narrow.wait_for_selector("#connect .empty")  # nothing connected in this project: the grid only
        assert narrow.locator("#providers").is_hidden()
        assert "project console-team" in narrow.inner_text("header")
        assert narrow.evaluate("document.documentElement.scrollWidth") <= NARROW["width"]
        with stack.api(token) as team:
            r = team.post("/connections", json={**stack.connection_body("vastai"), "name": "team vast"})
            assert r.status_code == 201, r.text
        row = narrow.locator("#providers .row", has_text="team vast")
        row.wait_for()  # live: no reload
        assert narrow.locator("#providers .row").count() == 1  # the admin's default project is not shown
        assert narrow.evaluate("document.documentElement.scrollWidth") <= NARROW["width"]
        row.get_by_role("button", name="Remove team vast").click()
        dialog = narrow.locator("dialog.confirm")
        assert "instance" in dialog.inner_text() and "terminated" in dialog.inner_text()
        dialog.get_by_role("button", name="Cancel").click()
        assert row.is_visible()  # cancelled: still there
        row.get_by_role("button", name="Remove team vast").click()
        narrow.locator("dialog.confirm").get_by_role("button", name="Remove").click()
        row.wait_for(state="detached", timeout=120_000)
        with stack.api(token) as team:
            assert team.get("/connections").json()["items"] == []
        narrow.get_by_role("button", name="Sign out").click()
        narrow.wait_for_selector("form.signin")
    finally:
        finish(narrow, recorder, stack, "project_session_narrow")

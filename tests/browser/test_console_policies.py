"""The Policies view in a real browser: a policy created, edited, disabled (from the keyboard) and
deleted through the page, its card following each step, and its Temporal Schedule following too —
read from the dev stack's own Temporal (created with an interval, a cron spec once the When is a
cron expression, paused while disabled, gone once deleted). A refused save shows the API's reason
next to the form and keeps what was typed."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest

from tests.browser.conftest import NARROW, Stack, finish, new_page, sign_in, until

T = TypeVar("T")
POLICIES = "/studio/compute/policies"


def schedule(stack: Stack, schedule_id: str) -> Any:
    """The Schedule as Temporal describes it, or None when there is none. Run in a thread of its
    own: the sync Playwright API holds this thread's event loop."""
    from temporalio.client import Client
    from temporalio.service import RPCError, RPCStatusCode

    async def describe() -> Any:
        client = await Client.connect(f"127.0.0.1:{stack.ports['GPUPROV_TEMPORAL_PORT']}")
        try:
            return await client.get_schedule_handle(schedule_id).describe()
        except RPCError as e:
            if e.status == RPCStatusCode.NOT_FOUND:
                return None
            raise

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, describe()).result(60)


def eventually(check: Callable[[], T | None], what: str, within: float = 30) -> T:
    deadline = time.monotonic() + within
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within}s: {what}")
        time.sleep(0.3)


def is_cron(spec: Any, minute: int, hour: int) -> bool:
    """The Schedule runs on a cron spec at minute:hour (Temporal may keep the expression or turn it
    into a calendar), and not on an interval."""
    if spec.intervals:
        return False
    if spec.cron_expressions:
        return spec.cron_expressions[0].split()[:2] == [str(minute), str(hour)]
    [calendar] = spec.calendars
    return ([(r.start, r.end or r.start) for r in calendar.minute] == [(minute, minute)]
            and [(r.start, r.end or r.start) for r in calendar.hour] == [(hour, hour)])


def test_a_policy_created_edited_disabled_and_deleted_and_its_schedule_follows(page: Any,
                                                                               stack: Stack) -> None:
    api = stack.api()
    sign_in(page, stack, path=POLICIES)
    page.wait_for_selector("#new-policy")
    assert page.inner_text("nav.tabs a[aria-current=page]") == "Policies"

    # Create: a queue-depth condition (never true here) that would pause the SFT queue.
    page.click("#new-policy")
    page.wait_for_selector("#policy-form")
    page.fill("#pf-name", "Hold SFT when deep")
    page.select_option("#pf-when-kind", "queue_depth")
    page.select_option("#pf-when-queue_depth-type", "sft")
    page.fill("#pf-when-queue_depth-n", "50000")
    page.select_option("#pf-then-kind", "pause_queue")
    page.select_option("#pf-then-pause_queue-type", "sft")
    page.fill("#pf-max-spend", "12.5")
    page.fill("#pf-cooldown", "30")
    page.click("#pf-save")
    page.wait_for_selector("#policy-form", state="detached")
    card = page.locator("article[data-policy]", has_text="Hold SFT when deep")
    card.wait_for()
    policy_id = card.get_attribute("data-policy")
    assert policy_id
    text = card.inner_text()
    assert "Triggered 0 times · last: never" in text
    assert "at least 50000 jobs are queued in SFT" in text and "pause the SFT queue" in text
    assert "Max spend $12.50/hr" in text and "Cooldown 30 minutes" in text
    assert card.get_by_role("checkbox", name="Enabled").is_checked()

    saved = api.get(f"/policies/{policy_id}").json()
    assert (saved["enabled"], saved["when"]["kind"]) == (True, "queue_depth")
    assert saved["then"] == {"kind": "pause_queue", "type": "sft"}
    assert (saved["max_spend_per_hour"], saved["cooldown_minutes"]) == (12.5, 30)
    schedule_id = saved["schedule_id"]
    created = schedule(stack, schedule_id)
    assert created is not None, "no Schedule for the new policy"
    assert created.schedule.spec.intervals  # a condition is evaluated on an interval
    assert not created.schedule.state.paused

    # Edit: the form opens with the card's values; the When becomes a cron expression.
    card.locator("[data-role=edit]").click()
    form = page.locator("#policy-form")
    form.wait_for()
    assert page.input_value("#pf-name") == "Hold SFT when deep"
    assert page.input_value("#pf-when-kind") == "queue_depth"
    assert page.input_value("#pf-when-queue_depth-n") == "50000"
    assert page.input_value("#pf-cooldown") == "30"
    page.fill("#pf-name", "Hold SFT on New Year")
    page.select_option("#pf-when-kind", "cron")
    page.fill("#pf-when-cron-expression", "15 4 1 1 *")
    page.click("#pf-save")
    page.wait_for_selector("#policy-form", state="detached")
    card = page.locator(f"article[data-policy='{policy_id}']")
    until(page, "id => document.querySelector(`article[data-policy='${id}'] .name`).textContent"
                           " === 'Hold SFT on New Year'", policy_id)
    assert "on the schedule 15 4 1 1 *" in card.inner_text()
    saved = api.get(f"/policies/{policy_id}").json()
    assert saved["when"] == {"kind": "cron", "expression": "15 4 1 1 *"}
    assert saved["schedule_id"] == schedule_id
    eventually(lambda: is_cron(schedule(stack, schedule_id).schedule.spec, 15, 4),
               "the Schedule on the cron spec")

    # Disable from the keyboard: Tab to the card's switch, Space.
    switch_id = f"policy-enabled-{policy_id}"
    page.focus("#new-policy")
    for _ in range(40):
        page.keyboard.press("Tab")
        if page.evaluate("() => document.activeElement.id") == switch_id:
            break
    else:
        pytest.fail("Tab never reached the policy's switch")
    page.keyboard.press("Space")
    page.wait_for_selector(f"article[data-policy='{policy_id}'][data-enabled=false]")
    assert not card.get_by_role("checkbox", name="Enabled").is_checked()
    assert api.get(f"/policies/{policy_id}").json()["enabled"] is False
    paused = schedule(stack, schedule_id)
    assert paused is not None and paused.schedule.state.paused
    assert page.evaluate("() => document.activeElement.id") == switch_id  # focus stays on the switch
    # ... and Space again enables it: the Schedule resumes.
    page.keyboard.press("Space")
    page.wait_for_selector(f"article[data-policy='{policy_id}'][data-enabled=true]")
    assert api.get(f"/policies/{policy_id}").json()["enabled"] is True
    assert not schedule(stack, schedule_id).schedule.state.paused

    # Delete: from the edit form, with a confirmation that says the Schedule goes too.
    card.locator("[data-role=edit]").click()
    page.click("#pf-delete")
    dialog = page.locator("dialog.confirm")
    dialog.wait_for()
    assert "Schedule" in dialog.inner_text() and schedule_id in dialog.inner_text()
    dialog.locator("button[value=ok]").click()
    card.wait_for(state="detached")
    assert api.get(f"/policies/{policy_id}").status_code == 404
    assert schedule(stack, schedule_id) is None
    with page.expect_response(lambda r: "/api/compute/policies?" in r.url):
        pass  # a live refresh later, the card is still gone
    assert page.locator(f"article[data-policy='{policy_id}']").count() == 0


def test_a_refused_policy_shows_the_api_reason_and_keeps_what_was_typed(page: Any, stack: Stack) -> None:
    api = stack.api()
    sign_in(page, stack, path=POLICIES)
    page.click("#new-policy")
    page.fill("#pf-name", "Nightly idle sweep")
    page.select_option("#pf-when-kind", "cron")
    page.fill("#pf-when-cron-expression", "0 25 * * *")
    page.select_option("#pf-then-kind", "terminate_idle")
    page.fill("#pf-then-terminate_idle-minutes", "45")
    page.check("#pf-then-terminate_idle-include_manual")
    page.click("#pf-save")
    error = page.locator("#pf-status .error")
    error.wait_for()
    assert "cron hour: 25 is outside 0-23" in error.inner_text()  # the API's own reason
    assert page.get_attribute("#pf-when-cron-expression", "aria-invalid") == "true"
    assert "25 is outside 0-23" in page.inner_text("#pf-when-cron .field-error")
    assert page.input_value("#pf-name") == "Nightly idle sweep"
    assert page.input_value("#pf-when-kind") == "cron"
    assert page.input_value("#pf-when-cron-expression") == "0 25 * * *"
    assert page.input_value("#pf-then-kind") == "terminate_idle"
    assert page.input_value("#pf-then-terminate_idle-minutes") == "45"
    assert page.is_checked("#pf-then-terminate_idle-include_manual")
    assert not [p for p in api.get("/policies").json()["items"] if p["name"] == "Nightly idle sweep"]

    # Corrected, the same form saves.
    page.fill("#pf-when-cron-expression", "0 4 1 1 *")
    page.click("#pf-save")
    card = page.locator("article[data-policy]", has_text="Nightly idle sweep")
    card.wait_for()
    assert re.search(r"terminate machines idle over 45 minutes, hand-allocated ones too", card.inner_text())
    policy_id = card.get_attribute("data-policy")
    assert api.delete(f"/policies/{policy_id}").status_code == 200
    card.wait_for(state="detached")  # the live refresh drops a policy deleted elsewhere


def test_the_policies_view_fits_a_narrow_screen(browser: Any, recorder: Any, stack: Stack,
                                                request: pytest.FixtureRequest) -> None:
    created = stack.api().post("/policies", json={
        "name": "Grow pool <b>bold</b>", "when": {"kind": "spend", "window": "1h", "usd": 500000},
        "then": {"kind": "terminate_idle", "minutes": 20}, "cooldown_minutes": 15}).json()
    page = new_page(browser, recorder, viewport=NARROW)
    try:
        sign_in(page, stack, path=POLICIES)
        card = page.locator(f"article[data-policy='{created['id']}']")
        card.wait_for()
        assert card.locator(".name").inner_text() == "Grow pool <b>bold</b>"  # a typed name is text
        assert "spend over the last 1h is over $500000.00" in card.inner_text()
        page.click("#new-policy")
        page.wait_for_selector("#policy-form")
        assert page.evaluate("() => document.documentElement.scrollWidth") <= NARROW["width"]
        page.click("#pf-cancel")
        page.wait_for_selector("#policy-form", state="detached")
    finally:
        stack.api().delete(f"/policies/{created['id']}")
        finish(page, recorder, stack, request.node.name)

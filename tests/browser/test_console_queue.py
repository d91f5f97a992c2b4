"""The Workload Queue in a real browser: workloads reported through the API and a managed job on a
simulated cloud in one table (active first, then newest, as the API orders them), the pills' counts
equal to the API's and a pill narrowing the rows, a workload reported while the page is open
appearing without a reload, a name that looks like markup shown as text; the job's detail replacing
the header with its log growing while watched and its GPU metrics charted, the browser's Back and
Forward and the page's own back button, the detail opened straight from its URL, and the job
cancelled from its detail."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import NARROW, SCREENSHOTS, Recorder, Stack, finish, new_page, sign_in, until
from tests.eventually import eventually_sync

PATH = "/studio/compute/workload-queue"
XSS = "<img src=x onerror=alert(1)>"
PILLS = ["ALL", "SFT", "GRPO", "SERVING", "EVAL", "TASK", "SYNTHETIC"]
# The job prints a numbered line a second (and plays a busy GPU for the simulated nvidia-smi).
COMMAND = ('echo 64 > "$HOME/.simulated-gpu-utilization"; '
           'for i in $(seq 1 900); do echo "queue-line $i"; sleep 1; done')
LINE = re.compile(r"queue-line (\d+)")


def report(api: Any, workload_id: str, **body: Any) -> dict[str, Any]:
    r = api.put(f"/workloads/{workload_id}", json=body)
    assert r.status_code in (200, 201), r.text
    return r.json()


def api_list(api: Any, pill: str = "ALL") -> dict[str, Any]:
    r = api.get("/workloads", params={"type": pill, "limit": 200})
    assert r.status_code == 200, r.text
    assert r.json()["next_cursor"] is None  # the test's few rows fit one page
    return r.json()


def page_counts(page: Any) -> dict[str, int]:
    return page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('#queue-pills button')]
        .map((b) => [b.dataset.filter, Number(b.querySelector('.count').textContent)]))""")


def page_ids(page: Any) -> list[str]:
    return page.evaluate("() => [...document.querySelectorAll('#workloads tbody tr[data-workload]')]"
                         ".map((r) => r.dataset.workload)")


def matches_api(page: Any, api: Any, pill: str = "ALL") -> dict[str, Any]:
    """Wait until the page's rows and counts are the API's (the page refreshes every few seconds)."""
    def same() -> dict[str, Any] | None:
        listed = api_list(api, pill)
        ids = [w["id"] for w in listed["items"]]
        return listed if page_ids(page) == ids and page_counts(page) == listed["counts"] else None

    seen: dict[str, Any] = eventually_sync(same, within=30, what=f"the page showing the API's {pill} rows",
                                           detail=lambda: (page_ids(page), page_counts(page)))
    return seen


def log_lines(page: Any) -> list[int]:
    return [int(n) for n in LINE.findall(page.inner_text("#workload-log"))]


@pytest.fixture
def work(stack: Stack) -> Iterator[dict[str, Any]]:
    """Reported workloads of several kinds (one named like markup); deleted afterwards."""
    tag = uuid.uuid4().hex[:6]
    made: dict[str, Any] = {"reported": [], "tag": tag}
    with stack.api() as api:
        try:
            bodies: dict[str, dict[str, Any]] = {
                f"cq-sft-{tag}": {"name": f"llama-sft-{tag}", "kind": "dpo", "status": "running",
                                  "source": "training", "gpu": "H100", "gpu_count": 4,
                                  "location": "local cluster", "progress_pct": 42, "requested_by": "ana"},
                f"cq-serve-{tag}": {"name": f"chat-serve-{tag}", "kind": "serving", "status": "running",
                                    "source": "model", "gpu": "A10", "location": "Lambda Cloud"},
                f"cq-eval-{tag}": {"name": f"evals-{tag}", "kind": "eval", "status": "queued",
                                   "requested_by": "bo"},
                f"cq-done-{tag}": {"name": f"old-grpo-{tag}", "kind": "grpo", "status": "succeeded"},
                f"cq-xss-{tag}": {"name": XSS, "kind": "synthetic", "status": "queued",
                                  "source": "synthetic"},
            }
            for wid, body in bodies.items():
                report(api, wid, **body)
                made["reported"].append(wid)
            yield made
        finally:
            for wid in made["reported"]:
                api.delete(f"/workloads/{wid}")


@pytest.fixture
def job(stack: Stack, work: dict[str, Any]) -> Iterator[str]:
    """A managed job on the simulated Lambda Cloud printing a line a second; cancelled afterwards."""
    with stack.api() as api:
        r = api.post("/jobs", json={"name": f"console-job-{work['tag']}", "type": "task", "command": COMMAND,
                                    "cloud": "lambda", "gpu": "A10", "requested_by": "console-test"})
        assert r.status_code == 202, r.text
        job_id: str = r.json()["id"]
        try:
            yield job_id
        finally:
            api.post(f"/jobs/{job_id}/cancel")
            # its machine gone too: the make-run checks that share this run find every machine terminated
            allocation = api.get(f"/jobs/{job_id}").json()["allocation_id"]
            if allocation is not None:
                eventually_sync(lambda: api.get(f"/instances/{allocation}").json().get("status") in (
                    "terminated", "failed"), within=120, what="the job's machine terminated")


def test_the_queue_lists_counts_filters_and_updates_live(page: Any, stack: Stack,
                                                         work: dict[str, Any]) -> None:
    tag = work["tag"]
    sign_in(page, stack, path=PATH)
    page.wait_for_selector("#workloads tbody tr[data-workload]")
    assert [t.strip() for t in page.locator("#workloads thead th").all_inner_texts()] == [
        "PRI", "WORKLOAD", "TYPE", "STATUS", "GPU", "LOCATION", "PROGRESS / ETA", "REQUESTED BY"]
    pills = page.locator("#queue-pills button")
    assert pills.evaluate_all("bs => bs.map(b => b.dataset.filter)") == PILLS
    assert page.locator("#queue-pills button[data-filter=ALL]").get_attribute("aria-pressed") == "true"
    page.evaluate("window.notReloaded = true")

    with stack.api() as api:
        listed = matches_api(page, api)  # the API's order (active first, then newest) and its counts
        actives = [w["active"] for w in listed["items"]]
        assert actives == sorted(actives, reverse=True) and False in actives

        # The seed's columns, as the API gives them.
        row = page.locator(f"tr[data-workload='cq-sft-{tag}']")
        cells = [c.strip() for c in row.locator("td").all_inner_texts()]
        assert cells == ["—", f"llama-sft-{tag}", "SFT · dpo", "running", "4× H100", "local cluster", "42%",
                         "ana"]
        assert row.locator(".status-green .dot").count() == 1  # the coloured dot beside the word
        queued = page.locator(f"tr[data-workload='cq-eval-{tag}']")
        pri = next(w["pri"] for w in listed["items"] if w["id"] == f"cq-eval-{tag}")
        assert pri is not None and queued.locator("td").first.inner_text().strip() == str(pri)
        assert queued.locator(".status-amber").count() == 1

        # A name that looks like markup is text: shown as typed, and no element made of it.
        xss_row = page.locator(f"tr[data-workload='cq-xss-{tag}']")
        assert xss_row.locator("td.workload-name").inner_text() == XSS
        assert page.get_by_text(XSS, exact=True).first.is_visible()
        assert page.locator("#workloads img").count() == 0

        # A pill narrows the rows to its type; the counts stay those of every type.
        page.click("#queue-pills button[data-filter=SERVING]")
        pressed = "#queue-pills button[aria-pressed=true]"
        assert page.locator(pressed).evaluate_all("bs => bs.map(b => b.dataset.filter)") == ["SERVING"]
        serving = matches_api(page, api, "SERVING")
        assert f"cq-serve-{tag}" in page_ids(page) and f"cq-sft-{tag}" not in page_ids(page)
        assert len(serving["items"]) == serving["counts"]["SERVING"] >= 1
        types = page.locator("#workloads tbody td:nth-child(3)").all_inner_texts()
        assert {c.strip() for c in types} == {"Serving"}
        # From the keyboard: the pills are buttons in the tab order.
        page.focus("#queue-pills button[data-filter=SYNTHETIC]")
        page.keyboard.press("Enter")
        matches_api(page, api, "SYNTHETIC")
        assert page_ids(page) == [w["id"] for w in api_list(api, "SYNTHETIC")["items"]]
        page.click("#queue-pills button[data-filter=ALL]")
        before = matches_api(page, api)

        # Reported while the page is open: its row appears and the counts move, without a reload.
        report(api, f"cq-new-{tag}", name=f"fresh-synth-{tag}", kind="synthetic", status="running")
        work["reported"].append(f"cq-new-{tag}")
        page.locator(f"tr[data-workload='cq-new-{tag}']").wait_for()
        after = matches_api(page, api)
        assert after["counts"]["SYNTHETIC"] == before["counts"]["SYNTHETIC"] + 1
        assert after["counts"]["ALL"] == before["counts"]["ALL"] + 1
        assert page_counts(page)["SYNTHETIC"] == after["counts"]["SYNTHETIC"]
        # ...and leaves when its owner takes it off the list.
        assert api.delete(f"/workloads/cq-new-{tag}").status_code == 204
        page.locator(f"tr[data-workload='cq-new-{tag}']").wait_for(state="detached")
        matches_api(page, api)
    assert page.evaluate("window.notReloaded") is True


def test_a_jobs_detail_replaces_the_header_follows_its_log_and_charts_its_gpus(
        page: Any, stack: Stack, work: dict[str, Any], job: str) -> None:
    job_id, tag = job, work["tag"]
    row_id = f"job:{job_id}"
    with stack.api() as api:
        eventually_sync(lambda: api.get(f"/jobs/{job_id}").json()["status"] == "running", within=180,
                        what="the job running", detail=lambda: api.get(f"/jobs/{job_id}").json())
    sign_in(page, stack, path=PATH)
    row = page.locator(f"#workloads tr[data-workload='{row_id}']")
    row.wait_for()
    assert row.locator("td.workload-name").inner_text() == f"console-job-{tag}"
    until(page,  # a running job reads its time running
          "id => /running \\d/.test(document.querySelector(`tr[data-workload='${id}']`)?.innerText)", row_id)

    # Opened from the keyboard: the row, Enter.
    row.focus()
    page.keyboard.press("Enter")
    page.wait_for_selector("#queue-back")
    assert page.locator("nav.tabs").count() == 0  # the header is the detail's now
    expect(page.locator("#workload-title")).to_have_text(f"console-job-{tag}")
    assert "?workload=" in page.url and job_id in page.url
    page.wait_for_selector("#workload-status .status-green")
    assert page.locator("#queue-back").evaluate("b => b === document.activeElement")
    assert "console-test" in page.inner_text("#workload-fields")

    # The log follows: lines printed after it was opened appear without anything being done.
    until(page,
          "() => /queue-line \\d+/.test(document.querySelector('#workload-log')?.textContent)", timeout=60)
    first = max(log_lines(page))
    until(page,
          "n => [...document.querySelector('#workload-log').textContent.matchAll(/queue-line (\\d+)/g)]"
          ".some((m) => Number(m[1]) >= n)", first + 3, timeout=60)
    seen = log_lines(page)
    assert seen == list(range(seen[0], seen[-1] + 1))  # in order, nothing repeated or skipped
    # Kept at the bottom while the reader has not scrolled up.
    assert page.evaluate("() => { const p = document.querySelector('#workload-log');"
                         " return p.scrollHeight - p.scrollTop - p.clientHeight < 30; }")

    # The GPU metrics: the simulated nvidia-smi's samples, one line per GPU, as the API has them.
    until(page,
          "() => window.Chart && Chart.getChart('gpu-util')?.data.datasets[0]?.data.length >= 1",
          timeout=60)
    with stack.api() as api:
        detail = api.get(f"/workloads/{row_id}").json()
    assert detail["metrics"]
    charted = page.evaluate("() => Chart.getChart('gpu-util').data.datasets.map((d) => d.label)")
    assert charted == [f"GPU {g['gpu']}" for g in detail["metrics"][-1]["gpus"]]
    assert page.evaluate("() => Chart.getChart('gpu-mem').data.datasets.length") == len(charted)
    assert page.locator("#gpu-util").bounding_box()["height"] > 50  # drawn, not a hidden canvas
    # The job's GPU busy at 64 % (it wrote that for the simulated nvidia-smi): charted when sampled
    # next (GPUPROV_JOB_METRICS_INTERVAL_S: 3 s in the suite's `gpuprov dev`, tests/devstack.py), the
    # latest sample spelled out.
    until(page, "() => Chart.getChart('gpu-util').data.datasets[0].data.includes(64)", timeout=120)
    expect(page.locator("#gpu-latest")).to_contain_text("GPU 0 64%")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "queue_job_detail.png"), full_page=True)  # the detail itself

    # The browser's Back: the header and the table again; Forward: the detail again.
    page.go_back()
    page.wait_for_selector("nav.tabs")
    page.wait_for_selector(f"#workloads tr[data-workload='{row_id}']")
    assert "workload=" not in page.url and page.locator("#queue-back").count() == 0
    page.go_forward()
    page.wait_for_selector("#queue-back")
    until(page, "() => /queue-line/.test(document.querySelector('#workload-log')?.textContent)")
    # The page's own back button does the same.
    page.click("#queue-back")
    page.wait_for_selector("nav.tabs")
    page.wait_for_selector(f"#workloads tr[data-workload='{row_id}']")
    assert "workload=" not in page.url

    # A reported workload's detail: its fields, and why there are no logs (gpuprov does not run it).
    page.click(f"#workloads tr[data-workload='cq-xss-{tag}']")
    page.wait_for_selector("#reported-note:not([hidden])")
    expect(page.locator("#workload-title")).to_have_text(XSS)  # as text, in the header too
    assert page.locator("#top img").count() == 0 and page.locator("#workload-logs").is_hidden()
    page.click("#queue-back")
    page.wait_for_selector("nav.tabs")

    # The detail straight from its URL; cancelled from there (saying what it does), then back.
    page.goto(f"{stack.url}{PATH}?workload={row_id}")
    page.wait_for_selector("#workload-status .status-green")
    page.click("#cancel-job")
    dialog = page.locator("dialog.confirm")
    assert "machine is terminated" in dialog.inner_text()
    dialog.get_by_role("button", name="Cancel job").click()
    page.wait_for_selector("#workload-status >> text=cancelled", timeout=120_000)
    expect(page.locator("#log-state")).to_have_text("ended (cancelled)")
    assert page.locator("#cancel-job").is_hidden()
    with stack.api() as api:
        assert api.get(f"/jobs/{job_id}").json()["status"] == "cancelled"
    page.click("#queue-back")
    page.wait_for_selector("nav.tabs")
    page.wait_for_selector(f"#workloads tr[data-workload='{row_id}'] >> text=cancelled")
    assert "workload=" not in page.url


def test_the_queue_at_390_px(browser: Any, recorder: Recorder, stack: Stack, work: dict[str, Any]) -> None:
    narrow = new_page(browser, recorder, viewport=NARROW)
    try:
        sign_in(narrow, stack, path=PATH)
        narrow.wait_for_selector(f"#workloads tr[data-workload='cq-sft-{work['tag']}']")
        assert narrow.evaluate("document.documentElement.scrollWidth") <= NARROW["width"]
        narrow.click(f"#workloads tr[data-workload='cq-sft-{work['tag']}']")
        narrow.wait_for_selector("#workload-fields")
        assert narrow.evaluate("document.documentElement.scrollWidth") <= NARROW["width"]
        narrow.click("#queue-back")
        narrow.wait_for_selector("nav.tabs")
    finally:
        finish(narrow, recorder, stack, "queue_narrow")


def _next_refresh(page: Any) -> None:
    """Wait for the Workload Queue's next refresh to be asked. live() asks the next one only after the
    one before has rendered, so two of these in a row span at least one whole render."""
    with page.expect_request(lambda r: "/api/compute/workloads?" in r.url):
        pass


def test_a_click_across_a_refresh_still_opens_the_row(page: Any, stack: Stack, work: dict[str, Any]) -> None:
    # A press before a refresh and its release after: the row (unchanged) is still the element pressed,
    # so the click lands. Every refresh used to build every row anew, and such a click did nothing.
    sign_in(page, stack, path=PATH)
    row = f"#workloads tr[data-workload='cq-sft-{work['tag']}']"
    page.wait_for_selector(row)
    page.evaluate("(sel) => { window.pressed = document.querySelector(sel); }", row)
    page.hover(row)
    page.mouse.down()
    _next_refresh(page)
    _next_refresh(page)
    assert page.evaluate("(sel) => document.querySelector(sel) === window.pressed", row)
    page.mouse.up()
    page.wait_for_selector("#workload-fields")
    expect(page.locator("#workload-title")).to_contain_text(f"llama-sft-{work['tag']}")

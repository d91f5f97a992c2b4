"""The connect page in a real browser: a simulated cloud connected with a wrong then a right key (the
cloud's reason shown and nothing saved, then the success screen and the connection in the API); an SSH
fleet of a simulated host (fakeclouds/ssh.py) with its probe answer on the page, then its edit form
pre-filled but for the key; the per-provider forms (GCP's key file filling the project id, RunPod's
Community Cloud toggle, Modal's environment) and the chooser, at 390 px and from the keyboard."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh
from playwright.sync_api import expect

from fakeclouds import clouds as sim
from fakeclouds.catalog import Gpu, InstanceType
from fakeclouds.nvidia_smi import CONTAINER_RUNTIME, script_for
from fakeclouds.ssh import MachineSSH
from tests.browser.conftest import NARROW, Recorder, Stack, finish, new_page, sign_in
from tests.eventually import eventually_sync

XSS = "<img src=x onerror=alert(1)>"


def connections(stack: Stack) -> list[dict[str, Any]]:
    with stack.api() as api:
        r = api.get("/connections", params={"limit": 200})
        r.raise_for_status()
        return r.json()["items"]


def hold_posts(page: Any, path: str) -> list[Any]:
    """Hold the page's POSTs to `path` until the test lets them go (route.continue_()), so what the
    page shows while it waits can be seen; every other request goes on."""
    held: list[Any] = []

    def handle(route: Any) -> None:
        if route.request.method == "POST":
            held.append(route)
        else:
            route.continue_()

    page.route(f"**{path}", handle)
    return held


def release(page: Any, held: list[Any]) -> None:
    """Let the held POST go (route events are dispatched while Playwright waits: poll up to 30 s)."""
    deadline = time.monotonic() + 30
    while not held:
        assert time.monotonic() < deadline, "the page made no POST"
        page.wait_for_timeout(50)
    held.pop().continue_()


def test_connect_a_cloud_with_a_wrong_then_a_right_key(page: Any, stack: Stack) -> None:
    cloud = "vastai"
    existing = [c for c in connections(stack) if c["provider"] == cloud]
    assert existing, "gpuprov dev connects every simulated cloud"
    endpoint = existing[0]["endpoint"]
    token = json.loads((stack.home / "cloud-tokens.json").read_text())[cloud]
    right = sim.facade(cloud).credentials(token)
    assert list(right) == ["api_key"]
    before = {c["id"] for c in connections(stack)}

    sign_in(page, stack, path=f"/studio/connect-cloud?provider={cloud}")
    page.wait_for_selector("#connect-form")
    assert page.inner_text("#provider-name") == "Vast.ai"
    assert page.inner_text("#provider-tagline") == "Cheapest GPU marketplace"
    assert page.get_attribute("#change-provider", "href") == "/studio/compute/cloud#connect"
    assert "billed to your account" in page.inner_text("#billed-note.note-amber")
    assert not page.is_visible("#how-to-connect p")  # collapsed until opened
    page.click("#how-to-connect summary")
    assert page.is_visible("#how-to-connect p")

    page.fill("#conn-name", XSS)
    page.fill("#cred-api_key", "not-the-key")
    page.click("#advanced summary")
    page.fill("#conn-endpoint", endpoint)
    held = hold_posts(page, "/api/compute/connections")
    page.click("#connect-submit")
    button = page.locator("#connect-submit")
    expect(page.locator("#connect-submit")).to_be_disabled(timeout=30_000)
    assert button.inner_text().lower() == "verifying connection…"
    release(page, held)
    page.wait_for_selector("#connect-status .error")
    reason = page.inner_text("#connect-status .error")
    assert reason.startswith("could not verify vastai"), reason
    assert button.is_enabled() and button.inner_text().lower() == "connect"
    # Nothing saved, nothing lost: the API has no new connection and the form keeps what was typed.
    assert {c["id"] for c in connections(stack)} == before
    assert page.input_value("#cred-api_key") == "not-the-key"
    assert page.input_value("#conn-endpoint") == endpoint
    assert page.input_value("#conn-name") == XSS

    page.fill("#cred-api_key", right["api_key"])
    page.click("#connect-submit")
    release(page, held)
    page.wait_for_selector("#connect-success", timeout=60_000)
    made = [c for c in connections(stack) if c["id"] not in before]
    try:
        assert len(made) == 1 and made[0]["provider"] == cloud and made[0]["name"] == XSS, made
        assert made[0]["status"] == "connected" and made[0]["endpoint"] == endpoint
        assert page.get_attribute("#connect-success", "data-connection") == made[0]["id"]
        assert page.inner_text("#connected-name") == XSS  # the typed name, as text
        assert page.locator("main img").count() == 0
        assert page.get_attribute("#to-offers", "href") == f"/studio/backend-offers?backend={cloud}"
        assert page.get_attribute("#to-cloud", "href") == "/studio/compute/cloud"
    finally:
        with stack.api() as api:
            for c in made:
                assert api.delete(f"/connections/{c['id']}").status_code in (200, 202, 204)
            # gone, not `removing`: the make-run checks that share this run count its connections
            ids = {c["id"] for c in made}
            eventually_sync(lambda: not ids & {c["id"] for c in api.get("/connections", params={
                "limit": 200}).json()["items"]}, within=60, what="the new connection removed")


# ------------------------------------------------------------------- SSH fleet of a simulated host


@dataclass
class SimHost:
    address: str
    port: int
    private_key: str
    silent: str  # an address of the same network where nothing listens


@contextmanager
def simulated_host(root: Path) -> Iterator[SimHost]:
    """One GPU host (2× H100 80GB, Docker, passwordless sudo) behind a real SSH server on a loopback
    address, served from its own event loop in a thread for the synchronous browser test."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    home = root / "host"
    (home / "bin").mkdir(parents=True)
    h100 = InstanceType(name="H100", description="", gpu_description=None, vcpus=1, memory_gib=1,
                        storage_gib=1, prices={},
                        gpu=Gpu(name="H100", smi_name="NVIDIA H100 80GB HBM3", memory_mib=81559, count=2))
    for name, text in {"nvidia-smi": script_for(h100, "host"), "nvidia-container-runtime": CONTAINER_RUNTIME,
                       "docker": "#!/bin/sh\necho simulated docker\n", "sudo": "#!/bin/sh\nexit 0\n"}.items():
        (home / "bin" / name).write_text(text)
        (home / "bin" / name).chmod(0o755)
    net = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}"
    server = MachineSSH(home=home, host_key=asyncssh.generate_private_key("ssh-ed25519"), user="ubuntu",
                        public_keys=[key.export_public_key().decode()],
                        env={"PATH": f"{home / 'bin'}:/usr/bin:/bin"})
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def run(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(30)

    try:
        port = run(server.start(f"{net}.21"))
        yield SimHost(f"{net}.21", port, key.export_private_key("openssh").decode(), f"{net}.22")
    finally:
        run(server.stop())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def test_connect_an_ssh_fleet_and_see_its_probe_then_edit_it(page: Any, stack: Stack, tmp_path: Path) -> None:
    dialogs: list[str] = []
    def dismiss(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismiss)
    with simulated_host(tmp_path) as host:
        sign_in(page, stack, path="/studio/connect-cloud?provider=ssh")
        page.wait_for_selector("#fleet-form")
        assert page.inner_text("#provider-name") == "SSH / On-prem"
        assert page.locator("#billed-note").count() == 0  # the amber note is for clouds only
        needs = page.inner_text("#ssh-requirements")
        for item in ("Docker", "CUDA 12.1", "NVIDIA Container Toolkit", "Passwordless sudo",
                     "AllowTcpForwarding yes"):
            assert item in needs
        assert page.input_value("#fleet-user") == "ubuntu" and page.input_value("#fleet-port") == "22"

        page.fill("#fleet-name", XSS)
        page.fill("#fleet-port", str(host.port))
        page.fill("#fleet-key", host.private_key)
        page.fill("#fleet-hosts", f"{host.address}\n{host.silent}")
        fleet_id = None
        try:
            held = hold_posts(page, "/api/compute/fleets")
            page.click("#connect-submit")
            expect(page.locator("#connect-submit")).to_be_disabled(timeout=30_000)
            assert page.inner_text("#connect-submit").lower() == "verifying connection…"
            release(page, held)
            page.wait_for_selector("#fleet-result")
            fleet_id = page.get_attribute("#fleet-result", "data-fleet")
            up = page.locator(f'#fleet-hosts-result .row[data-host="{host.address}"][data-reachable="true"]')
            up.wait_for(timeout=90_000)
            assert up.locator(".gpus").inner_text() == "2× H100 (80GB) · 160GB total"
            down = page.locator(
                f'#fleet-hosts-result .row[data-host="{host.silent}"][data-reachable="false"]')
            down.wait_for(timeout=90_000)
            assert "unreachable" in down.inner_text() and down.locator(".reason").inner_text()
            expect(page.locator("#probe-summary")).to_contain_text("1 of 2 hosts reachable", timeout=90_000)
            # The name typed shows as text: no element made of it, no script run.
            assert page.inner_text("#connected-name") == XSS
            assert page.locator("main img").count() == 0 and dialogs == []
            with stack.api() as api:
                saved = api.get(f"/fleets/{fleet_id}").json()
            assert saved["name"] == XSS and [x["reachable"] for x in saved["hosts"]] == [True, False]

            # Editing pre-fills everything but the key; saved with the key blank, it keeps the key.
            page.click("#edit-fleet")
            page.wait_for_selector("#fleet-form")
            assert page.input_value("#fleet-name") == XSS
            assert page.input_value("#fleet-user") == "ubuntu"
            assert page.input_value("#fleet-port") == str(host.port)
            assert page.input_value("#fleet-hosts") == f"{host.address}\n{host.silent}"
            assert page.input_value("#fleet-key") == ""
            page.fill("#fleet-hosts", host.address)
            page.click("#connect-submit")
            page.wait_for_selector("#fleet-result")
            up = page.locator(f'#fleet-hosts-result .row[data-host="{host.address}"][data-reachable="true"]')
            up.wait_for(timeout=90_000)
            expect(page.locator("#probe-summary")).to_contain_text("1 of 1 host reachable", timeout=90_000)
            assert page.locator("#fleet-hosts-result .row").count() == 1
        finally:
            with stack.api() as api:
                if fleet_id is None:  # saved before the page showed it: found by its name
                    fleets = api.get("/fleets").json()["items"]
                    fleet_id = next((f["id"] for f in fleets if f["name"] == XSS), None)
                if fleet_id:
                    assert api.delete(f"/fleets/{fleet_id}").status_code == 200


# ------------------------------------------------------------------- per-provider forms, narrow


def test_provider_forms_and_the_chooser_at_390px_from_the_keyboard(browser: Any, recorder: Recorder,
                                                                    stack: Stack) -> None:
    page = new_page(browser, recorder, viewport=NARROW)
    try:
        sign_in(page, stack, path="/studio/connect-cloud?provider=no-such-cloud")
        page.wait_for_selector("#connect-choose")
        assert "no-such-cloud" in page.inner_text("#connect-choose .error")
        keys = page.locator("#connect-choose a.provider-card").evaluate_all(
            "cards => cards.map((a) => a.dataset.key)")
        assert {"runpod", "gcp", "modal", "vastai", "ssh"} <= set(keys)
        assert page.evaluate("document.scrollingElement.scrollWidth") <= 390
        # From the keyboard: focus RunPod's card and press Enter.
        page.focus('#connect-choose a[data-key="runpod"]')
        page.keyboard.press("Enter")
        page.wait_for_selector("#connect-form")
        assert page.url.endswith("/studio/connect-cloud?provider=runpod")
        assert page.inner_text("#provider-name") == "RunPod"
        toggle = page.locator("#cred-include_community")
        assert not toggle.is_checked()
        toggle.focus()
        page.keyboard.press("Space")
        assert toggle.is_checked()
        assert page.evaluate("document.scrollingElement.scrollWidth") <= 390

        page.goto(stack.url + "/studio/connect-cloud?provider=modal")
        page.wait_for_selector("#connect-form")
        assert page.input_value("#cred-environment") == "main"

        page.goto(stack.url + "/studio/connect-cloud?provider=gcp")
        page.wait_for_selector("#connect-form")
        assert page.input_value("#cred-project_id") == ""
        key = json.dumps({"type": "service_account", "project_id": "my-proj-123", "client_email": "a@b"})
        page.set_input_files("#cred-service_account_key", files=[
            {"name": "key.json", "mimeType": "application/json", "buffer": key.encode()}])
        expect(page.locator("#cred-project_id")).to_have_value("my-proj-123", timeout=30_000)
        # A project id typed first is kept.
        page.fill("#cred-project_id", "typed-project")
        page.set_input_files("#cred-service_account_key", files=[
            {"name": "key2.json", "mimeType": "application/json", "buffer": key.encode()}])
        page.wait_for_selector(".file-state:has-text('key2.json read')")
        assert page.input_value("#cred-project_id") == "typed-project"
        page.click("#change-provider")
        page.wait_for_url("**/studio/compute/cloud#connect")
        page.wait_for_selector('#connect a.provider-card[href="/studio/connect-cloud?provider=gcp"]')
    finally:
        finish(page, recorder, stack, "test_provider_forms_and_the_chooser_at_390px_from_the_keyboard")

"""The GPU clouds after `make run`, end to end with real processes: `gpuprov dev` connects every
simulated cloud; `gpuprov offers` asks them all at once; one allocation per cloud over HTTP, the
real OpenSSH client logging in with the user's key at the address and port each cloud reports;
terminate, then the simulated clouds hold nothing of ours — no machine, no per-VM side resource."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import httpx

from fakeclouds import clouds
from tests.devrun import DevRun, dev_ports
from tests.e2e.test_user_flow import gpuprov, openssh, user_key

CLOUDS = ("lambda", "runpod", "vastai", "hyperstack", "massedcompute", "digitalocean", "verda",
          "primeintellect")
OWNED_NAME = re.compile(r"gpuprov-[a-z0-9]{8}-(.+)")


def settle(api: httpx.Client, ids: dict[str, str], done: set[str], deadline_s: float = 240) -> dict[str, Any]:
    """Poll each instance until its status is in `done`; their last details."""
    last: dict[str, Any] = {}
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        last = {cloud: api.get(f"/api/compute/instances/{i}").json() for cloud, i in ids.items()}
        if all(d["status"] in done for d in last.values()):
            return last
        time.sleep(0.5)
    raise AssertionError({c: (d["status"], d.get("error")) for c, d in last.items()})


def test_every_gpu_cloud_allocates_logs_in_and_leaves_nothing(tmp_path: Path, processes: None) -> None:
    assert set(CLOUDS) <= set(clouds.simulated())
    home, ports = tmp_path / "home", dev_ports()
    private, public = user_key(tmp_path)
    # The documented rate limits stay on, 100x faster (Lambda: a launch per 0.12 s).
    run = DevRun(home, ports, extra_env={"GPUPROV_DEV_CLOUD_TIME_SCALE": "0.01"})
    try:
        token = run.wait_for(r"API token\s+(\S+)").group(1)  # printed once every cloud is connected
        url = f"http://127.0.0.1:{ports['GPUPROV_API_PORT']}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPROV_")}
        env.update(GPUPROV_TOKEN=token, GPUPROV_API_URL=url)

        offers = gpuprov(env, "offers", "--gpu", "A100")
        assert offers.returncode == 0, offers.stdout + offers.stderr
        clouds_shown = {line.split()[0] for line in offers.stdout.splitlines()[1:] if line.strip()}
        assert len(clouds_shown & set(CLOUDS)) >= 3, offers.stdout  # one list, several clouds
        assert "answered" in offers.stderr or "offers" in offers.stderr, offers.stderr

        api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        conns = api.get("/api/compute/connections", params={"limit": 200}).json()["items"]
        connected = {c["provider"] for c in conns if c["status"] == "connected"}
        assert set(CLOUDS) <= connected, connected
        key = public.read_text().strip()
        ids = {}
        for cloud in CLOUDS:
            body = {"cloud": cloud, "k3s": False, "ssh_public_keys": [key]}
            r = api.post("/api/compute/instances", json=body)
            assert r.status_code == 202, (cloud, r.text)
            ids[cloud] = r.json()["id"]
        ready = settle(api, ids, {"ready", "failed"})
        assert {c: d["status"] for c, d in ready.items()} == dict.fromkeys(CLOUDS, "ready"), \
            {c: d.get("error") for c, d in ready.items()}
        for cloud, detail in ready.items():
            ssh = detail["ssh"]
            login = openssh(private, ssh["port"], ssh["user"], "echo in as $USER", host=ssh["host"])
            assert login.returncode == 0 and login.stdout.strip() == f"in as {ssh['user']}", (cloud, login)

        for i in ids.values():
            assert api.post(f"/api/compute/instances/{i}/terminate").status_code == 202
        settle(api, ids, {"terminated"})

        admin = f"http://127.0.0.1:{ports['GPUPROV_LOCALCLOUD_PORT']}/_fake"
        machines = [m for m in httpx.get(f"{admin}/machines").json()["machines"] if m["facade"] in CLOUDS]
        assert {m["facade"] for m in machines} == set(CLOUDS)
        assert [m for m in machines if m["status"] != "terminated"] == []
        keys = {m_.group(1) for m in machines if (m_ := OWNED_NAME.fullmatch(m.get("name") or ""))}
        left = [row for row in httpx.get(f"{admin}/side-resources").json()["side_resources"]
                if row["facade"] in CLOUDS and any(k in str(row.get("name")) for k in keys)]
        assert left == [], left
    finally:
        assert run.interrupt() == 0, "\n".join(run.lines[-50:])

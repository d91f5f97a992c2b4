"""`gpuprov dev` end to end on free ports: starts every child, connects the simulated clouds
through the real ConnectWorkflow, stops everything on SIGINT, and keeps state across restarts;
its home is its user's only and no process shows a secret on its command line."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from fakeclouds import clouds
from tests import audit
from tests.devrun import DevRun, alive, assert_private, dev_ports

pytestmark = pytest.mark.slow


def test_dev_starts_connects_stops_and_restarts(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ports = dev_ports()
    api = f"http://127.0.0.1:{ports['GPUPROV_API_PORT']}"

    run = DevRun(home, ports)
    try:
        token = run.wait_for(r"API token\s+(\S+)").group(1)
        pids = run.child_pids()
        assert len(pids) == 4  # temporal, localcloud, worker, api
        token_file = home / "api-token"
        assert token_file.read_text().strip() == token and (token_file.stat().st_mode & 0o777) == 0o600
        headers = {"Authorization": f"Bearer {token}"}
        assert httpx.get(f"{api}/openapi.json", headers=headers).status_code == 200
        assert httpx.get(f"{api}/api/compute/connections").status_code == 401
        conns = httpx.get(f"{api}/api/compute/connections", headers=headers).json()["items"]
        assert sorted((c["provider"], c["name"], c["status"]) for c in conns) == sorted(
            (cloud, clouds.facade(cloud).display_name, "connected") for cloud in clouds.simulated())
        # Every child has written its state (the worker ran ConnectWorkflow, each cloud verified the
        # tokens it read from cloud-tokens.json): all of it private, no secret in any argv.
        assert_private(run, home)
        # The security audit's reproductions (tests/audit.py), against this running `make run`.
        assert [f"{c.name}: {c.seen}" for c in audit.run(api, token, home) if not c.ok] == []
    finally:
        code = run.interrupt()
    assert code == 0, "\n".join(run.lines)
    assert "stopped" in run.lines
    assert [p for p in pids if alive(p)] == []

    # A home an older gpuprov left readable by others is made private on the next start.
    home.chmod(0o755)
    (home / "logs" / "api.log").chmod(0o644)
    # Restart on the same home: same token, the connections are not made twice.
    again = DevRun(home, ports)
    try:
        assert again.wait_for(r"API token\s+(\S+)").group(1) == token
        assert [line for line in again.lines if "private" in line] == [
            f"gpuprov: made {home} private (mode 700, was 755); its files are owner-only now"]
        assert_private(again, home)
        conns = httpx.get(f"{api}/api/compute/connections", headers=headers).json()["items"]
        assert len(conns) == len(clouds.simulated())
        assert not any("connected " in line for line in again.lines)
    finally:
        assert again.interrupt() == 0

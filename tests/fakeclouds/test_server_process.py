from __future__ import annotations

from pathlib import Path

import asyncssh
import httpx

from tests.processes import simulation_process

# In the crash lane, not the stacks lane: the two process lanes stay near one length (tests/tiers.py).
TESTS_LANE = "crash"


def _ssh_ok(port: int, key: asyncssh.SSHKey, command: str = "cat note 2>/dev/null; echo alive") -> str:
    import asyncio

    async def go() -> str:
        async with asyncssh.connect("127.0.0.1", port, username="gpuprov", client_keys=[key],
                                    known_hosts=None) as conn:
            return str((await conn.run(command)).stdout)
    return asyncio.run(go())


def _shims(port: int, key: asyncssh.SSHKey) -> tuple[str, str]:
    """Where the machine's `sudo` and `shutdown` resolve: the simulation's shims, not the host's."""
    return tuple(_ssh_ok(port, key, "command -v sudo; command -v shutdown").split())  # type: ignore[return-value]


def test_own_process_survives_crash_and_clean_restart(tmp_path: Path, pubkey: str, ssh_key: asyncssh.SSHKey,
                                                      processes: None) -> None:
    state = tmp_path / "cloud"
    cloud = simulation_process(state_dir=state, boot_delay=0.1, tokens={"local": "t0k"})
    headers = {"Authorization": "Bearer t0k"}
    assert "t0k" not in " ".join(map(str, cloud.proc.args))  # given by a file, not the command line
    try:
        r = httpx.post(f"{cloud.url}/local/v1/machines", headers=headers, json={
            "name": "keep", "instance_type": "cpu-small", "region": "local-1", "ssh_public_keys": [pubkey]})
        assert r.status_code == 201, r.text
        mid = r.json()["id"]
        port = cloud.admin.wait_status(mid, "running")["ssh_port"]
        _ssh_ok(port, ssh_key)
        # A persisted cloud's machines (and what they left running) outlive this process: their
        # shims live in the state dir, at the same path after a restart, never in a temporary one.
        shims = _shims(port, ssh_key)
        assert all(Path(p).is_relative_to(state) for p in shims), shims
        httpx.post(f"{cloud.url}/local/v1/machines", headers=headers, json={
            "name": "note", "instance_type": "cpu-small", "region": "local-1", "ssh_public_keys": [pubkey]})
    finally:
        cloud.kill()  # a crash: SIGKILL
    cloud = simulation_process(cloud.port, state_dir=state, boot_delay=0.1, tokens={"local": "t0k"})
    try:
        assert cloud.admin.machine(mid)["ssh_port"] == port
        assert _ssh_ok(port, ssh_key) == "alive\n"
        assert _shims(port, ssh_key) == shims
        names = sorted(m["name"] for m in httpx.get(f"{cloud.url}/local/v1/machines", headers=headers).json()[
            "machines"])
        assert names == ["keep", "note"]
    finally:
        assert cloud.stop() == 0  # SIGTERM: clean exit
    cloud = simulation_process(cloud.port, state_dir=state, boot_delay=0.1, tokens={"local": "t0k"})
    try:
        assert cloud.admin.machine(mid)["status"] == "running"
        assert _ssh_ok(port, ssh_key) == "alive\n"
    finally:
        cloud.kill()  # the assertions are done; the clean stop was asserted above

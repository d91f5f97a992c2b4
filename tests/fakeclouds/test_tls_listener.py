"""The server's optional TLS listener (for facades whose SDK talks only https): the same app over
https, a certificate from a CA kept in the state dir (a restart keeps it, so stored connections keep
trusting it), the URL on the second stdout line and, with the CA, at /_fake/tls."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import pytest

from fakeclouds import tls
from tests.processes import simulation_process

# In the crash lane, not the stacks lane: the two process lanes stay near one length (tests/tiers.py).
TESTS_LANE = "crash"


def test_the_tls_listener_serves_the_app_with_a_ca_that_outlives_a_restart(tmp_path: Path,
                                                                           processes: None) -> None:
    state = tmp_path / "state"
    with simulation_process(state_dir=state) as first:
        assert first.tls_url is not None and first.tls_url.startswith("https://127.0.0.1:")
        ca = first.ca_pem
        assert ca is not None and first.admin.tls()["url"] == first.tls_url
        trusting = ssl.create_default_context(cadata=ca)
        assert httpx.get(f"{first.tls_url}/_fake/health", verify=trusting).json() == {"ok": True}
        assert httpx.get(f"{first.url}/_fake/health").json() == {"ok": True}  # plain http as before
        with pytest.raises(httpx.ConnectError):  # the system's CAs do not know it
            httpx.get(f"{first.tls_url}/_fake/health")
    second = simulation_process(state_dir=state)
    try:
        assert second.ca_pem == ca
    finally:
        second.kill()  # the assertion is done: no clean stop (about 1 s) needed


def test_a_certificate_is_made_anew_for_another_host_by_the_same_ca(tmp_path: Path) -> None:
    first = tls.ensure(tmp_path)
    ca, cert = first.ca_pem, first.cert_file.read_text()
    assert tls.ensure(tmp_path).cert_file.read_text() == cert  # reused
    again = tls.ensure(tmp_path, ("127.0.0.2",))
    assert again.ca_pem == ca and again.cert_file.read_text() != cert
    assert tls.ensure(tmp_path).cert_file.read_text() == again.cert_file.read_text()  # names both now
    assert oct(first.key_file.stat().st_mode & 0o777) == "0o600"

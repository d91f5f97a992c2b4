"""Fleet tests: the API's fixtures (tests/api/conftest.py) for the routes; real SSH servers
(fakeclouds/ssh.py) and the session's Temporal dev server for the probe."""

from __future__ import annotations

from tests.api.conftest import box, client, engine, fake_cloud, workflows  # noqa: F401 — fixtures

"""Shared fixtures: one Temporal dev server per session (real visibility and search
attributes; the time-skipping server has neither), a time-skipping server for a test that asks,
the `processes` permit for tests that run real service processes, a migrated SQLite store, a
secret box. Each test's tier marker is read off these fixtures (tests/tiers.py).

Directory-specific fixtures live in each directory's own conftest.py."""

from __future__ import annotations

import atexit
import gc
import os
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import sqlalchemy as sa
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from store import migrate
from store.db import make_engine
from store.secrets import SecretBox
from tests import netguard, tiers
from tests import processes as process_permit
from workflows import dev_server, search_attributes
from workflows.converter import data_converter

if TYPE_CHECKING:
    from tests.devstack import SharedDev

# Adapters pace their calls under the clouds' documented rate limits at the speed the simulated clouds
# run them: FakeCloudServer and start_subprocess default to time_scale 0.001 (providers/pacing.py).
# Subprocesses started with this environment (workers) inherit it; a test may set its own.
os.environ.setdefault("GPUPROV_CLOUD_TIME_SCALE", "0.001")

# Hypothesis (under schemathesis) keeps what it derives once in its storage directory: the table of
# the characters UTF-8 encodes (6 CPU-s to build), the constants of the source it reads. Its default,
# .hypothesis/ in the checkout, made every fresh clone build them again; they are kept where the Docker
# engine's image is. No example database is kept there: every run is derandomized (database=None).
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(Path.home() / ".cache" / "gpuprov" / "hypothesis"))

# The Docker cloud's real engine and its fault proxy: fixtures for tests/docker_ and the crash tests.
pytest_plugins = ("tests.docker_.fixtures",)

TEMPORAL_BIN = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "temporal"
TEST_SERVER_BIN = TEMPORAL_BIN.with_name("temporal-test-server")
netguard.install()  # nothing but loopback from a test process (tests/netguard.py)

# As a test process exits, Python's finalization runs full garbage collections over every object still
# alive: ~3 CPU-s (and seconds of wall time at the end of every run) in a process that has loaded the
# cloud SDKs, moto and schemathesis. Nothing a test checks runs then (pytest's own collections, which
# report unraisable exceptions, ran at unconfigure), so what survives is frozen out of them.
atexit.register(gc.freeze)

# The SDK fails a workflow activation that takes over 2 s of wall time as a deadlock (TMPRL1101). A test
# process holds ~800 MB of heap beside its in-process Temporal workers, and on a starved box (three
# xdist workers beside two CPU hogs, 2026-12-05) a query's activation was caught in a garbage
# collection past 2 s: the query failed, and the eviction after it never finished, so that worker's
# shutdown held the session's teardown for pytest-timeout's 300 s. In test processes only, the
# detector waits 30 s; `python worker.py` (production, and the suite's worker processes) keeps 2 s.
TEST_DEADLOCK_TIMEOUT_S = 30


def _patient_deadlock_detector() -> None:
    from temporalio.worker import _workflow

    original = _workflow._WorkflowWorker.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if not hasattr(self, "_deadlock_timeout_seconds"):  # an SDK upgrade renamed it: say so
            raise RuntimeError("temporalio's _WorkflowWorker has no _deadlock_timeout_seconds: "
                               "update tests/conftest.py's _patient_deadlock_detector")
        if self._deadlock_timeout_seconds is not None:  # None: debug mode, no detector
            self._deadlock_timeout_seconds = TEST_DEADLOCK_TIMEOUT_S

    _workflow._WorkflowWorker.__init__ = init  # type: ignore[method-assign]


_patient_deadlock_detector()

# The test session's secret key (a test key, committed on purpose): the payload codec encrypts every
# history the tests write with it, so histories recorded by tests/workflows/test_replay.py (committed
# under tests/workflows/histories/) stay decodable by later runs.
TEST_SECRET_KEY = b"rh76KGtl4GROfwYIOBotiaxxOJxj67pRoZF22bDD_y8="


@pytest.fixture(scope="session")
def temporal_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The dev server's SQLite database (tests read it to see what Temporal stores)."""
    return tmp_path_factory.mktemp("temporal") / "temporal.db"


@pytest.fixture(scope="session")
async def temporal_env(temporal_db: Path) -> AsyncIterator[WorkflowEnvironment]:
    db = temporal_db
    env = await WorkflowEnvironment.start_local(
        data_converter=data_converter([TEST_SECRET_KEY]),
        dev_server_existing_path=str(TEMPORAL_BIN),
        dev_server_database_filename=str(db),
        search_attributes=search_attributes.ALL,
        dev_server_startup_timeout=dev_server.STARTUP_TIMEOUT,
        dev_server_extra_args=dev_server.FLAGS,
    )
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture
async def time_skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    """A time-skipping test server of this test's own (no schedules, no visibility)."""
    env = await WorkflowEnvironment.start_time_skipping(data_converter=data_converter([TEST_SECRET_KEY]),
                                                        test_server_existing_path=str(TEST_SERVER_BIN),
                                                        test_server_startup_timeout=dev_server.STARTUP_TIMEOUT)
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture
def processes() -> Iterator[None]:
    """Permits this test to start real service processes (tests/processes.py: DevRun, Process, the
    simulation as a process); the test's tier is then `processes`."""
    with process_permit.permitted():
        yield


@pytest.fixture(scope="module")
def module_processes() -> Iterator[None]:
    """The `processes` permit for a module-scoped fixture that starts real processes shared by the
    module's tests (one `gpuprov dev` run for several checks); their tier is then `processes`."""
    with process_permit.permitted():
        yield


@pytest.fixture(scope="session")
def session_processes() -> Iterator[None]:
    """The `processes` permit for the session-scoped `gpuprov dev` run the end-to-end files share."""
    with process_permit.permitted():
        yield


@pytest.fixture(scope="session")
def machine_ready() -> None:
    """Waits while `make test`'s machine setup (tests/machine_setup.py: podman, the engine's image,
    chromium) is still installing, before a test starts processes that need them — not inside them,
    where the wait would count against their start-up timeouts. Its tests run last in their process
    lanes (tests/tiers.py), by when the setup is done."""
    from tests import machine_setup

    machine_setup.wait()


@pytest.fixture(scope="session")
def shared_dev(tmp_path_factory: pytest.TempPathFactory, session_processes: None,
               machine_ready: None) -> Iterator[SharedDev]:
    """One `gpuprov dev` run for the console's browser tests and the make-run checks (tests/devstack.py).
    Stopped at the end of the session unless a test stopped it already."""
    from tests import devstack

    shared = devstack.start(tmp_path_factory.mktemp("shared-dev"))
    try:
        yield shared
    finally:
        if shared.alive():
            shared.run.interrupt()


@pytest.fixture(scope="package")
def package_processes() -> Iterator[None]:
    """The `processes` permit for a package-scoped fixture: one `gpuprov dev` run shared by the
    files of a package (the console's browser tests, tests/browser/)."""
    with process_permit.permitted():
        yield


@pytest.fixture(scope="session")
def temporal_client(temporal_env: WorkflowEnvironment) -> Client:
    return temporal_env.client


@pytest.fixture(scope="session")
def db_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("store") / "gpuprov.db"


@pytest.fixture(scope="session")
def db_engine(db_path: Path) -> Iterator[sa.Engine]:
    engine = make_engine(f"sqlite:///{db_path}")
    migrate.upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def secret_key() -> bytes:
    return TEST_SECRET_KEY


@pytest.fixture(scope="session")
def secret_box(secret_key: bytes) -> SecretBox:
    return SecretBox(secret_key)


@pytest.fixture(autouse=True)
def no_real_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fleet host names are resolved by a FAKE resolver in every in-process test (any name: a
    TEST-NET address): this box's DNS server is off loopback, where no test may send anything."""
    from providers import fleet_addresses
    from tests.fake_resolver import FakeResolver

    monkeypatch.setattr(fleet_addresses, "system_resolver", FakeResolver())


def pytest_configure(config: pytest.Config) -> None:
    tiers.configure(config)
    if not hasattr(config, "workerinput") and config.getoption("dist", "no") == "loadscope":
        tiers.units_folder()  # the xdist controller, before it starts its workers


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Schedule by tests/tiers.py's units where `make test` asks for loadscope."""
    if config.getoption("dist") == "loadscope":
        return tiers.unit_scheduling(config, log)
    return None


def pytest_itemcollected(item: pytest.Item) -> None:
    tiers.mark_one(item)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    twice = sorted(nodeid for nodeid, n in Counter(item.nodeid for item in items).items() if n > 1)
    # pytest-xdist schedules by nodeid: all but one of them would never run. (schemathesis 4.32's
    # `schema.parametrize()` named all 63 operations' tests `test_x` under pytest 9.2.)
    if twice:
        raise pytest.UsageError(f"{len(twice)} nodeids name more than one test, e.g. {twice[0]}")
    tiers.order(items)
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        tiers.share_units(items, workerinput["workerid"])

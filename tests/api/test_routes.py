"""No route does synchronous database work on the event loop.

Statically: a route that takes a session is a plain `def` (FastAPI runs it on its threadpool);
an `async` route takes none and calls nothing that opens one except through `in_thread`.
At run time: every statement the routes issue runs off the event loop's thread.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import textwrap
import threading
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any, cast

import httpx
import pytest
import sqlalchemy as sa
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

import api.routers
from api import deps as api_deps
from api.deps import AppDeps, get_read_session, get_session
from store import ids
from store import instances as instance_store
from tests.api.conftest import FakeWorkflows, connect_fake

DB_NAMES = {"session", "open_session", "open_read_session", "Session", "select"}


def store_module(name: str, scope: dict[str, Any]) -> Any:
    """The module of store/ that `name` is in `scope` (a function's globals), or None."""
    found = scope.get(name)
    return found if inspect.ismodule(found) and found.__name__.startswith("store.") else None


def app_routes() -> list[APIRoute]:
    """The routes of every router module in api/routers (the app includes each of them)."""
    found = []
    for info in pkgutil.iter_modules(api.routers.__path__):
        module = importlib.import_module(f"api.routers.{info.name}")
        found += [r for r in module.router.routes if isinstance(r, APIRoute)]
    return found


def calls(dependant: Dependant) -> Iterator[Callable[..., Any]]:
    for sub in dependant.dependencies:
        if sub.call is not None:
            yield sub.call
        yield from calls(sub)


def touches_db(fn: Callable[..., Any], module: Any, seen: set[str] | None = None) -> bool:
    """Whether `fn` (a sync helper of `module`) reaches the database, following the module's helpers."""
    seen = seen if seen is not None else set()
    if fn.__name__ in seen:
        return False
    seen.add(fn.__name__)
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and (node.id in DB_NAMES or store_module(node.id, fn.__globals__)):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            helper = getattr(module, node.func.id, None)
            if inspect.isfunction(helper) and helper.__module__ == module.__name__ \
                    and touches_db(helper, module, seen):
                return True
    return False


def direct_db_calls(fn: Callable[..., Any]) -> list[str]:
    """Calls in an async function that would run database code on the loop (not via in_thread)."""
    module = inspect.getmodule(fn)
    assert module is not None
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        root = func
        while isinstance(root, ast.Attribute):
            root = root.value
        store = store_module(root.id, fn.__globals__) if isinstance(root, ast.Name) else None
        if store is not None and isinstance(func, ast.Attribute):
            if "session" in inspect.signature(getattr(store, func.attr)).parameters:
                found.append(ast.unparse(func))  # a store query; pure helpers (ids.new_id) are fine
        elif isinstance(root, ast.Name) and root.id in DB_NAMES:
            found.append(ast.unparse(func))
        elif isinstance(func, ast.Attribute) and func.attr in DB_NAMES - {"session", "select"}:
            found.append(ast.unparse(func))
        elif isinstance(func, ast.Name):
            helper = getattr(module, func.id, None)
            if inspect.isfunction(helper) and not inspect.iscoroutinefunction(helper) \
                    and helper.__module__ == module.__name__ and touches_db(helper, module):
                found.append(func.id)
    return found


def test_routes_that_take_a_session_are_sync_and_async_routes_use_the_threadpool() -> None:
    sessions = {get_session, get_read_session}
    # made on the loop (no I/O), closed on the threadpool
    assert all(map(inspect.isasyncgenfunction, sessions))
    checked_async = []
    for route in app_routes():
        endpoint = route.endpoint
        takes_session = bool(sessions & set(calls(route.dependant)))
        if inspect.iscoroutinefunction(endpoint):
            assert not takes_session, f"async {route.path} takes a session"
            assert direct_db_calls(endpoint) == [], f"async {route.path} calls the database on the loop"
            checked_async.append(route.name)
        else:
            assert not inspect.isasyncgenfunction(endpoint)
    assert {"create_connection", "delete_connection", "create_instance", "terminate_instance",
            "list_offers"} <= set(checked_async)


def test_the_static_check_catches_a_direct_call() -> None:
    from api.routers import instances
    from api.routers.instances import _instance

    async def bad(deps: AppDeps) -> None:
        with instances.open_session(deps) as session:
            session.commit()

    async def bad_helper(deps: AppDeps) -> None:
        _instance(deps, "x")

    async def bad_store(deps: AppDeps, session: Any) -> None:
        instance_store.get_instance(session, "x")

    async def good(deps: AppDeps) -> None:
        await api_deps.in_thread(instances._instance, deps, "x")
        ids.new_id()

    for fn in (bad, bad_helper, bad_store, good):
        fn.__module__ = instances.__name__
    assert direct_db_calls(bad) == ["instances.open_session", "session.commit"]
    assert direct_db_calls(bad_helper) == ["_instance"]
    assert direct_db_calls(bad_store) == ["instance_store.get_instance"]
    assert direct_db_calls(good) == []


async def test_no_statement_runs_on_the_event_loop(client: httpx.AsyncClient, engine: sa.Engine,
                                                   workflows: FakeWorkflows, ssh_key: str) -> None:
    on_loop: list[str] = []
    loop_thread = threading.get_ident()  # the ASGI app runs on this test's loop

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if threading.get_ident() == loop_thread:
            on_loop.append(statement.split(None, 1)[0])

    # A connection back to the pool, and a session's transaction ended: a ROLLBACK on the wire when
    # the connection holds a transaction (a read session's holds none: it is closed on the loop).
    def returned(dbapi_conn: Any, record: Any, state: Any) -> None:
        if threading.get_ident() == loop_thread and dbapi_conn.in_transaction:
            on_loop.append("reset")

    def rolled_back(conn: sa.Connection) -> None:
        dbapi_conn = conn.connection.dbapi_connection
        if threading.get_ident() == loop_thread and dbapi_conn is not None and dbapi_conn.in_transaction:
            on_loop.append("ROLLBACK")

    sa.event.listen(engine, "before_cursor_execute", record)
    sa.event.listen(engine.pool, "reset", returned)
    sa.event.listen(engine, "rollback", rolled_back)
    try:
        conn = await connect_fake(client)
        refused = {"provider": "fakecloud", "credentials": {"api_key": "bad"}}
        assert (await client.post("/api/compute/connections", json=refused)).status_code == 400
        assert (await client.get("/api/compute/connections")).status_code == 200
        assert (await client.get("/api/compute/clouds")).status_code == 200
        assert (await client.get("/api/compute/backends/fakecloud/offers")).status_code == 200
        r = await client.post("/api/compute/instances",
                              json={"cloud": "fakecloud", "ssh_public_keys": [ssh_key]})
        assert r.status_code == 202, r.text
        iid = r.json()["id"]
        assert (await client.get("/api/compute/instances")).status_code == 200
        assert (await client.get(f"/api/compute/instances/{iid}")).status_code == 200
        assert (await client.post(f"/api/compute/instances/{iid}/terminate")).status_code == 202
        assert (await client.post("/api/compute/instances/nope/terminate")).status_code == 404
        assert (await client.delete(f"/api/compute/connections/{conn['id']}")).status_code == 202
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
        sa.event.remove(engine.pool, "reset", returned)
        sa.event.remove(engine, "rollback", rolled_back)
    assert on_loop == []


async def test_a_write_session_closes_off_the_event_loop_a_read_session_on_it(engine: sa.Engine) -> None:
    """On PostgreSQL closing a session that wrote (or read in a transaction) sends a ROLLBACK; a read
    session's (autocommit there) sends nothing. The test above runs on SQLite, where neither closing
    sends one after a committed write: this checks where each dependency closes its session."""
    deps = cast(AppDeps, SimpleNamespace(engine=engine))
    loop_thread = threading.get_ident()
    closed_on: dict[str, bool] = {}
    for name, dependency in (("write", get_session), ("read", get_read_session)):
        sessions = dependency(deps)
        session = await anext(sessions)
        close = session.close

        def noted(name: str = name, close: Callable[[], None] = close) -> None:
            closed_on[name] = threading.get_ident() == loop_thread
            close()

        session.close = noted  # type: ignore[method-assign]
        session.execute(sa.text("SELECT 1"))
        with pytest.raises(StopAsyncIteration):
            await anext(sessions)
    assert closed_on == {"write": False, "read": True}  # False: on a thread of the pool

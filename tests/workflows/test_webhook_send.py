"""L5: a webhook whose query httpx cannot send (CR/LF, NUL: a card saved before the API refused
them) is a recorded failure of the action, not an exception escaping it; an answered one leaves
no response behind for the garbage collector."""

from __future__ import annotations

import asyncio
import gc

import httpx
import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet

from activities.deps import ActivityDeps
from activities.policy import webhook_action
from messages.policy import ActInput, Facts, PolicyFacts, PolicySpec, WebhookThen
from store.secrets import SecretBox

# Loopback, on a port nothing listens on: httpx refuses the URL before any connection is tried.
HOOK = "http://127.0.0.1:9/hook"


@pytest.mark.parametrize("query", ["token=a\r\nX-Injected: 1", "token=\x00", "token=a\nb"])
async def test_an_unsendable_query_is_a_recorded_failure(query: str) -> None:
    deps = ActivityDeps(engine=sa.create_engine("sqlite://"), box=SecretBox(Fernet.generate_key()),
                        installation_id="inst0001", webhook_allowlist=[HOOK])
    spec = PolicySpec.model_validate({"when": {"kind": "cron", "expression": "@hourly"},
                                      "then": {"kind": "webhook", "url": HOOK}})
    facts = PolicyFacts(policy_id="p", project="default", spec=spec, spend_rate_per_hour=0.0, facts=Facts())
    result = await webhook_action(deps, ActInput(policy_id="p", project="default", facts=facts, reason="r"),
                                  WebhookThen(url=f"{HOOK}?{query}"))
    assert not result.ok and result.result == "webhook failed (InvalidURL)"
    assert "token" not in result.result


async def test_a_webhook_answer_is_freed_when_dropped() -> None:
    """The answer is not left in a reference cycle for the collector (providers/rest.py
    AcyclicClient): with the collector off, no httpx response outlives the action."""
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")  # the body is small: it came with the headers or is ignored
        writer.write(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    hook = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/hook"
    deps = ActivityDeps(engine=sa.create_engine("sqlite://"), box=SecretBox(Fernet.generate_key()),
                        installation_id="inst0001", webhook_allowlist=[hook])
    spec = PolicySpec.model_validate({"when": {"kind": "cron", "expression": "@hourly"},
                                      "then": {"kind": "webhook", "url": hook}})
    facts = PolicyFacts(policy_id="p", project="default", spec=spec, spend_rate_per_hour=0.0, facts=Facts())
    gc.collect()
    # Responses other tests in this process hold (parametrize values, alive for the session) are
    # not this action's: held here so none of their ids can be taken by a new one.
    before = [o for o in gc.get_objects() if isinstance(o, httpx.Response)]
    gc.disable()
    try:
        async with server:
            result = await webhook_action(deps, ActInput(policy_id="p", project="default", facts=facts,
                                                         reason="r"), WebhookThen(url=hook))
        assert result.ok and result.result == "webhook answered HTTP 204"
        held = {id(o) for o in before}
        left = [o for o in gc.get_objects() if isinstance(o, httpx.Response) and id(o) not in held]
        assert left == []
    finally:
        gc.enable()

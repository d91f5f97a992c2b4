"""How a Modal call reaches the simulation: the client's auth metadata, and one answer per call.

What the official client (`modal` 1.6.4, modal/client.py `_get_metadata`) sends on every call:
`x-modal-token-id` and `x-modal-token-secret` metadata (no `authorization`), so the shared
`grpc_call.check_bearer` does not apply; a wrong pair is UNAUTHENTICATED, which the client raises as
`modal.exception.AuthError` with the server's message.

One answer per call, not per attempt: the client retries DEADLINE_EXCEEDED, UNAVAILABLE, INTERNAL,
UNKNOWN and CANCELLED up to 3 times (modal/_utils/grpc_utils.py `_retry_transient_errors`), every
attempt of one call carrying the same `x-idempotency-key`, which Modal's server uses to run the call
once. The simulation does the same: the refusal a call drew (a fault rule, a lost response) is the
answer to every attempt under that key, and its effect runs once. So a fault rule added through
`/_fake/faults` fails one *call* of the client, as it fails one HTTP call of the other clouds.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NoReturn

import grpc

from fakeclouds.common import run_op
from fakeclouds.engine import Engine
from fakeclouds.errors import CloudError, Unauthorized
from fakeclouds.faults import CallPlan
from fakeclouds.grpc_call import metadata_value, peer_host
from fakeclouds.grpc_errors import status_of
from fakeclouds.ratelimit import identity

TOKEN_ID_KEY, TOKEN_SECRET_KEY = "x-modal-token-id", "x-modal-token-secret"
IDEMPOTENCY_KEY = "x-idempotency-key"
REMEMBER_S = 120.0  # longer than the client's whole retry loop of one call
# Modal's refusal of a bad token pair [wording unconfirmed; the status is what the client reads].
BAD_TOKEN = "Token ID or secret is invalid. Create a new token at https://modal.com/settings/tokens."


def token_id_for(secret: str) -> str:
    """The token id paired with a secret in the simulation (`ak-` + 20 hex digits, Modal's shape)."""
    return "ak-" + hashlib.sha256(secret.encode()).hexdigest()[:20]


class ModalCaller:
    """Runs one Modal RPC: token pair, rate limits, faults and effect once per idempotency key."""

    def __init__(
        self, engine: Engine, facade: str, secret: str, calls: Callable[[str], None] | None = None
    ) -> None:
        self.engine, self.facade = engine, facade
        self._pair = (token_id_for(secret), secret)
        self._answers: OrderedDict[str, tuple[float, CloudError | None, Any]] = OrderedDict()
        self._record = calls

    def _check_token(self, context: grpc.aio.ServicerContext) -> None:
        token_id = metadata_value(context, TOKEN_ID_KEY) or ""
        secret = metadata_value(context, TOKEN_SECRET_KEY) or ""
        ok = hmac.compare_digest(token_id.encode(), self._pair[0].encode())
        ok &= hmac.compare_digest(secret.encode(), self._pair[1].encode())
        if not ok:
            raise Unauthorized(BAD_TOKEN)

    async def abort(self, context: grpc.aio.ServicerContext, exc: CloudError) -> NoReturn:
        status = status_of(exc)
        await context.abort(status.code, status.message, trailing_metadata=status.trailing_metadata)
        raise AssertionError("context.abort returned")

    async def run(
        self,
        context: grpc.aio.ServicerContext,
        method: str,
        op: str | None,
        effect: Callable[[CallPlan], Any],
    ) -> Any:
        """Auth, then (for `op` not None) rate limits and the fault rules of `op`, then the effect.
        `method` is the RPC's name, recorded for the remote-call list (tests/modal_)."""
        if self._record is not None:
            self._record(method)
        key = metadata_value(context, IDEMPOTENCY_KEY)
        self._forget_old()
        if key and key in self._answers:
            _, error, result = self._answers[key]
            if error is not None:
                await self.abort(context, error)
            return result
        try:
            self._check_token(context)
            if op is None:
                result = effect(CallPlan([]))
            else:
                self._check_rate(context, op)
                result = await run_op(self.engine, self.facade, op, effect)
        except CloudError as exc:
            if key and not isinstance(exc, Unauthorized):
                self._answers[key] = (time.monotonic(), exc, None)
            await self.abort(context, exc)
        if key:
            self._answers[key] = (time.monotonic(), None, result)
        return result

    def _check_rate(self, context: grpc.aio.ServicerContext, op: str) -> None:
        limits = self.engine.facade(self.facade).rate_limits
        if limits:
            who = identity(metadata_value(context, TOKEN_ID_KEY), peer_host(context))
            self.engine.limiter.check(self.facade, limits, who, op)

    def _forget_old(self) -> None:
        cutoff = time.monotonic() - REMEMBER_S
        while self._answers and next(iter(self._answers.values()))[0] < cutoff:
            self._answers.popitem(last=False)

"""The offers pages' answers, shared by every API process of the installation.

Each API process keeps a connection's answer to an offers query for the cache's TTL
(providers/market.py OfferCache). With the API in several processes behind one port (and replicas
behind a proxy), a request that reached another process found nothing there and asked the cloud
again — for Vast.ai, whose search is paced at one per 6 s per key, a wait of up to 6 s for an answer
one second old. Each answer is also written here, and a process that has none asks here before it
asks the cloud.

Expiry is on the wall clock of the process that wrote the answer (seconds since the epoch): hosts
whose clocks differ by a few seconds serve an answer that much longer or shorter. Rows past their
expiry are deleted whenever an answer is written. Offers are not secret (a cloud's public prices);
the key is a digest that names neither the connection nor its credentials.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import sqlalchemy as sa

_LOAD = sa.text("SELECT expires_at, offers FROM offer_answer WHERE key = :key AND expires_at > :now")
_SAVE = sa.text("INSERT INTO offer_answer (key, expires_at, offers) VALUES (:key, :expires_at, :offers) "
                "ON CONFLICT (key) DO UPDATE SET expires_at = excluded.expires_at, offers = excluded.offers")
_PRUNE = sa.text("DELETE FROM offer_answer WHERE expires_at <= :now")


class OfferAnswers:
    """`load` and `save` by key, on `engine` (SQLite or PostgreSQL). Blocking: callers on an event
    loop run them on a thread."""

    def __init__(self, engine: sa.Engine, clock: Callable[[], float] = time.time) -> None:
        self.engine = engine
        self.clock = clock

    def load(self, key: str) -> tuple[float, str] | None:
        """(seconds it stays fresh, the offers' JSON) of the answer kept under `key`, or None."""
        now = self.clock()
        with self.engine.connect() as conn:
            row = conn.execute(_LOAD, {"key": key, "now": now}).first()
        return None if row is None else (row.expires_at - now, row.offers)

    def save(self, key: str, offers: str, ttl_s: float) -> None:
        """Keep `offers` (JSON) under `key` for `ttl_s` seconds; drop every answer that has expired."""
        now = self.clock()
        with self.engine.begin() as conn:
            conn.execute(_PRUNE, {"now": now})
            conn.execute(_SAVE, {"key": key, "expires_at": now + ttl_s, "offers": offers})

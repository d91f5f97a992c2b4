"""The offers pages' answers, shared by every API process of the installation.

Each API process keeps a connection's answer to an offers query for the cache's TTL
(providers/market.py OfferCache). With the API in several processes behind one port (and replicas
behind a proxy), a request that reached another process found nothing there and asked the cloud
again — for Vast.ai, whose search is paced at one per 6 s per key, a wait of up to 6 s for an answer
one second old. Each answer is also written here, and a process that has none asks here before it
asks the cloud.

A process about to ask the cloud first takes its turn here (`claim`: a row whose offers are empty,
until a deadline), and the others wait for its answer instead of asking too — a slow cloud's page,
asked again by the browser while the first call runs (a 504 says "try again shortly"), would
otherwise reach the other process and double the search. The answer replaces the turn; a call that
fails gives it back (`release`); a process that died holding it holds nobody past its deadline.

Expiry is on the wall clock of the process that wrote the row (seconds since the epoch): hosts
whose clocks differ by a few seconds serve an answer that much longer or shorter. Rows past their
expiry are deleted whenever an answer is written. Offers are not secret (a cloud's public prices);
the key is a digest that names neither the connection nor its credentials.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import sqlalchemy as sa

ASKING = ""  # a row's offers while a process asks the cloud for them (its turn, until expires_at)

_LOAD = sa.text("SELECT expires_at, offers FROM offer_answer WHERE key = :key AND expires_at > :now")
_SAVE = sa.text("INSERT INTO offer_answer (key, expires_at, offers) VALUES (:key, :expires_at, :offers) "
                "ON CONFLICT (key) DO UPDATE SET expires_at = excluded.expires_at, offers = excluded.offers")
_PRUNE = sa.text("DELETE FROM offer_answer WHERE expires_at <= :now")
_PRUNE_ONE = sa.text("DELETE FROM offer_answer WHERE key = :key AND expires_at <= :now")
_CLAIM = sa.text("INSERT INTO offer_answer (key, expires_at, offers) VALUES (:key, :until, :asking) "
                 "ON CONFLICT (key) DO NOTHING")
_RELEASE = sa.text("DELETE FROM offer_answer WHERE key = :key AND offers = :asking AND expires_at = :until")


class OfferAnswers:
    """`load`, `save`, `claim` and `release` by key, on `engine` (SQLite or PostgreSQL). Blocking:
    callers on an event loop run them on a thread."""

    def __init__(self, engine: sa.Engine, clock: Callable[[], float] = time.time) -> None:
        self.engine = engine
        self.clock = clock

    def load(self, key: str) -> tuple[float, str | None] | None:
        """(seconds it stays fresh, the offers' JSON) of the answer kept under `key`; the offers None
        while another process asks the cloud for them (the seconds: until it stops holding its
        turn); None when nothing is kept or asked."""
        now = self.clock()
        with self.engine.connect() as conn:
            row = conn.execute(_LOAD, {"key": key, "now": now}).first()
        if row is None:
            return None
        return row.expires_at - now, None if row.offers == ASKING else row.offers

    def save(self, key: str, offers: str, ttl_s: float) -> None:
        """Keep `offers` (JSON) under `key` for `ttl_s` seconds, in place of a turn taken for it;
        drop every answer that has expired."""
        now = self.clock()
        with self.engine.begin() as conn:
            conn.execute(_PRUNE, {"now": now})
            conn.execute(_SAVE, {"key": key, "expires_at": now + ttl_s, "offers": offers})

    def claim(self, key: str, for_s: float) -> float | None:
        """Take the turn to ask the cloud for `key`'s offers, for `for_s` seconds at most: its deadline
        (what `release` names), or None when an answer is kept or another process holds the turn."""
        now = self.clock()
        until = now + for_s
        with self.engine.begin() as conn:
            conn.execute(_PRUNE_ONE, {"key": key, "now": now})
            taken = conn.execute(_CLAIM, {"key": key, "until": until, "asking": ASKING}).rowcount == 1
        return until if taken else None

    def release(self, key: str, until: float) -> None:
        """Give back the turn `claim` took (its call failed): the next process to ask takes it. A turn
        past its deadline and taken by another since is theirs, and stays."""
        with self.engine.begin() as conn:
            conn.execute(_RELEASE, {"key": key, "asking": ASKING, "until": until})

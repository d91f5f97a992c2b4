"""Idempotency-Key: a retried create (same key, same body, same project) answers with what the
first one made and makes nothing twice — even when the API died after the workflow started.

No state can diverge because nothing is looked up by chance:

- the resource id is derived from the key (`derived_id`), so the workflow id, which comes from
  the resource id, is the same on every retry and Temporal itself refuses a second run;
- the key's first use is recorded (scope, key hash, request fingerprint, resource id) under a
  unique constraint, so reusing the key with another body is refused instead of answered with the
  other request's resource. The key itself is never stored, nor put in a workflow id.

Without a key, ids are random (`store.ids.new_id()`) as before.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Annotated, Any

from fastapi import Header, HTTPException, status

from api.deps import AppDeps, open_session
from store import idempotency

HEADER = "Idempotency-Key"
MAX_KEY = 200
REUSED = "Idempotency-Key was used for a different request"

IdempotencyKey = Annotated[str | None, Header(
    alias=HEADER, min_length=1, max_length=MAX_KEY, pattern=r"^[\x20-\x7e]+$",
    description="Optional, 1-200 printable ASCII characters. A create retried with the same key and "
                "the same body answers with what the first one made and creates nothing twice (even if "
                "the API died meanwhile); the same key with a different body is a 422.")]


def scope_of(kind: str, project: str) -> str:
    """Keys are unique per kind of resource within a project."""
    return f"{kind}:{project}"


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def derived_id(kind: str, project: str, key: str) -> str:
    """The resource id of a keyed create: a letter, then 11 characters of base32 of
    sha256(kind|project|key) — [a-z0-9], 12 long (random ids are 10: the two never meet)."""
    digest = hashlib.sha256(f"{kind}|{project}|{key}".encode()).digest()
    return kind[0] + base64.b32encode(digest).decode().lower()[:11]


def canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def fingerprint(body: dict[str, Any]) -> str:
    """The request as validated (defaults filled, order normalised): what "the same request" means."""
    return hashlib.sha256(canonical(body)).hexdigest()


def check(deps: AppDeps, scope: str, key: str, fingerprint_: str) -> bool:
    """Whether the key was used before in this scope (sync: call through `in_thread`); 422 when
    it was used with another request."""
    with open_session(deps) as session:
        found = idempotency.find_idempotency_key(session, scope, key_hash(key))
    if found is not None and found.fingerprint != fingerprint_:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, REUSED)
    return found is not None


def claim(deps: AppDeps, scope: str, key: str, fingerprint_: str, resource_id: str) -> str:
    """Record the key's first use (or find it, also when a concurrent request won the race); the
    resource id it names. 422 when it was used with another request. Sync: call through `in_thread`."""
    with open_session(deps) as session:
        record = idempotency.claim_idempotency_key(session, scope=scope, key_hash=key_hash(key),
                                                   fingerprint=fingerprint_, resource_id=resource_id)
    if record.fingerprint != fingerprint_:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, REUSED)
    return record.resource_id


def release(deps: AppDeps, scope: str, key: str, fingerprint_: str) -> None:
    """A keyed request that ended in a 4xx having made nothing leaves no record: a retry, with this
    body or a corrected one, is a first use again. Sync: call through `in_thread`."""
    with open_session(deps) as session:
        idempotency.release_idempotency_key(session, scope=scope, key_hash=key_hash(key),
                                            fingerprint=fingerprint_)

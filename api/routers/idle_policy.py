"""The built-in idle policy (issue 11): terminate the project's job machines idle longer than N
minutes — and its machines allocated by hand when the project opts in (`include_manual`). Off until
a project sets it: `PUT /api/compute/idle-policy` saves it as one policy card of the project
(When `idle` → Then `terminate_idle`, the id `builtin-idle-<project>`), on its own Temporal Schedule
like any other (api/routers/policies.py): it is listed with the project's policies, shows its
triggers and last result there, and `enabled: false` pauses it. Pool machines are left to their pool
(activities/policy.py terminate_idle_action)."""

from __future__ import annotations

import logging

from fastapi import APIRouter, HTTPException, status
from pydantic import Field

from api.auth import CallerDep
from api.deps import DepsDep, SessionDep, in_thread
from api.fields import Strict
from api.routers.policies import SAVE_ERRORS, PolicyIn, PolicyOut, save_card, sync_schedule
from messages.policy import IdleWhen, Minutes, TerminateIdleThen
from store import policies

log = logging.getLogger(__name__)
router = APIRouter(prefix="/idle-policy", tags=["policies"])

NAME = "Built-in: terminate idle machines"


def builtin_idle_policy_id(project: str) -> str:
    return f"builtin-idle-{project}"


class IdlePolicyIn(Strict):
    minutes: Minutes = Field(description="idle (GPU under 5 %, no job, no login session) longer than this")
    include_manual: bool = Field(default=False, description="also machines allocated by hand (the opt-in)")
    enabled: bool = True


@router.put("", response_model=PolicyOut, responses=SAVE_ERRORS)
async def put_idle_policy(body: IdlePolicyIn, deps: DepsDep, caller: CallerDep) -> PolicyOut:
    """Set the project's built-in idle policy (made on first use) and its Schedule."""
    card = PolicyIn(name=NAME, enabled=body.enabled, when=IdleWhen(minutes=body.minutes),
                    then=TerminateIdleThen(minutes=body.minutes, include_manual=body.include_manual))
    row = await in_thread(save_card, deps, caller.project, builtin_idle_policy_id(caller.project), card,
                          create=True)
    assert row is not None
    await sync_schedule(deps, caller.project, row)
    log.info("built-in idle policy of %s set: %d min, include_manual=%s, %s", caller.project, body.minutes,
             body.include_manual, "enabled" if body.enabled else "disabled")
    return PolicyOut.of(row)


@router.get("", response_model=PolicyOut,
            responses={404: {"description": "not set: the built-in idle policy is off"}})
def get_idle_policy(session: SessionDep, caller: CallerDep) -> PolicyOut:
    row = policies.get_policy(session, caller.project, builtin_idle_policy_id(caller.project))
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "the built-in idle policy is not set (off)")
    return PolicyOut.of(row)

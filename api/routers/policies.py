"""Policies (the Compute page's Policies view): When → Then cards, each enabled one a Temporal
Schedule (`gpuprov-policy-<project>-<id>`, in the Web UI's Schedules) that runs PolicyWorkflow —
every GPUPROV_POLICY_INTERVAL_S for a condition, on its cron expression for `cron`.

Saving writes the row first, then the Schedule: a Schedule never runs a policy that is not stored.
Disabling pauses the Schedule (it stays, with a note); DELETE deletes it, then the row. A webhook's
URL must lie under GPUPROV_WEBHOOK_ALLOWLIST; logs never show its query (it may carry a token)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, HTTPException, status
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field
from sqlmodel import select

from api.auth import CallerDep
from api.deps import AppDeps, DepsDep, SessionDep, in_thread, open_session
from api.errors import shown
from api.fields import Name, Timestamp, aware
from api.pagination import Keyset, Page, PageDep
from api.temporal import WorkflowUnavailable
from messages import workflows as wf
from messages.ids import policy_schedule_id, policy_workflow_id
from messages.policy import CronWhen, PolicyInput, PolicySpec, Then, WebhookThen, When
from providers.endpoints import EndpointError, check_webhook, split_query
from store import ids, policies
from store.models import Policy

log = logging.getLogger(__name__)
router = APIRouter(prefix="/policies", tags=["policies"])

KEYSET = Keyset("policies", Policy.created_at, Policy.id, descending=False)
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "no such policy in the project"}}
SAVE_ERRORS: dict[int | str, dict[str, Any]] = {
    422: {"description": "invalid card: the field is named (a webhook outside the allowlist too)"},
    503: {"description": "Temporal unreachable (POST: nothing saved; PUT: saved, Schedule not updated — "
                         "save again)"}}


class PolicyIn(PolicySpec):
    """A policy card: a name, the switch, When → Then, optional max spend ($/hr) and cooldown."""

    name: Name
    enabled: bool = True


class PolicyOut(BaseModel):
    id: str
    name: str
    enabled: bool
    when: When
    then: Then
    max_spend_per_hour: float | None
    cooldown_minutes: int | None
    schedule_id: str = Field(description="its Temporal Schedule (paused while the policy is disabled)")
    trigger_count: int = Field(description="how many runs acted")
    last_triggered_at: Timestamp | None
    last_result: str | None = Field(description="the last run's outcome: what it did, or why it did not act")
    last_evaluated_at: Timestamp | None
    triggered: str = Field(description='the card\'s line, e.g. '
                                       '"Triggered 3 times · last: 2026-12-01 10:00 UTC"')
    created_at: Timestamp
    updated_at: Timestamp

    @classmethod
    def of(cls, row: Policy) -> PolicyOut:
        spec = PolicySpec.model_validate(row.spec)
        if isinstance(spec.then, WebhookThen):
            url = shown_url(spec.then.url, row.webhook_secret is not None)
            spec = spec.model_copy(update={"then": WebhookThen(url=url)})
        last = aware(row.last_triggered_at)
        times = "once" if row.trigger_count == 1 else f"{row.trigger_count} times"
        line = f"Triggered {times} · last: " + (last.strftime("%Y-%m-%d %H:%M UTC") if last else "never")
        created = aware(row.created_at)
        updated = aware(row.updated_at)
        assert created is not None and updated is not None
        return cls(id=row.id, name=row.name, enabled=row.enabled, when=spec.when,
                   then=spec.then, max_spend_per_hour=spec.max_spend_per_hour,
                   cooldown_minutes=spec.cooldown_minutes,
                   schedule_id=policy_schedule_id(row.project, row.id),
                   trigger_count=row.trigger_count, last_triggered_at=last, last_result=row.last_result,
                   last_evaluated_at=aware(row.last_evaluated_at), triggered=line,
                   created_at=created, updated_at=updated)


class PolicyRemoval(BaseModel):
    id: str
    deleted: bool


def query_problem(query: str) -> str | None:
    """Why a webhook's query cannot be sent, or None: a control character (CR/LF, NUL, ...) or a
    space is not a URL (httpx refuses it at send time, and CR/LF could split the request line).
    The API's own `…` (HIDDEN_QUERY: keep the saved query) is printable, so it passes."""
    if not query.isprintable() or any(c.isspace() for c in query):
        return "may not have control characters or spaces in its query (percent-encode them)"
    return None


def _check_webhook(deps: AppDeps, body: PolicyIn) -> None:
    """A 422 naming `then.url` unless the webhook lies under the allowlist and its query is sendable
    (never quoting the URL)."""
    if isinstance(body.then, WebhookThen):
        try:
            problem = query_problem(split_query(body.then.url)[1])
            if problem is not None:
                raise EndpointError(problem)
            check_webhook(body.then.url, deps.webhook_allowlist)
        except EndpointError as e:
            raise RequestValidationError([{"loc": ("body", "then", "url"), "type": "value_error",
                                           "msg": f"the webhook URL {e}"}]) from None


def shown_url(base: str, has_query: bool) -> str:
    """A webhook URL as the API answers it: its query (the hook's token, maybe) never returned."""
    return base + (HIDDEN_QUERY if has_query else "")


HIDDEN_QUERY = "?…"  # sent back unchanged in a PUT, it keeps the saved query


def _spec(body: PolicyIn, saved: Policy | None) -> tuple[dict[str, object], str | None | object]:
    """The card as stored (a webhook's URL without its query) and what becomes of the query: the
    new one, None, or KEEP when the URL came back as the API showed it."""
    spec = PolicySpec.model_validate(body.model_dump(exclude={"name", "enabled"}))
    query: str | None | object = None
    if isinstance(spec.then, WebhookThen):
        base, q = split_query(spec.then.url)
        saved_then = PolicySpec.model_validate(saved.spec).then if saved is not None else None
        if (q == HIDDEN_QUERY[1:] and isinstance(saved_then, WebhookThen) and saved_then.url == base
                and saved is not None and saved.webhook_secret is not None):
            query = policies.KEEP
        else:
            query = q or None
        spec = spec.model_copy(update={"then": WebhookThen(url=base)})
    return spec.model_dump(mode="json"), query


async def sync_schedule(deps: AppDeps, project: str, row: Policy) -> None:
    """The policy's Schedule as the row says: its cadence, paused while disabled."""
    spec = PolicySpec.model_validate(row.spec)
    cron = spec.when.expression if isinstance(spec.when, CronWhen) else None
    note = "" if row.enabled else "the policy is disabled"
    try:
        await deps.workflows.put_schedule(
            policy_schedule_id(project, row.id), wf.POLICY,
            PolicyInput(policy_id=row.id, project=project),
            workflow_id=policy_workflow_id(project, row.id), every_s=deps.policy_interval_s, cron=cron,
            paused=not row.enabled, note=note)
    except WorkflowUnavailable as e:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                            f"policy {row.id} is saved but its Schedule is not: {e} "
                            "(save it again)") from None


def save_card(deps: AppDeps, project: str, policy_id: str, body: PolicyIn, *, create: bool) -> Policy | None:
    with open_session(deps) as session:
        saved = policies.get_policy(session, project, policy_id)
        if not create and saved is None:
            return None
        spec, query = _spec(body, saved)
        return policies.save_policy(session, deps.box, policy_id=policy_id, project=project, name=body.name,
                                    enabled=body.enabled, spec=spec, webhook_query=query)


def _get(deps: AppDeps, project: str, policy_id: str) -> Policy | None:
    with open_session(deps) as session:
        return policies.get_policy(session, project, policy_id)


def _delete(deps: AppDeps, policy_id: str) -> None:
    with open_session(deps) as session:
        policies.delete_policy(session, policy_id)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=PolicyOut, responses=SAVE_ERRORS)
async def create_policy(body: PolicyIn, deps: DepsDep, caller: CallerDep) -> PolicyOut:
    """Save a policy and its Schedule (paused when `enabled` is false)."""
    _check_webhook(deps, body)
    row = await in_thread(save_card, deps, caller.project, ids.new_id(), body, create=True)
    assert row is not None
    try:
        await sync_schedule(deps, caller.project, row)
    except HTTPException:
        await in_thread(_delete, deps, row.id)  # no card without its Schedule: nothing was saved
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                            "Temporal is unreachable: the policy was not saved") from None
    log.info("policy %s created (%s → %s)", row.id, body.when.kind, body.then.kind)
    return PolicyOut.of(row)


@router.get("", response_model=Page[PolicyOut])
def list_policies(session: SessionDep, caller: CallerDep, page: PageDep) -> Page[PolicyOut]:
    """The project's policies, oldest first."""
    rows, following = KEYSET.fetch(session, select(Policy).where(Policy.project == caller.project), page)
    return Page(items=[PolicyOut.of(r) for r in rows], next_cursor=following)


@router.get("/{policy_id}", response_model=PolicyOut, responses=NOT_FOUND)
def get_policy(policy_id: str, session: SessionDep, caller: CallerDep) -> PolicyOut:
    row = policies.get_policy(session, caller.project, policy_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no policy {shown(policy_id)}")
    return PolicyOut.of(row)


@router.put("/{policy_id}", response_model=PolicyOut, responses={**NOT_FOUND, **SAVE_ERRORS})
async def update_policy(policy_id: str, body: PolicyIn, deps: DepsDep, caller: CallerDep) -> PolicyOut:
    """Replace the card (its trigger count and last result stay) and its Schedule: a new cadence
    applies at once; `enabled: false` pauses the Schedule, `true` resumes it."""
    _check_webhook(deps, body)
    row = await in_thread(save_card, deps, caller.project, policy_id, body, create=False)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no policy {shown(policy_id)}")
    await sync_schedule(deps, caller.project, row)
    log.info("policy %s updated (%s)", row.id, "enabled" if row.enabled else "disabled: schedule paused")
    return PolicyOut.of(row)


@router.delete("/{policy_id}", response_model=PolicyRemoval,
               responses={**NOT_FOUND, 503: {"description": "Temporal unreachable: nothing was deleted"}})
async def delete_policy(policy_id: str, deps: DepsDep, caller: CallerDep) -> PolicyRemoval:
    """Delete the Schedule, then the card (a Schedule is never left running a deleted policy; a run
    already started finds the card gone and does nothing)."""
    row = await in_thread(_get, deps, caller.project, policy_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no policy {shown(policy_id)}")
    try:
        await deps.workflows.delete_schedule(policy_schedule_id(caller.project, policy_id))
    except WorkflowUnavailable as e:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(e)) from None
    await in_thread(_delete, deps, policy_id)
    log.info("policy %s deleted", policy_id)
    return PolicyRemoval(id=policy_id, deleted=True)

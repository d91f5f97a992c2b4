"""Policies: the seed's card (When → Then, max spend, cooldown) as typed unions discriminated by
`kind`, and the messages of PolicyWorkflow (workflows/policy.py): the facts one run gathers, what it
decided, what it recorded.

The API validates requests with these same models (unknown fields refused), so a stored policy is
always one the workflow can read. Times travel as ISO 8601 UTC strings.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from messages.json_numbers import IntegralFloats
from messages.queue_groups import QueueGroup

PoolName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$",
                                description="a pool's name (a slug)")]
Minutes = Annotated[int, Field(ge=1, le=7 * 24 * 60)]


class _Strict(IntegralFloats):
    # strict: a card's numbers and switches are JSON's own (no `false` for a pool's size, no "30" for
    # minutes; `30.0` is JSON's 30: messages/json_numbers.py), as api/fields.py `Strict` holds every
    # request body; its text fields are plain strings.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


# --------------------------------------------------------------------------- cron


_CRON_MACROS = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"})
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# (name, lowest, highest, names mapped from the lowest value up)
_CRON_FIELDS: tuple[tuple[str, int, int, tuple[str, ...]], ...] = (
    ("minute", 0, 59, ()), ("hour", 0, 23, ()), ("day of month", 1, 31, ()),
    ("month", 1, 12, _MONTHS), ("day of week", 0, 7, _DAYS))
_CRON_ITEM = re.compile(r"^(\*|[a-z0-9]+(?:-[a-z0-9]+)?)(?:/([0-9]+))?$")


def _cron_value(text: str, lo: int, hi: int, names: tuple[str, ...], field: str) -> int:
    if text in names:
        return lo + names.index(text)
    if not text.isdigit():
        raise ValueError(f"cron {field}: {text!r} is not a number" + (" or a name" if names else ""))
    value = int(text)
    if not lo <= value <= hi:
        raise ValueError(f"cron {field}: {value} is outside {lo}-{hi}")
    return value


def check_cron(expression: str) -> str:
    """The expression (trimmed) if it is a standard 5-field cron expression (minute hour day-of-month
    month day-of-week: numbers, `*`, ranges a-b, lists a,b, steps /n, month and day names) or one of
    the @hourly/@daily/... macros; ValueError saying which field is wrong otherwise. Temporal's
    Schedule reads the same syntax."""
    text = " ".join(expression.split()).lower()
    if text in _CRON_MACROS:
        return text
    parts = text.split(" ")
    if len(parts) != 5:
        raise ValueError(f"a cron expression has 5 fields (minute hour day-of-month month day-of-week), "
                         f"not {len(parts)}")
    for part, (field, lo, hi, names) in zip(parts, _CRON_FIELDS, strict=True):
        for item in part.split(","):
            m = _CRON_ITEM.match(item)
            if m is None:
                raise ValueError(f"cron {field}: {item!r} is not *, a value, a range a-b or a step /n")
            span, step = m.group(1), m.group(2)
            if step is not None and int(step) == 0:
                raise ValueError(f"cron {field}: a step must be at least 1")
            if span != "*":
                ends = [_cron_value(v, lo, hi, names, field) for v in span.split("-")]
                if len(ends) == 2 and ends[0] > ends[1]:
                    raise ValueError(f"cron {field}: range {span!r} runs backwards")
    return text


# --------------------------------------------------------------------------- When


class QueueWaitWhen(_Strict):
    """The oldest queued job of the group `type` (messages/queue_groups.py: sft covers sft and dpo)
    has waited longer than `minutes`."""

    kind: Literal["queue_wait"] = "queue_wait"
    type: QueueGroup
    minutes: Minutes


class QueueDepthWhen(_Strict):
    """At least `n` jobs of the group `type` are queued in the project."""

    kind: Literal["queue_depth"] = "queue_depth"
    type: QueueGroup
    n: int = Field(ge=1, le=100_000)


class PoolUtilisationWhen(_Strict):
    """The pool's utilisation — busy machines / ready machines, in percent; a machine is busy while
    a job runs on it — is above (or below) `percent`."""

    kind: Literal["pool_utilisation"] = "pool_utilisation"
    pool: PoolName
    percent: float = Field(ge=0, le=100)
    direction: Literal["above", "below"]


class IdleWhen(_Strict):
    """A machine has been idle (GPU under 5 %, no job, no SSH session) longer than `minutes`."""

    kind: Literal["idle"] = "idle"
    minutes: Minutes


SPEND_WINDOW = re.compile(r"^([1-9][0-9]{0,3})([mhd])$")
_WINDOW_S = {"m": 60, "h": 3600, "d": 86400}
MAX_SPEND_WINDOW_S = 31 * 86400


def window_seconds(window: str) -> int:
    m = SPEND_WINDOW.match(window)
    if m is None:
        raise ValueError("window must be a number and a unit m, h or d (e.g. 30m, 1h, 24h, 7d)")
    return int(m.group(1)) * _WINDOW_S[m.group(2)]


class SpendWhen(_Strict):
    """The project's spend (the ledger) over the last `window` is over `usd`."""

    kind: Literal["spend"] = "spend"
    # The pattern is shown in the schema (clients, the fuzz) but checked by `_window`, whose message
    # says what a window is where pydantic's would quote the regex.
    window: str = Field(description="e.g. 30m, 1h, 24h, 7d (at most 31d)", examples=["1h"],
                        json_schema_extra={"pattern": SPEND_WINDOW.pattern})
    usd: float = Field(gt=0, le=10_000_000)

    @field_validator("window")
    @classmethod
    def _window(cls, v: str) -> str:
        if window_seconds(v) > MAX_SPEND_WINDOW_S:
            raise ValueError("window may be at most 31d")
        return v


class CronWhen(_Strict):
    """Every time the cron expression fires (the Schedule runs on it): always true when it runs."""

    kind: Literal["cron"] = "cron"
    expression: str = Field(min_length=1, max_length=200, examples=["0 * * * *"])

    @field_validator("expression")
    @classmethod
    def _cron(cls, v: str) -> str:
        return check_cron(v)


When = Annotated[QueueWaitWhen | QueueDepthWhen | PoolUtilisationWhen | IdleWhen | SpendWhen | CronWhen,
                 Field(discriminator="kind")]


# --------------------------------------------------------------------------- Then


class ScalePoolThen(_Strict):
    """Set the pool's size `to` a number, or change it `by` one (exactly one of the two)."""

    kind: Literal["scale_pool"] = "scale_pool"
    pool: PoolName
    to: int | None = Field(default=None, ge=0, le=10_000)
    by: int | None = Field(default=None, ge=-10_000, le=10_000)

    @model_validator(mode="after")
    def _one(self) -> ScalePoolThen:
        if (self.to is None) == (self.by is None):
            raise ValueError("give exactly one of `to` (a size) or `by` (a change)")
        if self.by == 0:
            raise ValueError("`by` must not be 0")
        return self


class TerminateIdleThen(_Strict):
    """Terminate the project's job machines idle longer than `minutes` (idle: measured by the watch,
    activities/idle.py) — and its machines allocated by hand only with `include_manual` (the
    project's opt-in). A pool's machines are left to their pool: it keeps its size (and would
    replace them); shrink it with `scale_pool`."""

    kind: Literal["terminate_idle"] = "terminate_idle"
    minutes: Minutes
    include_manual: bool = Field(default=False, description="also machines allocated by hand")


class PauseQueueThen(_Strict):
    """Stop admitting the project's queued jobs of the group `type` (they keep their place; resumed
    with POST /api/compute/queue/resume)."""

    kind: Literal["pause_queue"] = "pause_queue"
    type: QueueGroup


class WebhookThen(_Strict):
    """POST a JSON body naming the policy and the facts to `url` (which must lie under a prefix of
    GPUPROV_WEBHOOK_ALLOWLIST; checked by the API when saved and again before each call)."""

    kind: Literal["webhook"] = "webhook"
    url: str = Field(min_length=1, max_length=2000)


Then = Annotated[ScalePoolThen | TerminateIdleThen | PauseQueueThen | WebhookThen,
                 Field(discriminator="kind")]


class PolicySpec(_Strict):
    """What a policy is: the card minus its name and switch."""

    when: When
    then: Then
    max_spend_per_hour: float | None = Field(default=None, gt=0, le=10_000_000,
                                             description="$/hr: an action that would take the project's "
                                                         "running cost over this does not run")
    cooldown_minutes: int | None = Field(default=None, ge=1, le=30 * 24 * 60,
                                         description="after acting, the policy does not act again for "
                                                     "this long")


# --------------------------------------------------------------------------- PolicyWorkflow


class PolicyInput(BaseModel):
    """One evaluation of a stored policy (the Schedule's input): ids only; the card is read from the
    database by the facts activity, so an edit applies from the next run."""

    policy_id: str
    project: str


class Facts(BaseModel):
    """What the When needs, measured now. A condition whose inputs do not exist yet says so in
    `not_evaluated` instead of pretending to a true or false."""

    spend_usd: float | None = None  # spend: the project's spend over the When's window
    oldest_wait_minutes: float | None = None  # queue_wait: the group's oldest waiting job's wait (0: none)
    queued: int | None = None  # queue_wait, queue_depth: how many jobs of the group wait
    utilisation_percent: float | None = None  # pool_utilisation: busy / ready machines, %
    idle_machines: list[str] | None = None  # idle: allocations idle longer than the When's minutes
    not_evaluated: str | None = None


class PolicyFacts(BaseModel):
    """One run's view of the policy and the world: the card as stored (a webhook's URL without its
    query), its cooldown state, the project's running cost, and the When's facts."""

    policy_id: str
    project: str
    exists: bool = True  # False: deleted since the Schedule fired (the run does nothing)
    enabled: bool = True
    name: str = ""
    spec: PolicySpec | None = None
    last_triggered_at: str | None = None  # ISO 8601 UTC: when it last acted
    spend_rate_per_hour: float = 0.0  # $/hr of the project's machines running now (the ledger)
    added_cost_per_hour: float | None = 0.0  # $/hr the Then would add (None: not known yet)
    # scale_pool: the pool's size when measured. `by` counts from it, so a retried action (a worker
    # lost after saving the new size) sets the same size again instead of adding twice.
    pool_size: int | None = None
    facts: Facts = Field(default_factory=Facts)
    measured_at: str = ""


class Decision(BaseModel):
    """What the pure evaluation decided: act, or not and why (the reason is recorded either way)."""

    act: bool
    reason: str


class ActInput(BaseModel):
    policy_id: str
    project: str
    facts: PolicyFacts
    reason: str  # why it acts (the When's reading): the webhook body carries it


class ActResult(BaseModel):
    ran: bool = True  # False: it changed nothing (needs pools; the queue was already paused): no trigger
    ok: bool
    result: str  # shown as the card's last result (a webhook's status, "not run: ...")


class RecordPolicyRun(BaseModel):
    policy_id: str
    run_id: str  # the workflow run: recording it twice (a retry) counts once
    acted: bool
    result: str
    at: str  # ISO 8601 UTC


class PolicyRunOutcome(BaseModel):
    acted: bool
    result: str

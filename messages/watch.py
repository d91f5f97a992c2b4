"""The watch: one long-lived poller per connection (workflows/watch.py)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class WatchRequest(BaseModel):
    connection_id: str
    interval_s: float = Field(default=60.0, gt=0)  # between two listings of the connection's machines
    rounds_per_run: int = Field(default=500, ge=1)  # then continue-as-new: the history stays small


class WatchInput(BaseModel):
    connection_id: str


class WatchReport(BaseModel):
    """One round: which allocations were told their machine is lost, and why; which are idle."""

    connection_found: bool = True  # False: the connection is gone; the watch ends
    lost: dict[str, str] = Field(default_factory=dict)  # allocation id -> reason
    idle: list[str] = Field(default_factory=list)  # allocations sampled idle this round (activities/idle.py)
    # allocation id -> twins under its key terminated and seen gone this round (after an in-doubt create)
    twins: dict[str, list[str]] = Field(default_factory=dict)

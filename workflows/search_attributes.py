"""Custom search attributes (all Keyword), so operators can filter in the Temporal Web UI.

Must be registered on the server before a workflow upserts them: the dev server via
`dev_server_args()`, tests via `ALL` passed to WorkflowEnvironment.start_local.
"""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

PROVIDER = SearchAttributeKey.for_keyword("GpuprovProvider")
PROJECT = SearchAttributeKey.for_keyword("GpuprovProject")
INSTANCE_ID = SearchAttributeKey.for_keyword("GpuprovInstanceId")
PHASE = SearchAttributeKey.for_keyword("GpuprovPhase")

ALL: list[SearchAttributeKey[str]] = [PROVIDER, PROJECT, INSTANCE_ID, PHASE]


def dev_server_args() -> list[str]:
    """`temporal server start-dev` arguments registering every attribute."""
    args: list[str] = []
    for key in ALL:
        args += ["--search-attribute", f"{key.name}=Keyword"]
    return args

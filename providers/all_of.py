"""`all_of`: several cloud calls at once, every one finished before the adapter goes on.

asyncio.gather's default raises at the first failure and leaves the other calls running; the
adapter then returns (or its client closes under them), so which of them reached the cloud depends
on timing. That is wrong for a cloud's bill (a call still in flight after its caller gave up) and
for the suite, which pins the remote calls each conformance check makes
(tests/conformance/remote_calls.py): a wrong key on AWS's offers read sometimes missed
DescribeInstanceTypeOfferings. Here every call finishes, then the first failure in argument order
is raised.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any


async def all_of(*calls: Awaitable[Any]) -> list[Any]:
    """Each call's result, in order, once all have finished; else the first failure, in order."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results

"""How often a booting machine is polled (activities/cloud.py, WAIT_RUNNING): the request's poll
interval first, growing to a 60th of the cloud's broken-boot bound — so a thousand machines booting
for minutes cost a poll each per 20 s on Lambda, while a container cloud is still polled every 2 s."""

from __future__ import annotations

import itertools

from activities.cloud import boot_polls
from providers import registry


def pauses(first_s: float, cloud: str, n: int) -> list[float]:
    polls = boot_polls(first_s, registry.capabilities(cloud).boot_timeout_s)
    return [round(p, 3) for p in itertools.islice(polls, n)]


def test_a_boot_is_polled_often_first_then_at_the_clouds_ceiling() -> None:
    lam = pauses(2.0, "lambda", 12)  # boots of minutes: 20 min is broken there
    assert lam[:4] == [2.0, 3.0, 4.5, 6.75]
    assert lam[-1] == 20.0 and max(lam) == 20.0 and lam == sorted(lam)
    assert sum(1 for _ in itertools.takewhile(lambda p: p < 20.0, lam)) == 6  # 20 s after ~33 s of boot
    assert set(pauses(2.0, "docker", 5)) == {2.0}  # a container's boot (120 s bound): never slower than asked
    assert pauses(0.2, "local", 3) == [0.2, 0.3, 0.45]  # the bench's and tests' short polls grow the same way

"""How often a booting machine is polled (activities/cloud.py, WAIT_RUNNING): the request's poll
interval for a first stretch, then growing to a 60th of the cloud's broken-boot bound — so a
thousand machines booting for minutes cost a poll each per 20 s on Lambda, while a container cloud
is still polled every 2 s."""

from __future__ import annotations

import itertools

from activities.cloud import boot_polls
from providers import registry


def pauses(first_s: float, cloud: str, n: int) -> list[float]:
    polls = boot_polls(first_s, registry.capabilities(cloud).boot_timeout_s)
    return [round(p, 3) for p in itertools.islice(polls, n)]


def test_a_boot_is_polled_at_the_asked_interval_first_then_up_to_the_clouds_ceiling() -> None:
    lam = pauses(2.0, "lambda", 20)  # boots of minutes: 20 min is broken there, so a 20 s ceiling
    assert lam[:10] == [2.0] * 10  # the first 20 s as asked: a fast boot is seen at once
    assert lam[10:15] == [3.0, 4.5, 6.75, 10.125, 15.188]
    assert lam[15:] == [20.0] * 5 and max(lam) == 20.0
    assert sum(lam[:16]) < 80  # polling every 20 s within 80 s of boot: 16 polls, not 40
    assert set(pauses(2.0, "docker", 20)) == {2.0}  # a container's boot (120 s bound): as asked throughout
    short = pauses(0.2, "local", 30)  # the bench's and tests' short polls: 5 s of them, then slower
    assert short[:25] == [0.2] * 25 and short[25:27] == [0.3, 0.45]

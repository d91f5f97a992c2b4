"""The sweep's pure parts: the allocation id in a key, and how a machine is judged."""

from __future__ import annotations

import pytest

from activities.sweep import judge
from messages.ids import allocation_of_key, attempt_key
from messages.sweep import Verdict
from providers.base import InstanceRef
from store.models import Instance


@pytest.mark.parametrize("allocation_id", ["k3x9q2m1ab", "al-0f3c2b1a", "x-a5", "a", "a" * 50])
@pytest.mark.parametrize("seq", [1, 2, 17])
def test_allocation_of_key_inverts_attempt_key(allocation_id: str, seq: int) -> None:
    assert allocation_of_key(attempt_key(allocation_id, seq)) == allocation_id


@pytest.mark.parametrize("key", ["conf-0123abcd", "gp--a1", "gp-abc", "gp-abc-a", "gp-abc-ax", "GP-abc-a1",
                                 "gp-Abc-a1", "xgp-abc-a1", "gp-abc-a1-", ""])
def test_allocation_of_key_refuses_other_keys(key: str) -> None:
    assert allocation_of_key(key) is None


def ref(instance_id: str = "m1", key: str = "gp-alloc1-a2", provider: str = "local",
        kind: str = "machine") -> InstanceRef:
    return InstanceRef(provider=provider, instance_id=instance_id, key=key, kind=kind)


def row(status: str, key: str | None = "gp-alloc1-a2", cloud_instance_id: str | None = "m1",
        provider: str = "local") -> Instance:
    return Instance(id="alloc1", provider=provider, connection_id="c", workflow_id="w", status=status,
                    key=key, cloud_instance_id=cloud_instance_id)


@pytest.mark.parametrize(("machine", "allocation", "record", "verdict", "says"), [
    # no allocation, or one that is over: orphans
    (ref(key="conf-1"), None, None, Verdict.ORPHAN, "names no allocation"),
    (ref(), "alloc1", None, Verdict.ORPHAN, "unknown to the database"),
    (ref(), "alloc1", row("failed"), Verdict.ORPHAN, "is failed"),
    (ref(), "alloc1", row("terminated"), Verdict.ORPHAN, "is terminated"),
    (ref(), "alloc1", row("lost"), Verdict.ORPHAN, "is lost"),
    # live and its machine: kept (recorded, or its latest attempt's create not yet recorded)
    (ref(), "alloc1", row("ready"), Verdict.KEEP, "records"),
    (ref(), "alloc1", row("terminating"), Verdict.KEEP, "records"),
    (ref(), "alloc1", row("provisioning", cloud_instance_id=None), Verdict.KEEP, "not yet recorded"),
    # live, another machine: duplicates
    (ref("m2"), "alloc1", row("ready"), Verdict.DUPLICATE, "machine m1, not this one"),
    (ref(key="gp-alloc1-a1"), "alloc1", row("provisioning", cloud_instance_id=None), Verdict.DUPLICATE,
     "on attempt key gp-alloc1-a2"),
    (ref("m1", provider="lambda"), "alloc1", row("ready"), Verdict.DUPLICATE, "not this one"),
    # side resources: kept while the allocation is live on their key, else orphans
    (ref("sg-1", kind="security-group"), "alloc1", row("ready"), Verdict.KEEP, "a security-group of"),
    (ref("sg-1", kind="security-group"), "alloc1", row("provisioning", cloud_instance_id=None),
     Verdict.KEEP, "latest attempt"),
    (ref("sg-1", key="gp-alloc1-a1", kind="security-group"), "alloc1", row("ready"), Verdict.ORPHAN,
     "of attempt key gp-alloc1-a1"),
    (ref("sg-1", kind="security-group"), "alloc1", row("terminated"), Verdict.ORPHAN, "is terminated"),
    (ref("sg-1", key="conf-1", kind="nic"), None, None, Verdict.ORPHAN, "names no allocation"),
])
def test_judge(machine: InstanceRef, allocation: str | None, record: Instance | None, verdict: Verdict,
               says: str) -> None:
    got, reason = judge(machine, allocation, record)
    assert got == verdict and says in reason, reason

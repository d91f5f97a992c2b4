"""EC2 Spot interruptions as the AWS adapter reads them (providers/aws.py): `preempted` and the
two-minute `notice`, from what DescribeInstances and DescribeSpotInstanceRequests answer.

- Interrupted: a spot instance (`InstanceLifecycle: spot`) EC2 terminated (or stopped) to take its
  capacity back carries StateReason `Server.SpotInstanceTermination` (`Server.SpotInstanceShutdown`
  when stopped) — EC2 API Reference, StateReason; "Find interrupted Spot Instances" (user guide).
- The notice: "the status is immediately set to `instance-terminated-no-capacity` (it is not set to
  `marked-for-termination`). However, the instance remains in the `running` state for 2 minutes"
  (awsdocs/amazon-ec2-user-guide, spot-request-status.md); a price interruption, or a stop/hibernate
  behaviour, shows `marked-for-termination` / `marked-for-stop` / `marked-for-hibernation` first. So
  a running spot instance whose request's status code is one of NOTICE_CODES is under notice. The
  instance metadata's `spot/instance-action` and EventBridge's warning say the same, but neither is
  reachable through the EC2 API.

The lookup is one DescribeSpotInstanceRequests per region, only when a spot instance of ours runs,
and best effort: a refusal (a policy without ec2:DescribeSpotInstanceRequests) means no notice is
seen, never a failed `get`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from providers.base import InstanceState, InstanceStatus, ProviderError

log = logging.getLogger(__name__)

INTERRUPTED = ("Server.SpotInstanceTermination", "Server.SpotInstanceShutdown")
NOTICE_CODES = frozenset({
    "marked-for-termination", "marked-for-stop", "marked-for-hibernation",
    "instance-terminated-no-capacity", "instance-terminated-by-price",
    "instance-terminated-capacity-oversubscribed", "instance-terminated-launch-group-constraint",
})
Ec2 = Callable[..., Awaitable[Any]]  # the adapter's `_ec2(region, method, **params)`


def is_spot(inst: dict[str, Any]) -> bool:
    return inst.get("InstanceLifecycle") == "spot"


def interrupted(inst: dict[str, Any]) -> bool:
    """EC2 reclaimed this spot instance (its StateReason says so)."""
    return is_spot(inst) and str((inst.get("StateReason") or {}).get("Code") or "") in INTERRUPTED


def _running_requests(instances: list[dict[str, Any]]) -> dict[str, str]:
    """Spot request id -> instance id, for the running (or booting) spot instances among `instances`."""
    return {str(i["SpotInstanceRequestId"]): str(i["InstanceId"]) for i in instances
            if is_spot(i) and i.get("SpotInstanceRequestId")
            and (i.get("State") or {}).get("Name") in ("pending", "running")}


async def notice_codes(ec2: Ec2, region: str, instances: list[dict[str, Any]]) -> dict[str, str]:
    """Instance id -> its Spot request's status code, for the running spot instances of `region`
    among `instances` (one call; none when no spot instance runs). {} when the call is refused."""
    wanted = _running_requests(instances)
    if not wanted:
        return {}
    try:
        resp = await ec2(region, "describe_spot_instance_requests", SpotInstanceRequestIds=sorted(wanted))
    except ProviderError as e:
        log.info("aws: no spot request status in %s (%s): interruption notices are not seen", region, e)
        return {}
    return {str(r.get("InstanceId") or wanted.get(str(r.get("SpotInstanceRequestId")), "")):
            str((r.get("Status") or {}).get("Code") or "") for r in resp.get("SpotInstanceRequests") or []}


def with_spot(st: InstanceStatus, inst: dict[str, Any], codes: dict[str, str]) -> InstanceStatus:
    """`st` with what EC2 says of the instance as a spot one: reclaimed (preempted), or under notice."""
    if interrupted(inst):
        reason = (inst.get("StateReason") or {}).get("Code")
        return st.model_copy(update={"preempted": True, "detail": f"{st.detail}: {reason}"})
    code = codes.get(str(inst.get("InstanceId")))
    if code in NOTICE_CODES and st.state in (InstanceState.RUNNING, InstanceState.PENDING):
        return st.model_copy(update={"notice": True, "detail": f"{st.detail}; spot request {code}"})
    return st

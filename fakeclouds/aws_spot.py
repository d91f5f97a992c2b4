"""EC2 Spot in the simulated AWS account (`aws_sim.py`): the Spot Instance request a spot launch
makes, DescribeSpotInstanceRequests, and an interruption as EC2 shows it (the engine's preemption,
fakeclouds/preemption.py: `admin.preempt(instance_id, notice_s=120)`).

What EC2 does, and so this:
- A RunInstances with `InstanceMarketOptions.MarketType=spot` makes a one-time Spot Instance request
  for each instance: the instance carries `InstanceLifecycle: spot` (moto) and `SpotInstanceRequestId`,
  the request is `active` / `fulfilled` while the instance runs.
- An interruption by capacity of an instance whose behaviour is `terminate` (gpuprov's): the
  request's status is *at once* `instance-terminated-no-capacity` (state `closed`) while the instance
  stays `running` for the two-minute notice, then it is `terminated` — "When Amazon EC2 interrupts a
  Spot Instance if it needs the capacity back *and* the instance is configured to *terminate* on
  interruption, the status is immediately set to `instance-terminated-no-capacity` (it is not set to
  `marked-for-termination`). However, the instance remains in the `running` state for 2 minutes to
  reflect the 2-minute period when the instance receives the Spot Instance interruption notice."
  (awsdocs/amazon-ec2-user-guide doc_source/spot-request-status.md, "Fulfilled-terminal", note †).
- The terminated instance's StateReason is `Server.SpotInstanceTermination` ("The instance was
  terminated because the number of Spot requests with a maximum price equal to or higher than the
  Spot price exceeded available capacity or because of an increase in the Spot price": EC2 API
  Reference, StateReason). Billing stops with it (the engine's reclaim).
- A user's terminate: `instance-terminated-by-user`, `closed`.
[unconfirmed]: the status messages' wording and the StateTransitionReason text ("Service initiated
(...)"). Not modelled: persistent requests, RequestSpotInstances, price interruptions
(`marked-for-termination`, `instance-terminated-by-price`: gpuprov sets no maximum price), stop and
hibernate behaviours, `Filters` on DescribeSpotInstanceRequests, rebalance recommendations.
"""

from __future__ import annotations

import datetime as dt
import secrets
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any

from fakeclouds import aws_xml, preemption
from fakeclouds.aws_requests import Call, Ec2Error
from fakeclouds.engine import ERROR, PENDING, RUNNING, Engine

INTERRUPTED = "Server.SpotInstanceTermination"
_STATUS = {  # (request state, status code, message) by what became of the instance
    "fulfilled": ("active", "fulfilled", "Your spot request is fulfilled."),
    "no-capacity": ("closed", "instance-terminated-no-capacity",
                    "Spot Instance terminated due to no available capacity."),
    "by-user": ("closed", "instance-terminated-by-user",
                "Spot Instance terminated due to user-initiated termination."),
}


@dataclass
class SpotRequest:
    id: str
    instance_id: str
    zone: str
    instance_type: str
    price: float
    created_at: float


def _stamp(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


class SpotRequests:
    """The account's Spot Instance requests (kept in memory, like moto's EC2 state)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.by_id: dict[str, SpotRequest] = {}
        self.of_instance: dict[str, str] = {}

    def add(self, instance_id: str, zone: str, instance_type: str, price: float) -> str:
        sir = f"sir-{secrets.token_hex(4)}"
        self.by_id[sir] = SpotRequest(sir, instance_id, zone, instance_type, price, time.time())
        self.of_instance[instance_id] = sir
        return sir

    def status(self, req: SpotRequest) -> tuple[str, str, str]:
        m = self.engine.machines.get(req.instance_id)
        if m is None:
            return _STATUS["by-user"]
        if preemption.noticed(m) or preemption.reclaimed(m):
            return _STATUS["no-capacity"]
        if m.status in (PENDING, RUNNING, ERROR):
            return _STATUS["fulfilled"]
        return _STATUS["by-user"]  # shutting down or terminated by the account's own terminate

    def show(self, inst: Any) -> None:
        """An instance (moto's) as EC2 shows a spot one: its request id, and once interrupted, why."""
        sir = self.of_instance.get(inst.id)
        if sir is None:
            return
        inst.spot_instance_request_id = sir
        m = self.engine.machines.get(inst.id)
        if m is not None and preemption.reclaimed(m):
            from moto.ec2.models.instances import StateReason

            inst.state_reason = StateReason(f"{INTERRUPTED}: Spot instance termination", INTERRUPTED)
            gone = dt.datetime.fromtimestamp(m.ended_at or time.time(), dt.UTC)
            inst._reason = f"Service initiated ({gone:%Y-%m-%d %H:%M:%S} GMT)"

    def describe(self, call: Call) -> tuple[int, bytes]:
        """DescribeSpotInstanceRequests: by `SpotInstanceRequestId.N`, or every request of the region."""
        ids = call.numbered("SpotInstanceRequestId")
        for sir in ids:
            if sir not in self.by_id:
                raise Ec2Error(400, "InvalidSpotInstanceRequestID.NotFound",
                               f"The spot instance request ID '{sir}' does not exist")
        if call.filters():
            raise Ec2Error(400, "InvalidParameterValue", "The simulation takes no Filters here")
        chosen = [self.by_id[s] for s in ids] if ids else \
            [r for r in self.by_id.values() if r.zone.startswith(call.region)]
        root = ET.Element("DescribeSpotInstanceRequestsResponse")
        ET.SubElement(root, "requestId").text = aws_xml.request_id()
        items = ET.SubElement(root, "spotInstanceRequestSet")
        for req in chosen:
            state, code, message = self.status(req)
            item = ET.SubElement(items, "item")
            for tag, text in (("spotInstanceRequestId", req.id), ("spotPrice", f"{req.price:.6f}"),
                              ("type", "one-time"), ("state", state)):
                ET.SubElement(item, tag).text = text
            status = ET.SubElement(item, "status")
            for tag, text in (("code", code), ("updateTime", _stamp(time.time())), ("message", message)):
                ET.SubElement(status, tag).text = text
            spec = ET.SubElement(item, "launchSpecification")
            ET.SubElement(spec, "instanceType").text = req.instance_type
            ET.SubElement(ET.SubElement(spec, "placement"), "availabilityZone").text = req.zone
            for tag, text in (("instanceId", req.instance_id), ("createTime", _stamp(req.created_at)),
                              ("productDescription", "Linux/UNIX"), ("launchedAvailabilityZone", req.zone),
                              ("instanceInterruptionBehavior", "terminate")):
                ET.SubElement(item, tag).text = text
        root.set("xmlns", aws_xml.EC2_NS)
        return 200, b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8")

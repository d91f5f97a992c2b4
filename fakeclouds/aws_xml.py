"""The XML of the EC2 and STS Query APIs: error bodies as AWS sends them, and the few answers the
simulated AWS writes or rewrites itself (moto writes the rest)."""

from __future__ import annotations

import datetime as dt
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from xml.sax.saxutils import escape

EC2_NS = "http://ec2.amazonaws.com/doc/2016-11-15/"
STS_NS = "https://sts.amazonaws.com/doc/2011-06-15/"


def request_id() -> str:
    return str(uuid.uuid4())


def ec2_error(code: str, message: str) -> bytes:
    """EC2's error body (botocore reads Response/Errors/Error/{Code,Message})."""
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{escape(code)}</Code>'
            f"<Message>{escape(message)}</Message></Error></Errors><RequestID>{request_id()}</RequestID>"
            "</Response>").encode()


def sts_error(code: str, message: str, sender: bool = True) -> bytes:
    return (f'<ErrorResponse xmlns="{STS_NS}"><Error><Type>{"Sender" if sender else "Receiver"}</Type>'
            f"<Code>{escape(code)}</Code><Message>{escape(message)}</Message></Error>"
            f"<RequestId>{request_id()}</RequestId></ErrorResponse>").encode()


def _strip(root: ET.Element) -> ET.Element:
    for el in root.iter():
        if el.tag.startswith("{"):
            el.tag = el.tag.split("}", 1)[1]
    return root


def _dump(root: ET.Element, ns: str = EC2_NS) -> bytes:
    root.set("xmlns", ns)
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8")


def parse(body: bytes) -> ET.Element:
    return _strip(ET.fromstring(body))


def instance_ids(body: bytes) -> list[str]:
    """Instance ids in a RunInstances or DescribeInstances answer, in order."""
    return [el.text or "" for el in parse(body).iter("instanceId")]


def keep_instances(body: bytes, keep: Callable[[str], bool]) -> bytes:
    """A DescribeInstances answer without the instances `keep` refuses (and reservations left empty)."""
    root = parse(body)
    rset = root.find("reservationSet")
    for res in list(rset if rset is not None else []):
        iset = res.find("instancesSet")
        for item in list(iset if iset is not None else []):
            if not keep(item.findtext("instanceId") or ""):
                iset.remove(item)  # type: ignore[union-attr]
        if iset is None or len(iset) == 0:
            rset.remove(res)  # type: ignore[union-attr]
    return _dump(root)


def as_run_instances(describe_body: bytes) -> bytes:
    """A RunInstances answer (one reservation) from a DescribeInstances answer of its instances."""
    src = parse(describe_body)
    res = src.find("reservationSet/item")
    out = ET.Element("RunInstancesResponse")
    ET.SubElement(out, "requestId").text = request_id()
    for child in list(res if res is not None else []):
        out.append(child)
    return _dump(out)


def terminated_stays_terminated(body: bytes) -> bytes:
    """A TerminateInstances answer where an instance already terminated is still `terminated`
    (moto says `shutting-down` again)."""
    root = parse(body)
    for item in root.iter("item"):
        if item.findtext("previousState/name") == "terminated":
            current = item.find("currentState")
            if current is not None:
                for tag, value in (("code", "48"), ("name", "terminated")):
                    el = current.find(tag)
                    if el is not None:
                        el.text = value
    return _dump(root)


def _response(name: str, items_tag: str, items: Iterable[dict[str, str]]) -> bytes:
    root = ET.Element(name)
    ET.SubElement(root, "requestId").text = request_id()
    items_el = ET.SubElement(root, items_tag)
    for row in items:
        item = ET.SubElement(items_el, "item")
        for key, value in row.items():
            ET.SubElement(item, key).text = value
    return _dump(root)


def instance_type_offerings(rows: Iterable[tuple[str, str, str]]) -> bytes:
    """(instance type, location type, location) rows."""
    return _response("DescribeInstanceTypeOfferingsResponse", "instanceTypeOfferingSet",
                     ({"instanceType": t, "locationType": lt, "location": loc} for t, lt, loc in rows))


def spot_price_history(rows: Iterable[tuple[str, str, float]], at: dt.datetime) -> bytes:
    """(instance type, availability zone, USD/hour) rows, all as of `at`."""
    stamp = at.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    return _response("DescribeSpotPriceHistoryResponse", "spotPriceHistorySet", (
        {"availabilityZone": zone, "instanceType": t, "productDescription": "Linux/UNIX",
         "spotPrice": f"{price:.6f}", "timestamp": stamp} for t, zone, price in rows))

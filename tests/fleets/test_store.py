"""Only a fleet's latest probe records answers: an older one finishing late changes nothing."""

from __future__ import annotations

import sqlalchemy as sa
from cryptography.fernet import Fernet
from sqlmodel import Session

from messages.fleet import HostProbe
from store import fleets, ids
from store.secrets import SecretBox


def test_an_older_probe_never_overwrites_the_latest(engine: sa.Engine) -> None:
    box = SecretBox(Fernet.generate_key())
    with Session(engine) as s:
        kw = dict(fleet_id="f1", project="default", name="rack", user="ubuntu", port=22, hosts=["10.0.0.1"],
                  bastion=None, new_host_id=ids.new_id)
        fleets.save_fleet(s, box, private_key="k", probe_id="p1", **kw)  # type: ignore[arg-type]
        fleets.save_fleet(s, box, private_key=None, probe_id="p2", **kw)  # type: ignore[arg-type]
        [host] = fleets.hosts_of(s, "f1")
        latest = HostProbe(host_id=host.id, reachable=True, gpu_count=1, gpu_summary="1× A10 (22GB)")
        assert fleets.record_probe(s, latest, "p2")
        stale = HostProbe(host_id=host.id, reachable=False, reason="timed out")
        assert not fleets.record_probe(s, stale, "p1")
        [host] = fleets.hosts_of(s, "f1")
        assert host.reachable is True and host.gpu_summary == "1× A10 (22GB)" and host.reason is None
